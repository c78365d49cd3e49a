// libFuzzer target: the Redis replies the cluster store parses in place (remote/resp_reader.h),
// as a server that lies, or a stream cut anywhere, would send them. The same bytes fed whole and
// fed in the pieces the input chooses must give the same replies and the same verdict (a reply
// read, more bytes needed, or a protocol error), every string handed out must be the bytes that
// stand at that place in the stream, and none may exceed the reader's limit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/remote/resp_reader.h"

namespace {

using pagedkv::fuzz::check;
using pagedkv::remote::RespReader;
using pagedkv::remote::RespReply;

constexpr size_t kMaxString = 4096;  // small, so that the limit is reached

struct Reply {
  RespReply::Type type;
  int64_t integer;
  std::string str;
  bool operator==(const Reply&) const = default;
};

struct Outcome {
  std::vector<Reply> replies;
  RespReader::Next last = RespReader::Next::kIncomplete;
  bool operator==(const Outcome& o) const { return replies == o.replies && last == o.last; }
};

// Feeds `stream` in pieces of the sizes `pieces` gives (cycled; 0 = the rest at once) and reads
// every reply that becomes complete.
Outcome read_all(std::string_view stream, const std::vector<size_t>& pieces) {
  RespReader reader(kMaxString);
  Outcome out;
  size_t fed = 0, turn = 0;
  while (true) {
    RespReply r;
    const RespReader::Next next = reader.next(r);
    if (next == RespReader::Next::kReply) {
      check(r.type != RespReply::Type::kString || r.str.size() <= kMaxString);
      out.replies.push_back({r.type, r.integer, std::string(r.str)});
      continue;
    }
    out.last = next;
    if (next == RespReader::Next::kBad) {
      check(!reader.error().empty());
      RespReply again;
      check(reader.next(again) == RespReader::Next::kBad);  // unusable after an error
      return out;
    }
    if (fed == stream.size()) return out;
    size_t n = pieces.empty() ? 0 : pieces[turn++ % pieces.size()];
    if (n == 0 || n > stream.size() - fed) n = stream.size() - fed;
    const std::span<char> space = reader.space(n);
    check(space.size() >= n);
    std::memcpy(space.data(), stream.data() + fed, n);
    reader.produced(n);
    fed += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagedkv::fuzz::ByteReader in{data, size};
  // The first bytes choose the pieces (1-32 bytes each), the rest is the stream.
  std::vector<size_t> pieces(1 + in.next() % 8);
  for (auto& p : pieces) p = 1 + in.next() % 32;
  const std::string_view stream(reinterpret_cast<const char*>(data) + std::min(in.at, size),
                                size - std::min(in.at, size));
  const Outcome whole = read_all(stream, {});
  const Outcome split = read_all(stream, pieces);
  check(whole == split);
  // A string reply's bytes are the stream's own: each one occurs in it.
  for (const Reply& r : whole.replies)
    if (r.type == RespReply::Type::kString) check(stream.find(r.str) != std::string_view::npos);
  return 0;
}
