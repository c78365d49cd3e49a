#include "pagedkv/remote/resp_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace pagedkv::remote {
namespace {

// A string's bytes still to come are made room for in steps of at most this much, so a length
// that lies (a hostile or broken server) costs no more memory than the bytes that actually came.
constexpr size_t kGrowStepBytes = size_t{4} << 20;

bool parse_int(std::string_view s, int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string excerpt(std::string_view s) {
  constexpr size_t kShown = 40;
  std::string out;
  for (char ch : s.substr(0, kShown))
    out += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : fmt::format("\\x{:02x}", static_cast<uint8_t>(ch));
  if (s.size() > kShown) out += "...";
  return out;
}

}  // namespace

std::span<char> RespReader::space(size_t min_bytes) {
  if (begin_ == end_) begin_ = end_ = 0;
  const size_t held = end_ - begin_;
  const size_t rest_of_reply = reply_bytes_ > held ? std::min(reply_bytes_ - held, kGrowStepBytes) : 0;
  const size_t want = std::max(min_bytes, rest_of_reply);
  if (capacity_ - end_ < want) {
    if (capacity_ - held >= want) {
      std::memmove(buf_.get(), buf_.get() + begin_, held);
    } else {
      const size_t capacity = std::max({kInitialBytes, 2 * capacity_, held + want});
      auto grown = std::make_unique_for_overwrite<char[]>(capacity);
      if (held) std::memcpy(grown.get(), buf_.get() + begin_, held);
      buf_ = std::move(grown);
      capacity_ = capacity;
    }
    begin_ = 0;
    end_ = held;
  }
  return {buf_.get() + end_, capacity_ - end_};
}

RespReader::Next RespReader::bad(std::string why) {
  error_ = "protocol error: " + std::move(why);
  return Next::kBad;
}

RespReader::Next RespReader::next(RespReply& out) {
  if (!error_.empty()) return Next::kBad;
  const char* p = buf_.get() + begin_;
  const size_t avail = end_ - begin_;
  if (avail == 0) return Next::kIncomplete;
  const void* cr = std::memchr(p, '\r', std::min(avail, kMaxLineBytes));
  if (cr == nullptr) {
    if (avail >= kMaxLineBytes) return bad(fmt::format("a reply line longer than {} bytes", kMaxLineBytes));
    return Next::kIncomplete;
  }
  const size_t line = static_cast<size_t>(static_cast<const char*>(cr) - p);  // bytes before CR
  if (line + 1 >= avail) return Next::kIncomplete;  // the LF has not come yet
  if (p[line + 1] != '\n') return bad(fmt::format("CR not followed by LF in '{}'", excerpt({p, line + 2})));
  if (line == 0) return bad("an empty reply line");
  const std::string_view body(p + 1, line - 1);
  const size_t header = line + 2;
  switch (p[0]) {
    case '+':
    case '-':
      out.type = p[0] == '+' ? RespReply::Type::kStatus : RespReply::Type::kError;
      out.integer = 0;
      out.str = body;
      begin_ += header;
      return Next::kReply;
    case ':':
      if (!parse_int(body, out.integer))
        return bad(fmt::format("an integer reply that is no number: '{}'", excerpt(body)));
      out.type = RespReply::Type::kInteger;
      out.str = {};
      begin_ += header;
      return Next::kReply;
    case '$': {
      int64_t len = 0;
      if (!parse_int(body, len) || len < -1) return bad(fmt::format("a string reply of length '{}'", excerpt(body)));
      if (len == -1) {
        out = RespReply{};
        begin_ += header;
        return Next::kReply;
      }
      if (static_cast<uint64_t>(len) > max_string_)
        return bad(fmt::format("a string reply of {} bytes, more than the limit of {}", len, max_string_));
      const size_t total = header + static_cast<size_t>(len) + 2;
      if (avail < total) {
        reply_bytes_ = total;
        return Next::kIncomplete;
      }
      if (p[total - 2] != '\r' || p[total - 1] != '\n')
        return bad(fmt::format("a string reply of {} bytes not ended by CRLF", len));
      out.type = RespReply::Type::kString;
      out.integer = 0;
      out.str = std::string_view(p + header, static_cast<size_t>(len));
      begin_ += total;
      reply_bytes_ = 0;
      return Next::kReply;
    }
    case '*':
      return bad(fmt::format("an array reply ('{}') where one value was expected", excerpt({p, line})));
    default:
      return bad(fmt::format("a reply of unknown type: '{}'", excerpt({p, line})));
  }
}

void RespReader::reset() {
  begin_ = end_ = reply_bytes_ = 0;  // the memory stays: views handed out stay readable
  error_.clear();
}

}  // namespace pagedkv::remote
