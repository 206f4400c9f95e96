// Runs a sweep in-process with the local executor and the fake trainer, for the fault tests.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/sweep_runner.h"
#include "mxablate/results/store.h"
#include "test_util.h"

namespace mxablate::testing {

// Sets environment variables (the fake trainer's behaviour) for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const std::string, std::string>> vars)
      : ScopedEnv(std::map<std::string, std::string>(vars)) {}
  explicit ScopedEnv(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {
    for (const auto& [k, v] : vars_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) ::unsetenv(k.c_str());
  }

 private:
  std::map<std::string, std::string> vars_;
};

// A waker whose stop requests the test controls.
class TestWaker : public orchestrator::Waker {
 public:
  std::function<int()> stops = [] { return 0; };
  void wait_for(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(5)));
  }
  int stop_requests() const override { return stops(); }
  int first_stop_signal() const override { return stops() > 0 ? SIGINT : 0; }
};

struct SweepFixture {
  TempDir dir;
  std::string recipe_text;
  orchestrator::Recipe recipe;
  orchestrator::Plan plan;
  orchestrator::SweepOptions options;
  int slots = 2;

  explicit SweepFixture(std::string text)
      : recipe_text(std::move(text)),
        recipe(orchestrator::parse_recipe(recipe_text, (dir.path() / "recipe.yaml").string())),
        plan(orchestrator::expand_recipe(recipe)) {
    options.runs_dir = dir.path() / "runs";
    options.trainer = kFakeTrainer;
    options.poll = std::chrono::milliseconds(20);
    options.grace = std::chrono::seconds(10);
  }

  orchestrator::ProgressSink* progress_sink = nullptr;  // to see the messages; none by default

  std::string db_path() const { return (dir.path() / "results.db").string(); }

  orchestrator::SweepResult run(TestWaker& waker, orchestrator::SweepHooks hooks = {},
                                results::ResultsStore* store = nullptr) {
    std::unique_ptr<results::ResultsStore> own;
    if (!store) {
      own = std::make_unique<results::ResultsStore>(db_path());
      store = own.get();
    }
    orchestrator::LocalExecutor executor(orchestrator::cpu_slots(slots));
    auto progress = orchestrator::make_progress(orchestrator::ProgressMode::kNone, stderr);
    orchestrator::SweepRunner runner(recipe, plan, *store, executor, waker,
                                     progress_sink ? *progress_sink : *progress, options);
    runner.set_hooks(std::move(hooks));
    return runner.run();
  }
  orchestrator::SweepResult run() {
    TestWaker waker;
    return run(waker);
  }

  // Read-only look at the results.
  template <typename T = int64_t>
  T scalar(const std::string& sql) {
    results::Database db(db_path(), results::Database::Mode::kReadOnly);
    results::Statement st(db, sql);
    REQUIRE(st.step());
    if constexpr (std::is_same_v<T, std::string>) return st.get_text(0);
    else if constexpr (std::is_same_v<T, double>) return st.get_double(0);
    else return static_cast<T>(st.get_int(0));
  }
  std::vector<std::vector<std::string>> rows(const std::string& sql) {
    return query_rows(db_path(), sql);
  }
  const orchestrator::RunSpec& run_of(const std::string& arm, uint64_t seed) const {
    for (const auto& r : plan.runs)
      if (r.arm == arm && r.config.train.seed == seed) return r;
    throw std::runtime_error("no such run");
  }
};

}  // namespace mxablate::testing
