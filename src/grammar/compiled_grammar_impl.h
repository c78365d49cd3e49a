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
  std::vector<int32_t> accepted_ids;    // else the accepted ids
  std::vector<int32_t> uncertain;       // ids in byte order (the trie's), so checks share prefixes
};

// Splits the vocabulary for one automaton state (one that has byte edges) by walking the token
// trie from it with `pool` as scratch. With a deadline, gives up (nullopt) once it has expired.
std::optional<StateTokens> classify_tokens(const ByteAutomaton& automaton, const TokenVocabulary& vocabulary,
                                           int32_t state, StackPool& pool, const CompileDeadline* deadline = nullptr);

struct CompiledGrammar::Impl {
  Impl(std::shared_ptr<const TokenVocabulary> v, ByteAutomaton a);
  ~Impl();

  // The token classes of `state`, computed now if compilation did not get to it (thread-safe:
  // racing threads compute the same value and one install wins).
  const StateTokens& tokens_for(int32_t state) const;

  std::shared_ptr<const TokenVocabulary> vocabulary;
  ByteAutomaton automaton;
  std::unique_ptr<std::atomic<const StateTokens*>[]> tokens;
  int32_t precomputed = 0;
  double compile_ms = 0;
};

}  // namespace pagedkv::grammar
