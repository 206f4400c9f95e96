// Helpers for the tests that run `mxablate-train` as a process: a prepared dataset made from
// text the test writes, run directories with a config, and reading back the events.
#pragma once

#include <cmath>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/run_config.h"

namespace mxablate::test {

// A prepared data directory (256-token BPE on generated English-like text), built once per
// test process under the system temp directory.
const std::string& test_dataset();

// A smoke-model config on test_dataset() that trains in seconds.
contract::RunConfig smoke_config();
// The resume tests' run, named `run_id`: 16 steps, evaluations and checkpoints every 4 (three kept).
contract::RunConfig resume_config(const std::string& run_id);
// Every random stream in play: all three GEMMs in MXFP4, stochastic rounding of the gradients,
// a per-step-random 16-point Hadamard rotation of Wgrad.
void use_every_random_stream(contract::RunConfig& c);

// A 12-step run of `ranks` data-parallel ranks with every random stream in play (MXFP4
// everywhere, SR of the gradients, a per-step-random rotation of Wgrad), steps of 512 tokens in
// micro-batches of `micro_batch_tokens`, a train event every step, checkpoints every 5 steps.
contract::RunConfig dp_config(int ranks, int64_t micro_batch_tokens);

struct TrainResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Writes RUN_DIR/config.json (unless config is null) and runs mxablate-train there.
TrainResult run_train(const std::string& run_dir, const contract::RunConfig* config,
                      const std::string& extra_args = "");
std::string fresh_run_dir(const std::string& name);

// Whether mxablate-train refused a data-parallel CPU run for lack of Gloo (the GPU machine's
// torch ships no Gloo headers): such tests skip, saying so.
inline bool lacks_gloo(const std::string& output) {
  return output.find("ranks on the CPU need Gloo") != std::string::npos;
}
inline constexpr const char* kNoGloo = "mxablate-train was built without Gloo's headers (libgloo-dev)";

std::vector<nlohmann::json> effective_events(const std::string& run_dir);
std::vector<nlohmann::json> events_of_kind(const std::vector<nlohmann::json>& events,
                                           const std::string& kind);
// The (tokens, val_loss) of every eval event, in order.
std::vector<std::pair<int64_t, double>> eval_curve(const std::vector<nlohmann::json>& events);

// A run's curve as its events say it: the train events' losses, gradient norms and tokens (after
// the step), the evals.
struct Trajectory {
  std::vector<double> loss, grad_norm;
  std::vector<int64_t> tokens;
  std::vector<std::pair<int64_t, double>> evals;
};
Trajectory trajectory_of(const std::string& run_dir);

// |a - b| within `relative` of |b|.
inline bool within(double a, double b, double relative) { return std::abs(a - b) <= relative * std::abs(b); }

}  // namespace mxablate::test
