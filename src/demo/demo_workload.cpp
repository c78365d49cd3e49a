#include "pagedkv/demo/demo_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::demo {
namespace {

// System prompts and user turns in the TinyStories style, for real checkpoints.
constexpr std::array<const char*, 3> kSystemTexts = {
    "Once upon a time, there was a little girl named Lily. She lived in a small house with her mom and dad. "
    "Every day, Lily went to the park to play with her friends. She liked to run, jump and swing on the swings.",
    "Tom was a big, brown dog who lived on a farm. He had many friends: a cat, a cow and a little duck. One sunny "
    "morning, the friends went to the pond to play. The water was cold and blue, and the sun was warm.",
    "There was once a kind old man who made toys. He made cars, dolls and big red balls for all the children in the "
    "town. One day, a little boy named Ben came to his shop. Ben was sad because his toy was broken.",
};
constexpr std::array<const char*, 12> kUserTexts = {
    " One day, she found a shiny key.",
    " Then it started to rain.",
    " They saw a big bird in the sky.",
    " Mom said, \"Be careful!\"",
    " The cat wanted to play too.",
    " Suddenly, they heard a loud noise.",
    " He was very happy.",
    " She wanted to share her toys.",
    " They went home and ate a big cake.",
    " The little duck was lost.",
    " The sun went down and it was dark.",
    " A friendly frog jumped out of the water.",
};
constexpr const char* kStandaloneOpening = "Once upon a time";

constexpr TokenId kFirstOrdinaryToken = 3;  // llama2.c vocabularies: 0 unk, 1 BOS, 2 EOS

std::vector<TokenId> random_tokens(DemoRng& rng, int n, int vocab) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = rng.uniform_int(kFirstOrdinaryToken, vocab - 1);
  return t;
}

}  // namespace

void DemoWorkloadConfig::validate() const {
  auto fraction = [](double f, const char* name) {
    if (!(f >= 0.0 && f <= 1.0)) throw ConfigError(fmt::format("demo workload: {} must be in [0, 1], got {}", name, f));
  };
  if (num_requests < 1) throw ConfigError(fmt::format("demo workload: need at least 1 request, got {}", num_requests));
  if (num_system_prompts < 0 || num_system_prompts > static_cast<int>(kSystemTexts.size()) * 8)
    throw ConfigError(fmt::format("demo workload: system prompts must be in [0, 24], got {}", num_system_prompts));
  fraction(shared_fraction, "shared_fraction");
  fraction(parallel_fraction, "parallel_fraction");
  fraction(cancel_fraction, "cancel_fraction");
  if (initial_burst < 0)
    throw ConfigError(fmt::format("demo workload: initial_burst must be >= 0, got {}", initial_burst));
  if (!(arrivals_per_step > 0.0))
    throw ConfigError(fmt::format("demo workload: arrivals_per_step must be positive, got {}", arrivals_per_step));
  if (max_model_len < 64)
    throw ConfigError(fmt::format("demo workload: max_model_len must be at least 64 tokens, got {}", max_model_len));
  if (vocab_size <= kFirstOrdinaryToken)
    throw ConfigError(fmt::format("demo workload: vocab_size {} has no ordinary tokens", vocab_size));
}

uint64_t DemoRng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double DemoRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int DemoRng::uniform_int(int lo, int hi) {
  const auto span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo + 1);
  return lo + static_cast<int>(next() % span);
}

int DemoRng::log_uniform_int(int lo, int hi) {
  const double x = std::exp(std::log(static_cast<double>(lo)) +
                            uniform() * (std::log(static_cast<double>(hi) + 1.0) - std::log(static_cast<double>(lo))));
  return std::clamp(static_cast<int>(x), lo, hi);
}

std::vector<DemoRequest> make_demo_workload(const DemoWorkloadConfig& c, const Tokenizer* tokenizer) {
  c.validate();
  DemoRng rng(c.seed);
  // Lengths scale with the context, up to 1024 tokens (longer contexts only cost time).
  const int base = std::min(c.max_model_len, 1024);

  std::vector<std::vector<TokenId>> system_prompts;
  for (int i = 0; i < c.num_system_prompts; ++i) {
    std::vector<TokenId> p;
    if (tokenizer != nullptr) {
      std::string text = kSystemTexts[static_cast<size_t>(i) % kSystemTexts.size()];
      for (int k = 0; k < i / static_cast<int>(kSystemTexts.size()); ++k) text += kUserTexts[static_cast<size_t>(k)];
      p = tokenizer->encode(text, true, false);
    } else {
      p = random_tokens(rng, base * (3 + 2 * (i % 3)) / 32, c.vocab_size);
      p.insert(p.begin(), Tokenizer::kBos);
    }
    system_prompts.push_back(std::move(p));
  }

  std::vector<DemoRequest> out;
  out.reserve(static_cast<size_t>(c.num_requests));
  double clock = 0.0;  // arrival time in steps, after the burst
  for (int i = 0; i < c.num_requests; ++i) {
    DemoRequest d;
    if (i >= c.initial_burst) {
      clock += -std::log(1.0 - rng.uniform()) / c.arrivals_per_step;  // exponential gaps
      d.arrival_step = static_cast<int>(clock);
    }
    GenerationRequest& g = d.request;
    const bool shared = !system_prompts.empty() && rng.uniform() < c.shared_fraction;
    if (shared) {
      // A few system prompts are far more popular than the rest (as in real traffic).
      const double u = rng.uniform();
      d.system_prompt = std::min(static_cast<int>(u * u * static_cast<double>(system_prompts.size())),
                                 static_cast<int>(system_prompts.size()) - 1);
      g.prompt = system_prompts[static_cast<size_t>(d.system_prompt)];
    }
    if (tokenizer != nullptr) {
      std::string text = shared ? "" : kStandaloneOpening;
      const int sentences = rng.log_uniform_int(1, 4);
      for (int k = 0; k < sentences; ++k)
        text += kUserTexts[static_cast<size_t>(rng.uniform_int(0, static_cast<int>(kUserTexts.size()) - 1))];
      // Behind a system prompt the encoder's dummy-prefix space starts the user's turn.
      if (shared) text.erase(0, 1);
      std::vector<TokenId> user = tokenizer->encode(text, !shared, false);
      g.prompt.insert(g.prompt.end(), user.begin(), user.end());
      g.stop.eos_token_id = Tokenizer::kBos;  // llama2.c stops on BOS
    } else {
      const int n = shared ? rng.log_uniform_int(4, std::max(8, base / 8)) : rng.log_uniform_int(16, base / 3);
      std::vector<TokenId> user = random_tokens(rng, n, c.vocab_size);
      if (!shared) g.prompt.push_back(Tokenizer::kBos);
      g.prompt.insert(g.prompt.end(), user.begin(), user.end());
    }
    if (static_cast<int>(g.prompt.size()) >= c.max_model_len) g.prompt.resize(static_cast<size_t>(c.max_model_len - 1));
    const int room = c.max_model_len - static_cast<int>(g.prompt.size());
    g.stop.max_tokens = std::min(rng.log_uniform_int(8, base * 3 / 8), room);
    g.sampling.temperature = 1.0f;
    g.sampling.top_p = 0.9f;
    g.sampling.seed = rng.next() | 1;
    if (rng.uniform() < c.parallel_fraction) g.n = rng.uniform_int(2, 4);
    if (rng.uniform() < c.cancel_fraction) d.cancel_after_steps = rng.uniform_int(1, 40);
    out.push_back(std::move(d));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const DemoRequest& a, const DemoRequest& b) { return a.arrival_step < b.arrival_step; });
  return out;
}

}  // namespace pagedkv::demo
