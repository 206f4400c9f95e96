#include "run_test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "mxablate/contract/event_log.h"
#include "mxablate/data/data_prepare.h"
#include "test_text.h"

namespace mxablate::test {
namespace fs = std::filesystem;

namespace {
// Everything a test process writes lives under one per-process directory, removed at exit.
struct ScratchRoot {
  fs::path path = fs::temp_directory_path() / ("mxablate_train_test_" + std::to_string(::getpid()));
  ~ScratchRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
const fs::path& scratch() {
  static ScratchRoot root;
  return root.path;
}
}  // namespace

const std::string& test_dataset() {
  static const std::string dir = [] {
    const fs::path root = scratch() / "data";
    fs::remove_all(root);
    fs::create_directories(root / "text");
    write_test_corpus((root / "text" / "stories.txt").string(), 2500, 2024);
    data::DataPrepareOptions o;
    o.inputs = {(root / "text").string()};
    o.out_dir = (root / "prepared").string();
    o.vocab_size = 256;
    o.val_fraction = 0.04;
    o.threads = 2;
    std::ostringstream log;
    data::prepare_data(o, log);
    return o.out_dir;
  }();
  return dir;
}

contract::RunConfig smoke_config() {
  contract::RunConfig c;
  c.model = "smoke";
  c.data.dataset = test_dataset();
  c.data.seq_len = 64;
  c.train.global_batch_tokens = 1024;
  c.train.max_tokens = 1024 * 40;
  c.train.lr = 3e-3;
  c.train.warmup_tokens = 1024 * 5;
  c.eval.every_tokens = 1024 * 10;
  c.eval.tokens = 2048;
  c.checkpoint.every_steps = 10;
  c.telemetry.train_every_steps = 5;
  c.telemetry.quant_every_steps = 10;
  c.threads = 1;
  return c;
}

contract::RunConfig resume_config(const std::string& run_id) {
  contract::RunConfig c = smoke_config();
  c.run_id = run_id;
  c.train.max_tokens = 1024 * 16;
  c.train.warmup_tokens = 1024 * 2;
  c.eval.every_tokens = 1024 * 4;
  c.checkpoint.every_steps = 4;
  c.checkpoint.keep = 3;
  return c;
}

void use_every_random_stream(contract::RunConfig& c) {
  c.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4,
                 contract::GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding = {contract::OperandClass::kGrad};
  c.quant.hadamard = {kernels::HadamardMode::kPerStepRandom, 16, {kernels::GemmKind::kWgrad}};
}

contract::RunConfig dp_config(int ranks, int64_t micro_batch_tokens) {
  contract::RunConfig c = smoke_config();
  use_every_random_stream(c);
  c.train.global_batch_tokens = 512;
  c.train.micro_batch_tokens = micro_batch_tokens;
  c.train.max_tokens = 512 * 12;
  c.train.warmup_tokens = 512 * 2;
  c.eval.every_tokens = 512 * 4;
  c.eval.tokens = 1024;
  c.checkpoint.every_steps = 5;
  c.telemetry.train_every_steps = 1;
  c.telemetry.quant_every_steps = 5;
  c.parallel.data = ranks;
  return c;
}

std::string fresh_run_dir(const std::string& name) {
  const fs::path dir = scratch() / "runs" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TrainResult run_train(const std::string& run_dir, const contract::RunConfig* config,
                      const std::string& extra_args) {
  if (config) contract::write_run_config(run_dir + "/config.json", *config);
  const std::string out = run_dir + "/train-output.txt";
  const std::string cmd = std::string("'") + MXABLATE_TRAIN_EXE + "' --run-dir '" + run_dir + "' " +
                          extra_args + " > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  TrainResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

std::vector<nlohmann::json> effective_events(const std::string& run_dir) {
  return contract::read_effective_events(run_dir + "/events.jsonl");
}

std::vector<nlohmann::json> events_of_kind(const std::vector<nlohmann::json>& events,
                                           const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events)
    if (e["kind"] == kind) out.push_back(e);
  return out;
}

std::vector<std::pair<int64_t, double>> eval_curve(const std::vector<nlohmann::json>& events) {
  std::vector<std::pair<int64_t, double>> curve;
  for (const auto& e : events_of_kind(events, "eval"))
    curve.emplace_back(e["tokens"].get<int64_t>(), e["val_loss"].get<double>());
  return curve;
}

Trajectory trajectory_of(const std::string& run_dir) {
  const auto events = effective_events(run_dir);
  Trajectory t;
  for (const auto& e : events_of_kind(events, "train")) {
    t.loss.push_back(e["loss"].get<double>());
    t.grad_norm.push_back(e["grad_norm"].get<double>());
    t.tokens.push_back(e["tokens"].get<int64_t>());
  }
  t.evals = eval_curve(events);
  return t;
}

}  // namespace mxablate::test
