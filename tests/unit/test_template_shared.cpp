// Every expectation of ../shared/chat_templates: 14 real chat templates x 25 conversations,
// rendered byte for byte as Python's jinja2 renders them, or failing as it fails
// (raise_exception's message exactly; other errors as any TemplateError).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "template_test_support.h"

namespace pagedkv::testing {
namespace {

TEST(TemplateShared, AllExpectationsMatchJinja2) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  ChatTemplateOracle oracle(dir);
  ASSERT_EQ(oracle.templates.size(), 14u);
  ASSERT_EQ(oracle.expected.size(), 350u);
  std::map<std::string, jinja::Template> parsed;
  for (const auto& [name, source] : oracle.templates) parsed.emplace(name, jinja::Template(source));
  int matched = 0, ok_cases = 0, raised_cases = 0, other_errors = 0;
  for (const auto& row : oracle.expected) {
    const std::string name = row["template"];
    const std::string conversation = row["conversation"];
    SCOPED_TRACE(name + " / " + conversation);
    const auto vars = render_variables(oracle.conversations.at(conversation), oracle.tokens_of(name));
    const jinja::Template& t = parsed.at(name);
    if (row["ok"].get<bool>()) {
      ++ok_cases;
      try {
        const std::string text = t.render(vars, oracle_options());
        EXPECT_EQ(text, row["text"].get<std::string>());
        matched += text == row["text"].get<std::string>();
      } catch (const jinja::TemplateError& e) {
        ADD_FAILURE() << "render failed: " << e.what();
      }
    } else if (row["error_type"] == "TemplateError") {
      ++raised_cases;
      try {
        t.render(vars, oracle_options());
        ADD_FAILURE() << "rendered, expected raise_exception: " << row["error"];
      } catch (const jinja::TemplateRaisedError& e) {
        EXPECT_EQ(std::string(e.what()), row["error"].get<std::string>());
        matched += std::string(e.what()) == row["error"].get<std::string>();
      } catch (const jinja::TemplateError& e) {
        ADD_FAILURE() << "expected raise_exception, got: " << e.what();
      }
    } else {
      ++other_errors;
      try {
        t.render(vars, oracle_options());
        ADD_FAILURE() << "rendered, expected " << row["error_type"];
      } catch (const jinja::TemplateRaisedError& e) {
        ADD_FAILURE() << "expected " << row["error_type"] << ", got raise_exception: " << e.what();
      } catch (const jinja::TemplateError&) {
        ++matched;
      }
    }
  }
  std::printf(
      "chat-template oracle: %d of %zu expectations matched (%d texts, %d raise_exception messages, %d other errors)\n",
      matched, oracle.expected.size(), ok_cases, raised_cases, other_errors);
  EXPECT_EQ(matched, 350);
}

// Parse once, render many times: a typical conversation renders well under a millisecond.
TEST(TemplateShared, RenderingIsFast) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  ChatTemplateOracle oracle(dir);
  for (const std::string name : {"meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen3-0.6B", "openai-gpt-oss-120b"}) {
    const jinja::Template t(oracle.templates.at(name));
    const auto vars = render_variables(oracle.conversations.at("c07_tool_roundtrip"), oracle.tokens_of(name));
    const int runs = 200;
    const auto start = std::chrono::steady_clock::now();
    size_t bytes = 0;
    for (int i = 0; i < runs; ++i) bytes += t.render(vars, oracle_options()).size();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / runs;
    std::printf("%s, c07_tool_roundtrip: %.1f us per render (%zu bytes)\n", name.c_str(), us, bytes / runs);
    EXPECT_LT(us, 5000.0) << name;  // generous for sanitizer and loaded CI machines
  }
}

// One parsed Template rendered from several threads at once gives every thread the oracle's text.
TEST(TemplateShared, ConcurrentRendersOfOneTemplate) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  ChatTemplateOracle oracle(dir);
  const std::string name = "openai-gpt-oss-120b";
  const jinja::Template t(oracle.templates.at(name));
  std::vector<std::pair<ordered_json, std::string>> cases;
  for (const auto& row : oracle.expected)
    if (row["template"] == name && row["ok"].get<bool>())
      cases.emplace_back(
          render_variables(oracle.conversations.at(row["conversation"].get<std::string>()), oracle.tokens_of(name)),
          row["text"].get<std::string>());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round)
        for (size_t i = static_cast<size_t>(k); i < cases.size() + static_cast<size_t>(k); ++i) {
          const auto& [vars, text] = cases[i % cases.size()];
          if (t.render(vars, oracle_options()) != text) ++mismatches;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace pagedkv::testing
