#include "pagedkv/core/block_hash.h"

#include <fmt/format.h>

namespace pagedkv {

std::string BlockHash::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

}  // namespace pagedkv
