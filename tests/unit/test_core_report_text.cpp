// What the commands' reports share: the one progress bar and the one percentile definition.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "pagedkv/core/percentile.h"
#include "pagedkv/core/progress_bar.h"

namespace pagedkv {
namespace {

TEST(ProgressBar, FillsCellsInEighths) {
  EXPECT_EQ(progress_bar(0.0, 4), "[    ]");
  EXPECT_EQ(progress_bar(0.5, 4), "[██  ]");
  EXPECT_EQ(progress_bar(1.0, 4), "[████]");
  EXPECT_EQ(progress_bar(2.0, 2), "[██]");
  EXPECT_EQ(progress_bar(std::nan(""), 2), "[  ]");
  EXPECT_EQ(progress_bar(0.25, 1), "[▎]");
}

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

}  // namespace
}  // namespace pagedkv
