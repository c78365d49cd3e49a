// The Redis cluster store's own wire code, without a server: RespReader (replies parsed in place,
// fed in any split, hostile input a clear error with every reply before it intact) and
// RespCommandQueue (commands encoded as Redis reads them, written through a socket that takes
// them a little at a time).
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "pagedkv/remote/resp_command_queue.h"
#include "pagedkv/remote/resp_reader.h"

namespace pagedkv::remote {
namespace {

using Next = RespReader::Next;
using Type = RespReply::Type;

// A reply copied out of the reader's buffer (whose views a later read invalidates).
struct Seen {
  Type type;
  int64_t integer;
  std::string str;
  bool operator==(const Seen&) const = default;
};

void feed(RespReader& r, std::string_view bytes) {
  const std::span<char> room = r.space(bytes.size());
  ASSERT_GE(room.size(), bytes.size());
  std::copy(bytes.begin(), bytes.end(), room.begin());
  r.produced(bytes.size());
}

// Every complete reply now in `r`; the last status (kIncomplete or kBad) in `last`.
std::vector<Seen> take(RespReader& r, Next& last) {
  std::vector<Seen> out;
  RespReply reply;
  while ((last = r.next(reply)) == Next::kReply) out.push_back({reply.type, reply.integer, std::string(reply.str)});
  return out;
}

// Feeds `stream` in pieces of the given sizes (cycled), taking replies after each piece.
std::vector<Seen> read_in_pieces(std::string_view stream, const std::vector<size_t>& sizes, Next& last, RespReader& r) {
  std::vector<Seen> out;
  for (size_t pos = 0, k = 0; pos < stream.size(); ++k) {
    const size_t n = std::min(sizes[k % sizes.size()], stream.size() - pos);
    feed(r, stream.substr(pos, n));
    pos += n;
    for (Seen& s : take(r, last)) out.push_back(std::move(s));
    if (last == Next::kBad) break;
  }
  return out;
}

std::string value_of(size_t n, int seed) {
  std::string v(n, '\0');
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed)) & 0xff);
  return v;  // binary, with CR and LF bytes inside
}

std::string bulk(std::string_view v) { return "$" + std::to_string(v.size()) + "\r\n" + std::string(v) + "\r\n"; }

TEST(RespReader, EveryReplyTypeInAnySplit) {
  const std::string big = value_of(700000, 3);  // more than the initial buffer
  const std::string stream =
      "+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n:42\r\n:-7\r\n$-1\r\n" + bulk("") + bulk("hello") + bulk(big) + ":0\r\n";
  const std::vector<Seen> expected = {{Type::kStatus, 0, "OK"},    {Type::kError, 0, "MOVED 3999 127.0.0.1:6381"},
                                      {Type::kInteger, 42, ""},    {Type::kInteger, -7, ""},
                                      {Type::kNil, 0, ""},         {Type::kString, 0, ""},
                                      {Type::kString, 0, "hello"}, {Type::kString, 0, big},
                                      {Type::kInteger, 0, ""}};
  for (const std::vector<size_t>& sizes :
       std::vector<std::vector<size_t>>{{stream.size()}, {1}, {2, 3}, {7, 4096, 1}, {16384}, {65536, 13}, {300000}}) {
    RespReader r;
    Next last{};
    EXPECT_EQ(read_in_pieces(stream, sizes, last, r), expected) << "first piece " << sizes[0];
    EXPECT_EQ(last, Next::kIncomplete);
    EXPECT_EQ(r.buffered(), 0u);
  }
}

TEST(RespReader, TruncatedRepliesWaitAndLoseNothing) {
  const std::string value = value_of(20656, 1);
  const std::string whole = ":1\r\n" + bulk(value);
  for (size_t cut = 4; cut < whole.size(); cut += 997) {
    RespReader r;
    feed(r, std::string_view(whole).substr(0, cut));
    Next last{};
    const std::vector<Seen> first = take(r, last);
    ASSERT_EQ(first.size(), 1u) << cut;  // the integer; the value is not complete
    EXPECT_EQ(last, Next::kIncomplete) << cut;
    feed(r, std::string_view(whole).substr(cut));
    const std::vector<Seen> rest = take(r, last);
    ASSERT_EQ(rest.size(), 1u) << cut;
    EXPECT_EQ(rest[0].str, value) << cut;
  }
}

TEST(RespReader, HostileRepliesAreClearErrorsAfterTheGoodOnes) {
  struct Case {
    std::string bad;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"*2\r\n$1\r\na\r\n$1\r\nb\r\n", "array reply"},
      {"!oops\r\n", "unknown type"},
      {"%1\r\n", "unknown type"},
      {"$abc\r\n", "string reply of length 'abc'"},
      {"$-2\r\n", "string reply of length '-2'"},
      {"$3\r\nabcXY", "not ended by CRLF"},
      {":12x\r\n", "no number"},
      {":\r\n", "no number"},
      {"+OK\rX", "CR not followed by LF"},
      {"\r\n", "empty reply line"},
      {"$600000000\r\n", "more than the limit"},
      {"$99999999999999999999999\r\n", "string reply of length"},
      {std::string(RespReader::kMaxLineBytes + 10, 'a'), "longer than"},
  };
  for (const Case& c : cases) {
    const bool long_line = c.bad.size() > 1000;  // byte by byte would rescan it 64K times
    for (size_t piece : {long_line ? size_t{4096} : size_t{1}, size_t{5}, size_t{1} << 20}) {
      RespReader r;
      Next last{};
      const std::vector<Seen> got = read_in_pieces("+OK\r\n" + bulk("v") + c.bad, {piece}, last, r);
      ASSERT_EQ(got.size(), 2u) << c.bad.substr(0, 20);  // the replies before it, intact
      EXPECT_EQ(got[1].str, "v");
      ASSERT_EQ(last, Next::kBad) << c.bad.substr(0, 20) << " in pieces of " << piece;
      EXPECT_NE(r.error().find(c.says), std::string::npos) << r.error();
      RespReply reply;
      EXPECT_EQ(r.next(reply), Next::kBad);  // and it stays broken
    }
  }
}

TEST(RespReader, ALyingLengthCostsOnlyTheBytesThatCame) {
  RespReader r;
  feed(r, "$400000000\r\nabc");
  RespReply reply;
  EXPECT_EQ(r.next(reply), Next::kIncomplete);
  const std::span<char> room = r.space(1);
  EXPECT_LT(room.size() + r.buffered(), size_t{16} << 20);  // not the 400 MB announced
  RespReader small(1000);
  feed(small, "$1001\r\n");
  EXPECT_EQ(small.next(reply), Next::kBad);
  EXPECT_NE(small.error().find("more than the limit of 1000"), std::string::npos) << small.error();
}

// Reads everything the other end of a socket pair has now.
std::string drain(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// The cluster store hands on the replies it took before a node failed (a protocol error, a
// failed write): closing the connection resets the reader, and those views must still read
// what came, while the reader starts over empty for the next connection.
TEST(RespReader, ViewsTakenBeforeAResetStayReadable) {
  RespReader r;
  const std::string value = value_of(20000, 9);
  feed(r, "$20000\r\n" + value + "\r\n+OK\r\n$5\r\nhel");
  RespReply a, b;
  ASSERT_EQ(r.next(a), Next::kReply);
  ASSERT_EQ(r.next(b), Next::kReply);
  r.reset();
  EXPECT_EQ(a.str, value);
  EXPECT_EQ(b.str, "OK");
  EXPECT_EQ(r.buffered(), 0u);
  RespReply c;
  EXPECT_EQ(r.next(c), Next::kIncomplete);  // the half reply before the reset is gone
  feed(r, ":7\r\n");
  ASSERT_EQ(r.next(c), Next::kReply);
  EXPECT_EQ(c.integer, 7);
}

TEST(RespCommandQueue, EncodesCommandsAndWritesThemInWhateverPiecesTheSocketTakes) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const int small = 4096;
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) values.push_back(value_of(i % 3 == 0 ? 10 : 20656 + static_cast<size_t>(i), i));
  RespCommandQueue q;
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "key:" + std::to_string(i);
    q.add({"SET", key, values[static_cast<size_t>(i)]});  // referenced when large, copied when small
    expected += "*3\r\n$3\r\nSET\r\n" + bulk(key) + bulk(values[static_cast<size_t>(i)]);
  }
  q.add({"GET", ""});
  expected += "*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
  EXPECT_EQ(q.bytes(), expected.size());
  std::string got;
  int blocked = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    const RespCommandQueue::Write w = q.write_to(fds[0]);
    ASSERT_NE(w, RespCommandQueue::Write::kFailed);
    got += drain(fds[1]);
    if (w == RespCommandQueue::Write::kAll) break;
    ++blocked;
  }
  got += drain(fds[1]);
  EXPECT_GT(blocked, 0);  // the socket took it in several pieces
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
  // A closed peer is a failure, not a hang or a signal.
  ::close(fds[1]);
  q.add({"SET", "k", values[1]});
  EXPECT_EQ(q.write_to(fds[0]), RespCommandQueue::Write::kFailed);
  ::close(fds[0]);
}

}  // namespace
}  // namespace pagedkv::remote
