// vLLM's Python manager times are read from the table where they were published, not written
// into the code: the reader picks the hash's column, the first measurement's share of a cell,
// and names what is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "pagedkv/core/error.h"
#include "pagedkv/workload/python_peer_times.h"

namespace pagedkv {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("pagedkv-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

constexpr const char* kTable = R"(# workload
| counter | value |
| --- | --- |
| steps | 4,113 |

| operation | vLLM v1 (sha256) | vLLM v1 (xxhash) | nano-vllm | first measurement (sha256 / xxhash / nano) |
| --- | --- | --- | --- | --- |
| admit (lookup + allocate) | 80.5 µs | 70.25 µs | 172.4 µs | 150 / 130 / 356.2 µs |
| decode-step `allocate_slots` | 3 µs | 2.5 µs | 0.39 µs | 5 / 4 / 0.77 µs |
| free a request | 12 µs | 11 µs | 29.0 µs | 18 / 16 / 36.1 µs |
| hash a prompt's blocks at creation | 250 µs | 110 µs | (inside admit) | 440 / 190 µs |
| whole replay | 2.5 s | 1.25 s | 1.62 s | 3.5 / 2.5 / 3.07 s |
)";

TEST(PythonPeerTimes, ReadsTheHashsColumnAndTheFirstMeasurement) {
  const std::string path = write_temp("peer.md", kTable);
  const PythonPeerReference sha = read_python_peer_times(path, HashAlgorithm::kSha256);
  EXPECT_DOUBLE_EQ(sha.current.admit_us, 80.5);
  EXPECT_DOUBLE_EQ(sha.current.decode_us, 3);
  EXPECT_DOUBLE_EQ(sha.current.free_us, 12);
  EXPECT_DOUBLE_EQ(sha.current.hash_us, 250);
  EXPECT_DOUBLE_EQ(sha.current.whole_s, 2.5);
  ASSERT_TRUE(sha.first.has_value());
  EXPECT_DOUBLE_EQ(sha.first->admit_us, 150);
  EXPECT_DOUBLE_EQ(sha.first->whole_s, 3.5);

  const PythonPeerReference xx = read_python_peer_times(path, HashAlgorithm::kXxh3_128);
  EXPECT_DOUBLE_EQ(xx.current.admit_us, 70.25);
  EXPECT_DOUBLE_EQ(xx.current.whole_s, 1.25);
  ASSERT_TRUE(xx.first.has_value());
  EXPECT_DOUBLE_EQ(xx.first->hash_us, 190);
  EXPECT_DOUBLE_EQ(xx.first->decode_us, 4);
  std::filesystem::remove(path);
}

TEST(PythonPeerTimes, NamesWhatIsMissing) {
  EXPECT_THROW(read_python_peer_times("/nonexistent/README.md", HashAlgorithm::kSha256), FormatError);

  std::string no_row = kTable;
  no_row.erase(no_row.find("| whole replay"));
  const std::string path = write_temp("peer-no-row.md", no_row);
  try {
    read_python_peer_times(path, HashAlgorithm::kSha256);
    FAIL() << "a table without its whole-replay row was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("whole replay"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);

  const std::string bad = write_temp(
      "peer-bad.md", "| operation | vLLM v1 (xxhash) |\n| --- | --- |\n| admit (lookup + allocate) | fast |\n");
  try {
    read_python_peer_times(bad, HashAlgorithm::kXxh3_128);
    FAIL() << "a cell without a number was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("admit"), std::string::npos) << e.what();
  }
  std::filesystem::remove(bad);
}

TEST(PythonPeerTimes, TheWorkloadsReadmeHasEveryFigure) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const std::filesystem::path readme = std::filesystem::path(env ? env : "../shared") / "workloads/README.md";
  if (!std::filesystem::exists(readme)) GTEST_SKIP() << readme << " is absent (../shared not beside the checkout)";
  for (const HashAlgorithm hash : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128}) {
    const PythonPeerReference ref = read_python_peer_times(readme.string(), hash);
    EXPECT_GT(ref.current.admit_us, 0);
    EXPECT_GT(ref.current.decode_us, 0);
    EXPECT_GT(ref.current.free_us, 0);
    EXPECT_GT(ref.current.hash_us, 0);
    EXPECT_GT(ref.current.whole_s, 0.1);
    EXPECT_LT(ref.current.whole_s, 100);
  }
}

}  // namespace
}  // namespace pagedkv
