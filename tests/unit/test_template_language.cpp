// The template language piece by piece: whitespace control, loops and their variables, scoping,
// namespace(), macros and caller(), operators, Python's printing and truthiness, undefined values,
// attribute-versus-item lookup, string methods, filters, tests and globals. Each case's expected
// text is what Python's jinja2 3.1 renders for it in transformers' environment (trim_blocks,
// lstrip_blocks, the immutable sandbox, tojson as json.dumps with ensure_ascii=False), recorded
// from /usr/bin/python3.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "template_test_support.h"

namespace pagedkv::testing {
namespace {

struct RenderCase {
  const char* name;
  const char* source;
  const char* variables;  // JSON object
  const char* expected;
};

// clang-format off
const RenderCase kRenderCases[] = {
    {"ws_trim_lstrip",
     "a\n  {% if true %}\n    b\n  {% endif %}\nc\n",
     "{}",
     "a\n    b\nc"},
    {"ws_dash",
     "a   {{- ' x ' -}}   b\n{%- if true -%}\n  c  \n{%- endif -%}\n d",
     "{}",
     "a x bcd"},
    {"ws_plus",
     "a\n  {%+ if true %}b{% endif %}\n",
     "{}",
     "a\n  b"},
    {"ws_comment",
     "x\n  {# note #}\ny {#- trim -#}   z",
     "{}",
     "x\nyz"},
    {"ws_crlf",
     "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n",
     "{}",
     "a\nb\n"},
    {"ws_raw",
     "{% raw %}{{ not parsed }}{% endraw %}!",
     "{}",
     "{{ not parsed }}!"},
    {"loop_vars",
     "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}",
     "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;"},
    {"loop_prev_next",
     "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "[|2][1|3][2|]"},
    {"loop_else_filter",
     "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "2232|empty"},
    {"loop_break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "0134"},
    {"loop_scope",
     "{% set y = 0 %}{% for x in [1,2] %}{% set y = y + x %}{{ y }}{% endfor %}|{{ y }}",
     "{}",
     "12|0"},
    {"loop_dict_items",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "b=1;a=2;ba"},
    {"loop_cycle",
     "{% for x in range(4) %}{{ loop.cycle('o', 'e') }}{% endfor %}",
     "{}",
     "oeoe"},
    {"loop_nested",
     "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
     "{}",
     "1x11y212x12y22"},
    {"namespace",
     "{% set ns = namespace(n=0, found=false) %}{% for m in ms %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }}",
     "{\"ms\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"user\"}]}",
     "2 True"},
    {"set_tuple_block",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}x {{ a }} y{% endset %}[{{ blk }}]{% set up | upper %}abc{% endset %}{{ up }}",
     "{}",
     "12[x 1 y]ABC"},
    {"with_scope",
     "{% with x = 5 %}{{ x }}{% endwith %}[{{ x }}]",
     "{}",
     "5[]"},
    {"macro_defaults",
     "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m() }}",
     "{}",
     "1-B-None 1-2-None 1-B-3 -B-None"},
    {"macro_recursion",
     "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
     "{}",
     "54321"},
    {"macro_caller",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}in {{ 1 + 1 }}{% endcall %}",
     "{}",
     "<b>in 2</b>"},
    {"macro_globals",
     "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}",
     "{}",
     "late"},
    {"macro_closure",
     "{% set ns = namespace(f=none) %}{% for i in [1, 2] %}{% macro m() %}{{ i }}-{{ loop.index }}{% endmacro %}{{ m() }} {% set ns.f = m %}{{ ns.f() }};{% endfor %}",
     "{}",
     "1-1 1-1;2-2 2-2;"},
    {"macro_concat",
     "{% macro t(x) %}{{ x|upper }}{% endmacro %}{{ 'list[' + t('a') + ']' }}",
     "{}",
     "list[A]"},
    {"arith",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7.5 // 2 }} {{ 10 - 2 - 3 }}",
     "{}",
     "3 -4 2 -2 1024 3.5 2.0 7 9 64 4 3.0 5"},
    {"floats",
     "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 100.0 / 3 }} {{ 3.0 * 2 }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ -0.0 }}",
     "{}",
     "1.0 0.30000000000000004 1e+16 1.5e-07 33.333333333333336 6.0 2.0 3.14 -0.0"},
    {"strings",
     "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ 'x' + 'y' }} {{ \"q'\" }} {{ 'tab\\there' }} {{ 'u\\u00e9' }} {{ 'a' 'b' }}",
     "{}",
     "a1NoneTrue ababab xy q' tab\there ué ab"},
    {"compare",
     "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} {{ 'a' != 'a' }} {{ [1] == [1] }} {{ {'a':1} == {'a':1} }}",
     "{}",
     "True True True True True False True False True True"},
    {"in_ops",
     "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 'z' not in 'cat' }} {{ x in y }}",
     "{}",
     "True True True True False"},
    {"logic",
     "{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not [] }} {{ none or [] }} {{ 'y' if x else 'n' }} [{{ 'y' if false }}]",
     "{}",
     "b b  True [] n []"},
    {"truthiness",
     "{% for v in [0, 1, '', 'a', [], [0], {}, {'a':1}, none, 0.0, true, false] %}{{ 'T' if v else 'F' }}{% endfor %}{{ 'T' if undefined_name else 'F' }}",
     "{}",
     "FTFTFTFTFFTFF"},
    {"slicing",
     "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2] }} {{ 'héllo'[1:3] }} {{ 'héllo'[-1] }} {{ 'abc'[::-1] }} {{ xs[5:] }} {{ xs[1:100] }}",
     "{\"xs\": [1, 2, 3, 4]}",
     "[2, 3, 4] [1, 2, 3] [4, 3, 2, 1] [1, 3] 3 él o cba [] [2, 3, 4]"},
    {"print_values",
     "{{ [1, 'a', \"b'\", none, true, 1.5] }} {{ {'a': (1, 2), 'b': {'c': none}} }} {{ (1,) }} {{ () }} {{ 'x\\ny' }} {{ ['x\\ny', 'é'] }}",
     "{}",
     "[1, 'a', \"b'\", None, True, 1.5] {'a': (1, 2), 'b': {'c': None}} (1,) () x\ny ['x\\ny', 'é']"},
    {"undefined",
     "[{{ nope }}] {{ nope is defined }} {{ nope|length }} {{ nope ~ 'x' }} {{ nope|default('d') }} {{ nope is none }} {{ nope == nope }} {% for x in nope %}x{% endfor %}{{ 1 in nope }}",
     "{}",
     "[] False 0 x d False True False"},
    {"attr_vs_item",
     "{{ d.items is defined }} {{ d['items'] }} {{ d.a }} {{ d['a'] }} {{ d.missing is defined }} {{ n.foo is defined }} {{ s.foo is defined }}",
     "{\"d\": {\"a\": 1, \"items\": \"X\"}, \"n\": null, \"s\": \"str\"}",
     "True X 1 1 False False False"},
    {"dict_methods",
     "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }}",
     "{\"d\": {\"a\": 1, \"b\": [2]}}",
     "['a', 'b'] [1, [2]] [('a', 1), ('b', [2])] 1 None 9"},
    {"str_methods",
     "{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi'.lstrip('\\n') }}|{{ 'hi  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'aXbX'.replace('X', '-', 1) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'banana'.find('an') }}{{ 'banana'.rfind('an') }}{{ 'banana'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ '12'.isdigit() }}|{{ '{} and {}'.format(1, 'b') }}",
     "{}",
     "x y|hi|hi|hi|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|True|True|a-b-|a-bX|HIhi|Hello World|Hello|133|a-b|True|1 and b"},
    {"filters_basic",
     "{{ ' x '|trim }}|{{ 'xax'|trim('x') }}|{{ [1,2,3]|length }}|{{ 'héllo'|length }}|{{ {'a':1}|count }}|{{ ['a','b']|join(', ') }}|{{ [1,2]|join }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'a-b'|replace('-', '+') }}|{{ 1|string ~ 'x' }}|{{ [3,1]|first }}|{{ [3,1]|last }}|{{ 'abc'|list }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ '1.5'|float }}|{{ -3|abs }}|{{ [1,2,1,3]|unique|list }}|{{ [1,2,3]|reverse|list }}|{{ ['b','A','a']|sort }}|{{ [3,1,2]|sort(reverse=true) }}|{{ 'hello big world'|wordcount }}|{{ '<a&b>'|e }}|{{ 'x'|safe }}|{{ [1,5,2]|max }}{{ [1,5,2]|min }}{{ [1,2,3]|sum }}|{{ 'hi'|center(6) }}|",
     "{}",
     "x|a|3|5|1|a, b|12|ABC|abc|a+b|1x|3|1|['a', 'b', 'c']|43|0|1.5|3|[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b']|[3, 2, 1]|3|&lt;a&amp;b&gt;|x|516|  hi  |"},
    {"filters_attr",
     "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|{{ ms|rejectattr('role', 'equalto', 'user')|list|length }}|{{ ms|map(attribute='role')|unique|list }}|{{ ms|selectattr('x')|list }}|{{ [1,2,3,4]|select('odd')|list }}|{{ [1,2,3,4]|reject('even')|list }}|{{ ['a','b']|map('upper')|list }}|{{ ms|sort(attribute='content')|map(attribute='content')|list }}|{{ {'b': 1, 'a': 2}|dictsort }}",
     "{\"ms\": [{\"role\": \"user\", \"content\": \"u2\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": \"u1\", \"x\": 1}]}",
     "u2,u1|1|['user', 'assistant']|[{'role': 'user', 'content': 'u1', 'x': 1}]|[1, 3]|[1, 3]|['A', 'B']|['a1', 'u1', 'u2']|[('a', 2), ('b', 1)]"},
    {"filters_items",
     "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ nope|items|list }}",
     "{\"d\": {\"z\": 1, \"a\": {\"b\": 2}}}",
     "z:1 a:{'b': 2} []"},
    {"filters_indent",
     "[{{ 'a\\nb\\n\\nc'|indent(2) }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) }}][{{ 'a\\n'|indent }}][{{ 'a\\nb'|indent('> ') }}]",
     "{}",
     "[a\n  b\n\n  c][  a\n  b][a\n  \n  b][a\n][a\n> b]"},
    {"default_filter",
     "{{ nope|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('x') }} {{ 0|default(5, boolean=true) }}",
     "{}",
     "d  d None 5"},
    {"tojson",
     "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é\\n\"'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, 2, none, true, []]|tojson }}|{{ {}|tojson(indent=2) }}",
     "{\"d\": {\"z\": 1, \"a\": [\"x\", {\"k\": null}], \"é\": 1.5}}",
     "{\"z\": 1, \"a\": [\"x\", {\"k\": null}], \"é\": 1.5}|{\n  \"z\": 1,\n  \"a\": [\n    \"x\",\n    {\n      \"k\": null\n    }\n  ],\n  \"é\": 1.5\n}|{\"a\": [\"x\", {\"k\": null}], \"z\": 1, \"é\": 1.5}|{\"z\":1,\"a\":[\"x\",{\"k\":null}],\"é\":1.5}|\"é\\n\\\"\"|\"\\u00e9\"|[1.0, 2, null, true, []]|{}"},
    {"tests",
     "{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ none is none }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'cat' }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ nope is undefined }}{{ nope is not defined }}{{ range is callable }}{{ 'ab' is lower }}",
     "{}",
     "TrueTrueTrueFalseTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"globals",
     "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y %H:%M') }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'} 15 Jan 2026 January 15, 2026 09:30"},
    {"generation",
     "a{% generation %}b{{ 1 }}{% endgeneration %}c",
     "{}",
     "ab1c"},
    {"filter_block",
     "{% filter upper %}hello {{ 'x' }}{% endfilter %}",
     "{}",
     "HELLO X"},
    {"conditional_chain",
     "{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %}",
     "{\"x\": 2}",
     "two"},
    {"percent_format",
     "{{ '%s and %d' % ('a', 3) }}|{{ '%(k)s=%(z)05.1f' % {'k': 'x', 'z': 2.25} }}|{{ '%-4s|%4s|%x' % ('ab', 'cd', 255) }}|{{ 'no spec' % [1] }}|{{ '100%%' % () }}",
     "{}",
     "a and 3|x=002.2|ab  |  cd|ff|no spec|100%"},
    {"unicode_case",
     "{{ 'héllo wörld'|upper }} {{ 'ÉCOLE Ωμέγα'|lower }} {{ 'élan vital'|title }} {{ 'ñu'.capitalize() }} {{ 'é' is lower }} {{ 'Привет'.upper() }}",
     "{}",
     "HÉLLO WÖRLD école ωμέγα Élan Vital Ñu True ПРИВЕТ"},
    {"number_edges",
     "{{ 3|round }} {{ 2.5|round }} {{ 3.5 is odd }} {{ 4.0 is even }} {{ 7.5 is divisibleby 2.5 }} {{ 0 % -3.0 }} {{ nope is callable }} {{ [nope, 1] }}",
     "{}",
     "3 2.0 False True True -0.0 True [Undefined, 1]"},
    {"unicode_methods",
     "{{ '\\u3000 é \\u3000'.strip() }}|{{ 'a\\u2003b'.split() }}|{{ '日本語'|length }}|{{ '日本語'[1] }}|{{ '日本語'|reverse }}",
     "{}",
     "é|['a', 'b']|3|本|語本日"},
};

struct ErrorCase {
  const char* name;
  const char* source;
  const char* variables;
  const char* python_error;  // the exception jinja2 raises
  const char* message;       // raise_exception's message (TemplateError only)
};

const ErrorCase kErrorCases[] = {
    {"err_raise", "{{ raise_exception('bad ' ~ 'input') }}", "{}", "TemplateError", "bad input"},
    {"err_undefined_attr", "{{ nope.attr }}", "{}", "UndefinedError", ""},
    {"err_add_undefined", "{{ 'x' + nope }}", "{}", "UndefinedError", ""},
    {"err_type_add", "{{ 'x' + 1 }}", "{}", "TypeError", ""},
    {"err_iter_none", "{% for x in n %}{% endfor %}", "{\"n\": null}", "TypeError", ""},
    {"err_compare", "{{ 1 < 'a' }}", "{}", "TypeError", ""},
    {"err_call_undefined", "{{ nope() }}", "{}", "UndefinedError", ""},
    {"err_mutate", "{{ xs.append(1) }}", "{\"xs\": [1]}", "SecurityError", ""},
    {"err_div_zero", "{{ 1 / 0 }}", "{}", "ZeroDivisionError", ""},
    {"err_ns_assign", "{% set d = {} %}{% set d.x = 1 %}", "{}", "TemplateRuntimeError", ""},
    {"err_tojson_undefined", "{{ nope|tojson }}", "{}", "TypeError", ""},
    {"err_unknown_filter", "{{ 1|nosuchfilter }}", "{}", "TemplateAssertionError", ""},
    {"err_syntax", "{% if x %}", "{}", "TemplateSyntaxError", ""},
    {"err_tuple_list_order", "{{ (1, 2) < [1, 3] }}", "{}", "TypeError", ""},
    {"err_unhashable_in", "{{ [1] in {'a': 1} }}", "{}", "TypeError", ""},
    {"err_format_args", "{{ '%s %s' % ('a',) }}", "{}", "TypeError", ""},
    {"err_int_undefined", "{{ nope|int }}", "{}", "UndefinedError", ""},
    {"err_indent_number", "{{ 5|indent }}", "{}", "TypeError", ""},
    {"err_syntax2", "{{ 1 + }}", "{}", "TemplateSyntaxError", ""},
    {"err_unknown_tag", "{% frobnicate %}", "{}", "TemplateSyntaxError", ""},
};
// clang-format on

std::string render(const std::string& source, const std::string& variables_json) {
  return jinja::Template(source).render(ordered_json::parse(variables_json), oracle_options());
}

TEST(TemplateLanguage, RendersAsJinja2) {
  for (const RenderCase& c : kRenderCases) {
    SCOPED_TRACE(c.name);
    try {
      EXPECT_EQ(render(c.source, c.variables), c.expected) << "template: " << c.source;
    } catch (const jinja::TemplateError& e) {
      ADD_FAILURE() << c.name << ": " << e.what();
    }
  }
}

TEST(TemplateLanguage, FailsWhereJinja2Fails) {
  for (const ErrorCase& c : kErrorCases) {
    SCOPED_TRACE(c.name);
    const std::string python_error = c.python_error;
    try {
      render(c.source, c.variables);
      ADD_FAILURE() << "rendered; jinja2 raises " << python_error;
    } catch (const jinja::TemplateRaisedError& e) {
      EXPECT_EQ(python_error, "TemplateError");
      EXPECT_STREQ(e.what(), c.message);
    } catch (const jinja::TemplateSyntaxError& e) {
      EXPECT_EQ(python_error, "TemplateSyntaxError") << e.what();
    } catch (const jinja::TemplateRenderError& e) {
      EXPECT_NE(python_error, "TemplateError") << e.what();
      EXPECT_NE(python_error, "TemplateSyntaxError") << e.what();
      EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
    }
  }
}

TEST(TemplateLanguage, ErrorsNameTheLine) {
  try {
    render("line one\n{% if true %}\n{{ nope.attr }}\n{% endif %}", "{}");
    FAIL() << "rendered";
  } catch (const jinja::TemplateRenderError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(std::string(e.what()).find("'nope' is undefined"), std::string::npos) << e.what();
  }
  try {
    jinja::Template("a\nb\n{% for x in %}{% endfor %}");
    FAIL() << "parsed";
  } catch (const jinja::TemplateSyntaxError& e) {
    EXPECT_EQ(e.line(), 3);
  }
}

TEST(TemplateLanguage, RaiseExceptionKeepsTheMessageExactly) {
  try {
    render("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", "{}");
    FAIL() << "rendered";
  } catch (const jinja::TemplateRaisedError& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_EQ(e.line(), 1);
  }
}

TEST(TemplateLanguage, NoPartialTextOnError) {
  // The render fails as a whole: nothing of "before" escapes through an exception.
  const jinja::Template t("before {{ raise_exception('stop') }} after");
  EXPECT_THROW(t.render(ordered_json::object()), jinja::TemplateRaisedError);
}

TEST(TemplateLanguage, KeyOrderOfTheDataIsKept) {
  const std::string vars = R"({"tool": {"zeta": 1, "alpha": {"y": 2, "b": 3}}})";
  EXPECT_EQ(render("{{ tool|tojson }}|{% for k in tool %}{{ k }}{% endfor %}", vars),
            R"({"zeta": 1, "alpha": {"y": 2, "b": 3}}|zetaalpha)");
}

// A macro defined in a loop iteration keeps a copy of that iteration's names, so calling it after
// the loop (jinja2 prints its internal "missing" marker there) is safe and sees the last values.
TEST(TemplateLanguage, MacroOutlivingItsLoopIsSafe) {
  EXPECT_EQ(
      render(
          "{% set ns = namespace(f=none) %}{% for i in [1, 2] %}{% macro m() %}{{ i }}-{{ loop.index }}{% endmacro %}"
          "{% set ns.f = m %}{% endfor %}{{ ns.f() }}|{% macro w() %}<{{ caller() }}>{% endmacro %}"
          "{% for i in [3] %}{% call w() %}{{ i }}{% endcall %}{% endfor %}",
          "{}"),
      "2-2|<3>");
}

// A namespace that comes to hold itself, directly or through a macro whose closure holds it, is a
// cycle of shared pointers; the render frees it all the same (LeakSanitizer, in the ASan run,
// reports what outlives it), and the cycles render as jinja2 renders them.
TEST(TemplateLanguage, NamespaceCyclesAreFreed) {
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns.n.n.n is defined }}", "{}"), "True");
  EXPECT_EQ(render("{% set ns = namespace(m=none) %}{% for i in [1] %}{% set own = ns %}"
                   "{% macro m() %}{{ own.m is defined }}{% endmacro %}{% set ns.m = m %}{{ ns.m() }}{% endfor %}",
                   "{}"),
            "True");
  const jinja::Template t("{% set a = namespace(b=none) %}{% set b = namespace(a=a) %}{% set a.b = b %}x");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.render(ordered_json::parse("{}")), "x");
}

// Printing a container met again inside itself: Python marks the repeat ("{...}") instead of
// recursing, whether the cycle is printed directly, inside a list, or concatenated with ~.
TEST(TemplateLanguage, NamespaceCyclesPrintAsPythonDoes) {
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns }}|{{ [ns, 1] }}|{{ 'a' ~ ns.n }}", "{}"),
            "<Namespace {'n': <Namespace {...}>}>|[<Namespace {'n': <Namespace {...}>}>, 1]|"
            "a<Namespace {'n': <Namespace {...}>}>");
  EXPECT_EQ(render("{% set a = namespace(b=none) %}{% set b = namespace(a=a) %}{% set a.b = [b] %}{{ a }}", "{}"),
            "<Namespace {'b': [<Namespace {'a': <Namespace {...}>}>]}>");
  // The same namespace twice side by side is not a cycle.
  EXPECT_EQ(render("{% set x = namespace(v=1) %}{{ [x, x] }}", "{}"), "[<Namespace {'v': 1}>, <Namespace {'v': 1}>]");
  // Deep but acyclic nesting stops with Python's error, not the stack.
  const std::string chain =
      "{% set root = namespace(n=0) %}{% set last = namespace(at=root) %}{% for i in range(COUNT) %}"
      "{% set next = namespace(n=0) %}{% set at = last.at %}{% set at.n = next %}{% set last.at = next %}"
      "{% endfor %}";
  const auto chain_of = [&](int count) {
    return std::regex_replace(chain, std::regex("COUNT"), std::to_string(count));
  };
  EXPECT_EQ(render(chain_of(2) + "{{ root }}", "{}"), "<Namespace {'n': <Namespace {'n': <Namespace {'n': 0}>}>}>");
  EXPECT_THROW(render(chain_of(300) + "{{ root }}", "{}"), jinja::TemplateError);
}

// unique's keys are those of a Python set: 1, 1.0 and True are one key, a string is not a number,
// tuples are hashable, lists and dicts are not (jinja2's TypeError).
TEST(TemplateLanguage, UniqueKeysAreThoseOfAPythonSet) {
  EXPECT_EQ(render("{{ [1, 1.0, True, '1', none, none, 2.5, 2.5, (1, 2), (1, 2), 0, False, -0.0]|unique|list }}", "{}"),
            "[1, '1', None, 2.5, (1, 2), 0]");
  EXPECT_EQ(render("{{ ['A', 'a', 'B']|unique|list }}|{{ ['A', 'a']|unique(case_sensitive=true)|list }}", "{}"),
            "['A', 'B']|['A', 'a']");
  EXPECT_THROW(render("{{ [[1], [1]]|unique|list }}", "{}"), jinja::TemplateError);
  EXPECT_THROW(render("{{ [{'a': 1}]|unique|list }}", "{}"), jinja::TemplateError);
  // Tuples by their items' keys, nested ones too (outputs of Python's jinja2).
  EXPECT_EQ(render("{{ [(1, 2), (1.0, 2), (True, 2.0), (1, 3), ('a', (1,)), ('a', (1.0,)), ()]|unique|list }}", "{}"),
            "[(1, 2), (1, 3), ('a', (1,)), ()]");
  EXPECT_EQ(render("{{ [('ab', 'c'), ('a', 'bc'), ('ab', 'c')]|unique|list }}", "{}"), "[('ab', 'c'), ('a', 'bc')]");
  EXPECT_EQ(render(R"({{ {"b": 1, "a": 1}|dictsort|unique|list }})", "{}"), "[('a', 1), ('b', 1)]");
  EXPECT_THROW(render("{{ [(1, [2])]|unique|list }}", "{}"), jinja::TemplateError);
}

TEST(TemplateLanguage, TemplateIsReusableAndThreadSafe) {
  const jinja::Template t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render(ordered_json::parse(R"({"messages": [1, 2, 3]})")), "3");
  EXPECT_EQ(t.render(ordered_json::parse(R"({"messages": [1]})")), "1");  // namespace state is per render
}

}  // namespace
}  // namespace pagedkv::testing
