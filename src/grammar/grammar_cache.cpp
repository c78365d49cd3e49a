#include "pagedkv/grammar/grammar_cache.h"

#include <algorithm>

namespace pagedkv::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity, GrammarOptions options)
    : vocabulary_(std::move(vocabulary)), capacity_(std::max<size_t>(1, capacity)), options_(options) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(GrammarKind kind, std::string_view text) {
  std::string key;
  key.reserve(text.size() + 2);
  key += static_cast<char>('0' + static_cast<int>(kind));
  key += ':';
  key += text;
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Future future;
  uint64_t generation = 0;
  bool compile_here = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru_position);
      future = it->second.value;
    } else {
      ++misses_;
      compile_here = true;
      future = promise.get_future().share();
      generation = ++generation_;
      lru_.push_front(key);
      entries_.emplace(key, Entry{future, lru_.begin(), generation});
      while (entries_.size() > capacity_) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
    }
  }
  if (compile_here) {  // outside the lock: other keys are served meanwhile
    try {
      promise.set_value(compile_grammar(kind, text, vocabulary_, options_));
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mutex_);  // failures are not cached
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.generation == generation) {
        lru_.erase(it->second.lru_position);
        entries_.erase(it);
      }
    }
  }
  return future.get();
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}
int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}
int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

}  // namespace pagedkv::grammar
