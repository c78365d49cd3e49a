// BackendPool membership while the router runs: add, remove, revive and sync racing with the
// request path (views, dispatched, finished) and the monitors; and the backends file's parser.
// Run under TSan by scripts/test.sh. The backends are closed loopback ports: their monitors fail
// and retry, which is the path a joining instance takes before it answers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/backends_file.h"

namespace pagedkv::router {
namespace {

using namespace std::chrono_literals;

BackendAddress addr(int port) { return BackendAddress::parse("http://127.0.0.1:" + std::to_string(port)); }

BackendPoolOptions fast() {
  BackendPoolOptions o;
  o.events_interval = 1ms;
  o.health_interval = 2ms;
  o.timeout = 50ms;
  return o;
}

TEST(BackendPoolMembership, AddRemoveReviveAndSyncKeepIndicesAndPins) {
  BackendPool pool({addr(1)}, fast());  // the command line's: pinned
  pool.start();
  EXPECT_EQ(pool.add(addr(2)), BackendPool::Added::kAdded);
  EXPECT_EQ(pool.add(addr(2)), BackendPool::Added::kPresent);
  EXPECT_EQ(pool.size(), 2);
  EXPECT_TRUE(pool.remove("http://127.0.0.1:2/"));
  EXPECT_FALSE(pool.remove("http://127.0.0.1:2"));
  EXPECT_FALSE(pool.remove("http://127.0.0.1:9"));
  EXPECT_TRUE(pool.states()[1].removed);
  EXPECT_EQ(pool.add(addr(2)), BackendPool::Added::kRestored);
  EXPECT_EQ(pool.size(), 2);  // the same slot: indices never name another instance
  EXPECT_EQ(pool.address(1).url, "http://127.0.0.1:2");

  // sync: the listed ones plus the pinned one.
  EXPECT_EQ(pool.sync({addr(3), addr(4)}), std::make_pair(2, 1));
  std::vector<std::string> members;
  for (const BackendState& s : pool.states())
    if (!s.removed) members.push_back(s.address.url);
  EXPECT_EQ(members, (std::vector<std::string>{"http://127.0.0.1:1", "http://127.0.0.1:3", "http://127.0.0.1:4"}));
  EXPECT_TRUE(pool.wait_until_checked(5s));
  for (const BackendState& s : pool.states()) EXPECT_FALSE(s.healthy);  // nothing listens there
  const std::vector<BackendView> views = pool.views({});
  ASSERT_EQ(views.size(), 4u);
}

TEST(BackendPoolMembership, ChurnRacesWithTheRequestPath) {
  BackendPool pool({}, fast());
  pool.start();
  std::atomic<bool> done{false};
  std::thread requests([&] {
    while (!done) {
      const std::vector<BackendView> views = pool.views({});
      for (size_t i = 0; i < views.size(); ++i) {
        pool.dispatched(static_cast<int>(i), 3);
        (void)pool.address(static_cast<int>(i)).url.size();
        pool.finished(static_cast<int>(i), 3, false);
      }
      (void)pool.states();
    }
  });
  for (int round = 0; round < 40; ++round) {
    pool.add(addr(10 + round % 5));
    if (round % 3 == 0) pool.remove(addr(10 + (round + 2) % 5).url);
    if (round % 7 == 0) pool.sync({addr(10), addr(11)});
    std::this_thread::sleep_for(1ms);
  }
  done = true;
  requests.join();
  EXPECT_LE(pool.size(), 5);
  for (const BackendState& s : pool.states()) {
    EXPECT_EQ(s.in_flight, 0);
    EXPECT_EQ(s.load_blocks, 0);
  }
  pool.stop();
}

TEST(BackendsFile, ParsesUrlsCommentsAndNamesABadLine) {
  const auto list = parse_backends_file("# fleet\n\nhttp://10.0.0.1:8000  # a\n  http://h:9/ \r\n", "f.txt");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].url, "http://10.0.0.1:8000");
  EXPECT_EQ(list[1].host, "h");
  EXPECT_EQ(list[1].port, 9);
  try {
    parse_backends_file("http://a:1\nlocalhost:2\n", "f.txt");
    FAIL() << "a bad line was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("f.txt, line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_backends_file("/nonexistent/backends.txt"), ConfigError);
}

TEST(BackendsFile, WatcherAppliesChangesAndKeepsTheLastGoodList) {
  const std::string path = testing::TempDir() + "/pagedkv-backends-" + std::to_string(::getpid()) + ".txt";
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  write("http://127.0.0.1:21\n");
  BackendPool pool({}, fast());
  BackendsList listed = read_backends_file(path);
  pool.sync(listed.addresses);
  BackendsFileWatcher watcher(path, listed.text, pool, 1h);  // polled by hand here
  auto members = [&] {
    std::vector<std::string> m;
    for (const BackendState& s : pool.states())
      if (!s.removed) m.push_back(s.address.url);
    return m;
  };
  EXPECT_TRUE(watcher.poll());
  EXPECT_EQ(members(), std::vector<std::string>{"http://127.0.0.1:21"});
  write("http://127.0.0.1:22\n");
  EXPECT_TRUE(watcher.poll());
  EXPECT_EQ(members(), std::vector<std::string>{"http://127.0.0.1:22"});
  write("http://127.0.0.1:23\nnot a url\n");
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(members(), std::vector<std::string>{"http://127.0.0.1:22"});
  std::remove(path.c_str());
  EXPECT_FALSE(watcher.poll());  // gone: the list stays
  EXPECT_EQ(members(), std::vector<std::string>{"http://127.0.0.1:22"});
}

}  // namespace
}  // namespace pagedkv::router
