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
  // A state that shares a base's classes up to a depth past which few tokens are longer keeps only
  // its own long tokens: its accepted tokens are the base's accepted bits for the tokens of at most
  // `base_depth` bytes plus accepted_ids, its uncertain ones the base's of at most base_depth bytes
  // plus `uncertain`. No copy of the base's bitmask per position of a long length bound.
  const StateTokens* base = nullptr;
  int32_t base_depth = 0;
};

// Splits the vocabulary for one automaton state (one that has byte edges) by walking the token
// trie from it with `pool` as scratch; only tokens of at least `min_token_bytes` bytes are
// classified (and subtrees without any are skipped). With a deadline, gives up (nullopt) once it
// has expired.
std::optional<StateTokens> classify_tokens(const ByteAutomaton& automaton, const TokenVocabulary& vocabulary,
                                           int32_t state, StackPool& pool, const CompileDeadline* deadline = nullptr,
                                           int32_t min_token_bytes = 0);

// Where a state takes its classification from: every token of at most `depth` bytes is classified
// as in `base` (base -1: none, the state walks the whole vocabulary itself). Two states that agree
// on every path of n bytes (same edges into agreeing states, same rule ends, the same call states)
// classify every token of at most n bytes alike: the positions of an unrolled repetition
// (`maxLength: 40`, `[a-z]{3,50}`) agree up to their distance from the bound, equal sub-automata
// in different rules agree entirely.
struct SharedClassification {
  int32_t base = -1;
  int32_t depth = 0;
};

// For each state, the state of lowest index among `eligible` that agrees with it on the longest
// paths (up to max_depth bytes), found by refining the states round by round on their edges
// (Moore's algorithm, a round per byte of depth, stopped once stable). Exact whenever it stops:
// skipped for very large automata, cut short (smaller depths) when the deadline runs out.
std::vector<SharedClassification> shared_classifications(const ByteAutomaton& automaton,
                                                         const std::vector<uint8_t>& eligible, int32_t max_depth,
                                                         const CompileDeadline& deadline);

struct CompiledGrammar::Impl {
  Impl(std::shared_ptr<const TokenVocabulary> v, ByteAutomaton a);
  ~Impl();

  // The token classes of `state`, computed now if compilation did not get to it (thread-safe:
  // racing threads compute the same value and one install wins).
  const StateTokens& tokens_for(int32_t state) const;
  // Classifies `state` (through the state it shares with, if any: its short tokens are the base's,
  // only longer ones are walked); gave_up when the deadline ran out.
  StateTokens classify(int32_t state, StackPool& pool, const CompileDeadline* deadline, bool& gave_up) const;
  // The full classes of `t` when it is stored as its base's plus its own long tokens.
  StateTokens spelled_out(const StateTokens& t) const;
  // The state shares its base's classification for every token (nothing is stored for it).
  bool is_alias(int32_t state) const;

  std::shared_ptr<const TokenVocabulary> vocabulary;
  ByteAutomaton automaton;
  std::unique_ptr<std::atomic<const StateTokens*>[]> tokens;
  // shared_classifications(); a state whose depth covers the longest token is an alias of its
  // base (tokens_for returns the base's classes, nothing stored for it).
  std::vector<SharedClassification> shares;
  int32_t precomputed = 0;
  double compile_ms = 0;
};

}  // namespace pagedkv::grammar
