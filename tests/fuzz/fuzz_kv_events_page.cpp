// libFuzzer target: the GET /kv_events page a router reads from each backend
// (api/kv_events_wire.h). Any input must end in a page or a WireError; a page the parser
// accepts keeps the promises the router relies on (events numbered in increasing order up to
// `last`, a snapshot carries blocks and no events) and survives formatting and parsing again
// unchanged. Built and run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "pagedkv/api/kv_events_wire.h"

namespace {

using namespace pagedkv;
using namespace pagedkv::api;

using pagedkv::fuzz::check;

bool same(const KVEventsPage& a, const KVEventsPage& b) {
  if (a.epoch != b.epoch || a.last_seq != b.last_seq || a.snapshot != b.snapshot || a.more != b.more ||
      a.blocks != b.blocks || a.events.size() != b.events.size())
    return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const KVEventRecord &x = a.events[i], &y = b.events[i];
    if (x.seq != y.seq || x.present != y.present || x.hash != y.hash || x.medium != y.medium) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  KVEventsWirePage wire;
  try {
    wire = parse_kv_events_page(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const WireError&) {
    return 0;
  }
  const KVEventsPage& p = wire.page;
  check(wire.hashing.block_size >= 1);
  check(!p.snapshot || p.events.empty());
  check(p.snapshot || p.blocks.empty());
  uint64_t previous = 0;
  for (const KVEventRecord& e : p.events) {
    check(e.seq > previous && e.seq <= p.last_seq);
    previous = e.seq;
  }
  if (wire.load) check(wire.load->load_blocks() >= 0);
  const KVEventsWirePage again = parse_kv_events_page(format_kv_events_page(p, wire.hashing, wire.load));
  check(again.hashing == wire.hashing && same(again.page, p) && again.load == wire.load);
  return 0;
}
