// Exact grammars for the JSON numbers between two decimal bounds (JSON Schema's minimum, maximum,
// exclusiveMinimum, exclusiveMaximum on "number").
//
// The numbers are written without an exponent (`-?(0|[1-9][0-9]*)(\.[0-9]+)?`), so a bounded number
// is a plain decimal and its range a regular language built digit by digit: the integer part
// against the bounds' integer parts, then the fraction against theirs. Comparison is on the exact
// decimal values, never on doubles; "1.50" equals 1.5 and "-0" equals 0.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pagedkv/grammar/grammar.h"

namespace pagedkv::grammar {

// A decimal number: sign, integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros. Zero is never negative.
struct Decimal {
  bool negative = false;
  std::string integer = "0";
  std::string fraction;
};

// Reads a JSON number's text (exponent allowed, as in a bound written `1e-3`). Throws GrammarError
// when it is not one, or when its integer part has more than `max_integer_digits` digits or its
// fraction more than `max_fraction_digits` (hostile bounds would make long grammars).
Decimal parse_decimal(std::string_view text, int max_integer_digits, int max_fraction_digits);

// -1, 0 or 1 as a < b, a == b, a > b.
int compare_decimals(const Decimal& a, const Decimal& b);

struct DecimalBound {
  Decimal value;
  bool exclusive = false;
};

// The expression matching exactly the numbers (no exponent) within the bounds; a missing bound is
// open. Throws GrammarError when no number lies within them.
ExprId decimal_range_expr(Grammar& g, const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi);

}  // namespace pagedkv::grammar
