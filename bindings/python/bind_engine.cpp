// The engine from Python with vLLM's offline API: LLM(model=..., tokenizer=...).generate(prompts,
// SamplingParams(...)) returns RequestOutputs holding CompletionOutputs; LLM.stream() yields them
// as they progress, step by step; add_request/step/has_unfinished_requests drive it by hand
// (vLLM's LLMEngine loop). Forward passes run with the GIL released; a mutex keeps two Python
// threads from stepping one engine at once.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/model/tokenizer/bpe_pretokenizer.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "pagedkv/remote/redis_store.h"
#include "pagedkv/storage/kv_arena.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

// vLLM's SamplingParams, restricted to what the engine implements.
struct PySamplingParams {
  int n = 1;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1: off
  std::optional<uint64_t> seed;  // None: 0, which the sampler replaces by a fixed constant
  int max_tokens = 16;
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
};

struct CompletionOutput {
  int index = 0;
  std::string text;
  std::vector<TokenId> token_ids;
  std::optional<std::string> finish_reason;  // None while running; "stop", "length", "abort", "rejected"
  std::optional<double> cumulative_logprob;  // beam search: the hypothesis's score (else None)
};

struct RequestMetrics {
  double ttft_ms = -1, latency_ms = -1, tpot_ms = -1;
  int num_preemptions = 0;
};

struct PyRequestOutput {
  std::string request_id;
  std::optional<std::string> prompt;
  std::vector<TokenId> prompt_token_ids;
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  TierHitTokens cached_tokens_by_tier;  // the same, by the tier they were found in
  RequestMetrics metrics;  // of sample 0
};

// One prompt as the caller gave it: text (tokenized with BOS, as llama2.c's run does) or ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<TokenId> ids;
};

// A request the caller added, tracked until all its samples finish: the running output, and
// how many tokens of each sample are already rendered to text (rendering is incremental).
struct Tracked {
  PyRequestOutput out;
  int n = 1;
  bool beam_search = false;  // its hypotheses all arrive in one step, the best as sample 0
  std::vector<size_t> rendered;
  std::vector<std::string> pending;  // per sample: bytes of a character not complete yet (GGUF)
};

// The length of `bytes` without a trailing UTF-8 sequence that is unfinished but could still
// become a character (a lead byte followed by fewer continuation bytes than it announces).
size_t complete_utf8_prefix(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto b = static_cast<unsigned char>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

uint64_t byte_size_arg(const py::object& v, const char* name) {
  if (PyLong_Check(v.ptr())) {
    const long long b = v.cast<long long>();
    if (b < 0) throw ConfigError(fmt::format("{} must not be negative, got {}", name, b));
    return static_cast<uint64_t>(b);
  }
  if (PyUnicode_Check(v.ptr())) return parse_byte_size(v.cast<std::string>());
  throw ConfigError(fmt::format("{} must be a byte count or a size string like '16MiB'", name));
}

class PyLLM {
 public:
  PyLLM(const std::string& model_path, const std::optional<std::string>& tokenizer_path, EngineConfig config,
        std::optional<TokenId> eos_token_id) {
    if (GgufFile::has_gguf_magic(model_path)) {
      // A GGUF file brings its own tokenizer (unless `tokenizer` names another) and its own end
      // of generation: EOS and the end-of-turn tokens, unless eos_token_id says otherwise.
      LoadedModel loaded = load_model_file(model_path, tokenizer_path.value_or(""));
      model_ = std::move(loaded.model);
      file_tokenizer_ = std::move(loaded.tokenizer);  // null: token ids only
      eos_token_id_ = eos_token_id.value_or(file_tokenizer_ ? file_tokenizer_->eos_id() : -1);
      if (!eos_token_id && file_tokenizer_) end_of_generation_ = file_tokenizer_->end_of_generation_ids();
    } else {
      model_ = std::make_unique<Llama2cCheckpoint>(model_path);
      if (tokenizer_path) tokenizer_.emplace(*tokenizer_path, model_->config().vocab_size);
      eos_token_id_ = eos_token_id.value_or(Tokenizer::kBos);  // llama2.c's run stops on BOS
    }
    engine_ = std::make_unique<LLMEngine>(*model_, std::move(config));
  }

  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  const LLMEngine& engine() const { return *engine_; }
  LLMEngine& mutable_engine() { return *engine_; }
  std::mutex& mutex() { return mu_; }

  Prompt to_prompt(const py::handle& p) const {
    Prompt out;
    if (PyUnicode_Check(p.ptr())) {
      if (!tokenizer_ && !file_tokenizer_)
        throw UsageError("a text prompt needs a tokenizer: pass LLM(..., tokenizer=...) or token ids");
      out.text = p.cast<std::string>();
      out.ids = tokenizer_ ? tokenizer_->encode(*out.text, true, false) : file_tokenizer_->encode(*out.text, true);
    } else if (PyDict_Check(p.ptr())) {
      auto d = py::reinterpret_borrow<py::dict>(p);
      if (!d.contains("prompt_token_ids")) throw UsageError("a dict prompt needs 'prompt_token_ids'");
      out.ids = to_tokens(d["prompt_token_ids"], "prompt_token_ids");
      if (d.contains("prompt")) out.text = d["prompt"].cast<std::string>();
    } else {
      out.ids = to_tokens(p, "prompt token ids");
    }
    return out;
  }

  // Queues one request (the caller holds the mutex).
  // beam_width > 1: beam search (sampling params other than max_tokens, stop ids and ignore_eos unused).
  std::string add(Prompt prompt, const PySamplingParams& sp, int priority, const std::string& cache_salt,
                  uint64_t lora_id, int beam_width = 1) {
    GenerationRequest g;
    g.prompt = prompt.ids;
    g.sampling.temperature = sp.temperature;
    g.sampling.top_p = sp.top_p;
    g.sampling.top_k = sp.top_k < 0 ? 0 : sp.top_k;
    g.sampling.seed = sp.seed.value_or(0);
    g.stop.max_tokens = sp.max_tokens;
    g.stop.stop_token_ids = sp.stop_token_ids;
    if (!sp.ignore_eos)
      g.stop.stop_token_ids.insert(g.stop.stop_token_ids.end(), end_of_generation_.begin(), end_of_generation_.end());
    g.stop.eos_token_id = eos_token_id_;
    g.stop.ignore_eos = sp.ignore_eos;
    g.n = sp.n;
    g.beam_width = beam_width;
    g.priority = priority;
    g.cache_salt = cache_salt;
    g.lora_id = lora_id;
    const int outputs = g.num_outputs();
    if (sp.max_tokens <= 0) throw UsageError(fmt::format("max_tokens must be positive, got {}", sp.max_tokens));
    const RequestId id = engine_->add_request(std::move(g));
    Tracked t;
    t.out.request_id = std::to_string(id.value);
    t.out.prompt = std::move(prompt.text);
    t.out.prompt_token_ids = std::move(prompt.ids);
    t.n = outputs;
    t.beam_search = beam_width > 1;
    tracked_.emplace(id.value, std::move(t));
    return std::to_string(id.value);
  }

  // One engine step without the GIL; returns the root requests that progressed, as snapshots.
  std::vector<PyRequestOutput> step() {
    std::vector<RequestOutput> raw;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      raw = engine_->step();
    }
    return absorb(raw);
  }

  bool has_unfinished() {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->has_unfinished();
  }

  bool abort(const std::string& request_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->abort_request(RequestId{std::stoull(request_id)});
  }

  std::string add_locked(Prompt prompt, const PySamplingParams& sp, int priority, const std::string& cache_salt,
                         uint64_t lora_id, int beam_width = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    return add(std::move(prompt), sp, priority, cache_salt, lora_id, beam_width);
  }

 private:
  std::vector<PyRequestOutput> absorb(const std::vector<RequestOutput>& raw) {
    std::vector<uint64_t> touched;
    for (const RequestOutput& o : raw) {
      const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
      auto it = tracked_.find(root);
      if (it == tracked_.end()) continue;
      Tracked& t = it->second;
      auto& outs = t.out.outputs;
      const auto idx = static_cast<size_t>(o.sample_index);
      if (outs.size() <= idx) {
        outs.resize(idx + 1);
        t.rendered.resize(idx + 1, 0);
        t.pending.resize(idx + 1);
      }
      CompletionOutput& c = outs[idx];
      c.index = o.sample_index;
      c.token_ids = o.output;
      if (tokenizer_) {  // append the text of the tokens not rendered yet
        const auto& prompt = t.out.prompt_token_ids;
        for (size_t k = t.rendered[idx]; k < c.token_ids.size(); ++k) {
          const TokenId prev = k == 0 ? prompt.back() : c.token_ids[k - 1];
          c.text += Tokenizer::safe_piece(tokenizer_->decode(prev, c.token_ids[k]));
        }
        t.rendered[idx] = c.token_ids.size();
      } else if (file_tokenizer_) {
        // A GGUF tokenizer gives bytes: a character may arrive over several tokens, so the bytes
        // of an unfinished one wait (Python's str holds only whole characters).
        const auto& prompt = t.out.prompt_token_ids;
        std::string& pending = t.pending[idx];
        for (size_t k = t.rendered[idx]; k < c.token_ids.size(); ++k) {
          const TokenId prev = k == 0 ? (prompt.empty() ? -1 : prompt.back()) : c.token_ids[k - 1];
          pending += file_tokenizer_->decode_piece(prev, c.token_ids[k]);
        }
        t.rendered[idx] = c.token_ids.size();
        const size_t whole = o.finished ? pending.size() : complete_utf8_prefix(pending);
        c.text += sanitize_utf8(std::string_view(pending).substr(0, whole));
        pending.erase(0, whole);
      }
      if (o.finished) c.finish_reason = std::string(finish_reason_name(o.finish_reason));
      if (t.beam_search && o.finished) c.cumulative_logprob = o.cumulative_logprob;
      if (o.sample_index == 0) {
        t.out.num_cached_tokens = o.prefix_hit_tokens;
        t.out.cached_tokens_by_tier = o.hit_tokens_by_tier;
        t.out.metrics = RequestMetrics{o.ttft_ms, o.latency_ms, o.tpot_ms, o.num_preemptions};
      }
      if (std::find(touched.begin(), touched.end(), root) == touched.end()) touched.push_back(root);
    }
    std::vector<PyRequestOutput> result;
    for (uint64_t root : touched) {
      Tracked& t = tracked_.at(root);
      int done = 0;
      for (const CompletionOutput& c : t.out.outputs) done += c.finish_reason.has_value();
      const auto& first = t.out.outputs.front().finish_reason;
      // A request rejected or aborted before its samples forked never gets the other n - 1.
      const bool ended_early = first && (*first == "rejected" || *first == "abort");
      // A beam search reports all its hypotheses in one step (fewer than the width only if
      // its beams ran out of distinct continuations).
      t.out.finished = done == t.n || ended_early || (t.beam_search && first.has_value());
      result.push_back(t.out);
      if (t.out.finished) tracked_.erase(root);
    }
    return result;
  }

  TokenId eos_token_id_ = -1;
  std::vector<TokenId> end_of_generation_;  // GGUF: more tokens that end a sample unless ignore_eos
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;  // a llama2.c checkpoint's tok*.bin
  std::unique_ptr<TextTokenizer> file_tokenizer_;  // a GGUF model's tokenizer
  std::unique_ptr<LLMEngine> engine_;
  std::mutex mu_;
  std::unordered_map<uint64_t, Tracked> tracked_;
};

// Prompts and their sampling parameters, normalized: one SamplingParams or one per prompt.
std::vector<std::pair<Prompt, PySamplingParams>> requests_of(const PyLLM& llm, const py::object& prompts,
                                                             const py::object& params) {
  std::vector<py::object> items;
  if (PyUnicode_Check(prompts.ptr()) || PyDict_Check(prompts.ptr())) {
    items.push_back(prompts);
  } else {
    for (const py::handle& p : prompts) items.push_back(py::reinterpret_borrow<py::object>(p));
  }
  std::vector<PySamplingParams> sps;
  if (params.is_none()) {
    sps.assign(items.size(), PySamplingParams{});
  } else if (py::isinstance<PySamplingParams>(params)) {
    sps.assign(items.size(), params.cast<PySamplingParams>());
  } else {
    sps = params.cast<std::vector<PySamplingParams>>();
    if (sps.size() != items.size())
      throw UsageError(fmt::format("got {} prompts but {} SamplingParams", items.size(), sps.size()));
  }
  std::vector<std::pair<Prompt, PySamplingParams>> out;
  for (size_t i = 0; i < items.size(); ++i) out.emplace_back(llm.to_prompt(items[i]), sps[i]);
  return out;
}

// LLM.stream(): adds the prompts, then yields each request's output after every step that
// changed it (cumulative tokens and text), the last one with finished=True.
class OutputStream {
 public:
  OutputStream(py::object llm_obj, PyLLM& llm) : llm_obj_(std::move(llm_obj)), llm_(llm) {}
  PyRequestOutput next() {
    while (pending_.empty()) {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (!llm_.has_unfinished()) throw py::stop_iteration();
      for (auto& o : llm_.step()) pending_.push_back(std::move(o));
    }
    PyRequestOutput o = std::move(pending_.front());
    pending_.erase(pending_.begin());
    return o;
  }

 private:
  py::object llm_obj_;  // keeps the LLM alive while the stream is
  PyLLM& llm_;
  std::vector<PyRequestOutput> pending_;
};

void bind_outputs(py::module_& m) {
  py::class_<PySamplingParams>(m, "SamplingParams", "vLLM's SamplingParams, for what the engine implements.")
      .def(py::init([](int n, float temperature, float top_p, int top_k, std::optional<uint64_t> seed, int max_tokens,
                       std::vector<TokenId> stop_token_ids, bool ignore_eos) {
             if (n < 1) throw ConfigError(fmt::format("n must be at least 1, got {}", n));
             if (max_tokens < 1) throw ConfigError(fmt::format("max_tokens must be at least 1, got {}", max_tokens));
             if (top_k < -1)
               throw ConfigError(fmt::format("top_k must be -1 (off), 0 (off) or positive, got {}", top_k));
             SamplingParams check;
             check.temperature = temperature;
             check.top_p = top_p;
             check.top_k = top_k < 0 ? 0 : top_k;
             check.validate();
             return PySamplingParams{n,         temperature, top_p, top_k, seed, max_tokens, std::move(stop_token_ids),
                                     ignore_eos};
           }),
           py::kw_only(), py::arg("n") = 1, py::arg("temperature") = 1.0f, py::arg("top_p") = 1.0f,
           py::arg("top_k") = 0, py::arg("seed") = py::none(), py::arg("max_tokens") = 16,
           py::arg("stop_token_ids") = std::vector<TokenId>{}, py::arg("ignore_eos") = false,
           "temperature 0 is greedy (ties to the lowest id). top_p/top_k as in vLLM. n parallel samples "
           "share the prompt's blocks (sample k draws with seed + k). max_tokens counts output tokens.")
      .def_readwrite("n", &PySamplingParams::n)
      .def_readwrite("temperature", &PySamplingParams::temperature)
      .def_readwrite("top_p", &PySamplingParams::top_p)
      .def_readwrite("top_k", &PySamplingParams::top_k)
      .def_readwrite("seed", &PySamplingParams::seed)
      .def_readwrite("max_tokens", &PySamplingParams::max_tokens)
      .def_readwrite("stop_token_ids", &PySamplingParams::stop_token_ids)
      .def_readwrite("ignore_eos", &PySamplingParams::ignore_eos)
      .def("__repr__", [](const PySamplingParams& p) {
        return fmt::format("SamplingParams(n={}, temperature={}, top_p={}, top_k={}, seed={}, max_tokens={})", p.n,
                           p.temperature, p.top_p, p.top_k, p.seed ? std::to_string(*p.seed) : "None", p.max_tokens);
      });

  py::class_<CompletionOutput>(m, "CompletionOutput", "One sample of a request (vLLM's CompletionOutput).")
      .def_readonly("index", &CompletionOutput::index)
      .def_readonly("text", &CompletionOutput::text, "The generated text (the prompt excluded).")
      .def_readonly("token_ids", &CompletionOutput::token_ids, "Generated token ids (a finishing stop token excluded).")
      .def_readonly("finish_reason", &CompletionOutput::finish_reason,
                    "None while running; 'stop', 'length', 'abort' or 'rejected'.")
      .def_readonly("cumulative_logprob", &CompletionOutput::cumulative_logprob,
                    "Beam search: the hypothesis's summed log-probability (its score); else None.")
      .def("finished", [](const CompletionOutput& c) { return c.finish_reason.has_value(); })
      .def("__repr__", [](const CompletionOutput& c) {
        return fmt::format("CompletionOutput(index={}, text={}, num_tokens={}, finish_reason={})", c.index,
                           std::string(py::repr(py::str(c.text))), c.token_ids.size(),
                           c.finish_reason ? "'" + *c.finish_reason + "'" : "None");
      });

  py::class_<RequestMetrics>(m, "RequestMetrics", "Timing of a request's sample 0, in milliseconds (-1: not yet).")
      .def_readonly("ttft_ms", &RequestMetrics::ttft_ms, "Arrival to first token.")
      .def_readonly("latency_ms", &RequestMetrics::latency_ms, "Arrival to the latest token.")
      .def_readonly("tpot_ms", &RequestMetrics::tpot_ms, "Mean time per output token after the first.")
      .def_readonly("num_preemptions", &RequestMetrics::num_preemptions);

  py::class_<PyRequestOutput>(m, "RequestOutput", "A request's progress or result (vLLM's RequestOutput).")
      .def_readonly("request_id", &PyRequestOutput::request_id)
      .def_readonly("prompt", &PyRequestOutput::prompt)
      .def_readonly("prompt_token_ids", &PyRequestOutput::prompt_token_ids, "BOS included.")
      .def_readonly("outputs", &PyRequestOutput::outputs)
      .def_readonly("finished", &PyRequestOutput::finished)
      .def_readonly("num_cached_tokens", &PyRequestOutput::num_cached_tokens,
                    "Prompt tokens served from the prefix cache at first admission.")
      .def_property_readonly(
          "num_cached_tokens_by_tier",
          [](const PyRequestOutput& o) {
            py::dict d;
            d["device"] = o.cached_tokens_by_tier.device;
            d["host"] = o.cached_tokens_by_tier.host;
            d["disk"] = o.cached_tokens_by_tier.disk;
            d["remote"] = o.cached_tokens_by_tier.remote;
            return d;
          },
          "num_cached_tokens split by where they were found: 'device', 'host', 'disk'.")
      .def_readonly("metrics", &PyRequestOutput::metrics)
      .def("__repr__", [](const PyRequestOutput& o) {
        return fmt::format("RequestOutput(request_id='{}', num_prompt_tokens={}, num_outputs={}, finished={})",
                           o.request_id, o.prompt_token_ids.size(), o.outputs.size(), o.finished ? "True" : "False");
      });

  py::class_<EngineStats>(m, "EngineStats", "Engine counters since start-up.")
      .def_readonly("steps", &EngineStats::steps)
      .def_readonly("prompt_tokens_computed", &EngineStats::prompt_tokens_computed)
      .def_readonly("output_tokens", &EngineStats::output_tokens)
      .def_readonly("cow_copies", &EngineStats::cow_copies)
      .def_readonly("forward_seconds", &EngineStats::forward_seconds)
      .def_readonly("schedule_seconds", &EngineStats::schedule_seconds, "Scheduler + manager + batch building.")
      .def_readonly("copy_seconds", &EngineStats::copy_seconds)
      .def_readonly("peak_blocks_in_use", &EngineStats::peak_blocks_in_use)
      .def_readonly("blocks_in_use", &EngineStats::blocks_in_use, "After every step.");

  py::class_<Tokenizer>(m, "Tokenizer", "The llama2.c BPE tokenizer, encoding and decoding exactly as llama2.c's run.")
      .def(py::init<const std::string&, int>(), py::arg("path"), py::arg("vocab_size"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("encode",
           static_cast<std::vector<TokenId> (Tokenizer::*)(std::string_view, bool, bool) const>(&Tokenizer::encode),
           py::arg("text"), py::arg("add_bos") = true, py::arg("add_eos") = false)
      .def(
          "decode",
          [](const Tokenizer& t, TokenId prev, TokenId token) { return py::bytes(std::string(t.decode(prev, token))); },
          py::arg("prev"), py::arg("token"), "The raw piece bytes of `token` after `prev` (run.c's decode).")
      .def(
          "render", [](const Tokenizer& t, const std::vector<TokenId>& ids) { return t.render(ids); }, py::arg("ids"),
          "The text run.c prints for a token sequence (ids[0], normally BOS, is context only).");
}

py::dict tier_stats_dict(const TierStats& s) {
  py::dict d;
  d["lookups"] = s.lookups;
  d["hits"] = s.hits;
  d["stored_blocks"] = s.stored_blocks;
  d["stored_bytes"] = s.stored_bytes;
  d["loaded_blocks"] = s.loaded_blocks;
  d["loaded_bytes"] = s.loaded_bytes;
  d["duplicates"] = s.duplicates;
  d["evictions"] = s.evictions;
  d["demotions"] = s.demotions;
  d["dropped"] = s.dropped;
  d["swapped_out_blocks"] = s.swapped_out_blocks;
  d["swapped_in_blocks"] = s.swapped_in_blocks;
  d["swap_copies_deferred"] = s.swap_copies_deferred;
  d["swap_copies_skipped"] = s.swap_copies_skipped;
  d["corrupt_blocks"] = s.corrupt_blocks;
  d["io_errors"] = s.io_errors;
  d["rebuilt_blocks"] = s.rebuilt_blocks;
  d["degraded"] = s.degraded;
  d["degraded_reason"] = s.degraded_reason;
  d["io_backend"] = s.io_backend;
  return d;
}

py::dict remote_tier_stats_dict(const RemoteTierStats& s) {
  py::dict d = tier_stats_dict(s);
  d["probes"] = s.probes;
  d["vanished"] = s.vanished;
  d["unavailable_loads"] = s.unavailable_loads;
  d["store_full_refusals"] = s.store_full_refusals;
  d["breaker_trips"] = s.breaker_trips;
  return d;
}

EngineConfig engine_config(int block_size, int num_blocks, const py::object& kv_cache_memory,
                           const std::string& kv_cache_dtype, const py::object& swap_space, bool enable_prefix_caching,
                           const std::string& hash_algorithm, uint64_t hash_seed, int max_model_len, int max_num_seqs,
                           int max_num_batched_tokens, const std::string& preemption_mode, bool check_invariants,
                           const py::object& host_cache_memory, const std::optional<std::string>& disk_cache_dir,
                           const py::object& disk_cache_memory, bool lazy_swap_copies) {
  EngineConfig c;
  c.scheduler.lazy_swap_copies = lazy_swap_copies;
  c.tiers.lazy_swap_copies = lazy_swap_copies;
  c.tiers.host_cache_bytes = byte_size_arg(host_cache_memory, "host_cache_memory");
  c.tiers.disk_cache_dir = disk_cache_dir.value_or("");
  c.tiers.disk_cache_bytes = byte_size_arg(disk_cache_memory, "disk_cache_memory");
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.kv_cache_bytes = byte_size_arg(kv_cache_memory, "kv_cache_memory");
  c.swap_space_bytes = byte_size_arg(swap_space, "swap_space");
  auto dt = parse_dtype(kv_cache_dtype);
  if (!dt || !is_storage_dtype(*dt))
    throw ConfigError(fmt::format("kv_cache_dtype must be fp32, fp16, bf16, int8 or fp8, got '{}'", kv_cache_dtype));
  c.kv_dtype = *dt;
  c.enable_prefix_caching = enable_prefix_caching;
  auto algo = parse_hash_algorithm(hash_algorithm);
  if (!algo)
    throw ConfigError(fmt::format("unknown hash_algorithm '{}' (expected xxh3_128 or sha256)", hash_algorithm));
  c.hash_algorithm = *algo;
  c.hash_seed = hash_seed;
  c.max_model_len = max_model_len;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  if (preemption_mode == "recompute") c.scheduler.preemption_mode = PreemptionMode::kRecompute;
  else if (preemption_mode == "swap") c.scheduler.preemption_mode = PreemptionMode::kSwap;
  else if (preemption_mode == "auto") c.scheduler.preemption_mode = PreemptionMode::kAuto;
  else throw ConfigError(fmt::format("preemption_mode must be recompute, swap or auto, got '{}'", preemption_mode));
  c.check_invariants = check_invariants;
  return c;
}

// Steps `llm` until every request in `ids` has finished (Ctrl-C interrupts); their final
// RequestOutputs in the order of `ids`.
std::vector<PyRequestOutput> run_to_completion(PyLLM& llm, const std::vector<std::string>& ids) {
  std::map<std::string, PyRequestOutput> done;
  while (done.size() < ids.size() && llm.has_unfinished()) {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    for (auto& o : llm.step())
      if (o.finished) done.emplace(o.request_id, std::move(o));
  }
  std::vector<PyRequestOutput> out;
  for (const std::string& id : ids) out.push_back(std::move(done.at(id)));
  return out;
}

void bind_llm(py::module_& m) {
  py::class_<OutputStream>(m, "OutputStream", "Iterator over RequestOutputs as the engine produces them.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &OutputStream::next);

  py::class_<PyLLM>(m, "LLM",
                    "vLLM's offline entry point on the paged engine: a llama2.c checkpoint and tokenizer, "
                    "continuous batching, chunked prefill, prefix caching, preemption.")
      .def(py::init([](const std::string& model, std::optional<std::string> tokenizer, int block_size, int num_blocks,
                       const py::object& kv_cache_memory, const std::string& kv_cache_dtype,
                       const py::object& swap_space, bool enable_prefix_caching, const std::string& hash_algorithm,
                       uint64_t hash_seed, int max_model_len, int max_num_seqs, int max_num_batched_tokens,
                       const std::string& preemption_mode, std::optional<TokenId> eos_token_id, bool check_invariants,
                       const py::object& host_cache_memory, const std::optional<std::string>& disk_cache_dir,
                       const py::object& disk_cache_memory, bool lazy_swap_copies,
                       const std::optional<std::string>& remote_cache, const std::string& remote_cache_prefix,
                       bool remote_write_through, int remote_timeout_ms, int remote_min_blocks,
                       bool remote_read_replicas) {
             EngineConfig c = engine_config(block_size, num_blocks, kv_cache_memory, kv_cache_dtype, swap_space,
                                            enable_prefix_caching, hash_algorithm, hash_seed, max_model_len,
                                            max_num_seqs, max_num_batched_tokens, preemption_mode, check_invariants,
                                            host_cache_memory, disk_cache_dir, disk_cache_memory, lazy_swap_copies);
             if (remote_cache)
               remote::use_redis_tier(c.tiers, {*remote_cache, remote_cache_prefix, remote_write_through,
                                                remote_timeout_ms, remote_min_blocks, remote_read_replicas});
             return std::make_unique<PyLLM>(model, tokenizer, std::move(c), eos_token_id);
           }),
           py::arg("model"), py::arg("tokenizer") = py::none(), py::kw_only(), py::arg("block_size") = 16,
           py::arg("num_blocks") = 0, py::arg("kv_cache_memory") = "16MiB", py::arg("kv_cache_dtype") = "fp32",
           py::arg("swap_space") = "4MiB", py::arg("enable_prefix_caching") = true,
           py::arg("hash_algorithm") = "xxh3_128", py::arg("hash_seed") = 0, py::arg("max_model_len") = 0,
           py::arg("max_num_seqs") = 64, py::arg("max_num_batched_tokens") = 2048, py::arg("preemption_mode") = "auto",
           py::arg("eos_token_id") = py::none(), py::arg("check_invariants") = false, py::arg("host_cache_memory") = 0,
           py::arg("disk_cache_dir") = py::none(), py::arg("disk_cache_memory") = "1GiB",
           py::arg("lazy_swap_copies") = false, py::arg("remote_cache") = py::none(),
           py::arg("remote_cache_prefix") = "pagedkv", py::arg("remote_write_through") = true,
           py::arg("remote_timeout_ms") = 200, py::arg("remote_min_blocks") = 1,
           py::arg("remote_read_replicas") = false,
           "model: a llama2.c checkpoint or a GGUF file; tokenizer: the checkpoint's tok*.bin (needed for text "
           "prompts and output text; a GGUF file brings its own).\n"
           "num_blocks: KV pool size (null block included); 0 sizes it from kv_cache_memory (bytes or '16MiB').\n"
           "kv_cache_dtype: fp32 (bit-exact with llama2.c), fp16 or bf16. swap_space: host bytes for swap "
           "preemption (0 disables). max_model_len 0: the model's seq_len. eos_token_id: the token that ends "
           "a sample (None: llama2.c's BOS, id 1, as its run stops; a GGUF file's EOS and end-of-turn tokens); "
           "-1 for none.\n"
           "host_cache_memory / disk_cache_dir (+ disk_cache_memory): KV tiers below the arena. Evicted "
           "prefixes are offloaded there and promoted back on a hit; the disk tier survives restarts "
           "(cached blocks are written down when the LLM is destroyed).\n"
           "remote_cache: 'redis://[user:password@]host:port[/db]' (a server or a Redis Cluster node) or "
           "'redis-cluster://host1:port1,host2:port2', a KV tier shared with other processes on "
           "the same Redis (docs/tiers.md), under keys that start with remote_cache_prefix; remote_write_through "
           "stores each computed block at once (else when evicted); remote_timeout_ms bounds connects and socket "
           "I/O; remote_min_blocks: ask Redis only when at least this many blocks missed above; "
           "remote_read_replicas: on a cluster, load from the slots' replicas.\n"
           "lazy_swap_copies: copy a swapped-out block only if the device prefix cache drops it before its "
           "request resumes (blocks resumed from the cache are never copied).")
      .def(
          "generate",
          [](py::object self, const py::object& prompts, const py::object& sampling_params) {
            PyLLM& llm = self.cast<PyLLM&>();
            std::vector<std::string> ids;
            for (auto& [prompt, sp] : requests_of(llm, prompts, sampling_params))
              ids.push_back(llm.add_locked(std::move(prompt), sp, 0, "", 0));
            return run_to_completion(llm, ids);
          },
          py::arg("prompts"), py::arg("sampling_params") = py::none(),
          "Runs the prompts (a str, a list of str, or {'prompt_token_ids': [...]} dicts) to completion; "
          "returns one RequestOutput per prompt, in order. sampling_params: one for all, or one per prompt.")
      .def(
          "beam_search",
          [](py::object self, const py::object& prompts, int beam_width, int max_tokens, bool ignore_eos,
             const std::vector<TokenId>& stop_token_ids) {
            PyLLM& llm = self.cast<PyLLM&>();
            if (beam_width < 1) throw UsageError(fmt::format("beam_width must be at least 1, got {}", beam_width));
            PySamplingParams sp;
            sp.temperature = 0.0f;  // unused by beams; width 1 is greedy decoding
            sp.max_tokens = max_tokens;
            sp.ignore_eos = ignore_eos;
            sp.stop_token_ids = stop_token_ids;
            std::vector<std::string> ids;
            for (auto& [prompt, unused] : requests_of(llm, prompts, py::none()))
              ids.push_back(llm.add_locked(std::move(prompt), sp, 0, "", 0, beam_width));
            return run_to_completion(llm, ids);
          },
          py::arg("prompts"), py::kw_only(), py::arg("beam_width"), py::arg("max_tokens") = 16,
          py::arg("ignore_eos") = false, py::arg("stop_token_ids") = std::vector<TokenId>{},
          "Beam search (vLLM's LLM.beam_search): keeps the beam_width continuations of highest summed "
          "log-probability each step; beams share the prompt's and each other's blocks (fork, copy-on-write). "
          "Returns one RequestOutput per prompt whose outputs are the hypotheses, best first, each with its "
          "cumulative_logprob. Width 1 is plain greedy decoding (no score: cumulative_logprob is None).")
      .def(
          "stream",
          [](py::object self, const py::object& prompts, const py::object& sampling_params) {
            PyLLM& llm = self.cast<PyLLM&>();
            for (auto& [prompt, sp] : requests_of(llm, prompts, sampling_params))
              llm.add_locked(std::move(prompt), sp, 0, "", 0);
            return OutputStream(self, llm);
          },
          py::arg("prompts"), py::arg("sampling_params") = py::none(),
          "Like generate(), but yields each request's RequestOutput after every step that advanced it "
          "(cumulative tokens and text); the last one for a request has finished=True.")
      .def(
          "add_request",
          [](PyLLM& llm, const py::object& prompt, const std::optional<PySamplingParams>& sp, int priority,
             const std::optional<std::string>& cache_salt, uint64_t lora_id) {
            return llm.add_locked(llm.to_prompt(prompt), sp.value_or(PySamplingParams{}), priority,
                                  cache_salt.value_or(""), lora_id);
          },
          py::arg("prompt"), py::arg("sampling_params") = py::none(), py::kw_only(), py::arg("priority") = 0,
          py::arg("cache_salt") = py::none(), py::arg("lora_id") = 0,
          "Queues one request; returns its request_id. Drive it with step() (vLLM's LLMEngine loop).")
      .def("step", &PyLLM::step, "One scheduling step and forward pass (GIL released); the RequestOutputs it advanced.")
      .def("has_unfinished_requests", &PyLLM::has_unfinished)
      .def("abort_request", &PyLLM::abort, py::arg("request_id"))
      .def(
          "get_tokenizer",
          [](const PyLLM& llm) -> const Tokenizer* { return llm.tokenizer() ? &*llm.tokenizer() : nullptr; },
          py::return_value_policy::reference_internal,
          "The LLM's tokenizer (None without one); it lives as long as the LLM.")
      .def_property_readonly("stats",
                             [](PyLLM& llm) {
                               std::lock_guard<std::mutex> lock(llm.mutex());
                               return llm.engine().stats();
                             })
      .def_property_readonly("prefix_cache_stats",
                             [](PyLLM& llm) {
                               std::lock_guard<std::mutex> lock(llm.mutex());
                               return llm.engine().manager().prefix_cache_stats();
                             })
      .def_property_readonly("kv_cache_usage",
                             [](PyLLM& llm) {
                               std::lock_guard<std::mutex> lock(llm.mutex());
                               return llm.engine().manager().usage();
                             })
      .def_property_readonly("num_blocks", [](const PyLLM& llm) { return llm.engine().num_blocks(); })
      .def_property_readonly("max_model_len", [](const PyLLM& llm) { return llm.engine().max_model_len(); })
      .def(
          "describe", [](const PyLLM& llm) { return llm.engine().describe(); }, "The engine's start-up summary.")
      .def_property_readonly(
          "tier_stats",
          [](PyLLM& llm) {
            std::lock_guard<std::mutex> lock(llm.mutex());
            py::dict d;
            if (const TieredKVCache* t = llm.engine().tiers()) {
              if (t->host()) d["host"] = tier_stats_dict(t->host()->stats());
              if (t->disk()) d["disk"] = tier_stats_dict(t->disk()->stats());
              if (t->remote()) d["remote"] = remote_tier_stats_dict(t->remote()->stats());
            }
            return d;
          },
          "Counters of the host, disk and remote tiers that are configured (lookups, hits, stored, "
          "loaded, evictions, ...).")
      .def(
          "flush_to_disk",
          [](PyLLM& llm) {
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(llm.mutex());
            if (TieredKVCache* t = llm.mutable_engine().tiers()) t->flush_to_disk();
          },
          "Writes every cached block the disk tier lacks and waits (GIL released); a no-op without one.")
      .def("check_invariants", [](PyLLM& llm) {
        std::lock_guard<std::mutex> lock(llm.mutex());
        llm.engine().check_invariants();
      });
}

}  // namespace

void register_engine(py::module_& m) {
  m.def("set_num_threads", &set_kernel_threads, py::arg("n"),
        "Threads each kernel call (matmuls, attention) uses; n >= 1. On a machine shared with other busy "
        "processes, 1 avoids OpenMP barriers that each cost a scheduler time slice.");
  m.def("get_num_threads", &kernel_threads,
        "PAGEDKV_NUM_THREADS if set, else the online CPUs, unless set_num_threads() said otherwise.");
  bind_outputs(m);
  bind_llm(m);
}

}  // namespace pagedkv::python
