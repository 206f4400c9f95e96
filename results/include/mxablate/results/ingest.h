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

#include "mxablate/contract/event_log.h"
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

// `events` in file order (checked by contract::parse_event_line); `reached` is the reader's
// position after them, stored with them. `forget_first`: the log is not the one ingested so far
// (contract::EventReader::Batch::restarted); the run's event rows are deleted in the same
// transaction, so the store never mixes two logs.
IngestSummary ingest_events(Database& db, const std::string& run_id,
                            const std::vector<nlohmann::json>& events,
                            const contract::LogPosition& reached, bool forget_first = false);

// The same with only a byte offset (no identity of the log): the next reader adopts the log
// found at that offset. For tools and tests that feed events directly.
IngestSummary ingest_events(Database& db, const std::string& run_id,
                            const std::vector<nlohmann::json>& events, int64_t new_offset);

// Deletes everything ingested for the run and its position in the log (no transaction of its
// own: the caller's).
void forget_run_events(Database& db, const std::string& run_id);

}  // namespace mxablate::results
