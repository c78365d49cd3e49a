// Python's str semantics on UTF-8 bytes. Templates index, slice, count and strip strings by code
// point, and Python's whitespace is Unicode whitespace; these helpers give the interpreter exactly
// that while strings stay std::string (UTF-8). A byte that does not start a valid UTF-8 sequence
// counts as one code point of its own, so malformed text never throws here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/core/utf8.h"

namespace pagedkv::jinja {

// The code point starting at byte `pos`; advances `pos` past it.
char32_t decode_utf8(std::string_view s, size_t& pos);
using pagedkv::append_utf8;  // core/utf8.h

bool is_ascii(std::string_view s);
size_t code_point_count(std::string_view s);
// The byte offset where each code point starts, then s.size(): code point i is
// s.substr(offsets[i], offsets[i + 1] - offsets[i]).
std::vector<size_t> code_point_offsets(std::string_view s);

// str.isspace() for one code point (Python's Unicode whitespace, \x1c-\x1f and U+0085 included).
bool is_python_space(char32_t c);

// str.strip / lstrip / rstrip: with `chars` null, Python whitespace; else any code point of *chars.
std::string_view python_strip(std::string_view s, const std::string_view* chars, bool left, bool right);

// Case mapping of one code point, as Python's str.upper() / str.lower() for ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic (other code points map to themselves; 'ß' stays 'ß').
char32_t upper_case(char32_t c);
char32_t lower_case(char32_t c);
// str.upper() / str.lower() over a whole string with that mapping.
std::string python_upper(std::string_view s);
std::string python_lower(std::string_view s);
// Whether c has case (upper_case or lower_case changes it), for isupper() / islower().
bool is_cased(char32_t c);

}  // namespace pagedkv::jinja
