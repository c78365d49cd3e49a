#include "pagedkv/model/weight_preload.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace pagedkv {

namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif

struct Range {
  uintptr_t begin, end;  // page-aligned
};

// Every present tensor's bytes, page-rounded, sorted and merged (fused and stacked tensors, or a
// tied output, share memory).
std::vector<Range> tensor_ranges(const TransformerWeights& weights, uintptr_t page) {
  std::vector<Range> ranges;
  weights.for_each_tensor([&](const WeightTensor& t) {
    if (!t.present() || t.rows <= 0 || t.cols <= 0) return;
    const auto begin = reinterpret_cast<uintptr_t>(t.data);
    const uintptr_t end = begin + static_cast<uintptr_t>(t.rows) * tensor_row_bytes(t.type, t.cols);
    ranges.push_back({begin / page * page, (end + page - 1) / page * page});
  });
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (!merged.empty() && r.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, r.end);
    else merged.push_back(r);
  }
  return merged;
}

// Populates [begin, end): one call per chunk; kernels without MADV_POPULATE_READ (EINVAL) get
// one read per page instead. Any other failure leaves the pages to come on first use.
void populate(uintptr_t begin, uintptr_t end, uintptr_t page, std::atomic<bool>& madvise_works) {
  if (madvise_works.load(std::memory_order_relaxed)) {
    if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return;
    if (errno != EINVAL) return;
    madvise_works = false;
  }
  uint8_t sum = 0;
  for (uintptr_t p = begin; p < end; p += page) sum += *reinterpret_cast<const volatile uint8_t*>(p);
  static std::atomic<uint8_t> sink;  // keeps the reads
  sink.fetch_add(sum, std::memory_order_relaxed);
}

}  // namespace

WeightPreloadReport preload_weights(const TransformerWeights& weights, const WeightPreloadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::vector<Range> ranges = tensor_ranges(weights, page);
  WeightPreloadReport report;
  for (const Range& r : ranges) report.bytes += r.end - r.begin;
  if (report.bytes == 0) return report;

  struct sysinfo info {};
  if (::sysinfo(&info) == 0) {
    const double memory = static_cast<double>(info.totalram) * static_cast<double>(info.mem_unit);
    if (static_cast<double>(report.bytes) > options.max_share_of_memory * memory) {
      report.skip_reason =
          fmt::format("the weights ({:.2f} GB) exceed {:.0f} % of this machine's memory ({:.2f} GB)",
                      static_cast<double>(report.bytes) / 1e9, options.max_share_of_memory * 100, memory / 1e9);
      return report;
    }
  }

  // Chunks of 16 MiB, handed out in address order: progress moves evenly, and two threads keep
  // two reads in flight (a disk or a page cache copy at a time is slower than what cores consume).
  constexpr uintptr_t kChunk = uintptr_t{16} << 20;
  std::vector<Range> chunks;
  for (const Range& r : ranges)
    for (uintptr_t b = r.begin; b < r.end; b += kChunk) chunks.push_back({b, std::min(r.end, b + kChunk)});

  std::atomic<size_t> next{0};
  std::atomic<size_t> done_bytes{0};
  std::atomic<int> running{0};
  std::atomic<bool> madvise_works{true};
  auto work = [&] {
    for (size_t i = next++; i < chunks.size(); i = next++) {
      populate(chunks[i].begin, chunks[i].end, page, madvise_works);
      done_bytes += chunks[i].end - chunks[i].begin;
    }
    --running;
  };
  const int threads = std::clamp(options.threads, 1, static_cast<int>(std::max<size_t>(chunks.size(), 1)));
  running = threads;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(work);
  const auto interval = std::chrono::duration<double>(std::max(0.01, options.progress_interval_seconds));
  auto next_report = std::chrono::steady_clock::now() + interval;
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (options.progress && std::chrono::steady_clock::now() >= next_report) {
      options.progress(done_bytes.load(), report.bytes);
      next_report += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    }
  }
  for (std::thread& w : workers) w.join();
  if (options.progress) options.progress(report.bytes, report.bytes);
  report.preloaded = true;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace pagedkv
