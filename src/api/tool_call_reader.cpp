#include "pagedkv/api/tool_call_reader.h"

namespace pagedkv::api {
namespace {

bool is_white_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

ToolCallReader::ToolCallReader(const ToolCallParser& parser, uint64_t seed) : parser_(parser), random_(seed) {}

void ToolCallReader::add_content(std::string_view text, Output& out) {
  for (char c : text) {
    if (is_white_space(c)) {
      if (content_started_) pending_space_ += c;  // leading white space is dropped
      continue;
    }
    out.content += pending_space_;
    pending_space_.clear();
    out.content += c;
    content_started_ = true;
  }
}

ToolCallReader::Output ToolCallReader::decide(bool at_end) {
  Output out;
  size_t pos = 0;
  while (pos < rest_.size()) {
    ToolCallScan s = parser_.scan(std::string_view(rest_).substr(pos), at_output_start_, at_end);
    if (s.kind == ToolCallScan::Kind::kNeedMore || s.end == 0) break;
    if (s.kind == ToolCallScan::Kind::kText) {
      add_content(std::string_view(rest_).substr(pos, s.end), out);
    } else {
      for (ToolCall& c : s.calls) {
        c.id = parser_.new_call_id(random_);
        out.calls.push_back(std::move(c));
        ++num_calls_;
      }
    }
    pos += s.end;
    at_output_start_ = false;
  }
  rest_.erase(0, pos);
  if (at_end) {
    add_content(rest_, out);  // a parser that left something undecided at the end: it is text
    rest_.clear();
  }
  return out;
}

ToolCallReader::Output ToolCallReader::append(std::string_view text) {
  rest_ += text;
  return decide(false);
}

ToolCallReader::Output ToolCallReader::finish() { return decide(true); }

}  // namespace pagedkv::api
