// Seeded random JSON Schemas over the keywords the grammar layer supports
// (docs/structured_output.md, "JSON Schema coverage"), and the Python script that checks outputs
// against them: the grammar tests sample under the mask, the engine tests through real models.
#pragma once

#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace pagedkv::testing {

// The same seed gives the same schemas, one after another.
class SchemaGenerator {
 public:
  using Json = nlohmann::ordered_json;

  explicit SchemaGenerator(uint64_t seed) : rng_(seed) {}

  Json schema() {
    defs_ = Json::object();
    Json s = node(0);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool coin(int percent) { return pick(100) < percent; }

  std::string name() {
    static const char* names[] = {"id", "name", "a b", "é", "q\"x", "value", "items", "x", "tags", "n1", "k/v", "data"};
    return names[pick(12)];
  }

  Json leaf() {
    switch (pick(10)) {
      case 0: {
        Json s = {{"type", "string"}};
        if (coin(50)) s["minLength"] = pick(3);
        if (coin(50)) s["maxLength"] = pick(6) + (s.contains("minLength") ? s["minLength"].get<int>() : 0);
        return s;
      }
      case 1: {
        static const char* patterns[] = {"^[a-z]{1,5}$", "\\d{3}-\\d{2}", "(ab|cd)+x?",
                                         "[A-Z][a-z]*( [A-Z][a-z]*){0,2}", "é+[^a-z\"]{0,3}"};
        return {{"type", "string"}, {"pattern", patterns[pick(5)]}};
      }
      case 2: {
        static const char* formats[] = {"date", "time", "date-time", "uuid", "email"};
        return {{"type", "string"}, {"format", formats[pick(5)]}};
      }
      case 3: {
        Json s = {{"type", "integer"}};
        const int lo = pick(400) - 200;
        if (coin(60)) s[coin(50) ? "minimum" : "exclusiveMinimum"] = lo;
        if (coin(60)) s[coin(50) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(3000);
        return s;
      }
      case 4: {
        // Bounds with up to two decimals, negative ones, exclusive ones, one side or both.
        Json s = {{"type", "number"}};
        const double lo = (pick(4001) - 2000) / 100.0;
        if (coin(50)) s[coin(50) ? "minimum" : "exclusiveMinimum"] = lo;
        if (coin(50)) s[coin(50) ? "maximum" : "exclusiveMaximum"] = lo + (1 + pick(5000)) / 100.0;
        return s;
      }
      case 5:
        return {{"type", "boolean"}};
      case 6:
        return {{"type", coin(50) ? Json("null") : Json::array({"string", "null"})}};
      case 7:
        return {{"enum",
                 Json::array({"red", 7, nullptr, Json::object({{"k", Json::array({1, "two"})}}), "with \"quote\""})}};
      case 8:
        return {{"const", coin(50) ? Json("fixed") : Json(42)}};
      default:
        return {{"type", Json::array({"integer", "boolean", "string"})}, {"maxLength", 4}};
    }
  }

  Json node(int depth) {
    if (depth >= 3 || coin(35)) return leaf();
    switch (pick(6)) {
      case 0:
      case 1: {
        Json s = {{"type", "object"}, {"properties", Json::object()}};
        const int n = pick(5);
        Json required = Json::array();
        for (int i = 0; i < n; ++i) {
          const std::string k = name();
          s["properties"][k] = node(depth + 1);
          if (coin(50)) required.push_back(k);
        }
        if (!required.empty()) s["required"] = required;
        const int a = pick(4);
        if (a == 1) s["additionalProperties"] = false;
        if (a == 2) s["additionalProperties"] = leaf();
        if (a == 3) s["additionalProperties"] = true;
        return s;
      }
      case 2: {
        Json s = {{"type", "array"}};
        if (coin(30)) {
          s["prefixItems"] = Json::array({node(depth + 1), leaf()});
          if (coin(50)) s["items"] = leaf();
        } else {
          s["items"] = node(depth + 1);
        }
        if (coin(50)) s["minItems"] = pick(2);
        if (coin(50)) s["maxItems"] = pick(3) + (s.contains("minItems") ? s["minItems"].get<int>() : 0);
        return s;
      }
      case 3:
        return {{coin(50) ? "anyOf" : "oneOf", Json::array({node(depth + 1), leaf()})}};
      case 4: {
        // A recursive definition: a tree whose children are the same definition.
        const std::string def = "t" + std::to_string(defs_.size());
        defs_[def] = {
            {"type", "object"},
            {"properties",
             {{"v", leaf()}, {"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/" + def}}}, {"maxItems", 2}}}}},
            {"required", Json::array({"v"})}};
        return {{"$ref", "#/$defs/" + def}};
      }
      default:
        return {{"allOf",
                 Json::array({{{"type", "object"}, {"properties", {{"p", leaf()}}}, {"required", Json::array({"p"})}},
                              {{"properties", {{"q", leaf()}}}}})}};
    }
  }

  std::mt19937_64 rng_;
  Json defs_;
};

// Reads a JSON list of {"kind": "schema" | "regex", "schema", "output"} (argv[1]): each output must
// validate with jsonschema's Draft 2020-12 validator, oneOf read as anyOf as the grammar reads it,
// or fullmatch its regex (ASCII classes, as JSON Schema's). Prints {"checked", "errors": [{"case",
// "error"}]}. Numbers with a fraction are read as Decimal, in the schema and the output alike, so
// bounds compare exactly (0.1 as a float is above the decimal 0.1 that the grammar allows).
inline const char* const kSchemaValidateScript = R"PY(
import decimal, json, re, sys
import jsonschema
cases = json.load(open(sys.argv[1]))
def exact(text):  # a float where Decimal cannot hold the exponent (bounded numbers have none)
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        return float(text)
def any_of(s):  # the grammar reads oneOf as anyOf (docs/structured_output.md): check it so
    if isinstance(s, dict):
        return {("anyOf" if k == "oneOf" else k): any_of(v) for k, v in s.items()}
    if isinstance(s, list):
        return [any_of(v) for v in s]
    return s
errors = []
for i, c in enumerate(cases):
    try:
        if c["kind"] == "schema":
            value = json.loads(c["output"], parse_float=exact)
            schema = json.loads(c["schema"], parse_float=exact)
            jsonschema.Draft202012Validator(any_of(schema)).validate(value)
        else:
            if re.fullmatch(c["schema"], c["output"], re.ASCII) is None:
                raise ValueError("no fullmatch")
    except Exception as e:
        errors.append({"case": i, "error": str(e)[:300]})
print(json.dumps({"checked": len(cases), "errors": errors}))
)PY";

}  // namespace pagedkv::testing
