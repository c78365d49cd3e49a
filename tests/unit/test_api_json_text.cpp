// JSON text from clients: parse_json_in_order builds the very ordered_json that nlohmann's own
// ordered parser builds, in time linear in the members; nesting is bounded (nests_deeper_than).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "pagedkv/api/json_text.h"
#include "thread_cpu_time.h"

namespace pagedkv::api {
namespace {

using nlohmann::ordered_json;

void expect_as_nlohmann(const std::string& text) {
  const ordered_json expected = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  const ordered_json got = parse_json_in_order(text);
  ASSERT_EQ(got.is_discarded(), expected.is_discarded()) << text;
  if (expected.is_discarded()) return;
  EXPECT_EQ(got.dump(), expected.dump()) << text;  // dump() writes the members in order
  EXPECT_EQ(got, expected) << text;
}

TEST(JsonText, BuildsWhatTheOrderedParserBuilds) {
  for (const char* text : {
           R"({"z": 1, "a": [true, false, null, {"y": -2, "b": 1.5e300}], "m": {"": "", "k": [[], {}]}})",
           R"([1, -1, 18446744073709551615, -9223372036854775808, 0.1, 1e-320, "\u00e9\ud83d\ude00"])",
           R"({"a": 1, "b": 2, "a": {"x": 3}, "c": 4, "b": [5]})",  // repeated keys: first place, last value
           R"({"a": {"a": {"a": 1, "a": 2}}, "a": [{"a": 0}]})",
           R"("text")",
           "42",
           "null",
           "[]",
           "{}",
           R"({"k": [1, 2, {"n": [3, [4, {"d": 5}]]}]})",
       })
    expect_as_nlohmann(text);
  // Random documents: nested objects with repeated keys, arrays, scalars.
  std::mt19937 rng(11);
  const auto random_value = [&](auto& self, int depth) -> std::string {
    const int kind = depth > 4 ? static_cast<int>(rng() % 4) : static_cast<int>(rng() % 6);
    switch (kind) {
      case 0:
        return std::to_string(static_cast<int>(rng() % 2001) - 1000);
      case 1:
        return rng() % 2 ? "true" : "null";
      case 2:
        return "\"s" + std::to_string(rng() % 50) + "\"";
      case 3:
        return std::to_string(static_cast<double>(rng() % 1000) / 7.0);
      case 4: {
        std::string s = "[";
        for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) s += (i ? "," : "") + self(self, depth + 1);
        return s + "]";
      }
      default: {
        std::string s = "{";
        for (int i = 0, n = static_cast<int>(rng() % 8); i < n; ++i)
          s += (i ? ",\"k" : "\"k") + std::to_string(rng() % 6) + "\":" + self(self, depth + 1);
        return s + "}";
      }
    }
  };
  for (int i = 0; i < 300; ++i) expect_as_nlohmann(random_value(random_value, 0));
}

TEST(JsonText, RefusesWhatIsNotJson) {
  for (const char* text : {"", "{", R"({"a": })", "[1,]", R"({"a" 1})", "tru", R"({"a": 1}})", "\"\xff\"", "[1] [2]"})
    expect_as_nlohmann(text);
  EXPECT_TRUE(parse_json_in_order(R"({"a": [1, {"b": )").is_discarded());
}

TEST(JsonText, LargeObjectsTakeLinearTime) {
  // 200,000 members in one object (2 MB): the ordered parser's search of the members before each
  // one makes that 2 * 10^10 comparisons (over a minute); here a fraction of a second.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += ",\"k7\":\"again\"}";
  const double start = pagedkv::testing::thread_cpu_seconds();
  const ordered_json j = parse_json_in_order(text);
  EXPECT_LT(pagedkv::testing::thread_cpu_seconds() - start, 1.0);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.size(), 200000u);
  const auto& members = j.get_ref<const ordered_json::object_t&>();  // a vector of (key, value)
  EXPECT_EQ(members.begin()->first, "k0");
  EXPECT_EQ((members.begin() + 7)->first, "k7");
  EXPECT_EQ((members.begin() + 7)->second, "again");
  EXPECT_EQ((members.end() - 1)->first, "k199999");
}

TEST(JsonText, NestingIsCountedOutsideStrings) {
  EXPECT_FALSE(nests_deeper_than("", 0));
  EXPECT_FALSE(nests_deeper_than(R"({"a": [1, {"b": []}]})", 4));
  EXPECT_TRUE(nests_deeper_than(R"({"a": [1, {"b": []}]})", 3));
  EXPECT_FALSE(nests_deeper_than(R"(["[[[[", "{{{{", "\"[[[", "\\"])", 1));  // brackets, escapes inside strings
  EXPECT_TRUE(nests_deeper_than(R"(["\\", [[1]]])", 2));  // an escaped backslash ends before the quote
  EXPECT_FALSE(nests_deeper_than("[][][][][][]", 1));
}

TEST(JsonText, DeepTextIsRefusedBeforeItIsBuilt) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(parse_json_in_order(nested(kMaxJsonDepth)).is_array());
  EXPECT_TRUE(parse_json_in_order(nested(kMaxJsonDepth + 1)).is_discarded());
  // 4 million deep (8 MB): refused at the bound, in no time and no memory to speak of.
  const std::string deep = nested(4'000'000);
  const double start = pagedkv::testing::thread_cpu_seconds();
  EXPECT_TRUE(nests_deeper_than(deep, kMaxJsonDepth));
  EXPECT_TRUE(parse_json_in_order(deep).is_discarded());
  EXPECT_LT(pagedkv::testing::thread_cpu_seconds() - start, 0.5);
}

}  // namespace
}  // namespace pagedkv::api
