#include "mxablate/orchestrator/sweep_runner.h"

#include <algorithm>
#include <csignal>
#include <deque>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "mxablate/analysis/model_blocks.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/contract/target_file.h"
#include "mxablate/orchestrator/live_targets.h"
#include "mxablate/orchestrator/log_watch.h"
#include "mxablate/orchestrator/run_outcome.h"
#include "mxablate/orchestrator/sweep_lock.h"
#include "mxablate/results/run_log.h"
#include "mxablate/results/schema.h"

namespace mxablate::orchestrator {

namespace fs = std::filesystem;
namespace st = results::status;
using Clock = std::chrono::steady_clock;

fs::path run_directory(const fs::path& runs_dir, const std::string& sweep,
                       const std::string& run_id) {
  return runs_dir / sweep / run_id;
}

namespace {

// The last line the trainer wrote to stderr in its latest attempt ("" if none).
std::string stderr_tail(const fs::path& run_dir) {
  std::ifstream in(run_dir / "stderr.log", std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 8192);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t end = text.size();
  while (end > 0) {
    const size_t start = text.rfind('\n', end - 1);
    const size_t b = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(b, end - b);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.rfind("=== mxablate:", 0) == 0) return "";
    if (!line.empty()) return line.size() > 300 ? line.substr(0, 300) + "…" : line;
    if (start == std::string::npos) break;
    end = start;
  }
  return "";
}

std::string result_phrase(const std::string& status, const RunProgress& p) {
  std::string s = status;
  if (p.val_loss) s += fmt::format(", val loss {:.4f}", *p.val_loss);
  if (p.tokens) s += fmt::format(" at {} tokens", format_count(*p.tokens));
  return s;
}

}  // namespace

struct SweepRunner::Impl {
  struct Active {
    Active(std::string id, int n, int64_t seq, results::Database& db, const fs::path& log)
        : run_id(std::move(id)), attempt(n), start_seq(seq), started(Clock::now()),
          log(db, run_id, log.string()) {}
    std::string run_id;
    int attempt = 0;
    int64_t start_seq = 0;
    Clock::time_point started;
    results::RunLog log;
    bool saw_event = false;
    bool run_end_seen = false;  // this attempt's run_end is ingested: its work is done
    bool stop_requested = false;
    bool timed_out = false;
    bool killed = false;
    std::optional<Clock::time_point> kill_at;
    RunProgress progress;
  };

  const Recipe& recipe;
  const Plan& plan;
  results::ResultsStore& store;
  Executor& executor;
  Waker& waker;
  ProgressSink& progress;
  SweepOptions opt;
  SweepHooks hooks;

  fs::path sweep_dir;
  std::optional<SweepLock> lock;
  int64_t sweep_id = 0;
  std::map<std::string, const RunSpec*> specs;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> status;
  std::map<std::string, int> attempts_used;
  std::deque<std::string> queue;
  std::map<std::string, Active> active;
  // Prestarted runs waiting for their slot (docs/design.md §9, "Busy slots"): off the queue, still
  // pending in the store; an attempt only once released (or once they end on their own).
  struct Standby {
    LaunchRequest request;
    Launched launched;
    bool abandoned = false;  // told to exit (the sweep is stopping): its run stays pending
  };
  std::map<std::string, Standby> standbys;
  std::map<std::string, int64_t> prepared_seq;  // between prepare and record
  // The first run in order that did not fit the free slots, and since when it waits.
  std::optional<std::pair<std::string, Clock::time_point>> waiting;
  bool waiting_announced = false;
  bool stopping = false;
  bool detached = false;  // stopped with attempts left running in the executor
  bool killed_all = false;
  Clock::time_point started = Clock::now();
  LogWatch log_watch;  // the logs of runs a standby waits behind (docs/design.md §9)
  LiveTargets live;    // from_arm targets fixed mid-sweep (docs/design.md §5, "Live targets")

  Impl(const Recipe& r, const Plan& p, results::ResultsStore& s, Executor& e, Waker& w,
       ProgressSink& pr, SweepOptions o)
      : recipe(r), plan(p), store(s), executor(e), waker(w), progress(pr), opt(std::move(o)),
        live(r, p) {
    opt.runs_dir = fs::absolute(opt.runs_dir);
    sweep_dir = opt.runs_dir / plan.sweep;
    for (const RunSpec& spec : plan.runs) {
      specs[spec.run_id] = &spec;
      labels[spec.run_id] = run_label(spec);
    }
  }

  fs::path dir_of(const std::string& run_id) const {
    return run_directory(opt.runs_dir, plan.sweep, run_id);
  }

  std::string label(const std::string& run_id) const {
    const auto it = labels.find(run_id);
    return it == labels.end() ? run_id : it->second;
  }

  void prepare() {
    lock.emplace(sweep_dir);  // creates the directory; one orchestrator per sweep
    results::SweepRecord sweep;
    sweep.name = plan.sweep;
    sweep.recipe_path = fs::absolute(recipe.file).string();
    sweep.recipe_text = recipe.text;
    sweep.runs_dir = opt.runs_dir.string();
    sweep.target = plan.target;
    sweep.target_val_loss = plan.target_val_loss;
    sweep_id = store.register_sweep(sweep);
    std::vector<results::PlannedRun> planned;
    for (const RunSpec& spec : plan.runs) {
      results::PlannedRun r;
      r.run_id = spec.run_id;
      r.arm = spec.arm;
      r.arm_index = spec.arm_index;
      r.config_json = spec.config_json.dump();
      r.run_dir = dir_of(spec.run_id).string();
      r.max_tokens = spec.config.train.max_tokens;
      r.interventions = spec.interventions;
      r.model = contract::model_label(spec.config.model);  // its block target's key (runs.model)
      for (const AxisValue& a : spec.axes) r.axes.emplace_back(a.axis, a.value.dump());
      planned.push_back(std::move(r));
    }
    store.register_plan(sweep_id, planned);
    for (const results::RunState& r : store.planned_runs(sweep_id)) status[r.run_id] = r.status;
  }

  Active& start_tracking(const std::string& run_id, int attempt, int64_t start_seq) {
    const RunSpec* spec = specs.count(run_id) ? specs.at(run_id) : nullptr;
    auto [it, inserted] = active.try_emplace(run_id, run_id, attempt, start_seq, store.db(),
                                             dir_of(run_id) / "events.jsonl");
    Active& a = it->second;
    a.progress.run_id = run_id;
    a.progress.label = label(run_id);
    a.progress.attempt = attempt;
    a.progress.max_tokens = spec ? spec->config.train.max_tokens : 0;
    status[run_id] = st::kRunning;
    return a;
  }

  // Attempts an earlier orchestrator never saw end: make sure they no longer run (or adopt
  // them), ingest what they wrote, and decide what they mean.
  void recover() {
    for (const results::OpenAttempt& oa : store.open_attempts(sweep_id)) {
      if (executor.recover(oa, opt.grace)) {
        start_tracking(oa.run_id, oa.attempt, oa.start_seq);
        progress.message(fmt::format("re-attached to {} [{}]", label(oa.run_id), oa.run_id));
        continue;
      }
      results::RunLog log(store.db(), oa.run_id, (fs::path(oa.run_dir) / "events.jsonl").string());
      warn(oa.run_id, log.poll().warnings);  // the same checks and warnings as while it runs
      AttemptObservation o;
      o.how_it_ended = "the previous mxablate stopped while it ran";
      o.run_end_status = store.run_end_status_after(oa.run_id, oa.start_seq);
      o.attempts_used = 0;
      o.max_attempts = opt.max_attempts;
      o.stderr_tail = stderr_tail(oa.run_dir);
      Outcome out = decide_outcome(o);
      const std::string new_status = out.retry ? st::kPending : out.status;
      if (out.retry) out.reason = "the previous mxablate stopped while it ran; resuming it";
      store.finish_attempt(oa.run_id, oa.attempt, {std::nullopt, std::nullopt,
                                                   out.retry ? "retry" : out.status, out.reason},
                           new_status,
                           out.reason.empty() ? std::nullopt : std::optional(out.reason));
      status[oa.run_id] = new_status;
      progress.message(fmt::format("recovered {} [{}]: {}", label(oa.run_id), oa.run_id,
                                   out.reason.empty() ? new_status : out.reason));
    }
    // A run marked running with no open attempt cannot exist (both change in one
    // transaction); guard anyway so such a run is not skipped forever.
    for (auto& [run_id, s] : status)
      if (s == st::kRunning && !active.count(run_id)) {
        store.set_status(run_id, st::kPending);
        s = st::kPending;
      }
  }

  void warn(const std::string& run_id, const std::vector<std::string>& warnings) {
    for (const std::string& w : warnings)
      progress.message(fmt::format("warning: {} [{}]: {}", label(run_id), run_id, w));
  }

  void build_queue() {
    // opt.launch_order first (ids of this plan only, each once), then the rest in plan order.
    std::vector<std::string> order;
    std::set<std::string> seen;
    for (const std::string& id : opt.launch_order)
      if (specs.count(id) && seen.insert(id).second) order.push_back(id);
    for (const RunSpec& spec : plan.runs)
      if (seen.insert(spec.run_id).second) order.push_back(spec.run_id);
    for (const std::string& run_id : order) {
      const std::string& s = status[run_id];
      if (results::is_final_result(s) || active.count(run_id)) continue;
      if (s == st::kFailed)
        progress.message(fmt::format("retrying {} [{}], which failed before", label(run_id),
                                     run_id));
      queue.push_back(run_id);
    }
  }

  void fail_before_launch(const std::string& run_id, const std::string& reason) {
    store.set_status(run_id, st::kFailed, reason);
    status[run_id] = st::kFailed;
    progress.message(fmt::format("failed {} [{}]: {}", label(run_id), run_id, reason));
  }

  // Gets the run directory ready for an attempt; nullopt when it cannot be (the run is failed).
  std::optional<LaunchRequest> prepare_launch(const std::string& run_id) {
    const RunSpec& spec = *specs.at(run_id);
    results::RunState rs = store.run(run_id);
    if (results::is_final_result(rs.status)) {
      // Only this process writes the database (its writer lock), so this cannot happen unless
      // the lock was bypassed; a run with its result is never trained again either way.
      status[run_id] = rs.status;
      return std::nullopt;
    }
    const fs::path dir = dir_of(run_id);
    const bool resume = store.has_checkpoint(run_id);
    try {
      fs::create_directories(dir);
      const fs::path log = dir / "events.jsonl";
      std::error_code ec;
      if (!resume && (rs.ingest_offset > 0 || fs::file_size(log, ec) > 0)) {
        // No checkpoint to resume from: start over, keeping the old log for inspection and
        // forgetting what was ingested from it (its evaluations would otherwise stay).
        if (fs::exists(log))
          fs::rename(log, dir / fmt::format("events.jsonl.discarded-{}", rs.attempts));
        store.reset_run_events(run_id);
        rs.ingest_offset = 0;
        rs.last_seq = 0;
      }
      contract::write_run_config((dir / "config.json").string(), spec.config);
      // A target fixed before the run starts goes with it; a file from an earlier sweep whose
      // target is forgotten (the recipe's target changed) must not.
      if (const auto target = live.target_of_run(run_id)) contract::write_target_file(dir, *target);
      else contract::remove_target_file(dir);
    } catch (const results::SqliteError&) {
      throw;
    } catch (const std::exception& e) {
      fail_before_launch(run_id, fmt::format("cannot prepare the run directory: {}", e.what()));
      return std::nullopt;
    }
    prepared_seq[run_id] = rs.last_seq;
    return LaunchRequest{run_id, dir, opt.trainer, resume, rs.attempts + 1, ranks_of(run_id)};
  }

  int ranks_of(const std::string& run_id) const {
    const auto it = specs.find(run_id);
    return it == specs.end() ? 1 : std::max(1, it->second->config.parallel.data);
  }

  // The queued runs to launch now (taken off the queue): in order while they fit the free slots;
  // past the first that does not fit only while it has waited less than opt.backfill.
  std::vector<std::string> pick_launches() {
    std::vector<std::string> batch;
    std::vector<int> batch_ranks;
    const auto now = Clock::now();
    bool head_seen = false;
    // Rank counts that did not fit: the batch only grows, so they will not fit later in this
    // pass either (keeps a pass over a long queue cheap).
    std::set<int> refused;
    for (auto it = queue.begin(); it != queue.end();) {
      const std::string run_id = *it;
      const int ranks = ranks_of(run_id);
      if (refused.count(ranks)) {
        ++it;
        continue;
      }
      if (ranks > executor.max_ranks()) {
        // `mxablate run` refuses such a plan before anything runs (launch_checks.h); a run that
        // gets here anyway must not wait forever for slots that do not exist.
        it = queue.erase(it);
        fail_before_launch(run_id, fmt::format("parallel.data {}: the {} executor can give one run "
                                               "at most {} rank(s)",
                                               ranks, executor.name(), executor.max_ranks()));
        continue;
      }
      batch_ranks.push_back(ranks);
      if (executor.fits(batch_ranks)) {
        batch.push_back(run_id);
        it = queue.erase(it);
        if (waiting && waiting->first == run_id) waiting.reset();
        continue;
      }
      batch_ranks.pop_back();
      refused.insert(ranks);
      if (!head_seen) {
        head_seen = true;
        if (!waiting || waiting->first != run_id) {
          waiting.emplace(run_id, now);
          waiting_announced = false;
        }
      }
      batch_ranks.push_back(1);
      const bool room_left = executor.fits(batch_ranks);  // for a run of one rank, at least
      batch_ranks.pop_back();
      if (!room_left) break;
      if (now - waiting->second >= opt.backfill) {
        if (!waiting_announced && opt.backfill.count() > 0)
          progress.message(fmt::format(
              "{} [{}] has waited {} for {} free slot(s): later runs no longer start before it",
              label(waiting->first), waiting->first,
              format_duration(std::chrono::duration<double>(opt.backfill).count()),
              ranks_of(waiting->first)));
        waiting_announced = true;
        break;
      }
      ++it;
    }
    if (!head_seen) waiting.reset();
    return batch;
  }

  // Launches the runs of one loop iteration together (a batch system submits them as one job
  // array) and records each attempt.
  void launch(const std::vector<std::string>& run_ids) {
    std::vector<LaunchRequest> requests;
    for (const std::string& run_id : run_ids)
      if (auto req = prepare_launch(run_id)) requests.push_back(std::move(*req));
    if (requests.empty()) return;
    const std::vector<LaunchResult> results = executor.launch_batch(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (i < results.size() && results[i].launched)
        record_launch(requests[i], *results[i].launched);
      else
        fail_before_launch(requests[i].run_id,
                           i < results.size() ? results[i].error : "the executor did not launch it");
    }
  }

  void record_launch(const LaunchRequest& req, const Launched& l, bool prestarted = false) {
    const std::string& run_id = req.run_id;
    const bool resume = req.resume;
    const int64_t start_seq = prepared_seq.at(run_id);
    const auto now = Clock::now();
    const int attempt = store.begin_attempt(run_id, {executor.name(), l.executor_ref, l.slot, l.host,
                                                     l.device, resume, start_seq, prestarted});
    ++attempts_used[run_id];
    start_tracking(run_id, attempt, start_seq).started = now;
    if (hooks.launched) hooks.launched(run_id, now);
    progress.message(fmt::format("{} {} [{}] in {}{}", prestarted ? "released" : "launched",
                                 label(run_id), run_id, l.slot,
                                 resume ? fmt::format(", resuming (attempt {})", attempt)
                                        : attempt > 1 ? fmt::format(" (attempt {})", attempt)
                                                      : std::string()));
  }

  // Busy slots (docs/design.md §9): the next runs in plan order, each a fresh start of one rank,
  // start as standbys on busy slots (one per slot) and set up while those slots still train.
  void prestart_next() {
    if (!opt.prestart || stopping) return;
    while (!queue.empty() && executor.standby_room()) {
      const std::string run_id = queue.front();
      LaunchRequest probe;
      probe.ranks = ranks_of(run_id);
      probe.resume = store.has_checkpoint(run_id);
      // Nothing behind a run that cannot wait as a standby is prestarted: plan order holds.
      if (!prestartable(probe)) return;
      queue.pop_front();
      std::optional<LaunchRequest> req = prepare_launch(run_id);
      if (!req) continue;
      try {
        const Launched l = executor.prestart(*req);
        standbys.emplace(run_id, Standby{*req, l});
        if (hooks.prestarted) hooks.prestarted(run_id, Clock::now());
        progress.message(fmt::format("prestarted {} [{}] on {}: it sets up now and trains once "
                                     "the slot frees",
                                     label(run_id), run_id, l.slot));
      } catch (const LaunchError& e) {
        fail_before_launch(run_id, e.what());  // its own run's failure
      }
    }
  }

  // Standbys whose slot has freed become attempts: recorded first, then told to go, so that an
  // orchestrator dying in between leaves an open attempt to recover, never an unrecorded trainer.
  void release_ready() {
    for (auto it = standbys.begin(); it != standbys.end();) {
      if (it->second.abandoned || !executor.standby_ready(it->first)) {
        ++it;
        continue;
      }
      record_launch(it->second.request, it->second.launched, true);
      executor.release(it->first);
      it = standbys.erase(it);
    }
  }

  // Whether the standby `standby` may take the slot of `run_id` at its run_end (slot_handover.h).
  bool hands_over_at_run_end(const std::string& run_id, const std::string& standby) const {
    const auto it = standbys.find(standby);
    if (it == standbys.end() || it->second.abandoned) return false;
    const auto a = specs.find(run_id), b = specs.find(standby);
    if (a == specs.end() || b == specs.end()) return false;
    return opt.handover.when(*a->second, *b->second) == Handover::kAtRunEnd;
  }

  // Busy slots (docs/design.md §9): a run whose run_end is in has done its work; while its
  // process tears down, the standby waiting behind it takes the slot (released right after, in
  // release_ready). Its exit is still collected, ingested and decided as any attempt's.
  void hand_over_finished() {
    for (auto& [run_id, a] : active) {
      if (!a.run_end_seen) continue;
      for (const std::string& standby : executor.standbys_behind(run_id))
        if (hands_over_at_run_end(run_id, standby)) executor.hand_over(run_id, standby);
    }
  }

  // Only the logs a run_end would hand a slot over for wake the loop.
  void update_log_watches() {
    for (const auto& [run_id, a] : active) {
      bool wanted = false;
      if (!a.run_end_seen && !stopping)
        for (const std::string& standby : executor.standbys_behind(run_id))
          wanted = wanted || hands_over_at_run_end(run_id, standby);
      if (wanted) log_watch.watch(run_id, dir_of(run_id) / "events.jsonl");
      else log_watch.unwatch(run_id);
    }
  }

  // A standby's process ended before it was released.
  void standby_ended(const AttemptExit& exit) {
    const auto it = standbys.find(exit.run_id);
    const Standby s = std::move(it->second);
    standbys.erase(it);
    if (s.abandoned) {
      // Told to exit; it wrote nothing, so its run stays pending for the next `mxablate run`.
      progress.message(fmt::format("{} [{}]: its standby trainer ended ({}); the run stays pending",
                                   label(exit.run_id), exit.run_id, exit.describe()));
      return;
    }
    // It ended during its own setup (a bad config, a crash): an attempt of its own run, decided
    // like any other (exit 2 fails the run, a crash is retried), never the running run's.
    record_launch(s.request, s.launched, true);
    finish(exit);
  }

  void abandon_standbys(bool kill) {
    for (auto& [run_id, s] : standbys) {
      if (!s.abandoned) executor.abandon(run_id);
      s.abandoned = true;
      if (kill) executor.kill(run_id);
    }
  }

  void ingest(Active& a) {
    const auto t0 = Clock::now();
    const results::RunLog::Update up = a.log.poll();
    warn(a.run_id, up.warnings);
    if (up.events == 0) return;
    const results::IngestSummary& sum = up.summary;
    if (!a.saw_event) {
      a.saw_event = true;
      if (hooks.first_event) hooks.first_event(a.run_id, Clock::now());
    }
    // This attempt's own run_end (a log read again from its start also holds earlier attempts').
    if (!a.run_end_seen && sum.last_run_end &&
        sum.last_run_end->value("seq", int64_t{0}) > a.start_seq) {
      a.run_end_seen = true;
      if (hooks.run_end_seen) hooks.run_end_seen(a.run_id, Clock::now());
    }
    RunProgress& p = a.progress;
    if (up.step) p.step = *up.step;
    if (up.tokens) p.tokens = static_cast<double>(*up.tokens);
    if (sum.last_train) {
      const auto& t = *sum.last_train;
      if (t.contains("loss") && t["loss"].is_number()) p.loss = t["loss"].get<double>();
      if (t.contains("tokens_per_s") && t["tokens_per_s"].is_number())
        p.tokens_per_s = t["tokens_per_s"].get<double>();
    }
    if (sum.last_eval && (*sum.last_eval).contains("val_loss") &&
        (*sum.last_eval)["val_loss"].is_number())
      p.val_loss = (*sum.last_eval)["val_loss"].get<double>();
    if (sum.last_eval && (*sum.last_eval).contains("tokens") && (*sum.last_eval)["tokens"].is_number())
      live.note_eval(a.run_id, (*sum.last_eval)["tokens"].get<double>());
    for (const auto& d : sum.divergences)
      progress.message(fmt::format("{}: divergence at step {}: {} ({})", label(a.run_id),
                                   d.value("step", int64_t{-1}), d.value("reason", "?"),
                                   d.value("severity", "?")));
    if (hooks.ingested) hooks.ingested(up.events, Clock::now() - t0);
  }

  // Live targets (docs/design.md §5): checks the blocks that may have become fixed on the
  // analysis' own data (load_sweep, split_by_model, fixed_block_target: the one rule), stores
  // each new target (block_targets; a single model's also as the sweep's target) and hands it to
  // the model's runs. `all`: every block without a target (at the start: a sweep resumed after
  // its targets were fixed, or after its baseline finished); else only those due.
  void update_live_targets(bool all) {
    if (!live.active()) return;
    std::vector<std::string> models = live.due();
    if (!all && models.empty()) return;
    const analysis::SweepData data = analysis::load_sweep(store.db(), plan.sweep);
    const std::vector<analysis::ModelBlock> blocks = analysis::split_by_model(data);
    for (const analysis::ModelBlock& b : blocks) {
      if (live.target_of(b.model)) continue;
      if (!all && std::find(models.begin(), models.end(), b.model) == models.end()) continue;
      if (all)
        for (const analysis::RunRecord& r : b.sweep.runs)
          if (!r.evals.empty()) live.note_eval(r.run_id, r.evals.back().tokens);
      live.checked(b.model);
      std::optional<contract::TargetFile> target;
      for (const results::BlockTarget& stored : store.block_targets(sweep_id))
        if (stored.model == b.model) target = contract::TargetFile{stored.val_loss, stored.basis};
      if (!target && blocks.size() == 1 && data.stored_target)
        target = contract::TargetFile{*data.stored_target, "stored with the sweep"};
      if (!target) target = fixed_block_target(b.sweep, *recipe.target.from_arm, recipe.target.at_fraction);
      if (!target) continue;
      store.set_block_target(sweep_id, b.model, target->val_loss, target->basis);
      if (blocks.size() == 1) store.store_resolved_target(plan.sweep, target->val_loss);
      live.fix(b.model, *target);
      hand_out(b.model, *target);
    }
  }

  // Writes the block's target into the run directory of each of its runs without a result:
  // running ones read it at their next evaluation, prestarted and resumed ones at their first.
  // Runs without a directory yet get it when prepared (prepare_launch).
  void hand_out(const std::string& model, const contract::TargetFile& target) {
    size_t handed = 0;
    for (const std::string& run_id : live.runs_of(model)) {
      if (results::is_final_result(status[run_id])) continue;
      const fs::path dir = dir_of(run_id);
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      try {
        contract::write_target_file(dir, target);
        ++handed;
      } catch (const std::exception& e) {
        // The run trains on to its budget without the target; the sweep goes on.
        progress.message(fmt::format("warning: {} [{}]: cannot hand it the target: {}",
                                     label(run_id), run_id, e.what()));
      }
    }
    progress.message(fmt::format("target fixed{}: val loss {:.4f} ({}); handed to {} run(s) "
                                 "under way{}",
                                 model.empty() || live.runs_of(model).size() == plan.runs.size()
                                     ? std::string()
                                     : " for " + model,
                                 target.val_loss, target.basis, handed,
                                 recipe.target.stop_at_target ? ", which stop when they reach it" : ""));
  }

  void finish(const AttemptExit& exit) {
    const auto it = active.find(exit.run_id);
    if (it == active.end()) return;
    Active& a = it->second;
    if (hooks.exit_seen) hooks.exit_seen(a.run_id, Clock::now());
    ingest(a);  // everything it wrote before exiting
    AttemptObservation o;
    o.exit_code = exit.exit_code;
    o.signal = exit.signal;
    o.how_it_ended = exit.describe();
    o.run_end_status = store.run_end_status_after(a.run_id, a.start_seq);
    o.stop_requested = a.stop_requested;
    o.timed_out = a.timed_out;
    o.timeout_s = std::chrono::duration<double>(opt.timeout).count();
    o.attempts_used = attempts_used[a.run_id];
    o.max_attempts = opt.max_attempts;
    o.stderr_tail = stderr_tail(dir_of(a.run_id));
    Outcome out = decide_outcome(o);
    if (out.retry && stopping) {
      out = {false, st::kInterrupted,
             fmt::format("{} while the sweep was stopping; it resumes on the next run",
                         exit.describe())};
    }
    const std::string new_status = out.retry ? st::kPending : out.status;
    store.finish_attempt(a.run_id, a.attempt,
                         {exit.exit_code, exit.signal, out.retry ? "retry" : out.status,
                          out.reason},
                         new_status, out.reason.empty() ? std::nullopt : std::optional(out.reason));
    status[a.run_id] = new_status;
    live.note_status(a.run_id, new_status);
    const std::string run_id = a.run_id;
    const RunProgress p = a.progress;
    log_watch.unwatch(run_id);
    active.erase(it);
    if (out.retry) {
      queue.push_front(run_id);
      progress.message(fmt::format("{} [{}]: {}", label(run_id), run_id, out.reason));
    } else if (new_status == st::kFailed || new_status == st::kInterrupted) {
      progress.message(fmt::format("{} {} [{}]: {}", new_status, label(run_id), run_id,
                                   out.reason));
    } else {
      progress.message(fmt::format("finished {} [{}]: {}{}", label(run_id), run_id,
                                   result_phrase(new_status, p),
                                   out.reason.empty() ? "" : " (" + out.reason + ")"));
    }
  }

  void handle_stop_requests() {
    const int n = waker.stop_requests();
    if (n >= 1 && !stopping && executor.detaches_on_stop()) {
      // A batch system's jobs do not need us to run: leave them queued and running (their
      // attempts stay open) and let the next run re-attach to them.
      stopping = true;
      detached = true;
      progress.message(fmt::format(
          "stopping: no new launches; {} running attempt(s) stay in {} without mxablate — run "
          "the same command again to re-attach",
          active.size(), executor.name()));
      return;
    }
    if (n >= 1 && !stopping) {
      stopping = true;
      const auto now = Clock::now();
      progress.message(fmt::format(
          "stopping: no new launches; asking {} running trainer(s) to checkpoint and stop "
          "(again to kill them now)",
          active.size()));
      for (auto& [run_id, a] : active) {
        a.stop_requested = true;
        executor.request_stop(run_id);
        if (!a.kill_at) a.kill_at = now + opt.grace;
      }
      abandon_standbys(false);
    }
    if (n >= 2 && !killed_all && !detached) {
      killed_all = true;
      for (auto& [run_id, a] : active) {
        a.killed = true;
        executor.kill(run_id);
      }
      abandon_standbys(true);
    }
  }

  void check_timeouts() {
    const auto now = Clock::now();
    for (auto& [run_id, a] : active) {
      if (opt.timeout.count() > 0 && !a.timed_out && now - a.started > opt.timeout) {
        a.timed_out = true;
        a.kill_at = now + opt.grace;
        executor.request_stop(run_id);
        progress.message(fmt::format("{} [{}]: timed out after {}; asking it to stop",
                                     label(run_id), run_id,
                                     format_duration(std::chrono::duration<double>(opt.timeout).count())));
      }
      if (a.kill_at && now > *a.kill_at && !a.killed) {
        a.killed = true;
        executor.kill(run_id);
        progress.message(fmt::format("{} [{}]: did not stop within {}; killed", label(run_id),
                                     run_id,
                                     format_duration(std::chrono::duration<double>(opt.grace).count())));
      }
    }
  }

  SweepSnapshot snapshot() const {
    SweepSnapshot s;
    s.sweep = plan.sweep;
    s.total = plan.runs.size();
    for (const RunSpec& spec : plan.runs) {
      const std::string& v = status.at(spec.run_id);
      if (v == st::kConverged || v == st::kBudgetExhausted || v == st::kProjectedNotReached) ++s.finished;
      else if (v == st::kDiverged) ++s.diverged;
      else if (v == st::kFailed) ++s.failed;
      else if (v == st::kInterrupted) ++s.interrupted;
      else if (v == st::kRunning && !executor.queued(spec.run_id)) ++s.running;
      else ++s.pending;
    }
    const auto now = Clock::now();
    for (const auto& [run_id, a] : active) {
      if (executor.queued(run_id)) continue;  // waiting in a batch queue: counted as pending
      RunProgress p = a.progress;
      p.elapsed_s = std::chrono::duration<double>(now - a.started).count();
      s.active.push_back(p);
    }
    s.elapsed_s = std::chrono::duration<double>(now - started).count();
    s.stopping = stopping && !detached;  // detached: nothing is waited for
    return s;
  }

  // The sweep itself failed (database, filesystem): stop the trainers so none runs
  // unsupervised, without touching the store; the next run recovers their attempts.
  void emergency_stop() {
    if (executor.detaches_on_stop()) {
      detached = true;  // the jobs run on without us; the next run re-attaches
      return;
    }
    for (auto& [run_id, a] : active) executor.request_stop(run_id);
    abandon_standbys(false);
    const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(opt.grace,
                                                                             std::chrono::seconds(30));
    while (executor.running() > 0 && Clock::now() < deadline) {
      executor.collect_exits();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& [run_id, a] : active) executor.kill(run_id);
    abandon_standbys(true);
    while (executor.running() > 0) {
      executor.collect_exits();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  SweepResult result() const {
    SweepResult r;
    r.total = plan.runs.size();
    for (const RunSpec& spec : plan.runs) {
      const std::string& v = status.at(spec.run_id);
      if (v == st::kConverged) ++r.converged;
      else if (v == st::kBudgetExhausted) ++r.budget_exhausted;
      else if (v == st::kProjectedNotReached) ++r.projected_not_reached;
      else if (v == st::kDiverged) ++r.diverged;
      else if (v == st::kFailed) ++r.failed;
      else if (v == st::kInterrupted) ++r.interrupted;
      else ++r.unfinished;
    }
    r.stop_signal = stopping ? waker.first_stop_signal() : 0;
    r.left_running = detached ? active.size() : 0;
    return r;
  }

  SweepResult run() {
    prepare();
    try {
      recover();
      for (const auto& [run_id, s] : status) live.note_status(run_id, s);
      update_live_targets(true);
      build_queue();
      while (true) {
        handle_stop_requests();
        for (const AttemptExit& e : executor.collect_exits()) {
          if (standbys.count(e.run_id)) standby_ended(e);
          else finish(e);
        }
        if (!stopping) {
          release_ready();  // first: a freed slot goes to the run prestarted on it
          const std::vector<std::string> batch = pick_launches();
          if (!batch.empty()) launch(batch);
          prestart_next();
        }
        for (auto& [run_id, a] : active) ingest(a);
        update_live_targets(false);
        if (!stopping) {
          hand_over_finished();
          release_ready();
        }
        update_log_watches();
        check_timeouts();
        progress.update(snapshot());
        if (detached) break;
        if (active.empty() && standbys.empty() && (queue.empty() || stopping)) break;
        waker.wait_for_readable(opt.poll, log_watch.fd());
        log_watch.drain();
      }
    } catch (const std::exception& e) {
      const size_t running = active.size();
      emergency_stop();
      if (detached && running > 0)
        throw std::runtime_error(fmt::format(
            "{}; the {} {} job(s) keep running — fix the cause and re-run the same command to "
            "re-attach to them",
            e.what(), running, executor.name()));
      throw std::runtime_error(
          running == 0
              ? std::string(e.what())
              : fmt::format("{}; stopped the {} running trainer(s) — their event logs and "
                            "checkpoints are intact: fix the cause and re-run the same command "
                            "to continue",
                            e.what(), running));
    }
    progress.finish(snapshot());
    return result();
  }
};

SweepRunner::SweepRunner(const Recipe& recipe, const Plan& plan, results::ResultsStore& store,
                         Executor& executor, Waker& waker, ProgressSink& progress,
                         SweepOptions options)
    : impl_(std::make_unique<Impl>(recipe, plan, store, executor, waker, progress,
                                   std::move(options))) {}

SweepRunner::~SweepRunner() = default;

void SweepRunner::set_hooks(SweepHooks hooks) { impl_->hooks = std::move(hooks); }

SweepResult SweepRunner::run() { return impl_->run(); }

}  // namespace mxablate::orchestrator
