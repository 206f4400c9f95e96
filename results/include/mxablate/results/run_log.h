// Ingestion of one run's event log as it grows: the only path from events.jsonl into the store
// (the sweep loop and the recovery of an earlier orchestrator's attempts both use it), so every
// log gets the same checks and the same warnings.
//
// The position reached (offset, and what identifies the consumed part of the log) is stored
// with the rows in each transaction. When the log turns out not to be the one ingested so far —
// shorter, replaced by another file (shorter or longer), deleted with its run directory — the
// run's ingested rows are forgotten and the log is read again from its start, with a warning:
// the store always reflects the log that is there, never a mix of two.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/contract/event_log.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

class RunLog {
 public:
  // Resumes from the position stored for the run (the run must exist).
  RunLog(Database& db, std::string run_id, std::string events_path);

  struct Update {
    IngestSummary summary;
    size_t events = 0;                  // events read and stored (new or not)
    std::optional<int64_t> step, tokens;  // of the newest of them
    std::vector<std::string> warnings;  // "events.jsonl line 7: …", ready to print
  };
  // Reads and stores everything complete that the log gained. On a database error the reader
  // goes back to the stored position (nothing is skipped) and the error propagates.
  Update poll();

  // Bad lines get a warning each, up to this many per RunLog; then one saying the rest are
  // only counted.
  static constexpr int kMaxLineWarnings = 20;
  int64_t bad_lines() const { return bad_lines_; }

 private:
  contract::EventReader load_reader() const;

  Database& db_;
  std::string run_id_;
  std::string path_;
  contract::EventReader reader_;
  contract::LogPosition committed_;  // the position stored with the last committed rows
  int64_t bad_lines_ = 0;
};

}  // namespace mxablate::results
