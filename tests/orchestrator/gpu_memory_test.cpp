// Memory planned before launch (docs/design.md §4): `mxablate plan` shows each CUDA run's
// predicted peak GPU memory per rank, `plan --memory` its parts, and `plan --gpu-memory SIZE` and
// `run` refuse a run that cannot fit at the recipe position of the setting to change. The
// numbers are memory_plan_test's, computed there by hand (the 8B shape at seq 8192 on 4 ranks).
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/orchestrator/gpu_memory.h"
#include "manifest_dataset.h"
#include "test_util.h"

using namespace mxablate::testing;
using mxablate::orchestrator::parse_memory_size;
using mxablate::orchestrator::query_gpu_memory;
namespace fs = std::filesystem;

namespace {

// A manifest at Llama 3's vocabulary (4-byte tokens) with plenty of tokens.
void write_dataset(const fs::path& dir) {
  write_manifest_dataset(dir, {128256, 1'000'000'000, 1'000'000, 4});
}

// The 8B shape at seq 8192, 16 micro-batches a step over 4 ranks. parallel.shard's value is at
// 14:12, train.activation_checkpointing's at 11:31.
std::string recipe(const std::string& dataset, const std::string& device,
                   const std::string& checkpointing, const std::string& shard) {
  return fmt::format(R"(name: memory
base:
  model: {{d_model: 4096, n_layers: 32, n_heads: 32, n_kv_heads: 8, ffn_hidden: 14336}}
  device: {}
  data:
    dataset: {}
    seq_len: 8192
  train:
    global_batch_tokens: 131072
    micro_batch_tokens: 8192
    activation_checkpointing: {}
  parallel:
    data: 4
    shard: {}
arms:
  A: {{}}
)",
                     device, dataset, checkpointing, shard);
}

struct Fixture {
  TempDir dir;
  fs::path data = dir.path() / "data";
  fs::path file = dir.path() / "sweep.yaml";
  Fixture() { write_dataset(data); }
  ProcessResult mx(const std::vector<std::string>& options, const std::string& text,
                   std::map<std::string, std::string> env = {}) {
    write_file(file, text);
    std::vector<std::string> args{kMxablate.string()};
    args.insert(args.end(), options.begin(), options.end());
    args.push_back(file.string());
    return run_process(args, dir.path(), env);
  }
  std::string at(const std::string& position) const {
    return "mxablate: " + file.string() + ":" + position + ": ";
  }
};

}  // namespace

TEST_CASE("sizes: decimal and binary units, bytes in exponent form, anything else refused") {
  CHECK(parse_memory_size("80GB") == 80'000'000'000);
  CHECK(parse_memory_size("80GiB") == int64_t{80} << 30);
  CHECK(parse_memory_size("141e9") == 141'000'000'000);
  CHECK(parse_memory_size("81559MiB") == int64_t{81559} << 20);
  CHECK(parse_memory_size("80 gb") == 80'000'000'000);
  CHECK(parse_memory_size("1.5TB") == 1'500'000'000'000);
  CHECK(parse_memory_size("4096") == 4096);
  for (const char* bad : {"", "GB", "80XB", "-1GB", "0", "nan", "inf", "0x10", "1e30", "80GB "}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_memory_size(bad),
                      std::string("expected a size such as 80GB, 80GiB or 141e9 (bytes), more "
                                  "than 0, got '") + bad + "'");
  }
}

TEST_CASE("plan shows each CUDA run's predicted GPU memory per rank, and --memory its parts") {
  Fixture f;
  const ProcessResult r = f.mx({"plan"}, recipe(f.data.string(), "cuda", "false", "none"));
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(contains(r.out, "gpu mem/rank"));
  CHECK(contains(r.out, "180.2 GiB"));
  CHECK(contains(r.out, "gpu mem/rank: the predicted peak GPU memory of each rank (CUDA runs; "
                        "`plan --memory` shows its parts and the weight cache)"));
  const ProcessResult m = f.mx({"plan", "--memory"}, recipe(f.data.string(), "cuda", "true", "gradients"));
  INFO(m.err);
  REQUIRE(m.code() == 0);
  // recompute and the FLOPs it adds, weights, grads, optimizer, activations, w operands, working,
  // logits, comm, workspace, fragment, total (memory_plan_test: sharded gradients with
  // checkpointing), then the weight cache (the next test case).
  // The weights are the linears' BF16 working copies and their masters' shards beside the
  // embedding and the norms in FP32 (working_copies.h), and Dgrad needs no operand copy.
  CHECK(contains(m.out, "  A    32/32      31.3%   22.9 GiB  8.0 GiB  15.0 GiB   5.3 GiB      0 MiB       "
                        "1.1 GiB  376 MiB  512 MiB  1.0 GiB    690 MiB   54.8 GiB  0 MiB    if ≥ 60.9 GiB\n"));
  // --json: the parts in bytes (memory_plan_test's 58818932736 in all).
  const ProcessResult j = f.mx({"plan", "--json"}, recipe(f.data.string(), "cuda", "true", "gradients"));
  REQUIRE(j.code() == 0);
  const nlohmann::json runs = nlohmann::json::parse(j.out);
  CHECK(runs[0]["gpu_memory_per_rank"]["total"] == 58818932736);
  CHECK(runs[0]["gpu_memory_per_rank"]["weights"] == 24616386560);
  CHECK(runs[0]["gpu_memory_per_rank"]["gradients"] == 8567132160);
  CHECK(runs[0]["gpu_memory_per_rank"]["logits_chunk_tokens"] == 512);
  // A CPU run is not modelled: no column, and --gpu-memory does not refuse it.
  const ProcessResult cpu = f.mx({"plan", "--gpu-memory", "1GB"}, recipe(f.data.string(), "cpu", "false", "none"));
  INFO(cpu.err);
  CHECK(cpu.code() == 0);
  CHECK_FALSE(contains(cpu.out, "gpu mem/rank"));
}

TEST_CASE("plan --memory and --json show the weight cache by the trainer's rule, for --gpu-memory if given") {
  // The cache (weight_cache.h): every linear's BF16 weight once, this arm being plain BF16:
  // (32 blocks · (2·4096² + 2·4096·1024 + 3·4096·14336) + 128256·4096) · 2 B = 15009316864 B
  // (14.0 GiB), unsharded. Kept where the plan's 139694640332 B (every block recomputed) plus it
  // are within 90% of the GPU: from ⌈154703957196 · 100 / 90⌉ = 171893285774 B (160.1 GiB) up, so
  // off at 141e9, on at 200e9.
  Fixture f;
  const std::string text = recipe(f.data.string(), "cuda", "true", "none");
  const ProcessResult unknown = f.mx({"plan", "--memory"}, text);
  INFO(unknown.err);
  REQUIRE(unknown.code() == 0);
  CHECK(contains(unknown.out, "  total      w cache   kept\n"));
  CHECK(contains(unknown.out, "  130.1 GiB  14.0 GiB  if ≥ 160.1 GiB\n"));
  CHECK(contains(unknown.out, "w cache: the weight operands the trainer keeps for a whole step (docs/trainer.md, "
                              "\"GPU memory\"), not in total; kept where total + w cache is within 90% of the "
                              "GPU's memory: not known here (give --gpu-memory SIZE), so kept says how much "
                              "keeps it\n"));
  const ProcessResult h200 = f.mx({"plan", "--memory", "--gpu-memory", "141e9"}, text);
  INFO(h200.err);
  REQUIRE(h200.code() == 0);
  CHECK(contains(h200.out, "  130.1 GiB  14.0 GiB  off\n"));
  CHECK(contains(h200.out, "within 90% of the GPU's memory: here the 131.3 GiB of --gpu-memory 141e9\n"));
  const ProcessResult large = f.mx({"plan", "--memory", "--gpu-memory", "200e9"}, text);
  REQUIRE(large.code() == 0);
  CHECK(contains(large.out, "  130.1 GiB  14.0 GiB  on\n"));

  // --json: the bytes, the boundary, and the trainer's decision with its reason where the GPU is known.
  nlohmann::json cache = nlohmann::json::parse(f.mx({"plan", "--json"}, text).out)[0]["weight_cache"];
  CHECK(cache == nlohmann::json{{"bytes", 15009316864}, {"least_gpu_memory", 171893285774}, {"on", nullptr},
                                {"reason", nullptr}});
  cache = nlohmann::json::parse(f.mx({"plan", "--json", "--gpu-memory", "141e9"}, text).out)[0]["weight_cache"];
  CHECK(cache["on"] == false);
  CHECK(cache["reason"] == "the memory plan (130.1 GiB) plus the cache (14.0 GiB) is above 90% of the GPU's 131.3 GiB");
  cache = nlohmann::json::parse(f.mx({"plan", "--json", "--gpu-memory", "200e9"}, text).out)[0]["weight_cache"];
  CHECK(cache["on"] == true);
  CHECK(cache["reason"] ==
        "the memory plan (130.1 GiB) plus the cache (14.0 GiB) is within 90% of the GPU's 186.3 GiB");
  // Sharded, every weight of this arm is a BF16 working copy, its own rounding: nothing to cache.
  cache = nlohmann::json::parse(f.mx({"plan", "--json"}, recipe(f.data.string(), "cuda", "true", "gradients")).out)[0]
                                    ["weight_cache"];
  CHECK(cache["bytes"] == 0);
  // A CPU run: always kept, with no boundary.
  cache = nlohmann::json::parse(f.mx({"plan", "--json"}, recipe(f.data.string(), "cpu", "true", "none")).out)[0]
                                    ["weight_cache"];
  CHECK(cache == nlohmann::json{{"bytes", 15009316864}, {"least_gpu_memory", nullptr}, {"on", true},
                                {"reason", "the CPU's memory is not planned"}});
}

// train.activation_checkpointing: auto (docs/design.md §4, "Recompute chosen by the memory plan"):
// plan shows what it chooses at --gpu-memory (recompute_plan_test.cpp: selective recompute and 11
// of 32 blocks whole at 80 GB with sharded gradients) and the ladder it chooses from; without a
// GPU size, its least.
TEST_CASE("plan --memory shows auto's recompute: its choice at the GPU's memory and what each step costs") {
  Fixture f;
  const std::string text = recipe(f.data.string(), "cuda", "auto", "gradients");
  const ProcessResult known = f.mx({"plan", "--memory", "--gpu-memory", "80GB"}, text);
  INFO(known.err);
  INFO(known.out);
  REQUIRE(known.code() == 0);
  CHECK(contains(known.out, "  A    auto sel+11/32  10.8%   22.9 GiB  8.0 GiB  15.0 GiB   19.3 GiB     "
                            "0 MiB       1.3 GiB  376 MiB  512 MiB  1.0 GiB    2.1 GiB   70.5 GiB  "
                            "0 MiB    off\n"));
  CHECK(contains(known.out, "auto recompute of #1: 0/32 91.0 GiB +0.0%, sel+0/32 79.2 GiB +0.0%, sel+8/32 "));
  CHECK(contains(known.out, ", sel+11/32 70.5 GiB +10.8% (chosen), sel+16/32 66.5 GiB +15.6%, "
                            "sel+24/32 60.2 GiB +23.5%, sel+31/32 54.9 GiB +30.3%\n"));
  CHECK(contains(known.out, "auto takes the first of none, sel+0, sel+1, … whose total is within 95% of "
                            "the GPU's memory: here the 74.5 GiB of --gpu-memory 80GB"));
  const ProcessResult unknown = f.mx({"plan", "--memory"}, text);
  INFO(unknown.out);
  REQUIRE(unknown.code() == 0);
  CHECK(contains(unknown.out, "  A    auto ≤32/32  31.3%   22.9 GiB"));
  CHECK(contains(unknown.out, " 54.8 GiB  0 MiB    if ≥ 60.9 GiB\n"));
  CHECK(contains(unknown.out, "so auto is shown at its least memory, every block recomputed"));
  CHECK_FALSE(contains(unknown.out, "(chosen)"));
  // --json: the setting, the blocks and whether they are the resolved choice.
  const nlohmann::json runs = nlohmann::json::parse(f.mx({"plan", "--json", "--gpu-memory", "80GB"}, text).out);
  const nlohmann::json& r = runs[0]["gpu_memory_per_rank"]["recompute"];
  CHECK(r["setting"] == "auto");
  CHECK(r["blocks"] == 11);
  CHECK(r["selective"] == true);
  CHECK(r["of"] == 32);
  CHECK(r["resolved"] == true);
  CHECK(r["flops_fraction"].get<double>() == Approx(0.108).margin(0.001));
  CHECK(runs[0]["gpu_memory_per_rank"]["total"].get<int64_t>() < int64_t{76'000'000'000});
  // A fixed count: shown as it is, at any GPU size.
  const ProcessResult fixed = f.mx({"plan", "--memory"}, recipe(f.data.string(), "cuda", "16", "gradients"));
  REQUIRE(fixed.code() == 0);
  CHECK(contains(fixed.out, "  A    16/32      15.6%   22.9 GiB  8.0 GiB  15.0 GiB   21.2 GiB     "
                            "0 MiB       1.1 GiB  376 MiB  512 MiB  1.0 GiB    2.3 GiB   72.3 GiB"));
  // auto where even every block recomputed does not fit: refused at the setting to change, naming
  // the settings that fit (one rank cannot shard: none; 4 ranks unsharded: sharding).
  ProcessResult r2 = f.mx({"plan", "--gpu-memory", "80GB"}, recipe(f.data.string(), "cuda", "auto", "none"));
  INFO(r2.err);
  CHECK(r2.code() == 2);
  CHECK(r2.err.rfind(f.at("14:12") + "parallel.shard: predicted 130.1 GiB", 0) == 0);
  // With sharded gradients, auto recomputes selectively and 11 blocks whole: its prediction is the fix's.
  CHECK(contains(r2.err, "; set parallel.shard: gradients (predicted 70.5 GiB per rank) (run: A)\n"));
  // More blocks than the model has, or a setting that is none: one line at the value, exit 2.
  r2 = f.mx({"plan"}, recipe(f.data.string(), "cuda", "33", "none"));
  CHECK(r2.code() == 2);
  CHECK(r2.err == f.at("11:31") + "train.activation_checkpointing: 33 blocks, more than the 32 of model "
                                  "d4096-L32-h32/8-f14336 (true recomputes every block) (set in base; run: arm A)\n");
  r2 = f.mx({"plan"}, recipe(f.data.string(), "cuda", "selectiv", "none"));
  CHECK(r2.code() == 2);
  CHECK(contains(r2.err, "11:31: train.activation_checkpointing: expected true, false, auto, selective, "
                         "selective+N (N blocks recomputed whole besides) or a number of blocks from 0 to "
                         "4096, got \"selectiv\""));
}

TEST_CASE("plan --gpu-memory refuses a run that cannot fit, at the setting to change") {
  Fixture f;
  ProcessResult r = f.mx({"plan", "--gpu-memory", "80GB"}, recipe(f.data.string(), "cuda", "false", "none"));
  CHECK(r.code() == 2);
  CHECK(r.out.empty());
  CHECK(r.err ==
        f.at("14:12") +
            "parallel.shard: predicted 180.2 GiB of GPU memory per rank (weights 29.9 GiB, "
            "gradients 29.9 GiB, optimizer 59.8 GiB, activations 38.2 GiB, weight operands 14.0 "
            "GiB, working 1.1 GiB, logits 376 MiB, communication 512 MiB, workspace 1.0 GiB, "
            "fragmentation 5.4 GiB), more than the 74.5 GiB of --gpu-memory 80GB; set "
            "parallel.shard: gradients and train.activation_checkpointing: auto (predicted 70.5 "
            "GiB per rank) (run: A)\n");
  // Sharded gradients alone leave 91.0 GiB: checkpointing is the setting to change.
  r = f.mx({"plan", "--gpu-memory", "80GB"}, recipe(f.data.string(), "cuda", "false", "gradients"));
  CHECK(r.code() == 2);
  CHECK(r.err.rfind(f.at("11:31") + "train.activation_checkpointing: predicted 91.0 GiB", 0) == 0);
  CHECK(contains(r.err, "; set train.activation_checkpointing: auto (predicted 70.5 GiB per "
                        "rank) (run: A)\n"));
  // Both: 54.8 GiB fits 80 GB. Unsharded with checkpointing, 130.1 GiB = 139703951718 bytes fit
  // an H200's 141e9.
  CHECK(f.mx({"plan", "--gpu-memory", "80GB"}, recipe(f.data.string(), "cuda", "true", "gradients")).code() == 0);
  CHECK(f.mx({"plan", "--gpu-memory", "141e9"}, recipe(f.data.string(), "cuda", "true", "none")).code() == 0);
  // A size that is not one: one line, exit 2, before the recipe is read.
  r = f.mx({"plan", "--gpu-memory", "80XB"}, recipe(f.data.string(), "cuda", "true", "none"));
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: --gpu-memory: expected a size such as 80GB, 80GiB or 141e9 (bytes), "
                 "more than 0, got '80XB'\n");
  // An empty size is a mistake too, not the option left out (which would check nothing on plan
  // and ask nvidia-smi on run).
  r = f.mx({"plan", "--gpu-memory", ""}, recipe(f.data.string(), "cuda", "false", "none"));
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: --gpu-memory: expected a size such as 80GB, 80GiB or 141e9 (bytes), "
                 "more than 0, got ''\n");
}

TEST_CASE("run refuses before creating anything, and without nvidia-smi it says it did not check") {
  Fixture f;
  const std::vector<std::string> run{"run", "--trainer", FAKE_TRAINER_BIN, "--gpus", "0,1,2,3",
                                     "--poll-ms", "20"};
  std::vector<std::string> with_size = run;
  with_size.insert(with_size.end(), {"--gpu-memory", "80GB"});
  const ProcessResult r = f.mx(with_size, recipe(f.data.string(), "cuda", "false", "none"));
  CHECK(r.code() == 2);
  CHECK(r.err.rfind(f.at("14:12") + "parallel.shard: predicted 180.2 GiB", 0) == 0);
  CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));
  CHECK_FALSE(fs::exists(f.dir.path() / "runs"));
  std::vector<std::string> empty_size = run;
  empty_size.insert(empty_size.end(), {"--gpu-memory", ""});
  const ProcessResult empty = f.mx(empty_size, recipe(f.data.string(), "cuda", "true", "gradients"));
  CHECK(empty.code() == 2);
  CHECK(contains(empty.err, "--gpu-memory: expected a size such as 80GB"));
  CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));

  // No nvidia-smi on PATH (nor in the usual places, on this machine): a note, and the run goes
  // on (here with the fake trainer).
  bool smi_installed = false;
  for (const char* d : {"/usr/bin", "/usr/sbin", "/usr/local/bin"})
    smi_installed = smi_installed || fs::exists(fs::path(d) / "nvidia-smi");
  if (smi_installed) return;
  std::string why;
  CHECK_FALSE(query_gpu_memory(&why));
  CHECK(why == "nvidia-smi is not on PATH");
  const ProcessResult noted = f.mx(run, recipe(f.data.string(), "cuda", "true", "gradients"));
  INFO(noted.err);
  CHECK(contains(noted.err, "mxablate: note: the runs' predicted GPU memory is not checked "
                            "(nvidia-smi is not on PATH); give --gpu-memory SIZE to check it\n"));
  CHECK(fs::exists(f.dir.path() / "mxablate.db"));
}

// What each GPU slot's trainer plans `auto` recompute into (contract/gpu_memory_env.h): the
// GPU's memory over the runs it holds at once (--per-gpu), passed as MXABLATE_GPU_MEMORY.
TEST_CASE("run tells each GPU slot's trainer its share of the GPU's memory") {
  Fixture f;
  const fs::path trainer = f.dir.path() / "env-trainer.sh";
  write_file(trainer, "#!/bin/sh\nprintf '%s' \"$MXABLATE_GPU_MEMORY\" > \"$2/gpu_memory\"\nexit 3\n");
  fs::permissions(trainer, fs::perms::owner_all);
  const ProcessResult r =
      f.mx({"run", "--trainer", trainer.string(), "--gpus", "0,1,2,3", "--per-gpu", "2", "--gpu-memory",
            "80GB", "--max-attempts", "1", "--poll-ms", "20", "--progress", "plain"},
           recipe(f.data.string(), "cuda", "auto", "gradients"));
  INFO(r.err);
  CHECK(r.code() == 0);  // exit 3 is a diverged run: a result, not a failure
  int seen = 0;
  for (const auto& entry : fs::recursive_directory_iterator(f.dir.path() / "runs"))
    if (entry.path().filename() == "gpu_memory") {
      ++seen;
      CHECK(read_file(entry.path()) == "40000000000");
    }
  CHECK(seen == 1);
}

TEST_CASE("nvidia-smi's memory.total: the smallest GPU, in MiB") {
  TempDir dir;
  const fs::path smi = dir.path() / "nvidia-smi";
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", (dir.path().string() + ":" + saved).c_str(), 1);
  write_file(smi, "#!/bin/sh\nprintf '81559\\n 81000 \\n'\n");
  fs::permissions(smi, fs::perms::owner_all);
  std::string why;
  CHECK(query_gpu_memory(&why) == int64_t{81000} << 20);
  write_file(smi, "#!/bin/sh\necho '[N/A]'\n");
  CHECK_FALSE(query_gpu_memory(&why));
  CHECK(why == "nvidia-smi printed '[N/A]', not a size in MiB");
  write_file(smi, "#!/bin/sh\nexit 9\n");
  CHECK_FALSE(query_gpu_memory(&why));
  CHECK(why == "nvidia-smi failed (exit code 9)");
  ::setenv("PATH", saved.c_str(), 1);
}
