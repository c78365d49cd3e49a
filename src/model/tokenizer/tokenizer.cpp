#include "pagedkv/model/tokenizer/tokenizer.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open tokenizer '{}'", path));
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(fmt::format("cannot read tokenizer '{}'", path));
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// run.c decodes a piece as a raw byte when sscanf(piece, "<0x%02hhX>", &b) == 1: the literal
// "<0x" followed by one or two hex digits (the closing '>' is not checked). Returns that byte.
std::optional<unsigned char> byte_piece_value(std::string_view piece) {
  if (piece.size() < 4 || piece.substr(0, 3) != "<0x") return std::nullopt;
  int value = hex_digit(piece[3]);
  if (value < 0) return std::nullopt;
  if (piece.size() > 4 && hex_digit(piece[4]) >= 0) value = value * 16 + hex_digit(piece[4]);
  return static_cast<unsigned char>(value);
}

std::string piece_text(std::string_view piece) {
  if (auto b = byte_piece_value(piece)) return std::string(1, static_cast<char>(*b));
  return std::string(piece);
}

}  // namespace

Tokenizer::Tokenizer(const std::string& path, int vocab_size) : Tokenizer(read_file(path), vocab_size, path) {}

Tokenizer::Tokenizer(std::span<const std::byte> file, int vocab_size, std::string name) : name_(std::move(name)) {
  if (vocab_size <= 0)
    throw UsageError(fmt::format("tokenizer '{}': vocab_size must be positive, got {}", name_, vocab_size));
  // encode() emits <s> and </s> (ids 1 and 2) whatever the file says: a smaller vocabulary would
  // hand the model ids outside its embedding table (found by fuzz_llama2c_tokenizer).
  if (vocab_size <= kEos)
    throw FormatError(fmt::format("tokenizer '{}': a vocabulary of {} pieces cannot hold <unk>, <s> and </s> (ids 0-2)",
                                  name_, vocab_size));
  const size_t size = file.size();
  size_t offset = 0;
  // Reads a little-endian 4-byte field, or throws naming what was being read.
  auto read4 = [&](void* out, const char* what, int token) {
    if (size - offset < 4) {
      throw FormatError(
          token < 0 ? fmt::format("tokenizer '{}' is truncated: {} needs bytes {}..{}, the file has {} bytes", name_,
                                  what, offset, offset + 4, size)
                    : fmt::format("tokenizer '{}' is truncated at token {} of {}: its {} needs bytes {}..{}, the file "
                                  "has {} bytes",
                                  name_, token, vocab_size, what, offset, offset + 4, size));
    }
    std::memcpy(out, file.data() + offset, 4);
    offset += 4;
  };

  int32_t max_len = 0;
  read4(&max_len, "max_token_length", -1);
  if (max_len <= 0)
    throw FormatError(fmt::format("tokenizer '{}': max_token_length must be positive, got {}", name_, max_len));
  max_token_length_ = max_len;

  pieces_.reserve(static_cast<size_t>(vocab_size));
  scores_.reserve(static_cast<size_t>(vocab_size));
  for (int i = 0; i < vocab_size; ++i) {
    float score = 0;
    int32_t len = 0;
    read4(&score, "score", i);
    read4(&len, "length", i);
    if (!std::isfinite(score))
      throw FormatError(fmt::format("tokenizer '{}': token {} has a non-finite score", name_, i));
    if (len < 0 || len > max_len)
      throw FormatError(fmt::format("tokenizer '{}': token {} has length {}, outside 0..max_token_length ({})", name_,
                                    i, len, max_len));
    const size_t n = static_cast<size_t>(len);
    if (size - offset < n)
      throw FormatError(fmt::format(
          "tokenizer '{}' is truncated at token {} of {}: its {} piece bytes need bytes {}..{}, the file has {} bytes",
          name_, i, vocab_size, n, offset, offset + n, size));
    std::string piece(reinterpret_cast<const char*>(file.data() + offset), n);
    offset += n;
    if (piece.find('\0') != std::string::npos)
      throw FormatError(fmt::format("tokenizer '{}': token {} contains a NUL byte", name_, i));
    pieces_.push_back(std::move(piece));
    scores_.push_back(score);
  }
  if (offset != size)
    throw FormatError(
        fmt::format("tokenizer '{}' is oversized: {} tokens end at byte {}, the file has {} bytes "
                    "({} extra; is vocab_size right?)",
                    name_, vocab_size, offset, size, size - offset));

  decoded_.reserve(pieces_.size());
  decoded_after_bos_.reserve(pieces_.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string_view p = pieces_[id];
    ids_by_piece_.emplace(pieces_[id], static_cast<TokenId>(id));  // on duplicates the lowest id wins
    decoded_.push_back(piece_text(p));
    decoded_after_bos_.push_back(piece_text(!p.empty() && p[0] == ' ' ? p.substr(1) : p));
  }
}

void Tokenizer::check_id(TokenId id) const {
  if (id < 0 || id >= vocab_size())
    throw UsageError(fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab_size() - 1));
}

std::string_view Tokenizer::piece(TokenId id) const {
  check_id(id);
  return pieces_[static_cast<size_t>(id)];
}

float Tokenizer::score(TokenId id) const {
  check_id(id);
  return scores_[static_cast<size_t>(id)];
}

TokenId Tokenizer::lookup(std::string_view s) const {
  auto it = ids_by_piece_.find(s);
  return it == ids_by_piece_.end() ? -1 : it->second;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  text = text.substr(0, std::min(text.find('\0'), text.size()));
  std::vector<TokenId> tokens;
  tokens.reserve(text.size() + 3);
  if (add_bos) tokens.push_back(kBos);
  if (!text.empty()) {
    const TokenId space = lookup(" ");
    if (space < 0) throw FormatError(fmt::format("tokenizer '{}' has no \" \" piece for the dummy prefix", name_));
    tokens.push_back(space);
  }

  // One token per UTF-8 code point: a leading byte plus following continuation bytes (10xxxxxx),
  // at most 4 bytes, exactly as run.c groups them (stray continuation bytes stand alone).
  auto is_continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (i + n < text.size() && is_continuation(text[i + n]) && n < 4) ++n;
    const std::string_view code_point = text.substr(i, n);
    if (const TokenId id = lookup(code_point); id >= 0) {
      tokens.push_back(id);
    } else {
      for (char c : code_point) {
        const TokenId byte_token = kFirstByteToken + static_cast<unsigned char>(c);
        if (byte_token >= vocab_size())
          throw FormatError(fmt::format("tokenizer '{}' has no byte-fallback token {} for byte 0x{:02X}", name_,
                                        byte_token, static_cast<unsigned char>(c)));
        tokens.push_back(byte_token);
      }
    }
    i += n;
  }

  // BPE merges. merge_id[i] is the piece that tokens i and i+1 concatenate to (-1 if none); after a
  // merge only the two pairs touching the merged token change, so each round is one scan.
  std::string buffer;
  auto pair_piece = [&](size_t i) {
    buffer.assign(pieces_[static_cast<size_t>(tokens[i])]);
    buffer.append(pieces_[static_cast<size_t>(tokens[i + 1])]);
    return lookup(buffer);
  };
  std::vector<TokenId> merge_id(tokens.empty() ? 0 : tokens.size() - 1);
  for (size_t i = 0; i < merge_id.size(); ++i) merge_id[i] = pair_piece(i);
  for (;;) {
    float best_score = -1e10f;  // run.c's floor: pieces scoring at or below it never merge
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < merge_id.size(); ++i) {
      if (merge_id[i] >= 0 && scores_[static_cast<size_t>(merge_id[i])] > best_score) {
        best_score = scores_[static_cast<size_t>(merge_id[i])];
        best = i;
      }
    }
    if (best == SIZE_MAX) break;
    tokens[best] = merge_id[best];
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    merge_id.erase(merge_id.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) merge_id[best - 1] = pair_piece(best - 1);
    if (best < merge_id.size()) merge_id[best] = pair_piece(best);
  }

  if (add_eos) tokens.push_back(kEos);
  return tokens;
}

std::string_view Tokenizer::decode(TokenId prev, TokenId token) const {
  check_id(token);
  const auto t = static_cast<size_t>(token);
  return prev == kBos ? decoded_after_bos_[t] : decoded_[t];
}

std::string_view Tokenizer::safe_piece(std::string_view piece) {
  piece = piece.substr(0, std::min(piece.find('\0'), piece.size()));  // printf("%s") stops at NUL
  if (piece.size() == 1) {
    const auto b = static_cast<unsigned char>(piece[0]);
    // isprint / isspace in the C locale, which run.c never changes.
    const bool printable = b >= 0x20 && b <= 0x7E;
    const bool space = b == ' ' || (b >= '\t' && b <= '\r');
    if (!printable && !space) return {};
  }
  return piece;
}

}  // namespace pagedkv
