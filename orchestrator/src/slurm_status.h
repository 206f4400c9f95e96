// The "slurm" column of `mxablate status`: for each run whose latest attempt went to Slurm, its
// task ("12_3") and — while that attempt is open — what squeue says about it right now
// ("RUNNING on node7", "PENDING (JobArrayTaskLimit)"). Status stays read-only: the states are
// asked from Slurm, not stored.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::cli {

struct SlurmColumn {
  std::map<std::string, std::string> by_run;  // empty: the sweep has no Slurm attempts
  std::string note;  // e.g. why the live states are missing; empty if none
};

SlurmColumn slurm_column(results::Database& db, int64_t sweep_id);

}  // namespace mxablate::cli
