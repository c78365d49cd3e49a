// The sandbox's bounds: templates that would loop for ever, recurse without end, build gigabytes
// or nest without limit stop with a TemplateLimitError that names the limit, within a second of
// CPU time, and the limits are far above what real templates use.
#include <gtest/gtest.h>

#include <string>

#include "template_test_support.h"
#include "thread_cpu_time.h"

namespace pagedkv::testing {
namespace {

// Parses and renders `source`; expects a TemplateLimitError mentioning `limit`, within a second
// of this thread's CPU time.
void expect_limit(const std::string& source, const std::string& limit,
                  const ordered_json& vars = ordered_json::object(), const jinja::RenderOptions& options = {}) {
  const double start = thread_cpu_seconds();
  try {
    jinja::Template(source).render(vars, options);
    ADD_FAILURE() << "rendered; expected the " << limit << " limit";
  } catch (const jinja::TemplateLimitError& e) {
    EXPECT_NE(std::string(e.what()).find(limit), std::string::npos) << e.what();
  } catch (const jinja::TemplateError& e) {
    ADD_FAILURE() << "expected the " << limit << " limit, got: " << e.what();
  }
  EXPECT_LT(thread_cpu_seconds() - start, 1.0) << limit;
}

TEST(TemplateLimits, EndlessLoopsStop) {
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "max_loop_iterations");
  expect_limit("{% for i in range(1000000000000) %}{% endfor %}", "max_loop_iterations");
  // Few iterations but heavy bodies: the step budget.
  expect_limit("{% for i in range(900000) %}{% set x = (i + i * 2 - i // 3) > 0 and i or 0 %}{% endfor %}",
               "max_steps");
}

TEST(TemplateLimits, EndlessRecursionStops) {
  expect_limit("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "max_call_depth");
  expect_limit("{% macro f(n) %}{{ n }}{{ f(n + 1) }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "max_call_depth");
}

TEST(TemplateLimits, HugeOutputStops) {
  expect_limit("{{ 'x' * 1000000000000 }}", "max_output_bytes");
  expect_limit("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", "max_output_bytes");
  expect_limit("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "max_output_bytes");
  expect_limit("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "max_output_bytes");
  expect_limit("{{ [1, 2, 3] * 1000000000000 }}", "max_output_bytes");
  expect_limit(
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s.replace('a', 'aa') ~ ns.s %}{% "
      "endfor %}",
      "max_output_bytes");
}

// Lists and dicts may share items: 40 doublings make a value of 40 list nodes that stands for 2^40
// elements. Printing it (every way a value becomes text) stops at the output limit (64 KiB here, to
// keep the sanitizer builds' run short), comparing it with a copy at the comparison bound;
// comparing it with itself item by item is immediate, as in Python (an item equals itself by
// identity).
TEST(TemplateLimits, SharedItemsDoNotMultiplyTheWork) {
  const std::string doubled =
      "{% set ns = namespace(a=[1], b={'k': 1}, c=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}"
      "{% set ns.b = {'x': ns.b, 'y': ns.b} %}{% set ns.c = [ns.c, ns.c] %}{% endfor %}";
  jinja::RenderOptions small;
  small.limits.max_output_bytes = size_t{64} << 10;
  for (const char* use : {"{{ ns.a }}", "{{ ns.b }}", "{{ 'x' ~ ns.a }}", "{{ [ns.a]|join(',') }}",
                          "{{ ns.a|string|length }}", "{{ '%s' % (ns.a,) }}", "{{ '{}'.format(ns.b) }}", "{{ ns }}"})
    expect_limit(doubled + use, "max_output_bytes", ordered_json::object(), small);
  expect_limit(doubled + "{{ ns.a == ns.c }}", "comparison");
  EXPECT_EQ(
      jinja::Template(doubled + "{{ ns.a == [ns.a[0], ns.a[1]] }}|{{ ns.a|length }}").render(ordered_json::object()),
      "True|2");
}

// unique keeps a set of the keys seen, as jinja2 does: a long list takes one lookup per item (a
// scan of the keys seen per item took 15 s for 100,000 distinct numbers).
TEST(TemplateLimits, UniqueOfSharedOrDeepTuplesStops) {
  // A tuple holding one tuple twice, 40 deep, stands for 2^40 items: its set key is bounded as
  // printing it is; 100,000 tuples nested in one another end in a RecursionError, not a crash.
  jinja::RenderOptions options;
  options.limits.max_output_bytes = 64 << 10;
  expect_limit(
      "{% set ns = namespace(a=(1,)) %}{% for i in range(40) %}{% set ns.a = (ns.a, ns.a) %}{% endfor %}"
      "{{ [ns.a, ns.a]|unique|list|length }}",
      "max_output_bytes", ordered_json::object(), options);
  const double start = thread_cpu_seconds();
  EXPECT_THROW(jinja::Template("{% set ns = namespace(a=1) %}{% for i in range(100000) %}{% set ns.a = (ns.a,) %}"
                               "{% endfor %}{{ [ns.a]|unique|list|length }}")
                   .render(ordered_json::object()),
               jinja::TemplateRenderError);
  EXPECT_LT(thread_cpu_seconds() - start, 1.0);
}

TEST(TemplateLimits, DeeplyNestedValuesAreReleasedAndRefused) {
  for (const std::string wrap : {"(ns.a,)", "[ns.a]", "{'k': ns.a}"}) {
    // A loop can nest a value in itself as deep as max_loop_iterations allows: dropping the chain
    // takes no stack frame per level (it crashed, recursing from container to container).
    const std::string deep =
        "{% set ns = namespace(a=1) %}{% for i in range(900000) %}{% set ns.a = " + wrap + " %}{% endfor %}";
    EXPECT_EQ(jinja::Template(deep + "done").render(ordered_json::object()), "done") << wrap;
    // Comparing two distinct chains nested past the printer's depth is a RecursionError, as hashing
    // one is; the depth the chat templates' values have compares as before.
    const std::string two = "{% set ns = namespace(a=1, b=1) %}{% for i in range(300) %}{% set ns.a = " + wrap +
                            " %}{% set ns.b = " + wrap.substr(0, wrap.find("ns.a")) + "ns.b" +
                            wrap.substr(wrap.find("ns.a") + 4) + " %}{% endfor %}";
    for (const char* use : {"{{ ns.a == ns.b }}", "{{ ns.a in [ns.b] }}", "{{ [ns.a, ns.b]|sort|length }}"}) {
      try {
        jinja::Template(two + use).render(ordered_json::object());
        ADD_FAILURE() << wrap << " " << use << ": rendered";
      } catch (const jinja::TemplateRenderError& e) {  // dicts do not sort at all, as in Python
        const bool unorderable = wrap[0] == '{' && std::string(use).find("sort") != std::string::npos;
        EXPECT_NE(std::string(e.what()).find(unorderable ? "TypeError" : "RecursionError"), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_EQ(jinja::Template("{% set ns = namespace(a=1, b=1) %}{% for i in range(150) %}{% set ns.a = [ns.a] %}"
                            "{% set ns.b = [ns.b] %}{% endfor %}{{ ns.a == ns.b }}")
                .render(ordered_json::object()),
            "True");
}

TEST(TemplateLimits, UniqueOfALongListIsLinear) {
  // Tuples too: a request's object of 50,000 members, its items twice. (Built as the vector it is:
  // ordered_json's operator[] searches the members before each new one.)
  ordered_json big = ordered_json::object();
  auto& members = static_cast<ordered_json::object_t::Container&>(big.get_ref<ordered_json::object_t&>());
  for (int i = 0; i < 50000; ++i) members.emplace_back("k" + std::to_string(i), i % 7);
  const double start = thread_cpu_seconds();
  EXPECT_EQ(jinja::Template("{{ (range(100000)|list + range(100000)|list)|unique|list|length }}")
                .render(ordered_json::object()),
            "100000");
  EXPECT_EQ(jinja::Template("{{ (big|dictsort + big|dictsort)|unique|list|length }}").render({{"big", big}}), "50000");
  EXPECT_LT(thread_cpu_seconds() - start, 1.0);
}

TEST(TemplateLimits, DeepNestingInTheSourceStops) {
  expect_limit("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "max_nesting_depth");
  expect_limit("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "max_nesting_depth");
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  expect_limit(nots + "x }}", "max_nesting_depth");
  expect_limit("{{ " + std::string(100000, '-') + "1 }}", "max_nesting_depth");
  std::string ifs;
  for (int i = 0; i < 20000; ++i) ifs += "{% if true %}";
  expect_limit(ifs, "max_nesting_depth");
}

TEST(TemplateLimits, OversizedSourceAndDataStop) {
  expect_limit(std::string(2 << 20, 'x'), "max_source_bytes");
  ordered_json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ordered_json::array({deep});
  expect_limit("{{ data }}", "max_data_depth", ordered_json{{"data", deep}});
}

TEST(TemplateLimits, LimitsAreConfigurable) {
  jinja::RenderOptions tight;
  tight.limits.max_loop_iterations = 10;
  expect_limit("{% for i in range(11) %}{% endfor %}", "max_loop_iterations", ordered_json::object(), tight);
  EXPECT_EQ(jinja::Template("{% for i in range(10) %}{{ i }}{% endfor %}").render(ordered_json::object(), tight),
            "0123456789");
  tight.limits.max_output_bytes = 5;
  expect_limit("{{ 'abcdef' }}", "max_output_bytes", ordered_json::object(), tight);
  jinja::ParseLimits parse;
  parse.max_nesting_depth = 8;
  EXPECT_THROW(jinja::Template("{{ ((((((((1)))))))) }}", parse), jinja::TemplateLimitError);
}

// Hermes 3's json_to_python_type recurses for ever on a union type (the string "null" is iterable,
// one character at a time): Python's jinja2 raises RecursionError; the call-depth limit stops it.
TEST(TemplateLimits, RealRunawayTemplateStops) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  ChatTemplateOracle oracle(dir);
  const std::string name = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use";
  expect_limit(oracle.templates.at(name), "max_call_depth",
               render_variables(oracle.conversations.at("c23_nested_tool_schema"), oracle.tokens_of(name)),
               oracle_options());
}

}  // namespace
}  // namespace pagedkv::testing
