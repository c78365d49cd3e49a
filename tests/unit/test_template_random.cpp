// Randomized comparison with the reference: seeded random conversations (random roles, contents
// with Unicode, whitespace, Jinja-looking text and special-token text, tools, tool calls with
// nested arguments) rendered through the 14 templates of ../shared/chat_templates by this interpreter and
// by Python's jinja2 (Debian's python3-jinja2 under /usr/bin/python3, configured as transformers
// configures it), compared byte for byte. Skipped when python3-jinja2 is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "template_test_support.h"

namespace pagedkv::testing {
namespace {

// transformers' chat-template environment, rendering every case of an input file.
constexpr const char* kReferenceScript = R"PY(
import datetime, json, sys
import jinja2, jinja2.sandbox
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols

class GenerationTag(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                   extensions=[GenerationTag, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 15, 9, 30, 0).strftime(fmt)

job = json.load(open(sys.argv[1], encoding="utf-8"))
templates = {name: env.from_string(open(path, encoding="utf-8").read()) for name, path in job["templates"].items()}
results = []
for case in job["cases"]:
    try:
        results.append({"ok": True, "text": templates[case["template"]].render(**case["vars"])})
    except Exception as e:
        results.append({"ok": False, "error_type": type(e).__name__, "error": str(e)})
json.dump(results, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
)PY";

bool reference_available() { return std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0; }

class ConversationGenerator {
 public:
  explicit ConversationGenerator(uint32_t seed) : rng_(seed) {}

  ordered_json conversation() {
    ordered_json messages = ordered_json::array();
    const bool tools = chance(0.4);
    if (chance(0.5)) messages.push_back({{"role", "system"}, {"content", text()}});
    const int turns = pick(1, 5);
    for (int t = 0; t < turns; ++t) {
      messages.push_back({{"role", chance(0.1) ? "assistant" : "user"}, {"content", text()}});
      if (t + 1 == turns && chance(0.6)) break;
      if (tools && chance(0.5)) {
        const int calls = chance(0.8) ? 1 : 2;
        ordered_json tool_calls = ordered_json::array();
        for (int c = 0; c < calls; ++c)
          tool_calls.push_back({{"id", call_id()},
                                {"type", "function"},
                                {"function",
                                 {{"name", chance(0.5) ? "get_weather" : "search"},
                                  {"arguments", chance(0.15) ? ordered_json(arguments(0).dump()) : arguments(0)}}}});
        ordered_json call = {{"role", "assistant"}, {"content", chance(0.7) ? std::string() : text()}};
        call["tool_calls"] = tool_calls;
        messages.push_back(call);
        for (const auto& tc : tool_calls)
          messages.push_back(
              {{"role", "tool"}, {"tool_call_id", tc["id"]}, {"name", tc["function"]["name"]}, {"content", text()}});
      }
      ordered_json reply = {{"role", "assistant"}, {"content", text()}};
      if (chance(0.15)) reply["reasoning_content"] = text();
      messages.push_back(reply);
    }
    if (chance(0.05))
      messages.push_back({{"role", "user"}, {"content", ordered_json::array({{{"type", "text"}, {"text", text()}}})}});
    ordered_json conv = {{"messages", messages}, {"add_generation_prompt", chance(0.7)}};
    if (tools) conv["tools"] = tool_list();
    if (chance(0.2)) conv["template_kwargs"] = {{"enable_thinking", chance(0.5)}};
    return conv;
  }

 private:
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(0, static_cast<int>(v.size()) - 1))];
  }

  std::string text() {
    static const std::vector<std::string> pieces = {"hello",
                                                    "What is 2+2?",
                                                    "the weather",
                                                    "Paris",
                                                    " ",
                                                    "  ",
                                                    "\n",
                                                    "\n\n",
                                                    "\t",
                                                    " trailing ",
                                                    "é",
                                                    "naïve café",
                                                    "日本語のテキスト",
                                                    "Привет",
                                                    "مرحبا",
                                                    "👍🏽",
                                                    "“quoted”",
                                                    "'single'",
                                                    "\"double\"",
                                                    "back\\slash",
                                                    "{{ messages }}",
                                                    "{% if true %}x{% endif %}",
                                                    "{# c #}",
                                                    "<|im_end|>",
                                                    "<|eot_id|>",
                                                    "[INST]",
                                                    "<think>\nreasoning\n</think>\n\n",
                                                    "/no_think",
                                                    "\u2028",
                                                    "a\r\nb",
                                                    "tab\there",
                                                    "0",
                                                    "None"};
    std::string s;
    const int n = pick(0, 6);
    for (int i = 0; i < n; ++i) s += one_of(pieces);
    return s;
  }

  std::string call_id() {
    static const std::string alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    for (int i = 0; i < 9; ++i) id += alnum[static_cast<size_t>(pick(0, 61))];
    return id;
  }

  ordered_json scalar() {
    switch (pick(0, 5)) {
      case 0:
        return pick(-100, 100000);
      case 1:
        return pick(-1000, 1000) / 8.0;
      case 2:
        return chance(0.5);
      case 3:
        return nullptr;
      default:
        return text();
    }
  }

  ordered_json arguments(int depth) {
    ordered_json args = ordered_json::object();
    static const std::vector<std::string> keys = {"location", "unit", "query", "limit", "filters", "é_key", "z", "a"};
    const int n = pick(0, 3);
    for (int i = 0; i < n; ++i) {
      const std::string& k = one_of(keys);
      if (depth < 2 && chance(0.2)) args[k] = arguments(depth + 1);
      else if (depth < 2 && chance(0.2)) args[k] = ordered_json::array({scalar(), scalar()});
      else args[k] = scalar();
    }
    return args;
  }

  ordered_json tool_list() {
    ordered_json tools = ordered_json::array();
    const int n = pick(1, 2);
    for (int i = 0; i < n; ++i) {
      ordered_json props = ordered_json::object();
      props["location"] = {{"type", "string"}, {"description", text()}};
      if (chance(0.5))
        props["unit"] = {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}, {"description", "unit"}};
      if (chance(0.5)) props["days"] = {{"type", "integer"}, {"description", "days ahead"}};
      tools.push_back({{"type", "function"},
                       {"function",
                        {{"name", i == 0 ? "get_weather" : "search"},
                         {"description", text() + "."},
                         {"parameters", {{"type", "object"}, {"properties", props}, {"required", {"location"}}}}}}});
    }
    return tools;
  }

  std::mt19937 rng_;
};

TEST(TemplateRandom, MatchesPythonJinja2) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  if (!reference_available()) GTEST_SKIP() << "/usr/bin/python3 with jinja2 (Debian's python3-jinja2) is missing";
  ChatTemplateOracle oracle(dir);
  const std::vector<std::string> names = {"meta-llama-Llama-3.1-8B-Instruct",
                                          "meta-llama-Llama-3.2-3B-Instruct",
                                          "Qwen-Qwen3-0.6B",
                                          "Qwen-Qwen2.5-7B-Instruct",
                                          "Mistral-Small-3.2-24B-Instruct-2506",
                                          "mistralai-Mistral-Nemo-Instruct-2407",
                                          "google-gemma-2-2b-it",
                                          "HuggingFaceTB-SmolLM3-3B",
                                          "openai-gpt-oss-120b",
                                          "ibm-granite-granite-3.3-2B-Instruct",
                                          "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                                          "microsoft-Phi-3.5-mini-instruct",
                                          "Qwen-QwQ-32B",
                                          "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"};
  // PAGEDKV_TEMPLATE_RANDOM_CASES / _SEED scale a run up or vary it (a soak); the defaults keep it ~1 s.
  const char* cases_env = std::getenv("PAGEDKV_TEMPLATE_RANDOM_CASES");
  const char* seed_env = std::getenv("PAGEDKV_TEMPLATE_RANDOM_SEED");
  const int per_template = cases_env ? std::max(1, std::atoi(cases_env)) : 25;
  const uint32_t seed = seed_env ? static_cast<uint32_t>(std::strtoul(seed_env, nullptr, 10)) : 20260115u;

  ordered_json job = {{"templates", ordered_json::object()}, {"cases", ordered_json::array()}};
  for (const auto& name : names) job["templates"][name] = (dir / "templates" / (name + ".jinja")).string();
  ConversationGenerator gen(seed);
  for (const auto& name : names) {
    for (int i = 0; i < per_template; ++i)
      job["cases"].push_back(
          {{"template", name}, {"vars", render_variables(gen.conversation(), oracle.tokens_of(name))}});
  }

  char work[] = "/tmp/pagedkv-template-random-XXXXXX";
  ASSERT_NE(mkdtemp(work), nullptr);
  const fs::path base(work);
  {
    std::ofstream(base / "reference.py") << kReferenceScript;
    std::ofstream(base / "job.json") << job.dump();
  }
  const std::string command = "/usr/bin/python3 " + (base / "reference.py").string() + " " +
                              (base / "job.json").string() + " " + (base / "results.json").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const ordered_json results = ordered_json::parse(read_text(base / "results.json"));
  fs::remove_all(base);
  ASSERT_EQ(results.size(), job["cases"].size());

  std::map<std::string, jinja::Template> parsed;
  for (const auto& name : names) parsed.emplace(name, jinja::Template(oracle.templates.at(name)));
  int texts = 0, errors = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& c = job["cases"][i];
    const auto& expected = results[i];
    const std::string name = c["template"];
    SCOPED_TRACE(name + " case " + std::to_string(i) + ": " + c["vars"].dump().substr(0, 2000));
    try {
      const std::string text = parsed.at(name).render(c["vars"], oracle_options());
      EXPECT_TRUE(expected["ok"].get<bool>())
          << "rendered; jinja2 raised " << expected.value("error_type", "") << ": " << expected.value("error", "");
      if (expected["ok"].get<bool>()) {
        EXPECT_EQ(text, expected["text"].get<std::string>());
      }
      ++texts;
    } catch (const jinja::TemplateRaisedError& e) {
      EXPECT_EQ(expected.value("error_type", ""), "TemplateError") << e.what();
      EXPECT_EQ(std::string(e.what()), expected.value("error", ""));
      ++errors;
    } catch (const jinja::TemplateError& e) {
      EXPECT_FALSE(expected["ok"].get<bool>()) << e.what();
      EXPECT_NE(expected.value("error_type", ""), "TemplateError") << e.what();
      ++errors;
    }
  }
  std::printf("random comparison: %zu renders (%d texts, %d errors) matched Python's jinja2\n", results.size(), texts,
              errors);
}

}  // namespace
}  // namespace pagedkv::testing
