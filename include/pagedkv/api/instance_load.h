// What an engine instance reports of its load to the routers in front of it, with every
// GET /kv_events page (api/kv_events_wire.h; docs/router.md, "Load"). A router alone knows only
// the requests it placed itself: with two routers, or with clients that reach an instance
// directly, that count reads zero on a busy instance. The instance's own figures do not.
#pragma once

#include <cstdint>

namespace pagedkv::api {

struct InstanceLoad {
  int running = 0;
  int waiting = 0;  // accepted prompts not yet admitted
  int64_t kv_blocks_used = 0;  // device KV blocks held by requests
  int64_t kv_blocks_total = 0;  // the device pool's usable blocks
  int64_t waiting_blocks = 0;  // blocks the waiting prompts' uncomputed tokens will need

  // The KV the instance holds or has promised, in blocks: what the routers' cost rule adds.
  int64_t load_blocks() const { return kv_blocks_used + waiting_blocks; }
  bool operator==(const InstanceLoad&) const = default;
};

}  // namespace pagedkv::api
