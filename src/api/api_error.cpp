#include "pagedkv/api/api_error.h"

namespace pagedkv::api {

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string ApiError::type() const {
  switch (status_) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";  // OpenAI's PermissionDeniedError
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json ApiError::to_json() const {
  nlohmann::json e{{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (!param_.empty()) e["param"] = param_;
  if (!code_.empty()) e["code"] = code_;
  return {{"error", e}};
}

}  // namespace pagedkv::api
