// JSON text from clients, read in time linear in its size and to a bounded depth.
//
// Object members stay in the order the text gives them where that matters (a tool's JSON Schema
// generates its properties in that order; a chat template prints what it is given).
// ordered_json's own parser inserts each member by a linear search of the members before it, so
// one object of n members costs n^2 / 2 string comparisons: a 1 MB request body holding an object
// of 100,000 members took 18 s of a server thread. Nesting is bounded before anything is built: an
// 8 MB body of brackets nested 4 million deep took 3 s and 770 MB to parse.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace pagedkv::api {

// How deep arrays and objects may nest in what the API parses (requests, tool-call arguments,
// schemas given as strings, model outputs read as calls). Real requests nest a few levels; the
// chat template refuses variables past 256.
constexpr int kMaxJsonDepth = 128;

// Whether `text`'s arrays and objects nest more than `max_depth` deep (brackets inside strings not
// counted); meaningful for valid JSON, harmless otherwise. Stops at the first level past it.
bool nests_deeper_than(std::string_view text, int max_depth);

// What nlohmann::ordered_json::parse(text, nullptr, false) returns, the same value (a repeated key
// keeps its first position and its last value), or a discarded value where the text is not JSON
// or nests deeper than kMaxJsonDepth.
nlohmann::ordered_json parse_json_in_order(std::string_view text);

}  // namespace pagedkv::api
