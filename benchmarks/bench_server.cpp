// Micro-benchmarks of the HTTP server's own costs (server/), apart from the engine:
//   BM_PeerConnectionFind/<connections>/<same again>   items/s = lookups of a client's socket
//       (PeerConnection::find) among `connections` open loopback connections: same again = 0
//       alternates between two connections (each lookup scans the process's descriptors, as the
//       first request of a connection does), 1 asks for the same one every time (the next
//       request of a keep-alive connection on its thread).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "pagedkv/api/peer_connection.h"

namespace pagedkv::server {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

int port_of(int fd) {
  sockaddr_in a{};
  socklen_t length = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  return ntohs(a.sin_port);
}

void BM_PeerConnectionFind(benchmark::State& state) {
  const auto connections = static_cast<int>(state.range(0));
  const bool same_again = state.range(1) != 0;
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const auto needed = static_cast<rlim_t>(2 * connections + 64);
  if (files.rlim_cur < needed && files.rlim_max >= needed) {
    files.rlim_cur = needed;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener, 1024) != 0) {
    state.SkipWithError("cannot listen on 127.0.0.1");
    return;
  }
  const int port = port_of(listener);
  std::vector<int> fds{listener}, client_ports;
  for (int i = 0; i < connections; ++i) {
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to = loopback(port);
    if (client < 0 || connect(client, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) break;
    fds.push_back(client);
    const int server = accept(listener, nullptr, nullptr);
    if (server < 0) break;
    fds.push_back(server);
    client_ports.push_back(port_of(client));
  }
  if (static_cast<int>(client_ports.size()) == connections && connections >= 2) {
    size_t i = 0;
    for (auto _ : state) {
      const int client_port = client_ports[client_ports.size() - 1 - (same_again ? 0 : i++ % 2)];
      benchmark::DoNotOptimize(api::PeerConnection::find(port, "127.0.0.1", client_port).fd());
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  } else {
    state.SkipWithError("cannot open that many loopback connections (descriptor limit)");
  }
  for (int fd : fds) close(fd);
}
BENCHMARK(BM_PeerConnectionFind)->ArgsProduct({{16, 128, 512}, {0, 1}});

}  // namespace
}  // namespace pagedkv::server

BENCHMARK_MAIN();
