#include "pagedkv/tiers/disk_tier.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstring>
#include <filesystem>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/aligned_buffer.h"

namespace pagedkv {

AlignedBuffer::AlignedBuffer(size_t bytes, size_t alignment, bool zero) : size_(bytes) {
  const size_t rounded = std::max<size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (zero) std::memset(p, 0, rounded);
  data_.reset(static_cast<std::byte*>(p));
}

struct DiskTier::Backend {
  io_uring ring{};
  bool uring = false;
  ~Backend() {
    if (uring) io_uring_queue_exit(&ring);
  }
};

namespace {

int64_t positioned_io(int fd, const DiskIoRequest& r) {
  size_t done = 0;
  while (done < r.bytes) {
    const ssize_t n = r.write ? ::pwrite(fd, r.buffer + done, r.bytes - done, static_cast<off_t>(r.offset + done))
                              : ::pread(fd, r.buffer + done, r.bytes - done, static_cast<off_t>(r.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return done > 0 ? static_cast<int64_t>(done) : -errno;
    }
    if (n == 0) break;  // end of file: a short read
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

}  // namespace

DiskTier::DiskTier(DiskTierOptions options)
    : options_(std::move(options)),
      write_breaker_(options_.write_retry_initial, options_.write_retry_max),
      backend_(std::make_unique<Backend>()) {
  options_.spec.validate();
  if (options_.num_layers <= 0)
    throw ConfigError(fmt::format("disk tier: num_layers must be positive, got {}", options_.num_layers));
  if (options_.queue_depth <= 0)
    throw ConfigError(fmt::format("disk tier: queue depth must be positive, got {}", options_.queue_depth));
  header_bytes_ = disk_header_bytes(options_.spec.block_size);
  payload_bytes_ = options_.spec.bytes_per_block_per_layer() * static_cast<size_t>(options_.num_layers);
  slot_bytes_ = header_bytes_ + round_up_to(payload_bytes_, kDiskAlignment);
  const size_t num_slots = options_.capacity_bytes / slot_bytes_;
  path_ =
      (std::filesystem::path(options_.dir) / fmt::format("pagedkv-{}.kvslots", options_.fingerprint.hex())).string();
  stats_.io_backend = "none";
  if (num_slots == 0) {
    degrade(
        fmt::format("capacity of {} bytes is smaller than one slot ({} bytes)", options_.capacity_bytes, slot_bytes_),
        true);
    return;
  }
  slots_ = std::make_unique<SlotIndex>(static_cast<int>(std::min<size_t>(num_slots, size_t{1} << 30)),
                                       options_.spec.block_size);
  if (!open_file()) return;
  available_ = true;
  rebuild_index();
}

DiskTier::~DiskTier() {
  backend_.reset();
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
}

void DiskTier::degrade(const std::string& reason, bool reads_too) {
  if (reads_too) available_ = false;
  write_degraded_ = true;
  if (!stats_.degraded) stats_.degraded_reason = reason;
  stats_.degraded = true;
  if (options_.log_degraded && !logged_) {
    logged_ = true;
    fmt::print(stderr, "pagedkv: disk tier {} degraded: {}; {}\n", options_.dir, reason,
               reads_too ? "serving without it" : "no new blocks are written to it");
  }
}

void DiskTier::write_failed(const std::string& reason) {
  if (write_breaker_.on_failure(reason)) {
    if (!stats_.degraded) stats_.degraded_reason = reason;
    stats_.degraded = true;
    if (options_.log_degraded)
      fmt::print(stderr, "pagedkv: disk tier {}: {}; writes paused, retried with back-off\n", options_.dir, reason);
  }
}

void DiskTier::write_succeeded() {
  if (!write_breaker_.on_success()) return;
  if (available_ && !write_degraded_) {
    stats_.degraded = false;
    stats_.degraded_reason.clear();
  }
  if (options_.log_degraded) fmt::print(stderr, "pagedkv: disk tier {}: writes resumed\n", options_.dir);
}

bool DiskTier::open_file() {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec || !std::filesystem::is_directory(options_.dir, ec)) {
    degrade(fmt::format("cannot create the cache directory: {}", ec ? ec.message() : "not a directory"), true);
    return false;
  }
  int flags = O_RDWR | O_CREAT | O_CLOEXEC;
  bool direct = options_.use_o_direct;
  fd_ = ::open(path_.c_str(), flags | (direct ? O_DIRECT : 0), 0644);
  if (fd_ < 0 && direct && errno == EINVAL) {  // the filesystem does not do O_DIRECT (tmpfs)
    direct = false;
    fd_ = ::open(path_.c_str(), flags, 0644);
  }
  if (fd_ < 0) {
    degrade(fmt::format("cannot open {}: {}", path_, std::strerror(errno)), true);
    return false;
  }
  bool locked = ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
  for (int waited = 0; !locked && errno == EWOULDBLOCK && waited < options_.lock_wait_ms; waited += 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    locked = ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
  }
  if (!locked) {
    degrade(fmt::format("{} is in use by another process", path_), true);
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    const uint64_t limit = static_cast<uint64_t>(slots_->num_slots()) * slot_bytes_;
    if (static_cast<uint64_t>(st.st_size) > limit && ::ftruncate(fd_, static_cast<off_t>(limit)) != 0)
      stats_.io_errors++;  // harmless: slots past the capacity are never read
  }
  if (options_.use_io_uring &&
      io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), &backend_->ring, 0) == 0)
    backend_->uring = true;
  stats_.io_backend = std::string(backend_->uring ? "io_uring" : "pread") + (direct ? "+O_DIRECT" : "");
  return true;
}

void DiskTier::execute(std::span<DiskIoRequest> requests) {
  std::vector<size_t> todo;
  todo.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    DiskIoRequest& r = requests[i];
    const int injected = options_.fault_injection ? options_.fault_injection(r) : 0;
    if (injected != 0) r.result = -injected;
    else if (fd_ < 0) r.result = -EBADF;
    else todo.push_back(i);
  }
  if (!backend_->uring) {
    for (size_t i : todo) requests[i].result = positioned_io(fd_, requests[i]);
    return;
  }
  io_uring& ring = backend_->ring;
  const size_t depth = static_cast<size_t>(options_.queue_depth);
  for (size_t first = 0; first < todo.size(); first += depth) {
    const size_t n = std::min(depth, todo.size() - first);
    for (size_t k = 0; k < n; ++k) {
      DiskIoRequest& r = requests[todo[first + k]];
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (r.write) io_uring_prep_write(sqe, fd_, r.buffer, static_cast<unsigned>(r.bytes), r.offset);
      else io_uring_prep_read(sqe, fd_, r.buffer, static_cast<unsigned>(r.bytes), r.offset);
      io_uring_sqe_set_data64(sqe, todo[first + k]);
    }
    int submitted = io_uring_submit_and_wait(&ring, static_cast<unsigned>(n));
    if (submitted < 0) {  // the ring is unusable: finish these synchronously, and stay on pread
      for (size_t k = 0; k < n; ++k) requests[todo[first + k]].result = positioned_io(fd_, requests[todo[first + k]]);
      continue;
    }
    for (size_t seen = 0; seen < n;) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;
      DiskIoRequest& r = requests[io_uring_cqe_get_data64(cqe)];
      r.result = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      ++seen;
      // A short transfer (rare, e.g. interrupted): finish the rest synchronously.
      if (r.result > 0 && static_cast<size_t>(r.result) < r.bytes) {
        DiskIoRequest rest = r;
        rest.offset += static_cast<uint64_t>(r.result);
        rest.buffer += r.result;
        rest.bytes -= static_cast<size_t>(r.result);
        const int64_t more = positioned_io(fd_, rest);
        if (more > 0) r.result += more;
      }
    }
  }
}

void DiskTier::rebuild_index() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return;
  // A partly written last slot counts: its header may be whole and its payload short.
  const int64_t in_file = std::min<int64_t>(
      (st.st_size + static_cast<int64_t>(slot_bytes_) - 1) / static_cast<int64_t>(slot_bytes_), slots_->num_slots());
  struct Found {
    uint64_t sequence;
    int32_t slot;
    StoredBlockKey key;
  };
  std::vector<Found> found;
  constexpr int64_t kBatch = 64;
  std::vector<AlignedBuffer> buffers;
  for (int64_t k = 0; k < kBatch; ++k) buffers.emplace_back(header_bytes_);
  std::vector<DiskIoRequest> reqs;
  for (int64_t first = 0; first < in_file; first += kBatch) {
    const int64_t n = std::min(kBatch, in_file - first);
    reqs.assign(static_cast<size_t>(n), DiskIoRequest{});
    for (int64_t k = 0; k < n; ++k) {
      DiskIoRequest& r = reqs[static_cast<size_t>(k)];
      r.offset = slot_offset(static_cast<int32_t>(first + k));
      r.buffer = buffers[static_cast<size_t>(k)].data();
      r.bytes = header_bytes_;
    }
    execute(reqs);
    for (int64_t k = 0; k < n; ++k) {
      const DiskIoRequest& r = reqs[static_cast<size_t>(k)];
      if (r.result != static_cast<int64_t>(header_bytes_)) {
        if (r.result < 0) ++stats_.io_errors;
        continue;
      }
      DiskSlotHeader h;
      const SlotHeaderStatus s = decode_slot_header(std::span<const std::byte>(r.buffer, r.bytes), options_.fingerprint,
                                                    options_.spec.block_size, payload_bytes_, h);
      if (s == SlotHeaderStatus::kOk) {
        sequence_ = std::max(sequence_, h.sequence);
        if ((h.flags & kSlotFlagPrivate) == 0)
          found.push_back(Found{h.sequence, static_cast<int32_t>(first + k), std::move(h.key)});
      } else if (s == SlotHeaderStatus::kFingerprintMismatch) {
        ++stats_.fingerprint_mismatches;
      } else if (s != SlotHeaderStatus::kEmpty) {
        ++stats_.corrupt_blocks;  // a torn or damaged header: the slot is simply reused
      }
    }
  }
  // Oldest first, so the LRU order is the write order and a duplicate keeps its newest copy.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.sequence < b.sequence; });
  for (const Found& f : found) {
    const BlockContentKey key = f.key.view();
    if (auto old = slots_->find(key)) slots_->uncache(*old);
    else ++stats_.rebuilt_blocks;
    slots_->claim(f.slot);
    slots_->cache(f.slot, key);
    slots_->unpin(f.slot);
  }
}

void DiskTier::invalidate_on_disk(int32_t slot) {
  if (fd_ < 0) return;
  AlignedBuffer zeros(header_bytes_);
  DiskIoRequest r;
  r.write = true;
  r.offset = slot_offset(slot);
  r.buffer = zeros.data();
  r.bytes = header_bytes_;
  if (positioned_io(fd_, r) != static_cast<int64_t>(header_bytes_)) ++stats_.io_errors;
}

void DiskTier::sync() {
  if (fd_ >= 0 && ::fdatasync(fd_) != 0) ++stats_.io_errors;
}

std::optional<int32_t> DiskTier::find(const BlockContentKey& key) const {
  if (!available_) return std::nullopt;
  return slots_->find(key);
}

void DiskTier::check_invariants() const {
  if (slots_) slots_->check_invariants();
}

}  // namespace pagedkv
