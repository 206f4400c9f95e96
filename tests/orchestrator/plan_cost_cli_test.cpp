// `mxablate plan RECIPE --gpu h100|h200` as a user runs it: each run's GPU-hours at most from the
// rates built in from docs/performance.md, against a hand computation from a row of that table;
// runs without a measured rate counted and named with no figure; a bad --gpu one line and exit 2;
// the figures in --json; nothing new without --gpu.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/orchestrator/measured_rates.h"
#include "manifest_dataset.h"
#include "test_util.h"

using namespace mxablate::testing;
using namespace mxablate::orchestrator;
namespace fs = std::filesystem;

namespace {

// A manifest at Llama 3's vocabulary (4-byte tokens) with plenty of tokens.
void write_dataset(const fs::path& dir) {
  write_manifest_dataset(dir, {128256, 1'000'000'000, 1'000'000, 4});
}

// The shape of docs/performance.md's 8B rows: llama-8b at seq 8192 on 4 ranks sharding
// gradients, one sequence a micro-batch, every block recomputed; 100 steps of 65,536 tokens,
// evaluations every 1,638,400 tokens (4) on 4 sequences. Arms: BF16, FP8, MXFP4 F+D+W (no 8B
// row) and F+D+W+H16; two seeds each.
std::string recipe(const std::string& dataset) {
  return fmt::format(R"(name: cost
base:
  model: llama-8b
  device: cuda
  data: {{dataset: {}, seq_len: 8192}}
  train: {{global_batch_tokens: 65536, micro_batch_tokens: 8192, max_tokens: 6553600,
          activation_checkpointing: true}}
  eval: {{every_tokens: 1638400, tokens: 32768}}
  parallel: {{data: 4, shard: gradients}}
  checkpoint: {{every_steps: 0}}
target: {{val_loss: 3.3, stop_at_target: true}}
arms:
  bf16: {{}}
  fp8: {{precision: {{fprop: fp8, dgrad: fp8, wgrad: fp8}}}}
  FDW: {{precision: {{fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}}}
  FDW+H16:
    extends: FDW
    quant: {{hadamard: {{mode: deterministic, size: 16, gemms: [wgrad]}}}}
grid:
  seed: [1, 2]
)",
                     dataset);
}

struct Fixture {
  TempDir dir;
  fs::path data = dir.path() / "data";
  fs::path file = dir.path() / "sweep.yaml";
  Fixture() {
    write_dataset(data);
    write_file(file, recipe(data.string()));
  }
  ProcessResult plan(std::vector<std::string> options) {
    std::vector<std::string> args{kMxablate.string(), "plan", file.string()};
    args.insert(args.end(), options.begin(), options.end());
    return run_process(args, dir.path());
  }
};

// The built-in row of llama-8b at seq 8192 on 4 ranks in `arm` on `gpu`.
const MeasuredRate& row_8b(GpuKind gpu, ArmClass arm) {
  const MeasuredRates& rates = built_in_measured_rates();
  const auto it = std::find_if(rates.rows.begin(), rates.rows.end(), [&](const MeasuredRate& r) {
    return r.model == "llama-8b" && r.seq_len == 8192 && r.ranks == 4 && r.gpu == gpu && r.arm == arm &&
           r.recompute.every_block && r.micro_batch_tokens == 8192 && r.vocab == 128256;
  });
  REQUIRE(it != rates.rows.end());
  return *it;
}

// Rounded up at three significant figures, as the plan shows a bound.
std::string shown(double hours) {
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(hours))));
  const double scale = std::pow(10.0, decimals);
  return fmt::format("{:.{}f}", std::ceil(hours * scale * (1 - 1e-12)) / scale, decimals);
}

// The tokens each run's steps process at most: 100 steps of 65,536, and 4 evaluations of 4
// sequences of 8,192 (one a rank).
constexpr double kTokens = 100 * 65536.0 + 4 * 4 * 8192.0;

}  // namespace

TEST_CASE("plan --gpu gives each run its GPU-hours at most from a measured row, per arm and in all") {
  Fixture f;
  const ProcessResult r = f.plan({"--gpu", "h200"});
  INFO(r.out << r.err);
  REQUIRE(r.code() == 0);
  const MeasuredRate& bf16 = row_8b(GpuKind::kH200, ArmClass::kBF16);
  const MeasuredRate& fp8 = row_8b(GpuKind::kH200, ArmClass::kFP8);
  const MeasuredRate& h16 = row_8b(GpuKind::kH200, ArmClass::kMXFP4H16);
  // By hand: the tokens ÷ the row's tokens/s a GPU ÷ 3600 (7,010 for BF16 when written).
  const double bf16_run = kTokens / bf16.tokens_per_second_per_gpu / 3600;
  const double fp8_run = kTokens / fp8.tokens_per_second_per_gpu / 3600;
  const double h16_run = kTokens / h16.tokens_per_second_per_gpu / 3600;
  const auto lines = lines_of(r.out);
  // The runs' table: a GPU-hours column at the end.
  CHECK(contains(lines[3], "tokens  GPU-h ≤"));
  CHECK(lines[4].substr(lines[4].size() - shown(bf16_run).size()) == shown(bf16_run));
  // Per arm and the sweep: the FDW runs have no rate, and no figure.
  CHECK(contains(r.out, "GPU-hours on h200 at most: each run's steps to train.max_tokens and its evaluations"));
  CHECK(contains(r.out, "  arm      runs  with a rate  tokens/s a GPU  GPU-hours at most\n"));
  CHECK(contains(r.out, fmt::format("  bf16        2            2  {:>14.0f}  {:>17}\n", bf16.tokens_per_second_per_gpu,
                                    shown(2 * bf16_run))));
  CHECK(contains(r.out, fmt::format("  fp8         2            2  {:>14.0f}  {:>17}\n", fp8.tokens_per_second_per_gpu,
                                    shown(2 * fp8_run))));
  CHECK(contains(r.out, "  FDW         2            0               -                  -\n"));
  CHECK(contains(r.out, fmt::format("  sweep       8            6                  {:>17}\n",
                                    shown(2 * (bf16_run + fp8_run + h16_run)))));
  // Each row used, named by its line of docs/performance.md.
  CHECK(contains(r.out, fmt::format("  rate {:.0f} tokens/s a GPU for #1–#2: docs/performance.md:{}: llama-8b, seq "
                                    "8192, vocabulary 128256, micro-batches of 8192, h200, 4 ranks shard gradients, "
                                    "bf16, recompute every block; {}, {}\n",
                                    bf16.tokens_per_second_per_gpu, bf16.line, bf16.source, bf16.date)));
  CHECK(contains(r.out, fmt::format("  rate {:.0f} tokens/s a GPU for #7–#8: docs/performance.md:{}:",
                                    h16.tokens_per_second_per_gpu, h16.line)));
  CHECK(contains(r.out, "2 runs have no measured rate for h200, so no figure:\n"
                        "  #5–#6 (FDW at llama-8b): no row of llama-8b on h200 at seq 8192 on 4 ranks with "
                        "shard gradients of arm mxfp4 F+D+W (measured: bf16, fp8, mxfp4 F+D+W+H16)\n"));
  CHECK(contains(r.out, "upper bounds: the runs stop at the target (target.stop_at_target), before their budgets\n"));
  const MeasuredRates& rates = built_in_measured_rates();
  CHECK(lines.back() == fmt::format("rates: docs/performance.md, \"Rates the plan uses\" (measured {} … {}), built "
                                    "into this mxablate",
                                    rates.first_date, rates.last_date));

  // On H100s only BF16 was measured at this shape.
  const ProcessResult h100 = f.plan({"--gpu", "h100"});
  INFO(h100.out << h100.err);
  REQUIRE(h100.code() == 0);
  const double h100_run = kTokens / row_8b(GpuKind::kH100, ArmClass::kBF16).tokens_per_second_per_gpu / 3600;
  CHECK(contains(h100.out, fmt::format("  sweep       8            2                  {:>17}\n", shown(2 * h100_run))));
  CHECK(contains(h100.out, "6 runs have no measured rate for h100, so no figure:\n"
                           "  #3–#4 (fp8 at llama-8b): no row of llama-8b on h100 at seq 8192 on 4 ranks with "
                           "shard gradients of arm fp8 (measured: bf16)\n"));
}

TEST_CASE("plan --gpu with auto recompute takes the every-block rate as a bound, and says so") {
  Fixture f;
  std::string text = recipe(f.data.string());
  text.replace(text.find("activation_checkpointing: true"), 30, "activation_checkpointing: auto");
  write_file(f.file, text);
  const ProcessResult r = f.plan({"--gpu", "h200"});
  INFO(r.out << r.err);
  REQUIRE(r.code() == 0);
  const MeasuredRate& bf16 = row_8b(GpuKind::kH200, ArmClass::kBF16);
  CHECK(contains(r.out, fmt::format("bf16, recompute every block; {}, {}; a bound: measured with every block "
                                    "recomputed, the most auto may choose (--gpu-memory resolves auto)\n",
                                    bf16.source, bf16.date)));
  const ProcessResult resolved = f.plan({"--gpu", "h200", "--gpu-memory", "141GB"});
  INFO(resolved.out << resolved.err);
  REQUIRE(resolved.code() == 0);
  CHECK(contains(resolved.out, "a bound: measured with every block recomputed, where the run recomputes none\n"));
}

TEST_CASE("plan --gpu with a bad value is one line and exit 2, and nothing new is printed without it") {
  Fixture f;
  for (const char* bad : {"a100", "H100", "", "h100,h200"}) {
    const ProcessResult r = f.plan({"--gpu", bad});
    INFO(bad);
    CHECK(r.code() == 2);
    CHECK(r.out.empty());
    CHECK(r.err == fmt::format("mxablate: --gpu: '{}' is not a GPU with measured rates (one of: h100, h200)\n", bad));
  }
  const ProcessResult layers = f.plan({"--gpu", "h100", "--layers"});
  CHECK(layers.code() == 2);
  CHECK(lines_of(layers.err).size() == 1);
  const ProcessResult plain = f.plan({});
  INFO(plain.err);
  REQUIRE(plain.code() == 0);
  CHECK_FALSE(contains(plain.out, "GPU-h"));
  CHECK_FALSE(contains(plain.out, "rates:"));
  const ProcessResult json = f.plan({"--json"});
  REQUIRE(json.code() == 0);
  CHECK_FALSE(nlohmann::json::parse(json.out)[0].contains("cost"));
}

TEST_CASE("plan --json --gpu gives each run its cost, the row it comes from, or why there is none") {
  Fixture f;
  const ProcessResult r = f.plan({"--json", "--gpu", "h200"});
  INFO(r.err);
  REQUIRE(r.code() == 0);
  const nlohmann::json runs = nlohmann::json::parse(r.out);
  REQUIRE(runs.size() == 8);
  const MeasuredRate& bf16 = row_8b(GpuKind::kH200, ArmClass::kBF16);
  const nlohmann::json& cost = runs[0]["cost"];
  CHECK(cost["gpu"] == "h200");
  CHECK(cost["gpu_hours_at_most"].get<double>() == Approx(kTokens / bf16.tokens_per_second_per_gpu / 3600));
  CHECK(cost["tokens_trained"] == 6553600.0);
  CHECK(cost["tokens_evaluated"] == 131072.0);
  CHECK(cost["rate"]["tokens_per_second_per_gpu"] == bf16.tokens_per_second_per_gpu);
  CHECK(cost["rate"]["line"] == bf16.line);
  CHECK(cost["rate"]["arm"] == "bf16");
  CHECK(cost["rate"]["ranks"] == 4);
  CHECK(cost["rate"]["shard"] == "gradients");
  CHECK(cost["rate"]["recompute"] == "every block");
  CHECK(cost["rate"]["vocab"] == 128256);
  CHECK(cost["bounds"] == nlohmann::json::array());
  CHECK(cost["no_rate"].is_null());
  CHECK(cost["rates_from"] == "docs/performance.md, \"Rates the plan uses\"");
  const nlohmann::json& none = runs[4]["cost"];  // FDW
  CHECK(runs[4]["arm"] == "FDW");
  CHECK(none["gpu_hours_at_most"].is_null());
  CHECK(none["rate"].is_null());
  CHECK(none["no_rate"] == "no row of llama-8b on h200 at seq 8192 on 4 ranks with shard gradients of arm "
                           "mxfp4 F+D+W (measured: bf16, fp8, mxfp4 F+D+W+H16)");
  CHECK(none["tokens_trained"] == 6553600.0);
}
