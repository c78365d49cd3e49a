// The JSON of one GET /kv_events page (docs/router.md, "The events"): what `pagedkv serve` writes
// and what `pagedkv router` reads, in one place so the two cannot drift apart.
//
//   {"epoch": "<16 hex digits>", "block_size": 16, "hash_algorithm": "xxh3_128", "hash_seed": 0,
//    "groups": [{"kind": "full", "sliding_window": 0, "block_size": 16},
//               {"kind": "sliding_window", "sliding_window": 512, "block_size": 16}],
//    "routing_group": 0, "last": 42, "snapshot": false, "more": false,
//    "load": {"running": 3, "waiting": 1, "kv_blocks_used": 120, "kv_blocks_total": 4096,
//             "waiting_blocks": 8},
//    "events": [[41, "stored", "<32 hex>", "device", 0], [42, "removed", "<32 hex>", "host", 1]]}
// or, for a snapshot, "blocks": [["<32 hex>", ["device", "disk"], 0], ...] instead of "events".
// An event's or block's last item is its KV-cache group (an index into "groups"). A page
// without "groups" (an older sender: group 0 only) parses as one full-attention group, and
// events of 4 items and blocks of 2 as group 0. "load" (api/instance_load.h) is optional: the
// sender's own load when it was written.
//
// The router reads these from other processes over the network, so the parser trusts nothing:
// every field has its type, the epoch is hex, events are numbered in increasing order up to
// `last`, a block lists each medium at most once. Anything else is a WireError naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "pagedkv/api/instance_load.h"
#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/core/error.h"

namespace pagedkv::api {

struct KVEventsWirePage {
  PrefixHashing hashing;  // how the sender hashes prompt blocks
  KVEventsPage page;
  std::optional<InstanceLoad> load;  // the sender's load, when the page carries it
};

class WireError : public Error {
 public:
  using Error::Error;
};

std::string format_kv_events_page(const KVEventsPage& page, const PrefixHashing& hashing,
                                  const std::optional<InstanceLoad>& load = std::nullopt);
KVEventsWirePage parse_kv_events_page(std::string_view body);
// A page's "load" object: the one JSON form of an instance's load (the router's /router/state
// reports each backend's in it too).
nlohmann::json format_instance_load(const InstanceLoad& load);

}  // namespace pagedkv::api
