// The real Slurm commands' client (slurm_client.h, command_runner.h) against stand-in sbatch,
// squeue, scancel and scontrol scripts put first on PATH: the arguments it passes, what it makes
// of their output, their errors (one line, transient or not) and their hanging.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/slurm_client.h"
#include "slurm_test_support.h"

using namespace mxablate::orchestrator;
using mxablate::slurm_test::read_text;
using mxablate::slurm_test::ScratchDir;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Stand-in commands in a directory put first on PATH for the test's lifetime.
struct FakeCommands {
  ScratchDir dir{"slurm-cmds"};
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  FakeCommands() { ::setenv("PATH", (dir.path.string() + ":" + old_path).c_str(), 1); }
  ~FakeCommands() { ::setenv("PATH", old_path.c_str(), 1); }
  void write(const std::string& name, const std::string& body) {
    const fs::path p = dir.path / name;
    std::ofstream(p) << "#!/bin/bash\necho \"$@\" >>'" << (dir.path / "calls.txt").string()
                     << "'\n" << body;
    fs::permissions(p, fs::perms::owner_all);
  }
  std::string calls() const { return read_text(dir.path / "calls.txt"); }
};

}  // namespace

TEST_CASE("sbatch's parsable answer gives the job id, with or without a cluster name") {
  FakeCommands cmd;
  cmd.write("sbatch", "echo '4242;cluster2'\n");
  auto slurm = make_slurm_command_client(5s);
  CHECK(slurm->submit("/s/array-0001.sh", "0-3%2", true) == "4242");
  CHECK(cmd.calls() == "--parsable --hold --array=0-3%2 /s/array-0001.sh\n");
  cmd.write("sbatch", "echo 77\n");
  CHECK(slurm->submit("/s/a.sh", "0", false) == "77");
  cmd.write("sbatch", "echo 'Submitted batch job 5'\n");
  CHECK_THROWS_WITH(slurm->submit("/s/a.sh", "0", false), has_text("printed no job id"));
}

TEST_CASE("a refusal is one line without the command's prefixes, outages count as transient") {
  FakeCommands cmd;
  cmd.write("sbatch",
            "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' "
            ">&2\nexit 1\n");
  auto slurm = make_slurm_command_client(5s);
  try {
    slurm->submit("/s/a.sh", "0", true);
    FAIL("no error");
  } catch (const SlurmError& e) {
    CHECK(std::string(e.what()) ==
          "sbatch failed: Batch job submission failed: Invalid partition name specified");
    CHECK_FALSE(e.transient);
  }
  cmd.write("squeue",
            "echo 'squeue: error: resolve_ctls_from_dns_srv: res_nsearch error' >&2\n"
            "echo 'squeue: fatal: Could not establish a configuration source' >&2\nexit 1\n");
  CHECK_THROWS_WITH(slurm->query_jobs({"1"}),
                    has_text("squeue failed: Could not establish a configuration source"));
  cmd.write("squeue",
            "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' "
            ">&2\nexit 1\n");
  try {
    slurm->query_jobs({"1"});
    FAIL("no error");
  } catch (const SlurmError& e) {
    CHECK(e.transient);
  }
}

TEST_CASE("squeue is asked for all of the jobs at once and its lines parsed") {
  FakeCommands cmd;
  cmd.write("squeue",
            "echo '12|0|RUNNING|None|0|node1|mxablate-demo-00000001'\n"
            "echo '12|1|PENDING|JobArrayTaskLimit|0||mxablate-demo-00000001'\n");
  auto slurm = make_slurm_command_client(5s);
  const auto tasks = slurm->query_jobs({"12", "15"});
  REQUIRE(tasks.size() == 2);
  CHECK(tasks[1].reason == "JobArrayTaskLimit");
  CHECK(cmd.calls() == "-h -r --states=all -O " + squeue_format() + " --jobs=12,15\n");
  slurm->query_name("mxablate-demo-00000001");
  CHECK_THAT(cmd.calls(), has_text("--name=mxablate-demo-00000001\n"));
  CHECK(slurm->query_jobs({}).empty());  // nothing asked, nothing run
  // None of the jobs known any more: squeue fails, which means "none of them".
  cmd.write("squeue", "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n");
  CHECK(slurm->query_jobs({"99"}).empty());
}

TEST_CASE("scancel: tasks that already ended are not an error, kill sends SIGKILL to all steps") {
  FakeCommands cmd;
  cmd.write("scancel",
            "echo 'scancel: error: Kill job error on job id 12_1: Job/step already completing or "
            "completed' >&2\nexit 1\n");
  auto slurm = make_slurm_command_client(5s);
  CHECK_NOTHROW(slurm->cancel({"12_1", "12_2"}));
  CHECK_NOTHROW(slurm->cancel({"12_3"}, true));
  CHECK(cmd.calls() == "12_1 12_2\n--signal=KILL --full 12_3\n");
  cmd.write("scancel", "echo 'scancel: error: Access/permission denied' >&2\nexit 1\n");
  CHECK_THROWS_WITH(slurm->cancel({"12_1"}), has_text("Access/permission denied"));
}

TEST_CASE("scontrol: release, and MaxArraySize from the configuration") {
  FakeCommands cmd;
  cmd.write("scontrol",
            "if [ \"$1\" = show ]; then printf 'KillWait                = 30 sec\\n"
            "MaxArraySize            = 4001\\nMaxJobCount = 10000\\n'; fi\n");
  auto slurm = make_slurm_command_client(5s);
  CHECK(slurm->max_array_size() == 4001);
  slurm->release("12");
  CHECK_THAT(cmd.calls(), has_text("release 12\n"));
  cmd.write("scontrol", "exit 1\n");
  CHECK(slurm->max_array_size() == 0);
}

TEST_CASE("a command that hangs is killed at its time limit and reported as transient") {
  FakeCommands cmd;
  cmd.write("squeue", "sleep 30\n");
  auto slurm = make_slurm_command_client(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    slurm->query_jobs({"1"});
    FAIL("no error");
  } catch (const SlurmError& e) {
    CHECK_THAT(std::string(e.what()), has_text("squeue did not answer within"));
    CHECK(e.transient);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("programs are found on PATH, a missing one is reported by name") {
  FakeCommands cmd;
  cmd.write("mxablate-test-tool", "exit 0\n");
  CHECK(find_program("mxablate-test-tool") == cmd.dir.path / "mxablate-test-tool");
  CHECK_FALSE(find_program("mxablate-no-such-tool"));
  CHECK(find_program("/bin/sh") == fs::path("/bin/sh"));
  const CommandOutput r = run_command("/bin/sh", {"-c", "echo out; echo err >&2; exit 3"}, 5s);
  CHECK(r.exit_code == 3);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  CHECK_FALSE(r.timed_out);
}
