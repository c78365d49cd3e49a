// What a CompiledGrammar holds (private to the grammar layer): the automaton, and per state the
// vocabulary split into tokens accepted whatever the stack below holds, and "uncertain" ones that
// leave the state's rule and must be checked against the real stack; the rest are rejected.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "byte_automaton.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "stack_set.h"

namespace pagedkv::grammar {

struct StateTokens {
  std::vector<uint32_t> accepted_bits;  // a bitmask over the vocabulary, when many are accepted
  std::vector<int32_t> accepted_ids;  // else the accepted ids
  std::vector<int32_t> uncertain;  // ids in byte order (the trie's), so checks share prefixes
};

// Splits the vocabulary for one automaton state (one that has byte edges) by walking the token
// trie from it with `pool` as scratch; only tokens of at least `min_token_bytes` bytes are
// classified (and subtrees without any are skipped). With a deadline, gives up (nullopt) once it
// has expired.
std::optional<StateTokens> classify_tokens(const ByteAutomaton& automaton, const TokenVocabulary& vocabulary,
                                           int32_t state, StackPool& pool, const CompileDeadline* deadline = nullptr,
                                           int32_t min_token_bytes = 0);

// Tokens of at most this many bytes are classified alike in states that agree on every path of
// that many bytes (same edges into such states, same ends, the same call states): the positions
// of an unrolled repetition far from its bound, equal sub-automata in different rules.
inline constexpr int32_t kSharedHorizonBytes = 16;

// For each state, a state whose classification it shares for tokens up to kSharedHorizonBytes
// (itself when none). Exact: computed by refining states kSharedHorizonBytes times on their
// edges (Moore's algorithm, bounded); skipped (each state its own) for very large automata or
// when the deadline runs out.
std::vector<int32_t> shared_classification_states(const ByteAutomaton& automaton, const CompileDeadline& deadline);

struct CompiledGrammar::Impl {
  Impl(std::shared_ptr<const TokenVocabulary> v, ByteAutomaton a);
  ~Impl();

  // The token classes of `state`, computed now if compilation did not get to it (thread-safe:
  // racing threads compute the same value and one install wins).
  const StateTokens& tokens_for(int32_t state) const;
  // Classifies `state` (through the state it shares with, if any); gave_up when the deadline ran out.
  StateTokens classify(int32_t state, StackPool& pool, const CompileDeadline* deadline, bool& gave_up) const;

  std::shared_ptr<const TokenVocabulary> vocabulary;
  ByteAutomaton automaton;
  std::unique_ptr<std::atomic<const StateTokens*>[]> tokens;
  std::vector<int32_t> shares_with;  // shared_classification_states()
  std::vector<int32_t> long_token_ids;  // tokens longer than kSharedHorizonBytes
  int32_t precomputed = 0;
  double compile_ms = 0;
};

}  // namespace pagedkv::grammar
