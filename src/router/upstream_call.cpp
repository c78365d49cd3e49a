#include "pagedkv/router/upstream_call.h"

#include <httplib.h>

#include "pagedkv/api/request_id.h"

namespace pagedkv::router {

namespace {

std::unique_ptr<httplib::Client> new_client(const BackendAddress& backend, const UpstreamOptions& options,
                                            bool keep_alive) {
  auto client = std::make_unique<httplib::Client>(backend.host, backend.port);
  client->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.connect_timeout));
  client->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.read_timeout));
  client->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.connect_timeout) * 10);
  client->set_tcp_nodelay(true);
  client->set_keep_alive(keep_alive);
  return client;
}

}  // namespace

UpstreamCall::UpstreamCall(const BackendAddress& backend, std::string path, std::string body,
                           const UpstreamOptions& options, std::string request_id, ConnectionPool* pool)
    : backend_(backend), options_(options), pool_(pool) {
  if (pool_) client_ = pool_->take(backend_);
  reused_connection_ = client_ != nullptr;
  if (!client_) client_ = new_client(backend_, options_, pool_ != nullptr);
  thread_ = std::thread(
      [this, p = std::move(path), b = std::move(body), k = options.api_key, id = std::move(request_id)]() mutable {
        run(std::move(p), std::move(b), std::move(k), std::move(id));
      });
}

UpstreamCall::~UpstreamCall() {
  cancel();
  thread_.join();
  // Only a connection whose exchange ended cleanly is reused: the answer was read to its end.
  if (pool_ && state_ == State::kDone && !cancelled_) pool_->give_back(backend_, std::move(client_));
}

void UpstreamCall::run(std::string path, std::string body, std::string api_key, std::string request_id) {
  httplib::Request req;
  req.method = "POST";
  req.path = std::move(path);
  req.body = std::move(body);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "application/json, text/event-stream");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  if (!request_id.empty()) req.set_header(api::kRequestIdHeader, request_id);
  req.response_handler = [this](const httplib::Response& r) {
    std::lock_guard lock(mutex_);
    status_ = r.status;
    content_type_ = r.get_header_value("Content-Type");
    retry_after_ = r.get_header_value("Retry-After");
    state_ = State::kHeaders;
    changed_.notify_all();
    return !cancelled_;
  };
  req.content_receiver = [this](const char* data, size_t size, uint64_t, uint64_t) {
    std::lock_guard lock(mutex_);
    body_.append(data, size);
    changed_.notify_all();
    return !cancelled_;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool ok = client_->send(req, res, error);
  if (!ok && reused_connection_) {
    // A kept-alive connection the backend had closed fails before any byte of answer; the
    // request was never read there. Once more, on a fresh connection.
    std::unique_lock lock(mutex_);
    if (state_ == State::kWaiting && !cancelled_) {
      retired_client_ = std::move(client_);  // cancel() may still be stopping it: freed with this call
      client_ = new_client(backend_, options_, true);
      reused_connection_ = false;
      lock.unlock();
      res = httplib::Response();
      error = httplib::Error::Success;
      ok = client_->send(req, res, error);
    }
  }
  std::lock_guard lock(mutex_);
  if (ok) {
    if (state_ == State::kWaiting) {  // no body: the handler was still called, but be safe
      status_ = res.status;
      content_type_ = res.get_header_value("Content-Type");
    }
    state_ = State::kDone;
  } else {
    never_connected_ = state_ == State::kWaiting && error == httplib::Error::Connection;
    unanswered_ = state_ == State::kWaiting && !never_connected_ && !cancelled_;
    error_ = cancelled_ ? "cancelled" : httplib::to_string(error);
    state_ = State::kFailed;
  }
  changed_.notify_all();
}

UpstreamCall::State UpstreamCall::wait_headers(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [this] { return state_ != State::kWaiting; });
  return state_;
}

std::string UpstreamCall::take_body(std::chrono::milliseconds timeout, State& state) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout,
                    [this] { return !body_.empty() || state_ == State::kDone || state_ == State::kFailed; });
  state = state_;
  return std::exchange(body_, {});
}

int UpstreamCall::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

std::string UpstreamCall::content_type() const {
  std::lock_guard lock(mutex_);
  return content_type_;
}

std::string UpstreamCall::retry_after() const {
  std::lock_guard lock(mutex_);
  return retry_after_;
}

bool UpstreamCall::never_connected() const {
  std::lock_guard lock(mutex_);
  return never_connected_;
}

bool UpstreamCall::unanswered() const {
  std::lock_guard lock(mutex_);
  return unanswered_;
}

std::string UpstreamCall::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void UpstreamCall::cancel() {
  httplib::Client* client;
  {
    std::lock_guard lock(mutex_);
    if (state_ == State::kDone || state_ == State::kFailed) return;
    cancelled_ = true;
    client = client_.get();
  }
  client->stop();  // shuts the socket down: a blocked read returns at once
}

}  // namespace pagedkv::router
