// Byte sizes as people write them: "43GB" is 43 x 10^9 bytes, "40GiB" is 40 x 2^30 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagedkv {

// Parses a non-negative size: a number (decimals allowed) optionally followed by a unit
// B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive,
// with optional blanks in between. A plain number is bytes. Fractions of a byte are dropped.
// Throws ConfigError naming the text for anything else (including a bare "G", which is
// ambiguous between GB and GiB).
uint64_t parse_byte_size(std::string_view text);

// "5.24 MB", "85.52 GB", "512 B": decimal units with two decimals, for people.
std::string format_byte_size(uint64_t bytes);
// "5.00 MiB", "79.65 GiB", "512 B": the same in binary units.
std::string format_byte_size_iec(uint64_t bytes);

// "5,242,880": digits grouped by thousands, for exact figures people compare with references.
std::string format_grouped(uint64_t value);

}  // namespace pagedkv
