// RedisStore: the remote tier's RemoteStore on one Redis server, through hiredis (a blocking
// connection, pipelined commands, socket timeouts). Keys are plain strings, one command per key
// (EXISTS, GET, SET). A Redis Cluster has its own store (redis_cluster_store.h); use_redis_tier
// picks the one the URL needs.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "pagedkv/remote/redis_connection.h"
#include "pagedkv/remote/redis_url.h"
#include "pagedkv/tiers/remote_store.h"
#include "pagedkv/tiers/tiered_kv_cache.h"

namespace pagedkv::remote {

struct RedisStoreOptions {
  RedisUrl url;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds io_timeout{200};  // every read and write on the socket
  // hiredis 0.14 frees its read buffer whenever it is idle and larger than 16 KiB, so every
  // block-sized reply regrows it. Keeping it measured faster for 512 KiB values and slower for
  // 20 KiB ones (docs/tiers.md), so hiredis' default stays.
  bool keep_read_buffer = false;
  // hiredis queues a pipeline's commands in one output buffer and, after every partial write(),
  // moves what is left to its front: megabytes of memmove for a batch of 20 KiB values. A SET
  // batch is written out whenever this much is queued (replies are still read once, at the end);
  // 0 queues the whole batch, as hiredis alone does. bench_remote_tier compares the two.
  size_t write_chunk_bytes = 64 * 1024;
  // GETs go out this many at a time (their replies read before the next ones are sent): for
  // 20 KiB values, raw GETs ran at 42k-60k/s in pipelines of 32 and 10k-11k/s in pipelines of
  // 256, the depth the tier used to load a whole prefix with (docs/tiers.md).
  size_t get_pipeline_depth = 32;
};

class RedisStore final : public RemoteStore {
 public:
  explicit RedisStore(RedisStoreOptions options);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  RemoteStatus exists(std::span<const std::string> keys, std::vector<uint8_t>& present) override;
  RemoteStatus get(std::span<const std::string> keys,
                   const std::function<void(size_t, std::span<const std::byte>)>& on_value) override;
  RemoteStatus set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                   std::vector<uint8_t>& stored) override;
  RemoteStatus ping() override;
  std::string last_error() const override { return error_; }
  bool connected() const { return conn_.connected(); }

 private:
  bool connect();
  RemoteStatus fail_io();  // the connection failed (and is closed): its error becomes the store's
  // Sends what was appended and reads `n` replies, calling on_reply(i, reply) for each.
  template <typename OnReply>
  RemoteStatus read_replies(size_t n, OnReply&& on_reply);
  // Runs one call, and once more on a new connection when a kept one turned out dead.
  template <typename Attempt>
  RemoteStatus with_reconnect(Attempt&& attempt);
  RemoteStatus exists_once(std::span<const std::string> keys, std::vector<uint8_t>& present);
  RemoteStatus get_once(std::span<const std::string> keys,
                        const std::function<void(size_t, std::span<const std::byte>)>& on_value);
  RemoteStatus set_once(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                        std::vector<uint8_t>& stored);
  RemoteStatus ping_once();

  RedisStoreOptions options_;
  RedisConnection conn_;
  std::string error_;
  size_t replies_read_ = 0;  // in the current call
  bool io_timed_out_ = false;  // the current call's I/O failure was a socket timeout
};

// Connections for the remote tier (TierConfig::remote_store); each call opens a new, unconnected one.
RemoteStoreFactory redis_store_factory(RedisStoreOptions options);

// What a user says about the shared Redis tier: the CLI's --remote-* options and Python's
// remote_* arguments, turned into a TierConfig by one function.
struct RedisTierSettings {
  // redis://[user:password@]host:port[/db] (a single server, or a cluster node: detected), or
  // redis-cluster://[user:password@]host1:port1,host2:port2 (a cluster, these nodes to start from)
  std::string url;
  std::string key_prefix = "pagedkv";
  bool write_through = true;  // store each computed block at once (else when evicted)
  int timeout_ms = 200;  // connect and socket timeout
  int min_blocks = 1;  // the cost rule: ask only when this many blocks missed above
  bool read_from_replicas = false;  // on a cluster: loads and probes from the slots' replicas
};

// Turns the remote tier on in `tiers`. Throws ConfigError naming a bad setting (the URL, a
// timeout below 1 ms, a key prefix with a hash tag).
void use_redis_tier(TierConfig& tiers, const RedisTierSettings& settings);

}  // namespace pagedkv::remote
