// The files the Slurm executor keeps in RUNS_DIR/<sweep>/slurm/ (slurm_sweep_files.h): journal
// and cancel records survive a torn line, script numbers are never reused, exit files are read
// strictly.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/orchestrator/slurm_sweep_files.h"
#include "slurm_test_support.h"

using namespace mxablate::orchestrator;
using mxablate::slurm_test::ScratchDir;
namespace fs = std::filesystem;

TEST_CASE("submissions round-trip through the journal and a torn last line is skipped") {
  ScratchDir dir("slurm-files");
  const SlurmSweepFiles files(dir.path / "sweep");
  CHECK(files.dir() == dir.path / "sweep" / "slurm");
  CHECK(files.read_submissions().empty());
  CHECK(files.next_submission_number() == 1);
  files.append_submission({"41", 1, "0-1%1", 1700000000.5,
                           {{"r1", "/runs/s/r1", 1, false}, {"r2", "/runs/s/r 2", 2, true}}});
  files.append_submission({"57", 2, "0", 1700000100.0, {{"r3", "/runs/s/r3", 4, true}}});
  std::ofstream(files.dir() / "submissions.jsonl", std::ios::app) << "{\"job_id\": \"60\", \"tas";
  const auto subs = files.read_submissions();
  REQUIRE(subs.size() == 2);
  CHECK(subs[0].job_id == "41");
  CHECK(subs[0].array_spec == "0-1%1");
  CHECK(subs[0].submitted_at == 1700000000.5);
  REQUIRE(subs[0].tasks.size() == 2);
  CHECK(subs[0].tasks[1].run_id == "r2");
  CHECK(subs[0].tasks[1].run_dir == "/runs/s/r 2");
  CHECK(subs[0].tasks[1].attempt == 2);
  CHECK(subs[0].tasks[1].resume);
  CHECK(subs[1].number == 2);
  CHECK(files.next_submission_number() == 3);
  // A script written by an orchestrator that died before sbatch answered keeps its number.
  std::ofstream(files.script_path(7)) << "#!/bin/bash\n";
  CHECK(files.script_path(7).filename() == "array-0007.sh");
  CHECK(files.next_submission_number() == 8);
}

TEST_CASE("cancel records accumulate") {
  ScratchDir dir("slurm-cancels");
  const SlurmSweepFiles files(dir.path);
  CHECK(files.read_cancels().empty());
  files.append_cancel({1.0, "ann@login1", {"12", "14"}});
  files.append_cancel({2.0, "bob@login2", {"20"}});
  const auto c = files.read_cancels();
  REQUIRE(c.size() == 2);
  CHECK(c[0].by == "ann@login1");
  CHECK(c[0].job_ids == std::vector<std::string>{"12", "14"});
  CHECK(c[1].at == 2.0);
}

TEST_CASE("exit files hold one status in 0..255 or count as missing") {
  ScratchDir dir("slurm-exit");
  const SlurmSweepFiles files(dir.path);
  fs::create_directories(files.dir());
  const SlurmTaskRef t{"9", 2};
  CHECK(files.exit_file(t) == files.dir() / "9_2.exit");
  CHECK(files.log_file(t) == files.dir() / "9_2.log");
  CHECK_FALSE(files.read_exit_status(t));
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::optional<int>>>{
           {"0\n", 0}, {"137\n", 137}, {"4", 4}, {"", std::nullopt}, {"x\n", std::nullopt},
           {"-1\n", std::nullopt}, {"300\n", std::nullopt}}) {
    std::ofstream(files.exit_file(t), std::ios::trunc) << text;
    CHECK(files.read_exit_status(t) == expected);
  }
}

TEST_CASE("a journal that cannot be written is one error naming the file") {
  ScratchDir dir("slurm-ro");
  fs::create_directories(dir.path / "sweep");
  std::ofstream(dir.path / "sweep" / "slurm") << "a file where the directory should be";
  const SlurmSweepFiles files(dir.path / "sweep");
  CHECK_THROWS_WITH(files.append_submission({"1", 1, "0", 0, {}}),
                    has_text((dir.path / "sweep" / "slurm").string()));
}
