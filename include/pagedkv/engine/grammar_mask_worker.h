// GrammarMaskWorker: one persistent thread that fills grammar masks while the engine thread runs
// the forward pass.
//
// A sampling step's matchers are final before its forward pass (each advanced when the previous
// step's token was appended), so their masks need not wait for the logits. The engine posts the
// step's constrained samples before the forward pass and waits before it samples:
//     worker.jobs() = ...;   // one per constrained sample: its matcher and a scratch mask
//     worker.post();         // the worker fills every job's mask and can_terminate
//     runner.forward(...);   // must not touch the posted matchers
//     worker.wait();         // rethrows what a fill threw; the masks are ready
// Between post() and wait() the posted matchers and jobs belong to the worker thread alone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "pagedkv/grammar/grammar_matcher.h"

namespace pagedkv {

// One constrained sample of a step.
struct GrammarMaskJob {
  size_t chunk = 0;  // the scheduled chunk that samples under it
  grammar::GrammarMatcher* matcher = nullptr;
  std::vector<uint32_t> mask;  // filled: the matcher's next-token bitmask
  bool can_terminate = false;  // filled: the matcher's can_terminate()
};

class GrammarMaskWorker {
 public:
  using Job = GrammarMaskJob;

  // Starts the thread.
  explicit GrammarMaskWorker(size_t mask_words);
  // Stops and joins the thread (after waiting for posted work).
  ~GrammarMaskWorker();
  GrammarMaskWorker(const GrammarMaskWorker&) = delete;
  GrammarMaskWorker& operator=(const GrammarMaskWorker&) = delete;

  // Clears the job list and returns a job for the next post(), its mask sized and zeroed by the
  // worker. Only while no work is posted.
  void clear() { num_jobs_ = 0; }
  Job& add(size_t chunk, grammar::GrammarMatcher& matcher);
  size_t size() const { return num_jobs_; }
  // Hands the jobs added since clear() to the thread.
  void post();
  // Blocks until the posted jobs are filled; rethrows the first exception a fill threw. A no-op
  // when nothing is posted.
  void wait();
  // The filled jobs, in the order they were added: valid after wait() until the next clear().
  Job& job(size_t i) { return jobs_[i]; }

 private:
  void run();

  const size_t mask_words_;
  std::vector<Job> jobs_;  // kept across steps: their masks' storage is reused
  size_t num_jobs_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool posted_ = false;  // jobs handed over and not yet filled
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace pagedkv
