// GrammarCache: compiled grammars for one vocabulary, by (kind, text, options), least recently
// used evicted first. Thread-safe: the lock is held only to look up or insert, never while
// compiling; callers asking for a grammar that another thread is compiling wait for that
// compilation instead of starting their own. A compilation that fails is not cached (the next
// request retries, and gets the same GrammarError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "pagedkv/grammar/compiled_grammar.h"

namespace pagedkv::grammar {

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity, GrammarOptions options = {});

  // The compiled grammar of (kind, text) under this cache's options; compiles it on a miss.
  // Throws GrammarError as compile_grammar does.
  std::shared_ptr<const CompiledGrammar> get(GrammarKind kind, std::string_view text);

  size_t size() const;
  int64_t hits() const;
  int64_t misses() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Future value;
    std::list<std::string>::iterator lru_position;
    uint64_t generation = 0;  // tells this compilation's entry from a later one of the same key
  };

  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t capacity_;
  GrammarOptions options_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;  // most recently used first
  std::unordered_map<std::string, Entry> entries_;
  int64_t hits_ = 0, misses_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace pagedkv::grammar
