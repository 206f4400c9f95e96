// RunLog: the one path from a run's events.jsonl into the store. Bad lines are warnings (run's
// line number and reason) and never data nor a stuck sweep; a log that was truncated, replaced
// (shorter or longer) or deleted is recognised and the store re-reads it instead of applying an
// old offset to it; the position survives an orchestrator restart.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/results/run_log.h"
#include "mxablate/results/schema.h"
#include "store_fixture.h"

using namespace mxablate;
using namespace mxablate::results;
using mxablate::testing::StoreFixture;
using nlohmann::json;

namespace {

std::string ev(int64_t seq, const std::string& kind, json fields = json::object()) {
  json e = {{"seq", seq}, {"kind", kind}, {"time", 1000.0 + static_cast<double>(seq)}};
  for (auto& [k, v] : fields.items()) e[k] = v;
  return e.dump() + "\n";
}

std::string eval(int64_t seq, int64_t step, double loss) {
  return ev(seq, "eval", {{"step", step}, {"tokens", step * 100}, {"val_loss", loss}});
}

struct LogFixture : StoreFixture {
  std::string path = (dir.path() / "run-a" / "events.jsonl").string();
  LogFixture() { std::filesystem::create_directories(dir.path() / "run-a"); }
  void write(const std::string& text, bool append = true) {
    std::ofstream(path, append ? std::ios::app | std::ios::binary : std::ios::binary) << text;
  }
};

bool mentions(const std::vector<std::string>& warnings, const std::string& part) {
  for (const auto& w : warnings)
    if (w.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("bad lines are warned about by line number and never stored, later lines are") {
  LogFixture f;
  f.write(eval(1, 1, 4.0) + eval(2, 2, 3.5) +
          // the seq goes backwards with a fake best loss: not data
          eval(1, 3, 0.001) +
          // a number beyond a double: used to stop every later `mxablate run` of the sweep
          R"({"seq":3,"kind":"eval","time":1,"step":3,"tokens":300,"val_loss":1e999})" "\n" +
          // a seq near 2^63 would wrap
          R"({"seq":9223372036854775807,"kind":"eval","time":1,"step":3,"tokens":300,"val_loss":0.5})" "\n" +
          ev(3, "target_reached", {{"step", 1}, {"tokens", 100}, {"val_loss", 0.1}}) +  // goes back
          eval(4, 3, 3.0));
  RunLog log(f.store.db(), "run-a", f.path);
  const RunLog::Update up = log.poll();
  CHECK(up.events == 3);
  CHECK(up.summary.inserted == 3);
  REQUIRE(up.warnings.size() == 4);
  CHECK(up.warnings[0] == "events.jsonl line 3: seq 1 does not follow seq 2 (seq must increase); line skipped");
  CHECK(up.warnings[1] == "events.jsonl line 4: a number does not fit a double; line skipped");
  CHECK(up.warnings[2].rfind("events.jsonl line 5: seq 9223372036854775807 is not an integer", 0) == 0);
  CHECK(up.warnings[3].rfind("events.jsonl line 6: step/tokens 1/100 go back", 0) == 0);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 3);
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(3.0));
  CHECK(f.is_null("SELECT tokens_to_target FROM runs"));
  CHECK(f.scalar<int64_t>("SELECT last_seq FROM runs") == 4);
  // Nothing is stuck: the next lines keep coming in.
  f.write(eval(5, 4, 2.5));
  const RunLog::Update next = log.poll();
  CHECK(next.events == 1);
  CHECK(next.warnings.empty());
  CHECK(f.scalar<double>("SELECT final_val_loss FROM runs") == Approx(2.5));
}

TEST_CASE("warnings about bad lines are bounded per run") {
  LogFixture f;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "garbage\n";
  f.write(text + eval(1, 1, 4.0));
  RunLog log(f.store.db(), "run-a", f.path);
  const RunLog::Update up = log.poll();
  CHECK(up.events == 1);
  CHECK(up.warnings.size() == RunLog::kMaxLineWarnings + 1);
  CHECK(log.bad_lines() == 100);
}

TEST_CASE("a partial last line waits, the position survives a restart without replays") {
  LogFixture f;
  f.write(eval(1, 1, 4.0) + R"({"seq":2,"kind":"eval","ti)");
  {
    RunLog log(f.store.db(), "run-a", f.path);
    CHECK(log.poll().events == 1);
    CHECK(log.poll().events == 0);
  }
  f.write(R"(me":1,"step":2,"tokens":200,"val_loss":3.0})" "\n");
  RunLog restarted(f.store.db(), "run-a", f.path);  // as after an orchestrator restart
  const RunLog::Update up = restarted.poll();
  CHECK(up.events == 1);
  CHECK(up.summary.duplicates == 0);
  CHECK(up.warnings.empty());
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 2);
  // The stored position carries the seq reached: an old line appended again is refused.
  f.write(eval(2, 3, 0.1));
  RunLog again(f.store.db(), "run-a", f.path);
  const RunLog::Update old = again.poll();
  CHECK(old.events == 0);
  CHECK(mentions(old.warnings, "line 3: seq 2 does not follow seq 2"));
}

TEST_CASE("a log that is truncated, replaced or deleted is re-read, never misread") {
  LogFixture f;
  f.write(eval(1, 1, 4.0) + eval(2, 2, 3.0) + eval(3, 3, 2.0));
  RunLog log(f.store.db(), "run-a", f.path);
  REQUIRE(log.poll().events == 3);
  REQUIRE(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(2.0));

  SECTION("truncated") {
    std::filesystem::resize_file(f.path, eval(1, 1, 4.0).size());
    const RunLog::Update up = log.poll();
    CHECK(mentions(up.warnings, "events.jsonl is shorter"));
    CHECK(mentions(up.warnings, "forgot what had been ingested from it"));
    CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 1);
    CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(4.0));
  }
  SECTION("replaced by a shorter log") {
    std::filesystem::remove(f.path);
    f.write(eval(1, 5, 7.0));
    const RunLog::Update up = log.poll();
    CHECK(mentions(up.warnings, "forgot what had been ingested"));
    CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 1);
    CHECK(f.scalar<int>("SELECT step FROM evals") == 5);  // not attributed to old events
    CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(7.0));
  }
  SECTION("replaced by a longer log") {
    std::filesystem::remove(f.path);
    f.write(eval(1, 1, 9.0) + eval(2, 2, 8.0) + eval(3, 3, 7.0) + eval(4, 4, 6.0) + eval(5, 5, 5.5));
    const RunLog::Update up = log.poll();
    CHECK(mentions(up.warnings, "was"));
    CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 5);
    CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(5.5));
    CHECK(f.scalar<double>("SELECT val_loss FROM evals WHERE seq = 1") == Approx(9.0));
  }
  SECTION("replaced while no orchestrator ran: the restarted one notices") {
    std::filesystem::remove(f.path);
    f.write(eval(1, 1, 9.0) + eval(2, 2, 8.0) + eval(3, 3, 7.0) + eval(4, 4, 6.0));
    RunLog fresh(f.store.db(), "run-a", f.path);
    const RunLog::Update up = fresh.poll();
    CHECK(mentions(up.warnings, "was replaced"));
    CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(6.0));
    CHECK(f.scalar<double>("SELECT val_loss FROM evals WHERE seq = 1") == Approx(9.0));
  }
  SECTION("deleted with its run directory") {
    std::filesystem::remove_all(f.dir.path() / "run-a");
    const RunLog::Update up = log.poll();
    CHECK(mentions(up.warnings, "events.jsonl is gone"));
    CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 0);
    CHECK(f.is_null("SELECT best_val_loss FROM runs"));
    CHECK(f.scalar<int64_t>("SELECT ingest_offset FROM runs") == 0);
    CHECK(log.poll().warnings.empty());  // said once
  }
}

TEST_CASE("a store from before log identities adopts the log at its offset") {
  LogFixture f;
  f.write(eval(1, 1, 4.0) + eval(2, 2, 3.0));
  // What an older mxablate left: an offset and last_seq, no position.
  ingest_events(f.store.db(), "run-a",
                {json::parse(eval(1, 1, 4.0))}, static_cast<int64_t>(eval(1, 1, 4.0).size()));
  CHECK(f.is_null("SELECT ingest_position FROM runs"));
  RunLog log(f.store.db(), "run-a", f.path);
  const RunLog::Update up = log.poll();
  CHECK(up.warnings.empty());
  CHECK(up.events == 1);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 2);
  CHECK_FALSE(f.is_null("SELECT ingest_position FROM runs"));
}

TEST_CASE("a database error leaves nothing skipped: the same lines are read again") {
  LogFixture f;
  f.write(eval(1, 1, 4.0));
  RunLog log(f.store.db(), "run-a", f.path);
  {
    Transaction blocker(f.store.db());  // the next BEGIN on this connection fails
    CHECK_THROWS_AS(log.poll(), SqliteError);
  }
  CHECK(log.poll().events == 1);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 1);
}

TEST_CASE("each attempt keeps its own run_end timings, also once a resume discards that run_end, "
          "a run_end with hostile timings is a warning naming the file, and never stored") {
  LogFixture f;
  const auto end = [](int64_t seq, const char* status, json timings) {
    json fields = {{"status", status}, {"step", 2}, {"tokens", 200}, {"wall_s", 10.0}};
    for (auto& [k, v] : timings.items()) fields[k] = v;
    return ev(seq, "run_end", fields);
  };
  // Attempt 1: checkpoints at step 2 and is interrupted.
  int attempt = f.store.begin_attempt("run-a", {"local", "pid:1", "cpu0", "h", "cpu", false, 0});
  f.write(ev(1, "run_start", {{"step", 0}, {"tokens", 0}}) + eval(2, 2, 3.0) +
          ev(3, "checkpoint", {{"step", 2}, {"tokens", 200}, {"path", "/c"}}) +
          end(4, "interrupted", {{"setup_s", 1.5}, {"train_s", 8.0}, {"eval_s", 1.0},
                                 {"checkpoint_s", 0.5}}));
  RunLog log(f.store.db(), "run-a", f.path);
  CHECK(log.poll().warnings.empty());
  f.store.finish_attempt("run-a", attempt, {4, std::nullopt, "interrupted", ""}, "interrupted",
                         std::nullopt);
  // Attempt 2 resumes after the checkpoint (its resume discards attempt 1's run_end) and ends
  // with hostile timings: negative, then beyond wall_s.
  attempt = f.store.begin_attempt("run-a", {"local", "pid:2", "cpu0", "h", "cpu", true, 4, true});
  f.write(ev(5, "resume", {{"step", 2}, {"tokens", 200}, {"discard_after_seq", 3}}) +
          end(6, "budget_exhausted", {{"train_s", -3.0}}) +
          end(7, "budget_exhausted", {{"train_s", 9.0}, {"eval_s", 2.0}}));
  const RunLog::Update up = log.poll();
  REQUIRE(up.warnings.size() == 2);
  CHECK(up.warnings[0] == "events.jsonl line 6: field 'train_s' must be a number of seconds in "
                          "[0, 1e8], got -3.0; line skipped");
  CHECK(up.warnings[1] == "events.jsonl line 7: train_s + eval_s + checkpoint_s (11.0) exceed "
                          "wall_s (10.0); line skipped");
  f.store.finish_attempt("run-a", attempt, {0, std::nullopt, "budget_exhausted", ""},
                         "budget_exhausted", std::nullopt);
  CHECK(f.scalar<int64_t>("SELECT COUNT(*) FROM events WHERE kind = 'run_end'") == 0);
  Statement st(f.store.db(),
               "SELECT attempt, prestarted, setup_s, train_s, eval_s, checkpoint_s, standby_s "
               "FROM attempts ORDER BY attempt");
  REQUIRE(st.step());
  CHECK(st.get_int(1) == 0);
  CHECK(st.get_double(2) == 1.5);
  CHECK(st.get_double(3) == 8.0);
  CHECK(st.get_double(4) == 1.0);
  CHECK(st.get_double(5) == 0.5);
  CHECK(st.is_null(6));
  REQUIRE(st.step());
  CHECK(st.get_int(1) == 1);
  for (int c = 2; c <= 6; ++c) CHECK(st.is_null(c));  // its run_end was refused: no timings
}
