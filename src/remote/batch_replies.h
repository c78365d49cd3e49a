// The replies to a batch of EXISTS, GET or SET commands, read one way by the single-node and the
// cluster store: each key's answer goes to the caller, an error reply is remembered (the store's
// last error; an OOM one to a SET means the store is full), and the batch's status comes from them.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/remote/resp_reader.h"
#include "pagedkv/tiers/remote_store.h"

namespace pagedkv::remote {

// A hiredis reply of one value seen as the pipeline's replies are (an array is left kNil: no
// command here answers with one).
inline RespReply resp_view(const redisReply& r) {
  RespReply v;
  switch (r.type) {
    case REDIS_REPLY_STATUS:
      v.type = RespReply::Type::kStatus;
      break;
    case REDIS_REPLY_ERROR:
      v.type = RespReply::Type::kError;
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RespReply::Type::kInteger;
      v.integer = r.integer;
      return v;
    case REDIS_REPLY_STRING:
      v.type = RespReply::Type::kString;
      break;
    default:
      return v;
  }
  v.str = std::string_view(r.str, r.len);
  return v;
}

class BatchReplies {
 public:
  explicit BatchReplies(std::string& last_error) : last_error_(last_error) {}

  void exists(size_t i, const RespReply& r, std::vector<uint8_t>& present) {
    if (r.type == RespReply::Type::kInteger) present[i] = r.integer > 0 ? 1 : 0;
    else error(r, false);
  }
  void get(size_t i, const RespReply& r, const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
    if (r.type == RespReply::Type::kString)
      on_value(i, std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.str.data()), r.str.size()));
    else error(r, false);
  }
  void set(size_t i, const RespReply& r, std::vector<uint8_t>& stored) {
    if (r.type == RespReply::Type::kStatus) stored[i] = 1;
    else error(r, true);
  }

  // The batch's status: `transport` when the exchange itself failed, else what the replies said.
  RemoteStatus status(RemoteStatus transport = RemoteStatus::kOk) const {
    if (transport != RemoteStatus::kOk) return transport;
    return full_ ? RemoteStatus::kFull : failed_ ? RemoteStatus::kError : RemoteStatus::kOk;
  }

 private:
  void error(const RespReply& r, bool write) {  // a nil reply (a missing key) is no error
    if (r.type != RespReply::Type::kError) return;
    (write && r.str.starts_with("OOM") ? full_ : failed_) = true;
    last_error_ = r.str;
  }

  std::string& last_error_;
  bool full_ = false, failed_ = false;
};

}  // namespace pagedkv::remote
