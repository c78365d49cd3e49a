// JSON text parsed into an ordered_json (object members in the order the text gives them: a tool's
// JSON Schema generates its properties in that order, and a chat template prints what it is given)
// in time linear in the text. ordered_json's own parser inserts each member by a linear search of
// the members before it, so one object of n members costs n^2 / 2 string comparisons: a 1 MB
// request body holding an object of 100,000 members took 18 s of a server thread.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace pagedkv::api {

// What nlohmann::ordered_json::parse(text, nullptr, false) returns, the same value (a repeated key
// keeps its first position and its last value), or a discarded value where the text is not JSON.
nlohmann::ordered_json parse_json_in_order(std::string_view text);

}  // namespace pagedkv::api
