// KVEventLog (GET /kv_events): set-level transitions from the engine's per-block events, paging,
// snapshots on every kind of gap, a randomized reader that must always end up with the true
// index (every page it reads goes through the JSON wire format and back), the wire parser's
// refusals, and an engine with a host tier whose event stream must agree with its census.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <random>
#include <set>
#include <tuple>

#include "golden_engine_test.h"
#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/api/kv_events_wire.h"

namespace pagedkv::api {
namespace {

KVEvent stored(uint64_t h, Medium m = Medium::kDevice, uint16_t group = 0) {
  KVEvent e;
  e.kind = KVEventKind::kBlockStored;
  e.hash = BlockHash{h, h * 7};
  e.medium = m;
  e.group = group;
  return e;
}
KVEvent removed(uint64_t h, Medium m = Medium::kDevice, uint16_t group = 0) {
  KVEvent e = stored(h, m, group);
  e.kind = KVEventKind::kBlockRemoved;
  return e;
}
KVEvent cleared() {
  KVEvent e;
  e.kind = KVEventKind::kAllBlocksCleared;
  return e;
}

// A reader's index: (hash, medium, group) triples.
using Key = std::tuple<BlockHash, Medium, uint16_t>;
using Index = std::set<Key>;

// A hybrid engine's hashing: a full group of 16-token blocks and a sliding group of 32.
const PrefixHashing kHashing{
    16,
    "xxh3_128",
    42,
    {KVGroupInfo{AttentionKind::kFull, 0, 16}, KVGroupInfo{AttentionKind::kSlidingWindow, 512, 32}},
    0};

// What a router receives: the page through the wire format.
KVEventsPage over_the_wire(const KVEventsPage& page) {
  const KVEventsWirePage wire = parse_kv_events_page(format_kv_events_page(page, kHashing));
  EXPECT_EQ(wire.hashing, kHashing);
  return wire.page;
}

// Reads the log the way the router does, from (epoch, since), into `index`.
void catch_up(const KVEventLog& log, uint64_t& epoch, uint64_t& since, Index& index, size_t max_events) {
  for (int pages = 0; pages < 100000; ++pages) {
    const KVEventsPage p = over_the_wire(log.read(epoch, since, max_events));
    if (p.snapshot) {
      index.clear();
      for (const KVSnapshotBlock& b : p.blocks)
        for (int m = 0; m < kNumMedia; ++m)
          if (b.media & medium_bit(static_cast<Medium>(m))) index.insert({b.hash, static_cast<Medium>(m), b.group});
    }
    for (const KVEventRecord& r : p.events) {
      EXPECT_EQ(r.seq, since + 1) << "sequence numbers are consecutive";
      since = r.seq;
      if (r.present) EXPECT_TRUE(index.insert({r.hash, r.medium, r.group}).second) << "stored twice without a removal";
      else EXPECT_EQ(index.erase({r.hash, r.medium, r.group}), 1u) << "removed what was not present";
    }
    epoch = p.epoch;
    since = p.last_seq;
    if (!p.more) return;
  }
  FAIL() << "the reader never caught up";
}

TEST(KVEventLog, RecordsOnlyTransitionsOfPresence) {
  KVEventLog log(100, 42);
  std::vector<KVEvent> ev{stored(1), stored(1), removed(1), stored(2, Medium::kHost), stored(3, Medium::kDevice, 1)};
  log.append(ev);
  // 1 stored twice (two copies): one record; one copy removed: still present. Group 1's block
  // is recorded with its group.
  KVEventsPage p = log.read(42, 0, 100);
  ASSERT_FALSE(p.snapshot);
  ASSERT_EQ(p.events.size(), 3u);
  EXPECT_EQ(p.events[0].hash, stored(1).hash);
  EXPECT_TRUE(p.events[0].present);
  EXPECT_EQ(p.events[1].medium, Medium::kHost);
  EXPECT_EQ(p.events[2].group, 1);
  EXPECT_EQ(p.events[0].group, 0);
  EXPECT_EQ(log.num_present(), 3u);
  log.append(std::vector<KVEvent>{removed(1), removed(9)});  // the last copy; an unknown hash
  p = log.read(42, 3, 100);
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_FALSE(p.events[0].present);
  EXPECT_EQ(p.last_seq, 4u);
  EXPECT_EQ(log.num_present(), 2u);
  // The same hash in two groups is two entries: removing group 0's copy leaves group 1's.
  log.append(std::vector<KVEvent>{stored(5, Medium::kDevice, 0), stored(5, Medium::kDevice, 1), removed(5)});
  p = log.read(42, 4, 100);
  ASSERT_EQ(p.events.size(), 3u);
  EXPECT_EQ(p.events[2].group, 0);
  EXPECT_FALSE(p.events[2].present);
  EXPECT_EQ(log.num_present(), 3u);
}

TEST(KVEventLog, AllClearedRemovesDeviceCopiesOnly) {
  KVEventLog log(100, 1);
  log.append(std::vector<KVEvent>{stored(1), stored(2), stored(2, Medium::kDisk), cleared()});
  const KVEventsPage p = log.read(1, 3, 100);
  ASSERT_EQ(p.events.size(), 2u);
  for (const KVEventRecord& r : p.events) {
    EXPECT_FALSE(r.present);
    EXPECT_EQ(r.medium, Medium::kDevice);
  }
  EXPECT_EQ(log.num_present(), 1u);  // 2 on disk
}

TEST(KVEventLog, SnapshotForNewReadersOtherEpochsLaggardsAndTheFuture) {
  KVEventLog log(4, 7);
  log.append(std::vector<KVEvent>{stored(1), stored(2)});
  EXPECT_TRUE(log.read(0, 0, 10).snapshot);  // a new reader
  EXPECT_TRUE(log.read(8, 2, 10).snapshot);  // another epoch (the instance restarted)
  EXPECT_TRUE(log.read(7, 3, 10).snapshot);  // a number this log never gave
  EXPECT_FALSE(log.read(7, 0, 10).snapshot);  // everything since 0 is still kept
  log.append(std::vector<KVEvent>{stored(3), stored(4), stored(5)});  // records 1 and 2 dropped
  EXPECT_TRUE(log.read(7, 0, 10).snapshot);
  EXPECT_FALSE(log.read(7, 1, 10).snapshot);  // 2.. are kept
  const KVEventsPage s = log.read(0, 0, 10);
  EXPECT_EQ(s.blocks.size(), 5u);
  EXPECT_EQ(s.last_seq, 5u);
  EXPECT_EQ(log.num_records(), 4u);
}

TEST(KVEventLog, PagesAreCutAtMaxEvents) {
  KVEventLog log(100, 3);
  for (uint64_t h = 1; h <= 10; ++h) log.append(std::vector<KVEvent>{stored(h)});
  KVEventsPage p = log.read(3, 0, 4);
  EXPECT_TRUE(p.more);
  EXPECT_EQ(p.events.size(), 4u);
  EXPECT_EQ(p.last_seq, 4u);
  p = log.read(3, 8, 4);
  EXPECT_FALSE(p.more);
  EXPECT_EQ(p.events.size(), 2u);
  p = log.read(3, 10, 4);
  EXPECT_FALSE(p.snapshot);
  EXPECT_TRUE(p.events.empty());
  EXPECT_EQ(p.last_seq, 10u);
}

// Model-based: random stored/removed/cleared events on a small hash space; a reader with a small
// page size that sometimes forgets everything (a router restart) or falls behind (a short log).
// After every catch-up its index equals the true set.
TEST(KVEventsWire, RoundTripsEveryField) {
  KVEventsPage events;
  events.epoch = 0xfedcba9876543210ull;
  events.last_seq = 9;
  events.more = true;
  events.events = {{7, true, BlockHash{1, 2}, Medium::kDevice, 1}, {9, false, BlockHash{~0ull, 0}, Medium::kDisk, 0}};
  const KVEventsPage e = over_the_wire(events);
  EXPECT_EQ(e.epoch, events.epoch);
  EXPECT_EQ(e.last_seq, 9u);
  EXPECT_TRUE(e.more && !e.snapshot && e.blocks.empty());
  ASSERT_EQ(e.events.size(), 2u);
  EXPECT_EQ(e.events[1].seq, 9u);
  EXPECT_FALSE(e.events[1].present);
  EXPECT_EQ(e.events[1].hash, (BlockHash{~0ull, 0}));
  EXPECT_EQ(e.events[1].medium, Medium::kDisk);
  EXPECT_EQ(e.events[0].group, 1);

  KVEventsPage snapshot;
  snapshot.epoch = 1;
  snapshot.snapshot = true;
  snapshot.blocks = {{BlockHash{3, 4}, medium_bit(Medium::kHost) | medium_bit(Medium::kDisk), 0},
                     {BlockHash{5, 6}, 0, 1}};
  const KVEventsPage s = over_the_wire(snapshot);
  EXPECT_TRUE(s.snapshot && s.events.empty());
  EXPECT_EQ(s.blocks, snapshot.blocks);
}

// A sender from before groups (no "groups", events of 4 items, blocks of 2): group 0 of one
// full-attention group.
TEST(KVEventsWire, PagesWithoutGroupsAreGroupZero) {
  const std::string head = R"({"block_size": 16, "hash_algorithm": "xxh3_128", "hash_seed": 0, "epoch": "1", )";
  const std::string hash = R"("0123456789abcdef0123456789abcdef")";
  KVEventsWirePage w = parse_kv_events_page(head + R"("last": 1, "snapshot": false, "events": [[1, "stored", )" + hash +
                                            R"(, "device"]]})");
  ASSERT_EQ(w.page.events.size(), 1u);
  EXPECT_EQ(w.page.events[0].group, 0);
  EXPECT_TRUE(w.hashing.groups.empty());
  EXPECT_EQ(w.hashing.routing_group, 0);
  EXPECT_EQ(w.hashing.routing_block_size(), 16);
  w = parse_kv_events_page(head + R"("last": 1, "snapshot": true, "blocks": [[)" + hash + R"(, ["host"]]]})");
  ASSERT_EQ(w.page.blocks.size(), 1u);
  EXPECT_EQ(w.page.blocks[0].group, 0);
}

// The hashing a server publishes: every group, and the first full-attention one for routers.
TEST(KVEventsWire, PrefixHashingNamesTheGroupsAndTheRoutingGroup) {
  KVCacheConfig cache;
  cache.num_blocks = 8;
  cache.groups = {
      KVCacheGroupSpec{KVCacheSpec{.kind = AttentionKind::kSlidingWindow, .block_size = 32, .sliding_window = 100}, 2},
      KVCacheGroupSpec{KVCacheSpec{.kind = AttentionKind::kFull, .block_size = 16}, 2}};
  const PrefixHashing h = prefix_hashing_for(cache, "sha256", 7);
  EXPECT_EQ(h.block_size, 16);
  EXPECT_EQ(h.routing_group, 1);
  EXPECT_EQ(h.routing_block_size(), 16);
  ASSERT_EQ(h.groups.size(), 2u);
  EXPECT_EQ(h.groups[0], (KVGroupInfo{AttentionKind::kSlidingWindow, 100, 32}));
  const KVEventsWirePage w = parse_kv_events_page(format_kv_events_page(KVEventsPage{}, h));
  EXPECT_EQ(w.hashing, h);
}

TEST(KVEventsWire, RefusesMalformedPages) {
  const std::string head = R"("block_size": 16, "hash_algorithm": "xxh3_128", "hash_seed": 0, )";
  const std::string hash = R"("0123456789abcdef0123456789abcdef")";
  for (
      const std::string& body : {
          std::string("[]"),
          std::string("{"),
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false})",  // no events
          "{" + head + R"("epoch": "-1", "last": 1, "snapshot": false, "events": []})",  // not hex
          "{" + head + R"("epoch": "0x1", "last": 1, "snapshot": false, "events": []})",
          "{" + head + R"("epoch": "12345678901234567", "last": 1, "snapshot": false, "events": []})",
          "{" + head + R"("epoch": "1", "last": -1, "snapshot": false, "events": []})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": 0, "events": []})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "more": "no", "events": []})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[1, "stored", )" + hash + "]]}",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[2, "stored", )" + hash +
              R"(, "device"]]})",
          "{" + head + R"("epoch": "1", "last": 3, "snapshot": false, "events": [[2, "stored", )" + hash +
              R"(, "device"], [2, "removed", )" + hash + R"(, "device"]]})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[1, "kept", )" + hash +
              R"(, "device"]]})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[1, "stored", "xyz", "device"]]})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[1, "stored", )" + hash +
              R"(, "tape"]]})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": true, "blocks": [[)" + hash + R"(, ["host", "host"]]]})",
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": true, "blocks": {"a": 1}})",
          std::string(
              R"({"block_size": 0, "hash_algorithm": "xxh3_128", "hash_seed": 0, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})"),
          // groups: an event's group that the page does not list, an unknown kind, a block size
          // that is not a multiple of the hash block, a routing group out of range
          "{" + head + R"("epoch": "1", "last": 1, "snapshot": false, "events": [[1, "stored", )" + hash +
              R"(, "device", 1]]})",
          "{" + head +
              R"("groups": [{"kind": "full", "sliding_window": 0, "block_size": 16}], "epoch": "1", "last": 1, "snapshot": true, "blocks": [[)" +
              hash + R"(, ["host"], 1]]})",
          "{" + head +
              R"("groups": [{"kind": "mamba", "sliding_window": 0, "block_size": 16}], "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head +
              R"("groups": [{"kind": "full", "sliding_window": 0, "block_size": 24}], "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head +
              R"("groups": [{"kind": "full", "block_size": 16}], "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head + R"("routing_group": 2, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          // load: not an object, a field missing, negative, or beyond any pool
          "{" + head + R"("load": 3, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head +
              R"("load": {"running": 1, "waiting": 0, "kv_blocks_used": 2, "kv_blocks_total": 9}, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head +
              R"("load": {"running": -1, "waiting": 0, "kv_blocks_used": 2, "kv_blocks_total": 9, "waiting_blocks": 0}, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
          "{" + head +
              R"("load": {"running": 1, "waiting": 0, "kv_blocks_used": 18446744073709551615, "kv_blocks_total": 9, "waiting_blocks": 0}, "epoch": "1", "last": 0, "snapshot": true, "blocks": []})",
      }) {
    EXPECT_THROW(parse_kv_events_page(body), WireError) << body;
  }
}

// An instance's load rides on its pages: written, read back equal; absent when not given.
TEST(KVEventsWire, LoadRoundTrips) {
  const InstanceLoad load{3, 2, 120, 4096, 17};
  const KVEventsWirePage with = parse_kv_events_page(format_kv_events_page(KVEventsPage{}, kHashing, load));
  ASSERT_TRUE(with.load.has_value());
  EXPECT_EQ(*with.load, load);
  EXPECT_EQ(with.load->load_blocks(), 137);
  EXPECT_FALSE(parse_kv_events_page(format_kv_events_page(KVEventsPage{}, kHashing)).load.has_value());
}

TEST(KVEventLog, RandomReaderAlwaysConverges) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    KVEventLog log(16 + seed * 8, 0);
    std::map<Key, int> copies;  // the truth
    uint64_t epoch = 0, since = 0;
    Index index;
    for (int round = 0; round < 300; ++round) {
      std::vector<KVEvent> batch;
      const int n = static_cast<int>(rng() % 12);
      for (int k = 0; k < n; ++k) {
        const uint64_t h = 1 + rng() % 20;
        const Medium m = static_cast<Medium>(rng() % 3);
        const auto g = static_cast<uint16_t>(rng() % 2);  // a hybrid model's two groups
        const int what = static_cast<int>(rng() % 100);
        if (what < 55) {
          batch.push_back(stored(h, m, g));
          ++copies[{stored(h).hash, m, g}];
        } else if (what < 99) {
          auto it = copies.find({stored(h).hash, m, g});
          if (it == copies.end()) continue;  // the engine never removes what it did not store
          batch.push_back(removed(h, m, g));
          if (--it->second == 0) copies.erase(it);
        } else {
          batch.push_back(cleared());
          std::erase_if(copies, [](const auto& c) { return std::get<1>(c.first) == Medium::kDevice; });
        }
      }
      log.append(batch);
      if (rng() % 50 == 0) epoch = 0, since = 0, index.clear();  // the router restarted
      if (rng() % 3 == 0) continue;  // reads less often than appends
      catch_up(log, epoch, since, index, 1 + rng() % 7);
      Index truth;
      for (const auto& [key, count] : copies) truth.insert(key);
      ASSERT_EQ(index, truth) << "seed " << seed << " round " << round;
    }
  }
}

// The engine thread appends while HTTP threads read (also run under TSan, scripts/test.sh): every
// reader ends with the writer's final set.
TEST(KVEventLog, ConcurrentReadersConverge) {
  KVEventLog log(64, 11);
  std::atomic<bool> done{false};
  std::map<Key, int> copies;
  std::thread writer([&] {
    std::mt19937_64 rng(2);
    for (int round = 0; round < 3000; ++round) {
      const uint64_t h = 1 + rng() % 30;
      const Medium m = static_cast<Medium>(rng() % 3);
      auto it = copies.find({stored(h).hash, m, 0});
      if (it != copies.end() && rng() % 2) {
        log.append(std::vector<KVEvent>{removed(h, m)});
        if (--it->second == 0) copies.erase(it);
      } else {
        log.append(std::vector<KVEvent>{stored(h, m)});
        ++copies[{stored(h).hash, m, 0}];
      }
    }
    done = true;
  });
  std::vector<Index> finals(2);
  std::vector<std::thread> readers;
  for (size_t r = 0; r < finals.size(); ++r)
    readers.emplace_back([&, r] {
      uint64_t epoch = 0, since = 0;
      Index index;
      while (!done) catch_up(log, epoch, since, index, 5 + r);
      catch_up(log, epoch, since, index, 5 + r);
      finals[r] = index;
    });
  writer.join();
  for (std::thread& t : readers) t.join();
  Index truth;
  for (const auto& [key, count] : copies) truth.insert(key);
  for (const Index& f : finals) EXPECT_EQ(f, truth);
}

class EngineKVEventsTest : public testing::GoldenEngineTest {};

// The engine's event stream, applied incrementally, must describe exactly what its census sees
// at the end: the device pool and a small host tier, with evictions in both.
TEST_F(EngineKVEventsTest, EventsAgreeWithTheCensus) {
  EngineConfig cfg;
  cfg.num_blocks = 24;
  cfg.enable_kv_events = true;
  cfg.check_invariants = true;
  cfg.record_block_usage = false;
  cfg.tiers.host_cache_bytes = 1u << 20;
  LLMEngine engine(*model_, cfg);
  ASSERT_NE(engine.tiers(), nullptr);
  KVEventLog streamed(1u << 20, 5);
  streamed.append(engine.cached_blocks());
  std::mt19937_64 rng(3);
  const char* texts[] = {"Once upon a time", "Tom and Lily went to the beach", "The little dog", "One day, a girl"};
  for (int i = 0; i < 40; ++i) {
    GenerationRequest g;
    g.prompt = tokenizer_->encode(std::string(texts[rng() % 4]) + std::string(rng() % 40, 'a'), true);
    g.sampling.temperature = 0;
    g.stop.max_tokens = 8 + static_cast<int>(rng() % 24);
    engine.add_request(std::move(g));
    if (i % 3 == 0) engine.step();
    streamed.append(engine.take_kv_events());
  }
  while (engine.has_unfinished()) {
    engine.step();
    streamed.append(engine.take_kv_events());
  }
  if (engine.tiers()) engine.tiers()->drain(), engine.tiers()->poll();
  engine.step();
  streamed.append(engine.take_kv_events());
  KVEventLog census(16, 6);
  census.append(engine.cached_blocks());
  auto as_set = [](const KVEventsPage& p) {
    std::set<std::tuple<BlockHash, MediumMask, uint16_t>> s;
    for (const KVSnapshotBlock& b : p.blocks) s.insert({b.hash, b.media, b.group});
    return s;
  };
  const auto host = engine.tiers()->host()->num_cached_blocks();
  EXPECT_GT(host, 0) << "the test should push blocks down to the host tier";
  EXPECT_EQ(as_set(streamed.read(0, 0, 1)), as_set(census.read(0, 0, 1)));
}

}  // namespace
}  // namespace pagedkv::api
