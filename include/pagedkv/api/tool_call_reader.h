// ToolCallReader: one choice's generated text, read through a ToolCallParser as it arrives, split
// into content and tool calls. The same reader serves streamed answers (what append() returns
// is final and can be sent at once: a possible opening tag is held back, as StopStringMatcher
// holds back a possible stop string) and whole ones (everything appended, then finish()).
//
// Content is the text outside the calls with white space trimmed at both ends (the newlines
// around call blocks are not content); a stream sends white space only once text follows it.
#pragma once

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/api/tool_call_parser.h"

namespace pagedkv::api {

class ToolCallReader {
 public:
  struct Output {
    std::string content;  // new content text
    std::vector<ToolCall> calls;  // new complete calls, ids assigned
  };

  // `parser` must outlive the reader. `seed`: the ids' random source.
  ToolCallReader(const ToolCallParser& parser, uint64_t seed);

  Output append(std::string_view text);
  Output finish();  // the output ended: everything left is decided

  int num_calls() const { return num_calls_; }
  bool has_content() const { return content_started_; }

 private:
  Output decide(bool at_end);
  void add_content(std::string_view text, Output& out);

  const ToolCallParser& parser_;
  std::mt19937_64 random_;
  std::string rest_;  // undecided text
  bool at_output_start_ = true;
  bool content_started_ = false;
  std::string pending_space_;  // white space of content not sent yet
  int num_calls_ = 0;
};

}  // namespace pagedkv::api
