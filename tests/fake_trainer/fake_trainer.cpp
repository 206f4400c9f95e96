// mxablate-fake-train: speaks exactly the protocol of mxablate-train (RUN_DIR/config.json in,
// RUN_DIR/events.jsonl out with run_start / train / eval / quant_stats / checkpoint / resume /
// divergence / target_reached / run_end, checkpoints under RUN_DIR, --resume, the same exit
// codes, SIGTERM/SIGINT → checkpoint + run_end interrupted + exit 4) but trains nothing: its
// losses are a deterministic function of (seed, step, precision), so a run that is killed and
// resumed must produce exactly the evaluations of one that never was. Fault tests and the
// overhead benchmark use it to stay fast.
//
// Behaviour is chosen through environment variables, each VALUE or VALUE@SELECTORS where
// SELECTORS is a comma list of ARM, ARM/SEED or /SEED (the variable then applies only to
// matching runs):
//   MXABLATE_FAKE_STARTUP_MS=N      sleep before the first event
//   MXABLATE_FAKE_STEP_MS=N         sleep per step
//   MXABLATE_FAKE_EXIT=CODE         exit at once with CODE, writing nothing (2: "bad config")
//   MXABLATE_FAKE_CRASH_AT_STEP=S   SIGKILL itself at step S, once per run directory
//   MXABLATE_FAKE_CRASH_ALWAYS=1    … on every attempt
//   MXABLATE_FAKE_TORN_TAIL=1       … after writing half an event line
//   MXABLATE_FAKE_HANG_AT_STEP=S    stop making progress at step S
//   MXABLATE_FAKE_HANG_IGNORES_TERM=1  … and ignore SIGTERM while hanging
//   MXABLATE_FAKE_DIVERGE_AT_STEP=S non-finite loss at step S → divergence, run_end diverged, 3
//   MXABLATE_FAKE_FAIL_AT_STEP=S    run_end failed, exit 1 (an internal error it caught)
//   MXABLATE_FAKE_EVAL_MS=N         sleep per evaluation (timed as eval_s)
//   MXABLATE_FAKE_LINGER_MS=N       after run_end, sleep N ms before exiting (a real trainer's
//                                   teardown: freeing the device, process exit)
//   MXABLATE_FAKE_END_EXIT=CODE     … then exit with CODE instead of its own
//   MXABLATE_FAKE_END_CRASH=1       … then SIGKILL itself (a crash in its teardown)
// Like the real trainer it honours MXABLATE_STANDBY_FD (contract/standby.h): after its "setup"
// (the startup sleep) it waits for the orchestrator's go, or exits 4 writing nothing when the
// descriptor is closed; and its run_end reports setup_s, standby_s, train_s, eval_s and
// checkpoint_s the way the real trainer's does. Like the real trainer it reads RUN_DIR/target.json
// at each evaluation when its config fixes no target (contract/target_file.h, docs/design.md §5
// "Live targets"): it takes a valid file's target (a live_target event), reports a damaged one
// once and trains on, and with target.stop_at_target stops at its first evaluation at or below
// the target — at once when an earlier evaluation already was.
#include <algorithm>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mxablate/contract/event_log.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/standby.h"
#include "mxablate/contract/target_file.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/plan/run_fit.h"

namespace {

namespace fs = std::filesystem;
using namespace mxablate::contract;
using nlohmann::json;

volatile std::sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

struct Selected {
  const mxablate::contract::RunConfig* config;
  // The variable's value if it is set and applies to this run.
  std::optional<std::string> get(const char* name) const {
    const char* raw = std::getenv(name);
    if (!raw || !*raw) return std::nullopt;
    const std::string v = raw;
    const size_t at = v.find('@');
    if (at == std::string::npos) return v;
    const std::string seed = std::to_string(config->train.seed);
    size_t start = at + 1;
    while (start <= v.size()) {
      const size_t comma = v.find(',', start);
      const std::string sel = v.substr(start, comma == std::string::npos ? std::string::npos
                                                                         : comma - start);
      const size_t slash = sel.find('/');
      const std::string arm = sel.substr(0, slash);
      const std::string s = slash == std::string::npos ? "" : sel.substr(slash + 1);
      if ((arm.empty() || arm == config->arm) && (s.empty() || s == seed)) return v.substr(0, at);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return std::nullopt;
  }
  int64_t get_int(const char* name, int64_t fallback) const {
    const auto v = get(name);
    return v ? std::stoll(*v) : fallback;
  }
};

double unit_noise(uint64_t seed, int64_t step) {  // deterministic, in [-1, 1]
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(step) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x % 2000001) / 1000000.0 - 1.0;
}

double precision_penalty(const RunConfig& c) {
  double p = 0;
  for (const auto g : {c.precision.fprop, c.precision.dgrad, c.precision.wgrad}) {
    if (mxablate::contract::is_fp4(g)) p += 0.02;
    if (g == mxablate::contract::GemmPrecision::kFP8) p += 0.005;
  }
  if (!c.quant.stochastic_rounding.empty()) p += 0.01;
  return p;
}

double train_loss(const RunConfig& c, int64_t step) {
  return 2.5 + 5.5 * std::exp(-static_cast<double>(step) / 30.0) + precision_penalty(c) +
         0.01 * unit_noise(c.train.seed, step);
}

double val_loss(const RunConfig& c, int64_t step) {
  return 2.55 + 5.5 * std::exp(-static_cast<double>(step) / 30.0) + precision_penalty(c) +
         0.002 * unit_noise(c.train.seed, -1);
}

struct Checkpoint {
  int64_t step = 0;
  int64_t seq = 0;
};

std::optional<Checkpoint> latest_checkpoint(const fs::path& dir) {
  std::optional<Checkpoint> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints", ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    json j;
    try {
      in >> j;
    } catch (...) {
      continue;  // a checkpoint cut short by a crash is no checkpoint
    }
    const Checkpoint c{j.value("step", int64_t{0}), j.value("seq", int64_t{0})};
    if (!best || c.step > best->step) best = c;
  }
  return best;
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

[[noreturn]] void die(int code, const std::string& message) {
  std::cerr << "mxablate-fake-train: " << message << std::endl;
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  const auto process_start =
      std::chrono::steady_clock::now() -
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(mxablate::trainer::process_age_seconds().value_or(0.0)));
  std::string run_dir_arg;
  bool resume = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--run-dir" && i + 1 < argc) {
      run_dir_arg = argv[++i];
    } else if (a == "--resume") {
      resume = true;
    } else {
      die(2, "usage: mxablate-fake-train --run-dir DIR [--resume] (unknown argument " + a + ")");
    }
  }
  if (run_dir_arg.empty()) die(2, "--run-dir DIR is required");
  const fs::path dir = run_dir_arg;

  RunConfig config;
  try {
    config = read_run_config((dir / "config.json").string());
    // The real trainer's model rules (a custom shape included), before anything is written.
    (void)mxablate::trainer::runnable_model_shape(config);
  } catch (const std::exception& e) {
    die(2, e.what());
  }
  const Selected env{&config};
  if (const auto code = env.get("MXABLATE_FAKE_EXIT"))
    die(std::stoi(*code), "exiting with code " + *code + " as MXABLATE_FAKE_EXIT asks");
  std::optional<int> standby_fd;
  try {
    standby_fd = standby_fd_from_environment();
  } catch (const std::exception& e) {
    die(2, e.what());
  }

  // "Setup", then (a standby) the wait for the slot; SIGTERM still ends the process here.
  std::this_thread::sleep_for(std::chrono::milliseconds(env.get_int("MXABLATE_FAKE_STARTUP_MS", 0)));
  double standby_s = 0;
  if (standby_fd) {
    const auto waited_from = std::chrono::steady_clock::now();
    if (wait_for_release(*standby_fd) != StandbyRelease::kGo) die(4, abandoned_message());
    standby_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
  }
  std::signal(SIGTERM, on_stop);
  std::signal(SIGINT, on_stop);
  const auto started = std::chrono::steady_clock::now();
  const double setup_s =
      std::max(0.0, std::chrono::duration<double>(started - process_start).count() - standby_s);
  double eval_s = 0, checkpoint_s = 0;
  const int64_t eval_ms = env.get_int("MXABLATE_FAKE_EVAL_MS", 0);

  const int64_t gbt = config.train.global_batch_tokens;
  const auto total_steps =
      static_cast<int64_t>(std::ceil(config.train.max_tokens / static_cast<double>(gbt)));
  const int64_t eval_every =
      std::max<int64_t>(1, std::llround(config.eval.every_tokens / static_cast<double>(gbt)));
  const int64_t step_ms = env.get_int("MXABLATE_FAKE_STEP_MS", 0);
  const int64_t crash_at = env.get_int("MXABLATE_FAKE_CRASH_AT_STEP", -1);
  const int64_t hang_at = env.get_int("MXABLATE_FAKE_HANG_AT_STEP", -1);
  const int64_t diverge_at = env.get_int("MXABLATE_FAKE_DIVERGE_AT_STEP", -1);
  const int64_t fail_at = env.get_int("MXABLATE_FAKE_FAIL_AT_STEP", -1);
  const char* attempt_env = std::getenv("MXABLATE_ATTEMPT");
  const int attempt = attempt_env ? std::atoi(attempt_env) : 1;

  EventWriter log((dir / "events.jsonl").string());
  int64_t step = 0;
  const std::optional<Checkpoint> ckpt = resume ? latest_checkpoint(dir) : std::nullopt;
  if (ckpt) {
    step = ckpt->step;
    log.append(event_kind::kResume,
               {{"step", step}, {"tokens", step * gbt}, {"discard_after_seq", ckpt->seq}}, true);
  }
  const auto shape = mxablate::trainer::model_shape(config.model);
  log.append(event_kind::kRunStart,
             {{"prestarted", standby_fd.has_value()},
              {"step", step},
              {"tokens", step * gbt},
              {"attempt", attempt},
              {"device", "cpu (fake trainer)"},
              {"params", mxablate::trainer::parameter_count(shape, 4096)},
              {"versions", {{"mxablate-fake-train", 1}}},
              {"resumed", ckpt.has_value()}},
             true);

  // The target as the real trainer holds it (trainer/live_target.h): the config's, or the last
  // valid target.json; the best evaluation so far decides whether it was reached.
  std::optional<double> target = config.target.val_loss;
  std::string last_problem;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t s = eval_every; s <= step; s += eval_every) best = std::min(best, val_loss(config, s));
  bool reached = target && best <= *target;

  const auto tokens_per_s = [&](int64_t steps_done) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return secs > 0 ? static_cast<double>(steps_done * gbt) / secs : 0.0;
  };
  const int64_t first_step = step;
  const auto checkpoint = [&](int64_t at) {
    const auto checkpoint_start = std::chrono::steady_clock::now();
    fs::create_directories(dir / "checkpoints");
    const fs::path file = dir / "checkpoints" / fmt::format("step-{:08}.json", at);
    {
      std::ofstream out(file.string() + ".tmp");
      out << json{{"step", at}, {"seq", log.last_seq() + 1}}.dump() << "\n";
    }
    fs::rename(file.string() + ".tmp", file);
    log.append(event_kind::kCheckpoint,
               {{"step", at}, {"tokens", at * gbt}, {"path", file.string()}}, true);
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
      if (e.path().extension() == ".json") all.push_back(e.path());
    std::sort(all.begin(), all.end());
    while (all.size() > static_cast<size_t>(config.checkpoint.keep)) {
      fs::remove(all.front());
      all.erase(all.begin());
    }
    checkpoint_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - checkpoint_start).count();
  };
  const auto run_end = [&](const char* status, int64_t at, const std::string& reason) {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    json f{{"status", status},
           {"step", at},
           {"tokens", at * gbt},
           {"wall_s", wall},
           {"setup_s", setup_s},
           {"train_s", std::max(0.0, wall - eval_s - checkpoint_s)},
           {"eval_s", eval_s},
           {"checkpoint_s", checkpoint_s},
           {"tokens_per_s", tokens_per_s(at - first_step)},
           {"peak_rss_bytes", peak_rss_bytes()},
           {"peak_gpu_bytes", 0}};
    if (!reason.empty()) f["reason"] = reason;
    if (standby_fd) f["standby_s"] = standby_s;
    log.append(event_kind::kRunEnd, f, true);
    // The teardown after the last event (every run_end is followed by the process's exit).
    std::this_thread::sleep_for(std::chrono::milliseconds(env.get_int("MXABLATE_FAKE_LINGER_MS", 0)));
    if (env.get("MXABLATE_FAKE_END_CRASH")) ::kill(::getpid(), SIGKILL);
    if (const auto code = env.get("MXABLATE_FAKE_END_EXIT")) std::exit(std::stoi(*code));
  };

  for (step = step + 1; step <= total_steps; ++step) {
    if (g_stop) {
      checkpoint(step - 1);
      run_end(run_status::kInterrupted, step - 1, "stopped by a signal");
      return 4;
    }
    if (step == crash_at) {
      const fs::path marker = dir / fmt::format(".fake-crashed-at-{}", step);
      if (env.get("MXABLATE_FAKE_CRASH_ALWAYS") || !fs::exists(marker)) {
        std::ofstream(marker.string()) << "crashed\n";
        log.sync();
        if (env.get("MXABLATE_FAKE_TORN_TAIL")) {
          std::FILE* f = std::fopen((dir / "events.jsonl").c_str(), "ab");
          std::fputs("{\"seq\": 99999, \"kind\": \"eval\", \"val_lo", f);
          std::fclose(f);
        }
        ::kill(::getpid(), SIGKILL);
      }
    }
    if (step == hang_at) {
      if (env.get("MXABLATE_FAKE_HANG_IGNORES_TERM")) std::signal(SIGTERM, SIG_IGN);
      while (true) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (g_stop) {
          run_end(run_status::kInterrupted, step - 1, "stopped by a signal while stuck");
          return 4;
        }
      }
    }
    if (step == fail_at) {
      run_end(run_status::kFailed, step - 1, "simulated internal error");
      std::cerr << "mxablate-fake-train: simulated internal error at step " << step << std::endl;
      return 1;
    }
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    const int64_t tokens = step * gbt;
    if (step == diverge_at) {
      log.append(event_kind::kTrain, {{"step", step}, {"tokens", tokens},
                                      {"loss", std::numeric_limits<double>::quiet_NaN()},
                                      {"lr", config.train.lr}, {"grad_norm", nullptr},
                                      {"tokens_per_s", tokens_per_s(step - first_step)}});
      log.append(event_kind::kDivergence, {{"step", step}, {"tokens", tokens},
                                           {"reason", "nonfinite_loss"}, {"value", nullptr},
                                           {"severity", "fatal"}}, true);
      run_end(run_status::kDiverged, step, "nonfinite_loss");
      return 3;
    }
    if (step % config.telemetry.train_every_steps == 0)
      log.append(event_kind::kTrain,
                 {{"step", step}, {"tokens", tokens}, {"loss", train_loss(config, step)},
                  {"lr", config.train.lr}, {"grad_norm", 1.0 + 0.1 * unit_noise(7, step)},
                  {"tokens_per_s", tokens_per_s(step - first_step)}});
    if (config.telemetry.quant_every_steps > 0 && step % config.telemetry.quant_every_steps == 0)
      for (const auto& [gemm, precision] :
           {std::pair{"fprop", &config.precision.fprop}, std::pair{"dgrad", &config.precision.dgrad},
            std::pair{"wgrad", &config.precision.wgrad}})
        if (is_fp4(*precision))
          log.append(event_kind::kQuantStats,
                     {{"step", step}, {"tokens", tokens}, {"layer", 0}, {"gemm", gemm},
                      {"operand", "a"}, {"relative_error", 0.1}, {"fraction_saturated", 0.001},
                      {"fraction_flushed", 0.02}, {"mean_error", 0.0}});
    if (step % eval_every == 0 || step == total_steps) {
      const auto eval_start = std::chrono::steady_clock::now();
      if (eval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(eval_ms));
      eval_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
      const double v = val_loss(config, step);
      best = std::min(best, v);
      log.append(event_kind::kEval, {{"step", step}, {"tokens", tokens}, {"val_loss", v}}, true);
      if (!config.target.val_loss) {
        const TargetFileRead r = read_target_file(dir);
        if (r.target && target != r.target->val_loss) {
          target = r.target->val_loss;
          log.append(event_kind::kLiveTarget,
                     {{"step", step}, {"tokens", tokens}, {"val_loss", *target}}, true);
        } else if (!r.target && !r.problem.empty() && r.problem != last_problem) {
          last_problem = r.problem;
          log.append(event_kind::kLiveTarget,
                     {{"step", step}, {"tokens", tokens}, {"ignored", r.problem.substr(0, 300)}},
                     true);
        }
      }
      if (target && !reached && best <= *target) {
        reached = true;
        log.append(event_kind::kTargetReached,
                   {{"step", step}, {"tokens", tokens}, {"val_loss", best}}, true);
        if (config.target.stop_at_target) {
          run_end(run_status::kConverged, step, "");
          return 0;
        }
      }
    }
    if (config.checkpoint.every_steps > 0 && step % config.checkpoint.every_steps == 0 &&
        step != total_steps)
      checkpoint(step);
  }
  run_end(reached ? run_status::kConverged : run_status::kBudgetExhausted, total_steps, "");
  return 0;
}
