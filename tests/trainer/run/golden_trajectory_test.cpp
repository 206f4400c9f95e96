// The golden trajectories: what mxablate-train writes for five runs (one rank; every random
// stream; a live-free target with projections; two replicated ranks; two ZeRO-2 ranks; a run
// killed and resumed), digested, against tests/trainer/golden/trajectories.json. A change that
// only moves code (docs/design.md §4, "The step engine") must leave every event and every
// model.pt byte for byte as they were; timings are left out.
//
// Bits are a property of one machine's BLAS kernels (docs/design.md §4, "Comparing runs that sum
// in another order"), so the golden names the machine it was recorded on; elsewhere the test
// skips, saying which fact differs. MXABLATE_GOLDEN_RECORD=1 rewrites the file on this machine.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "mxablate/data/sha256.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kGoldenFile = std::string(MXABLATE_TEST_SOURCE_DIR) + "/golden/trajectories.json";

// The facts a run's bits depend on besides the code: the CPU, how OpenBLAS is told to pick its
// kernels, the threads.
json machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, cpu, flags;
  while (std::getline(cpuinfo, line) && (cpu.empty() || flags.empty())) {
    if (line.rfind("model name", 0) == 0) cpu = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) flags = line.substr(line.find(':') + 1) + " ";
  }
  // The instruction sets OpenBLAS and LibTorch choose their kernels by.
  std::string isa;
  for (const char* f : {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) isa += std::string(isa.empty() ? "" : " ") + f;
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  // OpenBLAS sizes its blocks by the L2 cache, and splits work by the CPUs it sees.
  std::string l2;
  std::ifstream("/sys/devices/system/cpu/cpu0/cache/index2/size") >> l2;
  return {{"cpu", cpu},
          {"isa", isa},
          {"l2", l2},
          {"cpus", static_cast<int64_t>(std::thread::hardware_concurrency())},
          {"OPENBLAS_CORETYPE", env("OPENBLAS_CORETYPE")},
          {"OPENBLAS_L2_SIZE", env("OPENBLAS_L2_SIZE")},
          {"OPENBLAS_NUM_THREADS", env("OPENBLAS_NUM_THREADS")},
          {"OMP_NUM_THREADS", env("OMP_NUM_THREADS")}};
}

// Fields that measure time, memory or the machine's load rather than the computation.
bool is_timing(const std::string& key) {
  static const char* keys[] = {"time",      "wall_s",  "tokens_per_s", "setup_s",          "eval_s",
                               "checkpoint_s", "train_s", "checkpoint_write_s", "peak_rss_bytes",
                               "peak_gpu_bytes", "standby_s"};
  for (const char* k : keys)
    if (key == k) return true;
  return false;
}

std::string without_scratch(std::string text, const std::string& scratch) {
  for (size_t at; (at = text.find(scratch)) != std::string::npos;) text.replace(at, scratch.size(), "<scratch>");
  return text;
}

// Every line of the log (the lost timeline of a resumed run included), timings removed, the
// per-process scratch directory named the same way everywhere.
std::string events_digest(const std::string& run_dir, const std::string& scratch) {
  std::ifstream in(run_dir + "/events.jsonl");
  data::Sha256 h;
  std::string line;
  while (std::getline(in, line)) {
    json e = json::parse(line);
    for (auto it = e.begin(); it != e.end();) it = is_timing(it.key()) ? e.erase(it) : std::next(it);
    h.update(without_scratch(e.dump(), scratch) + "\n");
  }
  return h.hex_digest();
}

// model.pt of every kept checkpoint (the optimizer's archives are keyed by addresses, and the
// generator state differs from process to process: checkpoint_files.h).
json model_digests(const std::string& run_dir) {
  json d = json::object();
  for (const auto& e : fs::recursive_directory_iterator(run_dir))
    if (e.path().filename() == "model.pt")
      d[fs::relative(e.path(), run_dir).generic_string()] = data::sha256_file(e.path().string());
  return d;
}

struct GoldenRun {
  std::string name;
  contract::RunConfig config;
  std::vector<std::string> invocations;  // extra arguments of each mxablate-train call in turn
};

std::vector<GoldenRun> golden_runs() {
  std::vector<GoldenRun> runs;
  contract::RunConfig plain = smoke_config();
  use_every_random_stream(plain);
  runs.push_back({"one rank, every random stream", plain, {""}});

  contract::RunConfig target = smoke_config();
  target.target.val_loss = 4.2;
  target.target.stop_at_target = true;
  target.target.stop_hopeless = true;
  runs.push_back({"a target, projections and the stop", target, {""}});

  runs.push_back({"two replicated ranks", dp_config(2, 128), {""}});
  contract::RunConfig sharded = dp_config(2, 128);
  sharded.parallel.shard = contract::ShardLevel::kGradients;
  runs.push_back({"two ZeRO-2 ranks", sharded, {""}});

  contract::RunConfig resumed = resume_config("golden-resumed");
  use_every_random_stream(resumed);
  runs.push_back({"killed at step 6 and resumed", resumed, {"--debug-crash-at-step 6", "--resume"}});
  return runs;
}

}  // namespace

TEST_CASE("Runs write the golden trajectories: every event and every model.pt as recorded", "[train][golden]") {
  const bool record = std::getenv("MXABLATE_GOLDEN_RECORD") != nullptr;
  json golden;
  if (!record) {
    std::ifstream in(kGoldenFile);
    REQUIRE(in);
    golden = json::parse(in);
    if (golden.at("machine") != machine()) {
      MXABLATE_SKIP("the golden trajectories were recorded on " << golden.at("machine").dump() << ", this is "
                                                                << machine().dump());
      return;
    }
  }
  const std::string scratch = fs::path(test_dataset()).parent_path().parent_path().string();
  json recorded = {{"machine", machine()}, {"runs", json::object()}};
  for (const GoldenRun& run : golden_runs()) {
    INFO(run.name);
    const std::string dir = fresh_run_dir("golden_" + std::to_string(recorded["runs"].size()));
    bool first = true;
    for (const std::string& args : run.invocations) {
      const TrainResult r = run_train(dir, first ? &run.config : nullptr, args);
      if (lacks_gloo(r.output)) {
        MXABLATE_SKIP(kNoGloo);
        return;
      }
      INFO(r.output);
      REQUIRE((r.exit_code == 0 || (args.find("crash") != std::string::npos && r.exit_code == 137)));
      first = false;
    }
    recorded["runs"][run.name] = {{"events", events_digest(dir, scratch)}, {"model.pt", model_digests(dir)}};
    if (!record) CHECK(recorded["runs"][run.name] == golden.at("runs").at(run.name));
  }
  if (record) {
    std::ofstream(kGoldenFile) << recorded.dump(2) << "\n";
    WARN("recorded " << kGoldenFile);
  }
}
