// Strong identifier types. A BlockId is not a RequestId: mixing them up is a compile error.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace pagedkv {

template <typename Tag, typename Rep>
struct StrongId {
  Rep value{};
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : value(v) {}
  constexpr auto operator<=>(const StrongId&) const = default;
};

struct BlockIdTag {};
struct RequestIdTag {};

// Physical block index into the pool (and into every KV arena built on the same pool).
using BlockId = StrongId<BlockIdTag, int32_t>;
// Caller-chosen request identifier; unique among live requests of one manager.
using RequestId = StrongId<RequestIdTag, uint64_t>;

// Token ids are plain integers: they flow in bulk through hashing and kernels.
using TokenId = int32_t;

}  // namespace pagedkv

template <typename Tag, typename Rep>
struct std::hash<pagedkv::StrongId<Tag, Rep>> {
  size_t operator()(const pagedkv::StrongId<Tag, Rep>& id) const noexcept { return std::hash<Rep>{}(id.value); }
};
