// The results store's schema (docs/design.md §6), versioned with PRAGMA user_version. Each migration
// moves the database from version N-1 to N inside one transaction, so a database is always at
// exactly one known version; opening an older database upgrades it, a newer one is refused.
#pragma once

#include <span>
#include <string>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

struct Migration {
  int version;              // the user_version after applying it (1, 2, …, in order)
  const char* description;
  const char* sql;
};

// The migrations this build knows, in order.
std::span<const Migration> migrations();
int latest_schema_version();

int schema_version(Database& db);
// Applies the migrations above the database's version; throws when the database is newer than
// the newest migration. Returns the number applied.
int migrate(Database& db, std::span<const Migration> list);
inline int migrate(Database& db) { return migrate(db, migrations()); }

// The status values a run may hold (the CHECK constraint of runs.status).
namespace status {
inline constexpr const char* kPending = "pending";
inline constexpr const char* kRunning = "running";
inline constexpr const char* kConverged = "converged";
inline constexpr const char* kBudgetExhausted = "budget_exhausted";
inline constexpr const char* kDiverged = "diverged";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kInterrupted = "interrupted";  // stopped on request; resumable
// Stopped early: its validation curve's projection says it cannot reach the target within its
// budget (docs/design.md §6). A final result, censored at its budget like budget_exhausted;
// neither a failure nor a divergence.
inline constexpr const char* kProjectedNotReached = "projected_not_reached";
}  // namespace status

// converged, budget_exhausted, diverged, projected_not_reached: the run produced its result and
// never runs again.
bool is_final_result(const std::string& status);

}  // namespace mxablate::results
