#include "pagedkv/remote/redis_store.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>

#include "batch_replies.h"
#include "pagedkv/core/error.h"
#include "pagedkv/remote/redis_auto_store.h"
#include "pagedkv/remote/sigpipe_blocked.h"

namespace pagedkv::remote {
namespace {

RedisConnectionOptions connection_options(const RedisStoreOptions& o) {
  return {o.connect_timeout, o.io_timeout, o.keep_read_buffer};
}

}  // namespace

RedisStore::RedisStore(RedisStoreOptions options)
    : options_(std::move(options)), conn_(options_.url, connection_options(options_)) {}

RedisStore::~RedisStore() = default;

RemoteStatus RedisStore::fail_io() {
  io_timed_out_ = conn_.timed_out();
  error_ = conn_.error();
  return RemoteStatus::kUnavailable;
}

bool RedisStore::connect() {
  if (conn_.connect()) return true;
  error_ = conn_.error();
  io_timed_out_ = false;
  return false;
}

template <typename Attempt>
RemoteStatus RedisStore::with_reconnect(Attempt&& attempt) {
  const SigpipeBlockedInThisThread no_sigpipe;
  const bool reused = conn_.connected();
  replies_read_ = 0;
  io_timed_out_ = false;
  RemoteStatus st = attempt();
  // A server restart leaves a kept connection dead, and only its next use says so (EOF, a reset,
  // EPIPE). Nothing was answered on it, and EXISTS, GET and SET of content-addressed keys are
  // idempotent: resend once on a new connection. A timeout is a slow server, not a dead socket.
  if (st == RemoteStatus::kUnavailable && reused && replies_read_ == 0 && !io_timed_out_) st = attempt();
  return st;
}

template <typename OnReply>
RemoteStatus RedisStore::read_replies(size_t n, OnReply&& on_reply) {
  for (size_t i = 0; i < n; ++i) {
    RedisReply r = conn_.read_reply();
    if (!r) return fail_io();
    ++replies_read_;
    on_reply(i, resp_view(*r));
  }
  return RemoteStatus::kOk;
}

RemoteStatus RedisStore::exists(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  return with_reconnect([&] { return exists_once(keys, present); });
}

RemoteStatus RedisStore::exists_once(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  present.assign(keys.size(), 0);
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  for (const std::string& k : keys) conn_.append({"EXISTS", k});
  BatchReplies replies(error_);
  return replies.status(
      read_replies(keys.size(), [&](size_t i, const RespReply& r) { replies.exists(i, r, present); }));
}

RemoteStatus RedisStore::get(std::span<const std::string> keys,
                             const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  return with_reconnect([&] { return get_once(keys, on_value); });
}

RemoteStatus RedisStore::get_once(std::span<const std::string> keys,
                                  const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  BatchReplies replies(error_);
  const size_t depth = std::max<size_t>(1, options_.get_pipeline_depth);
  for (size_t first = 0; first < keys.size(); first += depth) {
    const size_t n = std::min(depth, keys.size() - first);
    for (size_t i = first; i < first + n; ++i) conn_.append({"GET", keys[i]});
    const RemoteStatus st = read_replies(n, [&](size_t i, const RespReply& r) { replies.get(first + i, r, on_value); });
    if (st != RemoteStatus::kOk) return st;
  }
  return replies.status();
}

RemoteStatus RedisStore::set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                             std::vector<uint8_t>& stored) {
  return with_reconnect([&] { return set_once(keys, values, stored); });
}

RemoteStatus RedisStore::set_once(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                                  std::vector<uint8_t>& stored) {
  stored.assign(keys.size(), 0);
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  for (size_t i = 0; i < keys.size(); ++i) {
    conn_.append({"SET", keys[i], std::string_view(reinterpret_cast<const char*>(values[i].data()), values[i].size())});
    if (options_.write_chunk_bytes > 0 && conn_.queued_bytes() >= options_.write_chunk_bytes)  // see RedisStoreOptions
      if (!conn_.write_queued()) return fail_io();
  }
  BatchReplies replies(error_);
  return replies.status(read_replies(keys.size(), [&](size_t i, const RespReply& r) { replies.set(i, r, stored); }));
}

RemoteStatus RedisStore::ping() {
  return with_reconnect([&] { return ping_once(); });
}

RemoteStatus RedisStore::ping_once() {
  if (!connect()) return RemoteStatus::kUnavailable;
  conn_.append({"PING"});
  bool ok = false;
  const RemoteStatus st = read_replies(1, [&](size_t, const RespReply& r) { ok = r.type == RespReply::Type::kStatus; });
  if (st != RemoteStatus::kOk) return st;
  return ok ? RemoteStatus::kOk : RemoteStatus::kError;
}

RemoteStoreFactory redis_store_factory(RedisStoreOptions options) {
  return [options] { return std::make_unique<RedisStore>(options); };
}

void use_redis_tier(TierConfig& tiers, const RedisTierSettings& settings) {
  if (settings.timeout_ms < 1)
    throw ConfigError(fmt::format("the remote tier's timeout must be at least 1 ms, got {}", settings.timeout_ms));
  // A hash tag in the prefix would put every block in one slot, on one node of a cluster.
  if (settings.key_prefix.find_first_of("{}") != std::string::npos)
    throw ConfigError(
        fmt::format("--remote-cache-prefix '{}' must not contain '{{' or '}}' (a Redis Cluster hash tag "
                    "would put every block on one node)",
                    settings.key_prefix));
  const auto timeout = std::chrono::milliseconds(settings.timeout_ms);
  RedisClusterStoreOptions cluster;
  cluster.connect_timeout = cluster.io_timeout = timeout;
  cluster.read_from_replicas = settings.read_from_replicas;
  if (settings.url.starts_with(kRedisClusterScheme)) {
    cluster.seeds = parse_redis_cluster_url(settings.url);
    tiers.remote_description = redacted_cluster_url(cluster.seeds);
    tiers.remote_store = redis_cluster_store_factory(std::move(cluster));
  } else {
    RedisStoreOptions r;
    r.url = parse_redis_url(settings.url);
    r.connect_timeout = r.io_timeout = timeout;
    tiers.remote_description = r.url.redacted();
    tiers.remote_store = redis_auto_store_factory(std::move(r), std::move(cluster));
  }
  tiers.remote_key_prefix = settings.key_prefix;
  tiers.remote_write_through = settings.write_through;
  tiers.remote_min_blocks = settings.min_blocks;
}

}  // namespace pagedkv::remote
