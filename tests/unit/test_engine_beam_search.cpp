// Beam search in the engine against a straightforward reference over the same model: the
// reference recomputes every candidate prefix from scratch (its own engine, one request per
// prefix, no forks, no sharing) and keeps the best `width` sequences each step; the engine's
// beams share blocks through fork / copy-on-write and free dropped beams' blocks. Both must
// pick the same sequences with the same scores; with a width covering every prefix, beam search
// is exhaustive and must equal the brute-force top sequences.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <memory>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/beam_search.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/random_model.h"

namespace pagedkv {
namespace {

constexpr int kVocab = 6;

ModelConfig tiny_config() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.vocab_size = kVocab;
  c.seq_len = 64;
  c.shared_classifier = true;
  return c;
}

struct Hypothesis {
  std::vector<TokenId> output;
  double score = 0;
};

EngineConfig engine_config(int num_blocks, bool prefix_caching) {
  EngineConfig c;
  c.block_size = 4;  // forks mid-block: copy-on-write
  c.num_blocks = num_blocks;
  c.swap_space_bytes = 0;
  c.enable_prefix_caching = prefix_caching;
  c.check_invariants = true;
  c.scheduler.max_num_batched_tokens = 64;
  return c;
}

// log_softmax of the model's next-token logits after `sequence`, from a fresh computation.
class Reference {
 public:
  explicit Reference(const Model& model) : model_(model) {}
  std::vector<double> next_logprobs(const std::vector<TokenId>& sequence) {
    if (auto it = memo_.find(sequence); it != memo_.end()) return it->second;
    LLMEngine engine(model_, engine_config(64, false));
    GenerationRequest g;
    g.prompt = sequence;
    g.sampling.temperature = 0;
    g.stop.max_tokens = 1;
    g.logprobs = kVocab;
    engine.add_request(std::move(g));
    const std::vector<RequestOutput> out = engine.run_to_completion();
    EXPECT_EQ(out.size(), 1u);
    std::vector<double> lp(kVocab, 0);
    for (const TokenLogprob& t : out.at(0).new_logprobs.at(0).top) lp[static_cast<size_t>(t.token)] = t.logprob;
    return memo_[sequence] = lp;
  }

 private:
  const Model& model_;
  std::map<std::vector<TokenId>, std::vector<double>> memo_;
};

// Fixed-length beam search the plain way: expand every kept sequence by every token, sort, keep.
std::vector<Hypothesis> reference_beam_search(Reference& ref, const std::vector<TokenId>& prompt, int width,
                                              int length) {
  std::vector<Hypothesis> beams{{{}, 0.0}};
  for (int step = 0; step < length; ++step) {
    std::vector<Hypothesis> next;
    for (const Hypothesis& h : beams) {
      std::vector<TokenId> seq = prompt;
      seq.insert(seq.end(), h.output.begin(), h.output.end());
      const std::vector<double> lp = ref.next_logprobs(seq);
      for (int t = 0; t < kVocab; ++t) {
        Hypothesis c = h;
        c.output.push_back(t);
        c.score += lp[static_cast<size_t>(t)];
        next.push_back(std::move(c));
      }
    }
    std::stable_sort(next.begin(), next.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    next.resize(std::min<size_t>(next.size(), static_cast<size_t>(width)));
    beams = std::move(next);
  }
  return beams;
}

// Every sequence of `length` tokens, best `k` by total log-probability.
std::vector<Hypothesis> brute_force(Reference& ref, const std::vector<TokenId>& prompt, int length, int k) {
  std::vector<Hypothesis> all{{{}, 0.0}};
  for (int step = 0; step < length; ++step) {
    std::vector<Hypothesis> next;
    for (const Hypothesis& h : all) {
      std::vector<TokenId> seq = prompt;
      seq.insert(seq.end(), h.output.begin(), h.output.end());
      const std::vector<double> lp = ref.next_logprobs(seq);
      for (int t = 0; t < kVocab; ++t)
        next.push_back({[&] {
                          auto o = h.output;
                          o.push_back(t);
                          return o;
                        }(),
                        h.score + lp[static_cast<size_t>(t)]});
    }
    all = std::move(next);
  }
  std::stable_sort(all.begin(), all.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  all.resize(static_cast<size_t>(k));
  return all;
}

struct EngineRun {
  std::map<uint64_t, std::vector<RequestOutput>> by_request;  // hypotheses best first
  int64_t cow_copies = 0;
  uint64_t preemptions = 0;
  double max_sharing = 0;  // the largest 1 - blocks in use / blocks the running tables name
};

EngineRun run_engine(const Model& model, const std::vector<std::vector<TokenId>>& prompts, int width, int length,
                     int num_blocks, bool prefix_caching) {
  LLMEngine engine(model, engine_config(num_blocks, prefix_caching));
  std::vector<RequestId> ids;
  for (const auto& p : prompts) {
    GenerationRequest g;
    g.prompt = p;
    g.beam_width = width;
    g.stop.max_tokens = length;
    ids.push_back(engine.add_request(std::move(g)));
  }
  EngineRun run;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      EXPECT_TRUE(o.finished) << "beam search reports only at the end";
      const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
      run.by_request[root].push_back(std::move(o));
    }
    int64_t named = 0;
    for (const SchedulerRequest* r : engine.scheduler().running())
      named += static_cast<int64_t>(engine.scheduler().block_ids(*r).size());
    const int in_use = engine.manager().pool().num_usable_blocks() - engine.manager().num_free_blocks();
    if (named > 0)
      run.max_sharing = std::max(run.max_sharing, 1.0 - static_cast<double>(in_use) / static_cast<double>(named));
  }
  // Every beam's blocks came back: no request holds any, all blocks are free (or cached-free).
  EXPECT_EQ(engine.manager().num_requests(), 0);
  EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
  engine.check_invariants();
  run.cow_copies = static_cast<int64_t>(engine.stats().cow_copies);
  run.preemptions = engine.scheduler().stats().preemptions_recompute;
  for (RequestId id : ids) EXPECT_TRUE(run.by_request.contains(id.value)) << id.value;
  return run;
}

void expect_same(const std::vector<RequestOutput>& got, const std::vector<Hypothesis>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sample_index, static_cast<int>(i)) << what;
    EXPECT_EQ(got[i].output, want[i].output) << what << " hypothesis " << i;
    EXPECT_NEAR(got[i].cumulative_logprob, want[i].score, 1e-4) << what << " hypothesis " << i;
    EXPECT_EQ(got[i].finish_reason, FinishReason::kLength) << what;
  }
}

std::vector<std::vector<TokenId>> prompts() {
  return {{1, 2, 3, 4, 5}, {3, 1, 4, 1, 5, 2, 0}, {2}, {5, 5, 5, 0, 1, 2, 3, 4, 0}};
}

TEST(BeamSearch, SelectBeamsKeepsTheBestByCumulativeScoreWithStableTies) {
  // Exact binary fractions: beam 0 token 0 and beam 1 tokens 0 and 1 all score -1.25.
  const std::vector<double> cumulative{-1.0, -0.5};
  const std::vector<std::vector<double>> rows{{-0.25, -2.0, -0.75}, {-0.75, -0.75, -3.0}};
  const std::vector<BeamCandidate> c = select_beams(cumulative, rows, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(std::pair(c[0].beam, c[0].token), std::pair(0, 0));
  EXPECT_EQ(c[0].score, -1.25);
  EXPECT_EQ(std::pair(c[1].beam, c[1].token), std::pair(1, 0));
  EXPECT_EQ(std::pair(c[2].beam, c[2].token), std::pair(1, 1));
  EXPECT_EQ(select_beams(cumulative, rows, 10).size(), 6u);  // every candidate, no more
  EXPECT_THROW(select_beams(cumulative, rows, 0), UsageError);
  EXPECT_THROW(select_beams(std::vector<double>{0.0}, rows, 2), UsageError);
  std::vector<double> lp;
  log_softmax(std::vector<float>{0.f, 0.f}, lp);
  EXPECT_NEAR(lp[0], std::log(0.5), 1e-12);
}

TEST(BeamSearch, MatchesAStraightforwardBeamSearchOverTheSameModel) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  Reference ref(*model);
  const int length = 6;
  for (int width : {2, 3, 5}) {
    for (bool caching : {false, true}) {
      const EngineRun run = run_engine(*model, prompts(), width, length, 256, caching);
      EXPECT_GT(run.cow_copies, 0) << "beams forked mid-block";
      EXPECT_GT(run.max_sharing, 0.3) << "beams share their common blocks";
      const auto ps = prompts();
      for (size_t i = 0; i < ps.size(); ++i) {
        const uint64_t root = i + 1;  // ids are handed out in order from 1
        expect_same(run.by_request.at(root), reference_beam_search(ref, ps[i], width, length),
                    fmt::format("width {} caching {} prompt {}", width, caching, i));
      }
    }
  }
}

TEST(BeamSearch, WideEnoughBeamIsTheBruteForceTopK) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 5);
  Reference ref(*model);
  // Width 36 = every prefix of 2 tokens: nothing is pruned before the last step.
  const std::vector<TokenId> prompt{4, 2, 0};
  const EngineRun run = run_engine(*model, {prompt}, 36, 3, 256, false);
  expect_same(run.by_request.at(1), brute_force(ref, prompt, 3, 36), "width 36");
}

TEST(BeamSearch, UnderMemoryPressureBeamsArePreemptedAndStillAgree) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  Reference ref(*model);
  const int width = 4, length = 10;
  // 4 prompts x 4 beams x up to 5 blocks each do not fit in 40 blocks: beams are preempted
  // (recompute) while their siblings hold their next-token scores.
  const EngineRun run = run_engine(*model, prompts(), width, length, 41, false);
  EXPECT_GT(run.preemptions, 0u);
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i)
    expect_same(run.by_request.at(i + 1), reference_beam_search(ref, ps[i], width, length),
                fmt::format("prompt {}", i));
}

// Many width-4 beam searches arriving at once into a pool that holds a few of them: beams are
// preempted while their siblings hold their next-token scores (and their blocks). Once every
// running beam is such a held one and the pool has no room for the preempted sibling at the head
// of the queue, a step schedules nothing; the scheduler must make room, or the engine steps
// forever without progress. Bounded: a stall fails the step limit instead of hanging.
TEST(BeamSearch, ManyBeamSearchesArrivingAtOnceDoNotStall) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  Reference ref(*model);
  const int width = 4, length = 12;
  uint64_t held_preemptions = 0;
  for (const int num_blocks : {25, 33, 49}) {
    LLMEngine engine(*model, engine_config(num_blocks, false));
    std::vector<RequestId> ids;
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 12; ++i) {
      GenerationRequest g;
      g.prompt = {static_cast<TokenId>(i % kVocab), static_cast<TokenId>((i * 5 + 1) % kVocab), 2, 3, 4, 1};
      g.prompt.resize(static_cast<size_t>(2 + i % 5));
      g.beam_width = width;
      g.stop.max_tokens = length;
      prompts.push_back(g.prompt);
      ids.push_back(engine.add_request(std::move(g)));
    }
    std::map<uint64_t, std::vector<RequestOutput>> hypotheses;
    int steps = 0, idle_steps = 0, longest_idle = 0;
    constexpr int kStepLimit = 20000;
    while (engine.has_unfinished() && steps < kStepLimit) {
      const uint64_t tokens_before = engine.stats().output_tokens + engine.stats().prompt_tokens_computed;
      for (RequestOutput& o : engine.step()) {
        ASSERT_TRUE(o.finished);
        EXPECT_NE(o.finish_reason, FinishReason::kRejected) << "a group of 4 beams fits in " << num_blocks << " blocks";
        const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
        hypotheses[root].push_back(std::move(o));
      }
      ++steps;
      const bool idle = engine.stats().output_tokens + engine.stats().prompt_tokens_computed == tokens_before;
      idle_steps = idle ? idle_steps + 1 : 0;
      longest_idle = std::max(longest_idle, idle_steps);
    }
    EXPECT_FALSE(engine.has_unfinished())
        << num_blocks << " blocks: stalled after " << steps << " steps, " << engine.scheduler().num_running()
        << " running, the last " << idle_steps << " steps computed nothing";
    EXPECT_LE(longest_idle, 1) << num_blocks << " blocks: consecutive steps that computed nothing";
    EXPECT_GT(engine.scheduler().stats().preemptions_recompute, 0u) << num_blocks << " blocks";
    held_preemptions += engine.scheduler().stats().held_preemptions;
    EXPECT_EQ(engine.scheduler().stats().held_beams_rejected, 0u);
    // Preempting held beams (and recomputing them) changes no hypothesis.
    for (size_t i = 0; i < ids.size(); ++i)
      expect_same(hypotheses[ids[i].value], reference_beam_search(ref, prompts[i], width, length),
                  fmt::format("{} blocks, request {}", num_blocks, i));
    EXPECT_EQ(engine.manager().num_requests(), 0);
    EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
  }
  EXPECT_GT(held_preemptions, 0u) << "the pools are small enough that held beams had to make way";
}

// A beam search whose beams cannot all be in the pool at once (6 beams of up to 62 tokens, 16
// blocks each, in 24 blocks) cannot advance: it ends rejected instead of stepping forever.
TEST(BeamSearch, BeamsThatCannotAllFitAreRejectedNotStalled) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  LLMEngine engine(*model, engine_config(25, false));
  GenerationRequest g;
  g.prompt = {1, 2};
  g.beam_width = 6;
  g.stop.max_tokens = 60;
  const RequestId id = engine.add_request(std::move(g));
  std::vector<RequestOutput> out;
  for (int steps = 0; engine.has_unfinished() && steps < 5000; ++steps)
    for (RequestOutput& o : engine.step()) out.push_back(std::move(o));
  ASSERT_FALSE(engine.has_unfinished()) << "stalled";
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, id);
  EXPECT_EQ(out[0].finish_reason, FinishReason::kRejected);
  EXPECT_EQ(engine.scheduler().stats().held_beams_rejected, 1u);
  EXPECT_EQ(engine.manager().num_requests(), 0);
  EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
}

TEST(BeamSearch, StopTokenEndsAHypothesisAndNarrowsTheBeam) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  LLMEngine engine(*model, engine_config(128, true));
  GenerationRequest g;
  g.prompt = {1, 2, 3};
  g.beam_width = 4;
  g.stop.max_tokens = 8;
  g.stop.eos_token_id = 0;  // a likely token over 6: some beam stops early
  engine.add_request(std::move(g));
  const std::vector<RequestOutput> out = engine.run_to_completion();
  ASSERT_EQ(out.size(), 4u);
  int stopped = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(out[i - 1].cumulative_logprob, out[i].cumulative_logprob);
    }
    if (out[i].finish_reason == FinishReason::kStop) {
      ++stopped;
      EXPECT_LT(out[i].output.size(), 8u);
      EXPECT_EQ(std::count(out[i].output.begin(), out[i].output.end(), 0), 0) << "the stop token is not output";
    }
  }
  EXPECT_GT(stopped, 0);
  EXPECT_EQ(engine.manager().num_requests(), 0);
}

TEST(BeamSearch, AbortEndsEveryBeamAndBadRequestsAreClearErrors) {
  const std::unique_ptr<Model> model = make_random_model(tiny_config(), 11);
  LLMEngine engine(*model, engine_config(128, false));
  GenerationRequest g;
  g.prompt = {1, 2, 3};
  g.beam_width = 3;
  g.stop.max_tokens = 20;
  const RequestId id = engine.add_request(g);
  for (int i = 0; i < 4; ++i) engine.step();
  EXPECT_GT(engine.scheduler().num_running(), 1);
  EXPECT_TRUE(engine.abort_request(id));
  EXPECT_FALSE(engine.has_unfinished());
  const std::vector<RequestOutput> out = engine.step();  // reports the abort
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, id);
  EXPECT_EQ(out[0].finish_reason, FinishReason::kAborted);
  EXPECT_EQ(engine.manager().num_requests(), 0);
  EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());

  GenerationRequest bad = g;
  bad.beam_width = 0;
  EXPECT_THROW(engine.add_request(bad), UsageError);
  bad.beam_width = 2;
  bad.n = 2;
  EXPECT_THROW(engine.add_request(bad), UsageError);
  bad.n = 1;
  bad.logprobs = 1;
  EXPECT_THROW(engine.add_request(bad), UsageError);
  EngineConfig oracle = engine_config(128, false);
  oracle.scheduler.kv_reservation = KVReservation::kOracle;
  LLMEngine reserved(*model, oracle);
  EXPECT_THROW(reserved.add_request(g), UsageError);
}

}  // namespace
}  // namespace pagedkv
