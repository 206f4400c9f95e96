// docs/design.md §10: readers (status, query) never fail with "database is locked" while the sweep
// writes. One writer ingests batches as fast as it can while readers open, query and close in a
// loop, as `mxablate status` in a shell loop would.
#include <mutex>
#include <atomic>
#include <thread>

#include "catch.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/schema.h"
#include "mxablate/results/query.h"
#include "store_fixture.h"

using namespace mxablate::results;
using mxablate::testing::StoreFixture;
using nlohmann::json;

TEST_CASE("readers never see 'database is locked' while a writer ingests") {
  StoreFixture f({"r0", "r1", "r2", "r3"});
  const std::string path = f.dir.file("results.db");
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::vector<std::string> errors;
  std::mutex errors_mutex;

  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&, t] {
      while (!done) {
        try {
          auto db = open_read_only(path);
          const char* sql = t == 0 ? "SELECT COUNT(*) FROM evals"
                          : t == 1 ? "SELECT * FROM run_summary"
                                   : "SELECT * FROM arm_summary; SELECT * FROM run_tokens_to_target";
          run_read_only_query(*db, sql);
          ++reads;
        } catch (const std::exception& e) {
          std::lock_guard lock(errors_mutex);
          errors.push_back(e.what());
        }
      }
    });

  int64_t seq = 0;
  for (int batch = 0; batch < 400; ++batch) {
    std::vector<json> events;
    for (int i = 0; i < 25; ++i) {
      ++seq;
      events.push_back({{"seq", seq}, {"kind", i % 5 == 0 ? "eval" : "train"}, {"step", seq},
                        {"tokens", seq * 64}, {"loss", 3.0}, {"val_loss", 3.1}});
    }
    ingest_events(f.store.db(), "r" + std::to_string(batch % 4), events, seq * 100);
    if (batch % 50 == 0) f.store.set_status("r0", status::kRunning);
  }
  done = true;
  for (auto& r : readers) r.join();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(reads > 30);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 2000);
}
