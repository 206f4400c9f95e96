// Ingestion of event logs: idempotent on (run_id, seq), a torn last line waits for its end, a
// resume event removes the lost timeline so evaluations appear exactly once, and the derived
// values (final/best loss, tokens to target) always reflect the surviving timeline.
#include <fstream>
#include <cmath>
#include <limits>

#include "catch.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/schema.h"
#include "store_fixture.h"

using namespace mxablate;
using namespace mxablate::results;
using mxablate::testing::StoreFixture;
using nlohmann::json;

namespace {

json event(int64_t seq, const std::string& kind, json fields = json::object()) {
  fields["seq"] = seq;
  fields["kind"] = kind;
  fields["time"] = 1000.0 + static_cast<double>(seq);
  return fields;
}

json eval(int64_t seq, int64_t step, double loss) {
  return event(seq, "eval", {{"step", step}, {"tokens", step * 100}, {"val_loss", loss}});
}

json train(int64_t seq, int64_t step, double loss) {
  return event(seq, "train", {{"step", step}, {"tokens", step * 100}, {"loss", loss},
                              {"lr", 1e-3}, {"grad_norm", 0.5}, {"tokens_per_s", 1e4}});
}

}  // namespace

TEST_CASE("a quant_stats event's occ_fraction lands in its column, NULL where absent") {
  StoreFixture f;
  const std::vector<json> events{
      event(1, "quant_stats", {{"step", 1}, {"tokens", 100}, {"layer", 0}, {"gemm", "fprop"},
                               {"operand", "x"}, {"relative_error", 0.1}, {"occ_fraction", 0.0125}}),
      event(2, "quant_stats", {{"step", 1}, {"tokens", 100}, {"layer", 0}, {"gemm", "fprop"},
                               {"operand", "w"}, {"relative_error", 0.1}}),
  };
  CHECK(ingest_events(f.store.db(), "run-a", events, 100).inserted == 2);
  CHECK(f.scalar<double>("SELECT occ_fraction FROM quant_stats WHERE seq = 1") == 0.0125);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM quant_stats WHERE seq = 2 AND occ_fraction IS NULL") == 1);
}

TEST_CASE("events land in their tables with the run's derived values") {
  StoreFixture f;
  const std::vector<json> events{
      event(1, "run_start", {{"step", 0}, {"tokens", 0}, {"params", 1234}, {"device", "cpu"},
                             {"attempt", 1}}),
      train(2, 10, 5.0),
      eval(3, 10, 4.5),
      event(4, "quant_stats", {{"step", 10}, {"tokens", 1000}, {"layer", 3}, {"gemm", "wgrad"},
                               {"operand", "b"}, {"relative_error", 0.11},
                               {"fraction_saturated", 0.001}, {"fraction_flushed", 0.02},
                               {"mean_error", -0.003}}),
      train(5, 20, 4.0),
      eval(6, 20, 3.9),
      event(7, "target_reached", {{"step", 20}, {"tokens", 2000}, {"val_loss", 3.9}}),
      eval(8, 30, 4.1),
      event(9, "run_end", {{"status", "converged"}, {"step", 30}, {"tokens", 3000},
                           {"wall_s", 12.5}, {"tokens_per_s", 240.0},
                           {"peak_rss_bytes", 1 << 20}, {"peak_gpu_bytes", 0}}),
  };
  const IngestSummary s = ingest_events(f.store.db(), "run-a", events, 4242);
  CHECK(s.inserted == 9);
  CHECK(s.duplicates == 0);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 3);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM train_steps") == 2);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM quant_stats") == 1);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM events") == 3);  // run_start, target_reached, run_end
  CHECK(f.scalar<double>("SELECT final_val_loss FROM runs") == Approx(4.1));
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(3.9));
  CHECK(f.scalar<double>("SELECT tokens_to_target FROM runs") == Approx(2000));
  CHECK(f.scalar<std::string>("SELECT trainer_status FROM runs") == "converged");
  CHECK(f.scalar<int>("SELECT params FROM runs") == 1234);
  CHECK(f.scalar<int>("SELECT ingest_offset FROM runs") == 4242);
  CHECK(f.scalar<int>("SELECT last_seq FROM runs") == 9);
  CHECK(f.scalar<int>("SELECT step FROM runs") == 30);
  CHECK(f.scalar<double>("SELECT train_loss FROM runs") == Approx(4.0));
  CHECK(f.scalar<std::string>("SELECT typeof(layer) FROM quant_stats") == "integer");
  CHECK(f.scalar<double>("SELECT mean_error FROM quant_stats") == Approx(-0.003));
  CHECK(f.scalar<double>("SELECT json_extract(detail, '$.wall_s') FROM events WHERE "
                         "kind = 'run_end'") == Approx(12.5));
  REQUIRE(s.last_eval);
  CHECK((*s.last_eval)["seq"] == 8);
  REQUIRE(s.last_run_end);
  CHECK((*s.last_run_end)["status"] == "converged");
}

TEST_CASE("tokens to target are the first evaluation at or below the target, though the trainer "
          "learned the target later") {
  StoreFixture f;
  // The target (a live one) became known at step 30; the run was below it from step 20.
  const std::vector<json> events{
      eval(1, 10, 4.5), eval(2, 20, 3.9), eval(3, 30, 4.0),
      event(4, "target_reached", {{"step", 30}, {"tokens", 3000}, {"val_loss", 3.9}, {"target", 3.95}}),
  };
  ingest_events(f.store.db(), "run-a", events, 10);
  CHECK(f.scalar<double>("SELECT tokens_to_target FROM runs") == Approx(2000));
  SECTION("a log whose target_reached names no target keeps the event's tokens") {
    StoreFixture g;
    ingest_events(g.store.db(), "run-a",
                  {eval(1, 10, 4.5), eval(2, 20, 3.9),
                   event(3, "target_reached", {{"step", 30}, {"tokens", 3000}, {"val_loss", 3.9}})},
                  10);
    CHECK(g.scalar<double>("SELECT tokens_to_target FROM runs") == Approx(3000));
  }
}

TEST_CASE("ingesting the same events again adds nothing") {
  StoreFixture f;
  const std::vector<json> events{train(1, 1, 5.0), eval(2, 1, 4.0), eval(3, 2, 3.0)};
  CHECK(ingest_events(f.store.db(), "run-a", events, 10).inserted == 3);
  const IngestSummary again = ingest_events(f.store.db(), "run-a", events, 10);
  CHECK(again.inserted == 0);
  CHECK(again.duplicates == 3);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 2);
  // Overlapping batches (a replay from an older offset) are fine too.
  const std::vector<json> more{eval(3, 2, 3.0), eval(4, 3, 2.5)};
  CHECK(ingest_events(f.store.db(), "run-a", more, 20).inserted == 1);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 3);
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(2.5));
}

TEST_CASE("a resume event removes the lost timeline: evaluations appear exactly once") {
  StoreFixture f;
  // Attempt 1: checkpoint after step 20 (seq 5), then evals at 30 and 40 (seq 6, 8), then a
  // crash. Attempt 2 resumes from the checkpoint: resume (seq 9) discards seq 6..8.
  std::vector<json> first{train(1, 10, 5.0), eval(2, 10, 4.5), train(3, 20, 4.0),
                          eval(4, 20, 4.0),
                          event(5, "checkpoint", {{"step", 20}, {"tokens", 2000}, {"path", "c"}}),
                          eval(6, 30, 3.5), train(7, 40, 2.0),
                          eval(8, 40, 1.0)};  // the lost timeline held the best loss
  ingest_events(f.store.db(), "run-a", first, 100);
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(1.0));
  // The resume arrives in a later batch than the rows it discards.
  std::vector<json> second{
      event(9, "resume", {{"step", 20}, {"tokens", 2000}, {"discard_after_seq", 5}}),
      event(10, "run_start", {{"step", 20}, {"tokens", 2000}, {"resumed", true}}),
      eval(11, 30, 3.5), eval(12, 40, 3.2)};
  const IngestSummary s = ingest_events(f.store.db(), "run-a", second, 200);
  CHECK(s.discarded == 3);  // seq 6, 7, 8
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 4);
  CHECK(f.scalar<int>("SELECT COUNT(DISTINCT step) FROM evals") == 4);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals WHERE step = 30") == 1);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM train_steps") == 2);
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(3.2));
  CHECK(f.scalar<double>("SELECT final_val_loss FROM runs") == Approx(3.2));
  // The checkpoint itself survives (it is the resume point), so a later retry resumes again.
  CHECK(f.store.has_checkpoint("run-a"));

  // Replaying the whole log from the start converges to the same rows.
  std::vector<json> all = first;
  all.insert(all.end(), second.begin(), second.end());
  ingest_events(f.store.db(), "run-a", all, 200);
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 4);
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(3.2));
}

TEST_CASE("a target crossing on a lost timeline does not count") {
  StoreFixture f;
  ingest_events(f.store.db(), "run-a",
                {event(1, "checkpoint", {{"step", 10}, {"tokens", 1000}, {"path", "c"}}),
                 event(2, "target_reached", {{"step", 20}, {"tokens", 2000}, {"val_loss", 3}}),
                 event(3, "resume", {{"step", 10}, {"tokens", 1000}, {"discard_after_seq", 1}})},
                50);
  CHECK(f.is_null("SELECT tokens_to_target FROM runs"));
  CHECK(f.store.run_end_status_after("run-a", 0) == std::nullopt);
}

TEST_CASE("non-finite values are stored as NULL and never poison the aggregates") {
  StoreFixture f;
  // The event writer serializes NaN/Inf as null.
  json nan_train = train(1, 1, 0.0);
  nan_train["loss"] = std::numeric_limits<double>::quiet_NaN();
  const json parsed = json::parse(nan_train.dump());
  ingest_events(f.store.db(), "run-a",
                {parsed, eval(2, 1, 4.0),
                 event(3, "eval", {{"step", 2}, {"tokens", 200}, {"val_loss", nullptr}}),
                 event(4, "divergence", {{"step", 2}, {"tokens", 200}, {"reason", "nonfinite_loss"},
                                         {"value", nullptr}, {"severity", "fatal"}})},
                10);
  CHECK(f.is_null("SELECT loss FROM train_steps"));
  CHECK(f.is_null("SELECT train_loss FROM runs"));
  CHECK(f.scalar<double>("SELECT best_val_loss FROM runs") == Approx(4.0));
  CHECK(f.is_null("SELECT final_val_loss FROM runs"));  // the last evaluation was non-finite
  CHECK(f.scalar<std::string>("SELECT reason FROM divergence_events") == "nonfinite_loss");
  CHECK(f.scalar<std::string>("SELECT severity FROM divergence_events") == "fatal");
}

TEST_CASE("a torn last line is ingested only once the writer completes it") {
  StoreFixture f;
  const std::string log = f.dir.file("events.jsonl");
  {
    contract::EventWriter w(log);
    w.append("eval", {{"step", 1}, {"tokens", 100}, {"val_loss", 4.0}});
    w.append("eval", {{"step", 2}, {"tokens", 200}, {"val_loss", 3.0}});
  }
  {  // a crash in the middle of the third line
    std::ofstream out(log, std::ios::app);
    out << R"({"seq": 3, "kind": "eval", "step": 3, "tok)";
  }
  contract::EventReader reader(log);
  auto batch = reader.poll();
  CHECK(batch.events.size() == 2);
  CHECK(batch.bad_lines.empty());
  ingest_events(f.store.db(), "run-a", batch.events, reader.offset());
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 2);
  CHECK(f.scalar<int64_t>("SELECT ingest_offset FROM runs") == reader.offset());

  // The trainer restarts: its writer drops the torn tail and continues the sequence.
  {
    contract::EventWriter w(log);
    CHECK(w.last_seq() == 2);
    w.append("eval", {{"step", 3}, {"tokens", 300}, {"val_loss", 2.5}});
  }
  contract::EventReader resumed(log, f.scalar<int64_t>("SELECT ingest_offset FROM runs"));
  batch = resumed.poll();
  REQUIRE(batch.events.size() == 1);
  CHECK(batch.events[0]["seq"] == 3);
  CHECK(batch.bad_lines.empty());
  ingest_events(f.store.db(), "run-a", batch.events, resumed.offset());
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM evals") == 3);
  CHECK(f.scalar<double>("SELECT final_val_loss FROM runs") == Approx(2.5));
}

TEST_CASE("run_tokens_to_target interpolates the first crossing of the sweep's target") {
  StoreFixture f({"crosses", "never", "starts-below", "exact"}, 3.0);
  ingest_events(f.store.db(), "crosses",
                {event(1, "eval", {{"step", 1}, {"tokens", 100}, {"val_loss", 4.0}}),
                 event(2, "eval", {{"step", 2}, {"tokens", 200}, {"val_loss", 3.5}}),
                 event(3, "eval", {{"step", 3}, {"tokens", 300}, {"val_loss", 2.5}}),
                 event(4, "eval", {{"step", 4}, {"tokens", 400}, {"val_loss", 3.2}}),
                 event(5, "eval", {{"step", 5}, {"tokens", 500}, {"val_loss", 2.0}})},
                1);
  ingest_events(f.store.db(), "never",
                {event(1, "eval", {{"step", 1}, {"tokens", 100}, {"val_loss", 4.0}}),
                 event(2, "eval", {{"step", 2}, {"tokens", 200}, {"val_loss", 3.1}})},
                1);
  ingest_events(f.store.db(), "starts-below",
                {event(1, "eval", {{"step", 1}, {"tokens", 100}, {"val_loss", 2.0}})}, 1);
  ingest_events(f.store.db(), "exact",
                {event(1, "eval", {{"step", 1}, {"tokens", 100}, {"val_loss", 4.0}}),
                 event(2, "eval", {{"step", 2}, {"tokens", 200}, {"val_loss", 3.0}})},
                1);
  const auto t2t = [&](const std::string& run) {
    return "SELECT tokens_to_target FROM run_tokens_to_target WHERE run_id = '" + run + "'";
  };
  CHECK(f.scalar<double>(t2t("crosses")) == Approx(250.0));  // 200 + (3.5-3)/(3.5-2.5)·100
  CHECK(f.is_null(t2t("never")));
  CHECK(f.scalar<int>("SELECT reached FROM run_tokens_to_target WHERE run_id = 'never'") == 0);
  CHECK(f.scalar<double>(t2t("starts-below")) == Approx(100.0));
  CHECK(f.scalar<double>(t2t("exact")) == Approx(200.0));
}

TEST_CASE("arm_summary counts run outcomes per arm in recipe order") {
  StoreFixture f({"r1", "r2", "r3", "r4"});  // arms: base, fp4, base, fp4
  f.store.set_status("r1", status::kConverged);
  f.store.set_status("r2", status::kDiverged);
  f.store.set_status("r3", status::kBudgetExhausted);
  f.store.set_status("r4", status::kFailed);
  ingest_events(f.store.db(), "r1", {eval(1, 1, 3.0)}, 1);
  ingest_events(f.store.db(), "r3", {eval(1, 1, 4.0)}, 1);
  Statement st(f.store.db(),
               "SELECT arm, runs, converged, budget_exhausted, diverged, failed, "
               "mean_final_val_loss FROM arm_summary");
  REQUIRE(st.step());
  CHECK(st.get_text(0) == "base");
  CHECK(st.get_int(1) == 2);
  CHECK(st.get_int(2) == 1);
  CHECK(st.get_int(3) == 1);
  CHECK(st.get_double(6) == Approx(3.5));
  REQUIRE(st.step());
  CHECK(st.get_text(0) == "fp4");
  CHECK(st.get_int(4) == 1);
  CHECK(st.get_int(5) == 1);
  CHECK_FALSE(st.step());
}
