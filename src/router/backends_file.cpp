#include "pagedkv/router/backends_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "pagedkv/core/error.h"

namespace pagedkv::router {
namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("backends file {}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("backends file {}: read error", path));
  return text.str();
}

}  // namespace

std::vector<BackendAddress> parse_backends_file(const std::string& text, const std::string& path) {
  std::vector<BackendAddress> out;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    try {
      out.push_back(BackendAddress::parse(line));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("backends file {}, line {}: {}", path, number, e.what()));
    }
  }
  return out;
}

BackendsList read_backends_file(const std::string& path) {
  BackendsList list{read_text_file(path), {}};
  list.addresses = parse_backends_file(list.text, path);
  return list;
}

BackendsFileWatcher::BackendsFileWatcher(std::string path, std::string applied_text, BackendPool& pool,
                                         std::chrono::milliseconds interval)
    : path_(std::move(path)), applied_text_(std::move(applied_text)), pool_(pool), interval_(interval) {}

BackendsFileWatcher::~BackendsFileWatcher() { stop(); }

void BackendsFileWatcher::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
      lock.unlock();
      poll();
      lock.lock();
    }
  });
}

void BackendsFileWatcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool BackendsFileWatcher::poll() {
  std::string text;
  try {
    text = read_text_file(path_);
    if (text == applied_text_) return true;
    const std::vector<BackendAddress> addresses = parse_backends_file(text, path_);
    const auto [added, removed] = pool_.sync(addresses);
    applied_text_ = std::move(text);
    last_error_.clear();
    fmt::print(stderr, "router: {} changed: {} backend(s) listed, {} added, {} removed\n", path_, addresses.size(),
               added, removed);
    return true;
  } catch (const Error& e) {
    if (e.what() != last_error_) fmt::print(stderr, "router: {} (keeping the backends as they are)\n", e.what());
    last_error_ = e.what();
    return false;
  }
}

}  // namespace pagedkv::router
