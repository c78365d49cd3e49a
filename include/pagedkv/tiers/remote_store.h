// RemoteStore: what the remote tier needs from a shared key-value store (Redis in src/remote/),
// so that the tiers and the engine depend on no client library.
//
// One object is one connection, used by one thread at a time (a RemoteTier lane). Every call is
// pipelined over its keys (one command per key, so a cluster that shards keys across nodes can
// serve it), bounded by the store's own timeout, and reports how the store answered as a whole.
// Implementations connect lazily and reconnect on the next call after a failure.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pagedkv {

enum class RemoteStatus : uint8_t {
  kOk,
  kUnavailable,  // connect, read or write failed or timed out: the connection is dropped
  kFull,  // the store refused a write for memory (Redis: OOM under maxmemory noeviction)
  kError,  // another error reply (wrong type, no permission): the call failed, the link is fine
};

class RemoteStore {
 public:
  virtual ~RemoteStore() = default;
  // present[i] = 1 when keys[i] exists.
  virtual RemoteStatus exists(std::span<const std::string> keys, std::vector<uint8_t>& present) = 0;
  // Calls on_value(i, bytes) for each key found, in order, with bytes valid during the call only.
  virtual RemoteStatus get(std::span<const std::string> keys,
                           const std::function<void(size_t, std::span<const std::byte>)>& on_value) = 0;
  // Stores values[i] under keys[i]; stored[i] = 1 for each the store accepted. kFull when any
  // was refused for memory.
  virtual RemoteStatus set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                           std::vector<uint8_t>& stored) = 0;
  // A round trip (connecting first if needed): kOk when the store answers.
  virtual RemoteStatus ping() = 0;
  // The last failure, for logs and stats ("connection refused", "OOM command not allowed...").
  virtual std::string last_error() const = 0;
  // How many keys one call should carry to fill the store's pipelines (a sharded store pipelines
  // to each node a share of a call's keys); 0: no preference, the caller's batch size stands.
  virtual size_t preferred_batch() const { return 0; }
};

// Opens a new, not yet connected store; called once per RemoteTier lane.
using RemoteStoreFactory = std::function<std::unique_ptr<RemoteStore>()>;

}  // namespace pagedkv
