// libFuzzer target: a chat template's source, parsed and rendered with a small fixed conversation
// (system, user, an assistant tool call, its result, tools). Any input must end in rendered text
// within the output limit or a TemplateError; anything else (another exception, a crash, a
// sanitizer report, a render that does not stop) is a bug. Built and run by scripts/fuzz.sh
// (clang, libFuzzer, ASan+UBSan); the seeds include the real templates of ../shared.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "pagedkv/template/template.h"

namespace {

using pagedkv::fuzz::check;
using namespace pagedkv::jinja;

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse. é 日本 👍🏽"},
      {"role": "user", "content": "Weather in Paris? {{ not a tag }} <|im_end|>"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
        "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2, "x": [1.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "  18 C\n"},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": ["integer", "null"]}},
      "required": ["location"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
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
  try {
    const Template t(source, parse_limits);
    const std::string text = t.render(conversation(), options);
    check(text.size() <= options.limits.max_output_bytes);
    check(t.render(conversation(), options) == text);  // rendering is deterministic
  } catch (const TemplateError& e) {
    check(e.what() != nullptr);
  }
  return 0;
}
