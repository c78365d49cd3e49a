// Every field of OpenAI's and vLLM's completion and chat request schemas, and what pagedkv does
// with it: implemented, accepted because it changes nothing here (`user`, `metadata`), or not
// implemented. A request that sets a field of the last kind to anything but its neutral value
// (`presence_penalty: 0` changes nothing; `best_of: 3` would) is refused with a 400 naming the
// field, never served as if the field were absent: clients that rely on a field must learn that
// it did not apply. Fields that no schema defines are ignored, as OpenAI and vLLM ignore them,
// and reported once per process so a misspelt field does not go unnoticed.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pagedkv/api/openai_request.h"

namespace pagedkv::api {

// Throws ApiError 400 (code "unsupported_field", param the field) for the first field of `body`
// that pagedkv does not implement and that is set to something other than its neutral value.
void refuse_unimplemented_fields(const nlohmann::json& body, ApiEndpoint endpoint);

// The fields of `body` that neither OpenAI's nor vLLM's schema for `endpoint` defines.
std::vector<std::string> unknown_fields(const nlohmann::json& body, ApiEndpoint endpoint);

// Writes one line to stderr for each unknown field name the first time any request carries it.
void report_unknown_fields_once(const std::vector<std::string>& names);

}  // namespace pagedkv::api
