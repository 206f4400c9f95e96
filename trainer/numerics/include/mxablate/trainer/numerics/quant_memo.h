// A per-step memo of deterministic operand quantizations (docs/design.md §4).
//
// q, k and v (and gate and up) consume the same normalized input x. Where their specs for an
// operand are equal and the result does not depend on the random key (round to nearest, no
// random Hadamard signs: those are keyed by layer and step), Q(x) along an axis is the same
// tensor for every consumer, so the first consumer computes it and the others reuse it: Fprop's
// Q(X) along rows and Wgrad's Q(X) down columns, in whatever form the consumers' GEMM engine
// multiplies (dequantized values, or FP8 codes and their decode scale: the FP8 baseline's cast
// of X is shared alike). The memo holds the results for one input tensor
// at a time (the consumers run one after another) and forgets them when another input, another
// version of the input, or another step arrives. A memo made for more inputs keeps the latest
// `inputs` of them (the made-ahead memo: a fused producer makes dg and du before either consumer
// runs).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/gemm_engine.h"

namespace mxablate::trainer {

class QuantMemo {
 public:
  QuantMemo() = default;
  // `one_key`: every result stored is for one (layer, GEMM, operand) within a step, as a layer's
  // own weight is (MXLinear's weight memo): its random key is then the same for every lookup, so
  // results of any spec may be reused, stochastic rounding and random rotations included.
  // `inputs`: how many input tensors' results are kept at once (the oldest is forgotten first).
  explicit QuantMemo(bool one_key, int inputs = 1) : one_key_(one_key), capacity_(inputs < 1 ? 1 : inputs) {}

  struct Result {
    // Q(x) as a GEMM operand in its engine's form (its spec and key those of the consumer
    // that made it; a reuser puts its own in).
    kernels::QuantizedOperand operand;
    // The quantization's statistics when they were collected; a consumer that wants them and
    // finds none computes its own.
    std::optional<kernels::QuantTelemetry> telemetry;
  };

  // True when Q(x) under `spec` is a function of x alone (no stochastic rounding, no random
  // Hadamard signs): only then may two layers share it.
  static bool memoizable(const kernels::QuantSpec& spec);
  // Whether this memo reuses results of `spec`: memoizable ones, or any under `one_key`.
  bool reuses(const kernels::QuantSpec& spec) const { return one_key_ || memoizable(spec); }

  // `epoch` is what the results are valid for: the step for the shared-input memo; the step and
  // the session's weight generation for a weight memo (QuantSession::weight_epoch).
  // The result stored in `epoch` for this very tensor (the same storage, offset, sizes,
  // strides, dtype and version counter), `axis`, `spec`, operand form and `dtype`, carrying
  // telemetry when `need_telemetry`; nullopt otherwise (also for a spec that is not memoizable).
  std::optional<Result> find(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                             const kernels::QuantSpec& spec, kernels::QuantizedOperand::Form form,
                             at::ScalarType dtype, bool need_telemetry);
  // find, and the result is forgotten: for results made for one consumer (the made-ahead memo),
  // so that none is kept once used. An input with nothing left is let go.
  std::optional<Result> take(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                             const kernels::QuantSpec& spec, kernels::QuantizedOperand::Form form,
                             at::ScalarType dtype, bool need_telemetry);
  // Remembers `result` under `form`, the form its engine multiplies (GemmEngine::form()), which
  // is what find asks for: an engine that hands back another form for some tensors (mxfp4-as-fp8:
  // values where E4M3 cannot hold them) finds them under its own. A spec that is not memoizable
  // is ignored. A new epoch first forgets everything stored before; a new input or version, the
  // oldest input's results when `inputs` are held already.
  void store(uint64_t epoch, const at::Tensor& x, kernels::Axis axis, const kernels::QuantSpec& spec,
             kernels::QuantizedOperand::Form form, at::ScalarType dtype, Result result);
  void clear();
  // Results reused so far (tests and diagnostics).
  int64_t hits() const;

  bool enabled = true;

 private:
  struct Entry {
    kernels::Axis axis;
    kernels::QuantSpec spec;
    kernels::QuantizedOperand::Form form;
    at::ScalarType dtype;
    Result result;
  };
  // One input's results: the input, held so that its storage cannot be freed and its address
  // reused by another tensor while the entries exist, and its version when they were made.
  struct Slot {
    at::Tensor input;
    int64_t version = 0;
    std::vector<Entry> entries;
  };
  // With mutex_ held: x's slot in `epoch`, or null.
  Slot* slot_of(uint64_t epoch, const at::Tensor& x);
  std::optional<Result> lookup(uint64_t epoch, const at::Tensor& x, kernels::Axis axis,
                               const kernels::QuantSpec& spec, kernels::QuantizedOperand::Form form,
                               at::ScalarType dtype, bool need_telemetry, bool erase);
  void clear_locked();

  bool one_key_ = false;
  size_t capacity_ = 1;
  mutable std::mutex mutex_;  // backward (activation checkpointing's recompute) may run elsewhere
  uint64_t epoch_ = 0;
  std::vector<Slot> slots_;  // oldest first
  int64_t hits_ = 0;
};

}  // namespace mxablate::trainer
