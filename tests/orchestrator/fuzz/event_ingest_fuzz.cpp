// libFuzzer target for event-log ingestion: any bytes as events.jsonl, read by the orchestrator's
// one ingestion path (contract::EventReader + parse_event_line → results::RunLog → SQLite), must
// give rows for the lines that are events and a one-line printable warning for each that is not
// — never a crash, an exception, a sanitizer report, a hang or unbounded memory. And the store
// must agree with the log: reading it again adds nothing.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "mxablate/results/ingest.h"
#include "mxablate/results/run_log.h"
#include "mxablate/results/schema.h"

using namespace mxablate;
using namespace mxablate::results;

namespace {

struct Setup {
  std::string log;
  Database db{":memory:", Database::Mode::kReadWriteCreate};
  Setup() {
    const std::filesystem::path shm = "/dev/shm";
    std::string dir = (std::filesystem::is_directory(shm) ? shm : std::filesystem::temp_directory_path())
                          .string() + "/mxablate-event-fuzz-XXXXXX";
    if (!::mkdtemp(dir.data())) std::abort();
    log = dir + "/events.jsonl";
    migrate(db);
    db.exec("INSERT INTO sweeps (name, recipe_path, recipe_text, runs_dir, created_at, updated_at) "
            "VALUES ('s', 'r', 't', '" + dir + "', 0, 0);"
            "INSERT INTO runs (run_id, sweep_id, arm, arm_index, plan_index, config_json, run_dir, "
            "created_at) VALUES ('r', 1, 'a', 0, 0, '{}', '" + dir + "', 0);");
  }
};

int64_t stored_rows(Database& db) {
  Statement st(db, "SELECT (SELECT COUNT(*) FROM evals) + (SELECT COUNT(*) FROM train_steps) + "
                   "(SELECT COUNT(*) FROM quant_stats) + (SELECT COUNT(*) FROM events)");
  st.step();
  return st.get_int(0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup setup;
  {
    std::FILE* f = std::fopen(setup.log.c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  {
    Transaction tx(setup.db);
    forget_run_events(setup.db, "r");
    tx.commit();
  }
  RunLog log(setup.db, "r", setup.log);
  const RunLog::Update first = log.poll();
  for (const std::string& w : first.warnings) {
    for (char c : w)
      if (c == '\n' || c == '\0') std::abort();  // one printable line each
    if (w.rfind("events.jsonl ", 0) != 0 && w.rfind("more bad lines", 0) != 0) std::abort();
  }
  // Every event became exactly one row, unless a resume event discarded a lost timeline.
  const int64_t rows = stored_rows(setup.db);
  if (first.summary.discarded == 0 && rows != static_cast<int64_t>(first.events)) std::abort();
  // Reading again, by this reader or by a new one (an orchestrator restart), finds nothing new.
  if (log.poll().events != 0) std::abort();
  RunLog again(setup.db, "r", setup.log);
  const RunLog::Update second = again.poll();
  if (second.events != 0 || !second.warnings.empty() || stored_rows(setup.db) != rows) std::abort();
  return 0;
}
