#include "pagedkv/grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "pagedkv/grammar/grammar_limits.h"

namespace pagedkv::grammar {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::create(std::vector<std::string> token_bytes,
                                                               std::vector<int32_t> stop_ids) {
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  v->bytes_ = std::move(token_bytes);
  v->is_stop_.assign(v->bytes_.size(), 0);
  for (int32_t id : stop_ids) {
    if (id < 0 || static_cast<size_t>(id) >= v->bytes_.size())
      throw GrammarError(fmt::format("stop token id {} is outside the vocabulary of {} tokens", id, v->bytes_.size()));
    if (!v->is_stop_[static_cast<size_t>(id)]) v->stop_ids_.push_back(id);
    v->is_stop_[static_cast<size_t>(id)] = 1;
  }
  // The trie holds every token a grammar can take as bytes: non-empty, not a stop token.
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v->bytes_.size(); ++i)
    if (!v->bytes_[i].empty() && !v->is_stop_[i]) ids.push_back(static_cast<int32_t>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[static_cast<size_t>(a)] < v->bytes_[static_cast<size_t>(b)];
  });
  v->trie_.push_back(TrieNode{});
  std::vector<int32_t> path{0};  // path[d] = node at depth d
  std::string_view previous;
  for (int32_t id : ids) {
    const std::string_view b = v->bytes_[static_cast<size_t>(id)];
    v->max_token_bytes_ = std::max(v->max_token_bytes_, static_cast<int32_t>(b.size()));
    size_t lcp = 0;
    while (lcp < b.size() && lcp < previous.size() && b[lcp] == previous[lcp]) ++lcp;
    while (path.size() > lcp + 1) {
      v->trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(v->trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < b.size(); ++d) {
      TrieNode n;
      n.byte = static_cast<uint8_t>(b[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, 65535));
      n.token_begin = n.token_end = static_cast<int32_t>(v->trie_tokens_.size());
      path.push_back(static_cast<int32_t>(v->trie_.size()));
      v->trie_.push_back(n);
    }
    TrieNode& end = v->trie_[static_cast<size_t>(path.back())];
    if (end.token_begin == end.token_end) end.token_begin = static_cast<int32_t>(v->trie_tokens_.size());
    v->trie_tokens_.push_back(id);
    end.token_end = static_cast<int32_t>(v->trie_tokens_.size());
    previous = b;
  }
  while (!path.empty()) {
    v->trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(v->trie_.size());
    path.pop_back();
  }
  // Deepest node below each node: every leaf ends a token, so this is the longest token there.
  for (size_t i = v->trie_.size(); i-- > 0;) {
    TrieNode& n = v->trie_[i];
    n.max_depth = n.depth;
    for (size_t c = i + 1; c < static_cast<size_t>(n.subtree_end); c = static_cast<size_t>(v->trie_[c].subtree_end))
      n.max_depth = std::max(n.max_depth, v->trie_[c].max_depth);
  }
  if (v->max_token_bytes_ > 65535) throw GrammarError("a token is longer than 65535 bytes");
  v->trie_rank_.assign(v->bytes_.size(), -1);
  for (size_t r = 0; r < v->trie_tokens_.size(); ++r)
    v->trie_rank_[static_cast<size_t>(v->trie_tokens_[r])] = static_cast<int32_t>(r);
  v->tokens_by_length_ = v->trie_tokens_;
  std::stable_sort(v->tokens_by_length_.begin(), v->tokens_by_length_.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[static_cast<size_t>(a)].size() > v->bytes_[static_cast<size_t>(b)].size();
  });
  v->longer_than_.assign(static_cast<size_t>(v->max_token_bytes_) + 1, 0);
  for (int32_t id : v->trie_tokens_)
    for (size_t n = 0; n < v->bytes_[static_cast<size_t>(id)].size(); ++n) ++v->longer_than_[n];
  return v;
}

}  // namespace pagedkv::grammar
