// The front ends (GBNF, regex, choice, JSON Schema) and the limits: each grammar is compiled on a
// byte vocabulary and asked which whole strings it accepts (accept_bytes, then can_terminate).
#include <chrono>
#include <optional>

#include "grammar_test_support.h"
#include "thread_cpu_time.h"
#include "pagedkv/grammar/grammar_front_ends.h"
#include "pagedkv/grammar/json_schema_grammar.h"

namespace pagedkv::testing {
namespace {

using g::GrammarKind;

struct Language {
  std::shared_ptr<const g::CompiledGrammar> compiled;

  Language(GrammarKind kind, std::string_view text, g::GrammarOptions options = {})
      : compiled(g::compile_grammar(kind, text, byte_vocabulary(), options)) {}

  bool accepts(std::string_view s) const {
    g::GrammarMatcher m(compiled);
    return m.accept_bytes(s) && m.can_terminate();
  }
  bool accepts_prefix(std::string_view s) const {
    g::GrammarMatcher m(compiled);
    return m.accept_bytes(s);
  }
};

// The message of the GrammarError that compiling throws ("" if none).
std::string compile_error(GrammarKind kind, std::string_view text, g::GrammarOptions options = {}) {
  try {
    g::compile_grammar(kind, text, byte_vocabulary(), options);
  } catch (const g::GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarGbnf, LiteralsClassesRepetitionAndRecursion) {
  const Language l(GrammarKind::kGbnf, R"(
    # a comment
    root ::= greeting " " list
    greeting ::= "hi" | "hello"
    list ::= "[" (item ("," item)*)? "]"
    item ::= [a-c]+ | list   # recursion
  )");
  EXPECT_TRUE(l.accepts("hi []"));
  EXPECT_TRUE(l.accepts("hello [a,bb,[c,[]]]"));
  EXPECT_FALSE(l.accepts("hi [d]"));
  EXPECT_FALSE(l.accepts("hi [a,]"));
  EXPECT_FALSE(l.accepts("hey []"));
  EXPECT_TRUE(l.accepts_prefix("hello [[a"));
}

TEST(GrammarGbnf, BoundsNegatedClassesEscapesAndUnicode) {
  const Language l(GrammarKind::kGbnf, R"(root ::= [0-9]{2,3} "-" [^\n"]{0,2} "\x41\u00e9" [α-ω]?)");
  EXPECT_TRUE(l.accepts("12-Aé"));
  EXPECT_TRUE(l.accepts("123-xyAéβ"));
  EXPECT_FALSE(l.accepts("1-Aé"));
  EXPECT_FALSE(l.accepts("1234-Aé"));
  EXPECT_FALSE(l.accepts("12-xyzAé"));
  EXPECT_FALSE(l.accepts("12-\"Aé"));
  EXPECT_FALSE(l.accepts("12-Aéa"));
  // A negated class takes whole UTF-8 characters, never a lone continuation byte.
  const Language any(GrammarKind::kGbnf, R"(root ::= [^a]*)");
  EXPECT_TRUE(any.accepts("bé€😀"));
  EXPECT_FALSE(any.accepts("\xA9"));
  EXPECT_FALSE(any.accepts("\xC3"));
  EXPECT_TRUE(any.accepts_prefix("\xC3"));
}

TEST(GrammarGbnf, ErrorsNameTheProblem) {
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "root ::= a\na ::= a \"x\" | \"y\"").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "root ::= missing").find("never defined"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "start ::= \"x\"").find("root"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "root ::= \"x").find("unterminated"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "root ::= \"x\"{3,1}").find("bounds"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kGbnf, "root ::= \"(\" root \")\"").find("matches no string"),
            std::string::npos);
}

TEST(GrammarGbnf, ToGbnfRoundTrips) {
  const g::Grammar a = g::parse_gbnf(R"(root ::= "a" [b-d]* x{1,2} | x
                                        x ::= [^\x00-\x20] "é")");
  const g::Grammar b = g::parse_gbnf(a.to_gbnf());
  const auto vocab = byte_vocabulary();
  auto ca = g::compile_grammar(a, vocab), cb = g::compile_grammar(b, vocab);
  for (const char* s : {"abx\xC3\xA9", "x\xC3\xA9", "a!\xC3\xA9!\xC3\xA9", "a", "ab", "abbd!\xC3\xA9"}) {
    g::GrammarMatcher ma(ca), mb(cb);
    const bool ra = ma.accept_bytes(s) && ma.can_terminate();
    const bool rb = mb.accept_bytes(s) && mb.can_terminate();
    EXPECT_EQ(ra, rb) << s;
  }
}

// Two front ends' grammars side by side in a third: each keeps its own language (its rules are
// renamed, so both "root"s and same-named inner rules live apart), and the whole round-trips as GBNF.
TEST(GrammarGbnf, ImportGrammarKeepsEachLanguage) {
  const g::Grammar number = g::json_schema_grammar(R"({"type": "integer", "minimum": 1, "maximum": 9})");
  const g::Grammar word = g::parse_gbnf(R"(root ::= "w" x
                                           x ::= [a-c]+)");
  g::Grammar whole;
  const g::RuleId n = whole.import_grammar(number, "n-");
  const g::RuleId w = whole.import_grammar(word, "w-");
  const g::RuleId root = whole.rule_named("root");
  whole.define_rule(root, whole.choice({whole.sequence({whole.literal("N="), whole.ref(n)}),
                                        whole.sequence({whole.literal("W="), whole.ref(w)})}));
  whole.set_root(root);
  const auto vocab = byte_vocabulary();
  for (const auto& compiled :
       {g::compile_grammar(whole, vocab), g::compile_grammar(g::parse_gbnf(whole.to_gbnf()), vocab)}) {
    auto accepts = [&](std::string_view s) {
      g::GrammarMatcher m(compiled);
      return m.accept_bytes(s) && m.can_terminate();
    };
    EXPECT_TRUE(accepts("N=7"));
    EXPECT_TRUE(accepts("W=wabc"));
    EXPECT_FALSE(accepts("N=0"));
    EXPECT_FALSE(accepts("N=wab"));
    EXPECT_FALSE(accepts("W=7"));
    EXPECT_FALSE(accepts("W=w"));
  }
  g::Grammar incomplete;
  incomplete.rule_named("root");
  EXPECT_THROW(whole.import_grammar(incomplete, "i-"), g::GrammarError);
}

TEST(GrammarRegex, Features) {
  const Language l(GrammarKind::kRegex, R"(^(\d{3}-)?[A-Z][a-z]+(?:,\s\w+)*\.?$)");
  EXPECT_TRUE(l.accepts("Hello"));
  EXPECT_TRUE(l.accepts("555-Hello, w0rld, x."));
  EXPECT_FALSE(l.accepts("55-Hello"));
  EXPECT_FALSE(l.accepts("hello"));
  EXPECT_FALSE(l.accepts("Hello,"));
  const Language dot(GrammarKind::kRegex, "a.c|x{2,}|[^abc]{1,2}|\\.\\*\\x41");
  EXPECT_TRUE(dot.accepts("abc"));
  EXPECT_TRUE(dot.accepts("a€c"));
  EXPECT_FALSE(dot.accepts("a\nc"));
  EXPECT_TRUE(dot.accepts("xxxxx"));
  EXPECT_TRUE(dot.accepts("x"));  // [^abc]{1,2}
  EXPECT_FALSE(dot.accepts("aa"));
  EXPECT_TRUE(dot.accepts("dé"));
  EXPECT_FALSE(dot.accepts("da"));
  EXPECT_TRUE(dot.accepts(".*A"));
  const Language brace(GrammarKind::kRegex, "a{,2}b{x");  // '{' that is no quantifier is literal
  EXPECT_TRUE(brace.accepts("aab{x"));
  EXPECT_TRUE(brace.accepts("b{x"));
}

TEST(GrammarRegex, RefusesWhatItCannotExpress) {
  EXPECT_NE(compile_error(GrammarKind::kRegex, "(a)\\1").find("back-references"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kRegex, "a(?=b)").find("look-around"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kRegex, "\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kRegex, "a$b").find("'$'"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kRegex, "(ab").find("')'"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kRegex, "*a").find("nothing to repeat"), std::string::npos);
}

TEST(GrammarChoice, OneOfTheStrings) {
  const Language l(GrammarKind::kChoice, R"(["yes", "no", "not sure", "ño"])");
  EXPECT_TRUE(l.accepts("yes"));
  EXPECT_TRUE(l.accepts("not sure"));
  EXPECT_TRUE(l.accepts("ño"));
  EXPECT_FALSE(l.accepts("not"));
  EXPECT_FALSE(l.accepts("yesno"));
  EXPECT_NE(compile_error(GrammarKind::kChoice, R"(["a", 1])").find("array of strings"), std::string::npos);
}

TEST(GrammarJsonSchema, ObjectsWithRequiredOptionalAndOrder) {
  const Language l(GrammarKind::kJsonSchema, R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"]})");
  EXPECT_TRUE(l.accepts(R"({"name":"Bo"})"));
  EXPECT_TRUE(l.accepts(R"({"name":"Bo","age":-3})"));
  EXPECT_TRUE(l.accepts(R"({"name":"Bo","tags":[]})"));
  EXPECT_TRUE(l.accepts(R"({"name":"Bo","age":0,"tags":["a","b\"\\\u00e9"]})"));
  EXPECT_FALSE(l.accepts(R"({"age":3})"));
  EXPECT_FALSE(l.accepts(R"({"name":"Bo",})"));
  EXPECT_FALSE(l.accepts(R"({"age":3,"name":"Bo"})"));  // schema order
  EXPECT_FALSE(l.accepts(R"({"name":"Bo","other":1})"));  // additionalProperties defaults to false
  EXPECT_FALSE(l.accepts(R"({"name":"Bo","age":01})"));
  EXPECT_FALSE(l.accepts(R"({ "name":"Bo"})"));  // compact by default
  EXPECT_FALSE(l.accepts("{\"name\":\"a\nb\"}"));  // raw control characters
  EXPECT_FALSE(l.accepts(R"({"name":"\x"})"));  // invalid escape
}

TEST(GrammarJsonSchema, WhitespaceWhenAllowed) {
  g::GrammarOptions options;
  options.json.allow_whitespace = true;
  options.json.max_whitespace = 2;
  const Language l(
      GrammarKind::kJsonSchema,
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"boolean"}}},"required":["a"]})", options);
  EXPECT_TRUE(l.accepts("{ \"a\" :\n[ true ,false ] }"));
  EXPECT_TRUE(l.accepts("{\"a\":[]}"));
  EXPECT_FALSE(l.accepts("{   \"a\":[]}"));  // more than max_whitespace
}

TEST(GrammarJsonSchema, AdditionalPropertiesSchemaAvoidsNamedKeys) {
  const Language l(
      GrammarKind::kJsonSchema,
      R"({"type":"object","properties":{"ab":{"type":"null"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(l.accepts(R"({"ab":null,"x":1,"a":2,"abc":3,"":4})"));
  EXPECT_TRUE(l.accepts(R"({"b":1})"));
  EXPECT_FALSE(l.accepts(R"({"ab":null,"ab":1})"));
  EXPECT_FALSE(l.accepts(R"({"ab":1})"));
  EXPECT_FALSE(l.accepts(R"({"x":"s"})"));
}

TEST(GrammarJsonSchema, ScalarsEnumsConstAndUnions) {
  const Language e(GrammarKind::kJsonSchema, R"({"enum":["red", 1, null, {"a":[1]}]})");
  EXPECT_TRUE(e.accepts(R"("red")"));
  EXPECT_TRUE(e.accepts("1"));
  EXPECT_TRUE(e.accepts("null"));
  EXPECT_TRUE(e.accepts(R"({"a":[1]})"));
  EXPECT_FALSE(e.accepts(R"("blue")"));
  const Language c(GrammarKind::kJsonSchema, R"({"const":"x"})");
  EXPECT_TRUE(c.accepts(R"("x")"));
  EXPECT_FALSE(c.accepts(R"("y")"));
  const Language u(GrammarKind::kJsonSchema, R"({"type":["number","null","boolean"]})");
  for (const char* s : {"null", "true", "false", "0", "-0.5", "1e10", "2.5E-3"}) EXPECT_TRUE(u.accepts(s)) << s;
  for (const char* s : {"01", ".5", "1.", "+1", "\"1\"", "nul"}) EXPECT_FALSE(u.accepts(s)) << s;
  const Language any(GrammarKind::kJsonSchema,
                     R"({"anyOf":[{"type":"string","maxLength":1},{"type":"array","maxItems":1}]})");
  EXPECT_TRUE(any.accepts(R"("a")"));
  EXPECT_TRUE(any.accepts(R"([{"x":[1,2]}])"));
  EXPECT_FALSE(any.accepts(R"("ab")"));
  EXPECT_FALSE(any.accepts("[1,2]"));
}

TEST(GrammarJsonSchema, IntegerRanges) {
  struct Case {
    const char* schema;
    int64_t lo, hi;
  };
  for (const Case& c : {Case{R"({"type":"integer","minimum":-17,"maximum":123})", -17, 123},
                        Case{R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":1000})", 6, 999},
                        Case{R"({"type":"integer","minimum":-250,"maximum":-3})", -250, -3},
                        Case{R"({"type":"integer","minimum":0,"maximum":0})", 0, 0}}) {
    const Language l(GrammarKind::kJsonSchema, c.schema);
    for (int64_t v = -1100; v <= 1100; ++v)
      ASSERT_EQ(l.accepts(std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
  }
  const Language open(GrammarKind::kJsonSchema, R"({"type":"integer","minimum":95})");
  for (int64_t v = 0; v <= 2000; ++v) ASSERT_EQ(open.accepts(std::to_string(v)), v >= 95) << v;
  EXPECT_TRUE(open.accepts("123456789012"));
  const Language below(GrammarKind::kJsonSchema, R"({"type":"integer","maximum":-95})");
  for (int64_t v = -2000; v <= 100; ++v) ASSERT_EQ(below.accepts(std::to_string(v)), v <= -95) << v;
}

// The test's own exact decimal: a JSON number without exponent as (sign, integer digits, fraction
// digits), compared digit by digit, never through a double.
struct TestDecimal {
  int sign = 0;  // -1, 0, 1
  std::string integer, fraction;  // no leading / trailing zeros
};

std::optional<TestDecimal> parse_plain_number(const std::string& s) {
  // -?(0|[1-9][0-9]*)(\.[0-9]+)?, checked by hand.
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = s.size() > 0 && s[0] == '-' ? 1 : 0;
  if (i >= s.size() || !digit(s[i])) return std::nullopt;
  if (s[i] == '0' && i + 1 < s.size() && digit(s[i + 1])) return std::nullopt;
  while (i < s.size() && digit(s[i])) ++i;
  if (i < s.size()) {
    if (s[i] != '.' || i + 1 == s.size()) return std::nullopt;
    for (++i; i < s.size(); ++i)
      if (!digit(s[i])) return std::nullopt;
  }
  TestDecimal d;
  const bool negative = s[0] == '-';
  const std::string body = negative ? s.substr(1) : s;
  const size_t dot = body.find('.');
  d.integer = body.substr(0, dot);
  d.fraction = dot == std::string::npos ? "" : body.substr(dot + 1);
  d.integer.erase(
      0, d.integer.find_first_not_of('0') == std::string::npos ? d.integer.size() : d.integer.find_first_not_of('0'));
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  d.sign = d.integer.empty() && d.fraction.empty() ? 0 : negative ? -1 : 1;
  return d;
}

int compare_test_decimals(const TestDecimal& a, const TestDecimal& b) {
  if (a.sign != b.sign) return a.sign < b.sign ? -1 : 1;
  int c = 0;
  if (a.integer.size() != b.integer.size()) c = a.integer.size() < b.integer.size() ? -1 : 1;
  else if (a.integer != b.integer) c = a.integer < b.integer ? -1 : 1;
  else if (a.fraction != b.fraction) c = a.fraction < b.fraction ? -1 : 1;
  return a.sign < 0 ? -c : c;
}

// Random bounds (negative, fractional, exclusive, one-sided) and random strings: the grammar
// accepts a string iff it is a JSON number without exponent whose exact value is within them.
TEST(GrammarJsonSchema, NumberRangesAreExact) {
  std::mt19937_64 rng(2024);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto random_decimal = [&]() {
    std::string s = pick(3) == 0 ? "-" : "";
    const int int_digits = pick(3);
    s += int_digits == 0 ? "0" : std::to_string(1 + pick(9));
    for (int i = 1; i < int_digits; ++i) s += static_cast<char>('0' + pick(10));
    if (pick(2)) {
      s += '.';
      const int frac = 1 + pick(3);
      for (int i = 0; i < frac; ++i) s += static_cast<char>('0' + pick(10));
      if (s.back() == '0') s.back() = static_cast<char>('1' + pick(9));  // as a double prints it
    }
    return s;
  };
  // Strings near a bound: the bound itself, with trailing zeros, a digit more or less, other signs.
  auto near = [&](const std::string& b) {
    std::vector<std::string> out = {b,
                                    b + (b.find('.') == std::string::npos ? ".0" : "0"),
                                    b + "1",
                                    b + "9",
                                    b.size() > 1 ? b.substr(0, b.size() - 1) : "0",
                                    "-" + b,
                                    b + ".5",
                                    b + "00"};
    if (b[0] == '-') out.push_back(b.substr(1));
    return out;
  };
  const std::string alphabet = "-0123456789.eE+";
  int cases = 0;
  for (int round = 0; round < 150; ++round) {
    nlohmann::json schema = {{"type", "number"}};
    std::optional<std::pair<TestDecimal, bool>> lo, hi;
    std::vector<std::string> bound_texts;
    for (int side = 0; side < 2; ++side) {
      if (pick(4) == 0) continue;  // one-sided (or no bound at all)
      const std::string text = random_decimal();
      const bool exclusive = pick(2) == 0;
      const char* key =
          side == 0 ? (exclusive ? "exclusiveMinimum" : "minimum") : (exclusive ? "exclusiveMaximum" : "maximum");
      schema[key] = nlohmann::json::parse(text);
      bound_texts.push_back(text);
      (side == 0 ? lo : hi) = std::make_pair(*parse_plain_number(text), exclusive);
    }
    if (!lo && !hi) continue;
    bool empty = false;
    if (lo && hi) {
      const int c = compare_test_decimals(lo->first, hi->first);
      empty = c > 0 || (c == 0 && (lo->second || hi->second));
    }
    const std::string text = schema.dump();
    if (empty) {
      EXPECT_NE(compile_error(GrammarKind::kJsonSchema, text).find("empty"), std::string::npos) << text;
      continue;
    }
    const Language l(GrammarKind::kJsonSchema, text);
    std::vector<std::string> strings = {"0", "-0", "0.0", "-0.00", "1e5", "1", "-1", "00", "01", ".5", "5.", "-"};
    for (const std::string& b : bound_texts)
      for (const std::string& s : near(b)) strings.push_back(s);
    for (int i = 0; i < 60; ++i) strings.push_back(random_decimal());
    for (int i = 0; i < 40; ++i) {
      std::string s;
      for (int k = 1 + pick(6); k > 0; --k) s += alphabet[static_cast<size_t>(pick(static_cast<int>(alphabet.size())))];
      strings.push_back(s);
    }
    for (const std::string& s : strings) {
      const std::optional<TestDecimal> v = parse_plain_number(s);
      bool in = v.has_value();
      if (in && lo) {
        const int c = compare_test_decimals(*v, lo->first);
        in = c > 0 || (c == 0 && !lo->second);
      }
      if (in && hi) {
        const int c = compare_test_decimals(*v, hi->first);
        in = c < 0 || (c == 0 && !hi->second);
      }
      ASSERT_EQ(l.accepts(s), in) << text << " '" << s << "'";
      ++cases;
    }
  }
  EXPECT_GT(cases, 10'000);
  // Draft 4's boolean exclusives; a bound beside a stricter exclusive one; bounds written with exponents.
  const Language d4(GrammarKind::kJsonSchema, R"({"type":"number","minimum":0.5,"exclusiveMinimum":true})");
  EXPECT_FALSE(d4.accepts("0.5"));
  EXPECT_TRUE(d4.accepts("0.5000001"));
  const Language both(GrammarKind::kJsonSchema, R"({"type":"number","minimum":1,"exclusiveMinimum":1})");
  EXPECT_FALSE(both.accepts("1"));
  EXPECT_TRUE(both.accepts("1.01"));
  const Language tiny(GrammarKind::kJsonSchema, R"({"type":"number","exclusiveMinimum":0,"maximum":2.5e-3})");
  EXPECT_TRUE(tiny.accepts("0.0025"));
  EXPECT_TRUE(tiny.accepts("0.00000001"));
  EXPECT_FALSE(tiny.accepts("0.00251"));
  EXPECT_FALSE(tiny.accepts("0"));
  EXPECT_FALSE(tiny.accepts("2.5e-3"));  // no exponent in a bounded number
  const Language big(GrammarKind::kJsonSchema, R"({"type":"number","minimum":-1.5e3,"maximum":12345678901234.5})");
  EXPECT_TRUE(big.accepts("-1500"));
  EXPECT_FALSE(big.accepts("-1500.01"));
  EXPECT_TRUE(big.accepts("12345678901234.49"));
  EXPECT_FALSE(big.accepts("12345678901234.51"));
  // Without bounds, exponents as before; without a type, bounds mean a number.
  EXPECT_TRUE(Language(GrammarKind::kJsonSchema, R"({"type":"number"})").accepts("1.5e-3"));
  const Language untyped(GrammarKind::kJsonSchema, R"({"minimum":0.25})");
  EXPECT_TRUE(untyped.accepts("0.25"));
  EXPECT_FALSE(untyped.accepts("0.2"));
}

TEST(GrammarJsonSchema, StringsLengthPatternFormat) {
  const Language len(GrammarKind::kJsonSchema, R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(len.accepts(R"("ab")"));
  EXPECT_TRUE(len.accepts(R"("a\nb")"));  // an escape is one character
  EXPECT_TRUE(len.accepts(R"("éé")"));
  EXPECT_FALSE(len.accepts(R"("a")"));
  EXPECT_FALSE(len.accepts(R"("abcd")"));
  const Language pat(GrammarKind::kJsonSchema, R"({"type":"string","pattern":"^[a-z]+\\d$"})");
  EXPECT_TRUE(pat.accepts(R"("abc1")"));
  EXPECT_FALSE(pat.accepts(R"("abc")"));
  const Language date(GrammarKind::kJsonSchema, R"({"type":"string","format":"date"})");
  EXPECT_TRUE(date.accepts(R"("2024-02-29")"));
  EXPECT_FALSE(date.accepts(R"("2024-13-01")"));
  const Language uuid(GrammarKind::kJsonSchema, R"({"format":"uuid"})");
  EXPECT_TRUE(uuid.accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(uuid.accepts(R"("123e4567")"));
  const Language dt(GrammarKind::kJsonSchema, R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(dt.accepts(R"("2024-01-31T23:59:60Z")") == false);
  EXPECT_TRUE(dt.accepts(R"("2024-01-31T23:59:59.123+01:00")"));
  // Beside a pattern, a format (even one not known here) is an annotation: the pattern decides.
  const Language both(GrammarKind::kJsonSchema, R"({"type":"string","format":"email","pattern":"^[a-z]{2}@x\\.io$"})");
  EXPECT_TRUE(both.accepts(R"("ab@x.io")"));
  EXPECT_FALSE(both.accepts(R"("abc@x.io")"));
  const Language unknown(GrammarKind::kJsonSchema, R"({"type":"string","format":"hostname","pattern":"^h[0-9]$"})");
  EXPECT_TRUE(unknown.accepts(R"("h1")"));
}

TEST(GrammarJsonSchema, ArraysPrefixItemsAndBounds) {
  const Language l(
      GrammarKind::kJsonSchema,
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"},"minItems":1,"maxItems":4})");
  EXPECT_TRUE(l.accepts("[1]"));
  EXPECT_TRUE(l.accepts(R"([1,"a"])"));
  EXPECT_TRUE(l.accepts(R"([1,"a",true,false])"));
  EXPECT_FALSE(l.accepts("[]"));
  EXPECT_FALSE(l.accepts(R"([1,"a",true,false,true])"));
  EXPECT_FALSE(l.accepts(R"(["a"])"));
  const Language strict(GrammarKind::kJsonSchema, R"({"prefixItems":[{"type":"null"}]})");
  EXPECT_TRUE(strict.accepts("[]"));
  EXPECT_TRUE(strict.accepts("[null]"));
  EXPECT_FALSE(strict.accepts("[null,null]"));
  const Language bounded(GrammarKind::kJsonSchema, R"({"type":"array","items":{"const":0},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(bounded.accepts("[0]"));
  EXPECT_TRUE(bounded.accepts("[0,0]"));
  EXPECT_TRUE(bounded.accepts("[0,0,0]"));
  EXPECT_FALSE(bounded.accepts("[0,0,0,0]"));
}

TEST(GrammarJsonSchema, RefsRecursionAndAllOf) {
  const Language tree(GrammarKind::kJsonSchema, R"({
    "$defs": {"node": {"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(tree.accepts(R"({"v":1})"));
  EXPECT_TRUE(tree.accepts(R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  EXPECT_FALSE(tree.accepts(R"({"v":1,"kids":[{}]})"));
  const Language all(GrammarKind::kJsonSchema, R"({
    "definitions": {"named": {"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}},
    "allOf": [{"$ref":"#/definitions/named"}, {"properties":{"id":{"type":"integer"}},"required":["id"]}]})");
  EXPECT_TRUE(all.accepts(R"({"name":"x","id":3})"));
  EXPECT_FALSE(all.accepts(R"({"name":"x"})"));
  const Language obj(GrammarKind::kJsonObject, "");
  EXPECT_TRUE(obj.accepts(R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(obj.accepts("{}"));
  EXPECT_FALSE(obj.accepts("[]"));
}

TEST(GrammarJsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"object","patternProperties":{}})")
                .find("'patternProperties'"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"number","multipleOf":0.5})").find("'multipleOf'"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"number","minimum":1e30})").find("'minimum'"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"number","maximum":1e-40})").find("'maximum'"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"string","format":"hostname"})").find("'hostname'"),
            std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"$ref":"http://x/y"})").find("$ref"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"not":{}})").find("'not'"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"strin"})").find("'strin'"), std::string::npos);
  EXPECT_NE(compile_error(GrammarKind::kJsonSchema, R"({"type":"object")").find("not valid JSON"), std::string::npos);
}

// Every limit ends in a GrammarError naming it, within a second.
TEST(GrammarLimits, HostileInputsFailFastWithTheLimitNamed) {
  struct Case {
    GrammarKind kind;
    std::string text;
    const char* limit;
  };
  std::vector<Case> cases;
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"type":"array","items":)";
  deep += R"({"type":"null"})";
  for (int i = 0; i < 10000; ++i) deep += "}";
  cases.push_back({GrammarKind::kJsonSchema, deep, "max_nesting_depth"});
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; big_enum.size() < 1'000'000; ++i)
    big_enum += (i ? "," : "") + std::string("\"value") + std::to_string(i) + "\"";
  big_enum += "]}";
  cases.push_back({GrammarKind::kJsonSchema, big_enum, "max_text_bytes"});
  std::string many_values = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) many_values += (i ? "," : "") + std::to_string(i);
  many_values += "]}";
  cases.push_back({GrammarKind::kJsonSchema, many_values, "max_enum_values"});
  // Exponential DFAs stop at the state limit or the time budget, whichever comes first here.
  cases.push_back({GrammarKind::kRegex, "(a|b)*a(a|b){40}", "max_automaton_states|compile_budget_ms"});
  cases.push_back({GrammarKind::kRegex, "((a{0,1000}){0,1000}){0,1000}", "max_automaton_states"});
  cases.push_back({GrammarKind::kRegex, "a{100000}", "max_repeat_bound"});
  cases.push_back({GrammarKind::kRegex, std::string(100, '(') + "a" + std::string(100, ')'), "max_nesting_depth"});
  cases.push_back(
      {GrammarKind::kGbnf, "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')'), "max_nesting_depth"});
  cases.push_back({GrammarKind::kJsonSchema, R"({"type":"string","maxLength":100000})", "max_repeat_bound"});
  std::string chain = R"({"$defs":{)";
  for (int i = 0; i < 100; ++i)
    chain += "\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},";
  chain += R"("d100":{"type":"null"}},"$ref":"#/$defs/d0"})";
  cases.push_back({GrammarKind::kJsonSchema, chain, "max_ref_depth"});
  std::string wide_object = R"({"type":"object","properties":{)";
  for (int i = 0; i < 3000; ++i) wide_object += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"null"})";
  wide_object += "}}";
  cases.push_back({GrammarKind::kJsonSchema, wide_object, "expression_depth|compile_budget_ms"});
  cases.push_back({GrammarKind::kJsonSchema,
                   R"({"properties":{")" + std::string(100'000, 'n') + R"(":{}},"additionalProperties":true})",
                   "excluded_property_name_bytes"});
  for (const Case& c : cases) {
    const double start = thread_cpu_seconds();  // the work done, whatever else the machine runs
    const std::string error = compile_error(c.kind, c.text);
    const double seconds = thread_cpu_seconds() - start;
    bool named = false;
    for (std::string_view rest = c.limit; !rest.empty();) {  // any of the '|'-separated names
      const size_t bar = rest.find('|');
      named |= error.find(rest.substr(0, bar)) != std::string::npos;
      rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    }
    EXPECT_TRUE(named) << c.text.substr(0, 80) << " -> '" << error << "'";
    EXPECT_LT(seconds, 1.0) << c.text.substr(0, 80);
  }
  // Regexes that blow up backtracking engines are small automata here.
  for (auto [re, matches_as] :
       {std::pair{"(a*)*b", false}, {"(a|a)*b", false}, {"(a+)+$", true}, {"(.*a){12}", true}}) {
    const auto start = std::chrono::steady_clock::now();
    const Language l(GrammarKind::kRegex, re);
    EXPECT_EQ(l.accepts(std::string(30, 'a')), matches_as) << re;
    EXPECT_FALSE(l.accepts(std::string(30, 'a') + "c")) << re;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0) << re;
  }
}

TEST(GrammarLimits, CompileBudget) {
  g::GrammarOptions options;
  options.limits.compile_budget_ms = 1;
  options.limits.max_automaton_states = 10'000'000;
  const std::string error = compile_error(GrammarKind::kRegex, "(a|b)*a(a|b){18}", options);
  EXPECT_NE(error.find("compile_budget_ms"), std::string::npos) << error;
}

}  // namespace
}  // namespace pagedkv::testing
