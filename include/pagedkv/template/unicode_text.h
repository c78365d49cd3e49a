// Python's str semantics on UTF-8 bytes. Templates index, slice, count and strip strings by code
// point, and Python's whitespace is Unicode whitespace; these helpers give the interpreter exactly
// that while strings stay std::string (UTF-8). A byte that does not start a valid UTF-8 sequence
// counts as one code point of its own, so malformed text never throws here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::jinja {

// The code point starting at byte `pos`; advances `pos` past it.
char32_t decode_utf8(std::string_view s, size_t& pos);
void append_utf8(std::string& out, char32_t c);

bool is_ascii(std::string_view s);
size_t code_point_count(std::string_view s);
// The byte offset where each code point starts, then s.size(): code point i is
// s.substr(offsets[i], offsets[i + 1] - offsets[i]).
std::vector<size_t> code_point_offsets(std::string_view s);

// str.isspace() for one code point (Python's Unicode whitespace, \x1c-\x1f and U+0085 included).
bool is_python_space(char32_t c);

// str.strip / lstrip / rstrip: with `chars` null, Python whitespace; else any code point of *chars.
std::string_view python_strip(std::string_view s, const std::string_view* chars, bool left, bool right);

// ASCII-only case mapping (other code points are copied unchanged).
std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);

}  // namespace pagedkv::jinja
