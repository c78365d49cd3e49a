// An error the HTTP API reports to its client: an HTTP status and OpenAI's error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Thrown by request parsing and validation; the server turns it into the response.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace pagedkv::api {

class ApiError : public std::runtime_error {
 public:
  // `param`: the request field at fault (empty: none); `code`: a short machine-readable reason.
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's error type for the status: invalid_request_error (400, 413), authentication_error
  // (401), not_found_error (404), rate_limit_error (429), server_error (5xx).
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

}  // namespace pagedkv::api
