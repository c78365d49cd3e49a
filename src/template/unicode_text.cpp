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

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
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
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
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

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& ch : out)
    if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return out;
}

}  // namespace pagedkv::jinja
