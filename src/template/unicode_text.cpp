#include "pagedkv/template/unicode_text.h"

namespace pagedkv::jinja {

char32_t decode_utf8(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  size_t len = 0;
  char32_t c = 0;
  if (b0 < 0x80) {
    ++pos;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    c = b0 & 0x1Fu;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    c = b0 & 0x0Fu;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    c = b0 & 0x07u;
  }
  if (len == 0 || pos + len > s.size()) {
    ++pos;  // a stray byte: one code point of its own
    return b0;
  }
  for (size_t i = 1; i < len; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return b0;
    }
    c = (c << 6) | (b & 0x3Fu);
  }
  pos += len;
  return c;
}

bool is_ascii(std::string_view s) {
  for (char ch : s)
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  return true;
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) decode_utf8(s, pos);
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    decode_utf8(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_python_space(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

bool in_set(char32_t c, const std::string_view* chars) {
  if (chars == nullptr) return is_python_space(c);
  for (size_t pos = 0; pos < chars->size();)
    if (decode_utf8(*chars, pos) == c) return true;
  return false;
}

}  // namespace

std::string_view python_strip(std::string_view s, const std::string_view* chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!in_set(decode_utf8(s, next), chars)) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;  // back up to the start of the last code point
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
      size_t next = start;
      decode_utf8(s, next);
      if (next != end) start = end - 1;  // a malformed tail: its last byte is a code point of its own
      size_t probe = start;
      if (!in_set(decode_utf8(s, probe), chars)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

char32_t upper_case(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xB5) return c;
  if (c == 0xB5) return 0x39C;  // micro sign -> Greek capital mu
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    // Latin Extended-A pairs: even upper / odd lower, except 0x139-0x148 and 0x179-0x17E (odd upper).
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper) return (c % 2 == 0) ? c - 1 : c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x3AC && c <= 0x3CE) {
    switch (c) {
      case 0x3AC:
        return 0x386;
      case 0x3AD:
        return 0x388;
      case 0x3AE:
        return 0x389;
      case 0x3AF:
        return 0x38A;
      case 0x3CC:
        return 0x38C;
      case 0x3CD:
        return 0x38E;
      case 0x3CE:
        return 0x38F;
      default:
        return c;
    }
  }
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t lower_case(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c == 0x130) return 'i';  // Python gives "i̇"; the dot is dropped here
  if (c >= 0x100 && c <= 0x17F && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper) return (c % 2 == 1) ? c + 1 : c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  switch (c) {
    case 0x386:
      return 0x3AC;
    case 0x388:
      return 0x3AD;
    case 0x389:
      return 0x3AE;
    case 0x38A:
      return 0x3AF;
    case 0x38C:
      return 0x3CC;
    case 0x38E:
      return 0x3CD;
    case 0x38F:
      return 0x3CE;
    default:
      break;
  }
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) { return upper_case(c) != c || lower_case(c) != c || c == 0xDF || c == 0x138 || c == 0x149; }

namespace {

template <typename Map>
std::string map_case(std::string_view s, Map map) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& ch : out) ch = static_cast<char>(map(static_cast<char32_t>(static_cast<unsigned char>(ch))));
    return out;
  }
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = decode_utf8(s, pos);
    const char32_t m = map(c);
    if (m == c) out.append(s.substr(start, pos - start));  // keeps malformed bytes as they were
    else append_utf8(out, m);
  }
  return out;
}

}  // namespace

std::string python_upper(std::string_view s) { return map_case(s, upper_case); }
std::string python_lower(std::string_view s) { return map_case(s, lower_case); }

}  // namespace pagedkv::jinja
