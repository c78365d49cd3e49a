#include "pagedkv/grammar/grammar_matcher.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "compiled_grammar_impl.h"
#include "pagedkv/core/error.h"

namespace pagedkv::grammar {

struct GrammarMatcher::State {
  explicit State(const CompiledGrammar::Impl& g)
      : grammar(&g), stepper(g.automaton, pool), depth_sets(static_cast<size_t>(g.vocabulary->max_token_bytes()) + 1) {
    history.emplace_back();
    terminated.push_back(0);
    stepper.start(pool.node(g.automaton.rule_start(g.automaton.root()), -1), history.back());
  }
  State(const State& o)
      : grammar(o.grammar),
        pool(o.pool),
        stepper(o.grammar->automaton, pool),
        history(o.history),
        terminated(o.terminated),
        depth_sets(o.depth_sets.size()),
        compact_at(o.compact_at) {}

  // Drops pool nodes no history entry reaches once the pool has grown (uncertain-token checks
  // intern nodes that are never used again).
  void maybe_compact() {
    if (pool.size() >= compact_at) compact();
  }
  void compact() {
    StackPool fresh;
    std::unordered_map<int32_t, int32_t> remap;
    std::vector<int32_t> chain;
    auto copy = [&](int32_t n) {
      // Walk down to a node already copied (or the bottom), then copy back up: no recursion, as
      // stacks can be as deep as the output is long.
      chain.clear();
      while (n >= 0 && !remap.count(n)) {
        chain.push_back(n);
        n = pool.parent(n);
      }
      int32_t parent = n < 0 ? -1 : remap[n];
      for (size_t i = chain.size(); i-- > 0;) {
        parent = fresh.node(pool.state(chain[i]), parent);
        remap.emplace(chain[i], parent);
      }
      return parent;
    };
    for (StackSet& s : history)
      for (int32_t& t : s.tops) t = copy(t);
    pool = std::move(fresh);
    stepper = StackStepper(grammar->automaton, pool);
    compact_at = std::max<size_t>(size_t{1} << 16, pool.size() * 4);
  }

  const StackSet& current() const { return history.back(); }
  bool is_terminated() const { return terminated.back() != 0; }

  void push(const StackSet& s, bool term) {
    history.push_back(s);
    terminated.push_back(term ? 1 : 0);
  }

  // Steps `bytes` from the current set; true (result in `scratch_a`) when the set stays non-empty.
  bool run(std::string_view bytes) {
    if (bytes.empty()) {  // a step that reads nothing
      scratch_a = current();
      return true;
    }
    const StackSet* from = &current();
    StackSet* to = &scratch_a;
    for (char c : bytes) {
      if (!stepper.step(*from, static_cast<uint8_t>(c), *to)) return false;
      std::swap(scratch_a, scratch_b);
      from = &scratch_b;
      to = &scratch_a;
    }
    std::swap(scratch_a, scratch_b);  // the result is in scratch_a
    return true;
  }

  // Checks `tokens` (of at most max_bytes bytes; longer ones are skipped) against the real stack.
  void check_uncertain(int32_t top, const std::vector<int32_t>& tokens, std::span<uint32_t> mask,
                       size_t max_bytes = SIZE_MAX) {
    const TokenVocabulary& vocab = *grammar->vocabulary;
    depth_sets[0].clear();
    depth_sets[0].tops.push_back(top);
    std::string_view previous;
    size_t dead_at = 0;  // 0: previous is alive; else the depth at which its set became empty
    for (int32_t id : tokens) {
      if ((mask[static_cast<size_t>(id) / 32] >> (static_cast<uint32_t>(id) % 32)) & 1u) continue;
      const std::string_view b = vocab.bytes(id);
      if (b.size() > max_bytes) continue;
      size_t l = 0;
      while (l < b.size() && l < previous.size() && b[l] == previous[l]) ++l;
      if (dead_at && l >= dead_at) continue;  // shares the prefix that already failed
      size_t d = l;
      bool alive = true;
      for (; d < b.size(); ++d) {
        if (!stepper.step(depth_sets[d], static_cast<uint8_t>(b[d]), depth_sets[d + 1])) {
          alive = false;
          break;
        }
      }
      previous = b;
      dead_at = alive ? 0 : d + 1;
      if (alive) mask[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
    }
  }

  const CompiledGrammar::Impl* grammar;
  StackPool pool;
  StackStepper stepper;
  std::vector<StackSet> history;
  std::vector<uint8_t> terminated;
  std::vector<StackSet> depth_sets;
  StackSet scratch_a, scratch_b;
  std::vector<int32_t> seen_states;
  std::vector<uint32_t> delta_bits;  // scratch: the accepted bits of a state stored as a base's plus its own
  size_t compact_at = size_t{1} << 16;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  if (!grammar_) throw UsageError("GrammarMatcher needs a compiled grammar");
  state_ = std::make_unique<State>(grammar_->impl());
}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(const GrammarMatcher& o)
    : grammar_(o.grammar_), state_(std::make_unique<State>(*o.state_)) {}
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    state_ = std::make_unique<State>(*o.state_);
  }
  return *this;
}
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::accept_token(int32_t id) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  if (id < 0 || id >= vocab.size())
    throw UsageError(fmt::format("token id {} is outside the vocabulary of {} tokens", id, vocab.size()));
  State& s = *state_;
  if (s.is_terminated()) return false;
  if (vocab.is_stop(id)) {
    if (!s.current().can_end) return false;
    s.push(s.current(), true);
    return true;
  }
  const std::string_view bytes = vocab.bytes(id);
  if (bytes.empty() || !s.run(bytes)) return false;
  s.push(s.scratch_a, false);
  s.maybe_compact();
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  State& s = *state_;
  if (s.is_terminated() || !s.run(bytes)) return false;
  s.push(s.scratch_a, false);
  s.maybe_compact();
  return true;
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> mask) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  if (mask.size() < static_cast<size_t>(vocab.bitmask_words()))
    throw UsageError(fmt::format("a token bitmask needs {} words, got {}", vocab.bitmask_words(), mask.size()));
  std::fill(mask.begin(), mask.end(), 0u);
  State& s = *state_;
  if (s.is_terminated()) return;
  const CompiledGrammar::Impl& g = grammar_->impl();
  const StackSet& cur = s.current();
  s.seen_states.clear();
  for (int32_t top : cur.tops) {
    const int32_t st = s.pool.state(top);
    if (std::find(s.seen_states.begin(), s.seen_states.end(), st) != s.seen_states.end()) continue;
    s.seen_states.push_back(st);
    const StateTokens& tokens = g.tokens_for(st);
    if (tokens.base) {  // the base's bits without its long tokens, then this state's own
      const std::vector<int32_t>& longest = vocab.tokens_by_length();
      std::vector<uint32_t>& own = s.delta_bits;
      own = tokens.base->accepted_bits;
      for (int32_t k = 0; k < vocab.tokens_longer_than(tokens.base_depth); ++k) {
        const auto id = static_cast<uint32_t>(longest[static_cast<size_t>(k)]);
        own[id / 32] &= ~(1u << (id % 32));
      }
      for (int32_t id : tokens.accepted_ids)
        own[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
      for (size_t w = 0; w < own.size(); ++w) mask[w] |= own[w];
    } else if (!tokens.accepted_bits.empty()) {
      const uint32_t* bits = tokens.accepted_bits.data();
      uint32_t* out = mask.data();
      const size_t n = tokens.accepted_bits.size();
      for (size_t w = 0; w < n; ++w) out[w] |= bits[w];
    } else {
      for (int32_t id : tokens.accepted_ids)
        mask[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
    }
  }
  for (size_t i = 0; i < cur.tops.size(); ++i) {
    const int32_t top = cur.tops[i];
    const StateTokens& tokens = g.tokens_for(s.pool.state(top));
    if (tokens.base && !tokens.base->uncertain.empty())
      s.check_uncertain(top, tokens.base->uncertain, mask, tokens.base_depth);
    if (!tokens.uncertain.empty()) s.check_uncertain(top, tokens.uncertain, mask);
  }
  if (cur.can_end)
    for (int32_t id : vocab.stop_ids()) mask[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
}

bool GrammarMatcher::can_terminate() const { return !state_->is_terminated() && state_->current().can_end; }
bool GrammarMatcher::is_terminated() const { return state_->is_terminated(); }
int32_t GrammarMatcher::num_steps() const { return static_cast<int32_t>(state_->history.size()) - 1; }

void GrammarMatcher::rollback(int32_t n) {
  if (n < 0 || n > num_steps()) throw UsageError(fmt::format("rollback({}) with {} steps to undo", n, num_steps()));
  state_->history.resize(state_->history.size() - static_cast<size_t>(n));
  state_->terminated.resize(state_->history.size());
}

void GrammarMatcher::reset() { rollback(num_steps()); }

void GrammarMatcher::compact() { state_->compact(); }

}  // namespace pagedkv::grammar
