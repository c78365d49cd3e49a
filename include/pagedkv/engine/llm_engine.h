// LLMEngine: the serving loop that closes the circle
//   scheduler -> KV-cache manager -> block pool -> block tables -> paged attention -> sampler
// on a real model. Each step() schedules a flattened batch, performs the step's block copies
// (swap out, swap in, copy-on-write), runs one forward pass, samples, and reports progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/grammar/grammar_matcher.h"
#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/model/logprobs.h"
#include "pagedkv/model/model.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/scheduler/scheduler.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/tiered_kv_cache.h"

namespace pagedkv {

class GrammarMaskWorker;
struct GrammarMaskJob;

struct EngineConfig {
  int block_size = 16;
  int num_blocks = 0;  // explicit pool size (null block included); 0: from kv_cache_bytes
  size_t kv_cache_bytes = 16u << 20;  // KV budget when num_blocks == 0
  DType kv_dtype = DType::kF32;
  size_t swap_space_bytes = 4u << 20;  // host swap arena (0 disables swap preemption)
  bool enable_prefix_caching = true;
  HashAlgorithm hash_algorithm = HashAlgorithm::kXxh3_128;
  uint64_t hash_seed = 0;
  int max_model_len = 0;  // 0: the model's seq_len
  SchedulerConfig scheduler;
  // Host and disk tiers below the KV arena (off unless host_cache_bytes or disk_cache_dir is set):
  // offload of evicted prefixes, promotion on a lookup, swap preemption, warm restart.
  TierConfig tiers;
  bool check_invariants = false;  // run the manager's checker after every step (tests)
  // Record KV events (blocks stored in / removed from the device pool and the host and disk
  // tiers) for take_kv_events(): a server publishes them to routers. Drain them, or they pile up.
  bool enable_kv_events = false;
  // Keep EngineStats::blocks_in_use (one entry per step): off for long-running servers.
  bool record_block_usage = true;
  // Structured output: fill the grammar masks of a step's samples on a worker thread while the
  // forward pass runs (their matchers are final before it), not after it on the engine thread.
  // The same masks either way: seeded runs give the same tokens on or off.
  bool grammar_mask_overlap = true;
  // Cascade attention (kernels/paged_attention.h): decode requests sharing cached prefix blocks
  // read them once per step for the group. Off: every request reads its own table, for comparisons.
  bool cascade_attention = true;
};

struct GenerationRequest {
  std::vector<TokenId> prompt;  // token ids, BOS included if the model wants one
  SamplingParams sampling;
  StopConditions stop;
  int n = 1;  // parallel samples sharing the prompt's blocks
  // Beam search when > 1 (with n = 1, the paged reservation, no logprobs): every step keeps the
  // beam_width continuations with the highest cumulative log-probability (sampling params are
  // not used); beams share blocks through fork / copy-on-write, a dropped beam frees its own.
  // A beam that meets a stop condition (a stop token, max_tokens, known_output_tokens) is a
  // finished hypothesis and the beam narrows by one. The request reports once, at the end: its
  // hypotheses best first, the best under the request's id (sample_index 0), the others with
  // parent = the request's id and sample_index 1, 2, ...
  int beam_width = 1;
  int priority = 0;  // lower runs first
  std::string cache_salt;
  uint64_t lora_id = 0;
  // -1: none. k >= 0: each sampled token's log-probability and the k most likely tokens'
  // (RequestOutput::new_logprobs).
  int logprobs = -1;
  // -1: none. k >= 0: every prompt token after the first gets its log-probability given the
  // tokens before it, and the k most likely tokens' there (RequestOutput::prompt_logprobs). The
  // whole prompt is then computed: the request neither reads nor fills the prefix cache. Not with
  // beam search.
  int prompt_logprobs = -1;
  // Structured output (docs/structured_output.md): when set, every sample's output is a prefix of
  // a sentence of this grammar. Before each draw the tokens the grammar does not allow next are
  // masked out of the (adjusted) logits; a stop token is allowed only where the output is
  // complete, and the grammar's stop ids (its vocabulary's) end the request whatever ignore_eos
  // says, with finish reason stop. Where the grammar comes to a dead end (what must come next is
  // spelled by no token of the vocabulary) a stop token ends the output, with finish reason
  // aborted. Compile it off the engine thread (grammar::GrammarCache). Its vocabulary must not be
  // larger than the model's; not with beam search.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  // The finished outputs the request reports: its n samples, or its beam search's hypotheses.
  int num_outputs() const { return beam_width > 1 ? beam_width : n; }
};

struct RequestOutput {
  RequestId id;
  RequestId parent{~0ull};  // for parallel samples 1..n-1: the request they forked from
  int sample_index = 0;
  double cumulative_logprob = 0;  // beam search: the hypothesis's score (else 0)
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;  // generated tokens (a finishing stop token excluded)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  int prefix_hit_tokens = 0;  // tokens served from the prefix cache at first admission
  TierHitTokens hit_tokens_by_tier;  // the same, by the tier they were found in
  int num_preemptions = 0;
  double ttft_ms = -1;  // arrival to first token
  double latency_ms = -1;  // arrival to finish
  double tpot_ms = -1;  // mean time per output token after the first
  double queue_ms = -1;  // arrival to first scheduled
  // When the request asked for logprobs: one entry per token added to `output` since this
  // request's previous RequestOutput, in order (a forked sample's first token comes with its second).
  std::vector<TokenLogprobs> new_logprobs;
  // With the request's first output (sample 0's), when it asked for prompt_logprobs: entry i is
  // prompt token i + 1's, given prompt tokens 0..i.
  std::vector<TokenLogprobs> prompt_logprobs;
};

// One step's work in the terms of a step cost model (replay/step_cost_model.h's StepWork):
// benchmarks that run the engine on a modelled clock read EngineStats::last_step after each step.
struct EngineStepWork {
  int64_t prefill_tokens = 0;  // new tokens of chunks longer than one token
  double prefill_token_pairs = 0;  // Σ new tokens x the mean context they attend to
  int64_t decode_seqs = 0;  // one-token chunks
  int64_t decode_context_tokens = 0;
  int64_t copied_blocks = 0;  // swap-out and swap-in copies
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;  // prefill tokens computed (re-prefills included)
  uint64_t output_tokens = 0;
  uint64_t cow_copies = 0;
  double forward_seconds = 0;
  double schedule_seconds = 0;  // scheduler + manager + batch building
  double copy_seconds = 0;
  int peak_blocks_in_use = 0;
  std::vector<int> blocks_in_use;  // after every step
  EngineStepWork last_step;
};

class LLMEngine {
 public:
  // `model` must outlive the engine. Throws ConfigError for impossible configurations.
  LLMEngine(const Model& model, EngineConfig config);
  // With tiers: writes cached blocks down to the disk tier (warm restart) before releasing them.
  ~LLMEngine();
  LLMEngine(const LLMEngine&) = delete;
  LLMEngine& operator=(const LLMEngine&) = delete;

  // Validates (token ids in the vocabulary, n >= 1, sampling params) and queues a request.
  RequestId add_request(GenerationRequest request);
  // Cancels a request (and, with `with_samples`, the parallel samples forked from it); its
  // blocks return at once and the next step() reports it finished with kAborted.
  bool abort_request(RequestId id, bool with_samples = true);
  // Drops every cached block no request holds (vLLM's reset_prefix_cache).
  ResetResult reset_prefix_cache() { return manager_.reset_prefix_cache(); }

  // One scheduling + forward step. Returns the requests that produced tokens or finished.
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return scheduler_.has_unfinished(); }
  // Runs to completion; returns every request's final output, in the order they finished.
  std::vector<RequestOutput> run_to_completion();

  const KVCacheManager& manager() const { return manager_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const EngineStats& stats() const { return stats_; }
  const EngineConfig& config() const { return config_; }
  const ModelConfig& model_config() const { return runner_.config(); }
  int num_blocks() const { return num_blocks_; }
  int swap_blocks() const { return swap_blocks_; }
  int max_model_len() const { return max_model_len_; }
  // A human-readable start-up summary (block count, token capacity, max concurrency).
  std::string describe() const;
  // KV events since the last call: the device pool's, then the tiers' (empty unless
  // EngineConfig::enable_kv_events).
  std::vector<KVEvent> take_kv_events();
  // A stored event for every block findable now, device and tiers: where an index starts.
  std::vector<KVEvent> cached_blocks() const;
  // Owner of each block: -1 free, -2 cached-free, otherwise the number of holders (for the demo).
  std::vector<int> block_owners() const;
  void check_invariants() const {
    manager_.check_invariants();
    if (tiers_) tiers_->check_invariants();
    scheduler_.check_invariants();
  }
  // The KV tiers below the arena, or null when none are configured.
  const TieredKVCache* tiers() const { return tiers_.get(); }
  TieredKVCache* tiers() { return tiers_.get(); }

 private:
  struct Timing {
    std::chrono::steady_clock::time_point arrival, first_scheduled, first_token, last_token;
    bool has_first = false;
    bool scheduled = false;
  };
  // A beam search request: its live beams (scheduler requests) and finished hypotheses.
  struct BeamGroup {
    int width = 1;
    std::vector<RequestId> live;  // beam order: who wins ties
    std::unordered_map<RequestId, double> cumulative;  // live beams' scores
    std::unordered_map<RequestId, std::vector<double>> pending;  // log_softmax at the current length
    std::vector<RequestOutput> hypotheses;
    std::optional<RequestOutput> failed;  // aborted or rejected: reported instead of hypotheses
    int next_index = 1;
  };
  // ---- the phases of step(), in order ----
  // Clears and frees the block-table rows of requests no longer running (finished, preempted,
  // swapped out).
  void release_stale_rows();
  // The step's byte movements, in order: the tiers' pending copies (they read blocks evicted or
  // swapped out in this schedule), swap-outs (they read blocks this step may hand to others),
  // swap-ins, copy-on-write copies. Returns the seconds they took (also added to the stats).
  double move_blocks(const SchedulerOutput& out);
  // The step's work as the stats report it (EngineStepWork): copies, decodes, prefill tokens.
  void count_step_work(const SchedulerOutput& out);
  // The scheduled chunks flattened into one forward batch (tokens, positions, slots, block
  // tables of every KV-cache group), viewing this engine's per-step scratch: valid until the next
  // call. Stamps requests scheduled for the first time with `step_start`.
  ForwardBatch flatten_batch(const SchedulerOutput& out, std::chrono::steady_clock::time_point step_start);
  // The log-probabilities of the prompt positions flatten_batch asked logits for (prompt_rows_),
  // appended to their requests' prompt logprobs.
  void record_prompt_logprobs(const SchedulerOutput& out, const Logits& logits);
  // With grammar_mask_overlap: hands the step's constrained samples (chunks that sample under a
  // matcher) to the mask worker, started on first use. Nothing may touch their matchers until
  // wait_grammar_masks().
  void post_grammar_masks(const SchedulerOutput& out);
  // Waits for the posted masks (a no-op when none were posted); mask_job_of_chunk_ then names
  // each chunk's filled job.
  void wait_grammar_masks();
  // Samples every chunk that samples (`sampled[i]` for chunk i, its logits row sample_rows_[i]; a beam's candidates
  // wait for advance_beams instead), with its grammar and logprobs; counts the prompt tokens computed.
  void sample(const SchedulerOutput& out, const Logits& logits, std::vector<SampledTokens>& sampled);
  // Appends the sampled tokens in the scheduler, steps the beam groups; returns the requests
  // that finished.
  std::vector<SchedulerRequest*> update_requests(const SchedulerOutput& out, const std::vector<SampledTokens>& sampled);
  // Stamps the token times (`now`) of requests that sampled (their new forks inherit the
  // parent's arrival) and reports those still running.
  void report_sampled(const SchedulerOutput& out, const std::vector<SampledTokens>& sampled,
                      const std::vector<SchedulerRequest*>& finished, std::chrono::steady_clock::time_point now,
                      std::vector<RequestOutput>& results);
  // Reports the finished requests (beam groups once they end; finishing one beam may end the
  // rest of its group, so the list grows) and releases their rows, samplers and state.
  void retire_finished(std::vector<SchedulerRequest*>& finished, std::vector<RequestOutput>& results);
  // Drops the grammar matchers of forks that never came to be and the logprobs settings of roots
  // with no sample left.
  void forget_orphaned_sampling_state();
  // Blocks in use after the step: the peak, and the per-step record when configured.
  void record_block_usage();

  RequestOutput make_output(const SchedulerRequest& r, bool finished);
  // Steps every beam group whose live beams all hold their next-token log-probabilities.
  void advance_beams();
  // A finished beam member: records it in its group; the group's outputs once none is live.
  void finish_beam(SchedulerRequest& r, std::vector<RequestOutput>& results);
  void sync_block_table_row(const SchedulerRequest& r, bool rewritten);
  // `row` as r's sampler sees it: adjusted for its penalties, logit bias and min_tokens
  // (logits_processing.h) in a scratch copy, or `row` itself when none applies.
  std::span<const float> adjusted_logits(const SchedulerRequest& r, const SamplingParams& params,
                                         std::span<const float> row);
  // The same for a request with a grammar, always a copy: adjusted, then the tokens `matcher`
  // does not allow next set to -inf (the request's stop tokens only where the grammar can end).
  // `precomputed`: the matcher's mask and can_terminate() filled by the mask worker (its mask is
  // taken over as scratch); null: computed here.
  std::span<const float> grammar_logits(const SchedulerRequest& r, const SamplingParams& params,
                                        std::span<const float> row, grammar::GrammarMatcher& matcher,
                                        GrammarMaskJob* precomputed);
  // Advances `matcher` past `token`, sampled under its mask (a stop token of the request ends it).
  static void advance_matcher(const SchedulerRequest& r, grammar::GrammarMatcher& matcher, TokenId token);

  EngineConfig config_;
  ModelRunner runner_;
  int num_blocks_ = 0;
  int swap_blocks_ = 0;
  int max_model_len_ = 0;
  KVCacheManager manager_;
  Scheduler scheduler_;
  KVArena arena_;
  std::optional<KVArena> host_arena_;
  BlockTable block_table_;
  std::unordered_map<RequestId, int> rows_;
  std::vector<int> free_rows_;
  std::map<std::pair<uint64_t, int>, Sampler> samplers_;  // (root request, sample index)
  std::map<uint64_t, int> logprobs_;  // root request -> top-k asked (absent: none)
  // Requests with a grammar: (root request, sample index) -> its position in the grammar. Forks
  // start from a copy of the parent's matcher taken before it accepts its first token.
  std::map<std::pair<uint64_t, int>, grammar::GrammarMatcher> matchers_;
  std::map<uint64_t, BeamGroup> beams_;  // root request -> its beams
  std::unordered_map<RequestId, uint64_t> beam_root_;  // beam (live or finishing) -> root
  std::unordered_set<RequestId> pruned_;  // beams dropped, until their finish is seen
  // Requests asking for prompt logprobs (root request -> top-k asked, and the entries so far:
  // entry i is prompt token i + 1's), until their first output hands them over.
  struct PromptLogprobs {
    int top_k = 0;
    std::vector<TokenLogprobs> entries;
    bool reported = false;
  };
  std::unordered_map<uint64_t, PromptLogprobs> prompt_logprobs_;
  // Per-step scratch: the logits rows of prompt positions (chunk, row in the logits, prompt index).
  struct PromptRow {
    size_t chunk;
    int32_t logits_index;
    int target;
  };
  std::vector<PromptRow> prompt_rows_;
  std::vector<int32_t> sample_rows_;  // per chunk: its sampling row's index in the logits, or -1
  // Logprobs of tokens sampled this step, until make_output hands them over.
  std::map<std::pair<uint64_t, int>, std::vector<TokenLogprobs>> pending_logprobs_;
  std::unordered_map<RequestId, Timing> timing_;
  uint64_t next_id_ = 1;
  EngineStats stats_;
  // Per-step scratch.
  std::vector<float> adjusted_logits_;
  std::vector<TokenId> banned_tokens_;
  std::vector<uint32_t> grammar_mask_;
  std::vector<TokenId> tokens_;
  std::vector<int32_t> positions_, query_start_, context_lens_, batch_tables_, logits_rows_;
  std::vector<int64_t> slots_;
  // KV-cache groups 1.. (sliding-window layers): per-step tables, slots and their batch views.
  std::vector<std::vector<int32_t>> group_tables_;
  std::vector<std::vector<int64_t>> group_slots_;
  std::vector<KVGroupTables> group_batches_;
  // Last: destroyed first, while the arena and the manager it copies from still exist.
  std::unique_ptr<TieredKVCache> tiers_;
  // The grammar mask worker (grammar_mask_overlap), from the first constrained step on; per
  // chunk of the step, the index of its posted job or -1. Its thread reads matchers_' entries
  // only between post_grammar_masks and wait_grammar_masks, within one step().
  std::unique_ptr<GrammarMaskWorker> mask_worker_;
  std::vector<int> mask_job_of_chunk_;
};

// A digest of a model's shape and weights: part of the disk tier's fingerprint, so blocks written
// by another model (or another checkpoint at the same path) are never used.
uint64_t model_weights_digest(const Model& model);

}  // namespace pagedkv
