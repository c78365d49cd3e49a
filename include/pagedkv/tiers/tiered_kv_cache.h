// TieredKVCache: the device pool's KV blocks extended downwards into a host tier and a disk tier.
//
// Three uses, all driven from the scheduler's thread (the transfer engine moves the bytes):
//
//  Offload of evicted prefixes. The pool's uncache listener fires just before a cached device
//  block is evicted for reuse; if the block was hit at least `offload_min_hits` times, its bytes and content
//  key are copied down to the host tier (to disk when there is no host tier). Host LRU victims
//  are written to disk (demotion). Tiers are inclusive: a block may be cached on several tiers.
//
//  Promotion. Before a waiting request is admitted, prepare_prefix() continues its prefix lookup
//  past the device hits into the host tier and then the disk tier. For the blocks found it
//  allocates device blocks (held by a private manager request while the bytes are in flight,
//  so the manager's own checker accounts for them), loads them, registers them in the device
//  prefix cache and releases them: the ordinary admission lookup then hits them. Host loads are
//  memcpy-fast and awaited at once (the request is admitted in the same step); disk loads are
//  asynchronous and the request is admitted in a later step, while others run.
//
//  Swap preemption. A victim's blocks go to pinned host and disk slots and come back into new
//  device blocks at swap-in: the swap store (swap_store.h) keeps them; this class moves their
//  bytes.
//
//  Remote tier (optional, below disk): a key-value store shared by many engine processes
//  (remote_tier.h). Newly computed blocks are stored there at once (remote_write_through) or when
//  the device evicts them; a lookup that misses above asks it with one probe round trip (the
//  request waits at most remote_probe_wait for the answer, while others run), and the blocks it
//  holds are loaded straight into the promotion's device blocks, asynchronously like disk loads.
//
//  Warm restart. At a clean shutdown every cached device and host block not yet on disk is
//  written down (or as they are computed, with write-through); a new process with the same
//  model, layout and directory rebuilds the disk index from the slot headers.
//
// Invariant (check_invariants): every host and disk slot is in exactly one state (empty, cached,
// pinned) and every pin is owned by exactly one in-flight transfer or swapped-out block.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/host_tier.h"
#include "pagedkv/tiers/remote_store.h"
#include "pagedkv/tiers/remote_tier.h"
#include "pagedkv/tiers/swap_store.h"
#include "pagedkv/tiers/tier_types.h"
#include "pagedkv/tiers/transfer_engine.h"

namespace pagedkv {

struct TierConfig {
  size_t host_cache_bytes = 0;  // host tier for evicted prefixes (0: none)
  std::string disk_cache_dir;  // disk tier directory (empty: none)
  size_t disk_cache_bytes = size_t{1} << 30;
  uint32_t offload_min_hits = 0;  // offload only evicted blocks hit at least this often
  bool flush_on_shutdown = true;  // write cached blocks to disk at a clean shutdown
  bool write_through = false;  // write every newly computed full block to disk at once
  bool use_io_uring = true;
  bool use_o_direct = true;
  bool log_degraded = true;
  bool lazy_swap_copies = false;  // defer swap-out copies of device-cached blocks (swap_store.h)
  std::function<int(const DiskIoRequest&)> disk_fault_injection;  // tests
  // After a failed disk write (a full disk), writes pause this long, doubling while they fail.
  std::chrono::milliseconds disk_write_retry_initial{1000};
  std::chrono::milliseconds disk_write_retry_max{30000};
  // Remote tier: on when remote_store is set (the CLI's --remote-cache makes Redis connections;
  // the tiers themselves depend on no client library).
  RemoteStoreFactory remote_store;
  std::string remote_description;  // the store's address, for messages (no password)
  std::string remote_key_prefix = "pagedkv";
  bool remote_write_through = true;  // store each newly computed full block at once (else at eviction)
  // The cost rule: ask the remote tier only when at least this many of a request's blocks missed
  // above (a load of fewer costs more than their prefill; see docs/tiers.md).
  int remote_min_blocks = 1;
  std::chrono::milliseconds remote_probe_wait{20};  // a request waits at most this for a probe's answer
  size_t remote_max_queued_bytes = size_t{64} << 20;  // stores beyond this backlog are dropped
  bool enabled() const { return host_cache_bytes > 0 || !disk_cache_dir.empty() || static_cast<bool>(remote_store); }
};

class TieredKVCache {
 public:
  // `manager`'s pool and `device` (the arena holding its blocks' bytes) must outlive this object.
  // `model_digest` identifies the model's weights (see kv_layout_fingerprint). `swap_bytes` is
  // added to the host tier for swapped-out requests. Registers the pool's uncache listener.
  // Throws ConfigError for configurations with several KV-cache groups.
  TieredKVCache(TierConfig config, KVCacheManager& manager, KVArena& device, uint64_t model_digest,
                size_t swap_bytes = 0);
  ~TieredKVCache();  // unregisters, waits for transfers, releases held blocks (no flush: see shutdown)
  TieredKVCache(const TieredKVCache&) = delete;
  TieredKVCache& operator=(const TieredKVCache&) = delete;

  // ---- promotion: called before admitting a waiting request --------------------------------
  enum class PrefixState { kReady, kLoading };
  // kReady: admit now (nothing below, loads done, or no room to load yet); kLoading: loads are
  // in flight, try again next step.
  PrefixState prepare_prefix(Request& request);
  // At admission with `hit_tokens` prefix-hit tokens: those tokens by the tier they came from.
  TierHitTokens take_hit_tokens(const Request& request, int hit_tokens);
  // The request finished or was aborted while waiting: waits for its loads, forgets it.
  void cancel_prefix(RequestId id);

  // ---- swap preemption ---------------------------------------------------------------------
  // Copies the victim's blocks down (they may be reused by the pool right after this returns:
  // the copies run before the next forward). With lazy_swap_copies, blocks cached on the device
  // are copied only once the pool drops them (swap_store.h): only reuse through the pool is safe.
  // False, with nothing changed, when there is no room.
  bool swap_out(RequestId id, std::span<const BlockId> blocks);
  using SwapInState = SwapStore::SwapInState;
  // Loads swapped blocks [first_block, first_block + dst.size()) into `dst`; blocks before
  // `first_block` are not needed (found in the device prefix cache) and are released.
  SwapInState start_swap_in(RequestId id, int first_block, std::span<const BlockId> dst);
  // kDone or kFailed once (then the swap is forgotten); kLoading while blocks are in flight.
  SwapInState poll_swap_in(RequestId id);
  void drop_swap(RequestId id);  // finished or aborted while swapped
  bool has_swap(RequestId id) const { return swaps_->contains(id); }
  // Blocks swap_out() could take now.
  int swap_capacity_blocks() const;

  // ---- engine hooks ------------------------------------------------------------------------
  void on_step_begin();  // applies finished transfers; write-through of newly computed blocks
  void before_forward();  // submits pending copies; returns once the device blocks they read are free
  void poll();  // applies finished transfers (never blocks)
  void drain();  // submits pending copies and waits for every transfer to finish
  // A step that had nothing to run while requests wait on loads: blocks until one transfer
  // finishes (instead of spinning through empty steps). False if nothing is in flight.
  bool wait_for_progress();
  void flush_to_disk();  // writes every cached device and host block the disk lacks; waits
  void shutdown();  // flush (if configured), wait for everything, sync the disk file

  // KV events of the host and disk tiers (Medium::kHost / kDisk): blocks that became findable in
  // a tier or stopped being findable there. Off until enabled; drain them with take_events().
  void enable_events();
  std::vector<KVEvent> take_events();
  // A stored event for every block the host and disk tiers hold now (an index's starting point).
  std::vector<KVEvent> cached_blocks() const;

  bool has_host() const { return host_ != nullptr; }
  bool has_disk() const { return disk_ != nullptr; }
  bool has_remote() const { return remote_ != nullptr; }
  const HostTier* host() const { return host_.get(); }
  const DiskTier* disk() const { return disk_.get(); }
  const RemoteTier* remote() const { return remote_.get(); }
  const TransferEngine& transfers() const { return *transfers_; }
  const BlockHash& fingerprint() const { return fingerprint_; }
  const TierConfig& config() const { return config_; }
  uint64_t promotions_started() const { return promotions_started_; }
  uint64_t skipped_low_hits() const { return skipped_low_hits_; }
  std::string describe() const;

  void check_invariants() const;

 private:
  // Where a promotion finds a block below the device (slot -1 for the remote tier).
  struct Location {
    TierKind tier;
    int32_t slot;
  };
  struct Promotion {
    Request holder;  // private manager request holding the device blocks
    int first_block = 0;
    std::vector<TierKind> source;
    int in_flight = 0;
  };
  // A request's question to the remote tier: which of blocks [first, first + hashes.size()) it holds.
  struct RemoteProbe {
    int first = 0;
    std::vector<BlockHash> hashes;
    std::vector<uint8_t> present;
    bool done = false;
    std::chrono::steady_clock::time_point deadline;
  };

  // ---- offload (tiered_offload.cpp) ----
  void on_device_uncache(const KVCacheBlock& b, RemovalReason why);
  void on_device_evict(const KVCacheBlock& b);
  void on_host_evict(int32_t slot);
  bool store_on_disk(TierKind source, int32_t source_block, const BlockContentKey& key, TransferPurpose purpose);
  void write_through();

  // ---- transfers (tiered_kv_cache.cpp) ----
  TransferHandle submit_pending();
  void apply(const TransferBatch& batch);
  void collect_pins(const TransferBatch& b, std::vector<int32_t>& host, std::vector<int32_t>& disk) const;

  // ---- promotion (tiered_promotion.cpp) ----
  // One promoted block's bytes arrived (ok) or failed; collects promotions with none left in flight.
  void promotion_block_done(RequestId owner, int32_t device_block, bool ok, std::vector<RequestId>& finished);
  void finish_promotion(RequestId id);

  // ---- remote tier (tiered_remote.cpp) ----
  void apply_remote(std::vector<RemoteFetchJob> jobs);
  // Continues `found` (the blocks below the device from block `next` on) into the remote tier.
  // False: a probe is in flight and the request should wait.
  bool extend_from_remote(const Request& r, int next, int max_blocks, std::vector<Location>& found);
  void queue_remote_put(TierKind source, int32_t source_block, const BlockContentKey& key);

  TierConfig config_;
  KVCacheManager& manager_;
  KVArena& device_;
  BlockHash fingerprint_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RemoteTier> remote_;
  std::unique_ptr<TransferEngine> transfers_;  // last: destroyed first, while the tiers still exist
  TransferBatch pending_;
  std::vector<TransferHandle> outstanding_;
  std::optional<SwapStore> swaps_;  // made once the tiers whose slots it holds exist
  std::unordered_map<RequestId, Promotion> promotions_;
  std::unordered_map<RequestId, std::vector<std::pair<int, TierKind>>> promoted_blocks_;  // block index -> source
  std::vector<BlockHash> written_through_;  // per device block: hash last written through
  std::vector<BlockHash> remote_written_;  // per device block: hash last stored remotely (write-through)
  std::unordered_map<RequestId, RemoteProbe> remote_probes_;
  uint64_t next_holder_id_ = 0;
  uint64_t promotions_started_ = 0;
  uint64_t skipped_low_hits_ = 0;
};

}  // namespace pagedkv
