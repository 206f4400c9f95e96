// The training run in process (mxablate/trainer/training_run.h): the same run as the
// mxablate-train process gives, and the ranks of a sharded run as threads of one process, each
// with its own Gloo process group (docs/design.md §4, "The step engine"). Its own target: a
// process cannot hold both LibTorch and SentencePiece (their protobuf registrations collide), so
// the data here are imported from a Megatron dataset the test writes, not prepared from text.
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "free_port.h"
#include "megatron_writer.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/data/megatron_import.h"
#include "mxablate/trainer/run/training_run.h"
#include "process_util.h"

using namespace mxablate;
using namespace mxablate::test;
using mxablate::test::TempDir;
using nlohmann::json;

namespace {

// A learnable token stream (counting mod 256 from random starts), imported once per process.
const std::string& dataset() {
  static TempDir dir("mxablate_in_process_data");
  static const std::string path = [] {
    write_megatron(dir / "seq", megatron_parts(counting_documents(300, 200, 256, 777, [](int) { return 1; }), 4));
    data::MegatronImportOptions o;
    o.prefixes = {dir / "seq"};
    o.out_dir = dir / "data";
    o.vocab_size = 256;
    o.val_fraction = 0.1;
    std::ostringstream log;
    data::import_megatron(o, log);
    return o.out_dir;
  }();
  return path;
}

std::string fresh_run_dir(const std::string& name) {
  static TempDir root("mxablate_in_process_runs");
  const std::string dir = root / name;
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<json> events_of_kind(const std::string& dir, const std::string& kind) {
  std::vector<json> out;
  for (const json& e : contract::read_effective_events(dir + "/events.jsonl"))
    if (e["kind"] == kind) out.push_back(e);
  return out;
}

// mxablate-train as a process on `c`: its exit code and output.
std::pair<int, std::string> train_process(const std::string& dir, const contract::RunConfig& c) {
  contract::write_run_config(dir + "/config.json", c);
  const CommandResult r = run_command(std::string("'") + MXABLATE_TRAIN_EXE + "' --run-dir '" + dir + "' 2>&1");
  return {r.exit_code, r.output};
}

contract::RunConfig in_process_config(int ranks, contract::ShardLevel shard) {
  contract::RunConfig c;
  c.model = "smoke";
  c.data.dataset = dataset();
  c.data.seq_len = 64;
  c.threads = 1;
  // Every random stream: all three GEMMs in MXFP4, SR of the gradients, a per-step-random
  // rotation of Wgrad.
  c.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4,
                 contract::GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding = {contract::OperandClass::kGrad};
  c.quant.hadamard = {kernels::HadamardMode::kPerStepRandom, 16, {kernels::GemmKind::kWgrad}};
  c.train.global_batch_tokens = 512;
  c.train.micro_batch_tokens = 256;
  c.train.lr = 3e-3;
  c.train.max_tokens = 512 * 6;
  c.train.warmup_tokens = 512 * 2;
  c.eval.every_tokens = 512 * 3;
  c.eval.tokens = 1024;
  c.checkpoint.every_steps = 3;
  c.telemetry.train_every_steps = 1;
  c.parallel.data = ranks;
  c.parallel.shard = shard;
  return c;
}

std::vector<double> losses_of(const std::string& dir) {
  std::vector<double> out;
  for (const json& e : events_of_kind(dir, "train")) out.push_back(e["loss"].get<double>());
  return out;
}

std::vector<double> evals_of(const std::string& dir) {
  std::vector<double> out;
  for (const json& e : events_of_kind(dir, "eval")) out.push_back(e["val_loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("A run trained in process equals the mxablate-train process's", "[train][in_process]") {
  const contract::RunConfig c = in_process_config(1, contract::ShardLevel::kNone);
  const std::string by_process = fresh_run_dir("in_process_reference");
  const auto [code, output] = train_process(by_process, c);
  INFO(output);
  REQUIRE(code == 0);

  const std::string dir = fresh_run_dir("in_process_one_rank");
  contract::write_run_config(dir + "/config.json", c);
  trainer::TrainOptions options;
  options.run_dir = dir;
  trainer::TrainingRun run(c, options);
  CHECK(run.run() == trainer::exit_code::kSuccess);
  REQUIRE(losses_of(dir).size() == 6);
  CHECK(losses_of(dir) == losses_of(by_process));
  CHECK(evals_of(dir) == evals_of(by_process));
  CHECK(events_of_kind(dir, "run_end").back()["status"] == "budget_exhausted");
}

TEST_CASE("Two ranks of a sharded run on threads of one process equal the two rank processes",
          "[train][in_process][shard]") {
  const contract::RunConfig c = in_process_config(2, contract::ShardLevel::kGradients);
  const std::string by_process = fresh_run_dir("in_process_sharded_reference");
  const auto [code, output] = train_process(by_process, c);
  if (output.find("ranks on the CPU need Gloo") != std::string::npos)
    MXABLATE_SKIP("mxablate-train was built without Gloo's headers (libgloo-dev)");
  INFO(output);
  REQUIRE(code == 0);

  const std::string dir = fresh_run_dir("in_process_sharded");
  contract::write_run_config(dir + "/config.json", c);
  trainer::TrainOptions options;
  options.run_dir = dir;
  const int port = test::free_port();
  std::vector<int> codes(2, -1);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      trainer::RankInfo rank;
      rank.rank = r;
      rank.world = 2;
      rank.local_rank = r;
      rank.store_host = "127.0.0.1";
      rank.store_port = port;
      rank.hosts_store = r == 0;
      try {
        trainer::TrainingRun run(c, options, rank);
        codes[static_cast<size_t>(r)] = run.run();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  INFO(errors[0] << " / " << errors[1]);
  CHECK(codes == std::vector<int>{0, 0});
  REQUIRE(losses_of(dir).size() == 6);
  CHECK(losses_of(dir) == losses_of(by_process));
  CHECK(evals_of(dir) == evals_of(by_process));
  // Rank 0 wrote the checkpoints' model and state, each rank its optimizer shard.
  const auto checkpoints = events_of_kind(dir, "checkpoint");
  REQUIRE_FALSE(checkpoints.empty());
  const std::string last = checkpoints.back()["path"].get<std::string>();
  CHECK(std::filesystem::exists(last + "/optimizer-shard-00000-of-00002.pt"));
  CHECK(std::filesystem::exists(last + "/optimizer-shard-00001-of-00002.pt"));
}
