#include "pagedkv/grammar/compiled_grammar.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "compiled_grammar_impl.h"
#include "pagedkv/grammar/grammar_front_ends.h"

namespace pagedkv::grammar {

namespace {
struct StateKeyHash {
  static uint64_t mix(uint64_t h, int32_t x) { return (h ^ static_cast<uint32_t>(x)) * 1099511628211ull; }
};
}  // namespace

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonSchema:
      return "json_schema";
    case GrammarKind::kJsonObject:
      return "json_object";
    case GrammarKind::kRegex:
      return "regex";
    case GrammarKind::kChoice:
      return "choice";
    case GrammarKind::kGbnf:
      return "gbnf";
  }
  return "unknown";
}

Grammar build_grammar(GrammarKind kind, std::string_view text, const GrammarOptions& options) {
  if (static_cast<int64_t>(text.size()) > options.limits.max_text_bytes)
    throw GrammarError(limit_message("max_text_bytes", options.limits.max_text_bytes,
                                     fmt::format("the {} text is {} bytes", grammar_kind_name(kind), text.size())));
  switch (kind) {
    case GrammarKind::kJsonSchema:
      return json_schema_grammar(text, options.json, options.limits);
    case GrammarKind::kJsonObject:
      return json_object_grammar(options.json, options.limits);
    case GrammarKind::kRegex:
      return regex_grammar(text, options.limits);
    case GrammarKind::kChoice:
      return choice_grammar_from_json(text, options.limits);
    case GrammarKind::kGbnf:
      return parse_gbnf(text, options.limits);
  }
  throw GrammarError("unknown grammar kind");
}

std::optional<StateTokens> classify_tokens(const ByteAutomaton& automaton, const TokenVocabulary& vocabulary,
                                           int32_t state, StackPool& pool, const CompileDeadline* deadline,
                                           int32_t min_token_bytes) {
  const auto& trie = vocabulary.trie();
  const auto& trie_tokens = vocabulary.trie_tokens();
  StackStepper stepper(automaton, pool);
  const auto depth_count = static_cast<size_t>(vocabulary.max_token_bytes()) + 1;
  // The set after each depth of the current trie path. Most steps stay inside one rule's DFA
  // (string content, digits, a key): while the set is one stack whose top has no calls and
  // cannot end, it is kept as just (state, parent) in `single` and stepped without the pool.
  struct Single {
    int32_t state = -1;  // -1: the set is in `sets`
    int32_t parent = -1;
  };
  std::vector<Single> single(depth_count);
  std::vector<StackSet> sets(depth_count);
  std::vector<uint8_t> left_rule(depth_count, 0);  // some prefix of this length let the rule end
  auto is_plain = [&](int32_t s) {
    return automaton.has_byte_edges(s) && !automaton.state(s).final &&
           automaton.calls_begin(s) == automaton.calls_end(s);
  };
  single[0] = {state, -1};
  std::vector<int32_t> accepted, uncertain;
  auto add_tokens = [&](std::vector<int32_t>& to, size_t from_node, size_t to_node) {
    for (size_t m = from_node; m < to_node; ++m) {
      if (trie[m].depth < min_token_bytes) continue;
      for (int32_t t = trie[m].token_begin; t < trie[m].token_end; ++t)
        to.push_back(trie_tokens[static_cast<size_t>(t)]);
    }
  };
  size_t i = 1;
  size_t steps = 0;
  while (i < trie.size()) {
    if (deadline && (++steps & 4095) == 0 && deadline->expired()) return std::nullopt;
    const auto& n = trie[i];
    if (n.max_depth < min_token_bytes) {  // no token here is long enough to be asked about
      i = static_cast<size_t>(n.subtree_end);
      continue;
    }
    const size_t d = n.depth;
    // Step depth d-1 -> d by n.byte.
    bool alive = false, has_tops = false, can_end = false;
    if (single[d - 1].state >= 0) {
      const int32_t t = automaton.step(single[d - 1].state, n.byte);
      if (t >= 0 && is_plain(t)) {
        single[d] = {t, single[d - 1].parent};
        alive = has_tops = true;
      } else if (t >= 0) {
        single[d].state = -1;
        stepper.start(pool.node(t, single[d - 1].parent), sets[d]);
      } else {
        single[d].state = -1;
        sets[d].clear();
      }
    } else {
      single[d].state = -1;
      stepper.step(sets[d - 1], n.byte, sets[d]);
    }
    if (single[d].state < 0) {
      alive = !sets[d].empty();
      has_tops = !sets[d].tops.empty();
      can_end = sets[d].can_end;
      if (has_tops && !can_end && sets[d].tops.size() == 1 && is_plain(pool.state(sets[d].tops[0]))) {
        single[d] = {pool.state(sets[d].tops[0]), pool.parent(sets[d].tops[0])};
      }
    }
    left_rule[d] = left_rule[d - 1] || can_end;
    if (alive) {
      add_tokens(accepted, i, i + 1);
      if (!has_tops) {  // nothing left to read in the rule: the subtree below is the caller's
        add_tokens(uncertain, i + 1, static_cast<size_t>(n.subtree_end));
        i = static_cast<size_t>(n.subtree_end);
        continue;
      }
      ++i;
    } else {
      if (left_rule[d - 1]) add_tokens(uncertain, i, static_cast<size_t>(n.subtree_end));
      i = static_cast<size_t>(n.subtree_end);
    }
  }
  StateTokens out;
  const int32_t v = vocabulary.size();
  if (static_cast<int64_t>(accepted.size()) * 32 > v) {
    out.accepted_bits.assign(static_cast<size_t>(vocabulary.bitmask_words()), 0u);
    for (int32_t t : accepted) out.accepted_bits[static_cast<size_t>(t) / 32] |= 1u << (static_cast<uint32_t>(t) % 32);
  } else {
    out.accepted_ids = std::move(accepted);
  }
  out.uncertain = std::move(uncertain);
  return out;
}

CompiledGrammar::Impl::Impl(std::shared_ptr<const TokenVocabulary> v, ByteAutomaton a)
    : vocabulary(std::move(v)), automaton(std::move(a)) {
  tokens.reset(new std::atomic<const StateTokens*>[static_cast<size_t>(automaton.num_states())]);
  for (int32_t s = 0; s < automaton.num_states(); ++s)
    tokens[static_cast<size_t>(s)].store(nullptr, std::memory_order_relaxed);
}

CompiledGrammar::Impl::~Impl() {
  for (int32_t s = 0; s < automaton.num_states(); ++s)
    delete tokens[static_cast<size_t>(s)].load(std::memory_order_relaxed);
}

std::vector<SharedClassification> shared_classifications(const ByteAutomaton& a, const std::vector<uint8_t>& eligible,
                                                         int32_t max_depth, const CompileDeadline& deadline) {
  const auto n = static_cast<size_t>(a.num_states());
  std::vector<SharedClassification> shares(n);
  if (n > 50'000) return shares;
  // Round 0: states that end the rule, have no byte edges, or call (each its own class) differ.
  std::vector<int32_t> cls(n);
  for (size_t s = 0; s < n; ++s) {
    const auto st = static_cast<int32_t>(s);
    const bool calls = a.calls_begin(st) != a.calls_end(st);
    cls[s] = calls ? 3 + st : (a.state(st).final ? 1 : 0) + (a.has_byte_edges(st) ? 0 : 2);
  }
  // A state's key in a round: its class and its edges with their targets' classes. Keys are
  // hashed; states of equal hash are compared in full, so a collision never merges classes.
  auto same_key = [&](size_t x, size_t y) {
    const auto sx = static_cast<int32_t>(x), sy = static_cast<int32_t>(y);
    if (cls[x] != cls[y] || a.edges_end(sx) - a.edges_begin(sx) != a.edges_end(sy) - a.edges_begin(sy)) return false;
    for (const ByteEdge *e = a.edges_begin(sx), *f = a.edges_begin(sy); e != a.edges_end(sx); ++e, ++f)
      if (e->lo != f->lo || e->hi != f->hi ||
          cls[static_cast<size_t>(e->target)] != cls[static_cast<size_t>(f->target)])
        return false;
    return true;
  };
  // Open addressing from a key's hash to the first state with it (flat arrays, reused each round:
  // a round is a few thousand look-ups, hash-map nodes would be most of its time).
  size_t table_size = 16;
  while (table_size < 2 * n) table_size *= 2;
  std::vector<uint64_t> slot_hash(table_size);
  std::vector<int32_t> slot_state(table_size), first_of_class(n), same_hash(n), next(n);
  size_t classes = std::unordered_set<int32_t>(cls.begin(), cls.end()).size();
  // After round r, states of one class agree on every path of r bytes.
  for (int32_t round = 1; round <= max_depth; ++round) {
    if (deadline.expired()) return shares;
    std::fill(slot_state.begin(), slot_state.end(), -1);
    int32_t ids = 0;
    for (size_t s = 0; s < n; ++s) {
      uint64_t h = StateKeyHash::mix(1469598103934665603ull, cls[s]);
      for (const ByteEdge* e = a.edges_begin(static_cast<int32_t>(s)); e != a.edges_end(static_cast<int32_t>(s)); ++e)
        h = StateKeyHash::mix(StateKeyHash::mix(h, e->lo | (e->hi << 8)), cls[static_cast<size_t>(e->target)]);
      same_hash[s] = -1;
      size_t slot = (h ^ (h >> 29)) & (table_size - 1);
      while (slot_state[slot] >= 0 && slot_hash[slot] != h) slot = (slot + 1) & (table_size - 1);
      if (slot_state[slot] < 0) {
        slot_hash[slot] = h;
        slot_state[slot] = static_cast<int32_t>(s);
      } else {
        int32_t r = slot_state[slot];  // earlier states of this hash, one per class
        while (!same_key(s, static_cast<size_t>(r)) && same_hash[static_cast<size_t>(r)] >= 0)
          r = same_hash[static_cast<size_t>(r)];
        if (same_key(s, static_cast<size_t>(r))) {
          next[s] = next[static_cast<size_t>(r)];
          continue;
        }
        same_hash[static_cast<size_t>(r)] = static_cast<int32_t>(s);
      }
      next[s] = ids++;
    }
    const bool stable = static_cast<size_t>(ids) == classes;  // a round that splits nothing: every later one agrees
    classes = static_cast<size_t>(ids);
    cls.swap(next);
    std::fill(first_of_class.begin(), first_of_class.begin() + ids, -1);
    for (size_t s = 0; s < n; ++s) {
      if (!eligible[s]) continue;
      int32_t& first = first_of_class[static_cast<size_t>(cls[s])];
      if (first < 0) first = static_cast<int32_t>(s);
      else shares[s] = {first, stable ? max_depth : round};
    }
    if (stable) break;
  }
  return shares;
}

StateTokens CompiledGrammar::Impl::classify(int32_t state, StackPool& pool, const CompileDeadline* deadline,
                                            bool& gave_up) const {
  gave_up = false;
  const SharedClassification share = shares.empty() ? SharedClassification{} : shares[static_cast<size_t>(state)];
  if (share.base < 0) {
    std::optional<StateTokens> own = classify_tokens(automaton, *vocabulary, state, pool, deadline);
    if (!own) gave_up = true;
    return own ? std::move(*own) : StateTokens{};
  }
  // Tokens of at most share.depth bytes as the base; longer ones walked here.
  const StateTokens* base_tokens = &tokens_for(share.base);
  StateTokens full_base;  // a base stored as its own base's classes plus its long tokens, spelled out
  if (base_tokens->base && base_tokens->base_depth >= share.depth) {
    base_tokens = base_tokens->base;  // the short tokens are its base's anyway
  } else if (base_tokens->base) {
    full_base = spelled_out(*base_tokens);
    base_tokens = &full_base;
  }
  const StateTokens& base = *base_tokens;
  std::optional<StateTokens> long_tokens =
      classify_tokens(automaton, *vocabulary, state, pool, deadline, share.depth + 1);
  if (!long_tokens) {
    gave_up = true;
    return {};
  }
  const TokenVocabulary& v = *vocabulary;
  auto is_short = [&](int32_t id) { return static_cast<int32_t>(v.bytes(id).size()) <= share.depth; };
  StateTokens out;
  if (&base != &full_base && !base.accepted_bits.empty() && !base.base &&
      static_cast<int64_t>(v.tokens_longer_than(share.depth)) * 32 <= v.size()) {
    out.base = &base;
    out.base_depth = share.depth;
    out.accepted_ids = std::move(long_tokens->accepted_ids);
    for (size_t w = 0; w < long_tokens->accepted_bits.size(); ++w)
      for (uint32_t bits = long_tokens->accepted_bits[w]; bits; bits &= bits - 1)
        out.accepted_ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
    out.uncertain = std::move(long_tokens->uncertain);
    return out;
  }
  if (!base.accepted_bits.empty()) {
    out.accepted_bits = base.accepted_bits;
    const int32_t* longest = v.tokens_by_length().data();
    for (const int32_t* id = longest; id != longest + v.tokens_longer_than(share.depth); ++id)
      out.accepted_bits[static_cast<size_t>(*id) / 32] &= ~(1u << (static_cast<uint32_t>(*id) % 32));
    for (int32_t id : long_tokens->accepted_ids)
      out.accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
    for (size_t w = 0; w < long_tokens->accepted_bits.size(); ++w)
      out.accepted_bits[w] |= long_tokens->accepted_bits[w];
  } else {
    for (int32_t id : base.accepted_ids)
      if (is_short(id)) out.accepted_ids.push_back(id);
    if (!long_tokens->accepted_bits.empty()) {
      out.accepted_bits = long_tokens->accepted_bits;
      for (int32_t id : out.accepted_ids)
        out.accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
      out.accepted_ids.clear();
    } else {
      out.accepted_ids.insert(out.accepted_ids.end(), long_tokens->accepted_ids.begin(),
                              long_tokens->accepted_ids.end());
    }
  }
  // Uncertain tokens stay in trie order, so the matcher's checks share prefixes.
  std::vector<int32_t> short_uncertain;
  for (int32_t id : base.uncertain)
    if (is_short(id)) short_uncertain.push_back(id);
  out.uncertain.resize(short_uncertain.size() + long_tokens->uncertain.size());
  std::merge(short_uncertain.begin(), short_uncertain.end(), long_tokens->uncertain.begin(),
             long_tokens->uncertain.end(), out.uncertain.begin(),
             [&](int32_t x, int32_t y) { return v.trie_rank(x) < v.trie_rank(y); });
  return out;
}

StateTokens CompiledGrammar::Impl::spelled_out(const StateTokens& t) const {
  const TokenVocabulary& v = *vocabulary;
  StateTokens out;
  out.accepted_bits = t.base->accepted_bits;
  const int32_t* longest = v.tokens_by_length().data();
  for (const int32_t* id = longest; id != longest + v.tokens_longer_than(t.base_depth); ++id)
    out.accepted_bits[static_cast<size_t>(*id) / 32] &= ~(1u << (static_cast<uint32_t>(*id) % 32));
  for (int32_t id : t.accepted_ids)
    out.accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
  for (int32_t id : t.base->uncertain)
    if (static_cast<int32_t>(v.bytes(id).size()) <= t.base_depth) out.uncertain.push_back(id);
  const size_t mid = out.uncertain.size();
  out.uncertain.insert(out.uncertain.end(), t.uncertain.begin(), t.uncertain.end());
  std::inplace_merge(out.uncertain.begin(), out.uncertain.begin() + static_cast<std::ptrdiff_t>(mid),
                     out.uncertain.end(), [&](int32_t x, int32_t y) { return v.trie_rank(x) < v.trie_rank(y); });
  return out;
}

bool CompiledGrammar::Impl::is_alias(int32_t state) const {
  return !shares.empty() && shares[static_cast<size_t>(state)].base >= 0 &&
         shares[static_cast<size_t>(state)].depth >= vocabulary->max_token_bytes();
}

const StateTokens& CompiledGrammar::Impl::tokens_for(int32_t state) const {
  if (is_alias(state)) return tokens_for(shares[static_cast<size_t>(state)].base);
  std::atomic<const StateTokens*>& slot = tokens[static_cast<size_t>(state)];
  const StateTokens* have = slot.load(std::memory_order_acquire);
  if (have) return *have;
  StackPool pool;
  bool gave_up = false;
  auto* fresh = new StateTokens(classify(state, pool, nullptr, gave_up));
  const StateTokens* expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *expected;
}

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
const TokenVocabulary& CompiledGrammar::vocabulary() const { return *impl_->vocabulary; }
const std::shared_ptr<const TokenVocabulary>& CompiledGrammar::vocabulary_ptr() const { return impl_->vocabulary; }
int32_t CompiledGrammar::num_states() const { return impl_->automaton.num_states(); }
int32_t CompiledGrammar::num_rules() const { return impl_->automaton.num_rules(); }
int32_t CompiledGrammar::num_precomputed_states() const { return impl_->precomputed; }
double CompiledGrammar::compile_ms() const { return impl_->compile_ms; }

std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& grammar,
                                                       std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       const GrammarLimits& limits) {
  if (!vocabulary) throw GrammarError("compile_grammar needs a vocabulary");
  const CompileDeadline deadline(limits.compile_budget_ms);
  auto impl = std::make_unique<CompiledGrammar::Impl>(vocabulary, ByteAutomaton(grammar, limits, deadline));
  // Precompute the token classes of every state a token can start from (reachable, with byte
  // edges), within the precompute budget; the rest are computed on first use.
  const ByteAutomaton& a = impl->automaton;
  std::vector<uint8_t> reachable(static_cast<size_t>(a.num_states()), 0);
  std::vector<int32_t> work{a.rule_start(a.root())};
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (reachable[static_cast<size_t>(s)]) continue;
    reachable[static_cast<size_t>(s)] = 1;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = a.step(s, static_cast<uint8_t>(b));
      if (t >= 0 && !reachable[static_cast<size_t>(t)]) work.push_back(t);
    }
    for (const CallEdge* c = a.calls_begin(s); c != a.calls_end(s); ++c) {
      work.push_back(a.rule_start(c->rule));
      work.push_back(c->return_state);
    }
  }
  StackPool pool;
  const CompileDeadline precompute_deadline(limits.precompute_budget_ms);
  std::vector<uint8_t> eligible(reachable.size(), 0);
  for (int32_t s = 0; s < a.num_states(); ++s)
    eligible[static_cast<size_t>(s)] = reachable[static_cast<size_t>(s)] && a.has_byte_edges(s);
  // The refinement gets at most half the precompute budget (its rounds done by then stay valid),
  // so a huge automaton still has time left to classify its first states.
  const CompileDeadline refine_deadline(limits.precompute_budget_ms / 2);
  impl->shares = shared_classifications(a, eligible, vocabulary->max_token_bytes(), refine_deadline);
  // In index order: a state's base (lower index) is classified before it.
  for (int32_t s = 0; s < a.num_states(); ++s) {
    if (!eligible[static_cast<size_t>(s)] || impl->is_alias(s)) continue;
    if (deadline.expired() || precompute_deadline.expired()) break;
    if (pool.size() > (1u << 20)) pool.clear();
    if (impl->tokens[static_cast<size_t>(s)].load(std::memory_order_relaxed)) continue;  // computed as a base
    bool gave_up = false;
    StateTokens tokens = impl->classify(s, pool, &precompute_deadline, gave_up);
    if (gave_up) break;  // out of precompute time: this state and the rest are classified on first use
    impl->tokens[static_cast<size_t>(s)].store(new StateTokens(std::move(tokens)), std::memory_order_release);
  }
  for (int32_t s = 0; s < a.num_states(); ++s) {
    const int32_t owner = impl->is_alias(s) ? impl->shares[static_cast<size_t>(s)].base : s;
    if (impl->tokens[static_cast<size_t>(owner)].load(std::memory_order_relaxed)) ++impl->precomputed;
  }
  impl->compile_ms = deadline.elapsed_ms();
  return std::shared_ptr<const CompiledGrammar>(new CompiledGrammar(std::move(impl)));
}

std::shared_ptr<const CompiledGrammar> compile_grammar(GrammarKind kind, std::string_view text,
                                                       std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       const GrammarOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const Grammar g = build_grammar(kind, text, options);
  GrammarLimits rest = options.limits;
  const auto spent =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  rest.compile_budget_ms = static_cast<int32_t>(std::max<int64_t>(1, rest.compile_budget_ms - spent));
  return compile_grammar(g, std::move(vocabulary), rest);
}

}  // namespace pagedkv::grammar
