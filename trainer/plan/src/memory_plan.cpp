#include "mxablate/trainer/plan/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <regex>

#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/loss_chunks.h"
#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/working_copies.h"

namespace mxablate::trainer {
namespace {

using contract::RunConfig;
using contract::ShardLevel;
using kernels::GemmKind;
using kernels::Operand;

constexpr int64_t kF32 = 4;
constexpr int64_t kBF16 = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const kernels::QuantSpec& spec(const LinearPlan& p, GemmKind g, Operand o) {
  return p[g].operand[static_cast<size_t>(o)];
}

// Bytes per token kept for the Wgrad GEMMs of the linears `consumers` that read one input of
// `width` columns (q, k, v read the attention norm's output; gate, up the MLP norm's). A plain-BF16
// Wgrad saves the BF16 input itself; a quantized one saves its own BF16 Q(X) down columns, shared
// by consumers whose quantization is deterministic and alike (the per-step memo, quant_memo.h).
// `held`: another op saves the input anyway (attention's output, which SDPA keeps). `rebuilt`:
// selective recompute makes the input again in the backward (mx_linear.h, RebuiltInput), so only
// a consumer under OCC (which keeps its clamped X) saves anything of it.
int64_t wgrad_input_bytes(const std::vector<const LinearPlan*>& consumers, int64_t width, bool held,
                          bool rebuilt = false) {
  std::vector<kernels::QuantSpec> shared;
  int64_t copies = 0;
  bool input_kept = held;
  for (const LinearPlan* p : consumers) {
    if (rebuilt && !p->occ) continue;
    const kernels::QuantSpec& x = spec(*p, GemmKind::kWgrad, Operand::kB);
    if (is_plain_bf16(x)) {
      input_kept = true;
    } else if (!is_memoizable(x)) {
      ++copies;
    } else if (std::none_of(shared.begin(), shared.end(),
                            [&](const kernels::QuantSpec& s) { return same_quantization(s, x); })) {
      shared.push_back(x);
      ++copies;
    }
  }
  return (copies + (input_kept ? 1 : 0)) * width * kBF16;
}

// What the backward holds while it quantizes a rebuilt input for its Wgrad readers, per token: the
// input made again, and its quantized copies (as many as the forward would have saved; a plain
// BF16 Wgrad reads the input itself).
int64_t rebuilt_input_bytes(const std::vector<const LinearPlan*>& consumers, int64_t width) {
  const bool any_plain = std::any_of(consumers.begin(), consumers.end(), [](const LinearPlan* p) {
    return is_plain_bf16(spec(*p, GemmKind::kWgrad, Operand::kB));
  });
  return wgrad_input_bytes(consumers, width, false) + (any_plain ? 0 : width * kBF16);
}

// The BF16 copy of dY that a linear's quantized Dgrad and Wgrad each make, per token.
int64_t dy_copy_bytes(const LinearPlan& p, int64_t out_features) {
  int64_t n = 0;
  if (!is_plain_bf16(spec(p, GemmKind::kDgrad, Operand::kA))) ++n;
  if (!is_plain_bf16(spec(p, GemmKind::kWgrad, Operand::kA))) ++n;
  return n * out_features * kBF16;
}

struct BlockMemory {
  int64_t saved_per_token = 0;     // saved for the backward pass, per token
  int64_t weight_operands = 0;     // BF16 W (or Q(W) down columns) kept for Dgrad
  int64_t working_per_token = 0;   // the backward's working set, per token
  int64_t largest_weight = 0;      // elements of its largest linear
  bool dge = false;
};

// One transformer block on CUDA (model.cpp BlockImpl::compute, with the fused ops). Saved per token:
//   the FP32 residual stream twice (the block's input, kept by the attention norm, and the
//   mid-block sum, kept by the MLP norm) and each norm's FP32 rstd;
//   q and k after RoPE and v (BF16; SDPA keeps them, K/V unrepeated, torch ≥ 2.5) and SDPA's
//   FP32 logsumexp per head; gate's and up's BF16 outputs (SwiGLU keeps both);
//   the Wgrad inputs (wgrad_input_bytes): the norms' outputs, SDPA's BF16 output (o's input,
//   which SDPA keeps too: counted once), SwiGLU's output.
// q's and k's outputs before RoPE and o's and down's outputs are freed at once (nothing saves
// them). The backward's working set: the residual's FP32 gradient in and out, SwiGLU's three
// BF16 gradients (d gate, d up, d of its output), the widest linear's dY copies, and one FP32 dW;
// under selective recompute (`selective`) the norms' outputs and SwiGLU's product are not saved,
// and the largest of them, made again with its quantized copies, joins the working set. A weight
// kept as a BF16 working copy (working_copies.h) is Dgrad's operand itself: no copy.
BlockMemory block_memory(const ModelShape& s, const std::vector<LinearPlan>& plans, size_t first,
                         bool selective, const std::vector<bool>& bf16_copies) {
  const int64_t d = s.d_model, kv = s.kv_dim(), f = s.ffn_hidden, heads = s.n_heads;
  const LinearPlan* q = &plans[first + 0];
  const LinearPlan* k = &plans[first + 1];
  const LinearPlan* v = &plans[first + 2];
  const LinearPlan* o = &plans[first + 3];
  const LinearPlan* gate = &plans[first + 4];
  const LinearPlan* up = &plans[first + 5];
  const LinearPlan* down = &plans[first + 6];
  BlockMemory m;
  m.saved_per_token = 2 * d * kF32 + 2 * kF32              // residual stream, two rstd
                      + (d + 2 * kv) * kBF16                 // q, k (after RoPE), v
                      + heads * kF32                         // SDPA's logsumexp
                      + 2 * f * kBF16                        // gate's and up's outputs
                      + wgrad_input_bytes({q, k, v}, d, false, selective) + wgrad_input_bytes({o}, d, true) +
                      wgrad_input_bytes({gate, up}, d, false, selective) +
                      wgrad_input_bytes({down}, f, false, selective);
  const std::array<std::pair<int64_t, int64_t>, 7> shapes{
      {{d, d}, {d, kv}, {d, kv}, {d, d}, {d, f}, {d, f}, {f, d}}};  // (in, out)
  int64_t widest_dy = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [in, out] = shapes[i];
    if (!bf16_copies[first + i]) m.weight_operands += in * out * kBF16;
    m.largest_weight = std::max(m.largest_weight, in * out);
    widest_dy = std::max(widest_dy, dy_copy_bytes(plans[first + i], out));
    m.dge = m.dge || plans[first + i].dge.has_value();
  }
  m.working_per_token = 2 * d * kF32 + 3 * f * kBF16 + widest_dy;
  if (selective)
    m.working_per_token += std::max({rebuilt_input_bytes({q, k, v}, d), rebuilt_input_bytes({gate, up}, d),
                                     rebuilt_input_bytes({down}, f)});
  return m;
}

struct ActivationMemory {
  int64_t activations = 0, weight_operands = 0, working = 0;
};

// The activation parts of one precision phase for every count k = 0 … n of recomputed blocks
// (blocks 0 … k-1 recompute, recompute_plan.h: they are the ones whose activations would live
// longest, from their forward to the end of the backward), in one pass over the blocks: the
// planner asks for all of them at once when it chooses `auto`'s count. With `selective`, the
// blocks kept (k … n-1) make their norm outputs and SwiGLU's product again (model.cpp: a block
// recomputed whole keeps nothing of them anyway).
std::vector<ActivationMemory> activation_memory_by_recompute(const RunConfig& c, const ModelShape& s,
                                                             const std::vector<LinearShape>& layers,
                                                             const std::vector<LinearPlan>& plans,
                                                             bool selective, const std::vector<bool>& bf16_copies) {
  const int64_t t = contract::micro_batch_tokens(c);
  const int64_t d = s.d_model;
  const auto n = static_cast<size_t>(s.n_layers);
  // Each block as it is when recomputed whole (plain) and when kept (selective or plain).
  std::vector<BlockMemory> whole, kept;
  whole.reserve(n);
  kept.reserve(n);
  const auto working_of = [t](const BlockMemory& m) {
    return t * m.working_per_token + (m.dge ? 2 : 1) * m.largest_weight * kF32;  // DGE: dW × factor
  };
  for (size_t b = 0; b < n; ++b) {
    whole.push_back(block_memory(s, plans, b * 7, false, bf16_copies));
    kept.push_back(selective ? block_memory(s, plans, b * 7, true, bf16_copies) : whole.back());
  }
  // After the blocks: the final norm keeps its FP32 input and rstd; its BF16 output is the LM
  // head's Wgrad input; the LM head (plain BF16) keeps a BF16 copy of its weight for Dgrad, unless that is its working copy.
  const int64_t vocab = layers.back().out_features;
  const int64_t tail = d * kF32 + kF32 + d * kBF16;
  const int64_t head_operand = bf16_copies.back() ? 0 : d * vocab * kBF16;
  // kept_*[k]: the saved tensors, operand copies and largest working set of blocks k … n-1
  // (suffix sums and maxima).
  std::vector<int64_t> kept_saved(n + 1, 0), kept_operands(n + 1, 0), kept_working(n + 1, 0);
  for (size_t b = n; b-- > 0;) {
    kept_saved[b] = kept_saved[b + 1] + kept[b].saved_per_token;
    kept_operands[b] = kept_operands[b + 1] + kept[b].weight_operands;
    kept_working[b] = std::max(kept_working[b + 1], working_of(kept[b]));
  }
  std::vector<ActivationMemory> out(n + 1);
  // Over blocks 0 … k-1, recomputed whole.
  int64_t largest_recomputed_saved = 0, largest_recomputed_operands = 0, largest_recomputed_working = 0;
  for (size_t k = 0; k <= n; ++k) {
    if (k > 0) {
      largest_recomputed_saved = std::max(largest_recomputed_saved, whole[k - 1].saved_per_token);
      largest_recomputed_operands = std::max(largest_recomputed_operands, whole[k - 1].weight_operands);
      largest_recomputed_working = std::max(largest_recomputed_working, working_of(whole[k - 1]));
    }
    // At the forward's end: the kept blocks' saved tensors and operand copies, and the FP32
    // input of each recomputing block (block_checkpoint.cpp: nothing else, no graph, no operand
    // copies). When the backward reaches recomputing block i, every kept block's tensors are
    // freed; block i holds its recomputed saved tensors (its input is the checkpoint's, not
    // counted twice) and its operand copies beside the checkpoints of the blocks before it. The
    // peak is the larger.
    const auto ki = static_cast<int64_t>(k);
    int64_t saved = kept_saved[k] + ki * d * kF32;
    int64_t operands = kept_operands[k];
    if (k > 0) {
      saved = std::max(saved, ki * d * kF32 + largest_recomputed_saved - d * kF32);
      operands = std::max(operands, largest_recomputed_operands);
    }
    out[k] = {t * (saved + tail), operands + head_operand, std::max(kept_working[k], largest_recomputed_working)};
  }
  return out;
}

int64_t shard_of(int64_t bytes, const RunConfig& c, ShardLevel from) {
  return c.parallel.shard >= from && c.parallel.data > 1 ? ceil_div(bytes, c.parallel.data) : bytes;
}

std::string join_fixes(const std::vector<MemoryFix>& fixes) {
  std::string out;
  for (size_t i = 0; i < fixes.size(); ++i) out += (i == 0 ? "" : ", or ") + fixes[i].text();
  return out;
}

constexpr const char* kNoFix =
    "no setting of parallel.shard, train.activation_checkpointing or train.micro_batch_tokens "
    "makes it fit: use a smaller model, or more ranks (parallel.data) with parallel.shard: "
    "gradients";

}  // namespace

int64_t MemoryPlan::total() const {
  return weights + gradients + optimizer + activations + weight_operands + working + logits +
         communication + workspace + fragmentation;
}

int64_t MemoryPlan::allocator_peak() const {
  return total() - workspace - communication - fragmentation;
}

MemoryPlan plan_memory(const RunConfig& c, const ModelShape& shape, int64_t vocab_size) {
  return plan_memory(c, shape, vocab_size,
                     plan_run_layers(c, linear_layers(shape, vocab_size), shape.n_layers));
}

std::vector<MemoryPlan> plan_memory_by_recompute(const RunConfig& c, const ModelShape& shape,
                                                 int64_t vocab_size, const RunLayerPlans& plans) {
  MemoryPlan m;
  const int64_t p = parameter_count(shape, vocab_size);
  m.parameters = p;
  m.tokens = contract::micro_batch_tokens(c);
  // The working copies the model reads, whole on every rank, and the float32 masters of those
  // kept in BF16, sharded (working_copies.h); a float32 working copy is its own master.
  const std::vector<bool> bf16_copies = bf16_working_copies(c, plans);
  int64_t bf16_elements = 0;
  for (size_t i = 0; i < plans.layers.size(); ++i)
    if (bf16_copies[i]) bf16_elements += plans.layers[i].in_features * plans.layers[i].out_features;
  m.weights = (p - bf16_elements) * kF32 + bf16_elements * kBF16 +
              shard_of(bf16_elements * kF32, c, ShardLevel::kOptimizer);
  m.gradients = shard_of(p * kF32, c, ShardLevel::kGradients);
  if (c.parallel.shard == ShardLevel::kGradients && c.parallel.data > 1)
    m.gradients += kShardedInFlightBytes;
  m.optimizer = shard_of(2 * p * kF32, c, ShardLevel::kOptimizer);
  // The LM head and the loss take loss_chunks.h's chunks: per chunk BF16 logits and the
  // cross-entropy's FP32 arithmetic over them (its softmax and gradient).
  m.logits_tokens = logits_chunk_tokens(m.tokens, vocab_size);
  m.logits = m.logits_tokens * vocab_size * (kBF16 + kF32);
  m.communication = c.parallel.data > 1 ? kNcclBufferBytes : 0;
  m.workspace = kCudaWorkspaceBytes;
  std::vector<MemoryPlan> out(static_cast<size_t>(shape.n_layers) + 1, m);
  // Activation sizes: the largest over the precision schedule's phases.
  for (const std::vector<LinearPlan>& phase : plans.phases) {
    const std::vector<ActivationMemory> by_k = activation_memory_by_recompute(
        c, shape, plans.layers, phase, selective_recompute(c.train.activation_checkpointing), bf16_copies);
    for (size_t k = 0; k < out.size(); ++k) {
      out[k].activations = std::max(out[k].activations, by_k[k].activations);
      out[k].weight_operands = std::max(out[k].weight_operands, by_k[k].weight_operands);
      out[k].working = std::max(out[k].working, by_k[k].working);
    }
  }
  for (MemoryPlan& plan : out)
    plan.fragmentation = (plan.activations + plan.weight_operands + plan.working + plan.logits) *
                         kFragmentationPercent / 100;
  return out;
}

MemoryPlan plan_memory(const RunConfig& c, const ModelShape& shape, int64_t vocab_size,
                       const RunLayerPlans& plans) {
  const std::vector<MemoryPlan> by_k = plan_memory_by_recompute(c, shape, vocab_size, plans);
  return by_k[static_cast<size_t>(recomputed_blocks(c.train.activation_checkpointing, shape.n_layers))];
}

MemoryPlan plan_memory(const RunConfig& c, int64_t vocab_size) {
  return plan_memory(c, model_shape(c.model), vocab_size);
}

std::string MemoryFix::text() const {
  std::string out;
  for (size_t i = 0; i < settings.size(); ++i)
    out += (i == 0 ? "" : " and ") + settings[i].first + ": " + settings[i].second;
  return out + " (predicted " + format_bytes(predicted) + " per rank)";
}

std::vector<MemoryFix> memory_fixes(const RunConfig& c, const ModelShape& shape, int64_t vocab_size,
                                    int64_t capacity) {
  // A config's plan with `auto` resolved at this capacity.
  const auto predicted = [&](const RunConfig& cfg) {
    const RunLayerPlans plans = plan_run_layers(cfg, linear_layers(shape, vocab_size), shape.n_layers);
    return plan_memory(resolve_recompute(cfg, shape, vocab_size, plans, capacity), shape, vocab_size,
                       plans).total();
  };
  // The largest valid micro-batch below the current one whose plan fits, if any: a multiple of
  // the sequence that divides the step, into a number of micro-batches the ranks divide, and
  // accepted by the contract and the numerics' block sizes (run_fit.h).
  const auto smaller_micro_batch = [&](RunConfig cfg) -> std::optional<RunConfig> {
    const int64_t seq = cfg.data.seq_len, global = cfg.train.global_batch_tokens;
    for (int64_t t = (contract::micro_batch_tokens(cfg) / seq - 1) * seq; t >= seq; t -= seq) {
      if (global % t != 0 || (global / t) % cfg.parallel.data != 0) continue;
      cfg.train.micro_batch_tokens = t;
      if (predicted(cfg) > capacity) continue;
      try {
        contract::run_config_from_json(contract::to_json(cfg));
        check_run_fits(cfg, shape, vocab_size);
      } catch (const contract::ConfigError&) {
        continue;
      }
      return cfg;
    }
    return std::nullopt;
  };
  std::vector<ShardLevel> shards{c.parallel.shard};
  if (c.parallel.data > 1)
    for (ShardLevel l : {ShardLevel::kOptimizer, ShardLevel::kGradients})
      if (l > c.parallel.shard) shards.push_back(l);
  // Recompute: the setting as it is, and `auto` where the setting leaves blocks unrecomputed
  // (the fewest recomputed blocks that fit; recompute_plan.h).
  using contract::Recompute;
  std::vector<Recompute> recomputes{c.train.activation_checkpointing};
  if (recomputed_blocks(c.train.activation_checkpointing, shape.n_layers) < shape.n_layers)
    recomputes.push_back({Recompute::Mode::kAuto, 0});

  struct Candidate {
    MemoryFix fix;
    int rank;  // preference among fixes of as many settings: lower first
  };
  std::vector<Candidate> found;
  for (const Recompute& recompute : recomputes) {
    const bool changed = !(recompute == c.train.activation_checkpointing);
    for (int with_micro = 0; with_micro <= 1; ++with_micro) {
      for (size_t si = 0; si < shards.size(); ++si) {
        RunConfig cfg = c;
        cfg.parallel.shard = shards[si];
        cfg.train.activation_checkpointing = recompute;
        if (with_micro) {
          const std::optional<RunConfig> smaller = smaller_micro_batch(cfg);
          if (!smaller) continue;
          cfg = *smaller;
        } else if (predicted(cfg) > capacity) {
          continue;
        }
        MemoryFix fix;
        if (si > 0) fix.settings.push_back({"parallel.shard", std::string(contract::to_string(shards[si]))});
        if (with_micro)
          fix.settings.push_back({"train.micro_batch_tokens", std::to_string(cfg.train.micro_batch_tokens)});
        if (changed) fix.settings.push_back({"train.activation_checkpointing", contract::to_string(recompute)});
        fix.predicted = predicted(cfg);
        if (!fix.settings.empty()) found.push_back({fix, (changed ? 4 : 0) + 2 * with_micro});
        break;  // a higher shard level with the same other settings fits too: not worth naming
      }
    }
  }
  if (found.empty()) return {};
  size_t fewest = found.front().fix.settings.size();
  for (const Candidate& f : found) fewest = std::min(fewest, f.fix.settings.size());
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.rank < b.rank;
  });
  std::vector<MemoryFix> out;
  for (const Candidate& f : found)
    if (f.fix.settings.size() == fewest) out.push_back(f.fix);
  return out;
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / kGiB);
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / kMiB);
}

std::string describe_parts(const MemoryPlan& m) {
  std::string out;
  for (const auto& [name, bytes] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"weights", m.weights},
           {"gradients", m.gradients},
           {"optimizer", m.optimizer},
           {"activations", m.activations},
           {"weight operands", m.weight_operands},
           {"working", m.working},
           {"logits", m.logits},
           {"communication", m.communication},
           {"workspace", m.workspace},
           {"fragmentation", m.fragmentation}}) {
    if (bytes == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + format_bytes(bytes);
  }
  return out;
}

std::string memory_refusal(const RunConfig& c, const ModelShape& shape, int64_t vocab_size,
                           int64_t capacity, std::string_view where_capacity, std::string* key) {
  const MemoryPlan plan = plan_memory(c, shape, vocab_size);
  const std::vector<MemoryFix> fixes = memory_fixes(c, shape, vocab_size, capacity);
  if (key) *key = fixes.empty() ? std::string(contract::kModelKey) : fixes.front().settings.front().first;
  return fmt::format("predicted {} of GPU memory per rank ({}), more than the {} of {}; {}",
                     format_bytes(plan.total()), describe_parts(plan), format_bytes(capacity),
                     where_capacity, fixes.empty() ? kNoFix : "set " + join_fixes(fixes));
}

OutOfMemoryMessage parse_out_of_memory(std::string_view message) {
  static const std::string size = R"(([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB))";
  static const std::regex tried("Tried to allocate " + size);
  static const std::regex capacity_after("total capacity of " + size);
  static const std::regex capacity_before(size + " total capacity");
  const auto bytes = [](const std::smatch& m) -> std::optional<int64_t> {
    const double v = std::strtod(m[1].str().c_str(), nullptr);
    const std::string unit = m[2].str();
    const double scale = unit == "KiB" ? 1024.0
                         : unit == "MiB" ? static_cast<double>(kMiB)
                         : unit == "GiB" ? static_cast<double>(kGiB)
                         : unit == "TiB" ? 1024.0 * static_cast<double>(kGiB)
                                         : 1.0;
    const double b = v * scale;
    if (!std::isfinite(b) || b < 0 || b > 9e18) return std::nullopt;
    return static_cast<int64_t>(std::llround(b));
  };
  const std::string text(message);
  OutOfMemoryMessage out;
  std::smatch m;
  if (std::regex_search(text, m, tried)) out.tried = bytes(m);
  if (std::regex_search(text, m, capacity_after) || std::regex_search(text, m, capacity_before))
    out.capacity = bytes(m);
  return out;
}

std::string out_of_memory_line(std::string_view message, const RunConfig* config,
                               int64_t vocab_size) {
  const OutOfMemoryMessage oom = parse_out_of_memory(message);
  std::string line = "out of GPU memory";
  if (oom.tried) line += ": tried to allocate " + format_bytes(*oom.tried);
  if (oom.capacity) line += " on a GPU of " + format_bytes(*oom.capacity);
  if (!config || vocab_size <= 0)
    return line + "; no prediction (the run was not set up yet): see `mxablate plan` for the "
                  "predicted memory per rank";
  const ModelShape shape = model_shape(config->model);
  const MemoryPlan plan = plan_memory(*config, shape, vocab_size);
  line += fmt::format("; predicted {} per rank ({})", format_bytes(plan.total()), describe_parts(plan));
  // The run needed at least the failed allocation more than it had: a fix must save that much
  // against the prediction, and fit the GPU when its size is known.
  int64_t target = plan.total() - oom.tried.value_or(kGiB);
  if (oom.capacity) target = std::min(target, *oom.capacity);
  const std::vector<MemoryFix> fixes = memory_fixes(*config, shape, vocab_size, target);
  return line + "; " + (fixes.empty() ? std::string(kNoFix) : "set " + join_fixes(fixes));
}

}  // namespace mxablate::trainer
