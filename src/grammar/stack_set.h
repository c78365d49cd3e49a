// Sets of pushdown stacks over a ByteAutomaton, and the byte step on them.
//
// A stack is a node (state, parent node) in a StackPool; nodes are hash-consed, so equal stacks
// are the same node id and a set of stacks is a short vector of ids. A StackSet holds the stacks
// whose top state can read a byte ("tops"), after every call has been entered and every finished
// rule returned from (the closure), plus `can_end`: the bottom rule may end here (for a matcher,
// the grammar is complete; for the compiler's per-state analysis, the analysed rule has ended and
// the unknown caller below would take over).
#pragma once

#include <cstdint>
#include <vector>

#include "byte_automaton.h"

namespace pagedkv::grammar {

class StackPool {
 public:
  StackPool() { slots_.assign(1024, -1); }

  int32_t node(int32_t state, int32_t parent) {
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent + 1);
    size_t mask = slots_.size() - 1;
    size_t i = hash(key) & mask;
    while (true) {
      const int32_t id = slots_[i];
      if (id < 0) break;
      if (keys_[static_cast<size_t>(id)] == key) return id;
      i = (i + 1) & mask;
    }
    const auto id = static_cast<int32_t>(keys_.size());
    keys_.push_back(key);
    slots_[i] = id;
    if (keys_.size() * 2 > slots_.size()) grow();
    return id;
  }
  int32_t state(int32_t n) const { return static_cast<int32_t>(keys_[static_cast<size_t>(n)] >> 32); }
  int32_t parent(int32_t n) const { return static_cast<int32_t>(keys_[static_cast<size_t>(n)] & 0xFFFFFFFFu) - 1; }
  size_t size() const { return keys_.size(); }
  void clear() {
    keys_.clear();
    slots_.assign(1024, -1);
  }

 private:
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void grow() {
    slots_.assign(slots_.size() * 2, -1);
    const size_t mask = slots_.size() - 1;
    for (size_t id = 0; id < keys_.size(); ++id) {
      size_t i = hash(keys_[id]) & mask;
      while (slots_[i] >= 0) i = (i + 1) & mask;
      slots_[i] = static_cast<int32_t>(id);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<int32_t> slots_;
};

struct StackSet {
  std::vector<int32_t> tops;
  bool can_end = false;
  bool empty() const { return tops.empty() && !can_end; }
  void clear() {
    tops.clear();
    can_end = false;
  }
};

class StackStepper {
 public:
  StackStepper(const ByteAutomaton& automaton, StackPool& pool) : a_(&automaton), pool_(&pool) {}

  // out = the closure of the single stack `node`.
  void start(int32_t node, StackSet& out) {
    out.clear();
    next_epoch();
    add_closure(node, out);
  }

  // out = in after reading byte b; returns !out.empty().
  bool step(const StackSet& in, uint8_t b, StackSet& out) {
    out.clear();
    next_epoch();
    for (int32_t top : in.tops) {
      const int32_t t = a_->step(pool_->state(top), b);
      if (t >= 0) add_closure(pool_->node(t, pool_->parent(top)), out);
    }
    return !out.empty();
  }

 private:
  void next_epoch() {
    if (++epoch_ == 0) {
      std::fill(mark_.begin(), mark_.end(), 0u);
      epoch_ = 1;
    }
  }
  bool visit(int32_t n) {
    if (static_cast<size_t>(n) >= mark_.size()) mark_.resize(static_cast<size_t>(n) * 2 + 64, 0u);
    if (mark_[static_cast<size_t>(n)] == epoch_) return false;
    mark_[static_cast<size_t>(n)] = epoch_;
    return true;
  }

  void add_closure(int32_t n0, StackSet& out) {
    work_.clear();
    work_.push_back(n0);
    while (!work_.empty()) {
      const int32_t n = work_.back();
      work_.pop_back();
      if (!visit(n)) continue;
      const int32_t s = pool_->state(n);
      if (a_->has_byte_edges(s)) out.tops.push_back(n);
      const int32_t parent = pool_->parent(n);
      for (const CallEdge* c = a_->calls_begin(s); c != a_->calls_end(s); ++c)
        work_.push_back(pool_->node(a_->rule_start(c->rule), pool_->node(c->return_state, parent)));
      if (a_->state(s).final) {
        if (parent < 0) out.can_end = true;
        else work_.push_back(parent);
      }
    }
  }

  const ByteAutomaton* a_;
  StackPool* pool_;
  std::vector<uint32_t> mark_;
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
};

}  // namespace pagedkv::grammar
