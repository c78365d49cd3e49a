// libFuzzer target: a chat template's source, parsed and rendered with a random conversation
// drawn from the input's hash (any roles, tricky and null contents, text parts, assistant tool
// calls, tool results, tools or none). Any input must end in rendered text within the output
// limit or a TemplateError; anything else (another exception, a crash, a
// sanitizer report, a render that does not stop) is a bug. Built and run by scripts/fuzz.sh
// (clang, libFuzzer, ASan+UBSan); the seeds include the real templates of ../shared.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <random>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "pagedkv/template/template.h"

namespace {

using pagedkv::fuzz::check;
using namespace pagedkv::jinja;

// A conversation drawn from the input's hash (so the whole input stays the template's source,
// and the real templates among the seeds render): 0 to 6 messages of any role, contents that are
// strings (tricky ones), null, or lists of text parts, assistant tool calls, tool results, tools
// or none, with or without the generation prompt.
nlohmann::ordered_json conversation(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  static const char* const kTexts[] = {"",
                                       "Weather in Paris?",
                                       "You are terse. é 日本 👍🏽",
                                       "{{ not a tag }} <|im_end|>",
                                       "  18 C\n",
                                       "[INST] </s> <s>",
                                       "line\nline\n\n",
                                       "\x01 x"};
  static const char* const kRoles[] = {"system", "user", "assistant", "tool", "developer", "user"};
  using json = nlohmann::ordered_json;
  const json call = json::parse(R"({"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2, "x": [1.5, null, true]}}})");
  json messages = json::array();
  const size_t n = pick(7);
  for (size_t i = 0; i < n; ++i) {
    json m = {{"role", kRoles[pick(std::size(kRoles))]}};
    switch (pick(4)) {
      case 0:
        m["content"] = nullptr;
        break;
      case 1:
        m["content"] = json::array({{{"type", "text"}, {"text", kTexts[pick(std::size(kTexts))]}}});
        break;
      default:
        m["content"] = kTexts[pick(std::size(kTexts))];
        break;
    }
    if (m["role"] == "assistant" && pick(2) == 0) m["tool_calls"] = json::array({call});
    if (m["role"] == "tool") {
      m["tool_call_id"] = "call00001";
      m["name"] = "get_weather";
    }
    messages.push_back(std::move(m));
  }
  json vars = {{"messages", std::move(messages)},
               {"add_generation_prompt", pick(2) == 0},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"},
               {"documents", nullptr}};
  if (pick(2) == 0)
    vars["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": ["integer", "null"]}},
      "required": ["location"]}}}])");
  return vars;
}

std::tm fixed_date() {
  std::tm t{};
  t.tm_year = 126;
  t.tm_mday = 15;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  // Tighter than the defaults so every input finishes in milliseconds; the same code paths stop it.
  ParseLimits parse_limits;
  parse_limits.max_nesting_depth = 64;
  RenderOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_call_depth = 32;
  options.clock = fixed_date;
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the input
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  const nlohmann::ordered_json vars = conversation(seed);
  try {
    const Template t(source, parse_limits);
    const std::string text = t.render(vars, options);
    check(text.size() <= options.limits.max_output_bytes);
    check(t.render(vars, options) == text);  // rendering is deterministic
  } catch (const TemplateError& e) {
    check(e.what() != nullptr);
  }
  return 0;
}
