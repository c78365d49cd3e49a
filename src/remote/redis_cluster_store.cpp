#include "pagedkv/remote/redis_cluster_store.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <numeric>
#include <set>

#include "batch_replies.h"
#include "pagedkv/core/error.h"
#include "pagedkv/remote/sigpipe_blocked.h"

namespace pagedkv::remote {
namespace {

constexpr int kNoNode = ClusterTopology::kNoNode;

bool starts_with(const redisReply& r, std::string_view prefix) {
  return r.len >= prefix.size() && std::memcmp(r.str, prefix.data(), prefix.size()) == 0;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the slot and the node to go to. An
// empty host means the host of the node that answered.
bool parse_redirection(std::string_view e, const std::string& answered_by, int& slot, ClusterNodeAddress& to) {
  const size_t a = e.find(' ');
  const size_t b = a == std::string_view::npos ? a : e.find(' ', a + 1);
  if (b == std::string_view::npos) return false;
  const std::string_view slot_s = e.substr(a + 1, b - a - 1);
  std::string_view addr = e.substr(b + 1);
  const size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view host = addr.substr(0, colon);
  const std::string_view port_s = addr.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (std::from_chars(slot_s.data(), slot_s.data() + slot_s.size(), slot).ec != std::errc() || slot < 0 ||
      slot >= kClusterSlots)
    return false;
  if (std::from_chars(port_s.data(), port_s.data() + port_s.size(), port).ec != std::errc() || port < 1 || port > 65535)
    return false;
  to.host = host.empty() ? answered_by : std::string(host);
  to.port = port;
  return true;
}

// What a node's reply to one key's command means for where the key lives.
struct Routing {
  enum Kind : uint8_t {
    kAnswer,  // the command's own reply (a value, a status, an error of the command)
    kMoved,  // the slot lives at `to` now
    kAsk,  // the slot is migrating and the key may be at `to`: ask there once, after ASKING
    kNotServed,  // the slot is not served right now (a failover, a migration, a replica loading)
  } kind = kAnswer;
  int slot = 0;
  ClusterNodeAddress to;
};

Routing routing_of(const RespReply& r, const std::string& answered_by) {
  Routing out;
  if (r.type != RespReply::Type::kError) return out;
  const std::string_view e = r.str;
  const bool moved = e.starts_with("MOVED "), ask = e.starts_with("ASK ");
  if ((moved || ask) && parse_redirection(e, answered_by, out.slot, out.to))
    out.kind = moved ? Routing::kMoved : Routing::kAsk;
  else if (e.starts_with("CLUSTERDOWN") || e.starts_with("TRYAGAIN") || e.starts_with("LOADING") ||
           e.starts_with("MASTERDOWN"))
    out.kind = Routing::kNotServed;
  return out;
}

}  // namespace

struct RedisClusterStore::Node {
  Node(ClusterNodeAddress a, RedisUrl url, RedisConnectionOptions o, const RedisClusterStoreOptions& s)
      : address(std::move(a)), conn(std::move(url), o), breaker(s.node_backoff_initial, s.node_backoff_max) {}
  ClusterNodeAddress address;
  RedisConnection conn;
  CircuitBreaker breaker;
};

RedisClusterStore::RedisClusterStore(RedisClusterStoreOptions options) : options_(std::move(options)) {
  if (options_.seeds.empty()) throw ConfigError("a Redis Cluster store needs at least one node to start from");
}

RedisClusterStore::~RedisClusterStore() = default;

RedisClusterStore::Node& RedisClusterStore::node(const ClusterNodeAddress& address) {
  std::unique_ptr<Node>& slot = nodes_[address.name()];
  if (!slot) {
    RedisUrl url = options_.seeds.front();  // the credentials
    url.host = address.host;
    url.port = address.port;
    url.db = 0;  // a cluster has only database 0
    slot = std::make_unique<Node>(address, std::move(url),
                                  RedisConnectionOptions{options_.connect_timeout, options_.io_timeout}, options_);
  }
  return *slot;
}

RedisClusterStore::Node& RedisClusterStore::node(int index) { return node(map_->nodes()[static_cast<size_t>(index)]); }

void RedisClusterStore::node_failed(Node& n) {
  ++stats_.node_failures;
  error_ = fmt::format("cluster node {}: {}", n.address.name(), n.conn.error());
  n.breaker.on_failure(n.conn.error());
  map_stale_ = true;
}

bool RedisClusterStore::connect(Node& n) {
  if (n.conn.connected()) return true;
  if (!n.conn.connect()) {
    node_failed(n);
    return false;
  }
  if (options_.read_from_replicas) {
    // Lets a replica answer reads of its master's slots (a master ignores it).
    RedisReply r = n.conn.command({"READONLY"});
    if (!r) {
      node_failed(n);
      return false;
    }
  }
  return true;
}

bool RedisClusterStore::some_master_up() {
  if (!map_) return false;
  for (int m : map_->masters())
    if (!node(m).breaker.open()) return true;
  return false;
}

int RedisClusterStore::route(Op op, int slot) {
  const int master = map_->master_of(slot);
  if (op == Op::kSet || !options_.read_from_replicas) return master;
  const std::span<const int> replicas = map_->replicas_of(slot);
  for (size_t k = 0; k < replicas.size(); ++k) {
    const int r = replicas[(rotation_ + k) % replicas.size()];
    if (node(r).breaker.allow()) {
      ++rotation_;
      return r;
    }
  }
  return master;
}

void RedisClusterStore::refresh_if_due() {
  if (map_ && !map_stale_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_map_read_) return;
  next_map_read_ = now + options_.refresh_interval;
  read_map();
}

bool RedisClusterStore::read_map() {
  // Ask the nodes of the current map (masters first), then the seeds; the first slot map wins.
  std::vector<ClusterNodeAddress> ask;
  if (map_) {
    for (int m : map_->masters()) ask.push_back(map_->nodes()[static_cast<size_t>(m)]);
    for (const ClusterNodeAddress& a : map_->nodes())
      if (std::find(ask.begin(), ask.end(), a) == ask.end()) ask.push_back(a);
  }
  for (const RedisUrl& s : options_.seeds) {
    ClusterNodeAddress a{s.host, s.port};
    if (std::find(ask.begin(), ask.end(), a) == ask.end()) ask.push_back(a);
  }
  if (options_.learned)
    for (const ClusterNodeAddress& a : options_.learned->nodes())
      if (std::find(ask.begin(), ask.end(), a) == ask.end()) ask.push_back(a);
  std::string last_why;
  for (const ClusterNodeAddress& a : ask) {
    Node& n = node(a);
    if (!n.breaker.allow()) {
      last_why = fmt::format("cluster node {}: backing off after: {}", a.name(), n.breaker.reason());
      continue;
    }
    if (!connect(n)) {
      last_why = error_;
      continue;
    }
    // CLUSTER SHARDS where the server has it (Redis 7), else (or when its answer is not a map)
    // CLUSTER SLOTS.
    std::optional<ClusterTopology> t;
    std::string why;
    if (!no_cluster_shards_) {
      RedisReply r = n.conn.command({"CLUSTER", "SHARDS"});
      if (!r) {
        node_failed(n);
        last_why = error_;
        continue;
      }
      if (r->type == REDIS_REPLY_ERROR && starts_with(*r, "ERR Unknown subcommand")) no_cluster_shards_ = true;
      else t = ClusterTopology::from_cluster_shards(*r, a.host, why);
    }
    if (!t) {
      RedisReply r = n.conn.command({"CLUSTER", "SLOTS"});
      if (!r) {
        node_failed(n);
        last_why = error_;
        continue;
      }
      t = ClusterTopology::from_cluster_slots(*r, a.host, why);
    }
    if (!t) {
      last_why = fmt::format("{}: {}", a.name(), why);
      continue;
    }
    n.breaker.on_success();
    map_ = std::move(t);
    ++stats_.map_reads;
    if (options_.learned) options_.learned->remember(map_->nodes());
    // A master still failing keeps the map stale: reread until a replica has taken its slots.
    map_stale_ = false;
    for (int m : map_->masters())
      if (node(m).breaker.open()) map_stale_ = true;
    return true;
  }
  error_ = fmt::format("no slot map from the cluster ({} nodes asked): {}", ask.size(), last_why);
  return false;
}

RemoteStatus RedisClusterStore::run(Op op, std::span<const std::string> keys,
                                    std::span<const std::span<const std::byte>> values, const OnReply& on_reply) {
  const SigpipeBlockedInThisThread no_sigpipe;
  if (keys.empty()) return RemoteStatus::kOk;
  refresh_if_due();
  if (!map_) return RemoteStatus::kUnavailable;
  const size_t n = keys.size();
  std::vector<int> slot(n), ask_to(n, kNoNode), redirections(n, 0);
  for (size_t i = 0; i < n; ++i) slot[i] = cluster_key_slot(keys[i]);
  std::vector<size_t> pending(n);
  std::iota(pending.begin(), pending.end(), size_t{0});
  size_t answered = 0, skipped = 0;
  std::set<std::string> reconnected;  // nodes already given a new connection in this call
  const size_t depth = op == Op::kGet   ? std::max<size_t>(1, options_.get_pipeline_depth)
                       : op == Op::kSet ? std::max<size_t>(1, options_.set_pipeline_depth)
                                        : n;
  const size_t ahead = std::max<size_t>(1, op == Op::kGet   ? options_.get_pieces_ahead
                                           : op == Op::kSet ? options_.set_pieces_ahead
                                                            : 1);

  // One node's share of the keys: sent in pieces of `depth`, `ahead` pieces ahead of the replies
  // taken, so the node works while this thread parses.
  struct Flight {
    Node* node = nullptr;
    std::vector<size_t> keys;
    size_t sent = 0, read = 0;  // keys[0, sent) went out; keys[0, read) were answered
    std::deque<size_t> piece_ends;  // ends of the pieces in the air (at most `ahead`)
    bool reused = false, done = false;
    bool asking_answered = false;  // the key at `read` went with ASKING, whose +OK came
  };
  while (!pending.empty()) {
    std::map<int, Flight> flights;  // by node index
    for (size_t i : pending) {
      const int to = ask_to[i] != kNoNode ? ask_to[i] : route(op, slot[i]);
      if (to == kNoNode) {  // no node serves the slot (a cluster being set up or failing over)
        ++skipped;
        continue;
      }
      flights[to].keys.push_back(i);
    }
    pending.clear();
    for (auto& [index, f] : flights) f.node = &node(index);

    // A node that failed: its unanswered keys are resent once on a new connection when a kept one
    // turned out dead before answering anything (a restart); otherwise they are skipped.
    auto failed = [&](Flight& f) {
      if (f.reused && f.read == 0 && !f.node->conn.timed_out() && reconnected.insert(f.node->address.name()).second) {
        pending.insert(pending.end(), f.keys.begin() + static_cast<ptrdiff_t>(f.read), f.keys.end());
      } else {
        node_failed(*f.node);
        skipped += f.keys.size() - f.read;
      }
      f.done = true;
      f.piece_ends.clear();
    };
    auto skip_rest = [&](Flight& f) {
      skipped += f.keys.size() - f.read;
      f.done = true;
    };
    // Queues `f`'s next piece and, when `write`, writes what the socket takes now.
    auto send_piece = [&](Flight& f, bool write = true) {
      if (f.done || f.sent == f.keys.size() || f.piece_ends.size() >= ahead) return;
      Node& nd = *f.node;
      if (f.sent == 0) {
        if (!nd.breaker.allow()) return skip_rest(f);
        f.reused = nd.conn.connected();
        if (!connect(nd)) return skip_rest(f);
      }
      const size_t end = std::min(f.keys.size(), f.sent + depth);
      for (size_t k = f.sent; k < end; ++k) {
        const size_t i = f.keys[k];
        if (ask_to[i] != kNoNode) nd.conn.pipeline_append({"ASKING"});
        switch (op) {
          case Op::kExists:
            nd.conn.pipeline_append({"EXISTS", keys[i]});
            break;
          case Op::kGet:
            nd.conn.pipeline_append({"GET", keys[i]});
            break;
          case Op::kSet:  // the value is written from the caller's memory
            nd.conn.pipeline_append(
                {"SET", keys[i], std::string_view(reinterpret_cast<const char*>(values[i].data()), values[i].size())});
            break;
        }
      }
      f.sent = end;
      f.piece_ends.push_back(end);
      if (write && !nd.conn.pipeline_write()) return failed(f);  // the rest on POLLOUT
    };
    // One reply for the key at f.read (its ASKING's +OK first, when it went with one): true, with
    // the key's index, when it is the key's answer to hand on; a redirection or an unserved slot
    // is dealt with here.
    auto take_reply = [&](Flight& f, const RespReply& r, size_t& i) {
      Node& nd = *f.node;
      i = f.keys[f.read];
      if (ask_to[i] != kNoNode && !f.asking_answered) {
        f.asking_answered = true;
        return false;
      }
      f.asking_answered = false;
      ++f.read;
      if (f.read == f.piece_ends.front()) f.piece_ends.pop_front();
      const Routing routing = routing_of(r, nd.address.host);
      switch (routing.kind) {
        case Routing::kAnswer:
          break;
        case Routing::kMoved:
        case Routing::kAsk:
          if (++redirections[i] > options_.max_redirections) {
            error_ = fmt::format("more than {} redirections for a key (last: {})", options_.max_redirections, r.str);
            ++skipped;
            return false;
          }
          if (routing.kind == Routing::kMoved) {
            ++stats_.moved;
            map_->move_slot(routing.slot, routing.to);
            map_stale_ = true;  // other slots may have moved too: reread the map after this call
            ask_to[i] = kNoNode;
          } else {
            ++stats_.asked;
            ask_to[i] = map_->node_index(routing.to);
          }
          pending.push_back(i);
          return false;
        case Routing::kNotServed:
          error_ = fmt::format("cluster node {}: {}", nd.address.name(), r.str);
          map_stale_ = true;
          ++skipped;
          return false;
      }
      return true;
    };
    // Takes every reply `f`'s node has delivered and sends the pieces they complete, then hands
    // the answers on: the node works on its next commands while the caller takes the values (the
    // tier checks and copies each; handing each on as it was read measured 0.88-0.94x the loads/s).
    // The answers are views of the connection's read buffer, which nothing is read into before
    // they are handed on; a connection closed meanwhile keeps that memory (RespReader::reset).
    std::vector<std::pair<size_t, RespReply>> answers;
    auto drain = [&](Flight& f) {
      RespReply r;
      answers.clear();
      while (!f.done && !f.piece_ends.empty()) {
        const RespReader::Next got = f.node->conn.pipeline_reply(r);
        if (got == RespReader::Next::kBad) {
          failed(f);
          break;
        }
        if (got == RespReader::Next::kIncomplete) break;
        size_t i = 0;
        if (take_reply(f, r, i)) answers.emplace_back(i, r);
        send_piece(f, /*write=*/false);
      }
      if (!f.done && f.node->conn.pipeline_queued() && !f.node->conn.pipeline_write()) failed(f);
      for (const auto& [i, answer] : answers) {
        ++answered;
        on_reply(i, answer);
      }
      if (!f.done && f.read == f.keys.size()) {
        f.done = true;
        f.node->breaker.on_success();
      }
    };

    for (auto& [index, f] : flights)  // every node starts, `ahead` pieces ahead...
      for (size_t k = 0; k < ahead; ++k) send_piece(f);
    // ...and all nodes' sockets are served as they become ready, written while the kernel takes
    // more and read while replies come: a slow node holds up no other.
    std::vector<pollfd> fds;
    std::vector<Flight*> polled;
    for (;;) {
      fds.clear();
      polled.clear();
      for (auto& [index, f] : flights) {
        drain(f);
        if (f.done || f.piece_ends.empty()) continue;
        const short events = static_cast<short>(POLLIN | (f.node->conn.pipeline_queued() ? POLLOUT : 0));
        fds.push_back(pollfd{f.node->conn.fd(), events, 0});
        polled.push_back(&f);
      }
      if (fds.empty()) break;
      const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(options_.io_timeout.count()));
      if (ready < 0 && errno == EINTR) continue;
      for (size_t k = 0; k < fds.size(); ++k) {
        Flight& f = *polled[k];
        Node& nd = *f.node;
        if (ready <= 0) {  // no node answered within the timeout: the waiting ones are slow
          nd.conn.time_out();
          failed(f);
          continue;
        }
        const short got = fds[k].revents;
        if ((got & POLLOUT) && !nd.conn.pipeline_write()) failed(f);
        else if ((got & (POLLIN | POLLHUP | POLLERR)) && !nd.conn.pipeline_read()) failed(f);
      }
    }
  }
  stats_.skipped_keys += skipped;
  // A failing node turns its keys into misses; only a cluster with no master answering is down.
  if (answered == 0 && skipped > 0 && !some_master_up()) return RemoteStatus::kUnavailable;
  return RemoteStatus::kOk;
}

RemoteStatus RedisClusterStore::exists(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  present.assign(keys.size(), 0);
  BatchReplies replies(error_);
  return replies.status(
      run(Op::kExists, keys, {}, [&](size_t i, const RespReply& r) { replies.exists(i, r, present); }));
}

RemoteStatus RedisClusterStore::get(std::span<const std::string> keys,
                                    const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  BatchReplies replies(error_);
  return replies.status(run(Op::kGet, keys, {}, [&](size_t i, const RespReply& r) { replies.get(i, r, on_value); }));
}

RemoteStatus RedisClusterStore::set(std::span<const std::string> keys,
                                    std::span<const std::span<const std::byte>> values, std::vector<uint8_t>& stored) {
  stored.assign(keys.size(), 0);
  BatchReplies replies(error_);
  return replies.status(run(Op::kSet, keys, values, [&](size_t i, const RespReply& r) { replies.set(i, r, stored); }));
}

RemoteStatus RedisClusterStore::ping() {
  const SigpipeBlockedInThisThread no_sigpipe;
  refresh_if_due();
  if (!map_) return RemoteStatus::kUnavailable;
  for (int m : map_->masters()) {
    Node& nd = node(m);
    if (!nd.breaker.allow() || !connect(nd)) continue;
    RedisReply r = nd.conn.command({"PING"});
    if (!r) {
      node_failed(nd);
      continue;
    }
    if (r->type == REDIS_REPLY_STATUS) return RemoteStatus::kOk;
  }
  return RemoteStatus::kUnavailable;
}

size_t RedisClusterStore::preferred_batch() const {
  constexpr size_t kPerNode = 128;
  return map_ ? kPerNode * map_->masters().size() : kPerNode;
}

std::string RedisClusterStore::master_of(std::string_view key) const {
  if (!map_) return "";
  const int m = map_->master_of(cluster_key_slot(key));
  return m == kNoNode ? "" : map_->nodes()[static_cast<size_t>(m)].name();
}

std::vector<std::string> RedisClusterStore::masters() const {
  std::vector<std::string> out;
  if (map_)
    for (int m : map_->masters()) out.push_back(map_->nodes()[static_cast<size_t>(m)].name());
  return out;
}

RemoteStoreFactory redis_cluster_store_factory(RedisClusterStoreOptions options) {
  if (!options.learned) options.learned = std::make_shared<LearnedClusterNodes>();
  return [options] { return std::make_unique<RedisClusterStore>(options); };
}

}  // namespace pagedkv::remote
