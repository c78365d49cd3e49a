// The replies to a batch of EXISTS, GET or SET commands, read one way by the single-node and the
// cluster store: each key's answer goes to the caller, an error reply is remembered (the store's
// last error; an OOM one to a SET means the store is full), and the batch's status comes from them.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/tiers/remote_store.h"

namespace pagedkv::remote {

class BatchReplies {
 public:
  explicit BatchReplies(std::string& last_error) : last_error_(last_error) {}

  void exists(size_t i, const redisReply& r, std::vector<uint8_t>& present) {
    if (r.type == REDIS_REPLY_INTEGER) present[i] = r.integer > 0 ? 1 : 0;
    else error(r, false);
  }
  void get(size_t i, const redisReply& r, const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
    if (r.type == REDIS_REPLY_STRING)
      on_value(i, std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.str), r.len));
    else error(r, false);
  }
  void set(size_t i, const redisReply& r, std::vector<uint8_t>& stored) {
    if (r.type == REDIS_REPLY_STATUS) stored[i] = 1;
    else error(r, true);
  }

  // The batch's status: `transport` when the exchange itself failed, else what the replies said.
  RemoteStatus status(RemoteStatus transport = RemoteStatus::kOk) const {
    if (transport != RemoteStatus::kOk) return transport;
    return full_ ? RemoteStatus::kFull : failed_ ? RemoteStatus::kError : RemoteStatus::kOk;
  }

 private:
  void error(const redisReply& r, bool write) {  // a nil reply (a missing key) is no error
    if (r.type != REDIS_REPLY_ERROR) return;
    (write && std::strncmp(r.str, "OOM", 3) == 0 ? full_ : failed_) = true;
    last_error_ = r.str;
  }

  std::string& last_error_;
  bool full_ = false, failed_ = false;
};

}  // namespace pagedkv::remote
