// Ingestion: copies a batch of a run's events (from contract::EventReader) into the store, in one
// transaction together with the log offset it reached, so that a crash at any point leaves the
// store consistent with some prefix of the log.
//
// Idempotent on (run_id, seq): events already stored are ignored, so replaying a log (from any
// offset, or from the start) never duplicates a row. A `resume` event deletes the rows of the
// timeline lost in a crash (seq in (discard_after_seq, resume seq)), so a resumed run's
// evaluations appear exactly once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

struct IngestSummary {
  int64_t inserted = 0;    // new rows
  int64_t duplicates = 0;  // events already stored
  int64_t discarded = 0;   // rows of lost timelines removed by resume events
  // The newest of each, from this batch (for progress displays).
  std::optional<nlohmann::json> last_train;
  std::optional<nlohmann::json> last_eval;
  std::optional<nlohmann::json> last_run_end;
  std::vector<nlohmann::json> divergences;
};

// `events` in file order; `new_offset` is the reader's offset after them.
IngestSummary ingest_events(Database& db, const std::string& run_id,
                            const std::vector<nlohmann::json>& events, int64_t new_offset);

}  // namespace mxablate::results
