#include "mxablate/orchestrator/run_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/training_plan.h"

namespace mxablate::orchestrator {
namespace {

using contract::GemmPath;
using contract::GemmPrecision;

bool all_gemms(const contract::PrecisionConfig& p, GemmPrecision g) {
  return p.fprop == g && p.dgrad == g && p.wgrad == g;
}

// "4", "4, 8": a property's values over the rows still in question, each once, in table order.
std::string measured_values(const std::vector<const MeasuredRate*>& rows,
                            const std::function<std::string(const MeasuredRate&)>& value) {
  std::vector<std::string> seen;
  for (const MeasuredRate* r : rows)
    if (const std::string v = value(*r); std::find(seen.begin(), seen.end(), v) == seen.end())
      seen.push_back(v);
  std::string out;
  for (const std::string& v : seen) out += (out.empty() ? "" : ", ") + v;
  return out;
}

std::string blocks_text(int64_t blocks, int64_t n_layers) {
  if (blocks == 0) return "none";
  if (blocks == n_layers) return "every block";
  return fmt::format("{} of {}", blocks, n_layers);
}

}  // namespace

std::optional<ArmClass> arm_class(const contract::RunConfig& c) {
  // Settings that change the work of some layers or steps, which no measured run had.
  if (!c.overrides.empty() || !c.precision_schedule.empty() || c.quant.bf16_first_blocks != 0 ||
      c.quant.bf16_last_blocks != 0 || c.quant.fp8_scaling != contract::Fp8Scaling::kCurrent)
    return std::nullopt;
  // A block's numerics beyond its precisions and rotation at their defaults: no SR, scale rule
  // floor, 1-D weight blocks, no DGE or OCC.
  const contract::LayerSettings s = contract::block_settings(c);
  contract::LayerSettings plain;
  plain.precision = s.precision;
  plain.hadamard = s.hadamard;
  if (!(s == plain)) return std::nullopt;
  const bool rotated = s.hadamard.mode != kernels::HadamardMode::kNone;
  const bool h16 = s.hadamard == contract::HadamardConfig{kernels::HadamardMode::kDeterministic, 16,
                                                          contract::GemmSet{kernels::GemmKind::kWgrad}};
  const GemmPath path = c.quant.gemm_path;
  // The routes each setting gives on an H100 or H200 (gemm_routing.h): BF16 GEMMs are the same
  // on every path; FP8 ones take FP8 tensor cores except under `emulated`; MXFP4 ones are
  // emulated under auto and emulated, and take their own engines under fp8 and fp8-where-exact.
  if (all_gemms(s.precision, GemmPrecision::kBF16) && !rotated) return ArmClass::kBF16;
  if (all_gemms(s.precision, GemmPrecision::kFP8) && !rotated && path != GemmPath::kEmulated)
    return ArmClass::kFP8;
  if (!all_gemms(s.precision, GemmPrecision::kMXFP4) || (rotated && !h16)) return std::nullopt;
  switch (path) {
    case GemmPath::kAuto:
    case GemmPath::kEmulated: return rotated ? ArmClass::kMXFP4H16 : ArmClass::kMXFP4;
    case GemmPath::kFP8: return rotated ? std::optional(ArmClass::kMXFP4H16Fp8) : std::nullopt;
    case GemmPath::kFP8WhereExact: return rotated ? std::optional(ArmClass::kMXFP4H16Exact) : std::nullopt;
  }
  return std::nullopt;
}

RateMatch match_rate(const MeasuredRates& rates, GpuKind gpu, const contract::RunConfig& run,
                     const RunFacts& facts) {
  RateMatch m;
  const auto none = [&m](std::string why) {
    m.no_rate = std::move(why);
    return m;
  };
  if (run.device != contract::Device::kCUDA) return none("a CPU run");
  // Execution settings measured only at their defaults (docs/performance.md: `deterministic`
  // costs 13–20 %, eager steps of small models up to 28 %).
  if (run.train.deterministic) return none("train.deterministic: true, not measured");
  if (run.train.fused_producers) return none("train.fused_producers: true, not measured");
  if (run.train.cuda_graphs != contract::CudaGraphs::kAuto)
    return none(fmt::format("train.cuda_graphs: {}, not measured", contract::to_string(run.train.cuda_graphs)));
  const std::optional<ArmClass> arm = arm_class(run);
  if (!arm) return none(fmt::format("its numerics are none of the measured arms ({})", arm_class_names()));
  if (!facts.vocab) return none("its dataset's vocabulary is not known");
  if (!run.model.is_preset())
    return none(fmt::format("model {}: only presets were measured", contract::model_label(run.model)));

  // The planner resolved and checked every run's model: this cannot throw.
  const trainer::ModelShape shape = trainer::model_shape(run.model);
  const int64_t micro = contract::micro_batch_tokens(run);
  contract::Recompute recompute = run.train.activation_checkpointing;
  const bool is_auto = recompute.mode == contract::Recompute::Mode::kAuto;
  if (is_auto && facts.gpu_memory_bytes)
    recompute = trainer::resolve_recompute(run, shape, *facts.vocab, *facts.gpu_memory_bytes)
                    .train.activation_checkpointing;
  const bool unresolved = recompute.mode == contract::Recompute::Mode::kAuto;
  const int64_t n = shape.n_layers;
  const int64_t whole = trainer::recomputed_blocks(recompute, n);  // unresolved: all
  // A selective run is bounded by a row measured selectively with as many blocks whole or more,
  // or by one with more blocks whole (MeasuredRecompute::covers: the elementwise work selective
  // recompute adds is far less than one more block's forward).
  const bool selective = !unresolved && trainer::selective_recompute(recompute);
  const std::string run_recompute =
      selective ? fmt::format("selectively and {} whole", blocks_text(whole, n)) : blocks_text(whole, n);
  const auto same_recompute = [&](const MeasuredRate& r) { return r.recompute.is(whole, selective, n); };

  // The rows narrowed one property at a time, so that a run without a rate is told the first
  // property no row has, and what was measured instead.
  std::vector<const MeasuredRate*> rows;
  for (const MeasuredRate& r : rates.rows) rows.push_back(&r);
  std::string what;  // the properties kept so far: "llama-8b on h100 at seq 8192"
  const auto narrow = [&](const std::string& wanted, const std::function<bool(const MeasuredRate&)>& keep,
                          const std::function<std::string(const MeasuredRate&)>& value) {
    std::vector<const MeasuredRate*> kept;
    for (const MeasuredRate* r : rows)
      if (keep(*r)) kept.push_back(r);
    if (kept.empty())
      m.no_rate = fmt::format("no row of {}{} (measured: {})", what, wanted, measured_values(rows, value));
    what += wanted;
    rows = std::move(kept);
    return !rows.empty();
  };
  const bool found =
      narrow(run.model.preset, [&](const MeasuredRate& r) { return r.model == run.model.preset; },
             [](const MeasuredRate& r) { return r.model; }) &&
      narrow(fmt::format(" on {}", to_string(gpu)), [&](const MeasuredRate& r) { return r.gpu == gpu; },
             [](const MeasuredRate& r) { return std::string(to_string(r.gpu)); }) &&
      narrow(fmt::format(" at seq {}", run.data.seq_len),
             [&](const MeasuredRate& r) { return r.seq_len == run.data.seq_len; },
             [](const MeasuredRate& r) { return fmt::format("seq {}", r.seq_len); }) &&
      narrow(fmt::format(" on {} rank{}", run.parallel.data, run.parallel.data == 1 ? "" : "s"),
             [&](const MeasuredRate& r) { return r.ranks == run.parallel.data; },
             [](const MeasuredRate& r) { return fmt::format("{} rank{}", r.ranks, r.ranks == 1 ? "" : "s"); }) &&
      // One rank shards nothing, whatever parallel.shard says.
      narrow(run.parallel.data == 1 ? std::string() : fmt::format(" with shard {}", contract::to_string(run.parallel.shard)),
             [&](const MeasuredRate& r) { return run.parallel.data == 1 || r.shard == run.parallel.shard; },
             [](const MeasuredRate& r) { return fmt::format("shard {}", contract::to_string(r.shard)); }) &&
      narrow(fmt::format(" of arm {}", to_string(*arm)), [&](const MeasuredRate& r) { return r.arm == *arm; },
             [](const MeasuredRate& r) { return std::string(to_string(r.arm)); }) &&
      narrow(fmt::format(" at a vocabulary of {} or more", *facts.vocab),
             [&](const MeasuredRate& r) { return r.vocab >= *facts.vocab; },
             [](const MeasuredRate& r) { return fmt::format("vocabulary {}", r.vocab); }) &&
      narrow(fmt::format(" with micro-batches of {} tokens or fewer", micro),
             [&](const MeasuredRate& r) { return r.micro_batch_tokens <= micro; },
             [](const MeasuredRate& r) { return fmt::format("micro-batches of {}", r.micro_batch_tokens); }) &&
      narrow(unresolved ? std::string(" recomputing every block, the most auto may choose (--gpu-memory "
                                      "resolves auto)")
             : whole == n ? std::string(" recomputing every block")
             : selective  ? fmt::format(" recomputing {} of {} blocks whole and the rest selectively, or more",
                                        whole, n)
                          : fmt::format(" recomputing {} of {} blocks or more", whole, n),
             [&](const MeasuredRate& r) { return r.recompute.covers(whole, selective, n); },
             [](const MeasuredRate& r) { return "recompute " + recompute_text(r); });
  if (!found) return m;

  const auto exact = [&](const MeasuredRate* r) {
    return !unresolved && r->vocab == *facts.vocab && r->micro_batch_tokens == micro && same_recompute(*r);
  };
  const auto chosen = std::find_if(rows.begin(), rows.end(), exact);
  m.rate = chosen != rows.end()
               ? *chosen
               : *std::max_element(rows.begin(), rows.end(), [](const MeasuredRate* a, const MeasuredRate* b) {
                   return a->tokens_per_second_per_gpu < b->tokens_per_second_per_gpu;
                 });
  const MeasuredRate& r = *m.rate;
  if (unresolved)
    m.bounds.push_back("measured with every block recomputed, the most auto may choose (--gpu-memory resolves auto)");
  else if (!same_recompute(r))
    m.bounds.push_back(fmt::format("measured with {} recomputed, where the run recomputes {}", recompute_text(r),
                                   run_recompute));
  if (r.vocab > *facts.vocab)
    m.bounds.push_back(fmt::format("measured at a vocabulary of {}, the run's {}", r.vocab, *facts.vocab));
  if (r.micro_batch_tokens < micro)
    m.bounds.push_back(fmt::format("measured with micro-batches of {} tokens, the run's {}", r.micro_batch_tokens, micro));
  return m;
}

RunTokens tokens_at_most(const contract::RunConfig& c) {
  const trainer::TrainingPlan p = trainer::make_training_plan(c);
  RunTokens t;
  t.trained = static_cast<double>(p.total_steps) * static_cast<double>(p.tokens_per_step);
  // The trainer evaluates once after each step that passes a multiple of every_tokens
  // (TrainingPlan::eval_due), and after the last step. A step at least every_tokens long passes
  // one always; a shorter one passes at most one, so those steps are the multiples' count.
  const double steps = static_cast<double>(p.total_steps);
  const double crossing_steps = static_cast<double>(p.tokens_per_step) >= c.eval.every_tokens
                                    ? steps
                                    : std::floor(t.trained / c.eval.every_tokens);
  const bool last_crosses = p.eval_due((p.total_steps - 1) * p.tokens_per_step, p.total_steps * p.tokens_per_step);
  const double evaluations = crossing_steps + (last_crosses ? 0 : 1);
  // The validation batches (micro-batches of whole sequences) are split over the ranks; the
  // busiest rank's count, times the ranks, is the GPU time they all spend.
  const int64_t ranks = c.parallel.data;
  const int64_t batches = (p.eval_sequences + p.sequences_per_micro_batch - 1) / p.sequences_per_micro_batch;
  const int64_t per_rank = (batches + ranks - 1) / ranks;
  t.evaluated = evaluations * static_cast<double>(per_rank * ranks * p.micro_batch_tokens);
  return t;
}

RunCost run_cost(const MeasuredRates& rates, GpuKind gpu, const contract::RunConfig& run,
                 const RunFacts& facts) {
  RunCost c;
  c.match = match_rate(rates, gpu, run, facts);
  c.tokens = tokens_at_most(run);
  if (c.match.rate)
    c.gpu_hours = (c.tokens.trained + c.tokens.evaluated) / c.match.rate->tokens_per_second_per_gpu / 3600.0;
  return c;
}

}  // namespace mxablate::orchestrator
