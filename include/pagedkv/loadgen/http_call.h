// One blocking HTTP call with libcurl, for the load generator's set-up requests (/v1/models,
// /tokenize, /metrics). The benchmark's own requests run concurrently on curl's multi interface
// (serve_benchmark.cpp).
#pragma once

#include <string>

namespace pagedkv::loadgen {

struct HttpReply {
  long status = 0;
  std::string body;
};

// `method` is GET or POST (a JSON `body`); `api_key` non-empty adds "Authorization: Bearer".
// Throws Error naming the URL when the server cannot be reached or does not answer in time.
HttpReply http_call(const std::string& method, const std::string& url, const std::string& body = "",
                    const std::string& api_key = "", double timeout_s = 60);

}  // namespace pagedkv::loadgen
