#include "pagedkv/loadgen/http_call.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <memory>

#include "pagedkv/core/error.h"

namespace pagedkv::loadgen {
namespace {

size_t append_to_string(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

HttpReply http_call(const std::string& method, const std::string& url, const std::string& body,
                    const std::string& api_key, double timeout_s) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw Error("libcurl could not start a transfer");
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!api_key.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + api_key).c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, curl_slist_free_all);
  HttpReply reply;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) throw Error(fmt::format("cannot reach {}: {}", url, curl_easy_strerror(rc)));
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

}  // namespace pagedkv::loadgen
