// The processes of one data-parallel run (docs/design.md §4, "Data-parallel runs"). `mxablate-train` started for a
// config with parallel.data N > 1 and no rank in its environment is the run's launcher: it owns
// the c10d TCPStore the ranks meet through (a free localhost port), starts N copies of itself as
// ranks 0..N-1 (rank i on the i-th visible GPU, or on the CPU with Gloo), forwards SIGTERM and
// SIGINT to them, and when one rank dies stops the others: the run is one unit for the
// orchestrator's retries, resumed from its checkpoint like any other run.
//
// A process is a rank when its environment says so, as torchrun sets it (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or, under `srun` with several tasks, Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT given).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mxablate::trainer {

struct RankInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;  // the GPU index among the visible ones
  std::string store_host;
  int store_port = 0;
  // Rank 0 opens the store itself unless a launcher hosts it: ours (MXABLATE_STORE_HOSTED) or
  // torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True). Under srun nobody else does.
  bool hosts_store = false;
};

// The rank this process is, if its environment names one; throws contract::ConfigError naming
// the variable when one is malformed. Slurm's variables count only for a run that asked for
// several ranks (`ranks` > 1): a one-rank run started inside a multi-task allocation (an
// `salloc -n 4` shell running `mxablate run`) is not a rank of anything.
std::optional<RankInfo> rank_from_environment(int ranks);

// Runs `world` ranks of this program with `arguments` (argv without argv[0]) and returns the
// run's exit code: the ranks' common code, or the first failure's (128 + signal for a rank
// killed by a signal).
int launch_ranks(int world, const std::vector<std::string>& arguments);

}  // namespace mxablate::trainer
