#include "run_setup.h"

#include <torch/cuda.h>

#include <iostream>

#include "mxablate/contract/gemm_routing.h"
#include "mxablate/contract/gpu_memory_env.h"
#include "mxablate/data/dataset_location.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "mxablate/trainer/plan/plan_rules.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/working_copies.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

using contract::ConfigError;
using contract::RunConfig;

// A rank of a data-parallel run takes the GPU of its local rank among the visible ones. Its
// refusals depend on the machine, not the config: the trainer's alone (docs/design.md §5,
// "Validation before anything runs"; `mxablate run` checks ranks against its slots).
at::Device resolve_device(const RunConfig& c, int local_rank) {
  if (c.device == contract::Device::kCPU) return at::kCPU;
  if (!torch::cuda::is_available())
    throw ConfigError("device: \"cuda\" requested but LibTorch " + std::string(compat::torch_version()) +
                      " sees no CUDA device");
  const int64_t visible = static_cast<int64_t>(torch::cuda::device_count());
  if (local_rank >= visible)
    throw ConfigError("parallel.data: rank " + std::to_string(local_rank) + " needs GPU " +
                      std::to_string(local_rank) + " but " + std::to_string(visible) +
                      " are visible (CUDA_VISIBLE_DEVICES); each rank takes its own GPU");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

// How each GEMM precision runs here (contract/gemm_routing.h holds the rule): what the device and
// this build can run, as the kernels say, then the rule. A GEMM path the config demands but the
// device lacks is a ConfigError, the machine's (check_run_fits has refused what the config alone
// rules out: a shape FP8 tensor cores cannot take); auto's fallback to emulation is said on rank
// 0's stderr (and in run_start).
contract::GemmRoutes resolve_gemm_routes(const RunConfig& c, const at::Device& device,
                                         const RunLayerPlans& plans, int64_t tokens, bool say_fallback) {
  contract::GemmRouteSupport support;
  support.fp8_tensorwise = kernels::gemm_route_unavailable_reason(kernels::GemmRoute::kFP8Tensorwise, device);
  if (support.fp8_tensorwise.empty()) support.fp8_tensorwise = check_fp8_tensor_core_shapes(plans, tokens);
  support.hopper_fp8 = kernels::gemm_route_unavailable_reason(kernels::GemmRoute::kHopperFP8, device);
  support.mxfp4_as_fp8 = kernels::gemm_route_unavailable_reason(kernels::GemmRoute::kMXFP4AsFP8, device);
  const contract::GemmRoutes routes = contract::resolve_gemm_routes(c.quant.gemm_path, support);
  const std::string& fallback = routes.by_precision[static_cast<size_t>(contract::GemmPrecision::kFP8)].fallback;
  if (say_fallback && !fallback.empty() && contract::has_fp8_gemm(c))
    std::cerr << "mxablate-train: quant.gemm_path " << contract::to_string(c.quant.gemm_path)
              << ": the fp8 GEMMs run emulated: " << fallback << "\n";
  return routes;
}

// Data up to TrainOptions::always_verify_data_bytes (64 MiB) is verified completely (checksums,
// every token id) at every start: it costs well under a second. Larger data gets the cheap checks
// of open_dataset, and all of them with --verify-data.
void verify_data(const data::TokenDataset& dataset, const TrainOptions& options) {
  const int64_t bytes = (dataset.train.size() + dataset.validation.size()) * dataset.manifest.bytes_per_token;
  if (!options.verify_data && bytes > options.always_verify_data_bytes) return;
  const std::string problem = data::verify_dataset(dataset.dir);
  if (!problem.empty()) throw ConfigError("data.dataset: " + problem);
}

// The GPU memory this run may plan into (contract/gpu_memory_env.h): MXABLATE_GPU_MEMORY where
// `mxablate run` set it (the slot's share of its GPU), else the device's; 0 on the CPU, whose
// memory is not planned. Read on CUDA whatever the settings, so a bad value is refused anyway.
struct DeviceMemory {
  int64_t bytes = 0;
  std::string source;
};
DeviceMemory device_memory(const at::Device& device) {
  if (!device.is_cuda()) return {};
  if (const std::optional<int64_t> given = contract::gpu_memory_from_environment())
    return {*given, contract::kGpuMemoryEnv};
  return {compat::device_memory_bytes(device), "the device's memory"};
}

// Which blocks recompute (recompute_plan.h): as the setting names them, or, for `auto`, the
// fewest that fit `memory`; on the CPU `auto` recomputes none. Returns the config with `auto`
// resolved: the one whose memory plan the run gets.
RunConfig decide_recompute(RunSetup& s, const RunConfig& config, int64_t vocab, const DeviceMemory& memory) {
  const contract::Recompute& setting = config.train.activation_checkpointing;
  const int64_t n = s.shape.n_layers;
  if (setting.mode != contract::Recompute::Mode::kAuto) {
    s.recompute.blocks = recomputed_blocks(setting, n);
    s.recompute.selective = selective_recompute(setting);
    s.recompute.reason = "train.activation_checkpointing: " + contract::to_string(setting);
    return config;
  }
  RunConfig resolved = config;
  if (!s.device.is_cuda()) {
    s.recompute.reason = "auto: none on the CPU (its memory is not planned)";
  } else {
    const RecomputeChoice choice = choose_recompute(config, s.shape, vocab, s.layer_plans, memory.bytes);
    s.recompute.blocks = choice.blocks;
    s.recompute.selective = choice.setting.selective;
    // (No fmt here: the engine builds against LibTorch's own fmt headers on the GPU machine.)
    s.recompute.reason = "auto: " + std::string(choice.setting.selective ? "selective, " : "") +
                         std::to_string(choice.blocks) + " of " + std::to_string(n) +
                         " blocks whole, predicted " + format_bytes(choice.predicted) + " per rank " +
                         (choice.fits ? "within " : "more than ") +
                         std::to_string(kAutoRecomputeMemoryPercent) + "% of " +
                         format_bytes(memory.bytes) + " (" + memory.source + ")";
  }
  resolved.train.activation_checkpointing = recompute_of_blocks(s.recompute.blocks, n, s.recompute.selective);
  return resolved;
}

}  // namespace

RunSetup build_setup(const RunConfig& config, const TrainOptions& options, const RankInfo& rank) {
  RunSetup s;
  s.config = config;
  s.rank = rank;
  if (config.threads > 0) {
    at::set_num_threads(config.threads);
    kernels::set_cpu_threads(config.threads);
    compat::set_blas_threads(config.threads);
  }
  s.device = resolve_device(config, rank.local_rank);
  if (config.train.deterministic && s.device.is_cuda()) compat::use_deterministic_cuda_kernels();
  if (s.device.is_cuda()) compat::set_current_device(s.device);

  s.shape = runnable_model_shape(config);
  s.plan = make_training_plan(config);

  s.data_dir = resolve_dataset_dir(config.data.dataset);
  try {
    s.dataset = std::make_unique<data::TokenDataset>(data::open_dataset(s.data_dir));
  } catch (const std::exception& e) {
    throw ConfigError(std::string("data.dataset: ") + e.what());
  }
  verify_data(*s.dataset, options);
  const int64_t vocab = s.dataset->manifest.tokenizer.vocab_size;
  // Every layer in every phase of the schedule must be able to run, the LM head at the data's
  // vocabulary too: checked before training (run_trainer has checked the rest, check_runnable).
  s.layer_plans = check_run_fits(config, s.shape, vocab);
  // What the memory plan sees from here on: `auto` resolved against this GPU.
  const DeviceMemory memory = device_memory(s.device);
  s.executed = decide_recompute(s, config, vocab, memory);

  auto session = std::make_shared<QuantSession>();
  session->seed = config.train.seed;
  s.routes = resolve_gemm_routes(config, s.device, s.layer_plans, s.plan.micro_batch_tokens,
                                 rank.rank == 0);
  session->routes = s.routes;
  session->fused_producers = config.train.fused_producers;
  if (config.quant.fp8_scaling == contract::Fp8Scaling::kDelayed)
    session->fp8_history = std::make_shared<Fp8AmaxHistory>(static_cast<int64_t>(s.layer_plans.layers.size()),
                                                            config.quant.fp8_amax_history,
                                                            config.quant.fp8_margin, s.device);
  ModelOptions mo;
  mo.shape = s.shape;
  mo.vocab_size = vocab;
  mo.layer_plans = s.layer_plans.phases[0];
  mo.session = session;
  mo.device = s.device;
  mo.init_seed = config.train.seed;
  mo.recomputed_blocks = s.recompute.blocks;
  mo.selective_recompute = s.recompute.selective;
  s.model = LlamaModel(mo);
  if (rank.world > 1) s.group = std::make_unique<DataParallel>(rank, s.device);
  // Before any checkpoint is restored: a sharded engine moves the parameters into its flat
  // buffer, and a checkpoint is loaded into the parameters in place.
  std::vector<at::Tensor> bf16_weights;  // what the ranks keep as BF16 working copies
  const std::vector<bool> bf16_copies = bf16_working_copies(config, s.layer_plans);
  const std::vector<MXLinear> linears = s.model->linears();
  for (size_t i = 0; i < linears.size(); ++i)
    if (bf16_copies[i]) bf16_weights.push_back(linears[i]->weight);
  s.engine = make_step_engine(config, *s.model, s.group.get(), bf16_weights);

  // The config's facts are the planner's (step_capture.h); check_run_fits above has refused `on`
  // where they rule a graph out, so `on` can fail here only for want of CUDA graphs in this build.
  StepCaptureFacts facts = step_capture_facts(config, s.layer_plans);
  facts.graphs_available = compat::kHasCudaGraphs;
  facts.parameters = s.model->parameter_count();
  s.capture = decide_step_capture(config.train.cuda_graphs, facts);
  s.weight_cache = decide_weight_cache(s.device.is_cuda(), plan_memory(s.executed, s.shape, vocab, s.layer_plans).total(),
                                       weight_cache_bytes(s.layer_plans, bf16_copies), memory.bytes);
  session->cache_weight_operands = s.weight_cache.on;
  if (s.capture.graphed) s.graph = std::make_unique<StepGraph>(s.device, *session, s.model->parameters());

  const uint64_t data_seed = config.train.data_seed != 0 ? config.train.data_seed : config.train.seed;
  try {
    s.batches = std::make_unique<TrainBatches>(*s.dataset, config.data.seq_len, data_seed);
    s.validation = validation_batches(*s.dataset, config.data.seq_len, s.plan.eval_sequences,
                                      s.plan.sequences_per_micro_batch, s.device);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("data: ") + e.what());
  }
  return s;
}

}  // namespace mxablate::trainer
