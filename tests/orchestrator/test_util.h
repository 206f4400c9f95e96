// Helpers for the orchestrator tests: temporary directories, recipes written to files, and
// running the mxablate / fake-trainer binaries as real processes (paths come from CMake).
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../results/temp_dir.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/orchestrator/boost_process.h"

namespace mxablate::testing {

inline const std::filesystem::path kMxablate = MXABLATE_BIN;
inline const std::filesystem::path kFakeTrainer = FAKE_TRAINER_BIN;
inline const std::filesystem::path kTestData = TEST_DATA_DIR;    // tests/orchestrator
inline const std::filesystem::path kRecipesDir = RECIPES_DIR;    // recipes/
// A manifest-only dataset (no shards) standing in for the default corpus: `plan` and `run` check
// a recipe's datasets before launching (they read manifests only), and the fake trainer reads
// no data. Every process started here gets it as MXABLATE_DEFAULT_DATASET unless `env` says.
inline const std::filesystem::path kFakeDefaultDataset = kTestData / "fake-dataset";

struct ProcessResult {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string out;
  std::string err;
  int code() const { return exit_code.value_or(-1); }
};

// A process started in the background, its output going to files under `dir`.
class Process {
 public:
  Process(const std::vector<std::string>& args, const std::filesystem::path& dir,
          const std::map<std::string, std::string>& env = {},
          const std::filesystem::path& cwd = {})
      : out_(dir / ("out-" + std::to_string(counter()) + ".txt")),
        err_(out_.string() + ".err") {
    bp::environment e = boost::this_process::environment();
    e["MXABLATE_DEFAULT_DATASET"] = kFakeDefaultDataset.string();
    for (const auto& [k, v] : env) e[k] = v;
    std::vector<std::string> rest(args.begin() + 1, args.end());
    child_ = bp::child(args[0], bp::args(rest), e, bp::std_in < bp::null,
                       bp::std_out > out_.string(), bp::std_err > err_.string(),
                       bp::start_dir = (cwd.empty() ? dir : cwd).string());
  }
  int pid() const { return child_.id(); }
  void signal(int sig) { ::kill(child_.id(), sig); }
  bool running() {
    std::error_code ec;
    return child_.running(ec);
  }
  // Waits up to `timeout`; kills the process if it has not ended by then.
  ProcessResult wait(std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    // Polled rather than child::wait_for, which in Boost 1.74 can hang when the child has
    // already exited (it waits for a SIGCHLD that was delivered before the call).
    std::error_code ec;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (child_.running(ec) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (child_.running(ec)) {
      child_.terminate(ec);
      child_.wait(ec);
    }
    ProcessResult r;
    const int status = child_.native_exit_code();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.out = read_file(out_);
    r.err = read_file(err_);
    return r;
  }

 private:
  static int counter() {
    static int n = 0;
    return ++n;
  }
  std::filesystem::path out_, err_;
  bp::child child_;
};

inline ProcessResult run_process(const std::vector<std::string>& args,
                                 const std::filesystem::path& dir,
                                 const std::map<std::string, std::string>& env = {},
                                 std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  return Process(args, dir, env).wait(timeout);
}

// Lines of `text` without the trailing empty one.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    out.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

// Every row of a query on the database at `path`, opened read-only, as text.
inline std::vector<std::vector<std::string>> query_rows(const std::string& path,
                                                        const std::string& sql) {
  results::Database db(path, results::Database::Mode::kReadOnly);
  results::Statement st(db, sql);
  std::vector<std::vector<std::string>> out;
  while (st.step()) {
    std::vector<std::string> row;
    for (int c = 0; c < st.column_count(); ++c) row.push_back(st.get_text(c));
    out.push_back(row);
  }
  return out;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Polls `condition` every 20 ms for up to `timeout`.
template <typename F>
bool eventually(F condition, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// A small recipe for the fake trainer: `steps` steps per run, evaluation every `eval_every`
// steps, checkpoints every `ckpt_every` steps; arms A and B × the given seeds.
inline std::string fake_recipe(const std::string& name, int steps = 20, int eval_every = 4,
                               int ckpt_every = 5, const std::string& seeds = "[1, 2]") {
  return "name: " + name + R"(
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: )" +
         std::to_string(steps * 1024) + R"(}
  eval: {every_tokens: )" + std::to_string(eval_every * 1024) + R"(, tokens: 1024}
  checkpoint: {every_steps: )" + std::to_string(ckpt_every) + R"(}
  telemetry: {train_every_steps: 1, quant_every_steps: 5}
arms:
  A: {}
  B: {precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}
grid:
  seed: )" + seeds + "\n";
}

}  // namespace mxablate::testing
