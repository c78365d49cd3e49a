// Sizes as people write them: decimal and binary units, and the errors for anything else.
#include <gtest/gtest.h>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"

namespace pagedkv {
namespace {

TEST(ByteSize, DecimalAndBinaryUnits) {
  EXPECT_EQ(parse_byte_size("43GB"), 43'000'000'000u);
  EXPECT_EQ(parse_byte_size("40GiB"), 40ull << 30);
  EXPECT_EQ(parse_byte_size("512"), 512u);
  EXPECT_EQ(parse_byte_size("512B"), 512u);
  EXPECT_EQ(parse_byte_size("3KB"), 3'000u);
  EXPECT_EQ(parse_byte_size("3KiB"), 3'072u);
  EXPECT_EQ(parse_byte_size("7MB"), 7'000'000u);
  EXPECT_EQ(parse_byte_size("7MiB"), 7ull << 20);
  EXPECT_EQ(parse_byte_size("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_byte_size("2TiB"), 2ull << 40);
  EXPECT_EQ(parse_byte_size("0"), 0u);
}

TEST(ByteSize, CaseBlanksAndFractions) {
  EXPECT_EQ(parse_byte_size("43gb"), 43'000'000'000u);
  EXPECT_EQ(parse_byte_size(" 40 gib "), 40ull << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("5.24MB"), 5'240'000u);
  EXPECT_EQ(parse_byte_size("0.5KB"), 500u);
  EXPECT_EQ(parse_byte_size("1.0001B"), 1u);  // fractions of a byte are dropped
  EXPECT_EQ(parse_byte_size(".5KiB"), 512u);
  EXPECT_EQ(parse_byte_size("16TiB"), 16ull << 40);
}

TEST(ByteSize, LargestValue) {
  EXPECT_EQ(parse_byte_size("18446744073709551615"), UINT64_MAX);
  EXPECT_THROW(parse_byte_size("18446744073709551616"), ConfigError);
  EXPECT_THROW(parse_byte_size("20000000TB"), ConfigError);
}

TEST(ByteSize, GarbageIsAConfigErrorNamingTheText) {
  for (const char* bad :
       {"", "   ", "GB", "abc", "-4GB", "4 GBs", "4XB", "1.2.3GB", "4GB extra", "1e9", "4G", "4k", "nan", "0x10"}) {
    try {
      parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(ByteSize, AmbiguousUnitSaysWhatToWrite) {
  try {
    parse_byte_size("4G");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GiB"), std::string::npos) << e.what();
  }
}

TEST(ByteSize, Formatting) {
  EXPECT_EQ(format_byte_size(512), "512 B");
  EXPECT_EQ(format_byte_size(5'242'880), "5.24 MB");
  EXPECT_EQ(format_byte_size(43'000'000'000), "43.00 GB");
  EXPECT_EQ(format_byte_size_iec(5'242'880), "5.00 MiB");
  EXPECT_EQ(format_byte_size_iec(65'536), "64.00 KiB");
  EXPECT_EQ(format_grouped(0), "0");
  EXPECT_EQ(format_grouped(999), "999");
  EXPECT_EQ(format_grouped(1000), "1,000");
  EXPECT_EQ(format_grouped(5'242'880), "5,242,880");
}

}  // namespace
}  // namespace pagedkv
