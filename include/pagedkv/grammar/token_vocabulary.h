// The vocabulary as the grammar layer sees it: the bytes each token id stands for (the
// tokenizer's decoded bytes; a multi-byte character may be split over tokens) and which ids end a
// generation (EOS and end-of-turn tokens). Nothing of the model layer is needed to build one.
//
// It also holds the tokens as a byte trie in depth-first order, so the compiler can classify
// every token for an automaton state in one walk that shares prefixes and skips whole subtrees.
// Built once per model; immutable and shared by every compiled grammar for that model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::grammar {

class TokenVocabulary {
 public:
  // token_bytes[id] = the bytes of token id. Tokens with no bytes (control tokens) that are not
  // in `stop_ids` are never allowed by a grammar. Throws GrammarError on an out-of-range stop id.
  static std::shared_ptr<const TokenVocabulary> create(std::vector<std::string> token_bytes,
                                                       std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const { return is_stop_[static_cast<size_t>(id)] != 0; }
  // uint32 words of a bitmask over this vocabulary: bit (id % 32) of word (id / 32) is token id.
  int32_t bitmask_words() const { return (size() + 31) / 32; }

  // ---- the trie, for the compiler: nodes in depth-first order, node 0 the root (no byte) ---------
  struct TrieNode {
    uint8_t byte = 0;
    uint16_t depth = 0;
    uint16_t max_depth = 0;  // the longest token in this node's subtree, in bytes
    int32_t subtree_end = 0;  // one past the last node of this node's subtree
    int32_t token_begin = 0, token_end = 0;  // trie_tokens()[begin, end): the tokens ending here
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  int32_t max_token_bytes() const { return max_token_bytes_; }
  // Position of token id in trie_tokens() (-1 for tokens outside the trie): merges lists in trie order.
  int32_t trie_rank(int32_t id) const { return trie_rank_[static_cast<size_t>(id)]; }
  // The trie's tokens, longest first: the first tokens_longer_than(n) are those longer than n bytes.
  const std::vector<int32_t>& tokens_by_length() const { return tokens_by_length_; }
  int32_t tokens_longer_than(int32_t n) const {
    return n >= max_token_bytes_ ? 0
           : n < 0               ? static_cast<int32_t>(tokens_by_length_.size())
                                 : longer_than_[static_cast<size_t>(n)];
  }

 private:
  TokenVocabulary() = default;

  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<uint8_t> is_stop_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<int32_t> trie_rank_;
  std::vector<int32_t> tokens_by_length_;
  std::vector<int32_t> longer_than_;  // [n]: how many trie tokens are longer than n bytes
  int32_t max_token_bytes_ = 0;
};

}  // namespace pagedkv::grammar
