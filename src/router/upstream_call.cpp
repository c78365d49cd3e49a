#include "pagedkv/router/upstream_call.h"

#include <httplib.h>

#include "pagedkv/api/request_id.h"

namespace pagedkv::router {

UpstreamCall::UpstreamCall(const BackendAddress& backend, std::string path, std::string body, const UpstreamOptions& options,
                           std::string request_id)
    : client_(std::make_unique<httplib::Client>(backend.host, backend.port)) {
  client_->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.connect_timeout));
  client_->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.read_timeout));
  client_->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.connect_timeout) * 10);
  client_->set_tcp_nodelay(true);
  thread_ = std::thread([this, p = std::move(path), b = std::move(body), k = options.api_key, id = std::move(request_id)]() mutable {
    run(std::move(p), std::move(b), std::move(k), std::move(id));
  });
}

UpstreamCall::~UpstreamCall() {
  cancel();
  thread_.join();
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
  const bool ok = client_->send(req, res, error);
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
  changed_.wait_for(lock, timeout, [this] { return !body_.empty() || state_ == State::kDone || state_ == State::kFailed; });
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
  {
    std::lock_guard lock(mutex_);
    if (state_ == State::kDone || state_ == State::kFailed) return;
    cancelled_ = true;
  }
  client_->stop();  // shuts the socket down: a blocked read returns at once
}

}  // namespace pagedkv::router
