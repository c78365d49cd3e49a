// vLLM v1's Python KVCacheManager timed on the peer workload: the figures `pagedkv bench peer`
// compares against. They are measurements of another program on another day, so they are read
// from where they were published (../shared/workloads/README.md, "The Python peers' speed")
// instead of being written into the code.
#pragma once

#include <optional>
#include <string>

#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv {

// Per operation in microseconds, the whole replay in seconds.
struct PythonPeerTimes {
  double admit_us = 0, decode_us = 0, free_us = 0, hash_us = 0, whole_s = 0;
};

struct PythonPeerReference {
  PythonPeerTimes current;  // the measurement to compare against
  std::optional<PythonPeerTimes> first;  // the README's first measurement, where it lists one
};

// Reads vLLM v1's times for `hash` (the "vLLM v1 (sha256)" or "(xxhash)" column) from the
// workload README's table. Throws FormatError naming the row or column it could not read.
PythonPeerReference read_python_peer_times(const std::string& readme_path, HashAlgorithm hash);

}  // namespace pagedkv
