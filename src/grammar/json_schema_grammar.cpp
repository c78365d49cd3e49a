// JSON Schema -> Grammar. Each distinct schema node becomes one rule (memoized by its canonical
// text, so equal sub-schemas share a rule); the punctuation and keys of an object or array are
// inline in its rule, so the compiler can decide most tokens inside one rule.
#include "pagedkv/grammar/json_schema_grammar.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "decimal_range.h"
#include "pagedkv/grammar/grammar_front_ends.h"
#include "text_scanning.h"

namespace pagedkv::grammar {
namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "examples", "default",     "$schema",
                                          "$id",      "$comment",    "$defs",    "definitions", "deprecated",
                                          "readOnly", "writeOnly",   "$anchor"};
  return k;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref"};
  return k;
}

class SchemaConverter {
 public:
  SchemaConverter(Grammar& g, const Json& root, const JsonFormatOptions& format) : g_(g), root_(root), format_(format) {
    if (format_.allow_whitespace) {
      if (format_.max_whitespace < 0 || format_.max_whitespace > g_.limits().max_repeat_bound)
        throw GrammarError(limit_message("max_repeat_bound", g_.limits().max_repeat_bound, "max_whitespace"));
      ws_ = g_.repeat(g_.char_class({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}}), 0, format_.max_whitespace);
    } else {
      ws_ = g_.empty();
    }
  }

  RuleId convert_root() { return rule_for(root_, 0); }

  RuleId any_object_rule() {
    any_value_rule();
    return any_object_;
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what) {
    throw GrammarError("unsupported JSON Schema " + what);
  }

  void check_depth(int depth) const {
    if (depth > g_.limits().max_nesting_depth)
      throw GrammarError(
          limit_message("max_nesting_depth", g_.limits().max_nesting_depth, "the schema nests too deep"));
  }

  ExprId lit(std::string_view s) { return g_.literal(s); }
  ExprId seq(std::vector<ExprId> v) { return g_.sequence(std::move(v)); }

  // ---- strings -----------------------------------------------------------------------------------
  // One character of a JSON string's content: an unescaped code point or an escape.
  ExprId json_char() {
    if (json_char_ >= 0) return json_char_;
    const ExprId plain = g_.char_class({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}});
    const ExprId hex = g_.char_class({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    const ExprId escape = seq(
        {lit("\\"),
         g_.choice(
             {g_.char_class(
                  {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
              seq({lit("u"), unicode_escape_digits(hex)})})});
    json_char_ = g_.choice({plain, escape});
    return json_char_;
  }

  // The four hex digits of \uXXXX, surrogates (D800-DFFF) excluded: a surrogate pair would be
  // one character written as two escapes, which would break minLength / maxLength counting.
  ExprId unicode_escape_digits(ExprId hex) {
    const ExprId hex3 = g_.repeat(hex, 3, 3);
    const ExprId not_d = g_.char_class({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}});
    return g_.choice({seq({not_d, hex3}), seq({g_.char_class({{'D', 'D'}, {'d', 'd'}}), g_.char_class({{'0', '7'}}),
                                               g_.repeat(hex, 2, 2)})});
  }

  ExprId string_rule_expr(int32_t min_len, int32_t max_len) {
    return seq({lit("\""), g_.repeat(json_char(), min_len, max_len), lit("\"")});
  }

  RuleId plain_string_rule() {
    if (string_rule_ < 0) {
      string_rule_ = g_.add_rule("string");
      g_.define_rule(string_rule_, string_rule_expr(0, kUnbounded));
    }
    return string_rule_;
  }

  int32_t bound_value(const Json& schema, const char* key) {
    const Json& v = schema[key];
    if (!v.is_number_integer() && !(v.is_number() && std::floor(v.get<double>()) == v.get<double>()))
      throw GrammarError(fmt::format("JSON Schema '{}' must be a non-negative integer", key));
    const double d = v.get<double>();
    if (d < 0) throw GrammarError(fmt::format("JSON Schema '{}' must be a non-negative integer", key));
    if (d > g_.limits().max_repeat_bound)
      throw GrammarError(
          limit_message("max_repeat_bound", g_.limits().max_repeat_bound, fmt::format("'{}' is {}", key, v.dump())));
    return static_cast<int32_t>(d);
  }

  ExprId string_expr(const Json& schema) {
    const bool has_len = schema.contains("minLength") || schema.contains("maxLength");
    std::string pattern;
    // A pattern beside a format is what is generated: Draft 2020-12 asserts the pattern and reads
    // the format as an annotation, and writers that give both (zod's z.email(), z.iso.date(), ...)
    // spell the format out in the pattern.
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) throw GrammarError("JSON Schema 'pattern' must be a string");
      pattern = schema["pattern"].get<std::string>();
    } else if (schema.contains("format")) {
      const std::string f = schema["format"].is_string() ? schema["format"].get<std::string>() : "";
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
          {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"date-time",
           R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
          {"email", R"([a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,})"},
      };
      auto it = kFormats.find(f);
      if (it == kFormats.end()) unsupported(fmt::format("keyword 'format' value '{}'", f));
      pattern = it->second;
    }
    if (!pattern.empty() || schema.contains("pattern")) {
      if (has_len) unsupported("keyword 'minLength'/'maxLength' together with 'pattern' or 'format'");
      return seq({lit("\""), add_regex(g_, pattern, true), lit("\"")});
    }
    if (!has_len) return g_.ref(plain_string_rule());
    const int32_t min = schema.contains("minLength") ? bound_value(schema, "minLength") : 0;
    const int32_t max = schema.contains("maxLength") ? bound_value(schema, "maxLength") : kUnbounded;
    if (max != kUnbounded && max < min) throw GrammarError("JSON Schema maxLength < minLength");
    // A rule per bound pair: the rule ends at the closing quote, so the positions of every bounded
    // string with the same number of characters left behave alike and share their token classes.
    auto [it, inserted] = bounded_string_rules_.emplace(std::make_pair(min, max), -1);
    if (inserted) {
      it->second = g_.add_rule(fmt::format("string_{}_{}", min, max == kUnbounded ? -1 : max));
      g_.define_rule(it->second, string_rule_expr(min, max));
    }
    return g_.ref(it->second);
  }

  // ---- numbers -----------------------------------------------------------------------------------
  ExprId digit_class(char lo, char hi) {
    return g_.char_class({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}});
  }

  // Decimal strings a..b of equal length, digit by digit.
  ExprId same_length_range(const std::string& a, const std::string& b) {
    if (a.empty()) return g_.empty();
    if (a == b) return lit(a);
    if (a[0] == b[0]) return seq({lit(a.substr(0, 1)), same_length_range(a.substr(1), b.substr(1))});
    const size_t rest = a.size() - 1;
    std::vector<ExprId> parts;
    const std::string nines(rest, '9'), zeros(rest, '0');
    const bool low_full = a.substr(1) == zeros, high_full = b.substr(1) == nines;
    const char first_mid = low_full ? a[0] : static_cast<char>(a[0] + 1);
    const char last_mid = high_full ? b[0] : static_cast<char>(b[0] - 1);
    if (!low_full) parts.push_back(seq({lit(a.substr(0, 1)), same_length_range(a.substr(1), nines)}));
    if (first_mid <= last_mid)
      parts.push_back(seq({digit_class(first_mid, last_mid),
                           g_.repeat(digit_class('0', '9'), static_cast<int32_t>(rest), static_cast<int32_t>(rest))}));
    if (!high_full) parts.push_back(seq({lit(b.substr(0, 1)), same_length_range(zeros, b.substr(1))}));
    return g_.choice(std::move(parts));
  }

  // Non-negative integers in [lo, hi], no leading zeros.
  ExprId natural_range(int64_t lo, int64_t hi) {
    std::vector<ExprId> parts;
    int64_t start = lo;
    while (start <= hi) {
      const std::string s = std::to_string(start);
      int64_t end_of_length = 9;
      for (size_t i = 1; i < s.size(); ++i) end_of_length = end_of_length * 10 + 9;
      const int64_t end = std::min(hi, end_of_length);
      parts.push_back(same_length_range(s, std::to_string(end)));
      if (end == hi) break;
      start = end + 1;
    }
    return g_.choice(std::move(parts));
  }

  // Non-negative integers >= lo.
  ExprId natural_at_least(int64_t lo) {
    const std::string s = std::to_string(lo);
    int64_t end_of_length = 9;
    for (size_t i = 1; i < s.size(); ++i) end_of_length = end_of_length * 10 + 9;
    const ExprId longer =
        seq({digit_class('1', '9'), g_.repeat(digit_class('0', '9'), static_cast<int32_t>(s.size()), kUnbounded)});
    return g_.choice({natural_range(lo, end_of_length), longer});
  }

  static constexpr double kMaxIntegerBound = 1e17;
  // Number bounds: |bound| < 1e17 and at most 32 digits after the point keep their grammars short.
  static constexpr int kMaxBoundIntegerDigits = 17;
  static constexpr int kMaxBoundFractionDigits = 32;
  static constexpr int64_t kMaxExcludedNameBytes = 1024;

  ExprId integer_expr(const Json& schema) {
    std::optional<int64_t> lo, hi;
    auto read = [&](const char* key) -> double {
      const Json& v = schema[key];
      if (!v.is_number()) throw GrammarError(fmt::format("JSON Schema '{}' must be a number", key));
      const double d = v.get<double>();
      if (std::fabs(d) > kMaxIntegerBound)
        throw GrammarError(fmt::format("unsupported JSON Schema keyword '{}': {} is beyond +-1e17", key, v.dump()));
      return d;
    };
    if (schema.contains("minimum")) {
      const double d = read("minimum");
      const bool exclusive = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_boolean() &&
                             schema["exclusiveMinimum"].get<bool>();
      lo = static_cast<int64_t>(std::ceil(d)) + ((exclusive && std::ceil(d) == d) ? 1 : 0);
    }
    if (schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_number()) {
      const double d = read("exclusiveMinimum");
      const int64_t v = static_cast<int64_t>(std::floor(d)) + 1;
      lo = lo ? std::max(*lo, v) : v;
    }
    if (schema.contains("maximum")) {
      const double d = read("maximum");
      const bool exclusive = schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"].is_boolean() &&
                             schema["exclusiveMaximum"].get<bool>();
      hi = static_cast<int64_t>(std::floor(d)) - ((exclusive && std::floor(d) == d) ? 1 : 0);
    }
    if (schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"].is_number()) {
      const double d = read("exclusiveMaximum");
      const int64_t v = static_cast<int64_t>(std::ceil(d)) - 1;
      hi = hi ? std::min(*hi, v) : v;
    }
    if (lo && hi && *lo > *hi) throw GrammarError("JSON Schema integer range is empty (minimum > maximum)");
    const ExprId minus = lit("-");
    if (!lo && !hi) return g_.ref(any_integer_rule());
    if (lo && !hi) {
      if (*lo >= 0) return natural_at_least(*lo);
      return g_.choice({seq({minus, natural_range(1, -*lo)}), natural_at_least(0)});
    }
    if (!lo) {
      if (*hi < 0) return seq({minus, natural_at_least(-*hi)});
      return g_.choice({seq({minus, natural_at_least(1)}), natural_range(0, *hi)});
    }
    if (*lo >= 0) return natural_range(*lo, *hi);
    if (*hi < 0) return seq({minus, natural_range(-*hi, -*lo)});
    return g_.choice({seq({minus, natural_range(1, -*lo)}), natural_range(0, *hi)});
  }

  // A number within decimal bounds: written without an exponent (the range is then a plain
  // decimal one, exact); without bounds, any JSON number.
  ExprId number_expr(const Json& schema) {
    std::optional<DecimalBound> lo, hi;
    auto read = [&](const char* key) {
      const Json& v = schema[key];
      if (!v.is_number()) throw GrammarError(fmt::format("JSON Schema '{}' must be a number", key));
      try {
        return parse_decimal(v.dump(), kMaxBoundIntegerDigits, kMaxBoundFractionDigits);
      } catch (const GrammarError& e) {
        throw GrammarError(fmt::format("unsupported JSON Schema keyword '{}': {}", key, e.what()));
      }
    };
    auto draft4_exclusive = [&](const char* key) {
      return schema.contains(key) && schema[key].is_boolean() && schema[key].get<bool>();
    };
    // The stricter of two bounds on one side (`minimum` beside `exclusiveMinimum`).
    auto tighten = [](std::optional<DecimalBound>& have, DecimalBound b, int sign) {
      if (!have) {
        have = b;
        return;
      }
      const int c = compare_decimals(b.value, have->value) * sign;
      if (c > 0 || (c == 0 && b.exclusive)) have = b;
    };
    if (schema.contains("minimum")) tighten(lo, {read("minimum"), draft4_exclusive("exclusiveMinimum")}, 1);
    if (schema.contains("exclusiveMinimum") && !schema["exclusiveMinimum"].is_boolean())
      tighten(lo, {read("exclusiveMinimum"), true}, 1);
    if (schema.contains("maximum")) tighten(hi, {read("maximum"), draft4_exclusive("exclusiveMaximum")}, -1);
    if (schema.contains("exclusiveMaximum") && !schema["exclusiveMaximum"].is_boolean())
      tighten(hi, {read("exclusiveMaximum"), true}, -1);
    if (!lo && !hi) return g_.ref(any_number_rule());
    return decimal_range_expr(g_, lo, hi);
  }

  RuleId any_integer_rule() {
    if (integer_rule_ < 0) {
      integer_rule_ = g_.add_rule("integer");
      g_.define_rule(
          integer_rule_,
          seq({g_.optional(lit("-")),
               g_.choice({lit("0"), seq({digit_class('1', '9'), g_.repeat(digit_class('0', '9'), 0, kUnbounded)})})}));
    }
    return integer_rule_;
  }

  RuleId any_number_rule() {
    if (number_rule_ < 0) {
      number_rule_ = g_.add_rule("number");
      const ExprId digits = g_.repeat(digit_class('0', '9'), 1, kUnbounded);
      g_.define_rule(
          number_rule_,
          seq({g_.optional(lit("-")),
               g_.choice({lit("0"), seq({digit_class('1', '9'), g_.repeat(digit_class('0', '9'), 0, kUnbounded)})}),
               g_.optional(seq({lit("."), digits})),
               g_.optional(seq({g_.char_class({{'e', 'e'}, {'E', 'E'}}),
                                g_.optional(g_.char_class({{'+', '+'}, {'-', '-'}})), digits}))}));
    }
    return number_rule_;
  }

  // ---- any JSON value ----------------------------------------------------------------------------
  RuleId any_value_rule() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = g_.add_rule("value");
    any_object_ = g_.add_rule("object");
    const RuleId array = g_.add_rule("array");
    const ExprId value = g_.ref(any_value_);
    const ExprId key = string_rule_expr(0, kUnbounded);
    const ExprId member = seq({key, ws_, lit(":"), ws_, value});
    const ExprId sep = seq({ws_, lit(","), ws_});
    g_.define_rule(
        any_object_,
        seq({lit("{"), ws_, g_.optional(seq({member, g_.repeat(seq({sep, member}), 0, kUnbounded)})), ws_, lit("}")}));
    g_.define_rule(array, seq({lit("["), ws_, g_.optional(seq({value, g_.repeat(seq({sep, value}), 0, kUnbounded)})),
                               ws_, lit("]")}));
    g_.define_rule(any_value_, g_.choice({g_.ref(any_object_), g_.ref(array), g_.ref(plain_string_rule()),
                                          g_.ref(any_number_rule()), lit("true"), lit("false"), lit("null")}));
    return any_value_;
  }

  // ---- objects -----------------------------------------------------------------------------------
  struct Property {
    std::string name;
    const Json* schema = nullptr;  // null: any value
    bool required = false;
  };

  // A JSON string (no escapes) whose content is none of `names`: the trie of the names, leaving it
  // anywhere with a character that no name continues with, or ending where no name ends.
  ExprId key_not_in(const std::vector<std::string>& names, size_t depth_begin, const std::vector<size_t>& members) {
    const ExprId content_char = g_.char_class({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}});
    const ExprId rest = g_.repeat(content_char, 0, kUnbounded);
    std::vector<ExprId> branches;
    bool some_name_ends = false;
    std::map<uint32_t, std::vector<size_t>> by_char;
    for (size_t m : members) {
      const std::string& n = names[m];
      if (depth_begin == n.size()) {
        some_name_ends = true;
        continue;
      }
      size_t p = depth_begin;
      uint32_t cp = 0;
      if (!decode_utf8(n, p, cp)) cp = 0xFFFD;
      by_char[cp].push_back(m);
    }
    if (!some_name_ends) branches.push_back(lit("\""));
    std::vector<CodepointRange> taken;
    for (auto& [cp, sub] : by_char) {
      taken.push_back({cp, cp});
      std::string bytes;
      append_utf8(bytes, cp);
      size_t next_depth = depth_begin + bytes.size();
      branches.push_back(seq({lit(bytes), key_not_in(names, next_depth, sub)}));
    }
    branches.push_back(seq({g_.char_class(json_safe_ranges(complement(taken))), rest, lit("\"")}));
    return g_.choice(std::move(branches));
  }

  ExprId object_expr(const Json& schema, int depth) {
    std::vector<Property> props;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) throw GrammarError("JSON Schema 'required' must be an array");
      for (const Json& r : schema["required"]) {
        if (!r.is_string()) throw GrammarError("JSON Schema 'required' must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      if (!schema["properties"].is_object()) throw GrammarError("JSON Schema 'properties' must be an object");
      for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it)
        props.push_back({it.key(), &it.value(), required.count(it.key()) > 0});
    }
    for (const std::string& r : required) {
      bool named = false;
      for (const Property& p : props) named |= p.name == r;
      if (!named) props.push_back({r, nullptr, true});
    }
    const Json* additional = nullptr;
    bool allow_additional = false;
    if (schema.contains("additionalProperties")) {
      const Json& a = schema["additionalProperties"];
      if (a.is_boolean()) {
        allow_additional = a.get<bool>();
      } else if (a.is_object()) {
        allow_additional = true;
        additional = &a;
      } else {
        throw GrammarError("JSON Schema 'additionalProperties' must be a boolean or a schema");
      }
    }
    std::vector<ExprId> members;
    for (const Property& p : props) {
      const ExprId value = p.schema ? g_.ref(rule_for(*p.schema, depth + 1)) : g_.ref(any_value_rule());
      members.push_back(seq({lit(Json(p.name).dump()), ws_, lit(":"), ws_, value}));
    }
    const ExprId sep = seq({ws_, lit(","), ws_});
    // tail[first]: the members after the named ones.
    ExprId tail_first = g_.empty(), tail_next = g_.empty();
    if (allow_additional) {
      std::vector<std::string> names;
      std::vector<size_t> all;
      for (const Property& p : props) {
        // key_not_in recurses once per character of a name.
        if (p.name.size() > kMaxExcludedNameBytes)
          throw GrammarError(limit_message("excluded_property_name_bytes", kMaxExcludedNameBytes,
                                           "a property name next to additionalProperties is too long"));
        all.push_back(names.size());
        names.push_back(p.name);
      }
      const ExprId key = seq({lit("\""), key_not_in(names, 0, all)});
      const ExprId value = additional ? g_.ref(rule_for(*additional, depth + 1)) : g_.ref(any_value_rule());
      const ExprId member = seq({key, ws_, lit(":"), ws_, value});
      const ExprId more = g_.repeat(seq({sep, member}), 0, kUnbounded);
      tail_first = g_.optional(seq({member, more}));
      tail_next = more;
    }
    // Built from the last property back: rest[i][first] is the members from property i on, with
    // `first` saying no member came before (so no comma). Shared sub-expressions keep it linear.
    ExprId rest_first = tail_first, rest_next = tail_next;
    for (size_t i = props.size(); i-- > 0;) {
      const ExprId with_first = seq({members[i], rest_next});
      const ExprId with_next = seq({sep, members[i], rest_next});
      if (props[i].required) {
        rest_first = with_first;
        rest_next = with_next;
      } else {
        rest_first = g_.choice({with_first, rest_first});
        rest_next = g_.choice({with_next, rest_next});
      }
    }
    return seq({lit("{"), ws_, rest_first, ws_, lit("}")});
  }

  // ---- arrays ------------------------------------------------------------------------------------
  ExprId array_expr(const Json& schema, int depth) {
    std::vector<ExprId> prefix;
    if (schema.contains("prefixItems")) {
      if (!schema["prefixItems"].is_array()) throw GrammarError("JSON Schema 'prefixItems' must be an array");
      for (const Json& s : schema["prefixItems"]) prefix.push_back(g_.ref(rule_for(s, depth + 1)));
    }
    std::optional<ExprId> item;  // elements after the prefix; none: no more elements
    if (schema.contains("items")) {
      const Json& it = schema["items"];
      if (it.is_array()) unsupported("keyword 'items' as an array (use prefixItems)");
      if (it.is_boolean()) {
        if (it.get<bool>()) item = g_.ref(any_value_rule());
      } else {
        item = g_.ref(rule_for(it, depth + 1));
      }
    } else if (prefix.empty()) {
      item = g_.ref(any_value_rule());
    }
    const int32_t min = schema.contains("minItems") ? bound_value(schema, "minItems") : 0;
    int32_t max = schema.contains("maxItems") ? bound_value(schema, "maxItems") : kUnbounded;
    if (max != kUnbounded && max < static_cast<int32_t>(prefix.size())) prefix.resize(static_cast<size_t>(max));
    const auto k = static_cast<int32_t>(prefix.size());
    if (!item) max = max == kUnbounded ? k : std::min(max, k);
    if (max != kUnbounded && max < min)
      throw GrammarError("JSON Schema array bounds are empty (minItems > maxItems or more than prefixItems allow)");
    const ExprId sep = seq({ws_, lit(","), ws_});
    // Elements from index i on, given that i elements came before (i >= 1 needs a comma).
    ExprId rest = g_.empty();
    if (item && (max == kUnbounded || max > k)) {
      const int32_t more_min = std::max(0, min - k);
      const int32_t more_max = max == kUnbounded ? kUnbounded : max - k;
      if (k == 0) {
        const ExprId body = seq({*item, g_.repeat(seq({sep, *item}), std::max(0, more_min - 1),
                                                  more_max == kUnbounded ? kUnbounded : more_max - 1)});
        return seq({lit("["), ws_, more_min == 0 ? g_.optional(body) : body, ws_, lit("]")});
      }
      rest = g_.repeat(seq({sep, *item}), more_min, more_max);
    }
    for (int32_t i = k; i-- > 0;) {
      const ExprId element = i == 0 ? prefix[0] : seq({sep, prefix[static_cast<size_t>(i)]});
      const ExprId with = seq({element, rest});
      if (i >= min) {
        // i elements suffice: this one and the rest are optional.
        rest = g_.optional(with);
      } else {
        rest = with;
      }
    }
    return seq({lit("["), ws_, rest, ws_, lit("]")});
  }

  // ---- dispatch ----------------------------------------------------------------------------------
  const Json& resolve_ref(const std::string& ref) {
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0 || ref.rfind("#/definitions/", 0) == 0) {
      path = ref.substr(1);
    } else if (ref == "#") {
      return root_;
    } else {
      unsupported(fmt::format("$ref '{}' (only #, #/$defs/... and #/definitions/...)", ref));
    }
    try {
      const Json& target = root_.at(Json::json_pointer(path));
      return target;
    } catch (const std::exception&) {
      throw GrammarError(fmt::format("JSON Schema $ref '{}' points at nothing", ref));
    }
  }

  RuleId ref_rule(const std::string& ref, int depth) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (++ref_expansions_ > g_.limits().max_rules)
      throw GrammarError(limit_message("max_rules", g_.limits().max_rules, "too many $ref expansions"));
    const RuleId rule = g_.add_rule("ref");
    ref_rules_[ref] = rule;
    // Follow chains of bare $refs up to the limit.
    const Json* target = &resolve_ref(ref);
    int chain = 0;
    while (target->is_object() && target->contains("$ref") && target->size() == 1) {
      if (++chain > g_.limits().max_ref_depth)
        throw GrammarError(
            limit_message("max_ref_depth", g_.limits().max_ref_depth, fmt::format("$ref chain from '{}'", ref)));
      const Json& next = (*target)["$ref"];
      if (!next.is_string()) throw GrammarError("JSON Schema '$ref' must be a string");
      target = &resolve_ref(next.get<std::string>());
    }
    if (++ref_depth_ > g_.limits().max_ref_depth)
      throw GrammarError(
          limit_message("max_ref_depth", g_.limits().max_ref_depth, fmt::format("$ref '{}' expands too deep", ref)));
    g_.define_rule(rule, expr_for(*target, depth + 1));
    --ref_depth_;
    return rule;
  }

  RuleId rule_for(const Json& schema, int depth) {
    check_depth(depth);
    const std::string key = schema.dump();
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const RuleId rule = g_.add_rule("node");
    memo_[key] = rule;
    g_.define_rule(rule, expr_for(schema, depth));
    return rule;
  }

  ExprId literal_value(const Json& v) { return lit(v.dump()); }

  // allOf of object schemas: properties and required merged, the other keywords of each kept.
  Json merge_all_of(const Json& schema) {
    Json merged = Json::object();
    for (auto it = schema.begin(); it != schema.end(); ++it)
      if (it.key() != "allOf") merged[it.key()] = it.value();
    if (!schema["allOf"].is_array()) throw GrammarError("JSON Schema 'allOf' must be an array");
    for (const Json& part0 : schema["allOf"]) {
      const Json* part = &part0;
      int chain = 0;
      while (part->is_object() && part->contains("$ref")) {
        if (++chain > g_.limits().max_ref_depth)
          throw GrammarError(limit_message("max_ref_depth", g_.limits().max_ref_depth, "$ref chain in allOf"));
        if (part->size() != 1) unsupported("keyword '$ref' with sibling keywords inside 'allOf'");
        part = &resolve_ref((*part)["$ref"].get<std::string>());
      }
      if (!part->is_object()) unsupported("keyword 'allOf' with a boolean schema");
      for (auto it = part->begin(); it != part->end(); ++it) {
        const std::string& k = it.key();
        if (k == "properties") {
          if (!merged.contains("properties")) merged["properties"] = Json::object();
          for (auto p = it.value().begin(); p != it.value().end(); ++p) {
            if (merged["properties"].contains(p.key()) && merged["properties"][p.key()] != p.value())
              unsupported(fmt::format("keyword 'allOf' with conflicting schemas for property '{}'", p.key()));
            merged["properties"][p.key()] = p.value();
          }
        } else if (k == "required") {
          if (!merged.contains("required")) merged["required"] = Json::array();
          for (const Json& r : it.value()) merged["required"].push_back(r);
        } else if (k == "type") {
          if (it.value() != "object") unsupported("keyword 'allOf' of schemas that are not objects");
          merged["type"] = "object";
        } else if (annotation_keywords().count(k)) {
        } else if (merged.contains(k) && merged[k] != it.value()) {
          unsupported(fmt::format("keyword 'allOf' with conflicting '{}'", k));
        } else if (k == "additionalProperties") {
          merged[k] = it.value();
        } else {
          unsupported(fmt::format("keyword '{}' inside 'allOf' (only object schemas merge)", k));
        }
      }
    }
    merged["type"] = "object";
    return merged;
  }

  ExprId expr_for(const Json& schema, int depth) {
    check_depth(depth);
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return g_.ref(any_value_rule());
      unsupported("schema 'false' (matches nothing)");
    }
    if (!schema.is_object()) throw GrammarError("a JSON Schema must be an object or a boolean");
    for (auto it = schema.begin(); it != schema.end(); ++it)
      if (!supported_keywords().count(it.key()) && !annotation_keywords().count(it.key()))
        unsupported(fmt::format("keyword '{}'", it.key()));

    auto only = [&](const char* keyword) {
      for (auto it = schema.begin(); it != schema.end(); ++it)
        if (it.key() != keyword && !annotation_keywords().count(it.key()))
          unsupported(fmt::format("keyword '{}' together with '{}'", it.key(), keyword));
    };
    if (schema.contains("$ref")) {
      only("$ref");
      if (!schema["$ref"].is_string()) throw GrammarError("JSON Schema '$ref' must be a string");
      return g_.ref(ref_rule(schema["$ref"].get<std::string>(), depth));
    }
    if (schema.contains("allOf")) return expr_for(merge_all_of(schema), depth + 1);
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!schema.contains(k)) continue;
      only(k);
      if (!schema[k].is_array() || schema[k].empty())
        throw GrammarError(fmt::format("JSON Schema '{}' must be a non-empty array", k));
      std::vector<ExprId> options;
      for (const Json& s : schema[k]) options.push_back(g_.ref(rule_for(s, depth + 1)));
      return g_.choice(std::move(options));
    }
    if (schema.contains("const")) return literal_value(schema["const"]);
    if (schema.contains("enum")) {
      const Json& e = schema["enum"];
      if (!e.is_array() || e.empty()) throw GrammarError("JSON Schema 'enum' must be a non-empty array");
      if (static_cast<int64_t>(e.size()) > g_.limits().max_enum_values)
        throw GrammarError(limit_message("max_enum_values", g_.limits().max_enum_values,
                                         fmt::format("an enum of {} values", e.size())));
      std::vector<ExprId> options;
      for (const Json& v : e) options.push_back(literal_value(v));
      return g_.choice(std::move(options));
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const Json& x : t) {
          if (!x.is_string()) throw GrammarError("JSON Schema 'type' must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        throw GrammarError("JSON Schema 'type' must be a string or an array");
      }
      if (types.empty()) throw GrammarError("JSON Schema 'type' is an empty array");
    } else {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (schema.contains(k)) return true;
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
      if (types.empty()) return g_.ref(any_value_rule());
    }
    std::vector<ExprId> options;
    for (const std::string& t : types) options.push_back(type_expr(schema, t, depth));
    return g_.choice(std::move(options));
  }

  ExprId type_expr(const Json& schema, const std::string& type, int depth) {
    if (type == "string") return string_expr(schema);
    if (type == "integer") return integer_expr(schema);
    if (type == "number") return number_expr(schema);
    if (type == "boolean") return g_.choice({lit("true"), lit("false")});
    if (type == "null") return lit("null");
    if (type == "object") return object_expr(schema, depth);
    if (type == "array") return array_expr(schema, depth);
    unsupported(fmt::format("type '{}'", type));
  }

  Grammar& g_;
  const Json& root_;
  JsonFormatOptions format_;
  ExprId ws_ = -1;
  ExprId json_char_ = -1;
  RuleId string_rule_ = -1, integer_rule_ = -1, number_rule_ = -1, any_value_ = -1, any_object_ = -1;
  std::map<std::string, RuleId> memo_;
  std::map<std::pair<int32_t, int32_t>, RuleId> bounded_string_rules_;
  std::map<std::string, RuleId> ref_rules_;
  int ref_depth_ = 0;
  int64_t ref_expansions_ = 0;
};

}  // namespace

Grammar json_schema_grammar(std::string_view schema_json, const JsonFormatOptions& format,
                            const GrammarLimits& limits) {
  if (static_cast<int64_t>(schema_json.size()) > limits.max_text_bytes)
    throw GrammarError(limit_message("max_text_bytes", limits.max_text_bytes, "the JSON Schema is too long"));
  Json schema;
  try {
    // Depth is checked by the parser's callback before the tree grows (a 10,000-deep schema
    // is refused while reading, without deep recursion anywhere).
    const int32_t max_depth = limits.max_nesting_depth * 2 + 8;  // a schema level is ~2 JSON levels
    schema = Json::parse(schema_json, [&](int depth, Json::parse_event_t, Json&) {
      if (depth > max_depth)
        throw GrammarError(
            limit_message("max_nesting_depth", limits.max_nesting_depth, "the schema JSON nests too deep"));
      return true;
    });
  } catch (const GrammarError&) {
    throw;
  } catch (const std::exception& e) {
    throw GrammarError(std::string("the JSON Schema is not valid JSON: ") + e.what());
  }
  Grammar g(limits);
  SchemaConverter converter(g, schema, format);
  const RuleId root = g.rule_named("root");
  g.define_rule(root, g.ref(converter.convert_root()));
  g.set_root(root);
  g.check_complete();
  return g;
}

Grammar json_object_grammar(const JsonFormatOptions& format, const GrammarLimits& limits) {
  Grammar g(limits);
  const Json empty = Json::object();
  SchemaConverter converter(g, empty, format);
  const RuleId root = g.rule_named("root");
  g.define_rule(root, g.ref(converter.any_object_rule()));
  g.set_root(root);
  g.check_complete();
  return g;
}

}  // namespace pagedkv::grammar
