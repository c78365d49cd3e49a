#include "pagedkv/engine/grammar_mask_worker.h"

namespace pagedkv {

GrammarMaskWorker::GrammarMaskWorker(size_t mask_words) : mask_words_(mask_words), thread_([this] { run(); }) {}

GrammarMaskWorker::~GrammarMaskWorker() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !posted_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

GrammarMaskWorker::Job& GrammarMaskWorker::add(size_t chunk, grammar::GrammarMatcher& matcher) {
  if (num_jobs_ == jobs_.size()) jobs_.emplace_back();
  Job& j = jobs_[num_jobs_++];
  j.chunk = chunk;
  j.matcher = &matcher;
  return j;
}

void GrammarMaskWorker::post() {
  {
    std::lock_guard lock(mutex_);
    posted_ = true;
    error_ = nullptr;
  }
  cv_.notify_all();
}

void GrammarMaskWorker::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !posted_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void GrammarMaskWorker::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return posted_ || stop_; });
    if (stop_) return;
    // The engine thread touches neither the jobs nor their matchers until posted_ is false again.
    lock.unlock();
    std::exception_ptr error;
    try {
      for (size_t i = 0; i < num_jobs_; ++i) {
        Job& j = jobs_[i];
        j.mask.assign(mask_words_, 0);
        j.matcher->fill_next_token_bitmask(j.mask);
        j.can_terminate = j.matcher->can_terminate();
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    posted_ = false;
    cv_.notify_all();
  }
}

}  // namespace pagedkv
