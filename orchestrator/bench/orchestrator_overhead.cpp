// mxablate-bench-orchestrator: the orchestrator's own cost, measured against a bare baseline in
// the same run (docs/design.md §9: "the orchestrator's own overhead is noise").
//
// A sweep of many short fake-trainer runs is executed twice on the same slots:
//   baseline  — the same trainer processes, same config.json files, started with plain
//               fork/exec and waitpid: the least any executor could spend;
//   mxablate  — the full path: recipe plan, SQLite registration, local executor, event-log
//               tailing and ingestion, outcome decisions.
// Reported: wall time of both and their ratio, the overhead per run, launch → first event
// ingested, the idle time of a slot between a trainer's exit and the next launch in it, and the
// ingestion throughput of the results store on its own.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mxablate/contract/event_log.h"
#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/signal_watcher.h"
#include "mxablate/orchestrator/sweep_runner.h"
#include "mxablate/orchestrator/trainer_locator.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/store.h"

namespace {

namespace fs = std::filesystem;
using namespace mxablate;
using namespace mxablate::orchestrator;
using Clock = std::chrono::steady_clock;

struct Options {
  int runs = 200;
  int slots = 2;
  int steps = 20;
  int poll_ms = 200;
  int step_ms = 0;  // the fake trainer's time per step (MXABLATE_FAKE_STEP_MS)
  int linger_ms = 0;  // its teardown after run_end (MXABLATE_FAKE_LINGER_MS)
  // Prestarted standbys (docs/design.md §9, "Busy slots"), handed the slot at the finishing run's
  // run_end, and for comparison in the same run at its exit.
  bool prestart = false;
  int ingest_events = 100000;
  int repeat = 3;  // baseline and mxablate alternate this many times; medians are reported
  fs::path trainer;
  fs::path work = fs::temp_directory_path() / ("mxablate-bench-" + std::to_string(::getpid()));
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::string recipe_text(const Options& o) {
  std::string seeds;
  for (int i = 1; i <= o.runs; ++i) seeds += (i > 1 ? ", " : "") + std::to_string(i);
  return fmt::format(R"(name: bench
base:
  model: smoke
  data: {{seq_len: 64}}
  train: {{global_batch_tokens: 1024, max_tokens: {}}}
  eval: {{every_tokens: 4096, tokens: 1024}}
  checkpoint: {{every_steps: 10}}
  telemetry: {{train_every_steps: 1}}
arms:
  A: {{}}
grid:
  seed: [{}]
)",
                     o.steps * 1024, seeds);
}

// The least any executor could do: fork/exec the trainer into `slots` parallel slots.
double run_baseline(const Options& o, const Plan& plan, int round) {
  const fs::path root = o.work / fmt::format("baseline-{}", round);
  std::vector<fs::path> dirs;
  for (const RunSpec& r : plan.runs) {
    const fs::path d = root / r.run_id;
    fs::create_directories(d);
    contract::write_run_config((d / "config.json").string(), r.config);
    dirs.push_back(d);
  }
  const auto t0 = Clock::now();
  size_t next = 0;
  int running = 0;
  while (next < dirs.size() || running > 0) {
    while (running < o.slots && next < dirs.size()) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string dir = dirs[next].string();
        ::execl(o.trainer.c_str(), o.trainer.c_str(), "--run-dir", dir.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      ++next;
      ++running;
    }
    int status = 0;
    if (::waitpid(-1, &status, 0) > 0) --running;
  }
  return seconds(Clock::now() - t0);
}

struct SweepTiming {
  double wall_s = 0;
  std::vector<double> first_event_s;  // launch → first event ingested
  std::vector<double> idle_s;         // the trainer's run_end → next launch in the slot
  std::vector<double> react_s;        // exit seen (SIGCHLD) → next launch
  size_t events = 0;
};

SweepTiming run_orchestrated(const Options& o, const Recipe& recipe, const Plan& plan, int round,
                             bool at_run_end = true) {
  results::ResultsStore store((o.work / fmt::format("bench-{}.db", round)).string());
  LocalExecutor executor(cpu_slots(o.slots));
  SignalWatcher signals;
  auto progress = make_progress(ProgressMode::kNone, stderr);
  SweepOptions options;
  options.runs_dir = o.work / fmt::format("runs-{}", round);
  options.trainer = o.trainer;
  options.poll = std::chrono::milliseconds(o.poll_ms);
  // The loop's own cost against bare fork/exec, which starts nothing early: without prestarted
  // standbys (they hide a trainer's setup, which scripts/bench-paper-grid.sh measures).
  options.prestart = o.prestart;
  options.handover.at_run_end = at_run_end;
  SweepRunner runner(recipe, plan, store, executor, signals, *progress, options);

  std::mutex m;
  std::map<std::string, Clock::time_point> launched;
  std::vector<double> launch_wall;  // system clock, for matching against run_end times
  std::vector<Clock::time_point> launch_steady, exits_seen;
  SweepTiming t;
  SweepHooks hooks;
  hooks.launched = [&](const std::string& id, Clock::time_point at) {
    std::lock_guard lock(m);
    launched[id] = at;
    launch_steady.push_back(at);
    launch_wall.push_back(std::chrono::duration<double>(
                              std::chrono::system_clock::now().time_since_epoch()).count());
  };
  hooks.first_event = [&](const std::string& id, Clock::time_point at) {
    std::lock_guard lock(m);
    t.first_event_s.push_back(seconds(at - launched[id]));
  };
  hooks.exit_seen = [&](const std::string&, Clock::time_point at) {
    std::lock_guard lock(m);
    exits_seen.push_back(at);
  };
  hooks.ingested = [&](size_t n, std::chrono::nanoseconds) { t.events += n; };
  runner.set_hooks(hooks);
  const auto t0 = Clock::now();
  const SweepResult r = runner.run();
  t.wall_s = seconds(Clock::now() - t0);
  if (r.budget_exhausted != plan.runs.size())
    throw std::runtime_error(fmt::format("only {} of {} runs finished", r.budget_exhausted,
                                         plan.runs.size()));
  // Slot idle time: each launch after the first `slots` ones fills the slot freed by the
  // earliest trainer end not yet matched (run_end times come from the trainers' own clock).
  std::vector<double> ends;
  results::Statement st(store.db(), "SELECT time FROM events WHERE kind = 'run_end' ORDER BY time");
  while (st.step()) ends.push_back(st.get_double(0));
  std::sort(launch_wall.begin(), launch_wall.end());
  for (size_t i = static_cast<size_t>(o.slots); i < launch_wall.size(); ++i) {
    const double freed = ends[i - static_cast<size_t>(o.slots)];
    t.idle_s.push_back(std::max(0.0, launch_wall[i] - freed));
  }
  std::sort(launch_steady.begin(), launch_steady.end());
  std::sort(exits_seen.begin(), exits_seen.end());
  for (size_t i = static_cast<size_t>(o.slots); i < launch_steady.size(); ++i)
    t.react_s.push_back(seconds(launch_steady[i] - exits_seen[i - static_cast<size_t>(o.slots)]));
  return t;
}

struct IngestTiming {
  double events_per_s = 0;
  double batch_ms_p50 = 0;
  double batch_ms_max = 0;
};

IngestTiming measure_ingestion(const Options& o) {
  const fs::path log = o.work / "ingest" / "events.jsonl";
  fs::create_directories(log.parent_path());
  {
    contract::EventWriter w(log.string());
    for (int i = 1; i <= o.ingest_events; ++i) {
      if (i % 10 == 0)
        w.append("eval", {{"step", i}, {"tokens", i * 1024}, {"val_loss", 3.0}});
      else
        w.append("train", {{"step", i}, {"tokens", i * 1024}, {"loss", 3.1}, {"lr", 1e-3},
                           {"grad_norm", 0.9}, {"tokens_per_s", 5e4}});
    }
  }
  results::ResultsStore store((o.work / "ingest.db").string());
  results::SweepRecord s;
  s.name = "ingest";
  s.recipe_path = "-";
  s.recipe_text = "-";
  s.runs_dir = "-";
  const int64_t id = store.register_sweep(s);
  results::PlannedRun run;
  run.run_id = "r";
  run.arm = "A";
  run.config_json = "{}";
  run.run_dir = "-";
  store.register_plan(id, {run});
  // Read in batches as the sweep loop would see them between polls (1000 lines at a time).
  std::ifstream in(log);
  std::string line;
  std::vector<double> batch_ms;
  std::vector<nlohmann::json> batch;
  int64_t offset = 0;
  const auto t0 = Clock::now();
  const auto flush = [&] {
    const auto b0 = Clock::now();
    results::ingest_events(store.db(), "r", batch, offset);
    batch_ms.push_back(seconds(Clock::now() - b0) * 1e3);
    batch.clear();
  };
  while (std::getline(in, line)) {
    offset += static_cast<int64_t>(line.size()) + 1;
    batch.push_back(nlohmann::json::parse(line));
    if (batch.size() == 1000) flush();
  }
  if (!batch.empty()) flush();
  IngestTiming t;
  t.events_per_s = o.ingest_events / seconds(Clock::now() - t0);
  t.batch_ms_p50 = percentile(batch_ms, 0.5);
  t.batch_ms_max = percentile(batch_ms, 1.0);
  return t;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line + "\n";
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--runs") o.runs = std::stoi(value());
    else if (a == "--slots") o.slots = std::stoi(value());
    else if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--poll-ms") o.poll_ms = std::stoi(value());
    else if (a == "--step-ms") o.step_ms = std::stoi(value());
    else if (a == "--linger-ms") o.linger_ms = std::stoi(value());
    else if (a == "--prestart") o.prestart = true;
    else if (a == "--repeat") o.repeat = std::max(1, std::stoi(value()));
    else if (a == "--ingest-events") o.ingest_events = std::stoi(value());
    else if (a == "--trainer") o.trainer = value();
    else if (a == "--work") o.work = value();
    else
      throw std::invalid_argument(
          "usage: mxablate-bench-orchestrator [--runs N] [--slots S] [--steps K] [--step-ms MS] "
          "[--linger-ms MS] [--prestart] [--poll-ms P] [--repeat R] "
          "[--ingest-events E] [--trainer FAKE_TRAINER] [--work DIR]");
  }
  if (o.trainer.empty()) o.trainer = own_directory() / "mxablate-fake-train";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
    fs::create_directories(o.work);
    ::setenv("MXABLATE_FAKE_STEP_MS", std::to_string(o.step_ms).c_str(), 1);
    ::setenv("MXABLATE_FAKE_LINGER_MS", std::to_string(o.linger_ms).c_str(), 1);
    const std::string text = recipe_text(o);
    const Recipe recipe = parse_recipe(text, (o.work / "bench.yaml").string());
    const auto p0 = Clock::now();
    const Plan plan = expand_recipe(recipe);
    const double plan_s = seconds(Clock::now() - p0);

    // Alternate the two so that load from elsewhere on the machine hits both alike.
    std::vector<double> base_walls, sweep_walls, exit_walls, exit_idle;
    SweepTiming sweep;
    for (int round = 0; round < o.repeat; ++round) {
      base_walls.push_back(run_baseline(o, plan, round));
      if (o.prestart) {  // the same with the slot handed over at the trainer's exit
        const SweepTiming at_exit = run_orchestrated(o, recipe, plan, round + o.repeat, false);
        exit_walls.push_back(at_exit.wall_s);
        exit_idle.insert(exit_idle.end(), at_exit.idle_s.begin(), at_exit.idle_s.end());
      }
      SweepTiming t = run_orchestrated(o, recipe, plan, round);
      sweep_walls.push_back(t.wall_s);
      sweep.events = t.events;
      for (std::vector<double> SweepTiming::*v :
           {&SweepTiming::first_event_s, &SweepTiming::idle_s, &SweepTiming::react_s})
        (sweep.*v).insert((sweep.*v).end(), (t.*v).begin(), (t.*v).end());
    }
    const double base_s = percentile(base_walls, 0.5);
    sweep.wall_s = percentile(sweep_walls, 0.5);
    const IngestTiming ingest = measure_ingestion(o);

    const double per_run_ms = (sweep.wall_s - base_s) * o.slots / o.runs * 1e3;
    std::printf("load average before: %s", load_average().c_str());
    std::printf("orchestrator overhead: %d fake-trainer runs (%d steps of %d ms, %d ms teardown "
                "after run_end, %zu events in all), %d slots, poll %d ms%s\n\n",
                o.runs, o.steps, o.step_ms, o.linger_ms, sweep.events, o.slots, o.poll_ms,
                o.prestart ? ", prestarted standbys" : "");
    std::printf("| measure | value | ratio / bound |\n|---|---|---|\n");
    std::printf("| sweep wall time, bare fork/exec baseline (median of %d) | %.2f s | 1.00 |\n",
                o.repeat, base_s);
    std::printf("| sweep wall time, mxablate run path (median of %d) | %.2f s | %.2f× baseline |\n",
                o.repeat, sweep.wall_s, sweep.wall_s / base_s);
    std::printf("| overhead per run (slot time) | %.1f ms | %.4f of a 1-minute run |\n",
                per_run_ms, per_run_ms / 60e3);
    std::printf("| plan: parse + expand + validate %d runs | %.1f ms | %.3f ms per run |\n", o.runs,
                plan_s * 1e3, plan_s * 1e3 / o.runs);
    std::printf("| launch → first event ingested, median | %.1f ms | %.2f of the poll interval |\n",
                percentile(sweep.first_event_s, 0.5) * 1e3,
                percentile(sweep.first_event_s, 0.5) * 1e3 / o.poll_ms);
    std::printf("| launch → first event ingested, p95 / max | %.1f / %.1f ms | %.2f of the poll interval (max) |\n",
                percentile(sweep.first_event_s, 0.95) * 1e3,
                percentile(sweep.first_event_s, 1.0) * 1e3,
                percentile(sweep.first_event_s, 1.0) * 1e3 / o.poll_ms);
    std::printf("| exit seen (SIGCHLD) → next launch, median / max | %.2f / %.2f ms | %.4f of the poll interval (max) |\n",
                percentile(sweep.react_s, 0.5) * 1e3, percentile(sweep.react_s, 1.0) * 1e3,
                percentile(sweep.react_s, 1.0) * 1e3 / o.poll_ms);
    std::printf("| slot idle: trainer's run_end event → next launch, median / max | %.1f / %.1f ms | %.3f of the poll interval (max) |\n",
                percentile(sweep.idle_s, 0.5) * 1e3, percentile(sweep.idle_s, 1.0) * 1e3,
                percentile(sweep.idle_s, 1.0) * 1e3 / o.poll_ms);
    if (o.prestart) {
      std::printf("| sweep wall time, standby released at the trainer's exit (median of %d) | %.2f s | %.2f× baseline |\n",
                  o.repeat, percentile(exit_walls, 0.5), percentile(exit_walls, 0.5) / base_s);
      std::printf("| slot idle, released at exit: run_end event → next run released, median / max | %.1f / %.1f ms | %.3f of the poll interval (max) |\n",
                  percentile(exit_idle, 0.5) * 1e3, percentile(exit_idle, 1.0) * 1e3,
                  percentile(exit_idle, 1.0) * 1e3 / o.poll_ms);
    }
    std::printf("| ingestion alone, %d events in batches of 1000 | %.0f events/s | batch p50 %.1f ms, max %.1f ms |\n",
                o.ingest_events, ingest.events_per_s, ingest.batch_ms_p50, ingest.batch_ms_max);
    std::error_code ec;
    fs::remove_all(o.work, ec);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxablate-bench-orchestrator: %s\n", e.what());
    std::error_code ec;
    fs::remove_all(o.work, ec);
    return 1;
  }
}
