// The paged-attention driver: checks the batch, cuts it into tasks, runs them on the thread
// pool and merges split tasks (and, for int8 K/V, quantizes the query rows to int16 codes, once per
// query tile). The arithmetic lives in attention_tile_*.cpp.
//
// Work decomposition. Each request's query tokens are cut into query tiles of up to
// kRowsPerTask / G tokens (G = query heads per KV head); for each KV head, a tile's rows are the
// G query heads of that KV head times the tile's tokens (a decode request: one tile of G rows).
// A task is a tile, a range of its context tokens and a set of KV heads:
//  - decode tiles take all KV heads in one task, so the task reads its pages front to back
//    (each slot holds all heads of a token); prefill tiles, compute-bound, take one head each;
//  - when the batch alone does not give every thread several tasks, long context ranges are
//    split into partitions (flash-decoding) whose partial softmax states are merged afterwards,
//    and short decode batches are also split by KV head.
// Tasks are handed out largest first, from one list with the int8 query codes ahead of them and
// no barrier inside the call (step 5 below).
//
// Cascade attention (decode). Decode requests whose block tables begin with the same physical
// blocks form a cascade group (find_cascade_groups): a prefix task attends the G rows of every
// member to the shared blocks at once, one row group of G x members rows, so each tile of the
// shared prefix is read (and, for 16-bit K/V, converted) once for the group instead of once per
// member; each member's own tile covers only its suffix. Both write partial softmax states, which
// the last of them to finish merges into the member's output exactly as partitions are merged.
// A prefix task of 16-64 rows per KV head is compute-bound: on AVX-512 (and in the scalar twin)
// it runs the kernel with the rows in vector lanes (attention_wide_rows.h), f32/f16/bf16 K/V.
// The scan costs a sort of the decode requests by their first block id; with no first block
// shared it stops there.
#include "pagedkv/kernels/paged_attention.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "attention_tile.h"
#include "attention_wide_rows.h"
#include "pagedkv/core/error.h"
#include "pagedkv/kernels/query_codes.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv {
namespace {

using attention_detail::RowGroupTask;

constexpr int kRowsPerTask = 64;  // query rows (heads x tokens) sharing one pass over K/V
constexpr int kMinPartition = 512;  // shortest context range worth a separate task
constexpr int kTasksPerThread = 8;  // aim for this many tasks per thread before splitting
constexpr int kMinCascadeBlocks = 2;  // shortest shared run of whole blocks that forms a group (and
                                      // PagedAttentionBatch::cascade_min_tokens)
constexpr int kMaxCascadeRows = 64;  // query rows (G x members) of one group's prefix tasks

// A query tile of one request: its tokens attend to context positions [token_begin, token_end).
struct QueryTile {
  int request = 0;
  int first_query = 0;  // row of the flattened query tensor
  int num_queries = 0;
  int first_position = 0;
  int token_begin = 0, token_end = 0;
  int heads_per_task = 1;
  int partitions = 1;  // 0: a cascade member whose whole context is the shared prefix
  int partition_tokens = 0;
  // A cascade member (decode tile): its group, and its place among the group's members.
  int cascade = -1, member = 0;
  // When split(): where the partial results start. Per partition, [heads][rows][dim]
  // accumulators, then [heads][rows] maxima, then [heads][rows] sums.
  size_t partial_offset = 0;
  // int8 K/V: where its query rows' codes ([heads][rows][padded dim]) and scales ([heads][rows])
  // start in the call's buffers; made once per tile, read by all its tasks.
  size_t code_offset = 0, code_scale_offset = 0;

  // Whether the results go through the partial buffers and a merge rather than straight to out.
  bool split() const { return partitions != 1 || cascade >= 0; }
};

// Decode tiles (one query token each) whose requests read the same first prefix_tokens context
// tokens from the same physical blocks. Its prefix tasks split the shared range into partitions
// and the KV heads into groups of heads_per_task, as its members' tiles do.
struct CascadeGroup {
  int first_member = 0, num_members = 0;  // member tiles: cascade_members[first_member, + num_members)
  int prefix_tokens = 0;
  int heads_per_task = 1;
  int partitions = 1, partition_tokens = 0;
  // Partial results, per partition as a split tile's, with rows = members x G (member m's G rows
  // from m x G on).
  size_t partial_offset = 0;
};

struct TaskRef {
  int tile = 0, first_kv_head = 0, num_kv_heads = 1, partition = 0;
  long long cost = 0;  // tokens x rows x heads; larger tasks are scheduled first
  bool prefix = false;  // a cascade group's prefix task: `tile` is the group's index
};

void validate(const AttentionShape& shape, const PagedAttentionBatch& batch, const KVLayerView& kv) {
  if (shape.num_q_heads <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0)
    throw UsageError(
        fmt::format("paged_attention: head counts and head_dim must be positive (q heads {}, kv heads {}, "
                    "head_dim {})",
                    shape.num_q_heads, shape.num_kv_heads, shape.head_dim));
  if (shape.num_q_heads % shape.num_kv_heads != 0)
    throw UsageError(fmt::format("paged_attention: {} query heads is not a multiple of {} KV heads", shape.num_q_heads,
                                 shape.num_kv_heads));
  if (shape.num_kv_heads != kv.num_kv_heads || shape.head_dim != kv.head_dim)
    throw UsageError(fmt::format("paged_attention: shape has {} KV heads of dim {}, the KV layer {} of dim {}",
                                 shape.num_kv_heads, shape.head_dim, kv.num_kv_heads, kv.head_dim));
  if (!is_storage_dtype(kv.dtype))
    throw UsageError(
        fmt::format("paged_attention: KV dtype {} is not fp32, fp16, bf16, int8 or fp8", dtype_name(kv.dtype)));
  if (kv.key == nullptr || kv.value == nullptr || kv.block_size <= 0 || kv.num_blocks <= 0)
    throw UsageError("paged_attention: the KV layer view is empty");
  if (!std::isfinite(shape.scale) || shape.scale <= 0)
    throw UsageError(fmt::format("paged_attention: scale must be positive and finite, got {}", shape.scale));
  if (shape.sliding_window < 0)
    throw UsageError(fmt::format("paged_attention: sliding_window must be >= 0, got {}", shape.sliding_window));
  if (!(shape.logit_softcap >= 0) || !std::isfinite(shape.logit_softcap))
    throw UsageError(
        fmt::format("paged_attention: logit_softcap must be >= 0 and finite, got {}", shape.logit_softcap));
  if (batch.num_requests < 0)
    throw UsageError(fmt::format("paged_attention: num_requests must be >= 0, got {}", batch.num_requests));
  if (batch.cascade_min_tokens < 0)
    throw UsageError(fmt::format("paged_attention: cascade_min_tokens must be >= 0, got {}", batch.cascade_min_tokens));
  if (batch.num_requests == 0) return;
  if (batch.query_start == nullptr || batch.context_lens == nullptr || batch.block_tables == nullptr)
    throw UsageError("paged_attention: query_start, context_lens and block_tables must be set");
  if (batch.query_start[0] < 0)
    throw UsageError(fmt::format("paged_attention: query_start[0] must be >= 0, got {}", batch.query_start[0]));
  for (int i = 0; i < batch.num_requests; ++i) {
    const int q_len = batch.query_start[i + 1] - batch.query_start[i];
    const int context = batch.context_lens[i];
    if (q_len < 0)
      throw UsageError(fmt::format("paged_attention: query_start decreases at request {} ({} -> {})", i,
                                   batch.query_start[i], batch.query_start[i + 1]));
    if (q_len > context)
      throw UsageError(
          fmt::format("paged_attention: request {} has {} query tokens but a context of only {}", i, q_len, context));
    if (q_len == 0) continue;
    const int blocks_needed = (context + kv.block_size - 1) / kv.block_size;
    if (blocks_needed > batch.block_table_stride)
      throw UsageError(
          fmt::format("paged_attention: request {} needs {} blocks for {} tokens, the block table row "
                      "holds {}",
                      i, blocks_needed, context, batch.block_table_stride));
    // Blocks wholly before the first query's window are never read (and may be the null block).
    const int first_read = shape.sliding_window > 0 ? std::max(0, context - q_len + 1 - shape.sliding_window) : 0;
    const int32_t* row = batch.block_tables + static_cast<size_t>(i) * static_cast<size_t>(batch.block_table_stride);
    for (int b = first_read / kv.block_size; b < blocks_needed; ++b)
      if (row[b] < 0 || row[b] >= kv.num_blocks)
        throw UsageError(fmt::format("paged_attention: request {} block table entry {} is block {}, outside [0, {})", i,
                                     b, row[b], kv.num_blocks));
  }
}

// Per-thread buffers for one task: its scaled queries (all but int8 K/V, whose tasks read their
// tile's codes), row ranges and unsplit results.
struct TaskScratch {
  std::vector<float> query, acc, row_max, row_sum;
  std::vector<int32_t> row_begin, row_end;
  std::vector<int16_t> codes;  // int8 K/V prefix tasks: the members' query codes, gathered
  std::vector<float> code_scale, code_sum;
  void reserve(size_t heads, size_t rows, size_t dim, bool float_query) {
    if (float_query) query.resize(heads * rows * dim);
    acc.resize(heads * rows * dim);
    row_max.resize(heads * rows);
    row_sum.resize(heads * rows);
    row_begin.resize(rows);
    row_end.resize(rows);
  }
};

// Waits for another thread of the call to set `flag` (release). The writer is running the short
// step that sets it, so spin a little first, then give the CPU away (a shared machine may have
// descheduled the writer).
void wait_until_set(int& flag) {
  const std::atomic_ref<int> set(flag);
  for (int spins = 0; set.load(std::memory_order_acquire) == 0; ++spins) {
    if (spins < 2000) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

using AttendRows = void (*)(const RowGroupTask&);

// The ISA the call runs and its row kernel. The SIMD kernels have no masked tails: a head_dim that
// is not a whole number of vectors steps down to the next narrower path. int8 K/V takes the
// integer path (query codes), with VNNI where the CPU has it.
KernelIsa choose_isa(const AttentionShape& shape, KernelIsa requested) {
  KernelIsa chosen = resolve_isa(requested);
  if (chosen == KernelIsa::kAvx512 && shape.head_dim % 16 != 0) chosen = KernelIsa::kAvx2;
  if (chosen == KernelIsa::kAvx2 && shape.head_dim % 8 != 0) chosen = KernelIsa::kScalar;
  return chosen;
}
AttendRows choose_kernel(KernelIsa chosen, bool int8) {
  return chosen == KernelIsa::kAvx512 ? (int8 && has_avx512_vnni() ? attention_detail::attend_rows_avx512_vnni
                                                                   : attention_detail::attend_rows_avx512)
         : chosen == KernelIsa::kAvx2
             ? (int8 && has_avx_vnni() ? attention_detail::attend_rows_avx2_vnni : attention_detail::attend_rows_avx2)
             : attention_detail::attend_rows_scalar;
}
// The prefix tasks' kernel with the rows in vector lanes (attention_wide_rows.h), where the ISA has
// one: AVX-512, and the scalar twin the tests compare it with; AVX2's 8 lanes and 16 registers
// keep the row-group kernel.
AttendRows choose_wide_kernel(KernelIsa chosen) {
  return chosen == KernelIsa::kAvx512   ? attention_detail::attend_wide_rows_avx512
         : chosen == KernelIsa::kScalar ? attention_detail::attend_wide_rows_scalar
                                        : nullptr;
}

// Phase 1: every request's query tokens cut into tiles of up to `queries_per_tile` tokens, each
// with the context range its tokens attend to. Decode tiles (one token) take all KV heads in one
// task, prefill tiles one head each.
void make_query_tiles(const AttentionShape& shape, const PagedAttentionBatch& batch, int queries_per_tile,
                      std::vector<QueryTile>& tiles) {
  tiles.clear();
  const int window = shape.sliding_window;
  for (int r = 0; r < batch.num_requests; ++r) {
    const int q_len = batch.query_start[r + 1] - batch.query_start[r];
    const int context = batch.context_lens[r];
    for (int first = 0; first < q_len; first += queries_per_tile) {
      QueryTile t;
      t.request = r;
      t.first_query = batch.query_start[r] + first;
      t.num_queries = std::min(queries_per_tile, q_len - first);
      t.first_position = context - q_len + first;
      t.token_end = t.first_position + t.num_queries;
      t.token_begin = window > 0 ? std::max(0, t.first_position + 1 - window) : 0;
      t.heads_per_task = t.num_queries == 1 ? shape.num_kv_heads : 1;
      tiles.push_back(t);
    }
  }
}

// The whole blocks of a tile's context: the blocks a cascade group may share.
int whole_blocks(const QueryTile& t, int block_size) { return t.token_end / block_size; }

// Phase 1b: cascade groups among the decode tiles (see the top of the file). Tiles are sorted by
// their first block id; runs sharing it are sorted by block table, so that a prefix shared by a
// subset lies in consecutive tiles, and cut greedily into groups: a tile joins while the group's
// saved block reads ((members - 1) x shared blocks) do not drop. A member's tile then covers only
// its suffix. No decode requests sharing a first block: one sort of (block id, tile) pairs.
void find_cascade_groups(const AttentionShape& shape, const PagedAttentionBatch& batch, const KVLayerView& kv,
                         int group, std::vector<QueryTile>& tiles, std::vector<CascadeGroup>& groups,
                         std::vector<int>& members) {
  groups.clear();
  members.clear();
  if (!batch.cascade || shape.sliding_window > 0) return;
  const int block_size = kv.block_size;
  const int min_blocks = std::max(kMinCascadeBlocks, (batch.cascade_min_tokens + block_size - 1) / block_size);
  const auto table = [&](int tile) {
    return batch.block_tables + static_cast<size_t>(tiles[static_cast<size_t>(tile)].request) *
                                    static_cast<size_t>(batch.block_table_stride);
  };
  thread_local std::vector<std::pair<int32_t, int>> candidates;  // (first block id, tile)
  candidates.clear();
  for (int i = 0; i < static_cast<int>(tiles.size()); ++i) {
    const QueryTile& t = tiles[static_cast<size_t>(i)];
    if (t.num_queries == 1 && t.token_begin == 0 && whole_blocks(t, block_size) >= min_blocks)
      candidates.emplace_back(table(i)[0], i);
  }
  if (candidates.size() < 2) return;
  std::sort(candidates.begin(), candidates.end());
  const int max_members = std::max(2, kMaxCascadeRows / group);
  // Common leading blocks of two tiles, at most `limit`.
  const auto common = [&](int a, int b, int limit) {
    const int32_t* ta = table(a);
    const int32_t* tb = table(b);
    int n = 0;
    while (n < limit && ta[n] == tb[n]) ++n;
    return n;
  };
  for (size_t run = 0; run < candidates.size();) {
    size_t run_end = run + 1;
    while (run_end < candidates.size() && candidates[run_end].first == candidates[run].first) ++run_end;
    if (run_end - run < 2) {
      run = run_end;
      continue;
    }
    std::sort(candidates.begin() + static_cast<std::ptrdiff_t>(run),
              candidates.begin() + static_cast<std::ptrdiff_t>(run_end), [&](const auto& x, const auto& y) {
                const int wx = whole_blocks(tiles[static_cast<size_t>(x.second)], block_size);
                const int wy = whole_blocks(tiles[static_cast<size_t>(y.second)], block_size);
                const int n = common(x.second, y.second, std::min(wx, wy));
                if (n < std::min(wx, wy)) return table(x.second)[n] < table(y.second)[n];
                return wx != wy ? wx < wy : x.second < y.second;
              });
    for (size_t first = run; first < run_end;) {
      const int lead = candidates[first].second;
      int shared = whole_blocks(tiles[static_cast<size_t>(lead)], block_size);
      size_t end = first + 1;
      for (; end < run_end && static_cast<int>(end - first) < max_members; ++end) {
        const int tile = candidates[end].second;
        const int n = common(lead, tile, std::min(shared, whole_blocks(tiles[static_cast<size_t>(tile)], block_size)));
        const auto m = static_cast<long long>(end - first);  // members so far
        if (n < min_blocks || m * n < (m - 1) * shared) break;
        shared = n;
      }
      if (end - first >= 2) {
        CascadeGroup g;
        g.first_member = static_cast<int>(members.size());
        g.num_members = static_cast<int>(end - first);
        g.prefix_tokens = shared * block_size;
        for (size_t k = first; k < end; ++k) {
          QueryTile& t = tiles[static_cast<size_t>(candidates[k].second)];
          t.cascade = static_cast<int>(groups.size());
          t.member = static_cast<int>(k - first);
          t.token_begin = g.prefix_tokens;
          members.push_back(candidates[k].second);
        }
        groups.push_back(g);
      }
      first = end;
    }
    run = run_end;
  }
}

// Phase 2: the threads the call uses, and each tile's partitions: long ranges split only as far
// as needed to give every thread enough tasks (short decode batches also split their KV heads).
// Work is counted in (context token, query token, KV head) triples.
int plan_partitions(const AttentionShape& shape, int group, std::vector<QueryTile>& tiles,
                    std::vector<CascadeGroup>& groups, const std::vector<int>& members) {
  long long total_work = 0;
  for (const QueryTile& t : tiles)
    total_work += static_cast<long long>(t.token_end - t.token_begin) * t.num_queries * shape.num_kv_heads;
  for (const CascadeGroup& g : groups)
    total_work += static_cast<long long>(g.prefix_tokens) * g.num_members * shape.num_kv_heads;
  // Small batches run on the calling thread (kernels/thread_pool.h): waking the team costs more
  // than they take (a tiny model's decode step is a few thousand multiply-adds per layer).
  const double multiply_adds = 2.0 * static_cast<double>(total_work) * group * shape.head_dim;  // QK and PV
  const int threads = multiply_adds < kMinParallelMultiplyAdds ? 1 : kernel_threads();
  const long long target_tasks = static_cast<long long>(threads) * kTasksPerThread;
  const long long work_per_task = (total_work + target_tasks - 1) / target_tasks;
  long long num_tasks_planned = 0;
  // Partitions of `span` tokens, each a task of `rows_per_token` query tokens x heads.
  const auto partitions_of = [&](int span, long long rows_per_token) {
    if (span == 0) return 0;
    const long long tokens = std::max<long long>(kMinPartition, work_per_task / rows_per_token);
    return threads > 1 ? static_cast<int>(std::max<long long>(1, (span + tokens - 1) / tokens)) : 1;
  };
  for (QueryTile& t : tiles) {
    const int span = t.token_end - t.token_begin;
    t.partitions = partitions_of(span, static_cast<long long>(t.num_queries) * t.heads_per_task);
    t.partition_tokens = t.partitions > 0 ? (span + t.partitions - 1) / t.partitions : 0;
    num_tasks_planned += static_cast<long long>(t.partitions) * (shape.num_kv_heads / t.heads_per_task);
  }
  for (CascadeGroup& g : groups) {
    g.heads_per_task = shape.num_kv_heads;  // as its members' (decode) tiles
    g.partitions = partitions_of(g.prefix_tokens, static_cast<long long>(g.num_members) * g.heads_per_task);
    g.partition_tokens = (g.prefix_tokens + g.partitions - 1) / g.partitions;
    num_tasks_planned += g.partitions;
  }
  // Short decode batches: also split the KV heads, so every thread has a couple of tasks.
  if (threads > 1 && num_tasks_planned < 2LL * threads) {
    const long long head_groups = (2LL * threads + num_tasks_planned - 1) / num_tasks_planned;
    for (QueryTile& t : tiles)
      if (t.heads_per_task > 1)
        t.heads_per_task = static_cast<int>(std::max<long long>(1, (t.heads_per_task + head_groups - 1) / head_groups));
  }
  // A prefix task counts down its members' (tile, head group) counters: the same head groups.
  for (CascadeGroup& g : groups) g.heads_per_task = tiles[static_cast<size_t>(members[g.first_member])].heads_per_task;
  return threads;
}

// The call's int8 query-code buffers: codes ([heads][rows][code_stride] per tile), scales and row
// sums ([heads][rows] per tile), each tile's made once and read by all its tasks.
struct QueryCodeBuffers {
  int16_t* codes = nullptr;
  float* scales = nullptr;
  float* sums = nullptr;  // each row's sum: times each key row's offset
};

// Phase 3 (int8 K/V): where each tile's query codes go, and room for them in this thread's buffers.
QueryCodeBuffers place_query_codes(const AttentionShape& shape, int group, size_t code_stride,
                                   std::vector<QueryTile>& tiles) {
  thread_local std::vector<int16_t> query_codes;
  thread_local std::vector<float> query_code_scales;
  thread_local std::vector<float> query_sums;
  size_t codes = 0, scales = 0;
  for (QueryTile& t : tiles) {
    const size_t rows = static_cast<size_t>(t.num_queries) * static_cast<size_t>(group);
    t.code_offset = codes;
    t.code_scale_offset = scales;
    codes += static_cast<size_t>(shape.num_kv_heads) * rows * code_stride;
    scales += static_cast<size_t>(shape.num_kv_heads) * rows;
  }
  if (query_codes.size() < codes) query_codes.resize(codes);
  if (query_code_scales.size() < scales) query_code_scales.resize(scales);
  if (query_sums.size() < scales) query_sums.resize(scales);
  return QueryCodeBuffers{query_codes.data(), query_code_scales.data(), query_sums.data()};
}

// Phase 4: the tasks (tile, KV head group, partition), largest first, and where each split
// tile's partial results start. Returns the floats the partial results take.
size_t list_tasks(const AttentionShape& shape, int group, size_t dim, std::vector<QueryTile>& tiles,
                  std::vector<CascadeGroup>& groups, std::vector<TaskRef>& tasks) {
  size_t partial_floats = 0;
  tasks.clear();
  for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
    CascadeGroup& g = groups[static_cast<size_t>(i)];
    const size_t rows = static_cast<size_t>(g.num_members) * static_cast<size_t>(group);
    g.partial_offset = partial_floats;
    partial_floats += static_cast<size_t>(g.partitions) * static_cast<size_t>(shape.num_kv_heads) * rows * (dim + 2);
    for (int h = 0; h < shape.num_kv_heads; h += g.heads_per_task)
      for (int p = 0; p < g.partitions; ++p) {
        const int begin = p * g.partition_tokens;
        const int end = std::min(g.prefix_tokens, begin + g.partition_tokens);
        const int heads = std::min(g.heads_per_task, shape.num_kv_heads - h);
        tasks.push_back(TaskRef{i, h, heads, p, static_cast<long long>(end - begin) * g.num_members * heads, true});
      }
  }
  for (int i = 0; i < static_cast<int>(tiles.size()); ++i) {
    QueryTile& t = tiles[static_cast<size_t>(i)];
    const size_t rows = static_cast<size_t>(t.num_queries) * static_cast<size_t>(group);
    if (t.split()) {
      t.partial_offset = partial_floats;
      partial_floats += static_cast<size_t>(t.partitions) * static_cast<size_t>(shape.num_kv_heads) * rows * (dim + 2);
    }
    for (int h = 0; h < shape.num_kv_heads; h += t.heads_per_task)
      for (int p = 0; p < t.partitions; ++p) {
        const int begin = t.token_begin + p * t.partition_tokens;
        const int end = std::min(t.token_end, begin + t.partition_tokens);
        const int heads = std::min(t.heads_per_task, shape.num_kv_heads - h);
        tasks.push_back(TaskRef{i, h, heads, p, static_cast<long long>(end - begin) * t.num_queries * heads});
      }
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const TaskRef& a, const TaskRef& b) { return a.cost > b.cost; });
  return partial_floats;
}

// What the work items of one call read and write (phase 5): the inputs, the kernel, the planned
// tiles and tasks, and the shared buffers and completion counters.
struct AttentionCall {
  const AttentionShape& shape;
  const PagedAttentionBatch& batch;
  const KVLayerView& kv;
  const float* query;
  float* out;
  KernelIsa isa;
  AttendRows kernel;
  AttendRows wide_kernel;  // prefix tasks that fit it (attention_detail::wide_rows_fit), or null
  bool int8;
  bool rotated_keys;
  int group;  // query heads per KV head
  size_t dim;
  size_t kv_heads;
  size_t q_token_stride;
  size_t code_stride;
  const QueryTile* tiles;
  const CascadeGroup* groups;
  const int* cascade_members;  // per group: its member tiles (CascadeGroup::first_member)
  const TaskRef* tasks;
  int num_code_tiles;  // tiles whose query codes are work items (int8: all, else none)
  QueryCodeBuffers codes;
  float* partials;
  int* codes_ready;  // per tile: 1 once its query codes are made
  int* parts_left;  // per (split tile, head group): partitions not finished
  const int* group_offset;  // per tile: its first head group's counter in parts_left

  size_t rows_of(const QueryTile& t) const { return static_cast<size_t>(t.num_queries) * static_cast<size_t>(group); }
  // Row `row` of KV head `kv_head` in tile t: query token row / G, query head kv_head * G + row % G.
  size_t token_head_offset(const QueryTile& t, size_t kv_head, size_t row) const {
    const size_t qi = row / static_cast<size_t>(group), g = row % static_cast<size_t>(group);
    return (static_cast<size_t>(t.first_query) + qi) * q_token_stride +
           (kv_head * static_cast<size_t>(group) + g) * dim;
  }
};

// The int16 codes, scales and sums of every row of tile t, all KV heads.
void make_query_codes(const AttentionCall& c, const QueryTile& t) {
  const size_t rows = c.rows_of(t);
  for (size_t h = 0; h < c.kv_heads; ++h)
    for (size_t row = 0; row < rows; ++row) {
      const size_t i = h * rows + row;
      const QueryRowCodes made =
          make_query_row_codes(c.query + c.token_head_offset(t, h, row), c.dim, c.shape.scale, c.rotated_keys,
                               c.codes.codes + t.code_offset + i * c.code_stride, c.isa);
      c.codes.scales[t.code_scale_offset + i] = made.scale;
      c.codes.sums[t.code_scale_offset + i] = made.sum;  // int8 keys are scale * code + offset
    }
}

// One task: its rows attend to its context range. An unsplit tile's results are normalized into
// `out`; a partition's stay in the partial buffers for merge_partitions.
void run_task(const AttentionCall& c, const TaskRef& ref, TaskScratch& scratch) {
  const QueryTile& t = c.tiles[ref.tile];
  const size_t rows = c.rows_of(t);
  const size_t dim = c.dim;
  const auto heads = static_cast<size_t>(ref.num_kv_heads);
  const int window = c.shape.sliding_window;
  scratch.reserve(heads, rows, dim, !c.int8);
  if (!c.int8)
    for (size_t h = 0; h < heads; ++h)
      for (size_t row = 0; row < rows; ++row) {
        const float* src = c.query + c.token_head_offset(t, static_cast<size_t>(ref.first_kv_head) + h, row);
        float* dst = scratch.query.data() + (h * rows + row) * dim;
        for (size_t d = 0; d < dim; ++d) dst[d] = src[d] * c.shape.scale;
      }
  for (size_t row = 0; row < rows; ++row) {
    const int position = t.first_position + static_cast<int>(row / static_cast<size_t>(c.group));
    scratch.row_end[row] = position + 1;
    scratch.row_begin[row] = window > 0 ? std::max(0, position + 1 - window) : 0;
  }
  RowGroupTask task;
  task.kv = &c.kv;
  task.block_table =
      c.batch.block_tables + static_cast<size_t>(t.request) * static_cast<size_t>(c.batch.block_table_stride);
  task.first_kv_head = ref.first_kv_head;
  task.num_kv_heads = ref.num_kv_heads;
  task.token_begin = t.token_begin + ref.partition * t.partition_tokens;
  task.token_end = std::min(t.token_end, task.token_begin + t.partition_tokens);
  task.num_rows = static_cast<int>(rows);
  task.query = c.int8 ? nullptr : scratch.query.data();
  if (c.int8) {  // the integer kernels read the codes instead
    const auto first = static_cast<size_t>(ref.first_kv_head);
    task.query_codes = c.codes.codes + t.code_offset + first * rows * c.code_stride;
    task.query_scale = c.codes.scales + t.code_scale_offset + first * rows;
    task.query_sum = c.codes.sums + t.code_scale_offset + first * rows;
  }
  task.row_begin = scratch.row_begin.data();
  task.row_end = scratch.row_end.data();
  task.rows_share_range = t.num_queries == 1;
  task.logit_softcap = c.shape.logit_softcap;
  if (t.split()) {
    float* base = c.partials + t.partial_offset + static_cast<size_t>(ref.partition) * c.kv_heads * rows * (dim + 2);
    const auto first = static_cast<size_t>(ref.first_kv_head);
    task.acc = base + first * rows * dim;
    task.row_max = base + c.kv_heads * rows * dim + first * rows;
    task.row_sum = base + c.kv_heads * rows * (dim + 1) + first * rows;
    c.kernel(task);
    return;
  }
  task.acc = scratch.acc.data();
  task.row_max = scratch.row_max.data();
  task.row_sum = scratch.row_sum.data();
  c.kernel(task);
  for (size_t h = 0; h < heads; ++h)
    for (size_t row = 0; row < rows; ++row) {
      float* dst = c.out + c.token_head_offset(t, static_cast<size_t>(ref.first_kv_head) + h, row);
      const float inv = 1.0f / scratch.row_sum[h * rows + row];
      const float* acc = scratch.acc.data() + (h * rows + row) * dim;
      for (size_t d = 0; d < dim; ++d) dst[d] = acc[d] * inv;
    }
}

// A cascade group's prefix task: the G rows of every member, gathered into one row group, attend
// to one partition of the shared prefix, read through the first member's block table (the
// members' tables agree there). The results stay in the group's partial buffers.
void run_prefix_task(const AttentionCall& c, const TaskRef& ref, TaskScratch& scratch) {
  const CascadeGroup& g = c.groups[ref.tile];
  const auto group = static_cast<size_t>(c.group);
  const size_t rows = static_cast<size_t>(g.num_members) * group;
  const size_t dim = c.dim;
  const auto heads = static_cast<size_t>(ref.num_kv_heads);
  const auto first_head = static_cast<size_t>(ref.first_kv_head);
  scratch.reserve(heads, rows, dim, !c.int8);
  if (c.int8) {
    scratch.codes.resize(heads * rows * c.code_stride);
    scratch.code_scale.resize(heads * rows);
    scratch.code_sum.resize(heads * rows);
  }
  for (int m = 0; m < g.num_members; ++m) {
    const int tile = c.cascade_members[g.first_member + m];
    const QueryTile& t = c.tiles[tile];
    if (c.int8) wait_until_set(c.codes_ready[tile]);
    for (size_t h = 0; h < heads; ++h)
      for (size_t r = 0; r < group; ++r) {
        const size_t dst_row = h * rows + static_cast<size_t>(m) * group + r;
        if (c.int8) {  // the tile's codes: [all heads][G rows], decode tiles having G rows
          const size_t src_row = (first_head + h) * group + r;
          const int16_t* src = c.codes.codes + t.code_offset + src_row * c.code_stride;
          std::copy(src, src + c.code_stride, scratch.codes.data() + dst_row * c.code_stride);
          scratch.code_scale[dst_row] = c.codes.scales[t.code_scale_offset + src_row];
          scratch.code_sum[dst_row] = c.codes.sums[t.code_scale_offset + src_row];
        } else {
          const float* src = c.query + c.token_head_offset(t, first_head + h, r);
          float* dst = scratch.query.data() + dst_row * dim;
          for (size_t d = 0; d < dim; ++d) dst[d] = src[d] * c.shape.scale;
        }
      }
  }
  RowGroupTask task;
  task.kv = &c.kv;
  task.block_table = c.batch.block_tables + static_cast<size_t>(c.tiles[c.cascade_members[g.first_member]].request) *
                                                static_cast<size_t>(c.batch.block_table_stride);
  task.first_kv_head = ref.first_kv_head;
  task.num_kv_heads = ref.num_kv_heads;
  task.token_begin = ref.partition * g.partition_tokens;
  task.token_end = std::min(g.prefix_tokens, task.token_begin + g.partition_tokens);
  std::fill(scratch.row_begin.begin(), scratch.row_begin.begin() + static_cast<std::ptrdiff_t>(rows), task.token_begin);
  std::fill(scratch.row_end.begin(), scratch.row_end.begin() + static_cast<std::ptrdiff_t>(rows), task.token_end);
  task.num_rows = static_cast<int>(rows);
  task.query = c.int8 ? nullptr : scratch.query.data();
  if (c.int8) {
    task.query_codes = scratch.codes.data();
    task.query_scale = scratch.code_scale.data();
    task.query_sum = scratch.code_sum.data();
  }
  task.row_begin = scratch.row_begin.data();
  task.row_end = scratch.row_end.data();
  task.rows_share_range = true;  // decode rows: every member's query follows the whole prefix
  task.logit_softcap = c.shape.logit_softcap;
  float* base = c.partials + g.partial_offset + static_cast<size_t>(ref.partition) * c.kv_heads * rows * (dim + 2);
  task.acc = base + first_head * rows * dim;
  task.row_max = base + c.kv_heads * rows * dim + first_head * rows;
  task.row_sum = base + c.kv_heads * rows * (dim + 1) + first_head * rows;
  if (c.wide_kernel != nullptr && attention_detail::wide_rows_fit(task)) c.wide_kernel(task);
  else c.kernel(task);
}

// Calls f(max, sum, accumulator) for each partial result of row `row` of (split tile t, KV head):
// the tile's partitions, then, for a cascade member, its rows of its group's prefix partitions.
template <class F>
void for_each_partial(const AttentionCall& c, const QueryTile& t, size_t kv_head, size_t row, F&& f) {
  const size_t dim = c.dim;
  const size_t kv_heads = c.kv_heads;
  const auto visit = [&](size_t offset, int partitions, size_t rows, size_t r) {
    const size_t part_floats = kv_heads * rows * (dim + 2);
    for (int p = 0; p < partitions; ++p) {
      const float* part = c.partials + offset + static_cast<size_t>(p) * part_floats;
      f(part[kv_heads * rows * dim + kv_head * rows + r], part[kv_heads * rows * (dim + 1) + kv_head * rows + r],
        part + (kv_head * rows + r) * dim);
    }
  };
  visit(t.partial_offset, t.partitions, c.rows_of(t), row);
  if (t.cascade >= 0) {
    const CascadeGroup& g = c.groups[t.cascade];
    const auto group = static_cast<size_t>(c.group);
    visit(g.partial_offset, g.partitions, static_cast<size_t>(g.num_members) * group,
          static_cast<size_t>(t.member) * group + row);
  }
}

// Merges the partial results of one (split tile, KV head) into `out`: the log-sum-exp combination.
void merge_partitions(const AttentionCall& c, const QueryTile& t, size_t kv_head) {
  const size_t rows = c.rows_of(t);
  const size_t dim = c.dim;
  for (size_t row = 0; row < rows; ++row) {
    float global_max = -std::numeric_limits<float>::infinity();
    for_each_partial(c, t, kv_head, row,
                     [&](float part_max, float, const float*) { global_max = std::max(global_max, part_max); });
    float* dst = c.out + c.token_head_offset(t, kv_head, row);
    std::fill(dst, dst + dim, 0.0f);
    float total = 0;
    for_each_partial(c, t, kv_head, row, [&](float part_max, float part_sum, const float* acc) {
      if (part_max == -std::numeric_limits<float>::infinity()) return;  // row saw no token here
      const float weight = std::exp(part_max - global_max);
      total += weight * part_sum;
      for (size_t d = 0; d < dim; ++d) dst[d] += weight * acc[d];
    });
    const float inv = 1.0f / total;
    for (size_t d = 0; d < dim; ++d) dst[d] *= inv;
  }
}

// One partial result of split tile `tile` done for the KV heads of `ref`; the last of the
// (tile, head group)'s partitions and prefix partitions to finish merges them.
void finish_partial(const AttentionCall& c, int tile, const TaskRef& ref) {
  const QueryTile& t = c.tiles[tile];
  int& parts = c.parts_left[c.group_offset[tile] + ref.first_kv_head / t.heads_per_task];
  if (std::atomic_ref<int>(parts).fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  for (int h = ref.first_kv_head; h < ref.first_kv_head + ref.num_kv_heads; ++h)
    merge_partitions(c, t, static_cast<size_t>(h));
}

// One work item: a tile's query codes (items [0, num_code_tiles)), else a task, which waits only
// for its own tile's codes; the last partition of a split (tile, head group) to finish merges it.
void run_item(const AttentionCall& c, int item, TaskScratch& scratch) {
  if (item < c.num_code_tiles) {
    make_query_codes(c, c.tiles[item]);
    std::atomic_ref<int>(c.codes_ready[item]).store(1, std::memory_order_release);
    return;
  }
  const TaskRef& ref = c.tasks[item - c.num_code_tiles];
  if (ref.prefix) {
    run_prefix_task(c, ref, scratch);
    const CascadeGroup& g = c.groups[ref.tile];
    for (int m = 0; m < g.num_members; ++m) finish_partial(c, c.cascade_members[g.first_member + m], ref);
    return;
  }
  const QueryTile& t = c.tiles[ref.tile];
  if (c.int8) wait_until_set(c.codes_ready[ref.tile]);
  run_task(c, ref, scratch);
  if (t.split()) finish_partial(c, ref.tile, ref);
}

}  // namespace

void paged_attention(const AttentionShape& shape, const PagedAttentionBatch& batch, const KVLayerView& kv,
                     const float* query, float* out, KernelIsa isa) {
  validate(shape, batch, kv);
  if (batch.num_requests == 0) return;
  const KernelIsa chosen = choose_isa(shape, isa);
  const bool int8 = kv.dtype == DType::kInt8;  // the integer path: query codes, VNNI if present
  const int group = shape.num_q_heads / shape.num_kv_heads;  // query heads per KV head
  const auto dim = static_cast<size_t>(shape.head_dim);

  // 1. Query tiles.
  thread_local std::vector<QueryTile> tiles;
  make_query_tiles(shape, batch, std::max(1, kRowsPerTask / group), tiles);
  if (tiles.empty()) return;
  thread_local std::vector<CascadeGroup> groups;
  thread_local std::vector<int> cascade_members;
  find_cascade_groups(shape, batch, kv, group, tiles, groups, cascade_members);
  // 2. Partitions and threads.
  const int threads = plan_partitions(shape, group, tiles, groups, cascade_members);
  // 3. int8: each tile's query codes, made once per tile, not once per partition (rotating and
  // quantizing a tile's rows per partition costs 5-8 % of a 4K-token decode call).
  const size_t code_stride = padded_query_dim(dim);
  const QueryCodeBuffers codes = int8 ? place_query_codes(shape, group, code_stride, tiles) : QueryCodeBuffers{};
  // 4. Tasks, and room for the partial results of split tiles.
  thread_local std::vector<TaskRef> tasks;
  const size_t partial_floats = list_tasks(shape, group, dim, tiles, groups, tasks);
  thread_local std::vector<float> partials;
  if (partials.size() < partial_floats) partials.resize(partial_floats);

  // 5. One pass over a single list of work items, claimed in order from a shared counter: first
  // each int8 tile's query codes, then the tasks, largest first. No barrier inside the call: a
  // task waits only for its own tile's codes (claimed before any task, so already being made),
  // and the last partition of a split (tile, head group) to finish merges it. With passive
  // waiting a barrier puts an idle thread to sleep and wakes it again (three barriers a call
  // cost up to 80 us of a 0.4 ms 4K-token decode call on two threads).
  const int num_code_tiles = int8 ? static_cast<int>(tiles.size()) : 0;
  const int num_tasks = static_cast<int>(tasks.size());
  const int num_items = num_code_tiles + num_tasks;
  thread_local std::vector<int> codes_ready;
  thread_local std::vector<int> group_offset;
  thread_local std::vector<int> parts_left;
  codes_ready.assign(static_cast<size_t>(num_code_tiles), 0);
  group_offset.resize(tiles.size());
  parts_left.clear();
  for (size_t i = 0; i < tiles.size(); ++i) {
    const QueryTile& t = tiles[i];
    group_offset[i] = static_cast<int>(parts_left.size());
    if (t.split())
      parts_left.insert(parts_left.end(),
                        static_cast<size_t>((shape.num_kv_heads + t.heads_per_task - 1) / t.heads_per_task),
                        t.partitions + (t.cascade >= 0 ? groups[static_cast<size_t>(t.cascade)].partitions : 0));
  }
  const AttentionCall call{.shape = shape,
                           .batch = batch,
                           .kv = kv,
                           .query = query,
                           .out = out,
                           .isa = chosen,
                           .kernel = choose_kernel(chosen, int8),
                           .wide_kernel = choose_wide_kernel(chosen),
                           .int8 = int8,
                           .rotated_keys = keys_are_rotated(kv.dtype, shape.head_dim),
                           .group = group,
                           .dim = dim,
                           .kv_heads = static_cast<size_t>(shape.num_kv_heads),
                           .q_token_stride = static_cast<size_t>(shape.num_q_heads) * dim,
                           .code_stride = code_stride,
                           .tiles = tiles.data(),
                           .groups = groups.data(),
                           .cascade_members = cascade_members.data(),
                           .tasks = tasks.data(),
                           .num_code_tiles = num_code_tiles,
                           .codes = codes,
                           .partials = partials.data(),
                           .codes_ready = codes_ready.data(),
                           .parts_left = parts_left.data(),
                           .group_offset = group_offset.data()};

  const int team = std::max(1, std::min(threads, num_tasks));
  if (team == 1) {
    thread_local TaskScratch scratch;
    for (int i = 0; i < num_items; ++i) run_item(call, i, scratch);
    return;
  }
  std::atomic<int> next_item{0};
#pragma omp parallel num_threads(team)
  {
    thread_local TaskScratch scratch;
    for (int i = next_item.fetch_add(1, std::memory_order_relaxed); i < num_items;
         i = next_item.fetch_add(1, std::memory_order_relaxed))
      run_item(call, i, scratch);
  }
}

}  // namespace pagedkv
