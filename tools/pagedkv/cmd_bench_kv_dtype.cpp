// pagedkv bench kv-dtype: how much a KV-cache format changes a model's predictions, measured
// against the same model with an f32 KV cache (llama.cpp's KL-divergence method).
//   1. text: --sequences sequences of --length tokens, sampled from the model itself with the f32
//      cache (temperature 1, seeds --seed, --seed + 1, ...), from BOS;
//   2. teacher forcing: each format reads every sequence, one token per step (the decode path;
//      --mode prefill runs a sequence as one chunk instead), and the next-token distribution at
//      every position is compared with the f32 cache's: KL(P_f32 || P_format) (mean and 99.9th
//      percentile), top-1 agreement, the largest logit difference, and the mean negative
//      log-likelihood of the actual next token, whose exponential is the perplexity; each over
//      positions < --short-context and over the rest;
//   3. greedy decoding from the first --prompt-tokens of each golden sequence in
//      ../shared/models/golden, to the golden's length: the first position where a format's
//      output differs from the f32 cache's, and how many tokens agree.
// All formats run the same kernels as serving (the best ISA unless PAGEDKV_ISA says otherwise).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "engine_options.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/percentile.h"
#include "pagedkv/model/forward_batch.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv::cli {
namespace {

struct KVDtypeOptions {
  std::string model;  // default: ../shared/models/stories260K.bin
  bool skip_builtin = false;
  std::vector<std::string> dtypes{"int8", "fp8", "fp16", "bf16"};
  int sequences = 200;
  int length = 0;  // default: the model's seq_len, at most 1024
  int short_context = 128;
  int batch = 25;  // sequences run side by side, one decode token each per step
  int block_size = 16;
  int prompt_tokens = 8;
  uint64_t seed = 1;
  std::string mode = "decode";
  bool json = false;
};

// Runs groups of equal-length sequences through a runner, one position per step for all of
// them (decode) or each sequence as one chunk (prefill), over an arena of one dtype. A model with
// several KV-cache groups (gemma2's sliding layers) gets a full table per group: group g's
// blocks are group 0's shifted by g x group_blocks_ (sliding layers read their window only).
class Lockstep {
 public:
  Lockstep(const ModelRunner& runner, DType dtype, int num_sequences, int length, int block_size)
      : blocks_per_sequence_((length + block_size - 1) / block_size),
        block_size_(block_size),
        groups_(runner.config().num_kv_cache_groups()),
        group_blocks_(num_sequences * blocks_per_sequence_),
        arena_(runner.kv_cache_spec(block_size, dtype), runner.config().kv_arena_layers(), groups_ * group_blocks_ + 1),
        builder_(block_size) {
    tables_.resize(static_cast<size_t>(num_sequences));
    for (int s = 0; s < num_sequences; ++s)
      for (int b = 0; b < blocks_per_sequence_; ++b)
        tables_[static_cast<size_t>(s)].push_back(1 + s * blocks_per_sequence_ + b);
  }

  // One decode step: token tokens[s] at `position` for every sequence; logits row s is sequence s.
  Logits step(ModelRunner& runner, const std::vector<TokenId>& tokens, int position) {
    builder_.clear();
    for (size_t s = 0; s < tokens.size(); ++s)
      builder_.add_request(std::span(&tokens[s], 1), position, tables_[s], true);
    ForwardBatch batch = builder_.batch();
    add_groups(batch);
    return runner.forward(batch, arena_);
  }

  // A whole sequence as one chunk, with the logits of every position.
  Logits prefill(ModelRunner& runner, int sequence, std::span<const TokenId> tokens) {
    builder_.clear();
    builder_.add_request(tokens, 0, tables_[static_cast<size_t>(sequence)], true);
    ForwardBatch batch = builder_.batch();
    rows_.resize(tokens.size());
    for (size_t i = 0; i < rows_.size(); ++i) rows_[i] = static_cast<int32_t>(i);
    batch.logits_rows = rows_;
    add_groups(batch);
    return runner.forward(batch, arena_);
  }

 private:
  void add_groups(ForwardBatch& batch) {
    if (groups_ == 1) return;
    const size_t entries = static_cast<size_t>(batch.attention.num_requests) * batch.attention.block_table_stride;
    group_tables_.resize(static_cast<size_t>(groups_ - 1));
    group_slots_.resize(static_cast<size_t>(groups_ - 1));
    extra_.clear();
    for (int g = 1; g < groups_; ++g) {
      auto& table = group_tables_[static_cast<size_t>(g - 1)];
      auto& slots = group_slots_[static_cast<size_t>(g - 1)];
      table.assign(batch.attention.block_tables, batch.attention.block_tables + entries);
      for (int32_t& b : table) b = b == 0 ? 0 : b + g * group_blocks_;  // the null block stays
      slots.assign(batch.slot_mapping.begin(), batch.slot_mapping.end());
      for (int64_t& slot : slots)
        if (slot >= 0) slot += static_cast<int64_t>(g) * group_blocks_ * block_size_;
      extra_.push_back(KVGroupTables{table.data(), batch.attention.block_table_stride, slots});
    }
    batch.extra_groups = extra_;
  }

  int blocks_per_sequence_;
  int block_size_;
  int groups_;
  int group_blocks_;  // blocks of one group's tables, all sequences
  KVArena arena_;
  ForwardBatchBuilder builder_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> rows_;
  std::vector<std::vector<int32_t>> group_tables_;
  std::vector<std::vector<int64_t>> group_slots_;
  std::vector<KVGroupTables> extra_;
};

// log-softmax in double.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_sum = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_sum;
}

struct Comparison {
  std::vector<double> kl;
  std::vector<double> flip_margins;  // the f32 logits' top-2 margin where the format's top-1 differs
  long long agree = 0, positions = 0;
  double nll_ref = 0, nll = 0, max_logit_diff = 0;

  void add(std::span<const float> ref, std::span<const float> got, TokenId next, std::vector<double>& lp_ref,
           std::vector<double>& lp) {
    log_softmax(ref, lp_ref);
    log_softmax(got, lp);
    double kl_sum = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      kl_sum += std::exp(lp_ref[i]) * (lp_ref[i] - lp[i]);
      max_logit_diff = std::max(max_logit_diff, std::fabs(static_cast<double>(ref[i]) - got[i]));
    }
    kl.push_back(std::max(0.0, kl_sum));
    const TokenId top = Sampler::argmax(ref);
    if (top == Sampler::argmax(got)) {
      ++agree;
    } else {
      float second = -std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < ref.size(); ++i)
        if (static_cast<TokenId>(i) != top) second = std::max(second, ref[i]);
      flip_margins.push_back(static_cast<double>(ref[static_cast<size_t>(top)]) - second);
    }
    ++positions;
    nll_ref -= lp_ref[static_cast<size_t>(next)];
    nll -= lp[static_cast<size_t>(next)];
  }

  nlohmann::json report() const {
    std::vector<double> sorted = kl;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (double x : kl) mean += x;
    const auto n = static_cast<double>(std::max<long long>(1, positions));
    const double p999 = percentile_of_sorted(sorted, 99.9);
    const double ppl_ref = std::exp(nll_ref / n), ppl = std::exp(nll / n);
    std::vector<double> margins = flip_margins;
    std::sort(margins.begin(), margins.end());
    return {{"positions", positions},
            {"kl_mean", mean / n},
            {"kl_p999", p999},
            {"top1_agreement", static_cast<double>(agree) / n},
            {"max_logit_diff", max_logit_diff},
            {"mean_nll_f32", nll_ref / n},
            {"mean_nll", nll / n},
            {"perplexity_f32", ppl_ref},
            {"perplexity", ppl},
            {"perplexity_change", ppl / ppl_ref - 1},
            {"top1_flips", static_cast<long long>(margins.size())},
            {"flip_margin_median", percentile_of_sorted(margins, 50)},
            {"flip_margin_p90", percentile_of_sorted(margins, 90)},
            {"flip_margin_max", margins.empty() ? 0.0 : margins.back()}};
  }
};

std::vector<TokenId> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<TokenId> ids;
  int x;
  while (in >> x) ids.push_back(x);
  return ids;
}

// Greedy decoding of `length` tokens after `prompt` with one dtype.
std::vector<TokenId> greedy(ModelRunner& runner, DType dtype, const std::vector<TokenId>& prompt, int length,
                            int block_size) {
  Lockstep run(runner, dtype, 1, length, block_size);
  std::vector<TokenId> out = prompt;
  for (int p = 0; p + 1 < length; ++p) {
    const Logits l = run.step(runner, {out[static_cast<size_t>(p)]}, p);
    if (p + 1 < static_cast<int>(out.size())) continue;  // still in the prompt
    out.push_back(Sampler::argmax(l.row(0)));
  }
  return out;
}

nlohmann::json measure_model(const Model& model, const KVDtypeOptions& o, const std::vector<DType>& dtypes) {
  ModelRunner runner(model);
  const ModelConfig& c = model.config();
  const int length = o.length > 0 ? std::min(o.length, c.seq_len) : std::min(c.seq_len, 1024);
  const int vocab = c.vocab_size;
  nlohmann::json out;
  out["config"] = c.describe();
  out["length"] = length;
  out["sequences"] = o.sequences;
  out["mode"] = o.mode;

  // 1. Text, sampled with the f32 cache, `batch` sequences side by side.
  std::vector<std::vector<TokenId>> text;
  for (int first = 0; first < o.sequences; first += o.batch) {
    const int n = std::min(o.batch, o.sequences - first);
    Lockstep run(runner, DType::kF32, n, length, o.block_size);
    std::vector<Sampler> samplers;
    for (int s = 0; s < n; ++s) {
      SamplingParams params;  // temperature 1, no top-k / top-p
      params.seed = o.seed + static_cast<uint64_t>(first + s);
      samplers.emplace_back(vocab, params);
    }
    std::vector<std::vector<TokenId>> seqs(static_cast<size_t>(n), std::vector<TokenId>{Tokenizer::kBos});
    std::vector<TokenId> step_tokens(static_cast<size_t>(n));
    for (int p = 0; p + 1 < length; ++p) {
      for (int s = 0; s < n; ++s) step_tokens[static_cast<size_t>(s)] = seqs[static_cast<size_t>(s)].back();
      const Logits l = run.step(runner, step_tokens, p);
      for (int s = 0; s < n; ++s) {
        const auto i = static_cast<size_t>(s);
        seqs[i].push_back(samplers[i].sample(l.row(s)));
      }
    }
    for (auto& s : seqs) text.push_back(std::move(s));
  }

  // 2. Teacher forcing: logits of every position under f32 and under each format.
  std::vector<Comparison> short_ctx(dtypes.size()), long_ctx(dtypes.size());
  std::vector<double> lp_ref, lp;
  for (int first = 0; first < o.sequences; first += o.batch) {
    const int n = std::min(o.batch, o.sequences - first);
    // logits[s][p] of every format: [sequence][position][vocab], f32 reference first.
    const auto positions = static_cast<size_t>(length - 1), width = static_cast<size_t>(vocab);
    auto at = [&](int s, int p) { return (static_cast<size_t>(s) * positions + static_cast<size_t>(p)) * width; };
    auto all_logits = [&](DType dtype) {
      std::vector<float> logits(static_cast<size_t>(n) * positions * width);
      Lockstep run(runner, dtype, n, length, o.block_size);
      auto store = [&](int s, int p, std::span<const float> row) {
        std::copy(row.begin(), row.end(), logits.begin() + static_cast<std::ptrdiff_t>(at(s, p)));
      };
      if (o.mode == "prefill") {
        for (int s = 0; s < n; ++s) {
          const auto& seq = text[static_cast<size_t>(first + s)];
          const Logits l = run.prefill(runner, s, std::span(seq).first(static_cast<size_t>(length - 1)));
          for (int p = 0; p + 1 < length; ++p) store(s, p, l.row(p));
        }
      } else {
        std::vector<TokenId> step_tokens(static_cast<size_t>(n));
        for (int p = 0; p + 1 < length; ++p) {
          for (int s = 0; s < n; ++s)
            step_tokens[static_cast<size_t>(s)] = text[static_cast<size_t>(first + s)][static_cast<size_t>(p)];
          const Logits l = run.step(runner, step_tokens, p);
          for (int s = 0; s < n; ++s) store(s, p, l.row(s));
        }
      }
      return logits;
    };
    const std::vector<float> ref = all_logits(DType::kF32);
    for (size_t d = 0; d < dtypes.size(); ++d) {
      const std::vector<float> got = all_logits(dtypes[d]);
      for (int s = 0; s < n; ++s)
        for (int p = 0; p + 1 < length; ++p) {
          const TokenId next = text[static_cast<size_t>(first + s)][static_cast<size_t>(p + 1)];
          Comparison& cmp = p < o.short_context ? short_ctx[d] : long_ctx[d];
          cmp.add(std::span(ref).subspan(at(s, p), width), std::span(got).subspan(at(s, p), width), next, lp_ref, lp);
        }
    }
  }
  for (size_t d = 0; d < dtypes.size(); ++d) {
    out["teacher_forced"].push_back({{"dtype", dtype_name(dtypes[d])},
                                     {"positions_below", o.short_context},
                                     {"short", short_ctx[d].report()},
                                     {"long", long_ctx[d].report()}});
  }

  // 3. Greedy decoding from the goldens' prompts.
  const std::string golden = default_shared_dir() + "/models/golden";
  if (std::filesystem::is_directory(golden) && c.vocab_size == 512) {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(golden))
      if (e.path().extension() == ".ids") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      const std::vector<TokenId> ids = read_ids(f);
      const int n = std::min(static_cast<int>(ids.size()), c.seq_len);
      const std::vector<TokenId> prompt(ids.begin(), ids.begin() + std::min(n, o.prompt_tokens));
      const std::vector<TokenId> ref = greedy(runner, DType::kF32, prompt, n, o.block_size);
      for (DType dtype : dtypes) {
        const std::vector<TokenId> got = greedy(runner, dtype, prompt, n, o.block_size);
        int first_diff = -1, same = 0;
        for (int p = 0; p < n; ++p) {
          if (got[static_cast<size_t>(p)] == ref[static_cast<size_t>(p)]) ++same;
          else if (first_diff < 0) first_diff = p;
        }
        out["greedy"].push_back({{"golden", std::filesystem::path(f).filename().string()},
                                 {"dtype", dtype_name(dtype)},
                                 {"tokens", n},
                                 {"prompt_tokens", static_cast<int>(prompt.size())},
                                 {"first_divergence", first_diff},
                                 {"same_tokens", same}});
      }
    }
  }
  return out;
}

void print_model(const std::string& name, const nlohmann::json& m) {
  fmt::print("\n{} ({}), {} sequences of {} tokens, {} mode\n", name, m["config"].get<std::string>(),
             m["sequences"].get<int>(), m["length"].get<int>(), m["mode"].get<std::string>());
  fmt::print("  {:>5} {:>10} | {:>10} {:>10} {:>8} {:>9} {:>10} {:>10}\n", "dtype", "positions", "KL mean", "KL p99.9",
             "top-1", "max dlogit", "ppl f32", "ppl change");
  for (const auto& t : m["teacher_forced"])
    for (const char* part : {"short", "long"}) {
      const auto& r = t[part];
      const int below = t["positions_below"].get<int>();
      const std::string range = std::string(part) == "short" ? fmt::format("< {}", below) : fmt::format(">= {}", below);
      fmt::print("  {:>5} {:>10} | {:>10.3e} {:>10.3e} {:>7.3f}% {:>9.4f} {:>10.4f} {:>+9.4f}%\n",
                 t["dtype"].get<std::string>(), range, r["kl_mean"].get<double>(), r["kl_p999"].get<double>(),
                 100 * r["top1_agreement"].get<double>(), r["max_logit_diff"].get<double>(),
                 r["perplexity_f32"].get<double>(), 100 * r["perplexity_change"].get<double>());
    }
  fmt::print("  top-1 flips: the f32 logits' margin between its top two tokens where the format's top-1 differs\n");
  for (const auto& t : m["teacher_forced"])
    for (const char* part : {"short", "long"}) {
      const auto& r = t[part];
      const int below = t["positions_below"].get<int>();
      const std::string range = std::string(part) == "short" ? fmt::format("< {}", below) : fmt::format(">= {}", below);
      fmt::print("  {:>5} {:>10} | {:>6} flips, margin median {:.4f}, p90 {:.4f}, max {:.4f}\n",
                 t["dtype"].get<std::string>(), range, r["top1_flips"].get<long long>(),
                 r["flip_margin_median"].get<double>(), r["flip_margin_p90"].get<double>(),
                 r["flip_margin_max"].get<double>());
    }
  if (m.contains("greedy")) {
    fmt::print("  greedy from the goldens' prompts, against the f32 cache:\n");
    for (const auto& g : m["greedy"]) {
      const int first = g["first_divergence"].get<int>();
      fmt::print("    {:<28} {:>5}: {:>4}/{} tokens equal, first divergence {}\n", g["golden"].get<std::string>(),
                 g["dtype"].get<std::string>(), g["same_tokens"].get<int>(), g["tokens"].get<int>(),
                 first < 0 ? std::string("none") : std::to_string(first));
    }
  }
}

int run_bench_kv_dtype(const KVDtypeOptions& o) {
  if (o.sequences <= 0 || o.batch <= 0 || o.block_size <= 0 || o.length < 0 || o.length == 1)
    throw ConfigError("bench kv-dtype: --sequences, --batch and --block-size must be positive, --length >= 2");
  if (o.mode != "decode" && o.mode != "prefill")
    throw ConfigError(fmt::format("bench kv-dtype: --mode must be decode or prefill, got '{}'", o.mode));
  std::vector<DType> dtypes;
  for (const auto& name : o.dtypes) {
    const auto t = parse_dtype(name);
    if (!t || !is_storage_dtype(*t))
      throw ConfigError(fmt::format("--kv-dtypes: '{}' is not fp32, fp16, bf16, int8 or fp8", name));
    dtypes.push_back(*t);
  }
  struct Named {
    std::string name;
    std::unique_ptr<Model> model;
  };
  std::vector<Named> models;
  const std::string checkpoint = o.model.empty() ? default_shared_dir() + "/models/stories260K.bin" : o.model;
  if (std::filesystem::exists(checkpoint))
    models.push_back({std::filesystem::path(checkpoint).stem().string(),
                      GgufFile::has_gguf_magic(checkpoint)
                          ? std::unique_ptr<Model>(std::make_unique<GgufModel>(checkpoint))
                          : std::make_unique<Llama2cCheckpoint>(checkpoint)});
  else if (!o.model.empty()) throw ConfigError(fmt::format("--model '{}' does not exist", o.model));
  else fmt::print(stderr, "bench kv-dtype: {} not found; only the built-in model runs\n", checkpoint);
  if (!o.skip_builtin) models.push_back({"builtin", make_random_model(builtin_random_model_config(), 7)});

  nlohmann::json report;
  for (const Named& m : models) {
    nlohmann::json r = measure_model(*m.model, o, dtypes);
    r["model"] = m.name;
    if (!o.json) print_model(m.name, r);
    report["models"].push_back(std::move(r));
  }
  if (o.json) fmt::print("{}\n", report.dump(2));
  return 0;
}

const CommandRegistration kBenchKvDtypeCommand{Command{
    "bench kv-dtype", "KV-cache formats against an f32 cache: KL divergence, top-1, perplexity, greedy divergence",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<KVDtypeOptions>();
      sub.add_option("--model", o->model,
                     "llama2.c checkpoint or GGUF model (default: ../shared/models/stories260K.bin if present)");
      sub.add_flag("--skip-builtin", o->skip_builtin, "only the checkpoint");
      sub.add_option("--kv-dtypes", o->dtypes, "formats compared with fp32")->delimiter(',')->capture_default_str();
      sub.add_option("--sequences", o->sequences, "sampled sequences (teacher-forced text)")->capture_default_str();
      sub.add_option("--length", o->length, "tokens per sequence (default: the model's context, at most 1024)");
      sub.add_option("--short-context", o->short_context, "positions below this are reported apart")
          ->capture_default_str();
      sub.add_option("--batch", o->batch, "sequences run side by side")->capture_default_str();
      sub.add_option("--block-size", o->block_size, "tokens per KV block")->capture_default_str();
      sub.add_option("--prompt-tokens", o->prompt_tokens, "greedy runs: golden tokens forced as the prompt")
          ->capture_default_str();
      sub.add_option("--seed", o->seed, "seed of the first sampled sequence")->capture_default_str();
      sub.add_option("--mode", o->mode, "teacher forcing one token per step (decode) or one chunk (prefill)")
          ->capture_default_str();
      sub.add_flag("--json", o->json, "print the results as JSON");
      return [o] { return run_bench_kv_dtype(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
