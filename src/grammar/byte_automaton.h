// The compiled form of a Grammar: one DFA over bytes per rule, whose states may also call rules.
//
// A state's byte edges are deterministic (sorted, disjoint byte ranges); its call edges say "run
// rule R from its start, then continue at state t". A matcher position is a stack of states: the
// top is where the current rule is, the ones below are the return states of the callers. Every
// state is live (some path from it reaches its rule's end through productive calls), so a
// non-empty stack can always continue or finish: dead branches are cut at build time.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "pagedkv/grammar/grammar.h"

namespace pagedkv::grammar {

struct ByteEdge {
  uint8_t lo = 0, hi = 0;
  int32_t target = 0;
};

struct CallEdge {
  RuleId rule = 0;
  int32_t return_state = 0;
};

struct AutomatonState {
  RuleId rule = 0;
  bool final = false;  // the rule may end here
  uint32_t edges_begin = 0, edges_end = 0;
  uint32_t calls_begin = 0, calls_end = 0;
};

// Wall-clock budget of one compilation; check() throws GrammarError once it is spent.
class CompileDeadline {
 public:
  explicit CompileDeadline(int32_t budget_ms) : budget_ms_(budget_ms), start_(std::chrono::steady_clock::now()) {}
  bool expired() const { return elapsed_ms() > budget_ms_; }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  void check(const char* during) const;

 private:
  int32_t budget_ms_;
  std::chrono::steady_clock::time_point start_;
};

class ByteAutomaton {
 public:
  // Builds and checks the automaton of `grammar`. Throws GrammarError on left recursion, on a
  // grammar that matches nothing, and when limits.max_automaton_states or the deadline is hit.
  ByteAutomaton(const Grammar& grammar, const GrammarLimits& limits, const CompileDeadline& deadline);

  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  int32_t num_rules() const { return static_cast<int32_t>(rule_start_.size()); }
  const AutomatonState& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  int32_t rule_start(RuleId r) const { return rule_start_[static_cast<size_t>(r)]; }
  RuleId root() const { return root_; }
  bool has_byte_edges(int32_t s) const { return state(s).edges_begin != state(s).edges_end; }

  // The target of byte b from state s, or -1.
  int32_t step(int32_t s, uint8_t b) const {
    const AutomatonState& st = states_[static_cast<size_t>(s)];
    const int32_t table = byte_table_[static_cast<size_t>(s)];
    if (table >= 0) {  // a state with many edges: one look-up
      const uint8_t k = edge_of_byte_[static_cast<size_t>(table) + b];
      return k == kNoEdge ? -1 : edges_[st.edges_begin + k].target;
    }
    uint32_t lo = st.edges_begin, hi = st.edges_end;
    while (lo < hi) {  // binary search over disjoint, sorted ranges
      const uint32_t mid = (lo + hi) / 2;
      const ByteEdge& e = edges_[mid];
      if (b < e.lo) hi = mid;
      else if (b > e.hi) lo = mid + 1;
      else return e.target;
    }
    return -1;
  }
  const ByteEdge* edges_begin(int32_t s) const { return edges_.data() + state(s).edges_begin; }
  const ByteEdge* edges_end(int32_t s) const { return edges_.data() + state(s).edges_end; }
  const CallEdge* calls_begin(int32_t s) const { return calls_.data() + state(s).calls_begin; }
  const CallEdge* calls_end(int32_t s) const { return calls_.data() + state(s).calls_end; }

 private:
  std::vector<AutomatonState> states_;
  std::vector<ByteEdge> edges_;
  std::vector<CallEdge> calls_;
  std::vector<int32_t> rule_start_;
  RuleId root_ = 0;
  // For states with more than a few edges (string content, classes), a 256-entry table of edge
  // indexes (relative to edges_begin; kNoEdge: none) at byte_table_[s]; -1 elsewhere. Capped in
  // total so a huge automaton does not pay 256 bytes a state.
  static constexpr uint8_t kNoEdge = 255;
  std::vector<int32_t> byte_table_;
  std::vector<uint8_t> edge_of_byte_;
};

}  // namespace pagedkv::grammar
