// hiredis sends with write(), so writing into a socket the server has closed raises SIGPIPE, whose
// default action ends the process. A library must not change the process's signal handling, and
// that signal goes to the writing thread: SigpipeBlockedInThisThread blocks it in this thread for
// one call, and takes back a SIGPIPE the call raised (the write itself fails with EPIPE, which the
// caller handles).
#pragma once

#include <csignal>

namespace pagedkv::remote {

class SigpipeBlockedInThisThread {
 public:
  SigpipeBlockedInThisThread();
  ~SigpipeBlockedInThisThread();
  SigpipeBlockedInThisThread(const SigpipeBlockedInThisThread&) = delete;
  SigpipeBlockedInThisThread& operator=(const SigpipeBlockedInThisThread&) = delete;

 private:
  sigset_t pipe_{}, previous_{};
  bool already_pending_ = false;
};

}  // namespace pagedkv::remote
