// BackendsFile: the router's backends listed in a file that operators (or a deployment tool)
// rewrite while the router runs — one http://host:port a line, blank lines and '#' comments
// ignored. A watcher reads it every interval and, when its text changed, makes the pool's
// members the listed addresses plus the command line's (BackendPool::sync). A file that cannot
// be read or holds a bad line changes nothing: the error is logged and the last good list stays.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/router/backend_pool.h"

namespace pagedkv::router {

// A backends file as read: its text (to notice changes) and its addresses.
struct BackendsList {
  std::string text;
  std::vector<BackendAddress> addresses;
};

// Throw ConfigError naming the file and line (or that it cannot be read).
std::vector<BackendAddress> parse_backends_file(const std::string& text, const std::string& path);
BackendsList read_backends_file(const std::string& path);

class BackendsFileWatcher {
 public:
  // `applied_text`: the file's text as already applied to the pool (the next change is news).
  BackendsFileWatcher(std::string path, std::string applied_text, BackendPool& pool,
                      std::chrono::milliseconds interval);
  ~BackendsFileWatcher();  // stop()
  BackendsFileWatcher(const BackendsFileWatcher&) = delete;
  BackendsFileWatcher& operator=(const BackendsFileWatcher&) = delete;

  void start();
  void stop();
  // Reads the file once and applies it if its text changed; false if it could not be applied.
  bool poll();

 private:
  const std::string path_;
  std::string applied_text_;
  std::string last_error_;  // logged once until the file changes again
  BackendPool& pool_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace pagedkv::router
