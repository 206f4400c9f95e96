#include "mxablate/results/run_log.h"

#include <fmt/format.h>

namespace mxablate::results {

RunLog::RunLog(Database& db, std::string run_id, std::string events_path)
    : db_(db), run_id_(std::move(run_id)), path_(std::move(events_path)), reader_(load_reader()),
      committed_(reader_.position()) {}

contract::EventReader RunLog::load_reader() const {
  Statement st(db_, "SELECT ingest_offset, last_seq, ingest_position FROM runs WHERE run_id = ?1");
  st.bind(1, run_id_);
  if (!st.step()) throw SqliteError(db_.path() + ": no run " + run_id_, 0);
  const int64_t offset = st.get_int(0);
  const int64_t last_seq = st.get_int(1);
  if (const auto stored = st.get_opt_text(2)) {
    try {
      contract::LogPosition p = contract::LogPosition::from_json(nlohmann::json::parse(*stored));
      if (p.offset == offset) return contract::EventReader(path_, p);
    } catch (const std::exception&) {
      // Unreadable: fall back to the offset alone (the log is adopted and checked from there).
    }
  }
  contract::EventReader reader(path_, offset);
  contract::LogPosition p = reader.position();
  p.state.last_seq = last_seq;
  return contract::EventReader(path_, p);
}

namespace {

void merge(IngestSummary& into, IngestSummary&& from) {
  into.inserted += from.inserted;
  into.duplicates += from.duplicates;
  into.discarded += from.discarded;
  if (from.last_train) into.last_train = std::move(from.last_train);
  if (from.last_eval) into.last_eval = std::move(from.last_eval);
  if (from.last_run_end) into.last_run_end = std::move(from.last_run_end);
  for (auto& d : from.divergences) into.divergences.push_back(std::move(d));
}

}  // namespace

RunLog::Update RunLog::poll() {
  Update update;
  try {
    for (bool more = true; more;) {
      const int64_t before = reader_.offset();
      contract::EventReader::Batch batch = reader_.poll();
      more = batch.more;
      if (batch.restarted)
        update.warnings.push_back(fmt::format(
            "events.jsonl {}; forgot what had been ingested from it and read it again from "
            "its start",
            *batch.restarted));
      for (const contract::BadLine& bad : batch.bad_lines) {
        ++bad_lines_;
        if (bad_lines_ <= kMaxLineWarnings)
          update.warnings.push_back(
              fmt::format("events.jsonl line {}: {}; line skipped", bad.line, bad.reason));
        else if (bad_lines_ == kMaxLineWarnings + 1)
          update.warnings.push_back(
              "more bad lines in events.jsonl; they are skipped without a warning each");
      }
      if (batch.events.empty() && !batch.restarted && reader_.offset() == before) break;
      merge(update.summary,
            ingest_events(db_, run_id_, batch.events, reader_.position(), batch.restarted.has_value()));
      committed_ = reader_.position();
      update.events += batch.events.size();
      for (const auto& ev : batch.events) {  // checked events: step and tokens are integers
        update.step = ev["step"].get<int64_t>();
        update.tokens = ev["tokens"].get<int64_t>();
      }
    }
  } catch (const SqliteError&) {
    // What was read but not stored is read again next time. From the position kept here, not
    // one read back from the database that has just failed.
    reader_ = contract::EventReader(path_, committed_);
    throw;
  }
  return update;
}

}  // namespace mxablate::results
