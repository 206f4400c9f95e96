#include "mxablate/orchestrator/slurm_array_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <regex>

namespace mxablate::orchestrator {
namespace {

// Options whose value mxablate owns: changing them would break how tasks are found, logged or
// resumed.
constexpr std::array<std::string_view, 17> kReserved = {
    "--array",  "-a",       "--job-name", "-J",     "--output",     "-o",
    "--error",  "-e",       "--chdir",    "-D",     "--parsable",   "--hold",
    "-H",       "--wrap",   "--requeue",  "--no-requeue", "--export"};

std::string option_name(std::string_view arg) {
  const size_t eq = arg.find('=');
  std::string name(arg.substr(0, eq));
  // "-Jname" style short options with glued values
  if (name.size() > 2 && name[0] == '-' && name[1] != '-') name = name.substr(0, 2);
  return name;
}

bool has_line_break(std::string_view s) {
  return s.find('\n') != std::string_view::npos || s.find('\r') != std::string_view::npos;
}

// An #SBATCH value: Slurm splits directive lines on blanks unless quoted.
std::string directive_value(std::string_view v) {
  std::string s(v);
  if (s.find_first_of(" \t") != std::string::npos) s = '"' + s + '"';
  return s;
}

// A literal path inside a file-name pattern, where Slurm expands %A, %a, %j, … ("%%" is a
// percent sign).
std::string pattern_literal(std::string_view path) {
  std::string s;
  for (char c : path) {
    if (c == '%') s += '%';
    s += c;
  }
  return s;
}

std::string one_line(std::string_view s) {
  std::string out;
  for (char c : s) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool is_cpus_per_task(const std::string& name) { return name == "--cpus-per-task" || name == "-c"; }

}  // namespace

std::optional<int> sbatch_cpus_per_task(const std::vector<std::string>& sbatch_args) {
  std::optional<int> cpus;
  for (const std::string& arg : sbatch_args) {
    const std::string name = option_name(arg);
    if (!is_cpus_per_task(name)) continue;
    const size_t eq = arg.find('=');
    const std::string value = eq != std::string::npos ? arg.substr(eq + 1) : arg.substr(name.size());
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (value.empty() || used != value.size() || n < 1 || !std::isdigit(static_cast<unsigned char>(value[0])))
      throw std::invalid_argument(fmt::format(
          "--sbatch-arg: '{}': {} needs a whole number of CPUs (e.g. --cpus-per-task=8)",
          one_line(arg), name));
    cpus = n;
  }
  return cpus;
}

bool is_slurm_time_limit(std::string_view text) {
  static const std::regex pattern(
      R"(^(INFINITE|UNLIMITED|\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$)");
  return std::regex_match(text.begin(), text.end(), pattern);
}

void validate_slurm_submit_options(const SlurmSubmitOptions& o) {
  if (!o.time_limit.empty() && !is_slurm_time_limit(o.time_limit))
    throw std::invalid_argument(fmt::format(
        "--time: '{}' is not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
        "D-HH:MM:SS)",
        o.time_limit));
  if (o.gpus_per_run < 0) throw std::invalid_argument("--gpus-per-run: must be 0 or more");
  if (o.max_parallel < 0)
    throw std::invalid_argument("--max-parallel: must be at least 1 (or 0 for no limit)");
  if (has_line_break(o.partition) || o.partition.find_first_of(" \t") != std::string::npos)
    throw std::invalid_argument(fmt::format("--partition: '{}' is not a partition name",
                                            one_line(o.partition)));
  for (const std::string& arg : o.sbatch_args) {
    if (arg.empty() || arg[0] != '-' || has_line_break(arg))
      throw std::invalid_argument(fmt::format(
          "--sbatch-arg: '{}' is not one sbatch option (expected e.g. --account=abc)",
          one_line(arg)));
    const std::string name = option_name(arg);
    if (std::find(kReserved.begin(), kReserved.end(), name) != kReserved.end())
      throw std::invalid_argument(fmt::format(
          "--sbatch-arg: mxablate sets {} itself (it is how tasks are found, logged and resumed)",
          name));
    if (arg.find('"') != std::string::npos && arg.find_first_of(" \t") != std::string::npos)
      throw std::invalid_argument(fmt::format(
          "--sbatch-arg: '{}' mixes quotes and blanks, which an #SBATCH line cannot hold", arg));
  }
  sbatch_cpus_per_task(o.sbatch_args);
}

std::string array_spec(size_t tasks, int throttle) {
  std::string s = tasks <= 1 ? "0" : fmt::format("0-{}", tasks - 1);
  if (throttle > 0 && static_cast<size_t>(throttle) < tasks) s += fmt::format("%{}", throttle);
  return s;
}

std::string shell_quote(std::string_view text) {
  std::string s = "'";
  for (char c : text) {
    if (c == '\'')
      s += "'\\''";
    else
      s += c;
  }
  return s + "'";
}

std::string slurm_job_name(const std::string& sweep, const std::filesystem::path& sweep_dir) {
  return fmt::format("mxablate-{}-{:08x}", sweep,
                     static_cast<uint32_t>(fnv1a(sweep_dir.lexically_normal().string())));
}

std::string render_array_script(const ArrayScript& s, const std::string& spec) {
  const std::string slurm_dir = s.slurm_dir.string();
  std::string t;
  t += "#!/bin/bash\n";
  t += fmt::format("# mxablate: sweep {}, submission {}: {} run(s) as one Slurm job array", s.sweep,
                   s.submission, s.tasks.size());
  if (!s.written_at.empty()) t += fmt::format(", written {}", s.written_at);
  t += ".\n";
  t += "# Task i runs the trainer for run directory i below, appending its output to that\n"
       "# directory's stdout.log / stderr.log. Slurm's own messages go to slurm/<job>_<task>.log,\n"
       "# the trainer's exit status to slurm/<job>_<task>.exit.\n";
  t += fmt::format(
      "# mxablate submitted it with `sbatch --parsable --hold --array={}`, recorded the job id\n"
      "# (attempts.executor_ref) and released it; re-running `mxablate run` re-attaches to it.\n"
      "# Submitting it again by hand runs the same tasks, but mxablate does not know that job and\n"
      "# will not run this sweep while it is queued or running:\n"
      "#   sbatch {}\n",
      spec, shell_quote(one_line(s.path.empty() ? "<this file>" : s.path.string())));
  const auto directive = [&](std::string_view name, std::string_view value) {
    t += fmt::format("#SBATCH {}={}\n", name, directive_value(value));
  };
  directive("--job-name", s.job_name);
  directive("--array", spec);
  directive("--output", pattern_literal(slurm_dir) + "/%A_%a.log");
  directive("--chdir", slurm_dir);
  t += "#SBATCH --no-requeue\n";  // preempted/failed tasks come back through mxablate, resumed
  // One task even for a run of several ranks: the trainer starts its ranks itself.
  directive("--ntasks", "1");
  if (!s.options.partition.empty()) directive("--partition", s.options.partition);
  if (!s.options.time_limit.empty()) directive("--time", s.options.time_limit);
  const int ranks = std::max(1, s.ranks);
  if (s.options.gpus_per_run > 0)
    directive("--gres", fmt::format("gpu:{}", s.options.gpus_per_run * ranks));
  // CPUs are per rank, like GPUs: a run of N ranks asks N times what --cpus-per-task says.
  const std::optional<int> cpus = sbatch_cpus_per_task(s.options.sbatch_args);
  if (ranks > 1) directive("--cpus-per-task", std::to_string(cpus.value_or(1) * ranks));
  for (const std::string& arg : s.options.sbatch_args) {
    if (ranks > 1 && is_cpus_per_task(option_name(arg))) continue;  // written above, scaled
    const size_t eq = arg.find('=');
    if (eq == std::string::npos)
      t += fmt::format("#SBATCH {}\n", arg);
    else
      directive(arg.substr(0, eq), arg.substr(eq + 1));
  }
  t += "\nset -u\n";
  t += fmt::format("trainer={}\n", shell_quote(s.trainer.string()));
  t += fmt::format("slurm_dir={}\n", shell_quote(slurm_dir));
  t += "run_dirs=(\n";
  for (size_t i = 0; i < s.tasks.size(); ++i)
    t += fmt::format("  {}  # task {}: run {}, attempt {}{}\n",
                     shell_quote(s.tasks[i].run_dir.string()), i, one_line(s.tasks[i].run_id),
                     s.tasks[i].attempt, s.tasks[i].resume ? ", resumes from its checkpoint" : "");
  t += ")\n";
  t += "resume=(";
  for (const ArrayTask& task : s.tasks) t += task.resume ? " 1" : " 0";
  t += " )\n";
  t += "attempts=(";
  for (const ArrayTask& task : s.tasks) t += fmt::format(" {}", task.attempt);
  t += " )\n";
  t += fmt::format("ranks={}  # parallel.data of every run here: the trainer starts the ranks\n",
                   ranks);
  t += R"SH(
i=${SLURM_ARRAY_TASK_ID:?this script is a job array: submit it with sbatch --array=...}
dir=${run_dirs[$i]}
task=${SLURM_ARRAY_JOB_ID}_$i
# Exit code 66 (EX_NOINPUT): the run directory is not on a filesystem this node shares.
if [ ! -f "$dir/config.json" ]; then
  echo "mxablate: $dir/config.json is not visible on $(hostname): the runs directory must be on a filesystem shared with the host running mxablate" >&2
  exit 66
fi
exec </dev/null >>"$dir/stdout.log" 2>>"$dir/stderr.log"
# One trainer per run directory at a time. Slurm may give up on a task whose trainer still runs
# (a node that failed but goes on, a cancelled task still checkpointing) and mxablate then
# resubmits it: the new task waits here for the old trainer. The lock is inherited by the
# trainer, so it is held exactly as long as the trainer lives. Exit code 75 (EX_TEMPFAIL): the
# old one did not let go within 10 minutes.
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$dir/.trainer.lock"
  if ! flock -w 600 9; then
    echo "mxablate: $dir is still in use by another trainer after 10 minutes" >&2
    exit 75
  fi
fi
export MXABLATE_ATTEMPT=${attempts[$i]} MXABLATE_SLOT=$task
# As many CPU threads per rank as Slurm gave the task (--cpus-per-task) over its ranks, unless
# set explicitly.
if [ -z "${OMP_NUM_THREADS:-}" ] && [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  threads=$(( SLURM_CPUS_PER_TASK / ranks ))
  export OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 ))
fi
banner="=== mxablate: attempt ${attempts[$i]}$([ "${resume[$i]}" = 1 ] && echo ' (resume)') as Slurm job $task on $(hostname) at $(date '+%Y-%m-%d %H:%M:%S') ==="
echo "$banner"
echo "$banner" >&2

# The trainer runs in the background so that a signal for this shell alone (--signal=B:...) is
# passed on; Slurm's own SIGTERM (scancel, time limit) reaches both, which the trainer tolerates.
child=""
stop=""
forward_stop() { stop=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; }
trap forward_stop TERM INT
args=(--run-dir "$dir")
[ "${resume[$i]}" = 1 ] && args+=(--resume)
"$trainer" "${args[@]}" &
child=$!
[ -n "$stop" ] && kill -TERM "$child" 2>/dev/null
while :; do
  wait "$child"
  rc=$?
  kill -0 "$child" 2>/dev/null || break   # wait was interrupted by a signal: wait again
done
wait "$child" 2>/dev/null
last=$?
[ "$last" -ne 127 ] && rc=$last            # the status bash kept if it reaped the trainer itself
printf '%s\n' "$rc" >"$slurm_dir/$task.exit.tmp" && mv -f "$slurm_dir/$task.exit.tmp" "$slurm_dir/$task.exit"
exit "$rc"
)SH";
  return t;
}

}  // namespace mxablate::orchestrator
