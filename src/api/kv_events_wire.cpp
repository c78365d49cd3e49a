#include "pagedkv/api/kv_events_wire.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

namespace pagedkv::api {
namespace {

using nlohmann::json;

const json& member(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) throw WireError(fmt::format("'{}' is missing", name));
  return *it;
}

uint64_t unsigned_field(const json& v, const char* name) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw WireError(fmt::format("'{}' must be a non-negative integer, got {}", name, v.dump()));
  return v.get<uint64_t>();
}

const std::string& string_field(const json& v, const char* name) {
  if (!v.is_string()) throw WireError(fmt::format("'{}' must be a string, got {}", name, v.dump()));
  return v.get_ref<const std::string&>();
}

bool bool_field(const json& v, const char* name) {
  if (!v.is_boolean()) throw WireError(fmt::format("'{}' must be a boolean, got {}", name, v.dump()));
  return v.get<bool>();
}

const json& array_field(const json& v, const char* name, size_t exact_size = 0) {
  if (!v.is_array() || (exact_size != 0 && v.size() != exact_size))
    throw WireError(exact_size
                        ? fmt::format("each of '{}' must be a list of {} items, got {}", name, exact_size, v.dump())
                        : fmt::format("'{}' must be a list, got {}", name, v.dump()));
  return v;
}

// A list of `size` items, or `size + 1` with a KV-cache group last (see the header).
const json& array_field_with_group(const json& v, const char* name, size_t size) {
  if (!v.is_array() || (v.size() != size && v.size() != size + 1))
    throw WireError(
        fmt::format("each of '{}' must be a list of {} or {} items, got {}", name, size, size + 1, v.dump()));
  return v;
}

uint16_t group_field(const json& list, size_t size, size_t num_groups) {
  if (list.size() == size) return 0;
  const uint64_t g = unsigned_field(list[size], "group");
  if (g >= std::max<size_t>(num_groups, 1))
    throw WireError(fmt::format("group {} is not one of the page's {} groups", g, std::max<size_t>(num_groups, 1)));
  return static_cast<uint16_t>(g);
}

AttentionKind parse_kind(const json& v) {
  const std::string& s = string_field(v, "kind");
  for (AttentionKind k : {AttentionKind::kFull, AttentionKind::kSlidingWindow, AttentionKind::kCrossAttention})
    if (attention_kind_name(k) == s) return k;
  throw WireError(fmt::format("unknown group kind '{}'", s));
}

int positive_int(const json& v, const char* name, uint64_t limit) {
  const uint64_t n = unsigned_field(v, name);
  if (n > limit) throw WireError(fmt::format("'{}' {} is out of range", name, n));
  return static_cast<int>(n);
}

uint64_t parse_epoch(const std::string& s) {
  if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw WireError(fmt::format("'epoch' must be 1 to 16 hex digits, got '{}'", s));
  return std::stoull(s, nullptr, 16);
}

BlockHash parse_hash(const json& v) {
  const auto h = parse_block_hash_hex(string_field(v, "hash"));
  if (!h) throw WireError(fmt::format("bad block hash {}", v.dump()));
  return *h;
}

Medium parse_medium_name(const json& v) {
  const auto m = parse_medium(string_field(v, "medium"));
  if (!m) throw WireError(fmt::format("unknown medium {}", v.dump()));
  return *m;
}

}  // namespace

json format_instance_load(const InstanceLoad& load) {
  return {{"running", load.running},
          {"waiting", load.waiting},
          {"kv_blocks_used", load.kv_blocks_used},
          {"kv_blocks_total", load.kv_blocks_total},
          {"waiting_blocks", load.waiting_blocks}};
}

std::string format_kv_events_page(const KVEventsPage& page, const PrefixHashing& hashing,
                                  const std::optional<InstanceLoad>& load) {
  json body = {{"epoch", fmt::format("{:016x}", page.epoch)},
               {"block_size", hashing.block_size},
               {"hash_algorithm", hashing.algorithm},
               {"hash_seed", hashing.seed},
               {"routing_group", hashing.routing_group},
               {"last", page.last_seq},
               {"snapshot", page.snapshot},
               {"more", page.more}};
  json groups = json::array();
  for (const KVGroupInfo& g : hashing.groups)
    groups.push_back(
        {{"kind", attention_kind_name(g.kind)}, {"sliding_window", g.sliding_window}, {"block_size", g.block_size}});
  body["groups"] = std::move(groups);
  if (load) body["load"] = format_instance_load(*load);
  if (page.snapshot) {
    json blocks = json::array();
    for (const KVSnapshotBlock& b : page.blocks) {
      json media = json::array();
      for (int m = 0; m < kNumMedia; ++m)
        if (b.media & medium_bit(static_cast<Medium>(m))) media.push_back(medium_name(static_cast<Medium>(m)));
      blocks.push_back({b.hash.hex(), std::move(media), b.group});
    }
    body["blocks"] = std::move(blocks);
  } else {
    json events = json::array();
    for (const KVEventRecord& e : page.events)
      events.push_back({e.seq, e.present ? "stored" : "removed", e.hash.hex(), medium_name(e.medium), e.group});
    body["events"] = std::move(events);
  }
  return body.dump();
}

KVEventsWirePage parse_kv_events_page(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw WireError("the page is not a JSON object");
  KVEventsWirePage out;
  KVEventsPage& p = out.page;
  p.epoch = parse_epoch(string_field(member(j, "epoch"), "epoch"));
  p.last_seq = unsigned_field(member(j, "last"), "last");
  p.snapshot = bool_field(member(j, "snapshot"), "snapshot");
  if (const auto it = j.find("more"); it != j.end()) p.more = bool_field(*it, "more");
  const uint64_t block_size = unsigned_field(member(j, "block_size"), "block_size");
  if (block_size < 1 || block_size > (1u << 20))
    throw WireError(fmt::format("'block_size' {} is out of range", block_size));
  out.hashing.block_size = static_cast<int>(block_size);
  out.hashing.algorithm = string_field(member(j, "hash_algorithm"), "hash_algorithm");
  out.hashing.seed = unsigned_field(member(j, "hash_seed"), "hash_seed");
  if (const auto it = j.find("groups"); it != j.end()) {
    for (const json& g : array_field(*it, "groups")) {
      if (!g.is_object()) throw WireError(fmt::format("each of 'groups' must be an object, got {}", g.dump()));
      KVGroupInfo info;
      info.kind = parse_kind(member(g, "kind"));
      info.sliding_window = positive_int(member(g, "sliding_window"), "sliding_window", 1u << 30);
      info.block_size = positive_int(member(g, "block_size"), "block_size", 1u << 20);
      if (info.block_size < 1 || info.block_size % out.hashing.block_size != 0)
        throw WireError(fmt::format("a group's block size {} is not a multiple of 'block_size' {}", info.block_size,
                                    out.hashing.block_size));
      out.hashing.groups.push_back(info);
    }
    if (out.hashing.groups.size() > 1024) throw WireError("more than 1024 groups");
  }
  const size_t num_groups = out.hashing.groups.size();
  if (const auto it = j.find("routing_group"); it != j.end()) {
    const uint64_t g = unsigned_field(*it, "routing_group");
    if (g >= std::max<size_t>(num_groups, 1))
      throw WireError(
          fmt::format("'routing_group' {} is not one of the page's {} groups", g, std::max<size_t>(num_groups, 1)));
    out.hashing.routing_group = static_cast<int>(g);
  }
  if (const auto it = j.find("load"); it != j.end()) {
    if (!it->is_object()) throw WireError(fmt::format("'load' must be an object, got {}", it->dump()));
    constexpr uint64_t kLimit = uint64_t{1} << 40;  // far beyond any pool, and no overflow when summed
    auto count = [&](const char* name) {
      const uint64_t v = unsigned_field(member(*it, name), name);
      if (v > kLimit) throw WireError(fmt::format("'load.{}' {} is out of range", name, v));
      return static_cast<int64_t>(v);
    };
    InstanceLoad& l = out.load.emplace();
    l.running = static_cast<int>(std::min<int64_t>(count("running"), 1 << 30));
    l.waiting = static_cast<int>(std::min<int64_t>(count("waiting"), 1 << 30));
    l.kv_blocks_used = count("kv_blocks_used");
    l.kv_blocks_total = count("kv_blocks_total");
    l.waiting_blocks = count("waiting_blocks");
  }
  if (p.snapshot) {
    for (const json& b : array_field(member(j, "blocks"), "blocks")) {
      array_field_with_group(b, "blocks", 2);
      MediumMask mask = 0;
      for (const json& m : array_field(b[1], "media")) {
        const MediumMask bit = medium_bit(parse_medium_name(m));
        if (mask & bit) throw WireError(fmt::format("a block lists medium {} twice", m.dump()));
        mask |= bit;
      }
      p.blocks.push_back(KVSnapshotBlock{parse_hash(b[0]), mask, group_field(b, 2, num_groups)});
    }
  } else {
    uint64_t previous = 0;
    for (const json& e : array_field(member(j, "events"), "events")) {
      array_field_with_group(e, "events", 4);
      KVEventRecord r;
      r.seq = unsigned_field(e[0], "seq");
      if (r.seq <= previous || r.seq > p.last_seq)
        throw WireError(
            fmt::format("event {} is out of order (after {}, up to 'last' {})", r.seq, previous, p.last_seq));
      previous = r.seq;
      const std::string& kind = string_field(e[1], "kind");
      if (kind != "stored" && kind != "removed") throw WireError(fmt::format("unknown event kind '{}'", kind));
      r.present = kind == "stored";
      r.hash = parse_hash(e[2]);
      r.medium = parse_medium_name(e[3]);
      r.group = group_field(e, 4, num_groups);
      p.events.push_back(r);
    }
  }
  return out;
}

}  // namespace pagedkv::api
