// libFuzzer target: the tool-call parsers reading model output (hermes, llama3_json, mistral,
// granite, deepseek_v3), and the tools of a request turned into the grammars that force a call. Properties:
// never a crash; the output read whole and read in pieces gives the same content and calls;
// every call's arguments are a JSON object; a forced-call grammar either is GBNF the grammar
// layer reads back or the request is refused with an ApiError (a 400).
// Input: byte 0 picks the parser (low 7 bits, modulo their number) and the mode (bit 7: tools JSON, else model
// output); byte 1 seeds the piece sizes; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/tool_call_parser.h"
#include "pagedkv/api/tool_call_reader.h"
#include "pagedkv/api/tool_definitions.h"
#include "pagedkv/grammar/compiled_grammar.h"

namespace {

using namespace pagedkv::api;
using pagedkv::fuzz::check;

struct Read {
  std::string content;
  std::vector<ToolCall> calls;
};

void add(Read& r, ToolCallReader::Output o) {
  r.content += o.content;
  for (ToolCall& c : o.calls) r.calls.push_back(std::move(c));
}

void read_output(const ToolCallParser& parser, std::string_view text, uint8_t seed) {
  Read whole, pieces;
  {
    ToolCallReader reader(parser, 1);
    add(whole, reader.append(text));
    add(whole, reader.finish());
  }
  {
    ToolCallReader reader(parser, 1);
    std::minstd_rand random(seed);
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(text.size() - at, 1 + random() % 9);
      add(pieces, reader.append(text.substr(at, n)));
      at += n;
    }
    add(pieces, reader.finish());
  }
  check(whole.content == pieces.content);
  check(whole.calls.size() == pieces.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    check(whole.calls[i].name == pieces.calls[i].name && whole.calls[i].arguments == pieces.calls[i].arguments);
    check(!whole.calls[i].name.empty() && !whole.calls[i].id.empty());
    const nlohmann::json args = nlohmann::json::parse(whole.calls[i].arguments, nullptr, false);
    check(!args.is_discarded() && args.is_object());
  }
}

void forced_grammar(const ToolCallParser& parser, std::string_view text) {
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!body.is_object()) return;
  try {
    const ToolRequest tools = parse_tool_request(body);
    if (tools.tools.empty()) return;
    const std::string gbnf = parser.forced_call_grammar(tools.callable(), tools.parallel_calls);
    try {
      pagedkv::grammar::build_grammar(pagedkv::grammar::GrammarKind::kGbnf, gbnf);
    } catch (const pagedkv::grammar::GrammarError&) {
      // Only a limit may refuse the grammar written from an accepted schema.
      check(std::string_view(gbnf).size() > pagedkv::grammar::GrammarLimits{}.max_text_bytes / 2);
    }
  } catch (const ApiError& e) {
    check(e.status() == 400);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const char* kNames[] = {"hermes", "llama3_json", "mistral", "granite", "deepseek_v3"};
  static const auto parsers = [] {
    std::vector<std::shared_ptr<const ToolCallParser>> out;
    for (const char* name : kNames) out.push_back(make_tool_call_parser(name));
    return out;
  }();
  const ToolCallParser& parser = *parsers[(data[0] & 0x7f) % parsers.size()];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  if (data[0] & 0x80) forced_grammar(parser, text);
  else read_output(parser, text, data[1]);
  return 0;
}
