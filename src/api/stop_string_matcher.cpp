#include "pagedkv/api/stop_string_matcher.h"

#include <algorithm>

namespace pagedkv::api {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

size_t utf8_complete_prefix(std::string_view s) {
  // Walk back over at most three continuation bytes to the lead byte of the last sequence.
  size_t i = s.size();
  int continuation = 0;
  while (i > 0 && continuation < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return s.size();  // only continuation bytes: not UTF-8 we can repair, pass through
  const auto lead = static_cast<unsigned char>(s[i - 1]);
  int need = 0;
  if ((lead & 0xE0) == 0xC0) need = 1;
  else if ((lead & 0xF0) == 0xE0) need = 2;
  else if ((lead & 0xF8) == 0xF0) need = 3;
  else return s.size();  // ASCII or an invalid lead: nothing to wait for
  return continuation >= need ? s.size() : i - 1;
}

StopStringMatcher::Result StopStringMatcher::append(std::string_view text) {
  Result r;
  if (stopped_) return r;
  pending_.append(text);
  // The earliest stop string anywhere in the pending text (held-back text included); of several
  // starting there, the one listed first.
  size_t first = std::string::npos, matched = 0;
  for (const std::string& s : stops_)
    if (const size_t at = pending_.find(s); at < first) {
      first = at;
      matched = s.size();
    }
  if (first != std::string::npos) {
    r.text = pending_.substr(0, include_stop_ ? first + matched : first);
    r.stopped = stopped_ = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max = std::min(s.size() - 1, pending_.size());
    for (size_t k = max; k > hold; --k)
      if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
  }
  const size_t emit = utf8_complete_prefix(std::string_view(pending_).substr(0, pending_.size() - hold));
  r.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return r;
}

std::string StopStringMatcher::finish() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  pending_.clear();
  return rest;
}

}  // namespace pagedkv::api
