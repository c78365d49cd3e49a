// GrammarMatcher: one request's position in a compiled grammar.
//
// The engine's loop per decode step is:
//     matcher.fill_next_token_bitmask(mask);        // which tokens may come next
//     apply_token_bitmask(logits, mask);            // grammar/token_bitmask.h
//     id = sample(logits);
//     matcher.accept_token(id);                     // true: the mask allowed it
// and, when speculative tokens are refused, rollback(n). A stop token (the vocabulary's stop
// ids) is allowed exactly when the output so far is a complete sentence of the grammar; after it
// the matcher is terminated and allows nothing.
//
// The position is a set of pushdown stacks (the grammar may be ambiguous at a byte); stacks are
// hash-consed nodes of a pool the matcher owns, so a step costs a few node look-ups, not copies.
// Not thread-safe: one matcher per request, used by one thread at a time; many matchers may share
// one CompiledGrammar across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "pagedkv/grammar/compiled_grammar.h"

namespace pagedkv::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances by token `id` when the grammar allows it and returns true; otherwise returns false
  // and changes nothing. Throws UsageError for an id outside the vocabulary.
  bool accept_token(int32_t id);
  // Advances by raw bytes (one step for rollback); false and unchanged when not a valid
  // continuation. Used for forced prefixes and by reference checks.
  bool accept_bytes(std::string_view bytes);

  // Sets bit id of `mask` (grammar/token_bitmask.h layout) iff accept_token(id) would succeed.
  // `mask` must have at least vocabulary().bitmask_words() words; extra words are zeroed.
  void fill_next_token_bitmask(std::span<uint32_t> mask);

  // The output so far is a complete sentence: a stop token is allowed now.
  bool can_terminate() const;
  // A stop token was accepted; nothing more is allowed.
  bool is_terminated() const;

  // Undoes the last n accepted steps (tokens or accept_bytes calls). Throws UsageError if n is
  // negative or more than num_steps().
  void rollback(int32_t n);
  int32_t num_steps() const;
  void reset();  // back to the start of the grammar
  // Drops the stack nodes no remembered step reaches (done automatically as they accumulate;
  // positions, masks and rollback are unchanged).
  void compact();

  const CompiledGrammar& grammar() const { return *grammar_; }

  struct State;

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<State> state_;
};

}  // namespace pagedkv::grammar
