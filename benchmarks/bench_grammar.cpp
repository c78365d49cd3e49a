// Structured output: grammar compilation and per-token mask computation on real vocabularies
// (tok512, 32K SentencePiece, 128K Llama-3 BPE, 152K Qwen3: PAGEDKV_SHARED_DIR/models/...).
//   BM_GrammarCompile/<schema>/<vocab>   compile_grammar, per-state masks included
//   BM_GrammarMask/<schema>/<vocab>      fill_next_token_bitmask along random generations
//                                        (uniform over allowed tokens), with median_us / p99_us
// Run: PAGEDKV_SHARED_DIR=/work/shared build/benchmarks/bench_grammar
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pagedkv/core/percentile.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/grammar/grammar_matcher.h"
#include "pagedkv/grammar/token_bitmask.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"

namespace {

namespace g = pagedkv::grammar;
namespace fs = std::filesystem;

struct NamedSchema {
  const char* name;
  g::GrammarKind kind;
  const char* text;
};

const NamedSchema kSchemas[] = {
    {"person", g::GrammarKind::kJsonSchema,
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
         "email":{"type":"string","format":"email"},"city":{"type":"string","maxLength":40},
         "tags":{"type":"array","items":{"type":"string"},"maxItems":5},"active":{"type":"boolean"}},
         "required":["name","age","active"]})"},
    // The same without the length bound: bounded repetition is unrolled, one classified state per
    // position, which is most of the compile time above.
    {"person_unbounded", g::GrammarKind::kJsonSchema,
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
         "email":{"type":"string","format":"email"},"city":{"type":"string"},
         "tags":{"type":"array","items":{"type":"string"},"maxItems":5},"active":{"type":"boolean"}},
         "required":["name","age","active"]})"},
    // A zod-style record: strings with length bounds (three bound pairs), a number range.
    {"bounded_record", g::GrammarKind::kJsonSchema,
     R"({"type":"object","properties":{"title":{"type":"string","minLength":1,"maxLength":64},
         "summary":{"type":"string","maxLength":200},"score":{"type":"number","minimum":0,"maximum":1},
         "tags":{"type":"array","items":{"type":"string","maxLength":32},"maxItems":5}},
         "required":["title","summary","score","tags"],"additionalProperties":false})"},
    {"tool_call", g::GrammarKind::kJsonSchema,
     R"({"type":"object","properties":{"name":{"enum":["get_weather","search","send_email","calendar"]},
         "arguments":{"type":"object","properties":{"query":{"type":"string"},"location":{"type":"string"},
           "unit":{"enum":["celsius","fahrenheit"]},"limit":{"type":"integer","minimum":1,"maximum":100},
           "filters":{"type":"array","items":{"type":"object","properties":{"field":{"type":"string"},"value":{"type":["string","number","null"]}},"required":["field","value"]}}},
           "required":["query"]}},"required":["name","arguments"]})"},
    {"json_object", g::GrammarKind::kJsonObject, ""},
};

const char* const kVocabularies[][2] = {
    {"tok512", "models/stories260Ktok512.gguf"},
    {"spm32k", "models/gguf/vocab/ggml-vocab-llama-spm.gguf"},
    {"bpe128k", "models/gguf/vocab/ggml-vocab-llama-bpe.gguf"},
    {"qwen152k", "models/gguf/vocab/ggml-vocab-qwen3.gguf"},
};

std::shared_ptr<const g::TokenVocabulary> vocabulary(const std::string& relative) {
  static std::map<std::string, std::shared_ptr<const g::TokenVocabulary>> loaded;
  if (auto it = loaded.find(relative); it != loaded.end()) return it->second;
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  const fs::path path = fs::path(shared ? shared : "../shared") / relative;
  if (!fs::exists(path)) return nullptr;
  pagedkv::GgufFile file(path.string());
  auto tok = pagedkv::make_gguf_tokenizer(file);
  const pagedkv::TokenId prev = tok->bos_id() == 0 ? 1 : 0;
  std::vector<std::string> bytes;
  for (pagedkv::TokenId id = 0; id < tok->vocab_size(); ++id) bytes.push_back(tok->decode_piece(prev, id));
  auto v = g::TokenVocabulary::create(std::move(bytes), tok->end_of_generation_ids());
  loaded[relative] = v;
  return v;
}

void BM_GrammarCompile(benchmark::State& state, const NamedSchema* schema, const char* vocab_path) {
  auto v = vocabulary(vocab_path);
  if (!v) {
    state.SkipWithError("vocabulary file absent (set PAGEDKV_SHARED_DIR)");
    return;
  }
  int32_t states = 0, precomputed = 0;
  for (auto _ : state) {
    auto compiled = g::compile_grammar(schema->kind, schema->text, v);
    states = compiled->num_states();
    precomputed = compiled->num_precomputed_states();
    benchmark::DoNotOptimize(compiled);
  }
  state.counters["states"] = states;
  state.counters["precomputed"] = precomputed;
}

void BM_GrammarMask(benchmark::State& state, const NamedSchema* schema, const char* vocab_path) {
  auto v = vocabulary(vocab_path);
  if (!v) {
    state.SkipWithError("vocabulary file absent (set PAGEDKV_SHARED_DIR)");
    return;
  }
  auto compiled = g::compile_grammar(schema->kind, schema->text, v);
  g::GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(v->bitmask_words()));
  std::vector<int32_t> allowed;
  std::vector<double> micros;
  std::mt19937_64 rng(7);
  int tokens_in_output = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    m.fill_next_token_bitmask(mask);
    const auto end = std::chrono::steady_clock::now();
    micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    // Sample the next token uniformly among the allowed (not timed); restart a finished or
    // long output.
    state.PauseTiming();
    allowed.clear();
    for (int32_t id = 0; id < v->size(); ++id)
      if (g::bitmask_allows(mask, id)) allowed.push_back(id);
    if (allowed.empty() || ++tokens_in_output > 256) {
      m.reset();
      tokens_in_output = 0;
    } else {
      const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (!m.accept_token(id) || m.is_terminated()) {
        m.reset();
        tokens_in_output = 0;
      }
    }
    state.ResumeTiming();
  }
  std::sort(micros.begin(), micros.end());
  if (!micros.empty()) {
    state.counters["median_us"] = pagedkv::percentile_of_sorted(micros, 50);
    state.counters["p99_us"] = pagedkv::percentile_of_sorted(micros, 99);
    state.counters["max_us"] = micros.back();
  }
}

int register_all() {
  for (const NamedSchema& s : kSchemas)
    for (const auto& v : kVocabularies) {
      const std::string suffix = std::string(s.name) + "/" + v[0];
      benchmark::RegisterBenchmark(("BM_GrammarCompile/" + suffix).c_str(), BM_GrammarCompile, &s, v[1])
          ->Unit(benchmark::kMillisecond)
          ->Iterations(3);
      benchmark::RegisterBenchmark(("BM_GrammarMask/" + suffix).c_str(), BM_GrammarMask, &s, v[1])
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(2000);
    }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
