#include "mxablate/orchestrator/executor_slurm.h"

#include <sys/wait.h>

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <thread>

#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/results/store.h"

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// "0-9%4" → 4; 0 when unthrottled or unreadable.
int throttle_of(const std::string& spec) {
  const size_t pct = spec.find('%');
  if (pct == std::string::npos) return 0;
  try {
    return std::max(0, std::stoi(spec.substr(pct + 1)));
  } catch (const std::exception&) {
    return 0;
  }
}

void write_file_atomically(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    throw LaunchError(fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw LaunchError(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path, ec);
  if (ec) throw LaunchError(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

}  // namespace

SlurmExecutor::SlurmExecutor(SlurmExecutorOptions options, std::unique_ptr<SlurmClient> client)
    : opt_(std::move(options)),
      client_(std::move(client)),
      files_(opt_.sweep_dir),
      job_name_(slurm_job_name(opt_.sweep, opt_.sweep_dir)) {
  if (opt_.max_tasks_per_array > 0) {
    max_tasks_per_array_ = opt_.max_tasks_per_array;
  } else {
    const int max_array = client_->max_array_size();
    max_tasks_per_array_ = max_array > 1 ? static_cast<size_t>(max_array - 1) : 1000;
  }
  // Cancels from before this orchestrator started are history: they classify the tasks they
  // cancelled, but do not stop this run of the sweep.
  const std::vector<SlurmCancelRecord> cancels = files_.read_cancels();
  for (const SlurmCancelRecord& r : cancels) cancelled_jobs_.insert(r.job_ids.begin(), r.job_ids.end());
  cancel_records_ = cancels.size();
  std::error_code ec;
  cancels_size_ = fs::file_size(files_.dir() / "cancels.jsonl", ec);
  if (ec) cancels_size_ = 0;
}

SlurmExecutor::~SlurmExecutor() = default;

void SlurmExecutor::note(const std::string& line) const {
  if (notify_) notify_(line);
}

size_t SlurmExecutor::tasks_per_array() const { return max_tasks_per_array_; }

size_t SlurmExecutor::throttle_room() const {
  const int k = opt_.submit.max_parallel;
  if (k <= 0) return std::numeric_limits<size_t>::max();
  // What each live array may still run at once: its throttle, or all its live tasks if fewer.
  std::map<std::string, size_t> live;
  for (const auto& [run_id, t] : tasks_) ++live[t.status.ref.job_id];
  size_t used = 0;
  for (const auto& [job, n] : live) {
    const auto it = array_throttle_.find(job);
    const int throttle = it == array_throttle_.end() ? 0 : it->second;
    used += throttle > 0 ? std::min<size_t>(n, static_cast<size_t>(throttle)) : n;
  }
  return used >= static_cast<size_t>(k) ? 0 : static_cast<size_t>(k) - used;
}

size_t SlurmExecutor::capacity() const {
  if (cancel_seen_ || !orphans_scanned_ || !draining_orphans_.empty()) return running();
  return throttle_room() > 0 ? running() + tasks_per_array() : running();
}

bool SlurmExecutor::fits(const std::vector<int>& ranks) const {
  if (running() + ranks.size() > capacity()) return false;
  // The arrays launch_batch would submit, in order of their rank counts' first appearance, as
  // submit_array gives each its throttle: what the earlier ones leave of the room.
  std::vector<std::pair<int, size_t>> groups;
  for (int n : ranks) {
    const auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == n; });
    if (g == groups.end())
      groups.emplace_back(n, 1);
    else
      ++g->second;
  }
  size_t room = throttle_room();
  if (room == std::numeric_limits<size_t>::max()) return true;
  for (const auto& [n, count] : groups) {
    if (room == 0) return false;
    room -= std::min(room, count);
  }
  return true;
}

Launched SlurmExecutor::launch(const LaunchRequest& request) {
  const std::vector<LaunchResult> r = launch_batch({request});
  if (r.empty() || !r.front().launched)
    throw LaunchError(r.empty() ? "nothing was submitted" : r.front().error);
  return *r.front().launched;
}

std::vector<LaunchResult> SlurmExecutor::launch_batch(const std::vector<LaunchRequest>& requests) {
  // One array per rank count (its tasks share one resource request), in order of first
  // appearance; each split into arrays of at most tasks_per_array() tasks. Results go back in
  // the order of the requests.
  std::vector<LaunchResult> results(requests.size());
  std::vector<int> order;
  for (const LaunchRequest& r : requests)
    if (std::find(order.begin(), order.end(), r.ranks) == order.end()) order.push_back(r.ranks);
  for (int ranks : order) {
    std::vector<size_t> index;
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i].ranks == ranks) index.push_back(i);
    for (size_t start = 0; start < index.size(); start += tasks_per_array()) {
      const size_t end = std::min(index.size(), start + tasks_per_array());
      std::vector<LaunchRequest> chunk;
      for (size_t k = start; k < end; ++k) chunk.push_back(requests[index[k]]);
      std::vector<LaunchResult> done = submit_array(chunk);
      for (size_t k = start; k < end; ++k)
        results[index[k]] = k - start < done.size()
                                ? std::move(done[k - start])
                                : LaunchResult{std::nullopt, "nothing was submitted"};
    }
  }
  return results;
}

std::vector<LaunchResult> SlurmExecutor::submit_array(const std::vector<LaunchRequest>& requests) {
  const auto all_failed = [&](const std::string& why) {
    return std::vector<LaunchResult>(requests.size(), LaunchResult{std::nullopt, why});
  };
  if (cancel_seen_) return all_failed("the sweep is being cancelled (mxablate cancel)");
  for (const LaunchRequest& r : requests)
    if (r.trainer != requests.front().trainer || r.ranks != requests.front().ranks ||
        tasks_.count(r.run_id))
      return all_failed(tasks_.count(r.run_id) ? r.run_id + " is already submitted"
                        : r.ranks != requests.front().ranks
                            ? "one array cannot mix runs of different rank counts"
                            : "one submission cannot mix trainer binaries");

  const size_t room = throttle_room();
  if (room == 0)  // capacity() said so: the caller broke the contract
    return all_failed(fmt::format("--max-parallel {} is used up by the sweep's live tasks",
                                  opt_.submit.max_parallel));
  const int throttle = room == std::numeric_limits<size_t>::max()
                           ? 0
                           : static_cast<int>(std::min(room, requests.size()));
  ArrayScript script;
  script.sweep = opt_.sweep;
  script.job_name = job_name_;
  script.slurm_dir = files_.dir();
  script.trainer = fs::absolute(requests.front().trainer);
  script.options = opt_.submit;
  script.ranks = std::max(1, requests.front().ranks);
  script.written_at = executor_timestamp();
  for (const LaunchRequest& r : requests)
    script.tasks.push_back({r.run_id, fs::absolute(r.run_dir), r.attempt, r.resume});
  const std::string spec = array_spec(requests.size(), throttle);

  std::string job_id;
  try {
    script.submission = files_.next_submission_number();
    script.path = files_.script_path(script.submission);
    const fs::path& path = script.path;
    write_file_atomically(path, render_array_script(script, spec));
    job_id = submit_with_retries(path, spec);
  } catch (const LaunchError& e) {
    return all_failed(e.what());
  } catch (const SlurmError& e) {
    return all_failed(e.what());
  }

  // Recorded before it may start: a task that runs is always one the next orchestrator can find.
  SlurmSubmission record{job_id, script.submission, spec,
                         std::chrono::duration<double>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count(),
                         script.tasks};
  try {
    files_.append_submission(record);
  } catch (const std::exception& e) {
    try {
      client_->cancel({job_id});
    } catch (const SlurmError&) {
    }
    return all_failed(fmt::format("{}; cancelled the held job {}", e.what(), job_id));
  }
  std::string release_error;
  for (int i = 0; i < 3; ++i) {
    try {
      client_->release(job_id);
      release_error.clear();
      break;
    } catch (const SlurmError& e) {
      release_error = e.what();
      if (!e.transient) break;
      std::this_thread::sleep_for(std::chrono::seconds(1 << i));
    }
  }
  if (!release_error.empty()) {
    try {
      client_->cancel({job_id});
    } catch (const SlurmError&) {
    }
    return all_failed(fmt::format("{}; cancelled the held job {}", release_error, job_id));
  }

  array_throttle_[job_id] = throttle;
  std::vector<LaunchResult> results;
  const auto now = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    Tracked t;
    t.run_id = requests[i].run_id;
    t.status.ref = {job_id, static_cast<int>(i)};
    t.status.state = parse_slurm_job_state("PENDING");
    t.submitted = now;
    const std::string ref = t.status.ref.text();
    tasks_[t.run_id] = std::move(t);
    results.push_back({Launched{ref, ref, "", opt_.submit.gpus_per_run > 0 ? "cuda" : "cpu"}, ""});
  }
  force_poll_ = true;
  return results;
}

std::string SlurmExecutor::submit_with_retries(const fs::path& script, const std::string& spec) {
  for (int i = 0;; ++i) {
    try {
      return client_->submit(script, spec, /*hold=*/true);
    } catch (const SlurmError& e) {
      if (!e.transient || i == 2) throw;
      note(fmt::format("warning: {}; trying again", e.what()));
      std::this_thread::sleep_for(std::chrono::seconds(1 << i));
    }
  }
}

bool SlurmExecutor::check_cancels(bool reread) {
  // Cheap check first (the file's size); `reread` opens the file whatever stat says — on NFS,
  // opening revalidates what a cached stat may not yet show.
  std::error_code ec;
  const uintmax_t size = fs::file_size(files_.dir() / "cancels.jsonl", ec);
  if (!reread && (ec || size == cancels_size_)) return false;
  const std::vector<SlurmCancelRecord> records = files_.read_cancels();
  if (!ec) cancels_size_ = size;
  for (const SlurmCancelRecord& r : records) cancelled_jobs_.insert(r.job_ids.begin(), r.job_ids.end());
  if (records.size() <= cancel_records_) return false;
  cancel_records_ = records.size();
  if (cancel_seen_) return false;
  cancel_seen_ = true;
  note(fmt::format("the sweep is being cancelled (mxablate cancel{}): no more submissions",
                   records.back().by.empty() ? "" : " by " + records.back().by));
  return true;
}

void SlurmExecutor::scan_for_orphans() {
  // Which journaled tasks some open attempt claims is known once recover() has run for all of
  // them — i.e. now, at the sweep loop's first collect_exits.
  std::map<SlurmTaskRef, std::string> journaled;
  for (const SlurmSubmission& s : files_.read_submissions())
    for (size_t i = 0; i < s.tasks.size(); ++i)
      journaled[{s.job_id, static_cast<int>(i)}] = s.tasks[i].run_id;
  std::set<SlurmTaskRef> claimed;
  for (const auto& [run_id, t] : tasks_) claimed.insert(t.status.ref);
  std::vector<std::string> to_cancel;
  std::vector<std::string> foreign;
  for (const SlurmTaskStatus& s : client_->query_name(job_name_)) {
    if (s.state.ended() || claimed.count(s.ref)) continue;
    const auto j = journaled.find(s.ref);
    if (j != journaled.end() || s.reason == "JobHeldUser") {
      // Submitted by an orchestrator that stopped before recording the attempt (or, held and
      // unjournaled, before even recording the submission).
      to_cancel.push_back(s.ref.text());
      draining_orphans_.insert(s.ref);
      note(fmt::format("cancelling Slurm task {}{}: an earlier mxablate submitted it but stopped "
                       "before recording it, and it must not train a run twice",
                       s.ref.text(), j != journaled.end() ? " (run " + j->second + ")" : ""));
    } else if (std::find(foreign.begin(), foreign.end(), s.ref.job_id) == foreign.end()) {
      foreign.push_back(s.ref.job_id);
    }
  }
  if (!foreign.empty()) {
    std::string ids;
    for (const std::string& id : foreign) ids += (ids.empty() ? "" : ", ") + id;
    throw std::runtime_error(fmt::format(
        "Slurm job(s) {} named {} were not submitted by mxablate (a batch script of this sweep "
        "submitted by hand?) and would train the same runs: wait for them or cancel them "
        "(scancel {}), then run again",
        ids, job_name_, foreign.front()));
  }
  if (!to_cancel.empty()) client_->cancel(to_cancel);
  orphans_scanned_ = true;
}

AttemptExit SlurmExecutor::make_exit(const std::string& run_id, const SlurmTaskRef& ref,
                                     const SlurmTaskStatus* status, const std::string& why) const {
  AttemptExit e;
  e.run_id = run_id;
  // The task's own record of the trainer's status (bash: 128+N when signal N killed it; the
  // trainer's own exit codes are 0–4, so there is no ambiguity).
  if (const auto rc = files_.read_exit_status(ref)) {
    if (*rc > 128 && *rc <= 128 + 64)
      e.signal = *rc - 128;
    else
      e.exit_code = *rc;
  } else if (status && status->wait_status && status->state.end == SlurmEnd::kExited) {
    // No exit file (the task could not write it): the batch script's status, from squeue.
    const int w = *status->wait_status;
    if (WIFSIGNALED(w))
      e.signal = WTERMSIG(w);
    else
      e.exit_code = WEXITSTATUS(w);
  }
  std::string detail = fmt::format("Slurm task {}", ref.text());
  if (status) {
    if (status->state.end != SlurmEnd::kExited) detail += " " + status->state.name;
    if (status->state.end == SlurmEnd::kTimeLimit) detail += " (its --time limit)";
    if (status->state.end == SlurmEnd::kCancelled && cancelled_jobs_.count(ref.job_id))
      detail += " (by mxablate cancel)";
    if (!status->nodes.empty()) detail += " on " + status->nodes;
  }
  if (!why.empty()) detail += " " + why;
  if (e.exit_code == 66 && !files_.read_exit_status(ref))
    detail += ": the run directory is not visible there — the runs directory must be on a "
              "filesystem shared with this host";
  if (e.exit_code == 75)
    detail += ": the run directory stayed in use by an earlier trainer of the run";
  if (e.exit_code == 127)
    detail += ": the trainer could not be started there (is it on a shared filesystem?)";
  e.detail = detail;
  return e;
}

void SlurmExecutor::tolerate(const SlurmError& e) {
  // A controller that is restarting or overloaded is routine on a cluster; anything else (no
  // squeue on PATH, a rejected option) will not go away by waiting.
  if (!e.transient) throw std::runtime_error(e.what());
  const auto now = Clock::now();
  if (!failing_since_) failing_since_ = now;
  if (now - *failing_since_ > opt_.unreachable_limit)
    throw std::runtime_error(fmt::format(
        "Slurm has not answered for {} s: {}",
        std::chrono::duration_cast<std::chrono::seconds>(now - *failing_since_).count(), e.what()));
  if (now - last_failure_note_ > std::chrono::minutes(1)) {
    last_failure_note_ = now;
    note(fmt::format("warning: {}; trying again (the jobs are not affected)", e.what()));
  }
}

void SlurmExecutor::answered() {
  if (failing_since_) note("Slurm answers again");
  failing_since_.reset();
}

void SlurmExecutor::poll(std::vector<AttemptExit>& exits) {
  std::set<std::string> jobs;
  for (const auto& [run_id, t] : tasks_) jobs.insert(t.status.ref.job_id);
  for (const SlurmTaskRef& r : draining_orphans_) jobs.insert(r.job_id);
  if (jobs.empty()) return;
  std::vector<SlurmTaskStatus> statuses;
  try {
    statuses = client_->query_jobs({jobs.begin(), jobs.end()});
  } catch (const SlurmError& e) {
    tolerate(e);
    return;
  }
  answered();
  std::map<SlurmTaskRef, const SlurmTaskStatus*> by_ref;
  for (const SlurmTaskStatus& s : statuses)
    if (ours(s)) by_ref[s.ref] = &s;
  // A task cancelled by a `mxablate cancel` whose record we have not seen yet: look at the
  // record before deciding anything (mxablate cancel writes it before it calls scancel).
  for (const auto& [run_id, t] : tasks_) {
    const auto found = by_ref.find(t.status.ref);
    if (found != by_ref.end() && found->second->state.end == SlurmEnd::kCancelled &&
        !cancelled_jobs_.count(t.status.ref.job_id)) {
      if (check_cancels(true)) {
        force_poll_ = true;
        return;
      }
      break;
    }
  }

  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Tracked& t = it->second;
    const auto found = by_ref.find(t.status.ref);
    if (found == by_ref.end()) {
      // Slurm forgot it (MinJobAge passed, or the controller lost its state). Twice in a row,
      // so that one inconsistent answer cannot end a live task.
      if (++t.missing_polls < 2) {
        force_poll_ = true;
        ++it;
        continue;
      }
      exits.push_back(make_exit(t.run_id, t.status.ref, nullptr, "is no longer known to Slurm"));
      it = tasks_.erase(it);
      continue;
    }
    t.missing_polls = 0;
    t.status = *found->second;
    if (!t.announced_start && t.status.state.phase != SlurmPhase::kQueued) {
      t.announced_start = true;
      if (!t.status.state.ended())
        note(fmt::format("[{}] Slurm task {} started{} after {:.1f} s in the queue", t.run_id,
                         t.status.ref.text(), t.status.nodes.empty() ? "" : " on " + t.status.nodes,
                         std::chrono::duration<double>(Clock::now() - t.submitted).count()));
    }
    if (t.status.state.ended()) {
      exits.push_back(make_exit(t.run_id, t.status.ref, &t.status, ""));
      it = tasks_.erase(it);
      continue;
    }
    ++it;
  }
  for (auto it = draining_orphans_.begin(); it != draining_orphans_.end();) {
    const auto found = by_ref.find(*it);
    if (found == by_ref.end() || found->second->state.ended())
      it = draining_orphans_.erase(it);
    else
      ++it;
  }
  // Arrays with no live task left no longer count against the throttle.
  std::set<std::string> live_jobs;
  for (const auto& [run_id, t] : tasks_) live_jobs.insert(t.status.ref.job_id);
  for (auto it = array_throttle_.begin(); it != array_throttle_.end();)
    it = live_jobs.count(it->first) ? std::next(it) : array_throttle_.erase(it);
}

std::vector<AttemptExit> SlurmExecutor::collect_exits() {
  std::vector<AttemptExit> exits = std::move(ready_exits_);
  ready_exits_.clear();
  send_stops();
  recovery_statuses_.reset();  // recovery is over once the loop runs
  // A new cancel: report its exits only from the next call on, once the sweep loop has turned
  // it into a stop (so they are recorded as interrupted, not retried).
  if (check_cancels(false)) return exits;
  if (!orphans_scanned_) {
    try {
      scan_for_orphans();
      answered();
    } catch (const SlurmError& e) {
      tolerate(e);  // nothing is submitted until the scan has succeeded
    }
  }
  const auto now = Clock::now();
  if (!draining_orphans_.empty()) force_poll_ = force_poll_ || now - last_poll_ > std::chrono::seconds(1);
  if (force_poll_ || now - last_poll_ >= opt_.poll) {
    // A forced poll (after a submission) still waits a little: sbatch's answer and squeue's view
    // are not instantaneous, and a burst of squeue calls helps no one.
    if (!force_poll_ || now - last_poll_ >= std::min(opt_.poll, std::chrono::milliseconds(1000))) {
      force_poll_ = false;
      last_poll_ = now;
      poll(exits);
    }
  }
  return exits;
}

// Stops and kills are gathered and sent at the next collect_exits: one scancel for all the
// tasks a stopping sweep loop asks about, however many.
void SlurmExecutor::request_stop(const std::string& run_id) {
  const auto it = tasks_.find(run_id);
  if (it != tasks_.end()) to_stop_.insert(it->second.status.ref.text());
}

void SlurmExecutor::kill(const std::string& run_id) {
  const auto it = tasks_.find(run_id);
  if (it != tasks_.end()) to_kill_.insert(it->second.status.ref.text());
}

void SlurmExecutor::send_stops() {
  if (to_stop_.empty() && to_kill_.empty()) return;
  // Pending tasks leave the queue; running ones get SIGTERM (the trainer checkpoints), then
  // SIGKILL after the cluster's KillWait — or at once when killed.
  std::vector<std::string> kill(to_kill_.begin(), to_kill_.end());
  std::vector<std::string> stop(to_stop_.begin(), to_stop_.end());
  stop.insert(stop.end(), kill.begin(), kill.end());
  to_stop_.clear();
  to_kill_.clear();
  if (!kill.empty()) {
    try {
      client_->cancel(kill, /*kill_now=*/true);
    } catch (const SlurmError&) {
      // Pending tasks cannot be signalled; the plain cancel below removes them.
    }
  }
  try {
    client_->cancel(stop);
  } catch (const SlurmError& e) {
    note(fmt::format("warning: cannot cancel Slurm tasks: {}", e.what()));
  }
  force_poll_ = true;
}

bool SlurmExecutor::queued(const std::string& run_id) const {
  const auto it = tasks_.find(run_id);
  return it != tasks_.end() && it->second.status.state.phase == SlurmPhase::kQueued;
}

bool SlurmExecutor::ours(const SlurmTaskStatus& s) const {
  return s.name.empty() || s.name == job_name_;
}

std::vector<SlurmTaskStatus> SlurmExecutor::recovery_snapshot(const std::string& job_id) {
  // One squeue for all jobs of the journal, rather than one per open attempt.
  if (!recovery_statuses_ || !recovery_jobs_.count(job_id)) {
    recovery_jobs_.clear();
    for (const SlurmSubmission& s : files_.read_submissions()) recovery_jobs_.insert(s.job_id);
    recovery_jobs_.insert(job_id);
    try {
      recovery_statuses_ = client_->query_jobs({recovery_jobs_.begin(), recovery_jobs_.end()});
      std::erase_if(*recovery_statuses_, [this](const SlurmTaskStatus& s) { return !ours(s); });
    } catch (const SlurmError& e) {
      throw std::runtime_error(
          fmt::format("cannot ask Slurm about the jobs of the previous run: {}", e.what()));
    }
  }
  return *recovery_statuses_;
}

bool SlurmExecutor::recover(const results::OpenAttempt& a, std::chrono::milliseconds grace) {
  if (a.executor != name()) {
    // Left open by the local executor (the sweep ran locally before): it cannot be adopted,
    // only made sure of — the local executor stops it if it still runs on this host.
    LocalExecutor local({});
    return local.recover(a, grace);
  }
  const auto ref = parse_slurm_task_ref(a.executor_ref);
  if (!ref) return false;
  const std::vector<SlurmTaskStatus> statuses = recovery_snapshot(ref->job_id);
  const auto it = std::find_if(statuses.begin(), statuses.end(),
                               [&](const SlurmTaskStatus& s) { return s.ref == *ref; });
  if (it != statuses.end()) {
    if (it->state.ended()) {
      ready_exits_.push_back(make_exit(a.run_id, *ref, &*it, ""));
      return true;
    }
    Tracked t;
    t.run_id = a.run_id;
    t.status = *it;
    t.announced_start = it->state.phase != SlurmPhase::kQueued;
    t.submitted = Clock::now();
    tasks_[a.run_id] = std::move(t);
    if (!array_throttle_.count(ref->job_id)) {
      int throttle = 0;
      for (const SlurmSubmission& s : files_.read_submissions())
        if (s.job_id == ref->job_id) throttle = throttle_of(s.array_spec);
      array_throttle_[ref->job_id] = throttle;
    }
    return true;
  }
  // Slurm has forgotten the task; its exit file may still say how the trainer ended.
  if (files_.read_exit_status(*ref)) {
    ready_exits_.push_back(make_exit(a.run_id, *ref, nullptr, "is no longer known to Slurm"));
    return true;
  }
  return false;
}

std::optional<SlurmTaskStatus> SlurmExecutor::status_of(const std::string& run_id) const {
  const auto it = tasks_.find(run_id);
  if (it == tasks_.end()) return std::nullopt;
  return it->second.status;
}

}  // namespace mxablate::orchestrator
