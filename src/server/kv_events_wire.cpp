#include "pagedkv/server/kv_events_wire.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <utility>

namespace pagedkv::server {
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
    throw WireError(exact_size ? fmt::format("each of '{}' must be a list of {} items, got {}", name, exact_size, v.dump())
                               : fmt::format("'{}' must be a list, got {}", name, v.dump()));
  return v;
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

std::string format_kv_events_page(const KVEventsPage& page, const PrefixHashing& hashing) {
  json body = {{"epoch", fmt::format("{:016x}", page.epoch)},
               {"block_size", hashing.block_size},
               {"hash_algorithm", hashing.algorithm},
               {"hash_seed", hashing.seed},
               {"last", page.last_seq},
               {"snapshot", page.snapshot},
               {"more", page.more}};
  if (page.snapshot) {
    json blocks = json::array();
    for (const auto& [hash, mask] : page.blocks) {
      json media = json::array();
      for (int m = 0; m < kNumMedia; ++m)
        if (mask & medium_bit(static_cast<Medium>(m))) media.push_back(medium_name(static_cast<Medium>(m)));
      blocks.push_back({hash.hex(), std::move(media)});
    }
    body["blocks"] = std::move(blocks);
  } else {
    json events = json::array();
    for (const KVEventRecord& e : page.events) events.push_back({e.seq, e.present ? "stored" : "removed", e.hash.hex(), medium_name(e.medium)});
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
  if (block_size < 1 || block_size > (1u << 20)) throw WireError(fmt::format("'block_size' {} is out of range", block_size));
  out.hashing.block_size = static_cast<int>(block_size);
  out.hashing.algorithm = string_field(member(j, "hash_algorithm"), "hash_algorithm");
  out.hashing.seed = unsigned_field(member(j, "hash_seed"), "hash_seed");
  if (p.snapshot) {
    for (const json& b : array_field(member(j, "blocks"), "blocks")) {
      array_field(b, "blocks", 2);
      MediumMask mask = 0;
      for (const json& m : array_field(b[1], "media")) {
        const MediumMask bit = medium_bit(parse_medium_name(m));
        if (mask & bit) throw WireError(fmt::format("a block lists medium {} twice", m.dump()));
        mask |= bit;
      }
      p.blocks.emplace_back(parse_hash(b[0]), mask);
    }
  } else {
    uint64_t previous = 0;
    for (const json& e : array_field(member(j, "events"), "events")) {
      array_field(e, "events", 4);
      KVEventRecord r;
      r.seq = unsigned_field(e[0], "seq");
      if (r.seq <= previous || r.seq > p.last_seq)
        throw WireError(fmt::format("event {} is out of order (after {}, up to 'last' {})", r.seq, previous, p.last_seq));
      previous = r.seq;
      const std::string& kind = string_field(e[1], "kind");
      if (kind != "stored" && kind != "removed") throw WireError(fmt::format("unknown event kind '{}'", kind));
      r.present = kind == "stored";
      r.hash = parse_hash(e[2]);
      r.medium = parse_medium_name(e[3]);
      p.events.push_back(r);
    }
  }
  return out;
}

}  // namespace pagedkv::server
