// Slurm job states → what they mean for an attempt (slurm_job_state.h), and squeue's output as
// our -O format prints it (slurm_squeue.h); the sample lines were captured from slurm-wlm 22.05.
#include "catch.h"
#include "mxablate/orchestrator/slurm_job_state.h"
#include "mxablate/orchestrator/slurm_squeue.h"

using namespace mxablate::orchestrator;

TEST_CASE("every state squeue can print maps to queued, running or a kind of end") {
  struct Case {
    const char* text;
    SlurmPhase phase;
    SlurmEnd end;
    const char* words;
  };
  const Case cases[] = {
      {"PENDING", SlurmPhase::kQueued, SlurmEnd::kNone, "queued"},
      {"REQUEUED", SlurmPhase::kQueued, SlurmEnd::kNone, "queued"},
      {"REQUEUE_HOLD", SlurmPhase::kQueued, SlurmEnd::kNone, "queued"},
      {"CONFIGURING", SlurmPhase::kRunning, SlurmEnd::kNone, "running"},
      {"RUNNING", SlurmPhase::kRunning, SlurmEnd::kNone, "running"},
      {"COMPLETING", SlurmPhase::kRunning, SlurmEnd::kNone, "running"},
      {"SUSPENDED", SlurmPhase::kRunning, SlurmEnd::kNone, "running"},
      {"COMPLETED", SlurmPhase::kEnded, SlurmEnd::kExited, "completed"},
      {"FAILED", SlurmPhase::kEnded, SlurmEnd::kExited, "failed"},
      {"TIMEOUT", SlurmPhase::kEnded, SlurmEnd::kTimeLimit, "time limit"},
      {"DEADLINE", SlurmPhase::kEnded, SlurmEnd::kTimeLimit, "time limit"},
      {"NODE_FAIL", SlurmPhase::kEnded, SlurmEnd::kNodeFailure, "node failure"},
      {"BOOT_FAIL", SlurmPhase::kEnded, SlurmEnd::kNodeFailure, "node failure"},
      {"PREEMPTED", SlurmPhase::kEnded, SlurmEnd::kPreempted, "preempted"},
      {"CANCELLED", SlurmPhase::kEnded, SlurmEnd::kCancelled, "cancelled"},
      {"OUT_OF_MEMORY", SlurmPhase::kEnded, SlurmEnd::kOutOfMemory, "out of memory"},
      {"SPECIAL_EXIT", SlurmPhase::kEnded, SlurmEnd::kOther, "special exit"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const SlurmJobState s = parse_slurm_job_state(c.text);
    CHECK(s.name == c.text);
    CHECK(s.phase == c.phase);
    CHECK(s.end == c.end);
    CHECK(s.ended() == (c.phase == SlurmPhase::kEnded));
    CHECK(describe_slurm_state(s) == c.words);
  }
}

TEST_CASE("scontrol's decorations are ignored and an unknown state never counts as ended") {
  CHECK(parse_slurm_job_state("CANCELLED by 0").end == SlurmEnd::kCancelled);
  CHECK(parse_slurm_job_state("  COMPLETED+ ").end == SlurmEnd::kExited);
  // A state a newer Slurm might add: guessing "ended" would submit the run a second time.
  const SlurmJobState unknown = parse_slurm_job_state("POWER_UP_NODE");
  CHECK(unknown.phase == SlurmPhase::kRunning);
  CHECK_FALSE(unknown.ended());
  CHECK(unknown.name == "POWER_UP_NODE");
  CHECK_FALSE(parse_slurm_job_state("").ended());
}

TEST_CASE("task references are job_task and nothing else") {
  const auto r = parse_slurm_task_ref("12_3");
  REQUIRE(r);
  CHECK(r->job_id == "12");
  CHECK(r->task == 3);
  CHECK(r->text() == "12_3");
  CHECK(parse_slurm_task_ref(" 4567_0 ")->text() == "4567_0");
  for (const char* bad : {"pid:123", "12", "12_", "_3", "12_3_4", "a_1", "12_[2-3]", "", "12_-1",
                          "1_99999999999"})
    CHECK_FALSE(parse_slurm_task_ref(bad));
}

TEST_CASE("squeue lines in our -O format parse into task statuses") {
  CHECK(squeue_format() ==
        "ArrayJobID:|,ArrayTaskID:|,State:|,Reason:|,exit_code:|,NodeList:|,Name:");
  const std::string out =
      "1|0|COMPLETED|None|0|localhost\n"
      "1|3|FAILED|NonZeroExitCode|768|localhost\n"
      "5|1|PENDING|JobArrayTaskLimit|0|\n"
      "5|2|RUNNING|None|0|node[01-02]\r\n"
      "\n"
      "7|N/A|RUNNING|None|0|localhost\n"      // not an array task
      "8|[2-3%2]|PENDING|JobArrayTaskLimit|0|\n"  // a collapsed range (squeue without -r)
      "garbage\n"
      "9|4|TIMEOUT|TimeLimit|0|(null)|mxablate-demo-1a2b3c4d\n"
      "9|5|RUNNING|None|0|n1|odd|name";
  const SqueueParse p = parse_squeue_output(out);
  REQUIRE(p.tasks.size() == 6);
  CHECK(p.skipped == 3);
  CHECK(p.tasks[0].ref.text() == "1_0");
  CHECK(p.tasks[0].state.end == SlurmEnd::kExited);
  CHECK(p.tasks[0].wait_status == 0);
  CHECK(p.tasks[1].ref.text() == "1_3");
  CHECK(p.tasks[1].wait_status == 768);  // exit code 3 as a wait status
  CHECK(p.tasks[1].reason == "NonZeroExitCode");
  CHECK(p.tasks[2].state.phase == SlurmPhase::kQueued);
  CHECK(p.tasks[2].reason == "JobArrayTaskLimit");
  CHECK(p.tasks[2].nodes.empty());
  CHECK(p.tasks[3].nodes == "node[01-02]");
  CHECK(p.tasks[4].state.end == SlurmEnd::kTimeLimit);
  CHECK(p.tasks[4].nodes.empty());
  CHECK(p.tasks[4].name == "mxablate-demo-1a2b3c4d");
  CHECK(p.tasks[0].name.empty());  // an older format without the name
  CHECK(p.tasks[5].name == "odd|name");
}

TEST_CASE("squeue's answer for job ids it no longer knows is recognised") {
  CHECK(squeue_reports_unknown_jobs("slurm_load_jobs error: Invalid job id specified\n"));
  CHECK_FALSE(squeue_reports_unknown_jobs(
      "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"));
}
