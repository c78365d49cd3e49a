// The JSON of one GET /kv_events page (docs/router.md, "The events"): what `pagedkv serve` writes
// and what `pagedkv router` reads, in one place so the two cannot drift apart.
//
//   {"epoch": "<16 hex digits>", "block_size": 16, "hash_algorithm": "xxh3_128", "hash_seed": 0,
//    "last": 42, "snapshot": false, "more": false,
//    "events": [[41, "stored", "<32 hex>", "device"], [42, "removed", "<32 hex>", "host"]]}
// or, for a snapshot, "blocks": [["<32 hex>", ["device", "disk"]], ...] instead of "events".
//
// The router reads these from other processes over the network, so the parser trusts nothing:
// every field has its type, the epoch is hex, events are numbered in increasing order up to
// `last`, a block lists each medium at most once. Anything else is a WireError naming it.
#pragma once

#include <string>
#include <string_view>

#include "pagedkv/core/error.h"
#include "pagedkv/server/kv_event_log.h"

namespace pagedkv::server {

struct KVEventsWirePage {
  PrefixHashing hashing;  // how the sender hashes prompt blocks
  KVEventsPage page;
};

class WireError : public Error {
 public:
  using Error::Error;
};

std::string format_kv_events_page(const KVEventsPage& page, const PrefixHashing& hashing);
KVEventsWirePage parse_kv_events_page(std::string_view body);

}  // namespace pagedkv::server
