// The decision table for an ended attempt: results are final, crashes retry from checkpoints up
// to the limit, a rejected config or a timeout fails at once, a requested stop interrupts.
#include "catch.h"
#include "mxablate/orchestrator/run_outcome.h"

using namespace mxablate::orchestrator;

namespace {

AttemptObservation ended(std::optional<int> code, std::optional<int> signal,
                         std::optional<std::string> run_end = std::nullopt) {
  AttemptObservation o;
  o.exit_code = code;
  o.signal = signal;
  o.how_it_ended = code ? "exit code " + std::to_string(*code)
                        : signal ? "killed by signal " + std::to_string(*signal) : "";
  o.run_end_status = std::move(run_end);
  o.attempts_used = 1;
  o.max_attempts = 3;
  return o;
}

}  // namespace

TEST_CASE("a run_end with a result is final, whatever the exit code") {
  for (const char* s : {"converged", "budget_exhausted", "diverged"}) {
    const Outcome o = decide_outcome(ended(0, std::nullopt, s));
    CHECK_FALSE(o.retry);
    CHECK(o.status == s);
    CHECK(o.reason.empty());
  }
  CHECK(decide_outcome(ended(3, std::nullopt, "diverged")).status == "diverged");
}

TEST_CASE("a diverged run is a result and never retried") {
  AttemptObservation o = ended(3, std::nullopt);  // exit 3 without run_end
  const Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "diverged");
}

TEST_CASE("a crash without a final status retries until the attempts are used up") {
  AttemptObservation o = ended(std::nullopt, 9);
  o.how_it_ended = "killed by signal 9 (SIGKILL)";
  Outcome out = decide_outcome(o);
  CHECK(out.retry);
  CHECK(out.reason == "killed by signal 9 (SIGKILL) without a final status; retrying from its "
                      "last checkpoint (attempt 2 of 3)");
  o.attempts_used = 3;
  o.stderr_tail = "Segmentation fault in foo()";
  out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "failed");
  CHECK(out.reason == "killed by signal 9 (SIGKILL) without a final status; gave up after 3 "
                      "attempts: Segmentation fault in foo()");
  // An exit code other than the trainer's known ones, or 0 without run_end: also a crash.
  CHECK(decide_outcome(ended(1, std::nullopt)).retry);
  CHECK(decide_outcome(ended(0, std::nullopt)).retry);
  CHECK(decide_outcome(ended(139, std::nullopt)).retry);
}

TEST_CASE("a trainer that rejects its config fails at once with its message") {
  AttemptObservation o = ended(2, std::nullopt);
  o.stderr_tail = "config.json: train.lr: must be > 0";
  const Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "failed");
  CHECK(out.reason == "the trainer rejected config.json (exit code 2): config.json: train.lr: must "
                      "be > 0");
}

TEST_CASE("a trainer out of GPU memory fails at once, on its first attempt, with its line") {
  // Exit code 5 without a run_end (a rank other than 0, or before the event log was open): a
  // retry would run out again, so it is final like a rejected config.
  const std::string line =
      "out of GPU memory: tried to allocate 2.0 GiB; predicted 81.2 GiB per rank (...); set "
      "parallel.shard: gradients (predicted 61.2 GiB per rank)";
  AttemptObservation o = ended(5, std::nullopt);
  o.stderr_tail = line;
  const Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "failed");
  CHECK(out.reason == "the trainer ran out of GPU memory (exit code 5): " + line);
  // With rank 0's run_end "failed" it is the trainer-reported failure: final too.
  AttemptObservation reported = ended(5, std::nullopt, "failed");
  reported.stderr_tail = line;
  const Outcome r = decide_outcome(reported);
  CHECK_FALSE(r.retry);
  CHECK(r.status == "failed");
  CHECK(r.reason == "the trainer reported failure (exit code 5): " + line);
}

TEST_CASE("a trainer-reported failure is final") {
  AttemptObservation o = ended(1, std::nullopt, "failed");
  o.stderr_tail = "CUDA error: out of memory";
  const Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "failed");
  CHECK(out.reason == "the trainer reported failure (exit code 1): CUDA error: out of memory");
}

TEST_CASE("a timed-out attempt fails, with or without a run_end") {
  AttemptObservation o = ended(std::nullopt, 9);
  o.how_it_ended = "killed by signal 9 (SIGKILL)";
  o.timed_out = true;
  o.timeout_s = 30;
  Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "failed");
  CHECK(out.reason == "timed out after 30 s (the per-run limit; killed by signal 9 (SIGKILL))");
  o = ended(4, std::nullopt, "interrupted");
  o.timed_out = true;
  o.timeout_s = 30;
  CHECK(decide_outcome(o).status == "failed");
}

TEST_CASE("a stop we asked for is an interruption, one from outside is retried") {
  AttemptObservation o = ended(4, std::nullopt, "interrupted");
  o.stop_requested = true;
  Outcome out = decide_outcome(o);
  CHECK_FALSE(out.retry);
  CHECK(out.status == "interrupted");
  o.stop_requested = false;  // e.g. the previous orchestrator's death signal
  out = decide_outcome(o);
  CHECK(out.retry);
  o = ended(std::nullopt, 9);  // killed by our second Ctrl-C before it could checkpoint
  o.stop_requested = true;
  CHECK(decide_outcome(o).status == "interrupted");
}

TEST_CASE("an attempt whose process was lost is retried, and an unknown run_end fails") {
  AttemptObservation o = ended(std::nullopt, std::nullopt);
  o.attempts_used = 0;
  o.how_it_ended = "ended without a known exit status; Slurm task 19_0 NODE_FAIL on localhost";
  const Outcome lost = decide_outcome(o);
  CHECK(lost.retry);
  // What the executor saw is the reason given, not a guess.
  CHECK(lost.reason.find("NODE_FAIL") != std::string::npos);
  const Outcome out = decide_outcome(ended(0, std::nullopt, "exploded"));
  CHECK(out.status == "failed");
  CHECK(out.reason == "unknown run_end status \"exploded\" (exit code 0)");
}

TEST_CASE("a run stopped as projected not to reach its target is a result: never retried, never a failure") {
  const Outcome o = decide_outcome(ended(0, std::nullopt, "projected_not_reached"));
  CHECK_FALSE(o.retry);
  CHECK(o.status == "projected_not_reached");
  CHECK(o.reason.empty());
}
