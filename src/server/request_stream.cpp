#include "pagedkv/server/request_stream.h"

namespace pagedkv::server {

void RequestStream::push(ChoiceUpdate update) {
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    was_empty = pending_.empty();
    pending_.push_back(std::move(update));
  }
  // Only the first pending update wakes the reader: one that has not caught up yet takes the
  // later ones with it, so a server falling behind writes fewer, larger chunks and the engine
  // thread skips the futex wake.
  if (was_empty) ready_.notify_one();
}

std::vector<ChoiceUpdate> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !pending_.empty(); });
  std::vector<ChoiceUpdate> out(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
  pending_.clear();
  return out;
}

}  // namespace pagedkv::server
