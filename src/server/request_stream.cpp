#include "pagedkv/server/request_stream.h"

namespace pagedkv::server {

void RequestStream::push(ChoiceUpdate update) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(update));
  }
  ready_.notify_one();
}

std::vector<ChoiceUpdate> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !pending_.empty(); });
  std::vector<ChoiceUpdate> out(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
  pending_.clear();
  return out;
}

}  // namespace pagedkv::server
