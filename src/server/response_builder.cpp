#include "pagedkv/server/response_builder.h"

#include <fmt/format.h>

#include <utility>

namespace pagedkv::server {

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

using nlohmann::json;

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return "abort";  // vLLM's reason for a request the server cut short
  }
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string detokenize(const TextTokenizer& tokenizer, std::span<const TokenId> ids) {
  if (ids.empty()) return {};
  return ids.front() == tokenizer.bos_id() ? tokenizer.render(ids) : tokenizer.detokenize(ids);
}

ResponseBuilder::ResponseBuilder(const api::CompletionRequest& request, const TextTokenizer& tokenizer, std::string id,
                                 std::string model, int64_t created, int num_prompts,
                                 const api::ToolCallParser* tool_parser, uint64_t call_id_seed)
    : request_(request),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      chat_(request.endpoint == api::ApiEndpoint::kChatCompletions),
      streaming_(request.stream),
      prompt_tokens_(static_cast<size_t>(num_prompts), 0),
      prompt_ids_(static_cast<size_t>(num_prompts)),
      prompt_logprobs_(static_cast<size_t>(num_prompts)),
      cached_tokens_(static_cast<size_t>(num_prompts), 0) {
  const size_t n = static_cast<size_t>(num_prompts) * static_cast<size_t>(request.n);
  choices_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    choices_.emplace_back(request.stop, request.include_stop_str_in_output);
    if (tool_parser != nullptr && chat_) choices_.back().tool_reader.emplace(*tool_parser, call_id_seed + i);
  }
  completion_chunk_head_ =
      fmt::format(R"({{"id":{},"object":"text_completion","created":{},"model":{},"choices":[{{"index":)",
                  json_text(id_), created_, json_text(model_));
}

std::string ResponseBuilder::piece(TokenId prev, TokenId token) const {
  if (!request_.skip_special_tokens)
    if (std::string special = tokenizer_.special_text(token); !special.empty()) return special;
  return tokenizer_.decode_piece(prev, token);
}

std::string ResponseBuilder::logprob_token(TokenId prev, TokenId token) const {
  return request_.return_tokens_as_token_ids ? fmt::format("token_id:{}", token) : piece(prev, token);
}

std::string ResponseBuilder::prompt_text(std::span<const TokenId> prompt) const {
  if (request_.skip_special_tokens || prompt.empty()) return detokenize(tokenizer_, prompt);
  // Kept special tokens: a leading BOS is shown too (it is context only otherwise).
  const std::string first = tokenizer_.special_text(prompt.front());
  if (first.empty()) return detokenize(tokenizer_, prompt);
  std::string text = first;
  for (size_t i = 1; i < prompt.size(); ++i) text += piece(prompt[i - 1], prompt[i]);
  return text;
}

void ResponseBuilder::take_extra_fields(Choice& c, int index, json& choice, json& top) {
  const size_t p = static_cast<size_t>(index / request_.n);
  // vLLM's chat has the prompt's fields on the response, completions on each choice.
  auto prompt_field = [&](const char* name, json value) {
    json& holder = chat_ ? top : choice;
    if (holder.is_null()) holder = json::object();
    holder[name] = std::move(value);
  };
  if (request_.return_token_ids) {
    if (choice.is_null()) choice = json::object();
    choice["token_ids"] = std::exchange(c.unsent_token_ids, {});
    if (!c.prompt_ids_sent) {
      c.prompt_ids_sent = true;
      prompt_field("prompt_token_ids", prompt_ids_[p]);
    }
  }
  if (request_.prompt_logprobs >= 0 && !c.prompt_logprobs_sent && !prompt_logprobs_[p].is_null()) {
    c.prompt_logprobs_sent = true;
    prompt_field("prompt_logprobs", prompt_logprobs_[p]);
  }
}

json ResponseBuilder::prompt_logprobs_json(std::span<const TokenId> prompt,
                                           std::span<const TokenLogprobs> entries) const {
  json out = json::array({nullptr});
  for (size_t i = 0; i < entries.size() && i + 1 < prompt.size(); ++i) {
    const TokenId prev = prompt[i];
    const TokenLogprobs& e = entries[i];
    json position = json::object();
    for (size_t k = 0; k < e.top.size(); ++k)
      position[std::to_string(e.top[k].token)] = {
          {"logprob", e.top[k].logprob}, {"rank", k + 1}, {"decoded_token", logprob_token(prev, e.top[k].token)}};
    // The prompt's own token, with its rank among all (it may be one of the top ones too).
    position[std::to_string(e.chosen.token)] = {
        {"logprob", e.chosen.logprob}, {"rank", e.chosen_rank}, {"decoded_token", logprob_token(prev, e.chosen.token)}};
    out.push_back(std::move(position));
  }
  return out;
}

std::string ResponseBuilder::take_tokens(Choice& c, const ChoiceUpdate& u, json& chunk_logprobs) {
  std::string emitted;
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array(),
       content = json::array();
  for (size_t i = 0; i < u.tokens.size() && !c.matcher.stopped(); ++i) {
    const TokenId prev = c.prev, token = u.tokens[i];
    const std::string text = piece(prev, token);
    c.prev = token;
    ++c.completion_tokens;
    if (request_.return_token_ids) {
      c.token_ids.push_back(token);
      c.unsent_token_ids.push_back(token);
    }
    if (i < u.logprobs.size() && request_.logprobs >= 0) {
      const TokenLogprobs& lp = u.logprobs[i];
      if (chat_) {
        json alts = json::array();
        for (const TokenLogprob& t : lp.top) {
          const std::string s = logprob_token(prev, t.token);
          alts.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}});
        }
        const std::string name = logprob_token(prev, token);
        content.push_back(
            {{"token", name}, {"logprob", lp.chosen.logprob}, {"bytes", bytes_of(name)}, {"top_logprobs", alts}});
      } else {
        json alts = json::object();
        for (const TokenLogprob& t : lp.top) alts[logprob_token(prev, t.token)] = t.logprob;
        tokens.push_back(logprob_token(prev, token));
        values.push_back(lp.chosen.logprob);
        tops.push_back(alts);
        offsets.push_back(c.text.size() + emitted.size());
      }
    }
    emitted += c.matcher.append(text).text;
  }
  if (request_.logprobs >= 0) {
    if (chat_) {
      for (json& e : content) c.chat_logprobs.push_back(e);
      chunk_logprobs = {{"content", content}};
    } else {
      for (size_t i = 0; i < tokens.size(); ++i) {
        c.logprob_tokens.push_back(tokens[i]);
        c.logprob_values.push_back(values[i]);
        c.logprob_tops.push_back(tops[i]);
        c.text_offsets.push_back(offsets[i]);
      }
      chunk_logprobs = {
          {"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }
  }
  return emitted;
}

std::vector<std::string> ResponseBuilder::apply(const ChoiceUpdate& u) {
  if (u.choice < 0 || static_cast<size_t>(u.choice) >= choices_.size()) return {};
  Choice& c = choices_[static_cast<size_t>(u.choice)];
  if (c.finished) return {};  // e.g. the engine's own end of a choice a stop string ended first
  if (u.engine_id.value != 0) c.engine_id = u.engine_id;
  std::string echo;
  if (u.first) {
    const size_t p = static_cast<size_t>(u.choice / request_.n);
    prompt_tokens_[p] = static_cast<int>(u.prompt.size());
    if (request_.return_token_ids) prompt_ids_[p] = u.prompt;
    // Sample 0's first update carries them (all, or none when it ended before its first token).
    if (request_.prompt_logprobs >= 0 && prompt_logprobs_[p].is_null() && !u.prompt.empty() &&
        u.prompt_logprobs.size() + 1 == u.prompt.size())
      prompt_logprobs_[p] = prompt_logprobs_json(u.prompt, u.prompt_logprobs);
    cached_tokens_[p] = u.cached_tokens;
    if (!u.prompt.empty()) {
      c.prev = u.prompt.back();
      if (request_.echo && !chat_) {
        echo = prompt_text(u.prompt);
      }
    }
    c.text += echo;
  }
  if (!u.error.empty()) {
    if (!error_) error_ = u.error;
    c.finished = true;
    c.finish_reason = "error";
    ++finished_choices_;
    return {};
  }
  json lp;
  std::string emitted = take_tokens(c, u, lp);
  const char* reason = nullptr;
  if (c.matcher.stopped()) {
    reason = "stop";
    if (!u.finished && c.engine_id.value != 0) stop_requests_.push_back(c.engine_id);
  } else if (u.finished) {
    emitted += c.matcher.finish();
    reason = finish_reason_text(u.finish_reason);
  }
  if (c.tool_reader) {
    api::ToolCallReader::Output out = c.tool_reader->append(emitted);
    if (reason != nullptr) {
      api::ToolCallReader::Output rest = c.tool_reader->finish();
      out.content += rest.content;
      for (api::ToolCall& call : rest.calls) out.calls.push_back(std::move(call));
    }
    // parallel_tool_calls: false returns the first call only (vLLM's rule; the grammar of a
    // forced call already allows just one).
    if (!request_.tools.parallel_calls && out.calls.size() + c.calls.size() > 1)
      out.calls.resize(c.calls.empty() ? 1 : 0);
    const size_t first_call = c.calls.size();
    c.calls.insert(c.calls.end(), out.calls.begin(), out.calls.end());
    // OpenAI's reason when the answer calls tools (a length cut keeps "length").
    if (reason != nullptr && std::string_view(reason) == "stop" && !c.calls.empty()) reason = "tool_calls";
    if (reason != nullptr) {
      c.finished = true;
      c.finish_reason = reason;
      ++finished_choices_;
    }
    c.text += out.content;
    const bool first = !c.started;
    c.started = true;
    if (!streaming_) return {};
    return tool_chunks(u.choice, out, first_call, lp, reason, first, c);
  }
  if (reason != nullptr) {
    c.finished = true;
    c.finish_reason = reason;
    ++finished_choices_;
  }
  c.text += emitted;
  const std::string text = echo + emitted;
  const bool first = !c.started;
  c.started = true;
  if (!streaming_) return {};
  if (text.empty() && reason == nullptr && !first) return {};
  if (text.empty() && reason == nullptr && first && !chat_) return {};  // nothing visible yet
  return {chunk(u.choice, text, lp, reason, first, c)};
}

std::vector<RequestId> ResponseBuilder::take_stop_requests() {
  std::vector<RequestId> out;
  out.swap(stop_requests_);
  return out;
}

std::string ResponseBuilder::chunk(int index, const std::string& text, const json& logprobs, const char* finish_reason,
                                   bool first, Choice& c) {
  json ids_fields, top_fields;
  take_extra_fields(c, index, ids_fields, top_fields);
  if (!chat_ && logprobs.is_null() && ids_fields.is_null()) {  // one chunk per token and stream: written directly
    return fmt::format(R"({}{},"text":{},"logprobs":null,"finish_reason":{}}}]}})", completion_chunk_head_, index,
                       json_text(json(text)),
                       finish_reason ? fmt::format("\"{}\"", finish_reason) : std::string("null"));
  }
  json choice{{"index", index},
              {"logprobs", logprobs.is_null() ? json(nullptr) : logprobs},
              {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  if (chat_) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  if (ids_fields.is_object()) choice.update(ids_fields);
  json out = {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array({choice})}};
  if (top_fields.is_object()) out.update(top_fields);
  return json_text(out);
}

std::string ResponseBuilder::chat_chunk(int index, json delta, const json& logprobs, const char* finish_reason,
                                        Choice* ids_of) {
  json choice{{"index", index},
              {"delta", std::move(delta)},
              {"logprobs", logprobs.is_null() ? json(nullptr) : logprobs},
              {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  json ids_fields, top_fields;
  if (ids_of != nullptr) take_extra_fields(*ids_of, index, ids_fields, top_fields);
  if (ids_fields.is_object()) choice.update(ids_fields);
  json out = {{"id", id_},
              {"object", "chat.completion.chunk"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array({std::move(choice)})}};
  if (top_fields.is_object()) out.update(top_fields);
  return json_text(out);
}

std::vector<std::string> ResponseBuilder::tool_chunks(int index, const api::ToolCallReader::Output& out,
                                                      size_t first_call, const json& logprobs,
                                                      const char* finish_reason, bool first, Choice& c) {
  std::vector<std::string> chunks;
  json lp = logprobs;  // the update's logprobs (and token ids) go with its first chunk
  auto take_logprobs = [&lp] { return std::exchange(lp, json(nullptr)); };
  Choice* ids = &c;
  auto take_ids = [&ids] { return std::exchange(ids, nullptr); };
  if (first || !out.content.empty()) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    delta["content"] = out.content;
    chunks.push_back(chat_chunk(index, std::move(delta), take_logprobs(), nullptr, take_ids()));
  }
  for (size_t k = 0; k < out.calls.size(); ++k) {
    const api::ToolCall& call = out.calls[k];
    const size_t at = first_call + k;
    // As OpenAI streams a call: id, type and name with empty arguments, then the arguments.
    json head = {
        {"index", at}, {"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", ""}}}};
    chunks.push_back(
        chat_chunk(index, {{"tool_calls", json::array({std::move(head)})}}, take_logprobs(), nullptr, take_ids()));
    json args = {{"index", at}, {"function", {{"arguments", call.arguments}}}};
    chunks.push_back(chat_chunk(index, {{"tool_calls", json::array({std::move(args)})}}, nullptr, nullptr));
  }
  if (finish_reason != nullptr)
    chunks.push_back(chat_chunk(index, json::object(), take_logprobs(), finish_reason, take_ids()));
  return chunks;
}

json ResponseBuilder::usage() const {
  int prompt = 0, cached = 0, completion = 0;
  for (int p : prompt_tokens_) prompt += p;
  for (int c : cached_tokens_) cached += c;
  for (const Choice& c : choices_) completion += c.completion_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string ResponseBuilder::usage_chunk() const {
  return json_text({{"id", id_},
                    {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                    {"created", created_},
                    {"model", model_},
                    {"choices", json::array()},
                    {"usage", usage()}});
}

json ResponseBuilder::response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice{{"index", i}, {"finish_reason", c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason)}};
    json logprobs = nullptr;
    if (request_.logprobs >= 0) {
      logprobs = chat_ ? json{{"content", c.chat_logprobs}}
                       : json{{"tokens", c.logprob_tokens},
                              {"token_logprobs", c.logprob_values},
                              {"top_logprobs", c.logprob_tops},
                              {"text_offset", c.text_offsets}};
    }
    choice["logprobs"] = logprobs;
    if (chat_ && c.tool_reader) {
      json message = {{"role", "assistant"},
                      {"content", c.calls.empty() || !c.text.empty() ? json(c.text) : json(nullptr)}};
      if (!c.calls.empty()) {
        json calls = json::array();
        for (const api::ToolCall& call : c.calls)
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else if (chat_) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    if (request_.return_token_ids) {
      choice["token_ids"] = c.token_ids;
      if (!chat_) choice["prompt_token_ids"] = prompt_ids_[i / static_cast<size_t>(request_.n)];
    }
    if (request_.prompt_logprobs >= 0 && !chat_)
      choice["prompt_logprobs"] = prompt_logprobs_[i / static_cast<size_t>(request_.n)];
    choices.push_back(choice);
  }
  json out = {{"id", id_},           {"object", chat_ ? "chat.completion" : "text_completion"},
              {"created", created_}, {"model", model_},
              {"choices", choices},  {"usage", usage()}};
  // vLLM's chat response carries the (one) prompt's ids beside the choices.
  if (request_.return_token_ids && chat_)
    out["prompt_token_ids"] = prompt_ids_.empty() ? json(nullptr) : json(prompt_ids_[0]);
  if (request_.prompt_logprobs >= 0 && chat_)
    out["prompt_logprobs"] = prompt_logprobs_.empty() ? json(nullptr) : prompt_logprobs_[0];
  return out;
}

}  // namespace pagedkv::server
