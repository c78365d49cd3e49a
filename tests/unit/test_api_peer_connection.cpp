// PeerConnection (api/peer_connection.h) over real loopback connections: the server-side
// socket found by its endpoints among many, never a closed or foreign one (also when the thread's
// last lookup names a socket number that was closed and reused), from any thread; closed() for
// a peer that is there, one that sent more bytes, one that shut its end, one that reset it; and
// DisconnectCheck's polling interval.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/api/peer_connection.h"

namespace pagedkv::api {
namespace {

// A listening socket on 127.0.0.1 (a free port) and the connections made to it: each pair's
// client end (as a client process would hold it) and the server end accept() returned.
class Loopback {
 public:
  Loopback() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener_, 256) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    port_ = port_of(listener_);
  }
  ~Loopback() {
    for (const Pair& p : pairs_) close_pair(p);
    close(listener_);
  }
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  struct Pair {
    int client = -1, server = -1, client_port = -1;
  };

  // A new connection (kept until close_connection or the end).
  Pair connect_one() {
    Pair p;
    p.client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(port_);
    if (p.client < 0 || connect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("cannot connect to 127.0.0.1");
    p.server = accept(listener_, nullptr, nullptr);
    if (p.server < 0) throw std::runtime_error("accept failed");
    p.client_port = port_of(p.client);
    pairs_.push_back(p);
    return p;
  }
  void close_connection(const Pair& p) {
    close_pair(p);
    std::erase_if(pairs_, [&](const Pair& q) { return q.server == p.server; });
  }
  // Closes the client end alone, after `prepare` (a socket option) ran on it.
  template <class Prepare>
  void close_client(const Pair& p, Prepare prepare) {
    for (Pair& q : pairs_)
      if (q.server == p.server) {
        prepare(q.client);
        close(q.client);
        q.client = -1;
      }
  }

  int port() const { return port_; }
  PeerConnection find(const Pair& p) const { return PeerConnection::find(port_, "127.0.0.1", p.client_port); }

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }
  static int port_of(int fd) {
    sockaddr_in a{};
    socklen_t length = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
    return ntohs(a.sin_port);
  }
  static void close_pair(const Pair& p) {
    close(p.client);
    close(p.server);
  }

  int listener_ = -1, port_ = -1;
  std::vector<Pair> pairs_;
};

// Whether closed() turns true within a second: a FIN or RST crosses a loopback connection at
// once, but not within the calling instruction.
bool becomes_closed(const PeerConnection& peer) {
  for (int i = 0; i < 200; ++i) {
    if (peer.closed()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(PeerConnection, FindsTheServerEndAmongManyConnections) {
  Loopback net;
  std::vector<Loopback::Pair> pairs;
  for (int i = 0; i < 40; ++i) pairs.push_back(net.connect_one());
  for (int i : {0, 17, 39, 3, 39, 0}) {  // some twice in a row: the thread's last lookup again
    const PeerConnection peer = net.find(pairs[static_cast<size_t>(i)]);
    ASSERT_TRUE(peer.known()) << i;
    EXPECT_EQ(peer.fd(), pairs[static_cast<size_t>(i)].server) << i;
    EXPECT_FALSE(peer.closed()) << i;
  }
}

TEST(PeerConnection, UnknownEndpointsFindNothing) {
  Loopback net;
  const Loopback::Pair p = net.connect_one();
  ASSERT_EQ(net.find(p).fd(), p.server);  // also the thread's last lookup now
  for (const PeerConnection& peer : {PeerConnection::find(net.port(), "127.0.0.1", p.client_port + 1),
                                     PeerConnection::find(net.port() + 1, "127.0.0.1", p.client_port),
                                     PeerConnection::find(net.port(), "127.0.0.2", p.client_port),
                                     PeerConnection::find(net.port(), "::1", p.client_port)}) {
    EXPECT_FALSE(peer.known());
    EXPECT_EQ(peer.fd(), -1);
    EXPECT_FALSE(peer.closed());  // unknown: never reported gone
  }
  // Both ends live in this process: the endpoints seen from the client's side name its socket.
  EXPECT_EQ(PeerConnection::find(p.client_port, "127.0.0.1", net.port()).fd(), p.client);
}

TEST(PeerConnection, AConnectionThatEndedIsNotFoundEvenWhereItsSocketNumberLivesOn) {
  Loopback net;
  const Loopback::Pair first = net.connect_one();
  ASSERT_EQ(net.find(first).fd(), first.server);
  net.close_connection(first);
  // New connections take the lowest free descriptors: one of them gets first.server's number.
  std::vector<Loopback::Pair> later;
  bool reused = false;
  for (int i = 0; i < 4; ++i) {
    later.push_back(net.connect_one());
    reused = reused || later.back().server == first.server || later.back().client == first.server;
  }
  EXPECT_TRUE(reused) << "the test expects Linux to hand out the lowest free descriptor";
  EXPECT_FALSE(net.find(first).known());  // the thread remembers first.server: it must re-check
  for (const Loopback::Pair& p : later) EXPECT_EQ(net.find(p).fd(), p.server);
}

TEST(PeerConnection, AnyThreadFindsTheSameSocket) {
  Loopback net;
  std::vector<Loopback::Pair> pairs;
  for (int i = 0; i < 8; ++i) pairs.push_back(net.connect_one());
  std::vector<int> found(pairs.size(), -2);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < pairs.size(); ++i) threads.emplace_back([&, i] { found[i] = net.find(pairs[i]).fd(); });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < pairs.size(); ++i) EXPECT_EQ(found[i], pairs[i].server) << i;
}

TEST(PeerConnection, ClosedWhenThePeerShutsOrResetsNotWhenItSendsMore) {
  Loopback net;
  const Loopback::Pair talking = net.connect_one();
  const PeerConnection peer = net.find(talking);
  ASSERT_TRUE(peer.known());
  EXPECT_FALSE(peer.closed());
  // A pipelined next request: not a disconnect, and its bytes stay for the server to read.
  ASSERT_EQ(send(talking.client, "GET", 3, 0), 3);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(peer.closed());
  char buf[8] = {};
  ASSERT_EQ(recv(talking.server, buf, sizeof buf, MSG_DONTWAIT), 3);
  EXPECT_EQ(std::string(buf, 3), "GET");

  // The peer shut its sending side (a FIN): end of file, gone.
  ASSERT_EQ(shutdown(talking.client, SHUT_WR), 0);
  EXPECT_TRUE(becomes_closed(peer));

  // The peer reset the connection (closing with a zero linger time sends an RST, no FIN).
  const Loopback::Pair reset = net.connect_one();
  const PeerConnection reset_peer = net.find(reset);
  ASSERT_TRUE(reset_peer.known());
  EXPECT_FALSE(reset_peer.closed());
  net.close_client(reset, [](int fd) {
    const linger abort_now{1, 0};
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof abort_now), 0);
  });
  EXPECT_TRUE(becomes_closed(reset_peer));
}

TEST(DisconnectCheck, PollsAtMostOncePerInterval) {
  Loopback net;
  const Loopback::Pair p = net.connect_one();
  const PeerConnection peer = net.find(p);
  ASSERT_TRUE(peer.known());
  DisconnectCheck hourly(peer, std::chrono::hours(1)), every_time(peer, std::chrono::milliseconds(0));
  EXPECT_FALSE(hourly.client_gone());  // the first call polls: the peer is there
  EXPECT_FALSE(every_time.client_gone());
  ASSERT_EQ(shutdown(p.client, SHUT_WR), 0);
  EXPECT_TRUE(becomes_closed(peer));
  EXPECT_FALSE(hourly.client_gone());  // not asked again within the hour
  EXPECT_TRUE(every_time.client_gone());
  EXPECT_FALSE(DisconnectCheck(PeerConnection(), std::chrono::milliseconds(0)).client_gone());
}

}  // namespace
}  // namespace pagedkv::api
