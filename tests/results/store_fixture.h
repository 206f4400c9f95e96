// A results store with one sweep and a plan of named runs, for the results tests.
#pragma once

#include <string>
#include <vector>

#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"
#include "temp_dir.h"

namespace mxablate::testing {

struct StoreFixture {
  TempDir dir;
  results::ResultsStore store{dir.file("results.db")};
  int64_t sweep_id = 0;

  explicit StoreFixture(const std::vector<std::string>& run_ids = {"run-a"},
                        std::optional<double> target = std::nullopt) {
    results::SweepRecord s;
    s.name = "sweep-1";
    s.recipe_path = "recipe.yaml";
    s.recipe_text = "name: sweep-1";
    s.runs_dir = dir.path().string();
    s.target_val_loss = target;
    sweep_id = store.register_sweep(s);
    std::vector<results::PlannedRun> plan;
    int i = 0;
    for (const auto& id : run_ids) {
      results::PlannedRun r;
      r.run_id = id;
      r.arm = i % 2 == 0 ? "base" : "fp4";
      r.arm_index = i % 2;
      r.config_json = "{}";
      r.run_dir = (dir.path() / id).string();
      r.max_tokens = 1000;
      r.axes = {{"seed", std::to_string(i + 1)}};
      plan.push_back(r);
      ++i;
    }
    store.register_plan(sweep_id, plan);
  }

  // One value of a single-row query.
  template <typename T>
  T scalar(const std::string& sql) {
    results::Statement st(store.db(), sql);
    st.step();
    if constexpr (std::is_same_v<T, std::string>) return st.get_text(0);
    else if constexpr (std::is_same_v<T, double>) return st.get_double(0);
    else return static_cast<T>(st.get_int(0));
  }
  bool is_null(const std::string& sql) {
    results::Statement st(store.db(), sql);
    st.step();
    return st.is_null(0);
  }
};

}  // namespace mxablate::testing
