// Grammar -> ByteAutomaton: per rule, a Thompson NFA built back to front (each expression is
// built given the state that follows it, memoized on (expression, next state), so sub-expressions
// that a front end shares, such as the tails of an object's optional properties, are built once),
// then the subset construction over bytes; then dead states are cut and left recursion refused.
#include "byte_automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

namespace pagedkv::grammar {

void CompileDeadline::check(const char* during) const {
  if (expired())
    throw GrammarError(
        limit_message("compile_budget_ms", budget_ms_, fmt::format("compilation ran out of time during {}", during)));
}

namespace {

struct NfaState {
  std::vector<int32_t> eps;
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
};

using ByteRange = std::pair<uint8_t, uint8_t>;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// The byte-range sequences whose union is exactly the UTF-8 encodings of lo..hi.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t end : kLengthEnds) {  // split where the encoded length changes
    if (lo <= end && hi > end) {
      utf8_sequences(lo, end, out);
      utf8_sequences(end + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  std::vector<ByteRange> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const GrammarLimits& limits, const CompileDeadline& deadline, int64_t& total_states)
      : g_(g), limits_(limits), deadline_(deadline), total_(total_states) {}

  std::vector<NfaState> states;

  int32_t add_state() {
    if (++total_ > limits_.max_automaton_states)
      throw GrammarError(
          limit_message("max_automaton_states", limits_.max_automaton_states, "the grammar's automaton is too large"));
    if ((total_ & 255) == 0) deadline_.check("automaton construction");
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }

  // The start of a fragment that matches `e` and then goes on at `next`.
  int32_t build(ExprId id, int32_t next, int depth) {
    if (depth > kMaxExprDepth)
      throw GrammarError(
          limit_message("expression_depth", kMaxExprDepth,
                        "expressions nest too deep to build (e.g. thousands of optional properties in one object)"));
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(id)) << 32) | static_cast<uint32_t>(next);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const int32_t start = build_uncached(id, next, depth);
    memo_[key] = start;
    return start;
  }

 private:
  // The builder recurses once per nesting level (a few hundred bytes of stack each): this bound
  // keeps it well inside a 2 MiB thread stack.
  static constexpr int kMaxExprDepth = 4'000;

  int32_t build_uncached(ExprId id, int32_t next, int depth) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return next;
      case ExprKind::kLiteral: {
        int32_t cur = next;
        for (size_t i = e.bytes.size(); i-- > 0;) {
          const int32_t s = add_state();
          const auto b = static_cast<uint8_t>(e.bytes[i]);
          states[static_cast<size_t>(s)].bytes.push_back({b, b, cur});
          cur = s;
        }
        return cur;
      }
      case ExprKind::kCharClass: {
        const int32_t start = add_state();
        std::vector<std::vector<ByteRange>> seqs;
        for (const CodepointRange& r : e.ranges) utf8_sequences(r.lo, r.hi, seqs);
        std::map<std::vector<ByteRange>, int32_t> suffix_state;  // shared continuation chains
        for (const auto& seq : seqs) {
          int32_t cur = next;
          for (size_t i = seq.size(); i-- > 1;) {
            std::vector<ByteRange> suffix(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.end());
            auto it = suffix_state.find(suffix);
            if (it != suffix_state.end()) {
              cur = it->second;
              continue;
            }
            const int32_t s = add_state();
            states[static_cast<size_t>(s)].bytes.push_back({seq[i].first, seq[i].second, cur});
            suffix_state[suffix] = s;
            cur = s;
          }
          states[static_cast<size_t>(start)].bytes.push_back({seq[0].first, seq[0].second, cur});
        }
        return start;
      }
      case ExprKind::kSequence: {
        int32_t cur = next;
        for (size_t i = e.children.size(); i-- > 0;) cur = build(e.children[i], cur, depth + 1);
        return cur;
      }
      case ExprKind::kChoice: {
        const int32_t s = add_state();
        for (ExprId c : e.children) {
          const int32_t t = build(c, next, depth + 1);
          states[static_cast<size_t>(s)].eps.push_back(t);
        }
        return s;
      }
      case ExprKind::kRepeat: {
        const ExprId child = e.children[0];
        int32_t cur = next;
        if (e.max == kUnbounded) {
          const int32_t loop = add_state();
          states[static_cast<size_t>(loop)].eps.push_back(next);
          const int32_t body = build(child, loop, depth + 1);
          states[static_cast<size_t>(loop)].eps.push_back(body);
          cur = loop;
        } else {
          for (int32_t i = 0; i < e.max - e.min; ++i) {
            const int32_t s = add_state();
            states[static_cast<size_t>(s)].eps.push_back(next);
            const int32_t body = build(child, cur, depth + 1);
            states[static_cast<size_t>(s)].eps.push_back(body);
            cur = s;
          }
        }
        for (int32_t i = 0; i < e.min; ++i) cur = build(child, cur, depth + 1);
        return cur;
      }
      case ExprKind::kRuleRef: {
        const int32_t s = add_state();
        states[static_cast<size_t>(s)].calls.push_back({e.rule, next});
        return s;
      }
    }
    return next;
  }

  const Grammar& g_;
  const GrammarLimits& limits_;
  const CompileDeadline& deadline_;
  int64_t& total_;
  std::unordered_map<uint64_t, int32_t> memo_;
};

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// One rule's DFA, states numbered from 0 (the start).
struct RuleDfa {
  std::vector<bool> final;
  std::vector<std::vector<ByteEdge>> edges;
  std::vector<std::vector<CallEdge>> calls;
};

RuleDfa determinize(const std::vector<NfaState>& nfa, int32_t start, int32_t accept, const GrammarLimits& limits,
                    const CompileDeadline& deadline, int64_t& total_states) {
  RuleDfa dfa;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
  std::vector<std::vector<int32_t>> sets;
  std::vector<uint8_t> seen(nfa.size(), 0);
  auto closure = [&](std::vector<int32_t> roots) {
    std::vector<int32_t> out, stack = std::move(roots);
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(x)]) continue;
      seen[static_cast<size_t>(x)] = 1;
      out.push_back(x);
      for (int32_t t : nfa[static_cast<size_t>(x)].eps) stack.push_back(t);
    }
    for (int32_t x : out) seen[static_cast<size_t>(x)] = 0;
    std::sort(out.begin(), out.end());
    return out;
  };
  auto id_of = [&](std::vector<int32_t> set) {
    auto [it, inserted] = ids.emplace(std::move(set), static_cast<int32_t>(sets.size()));
    if (inserted) {
      if (++total_states > limits.max_automaton_states)
        throw GrammarError(
            limit_message("max_automaton_states", limits.max_automaton_states, "the grammar's automaton is too large"));
      if ((total_states & 63) == 0) deadline.check("automaton construction");
      sets.push_back(it->first);
    }
    return it->second;
  };
  id_of(closure({start}));
  std::vector<ByteEdge> member_edges;
  std::vector<int> bounds;
  std::vector<int32_t> targets;
  for (size_t d = 0; d < sets.size(); ++d) {
    const std::vector<int32_t> members = sets[d];
    bool is_final = false;
    member_edges.clear();
    bounds.clear();
    std::vector<CallEdge> calls;
    for (int32_t x : members) {
      const NfaState& s = nfa[static_cast<size_t>(x)];
      if (x == accept) is_final = true;
      for (const ByteEdge& e : s.bytes) {
        member_edges.push_back(e);
        bounds.push_back(e.lo);
        bounds.push_back(e.hi + 1);
      }
      for (const CallEdge& c : s.calls) calls.push_back(c);
    }
    // The byte axis cut at every edge's ends: within one piece, the same edges apply.
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    std::vector<ByteEdge> edges;
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const int lo = bounds[k], hi = bounds[k + 1] - 1;
      targets.clear();
      for (const ByteEdge& e : member_edges)
        if (e.lo <= lo && hi <= e.hi) targets.push_back(e.target);
      if (targets.empty()) continue;
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      const int32_t target = id_of(closure(targets));
      if (!edges.empty() && edges.back().hi == lo - 1 && edges.back().target == target)
        edges.back().hi = static_cast<uint8_t>(hi);
      else edges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), target});
    }
    std::vector<CallEdge> dfa_calls;
    for (const CallEdge& c : calls) {
      const CallEdge e{c.rule, id_of(closure({c.return_state}))};
      bool duplicate = false;
      for (const CallEdge& o : dfa_calls) duplicate |= o.rule == e.rule && o.return_state == e.return_state;
      if (!duplicate) dfa_calls.push_back(e);
    }
    dfa.final.push_back(is_final);
    dfa.edges.push_back(std::move(edges));
    dfa.calls.push_back(std::move(dfa_calls));
  }
  return dfa;
}

}  // namespace

ByteAutomaton::ByteAutomaton(const Grammar& grammar, const GrammarLimits& limits, const CompileDeadline& deadline) {
  grammar.check_complete();
  root_ = grammar.root();
  int64_t nfa_states = 0, dfa_states = 0;
  std::vector<RuleDfa> dfas;
  for (RuleId r = 0; r < grammar.num_rules(); ++r) {
    NfaBuilder builder(grammar, limits, deadline, nfa_states);
    const int32_t accept = builder.add_state();
    const int32_t start = builder.build(grammar.rule(r).body, accept, 0);
    dfas.push_back(determinize(builder.states, start, accept, limits, deadline, dfa_states));
    nfa_states -= static_cast<int64_t>(builder.states.size());  // the limit is per automaton, NFAs are temporary
  }
  // Global numbering: rule r's DFA state i is rule_start_[r] + i.
  for (RuleId r = 0; r < grammar.num_rules(); ++r) {
    rule_start_.push_back(static_cast<int32_t>(states_.size()));
    states_.resize(states_.size() + dfas[static_cast<size_t>(r)].final.size());
  }
  const auto n = static_cast<size_t>(num_states());

  // Liveness: a state is live when some path reaches its rule's end (byte edges, or calls to
  // productive rules returning to live states). Computed backwards from the final states.
  std::vector<uint8_t> live(n, 0), productive(rule_start_.size(), 0);
  std::vector<std::vector<int32_t>> byte_preds(n), return_preds(n), call_sites(rule_start_.size());
  std::vector<int32_t> work;
  for (RuleId r = 0; r < grammar.num_rules(); ++r) {
    const RuleDfa& d = dfas[static_cast<size_t>(r)];
    const int32_t base = rule_start_[static_cast<size_t>(r)];
    for (size_t i = 0; i < d.final.size(); ++i) {
      const int32_t s = base + static_cast<int32_t>(i);
      for (const ByteEdge& e : d.edges[i]) byte_preds[static_cast<size_t>(base + e.target)].push_back(s);
      for (const CallEdge& c : d.calls[i]) {
        return_preds[static_cast<size_t>(base + c.return_state)].push_back(s);
        call_sites[static_cast<size_t>(c.rule)].push_back(s);
      }
      if (d.final[i]) work.push_back(s);
    }
  }
  auto rule_of = [&](int32_t s) {
    return static_cast<RuleId>(std::upper_bound(rule_start_.begin(), rule_start_.end(), s) - rule_start_.begin() - 1);
  };
  // Which return state a call site waits on, per (site, rule): recomputed from the DFA.
  auto call_returns_live = [&](int32_t site, RuleId callee) {
    const RuleId r = rule_of(site);
    const int32_t base = rule_start_[static_cast<size_t>(r)];
    for (const CallEdge& c : dfas[static_cast<size_t>(r)].calls[static_cast<size_t>(site - base)])
      if (c.rule == callee && live[static_cast<size_t>(base + c.return_state)]) return true;
    return false;
  };
  while (!work.empty()) {
    const int32_t x = work.back();
    work.pop_back();
    if (live[static_cast<size_t>(x)]) continue;
    live[static_cast<size_t>(x)] = 1;
    for (int32_t p : byte_preds[static_cast<size_t>(x)])
      if (!live[static_cast<size_t>(p)]) work.push_back(p);
    const RuleId rx = rule_of(x);
    for (int32_t p : return_preds[static_cast<size_t>(x)]) {
      if (live[static_cast<size_t>(p)]) continue;
      const int32_t base = rule_start_[static_cast<size_t>(rx)];
      for (const CallEdge& c : dfas[static_cast<size_t>(rx)].calls[static_cast<size_t>(p - base)])
        if (base + c.return_state == x && productive[static_cast<size_t>(c.rule)]) work.push_back(p);
    }
    if (x == rule_start_[static_cast<size_t>(rx)] && !productive[static_cast<size_t>(rx)]) {
      productive[static_cast<size_t>(rx)] = 1;
      for (int32_t site : call_sites[static_cast<size_t>(rx)])
        if (!live[static_cast<size_t>(site)] && call_returns_live(site, rx)) work.push_back(site);
    }
  }
  if (!productive[static_cast<size_t>(root_)]) throw GrammarError("the grammar matches no string");

  // Assemble, keeping only edges into live states and calls of productive rules.
  for (RuleId r = 0; r < grammar.num_rules(); ++r) {
    const RuleDfa& d = dfas[static_cast<size_t>(r)];
    const int32_t base = rule_start_[static_cast<size_t>(r)];
    for (size_t i = 0; i < d.final.size(); ++i) {
      AutomatonState& st = states_[static_cast<size_t>(base) + i];
      st.rule = r;
      st.final = d.final[i];
      st.edges_begin = static_cast<uint32_t>(edges_.size());
      for (const ByteEdge& e : d.edges[i])
        if (live[static_cast<size_t>(base + e.target)]) edges_.push_back({e.lo, e.hi, base + e.target});
      st.edges_end = static_cast<uint32_t>(edges_.size());
      st.calls_begin = static_cast<uint32_t>(calls_.size());
      for (const CallEdge& c : d.calls[i])
        if (productive[static_cast<size_t>(c.rule)] && live[static_cast<size_t>(base + c.return_state)])
          calls_.push_back({c.rule, base + c.return_state});
      st.calls_end = static_cast<uint32_t>(calls_.size());
    }
  }

  byte_table_.assign(states_.size(), -1);
  constexpr size_t kMaxTableBytes = size_t{8} << 20;
  for (size_t s = 0; s < states_.size(); ++s) {
    const AutomatonState& st = states_[s];
    const uint32_t count = st.edges_end - st.edges_begin;
    if (count <= 3 || count >= kNoEdge || edge_of_byte_.size() + 256 > kMaxTableBytes) continue;
    byte_table_[s] = static_cast<int32_t>(edge_of_byte_.size());
    edge_of_byte_.resize(edge_of_byte_.size() + 256, kNoEdge);
    uint8_t* row = edge_of_byte_.data() + byte_table_[s];
    for (uint32_t k = 0; k < count; ++k) {
      const ByteEdge& e = edges_[st.edges_begin + k];
      for (int b = e.lo; b <= e.hi; ++b) row[b] = static_cast<uint8_t>(k);
    }
  }

  // Left recursion: a rule that can call itself before reading a byte would grow the stack forever.
  std::vector<uint8_t> nullable(rule_start_.size(), 0);
  auto left_reachable = [&](RuleId r, std::vector<RuleId>* callees) {
    std::vector<int32_t> stack{rule_start_[static_cast<size_t>(r)]};
    std::vector<int32_t> visited;
    bool reaches_end = false;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (std::find(visited.begin(), visited.end(), s) != visited.end()) continue;
      visited.push_back(s);
      if (state(s).final) reaches_end = true;
      for (const CallEdge* c = calls_begin(s); c != calls_end(s); ++c) {
        if (callees) callees->push_back(c->rule);
        if (nullable[static_cast<size_t>(c->rule)]) stack.push_back(c->return_state);
      }
    }
    return reaches_end;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (RuleId r = 0; r < grammar.num_rules(); ++r)
      if (!nullable[static_cast<size_t>(r)] && left_reachable(r, nullptr)) {
        nullable[static_cast<size_t>(r)] = 1;
        changed = true;
      }
    deadline.check("left-recursion analysis");
  }
  std::vector<std::vector<RuleId>> left_calls(rule_start_.size());
  for (RuleId r = 0; r < grammar.num_rules(); ++r) left_reachable(r, &left_calls[static_cast<size_t>(r)]);
  std::vector<uint8_t> color(rule_start_.size(), 0);  // 0 new, 1 on the path, 2 done
  for (RuleId r0 = 0; r0 < grammar.num_rules(); ++r0) {
    if (color[static_cast<size_t>(r0)]) continue;
    std::vector<std::pair<RuleId, size_t>> path{{r0, 0}};
    color[static_cast<size_t>(r0)] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      const auto& out = left_calls[static_cast<size_t>(r)];
      if (next == out.size()) {
        color[static_cast<size_t>(r)] = 2;
        path.pop_back();
        continue;
      }
      const RuleId c = out[next++];
      if (color[static_cast<size_t>(c)] == 1)
        throw GrammarError(fmt::format("the grammar is left-recursive through rule '{}'", grammar.rule(c).name));
      if (color[static_cast<size_t>(c)] == 0) {
        color[static_cast<size_t>(c)] = 1;
        path.push_back({c, 0});
      }
    }
  }
}

}  // namespace pagedkv::grammar
