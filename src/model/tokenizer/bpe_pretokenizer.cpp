#include "pagedkv/core/utf8.h"
#include "pagedkv/model/tokenizer/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

// Unicode's White_Space property (what llama.cpp's \s means); PCRE2's UCP \s leaves out U+0085.
constexpr std::string_view kSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string with_spaces(std::string_view pattern) {
  // \s and \S in the patterns below stand for kSpace and its complement.
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size() && (pattern[i + 1] == 's' || pattern[i + 1] == 'S')) {
      const bool inside_class = [&] {
        int depth = 0;
        for (size_t j = 0; j < i; ++j) {
          if (pattern[j] == '\\') ++j;
          else if (pattern[j] == '[') depth = 1;
          else if (pattern[j] == ']') depth = 0;
        }
        return depth > 0;
      }();
      if (inside_class) {
        if (pattern[i + 1] == 'S') throw std::logic_error("\\S inside a character class");
        out += kSpace;
      } else {
        out += pattern[i + 1] == 's' ? "[" : "[^";
        out += kSpace;
        out += "]";
      }
      ++i;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Preset {
  std::string_view name;
  std::vector<std::string_view> patterns;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"gpt-2", {kGpt2}},      {"llama-bpe", {kLlama3}}, {"llama3", {kLlama3}},
      {"llama-v3", {kLlama3}}, {"qwen2", {kQwen2}},      {"deepseek-r1-qwen", {kQwen2}},
  };
  return all;
}

}  // namespace

struct BpePreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

BpePreTokenizer::BpePreTokenizer(std::string_view name) : name_(name) {
  const Preset* preset = nullptr;
  for (const Preset& p : presets())
    if (p.name == name) preset = &p;
  if (!preset)
    throw FormatError(fmt::format("unsupported BPE pre-tokenizer tokenizer.ggml.pre = '{}' (supported: {})", name,
                                  fmt::join(supported_names(), ", ")));
  for (std::string_view source : preset->patterns) {
    const std::string pattern = with_spaces(source);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto p = std::make_unique<Pattern>();
    p->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                            &error_offset, nullptr);
    if (!p->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw Error(fmt::format("pre-tokenizer '{}': PCRE2 rejects its pattern at {}: {}", name, error_offset,
                              reinterpret_cast<const char*>(message)));
    }
    pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    patterns_.push_back(std::move(p));
  }
}

BpePreTokenizer::~BpePreTokenizer() = default;
BpePreTokenizer::BpePreTokenizer(BpePreTokenizer&&) noexcept = default;
BpePreTokenizer& BpePreTokenizer::operator=(BpePreTokenizer&&) noexcept = default;

std::vector<std::string> BpePreTokenizer::supported_names() {
  std::vector<std::string> out;
  for (const Preset& p : presets()) out.emplace_back(p.name);
  return out;
}

std::vector<std::string_view> BpePreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words;
  if (!text.empty()) words.push_back(text);
  for (const auto& pattern : patterns_) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(pattern->code, nullptr), &pcre2_match_data_free);
    if (!match) throw std::bad_alloc();
    std::vector<std::string_view> next;
    for (std::string_view word : words) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(word.data());
      size_t gap_start = 0, at = 0;
      while (at < word.size()) {
        const int rc = pcre2_match(pattern->code, subject, word.size(), at, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof message);
          throw Error(fmt::format("pre-tokenizer '{}': {}", name_, reinterpret_cast<const char*>(message)));
        }
        const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
        const size_t begin = range[0], end = range[1];
        if (end == begin) {  // no pattern here matches empty text; step over one character regardless
          at = end + 1;
          while (at < word.size() && (static_cast<unsigned char>(word[at]) & 0xC0) == 0x80) ++at;
          continue;
        }
        if (begin > gap_start) next.push_back(word.substr(gap_start, begin - gap_start));
        next.push_back(word.substr(begin, end - begin));
        gap_start = at = end;
      }
      if (gap_start < word.size()) next.push_back(word.substr(gap_start));
    }
    words = std::move(next);
  }
  return words;
}

std::string sanitize_utf8(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  auto cont = [&](size_t i) { return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  auto append = [&](uint32_t cp) { append_utf8(out, cp); };
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (b < 0x80) len = 1, cp = b;
    else if ((b & 0xE0) == 0xC0) len = 2, cp = b & 0x1Fu;
    else if ((b & 0xF0) == 0xE0) len = 3, cp = b & 0x0Fu;
    else if ((b & 0xF8) == 0xF0) len = 4, cp = b & 0x07u;
    bool ok = len > 0;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = cont(i + k);
      if (ok) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    }
    if (!ok) {  // llama.cpp skips one byte and reads on from the next
      out += kReplacement;
      ++i;
      continue;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) out += kReplacement;
    else append(cp);
    i += len;
  }
  return out;
}

}  // namespace pagedkv
