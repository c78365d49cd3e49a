// JSON Schema -> Grammar: the output is one JSON text that validates against the schema.
//
// Covered: type (every type, and unions), properties / required / additionalProperties (false
// or a schema; when absent it is false, as in XGrammar's strict mode which vLLM uses: only the
// named properties, in the schema's order), enum, const, items, prefixItems (without items, no
// further elements: strict mode again), minItems / maxItems, minLength / maxLength, pattern,
// format (date, time, date-time, uuid, email: as patterns), minimum / maximum and their exclusive
// forms on integers, anyOf / oneOf (both read as "any of"), allOf of object schemas (merged),
// $ref to #/$defs/... and #/definitions/... (recursion allowed), and the json_object mode (any
// JSON object). Keywords that only annotate (title, description, examples, default, $schema,
// $id, $comment) are ignored. Any other keyword is a GrammarError naming it: a constraint is
// never silently dropped.
//
// Strings are valid JSON strings: escapes (\" \\ \/ \b \f \n \r \t \uXXXX), no raw control
// characters, valid UTF-8. A string with `pattern` or `format` matches the pattern in its raw
// characters and never contains characters that need escaping; minLength / maxLength count
// characters (an escape counts as the one character it stands for). Additional property names
// (additionalProperties: schema or true) are strings without escapes that differ from every
// named property.
#pragma once

#include <string_view>

#include "pagedkv/grammar/grammar.h"

namespace pagedkv::grammar {

struct JsonFormatOptions {
  // Compact JSON by default (no whitespace between tokens). When true, up to
  // `max_whitespace` characters of [ \t\n] may appear wherever JSON allows whitespace.
  bool allow_whitespace = false;
  int32_t max_whitespace = 4;
};

Grammar json_schema_grammar(std::string_view schema_json, const JsonFormatOptions& format = {},
                            const GrammarLimits& limits = {});

// Any JSON object (response_format {"type": "json_object"}).
Grammar json_object_grammar(const JsonFormatOptions& format = {}, const GrammarLimits& limits = {});

}  // namespace pagedkv::grammar
