#include "pagedkv/server/peer_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace pagedkv::server {
namespace {

// Address and port of a socket end, in the text form httplib reports.
bool endpoint(const sockaddr_storage& a, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    if (inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf) == nullptr) return false;
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf) == nullptr) return false;
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

}  // namespace

PeerConnection PeerConnection::find(int local_port, const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return {};
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    std::string laddr, paddr;
    int lport = -1, pport = -1;
    if (!endpoint(local, laddr, lport) || !endpoint(peer, paddr, pport)) continue;
    if (lport == local_port && pport == remote_port && paddr == remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return PeerConnection(found);
}

bool peer_closed(int fd, short revents) {
  if (revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (revents & POLLIN) {
    char byte;
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;  // end of file; > 0 is a pipelined request, < 0 (EAGAIN) nothing yet
  }
  return false;
}

bool PeerConnection::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return peer_closed(fd_, p.revents);
}

}  // namespace pagedkv::server
