#include "pagedkv/remote/sigpipe_blocked.h"

#include <pthread.h>

#include <cerrno>

namespace pagedkv::remote {

SigpipeBlockedInThisThread::SigpipeBlockedInThisThread() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  already_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
}

SigpipeBlockedInThisThread::~SigpipeBlockedInThisThread() {
  const int saved_errno = errno;
  sigset_t pending;
  if (!already_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    const timespec no_wait{};
    while (sigtimedwait(&pipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  errno = saved_errno;
}

}  // namespace pagedkv::remote
