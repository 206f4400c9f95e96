// Comparing two runs of one training whose float sums may differ in order (data-parallel ranks,
// sharded steps, a resume on another number of ranks), so that no comparison depends on the
// BLAS kernels or the CPU (docs/design.md §4, "Comparing runs that sum in another order").
//
// Why not a tolerance over a whole run: in an MXFP4 run with stochastic rounding, a last-bit
// difference in a weight moves some element across a rounding boundary sooner or later; from
// there the two runs follow two different sequences of quantization codes, and how far apart
// they are after N steps depends on which codes flipped when, which depends on every rounding of
// every kernel. Measured on one machine, two such runs stayed equal for 6 steps and then
// differed by 5e-5 at step 10 under OpenBLAS's Haswell kernels, by 1e-8 under its Sandybridge
// kernels: no bound on a whole curve is derivable. So a comparison either arranges that the
// runs compute the same sums (then they agree bit for bit on any machine), or it stops one
// update after the first step whose sums differ, before any code can have flipped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "catch.h"
#include "run_test_support.h"

namespace mxablate::test {

// Two global gradient norms over the same float32 gradients, or over gradients whose elements
// are the same few micro-batch terms summed in another order. The norms group the squares
// differently (per parameter in LibTorch's clip_grad_norm_, per rank's piece of a bucket in the
// sharded step, a different lane of ATen's vectorized float32 accumulators), and each float32
// addition rounds by at most u = 2^-24 of its partial sum, in either direction: over the smoke
// model's 131,392 squares they add up to about sqrt(n)·u = 2.2e-5 of the sum of squares, half
// that of the norm. Regrouping M = 4 micro-batch terms adds at most (M-1)·u = 1.8e-7. Measured:
// 8e-8 at most.
inline constexpr double kNormRegrouping = 1e-5;

// The loss one update after the runs' gradients (or clip factors) last differed by rounding
// only: AdamW's update m/(sqrt(v)+eps) changes by at most the gradients' relative difference
// (kNormRegrouping bounds it, through the clip factor), the weights by lr (<= 3e-3) times that,
// and the loss by that times the gradient's L1 norm (<= sqrt(n)·|g| ~ 700): 2e-5 absolute, 4e-6
// relative at a loss of 5. No stochastic rounding has yet seen different inputs (the step's
// backward ran on equal weights), and a round-to-nearest code flips only for an operand within
// 1e-8 of a boundary. A clip factor left out moves this loss by 6e-5 (measured), so the bound
// still sees that.
inline constexpr double kOneUpdateApart = 1e-5;

// The runs compute the same sums at every step (the same weights throughout): equal losses and
// evaluations, bit for bit; the reported norms within kNormRegrouping.
inline void check_same_steps(const Trajectory& a, const Trajectory& b) {
  REQUIRE(a.loss.size() == b.loss.size());
  REQUIRE(!a.loss.empty());
  for (size_t i = 0; i < a.loss.size(); ++i) {
    INFO("step " << i + 1 << ": loss " << a.loss[i] << " vs " << b.loss[i] << ", grad norm " << a.grad_norm[i]
                 << " vs " << b.grad_norm[i]);
    CHECK(a.loss[i] == b.loss[i]);
    CHECK(within(a.grad_norm[i], b.grad_norm[i], kNormRegrouping));
  }
  CHECK(a.evals == b.evals);
}

// The runs hold the same weights up to step `first` (1-based), whose update is the first to
// differ, by rounding only (its sums taken in another order, or clipped by a norm so taken).
// Compared: every loss up to `first`'s (computed from equal weights: bit for bit), the norms up
// to `first`'s (kNormRegrouping), the next step's loss (kOneUpdateApart), and the evaluations
// of the weights before `first`'s update (bit for bit). Nothing later: see the top of the file.
inline void check_one_update_apart(const Trajectory& a, const Trajectory& b, size_t first) {
  REQUIRE(first >= 1);
  REQUIRE(a.loss.size() > first);
  REQUIRE(b.loss.size() > first);
  for (size_t i = 0; i < first; ++i) {
    INFO("step " << i + 1 << ": loss " << a.loss[i] << " vs " << b.loss[i] << ", grad norm " << a.grad_norm[i]
                 << " vs " << b.grad_norm[i]);
    CHECK(a.loss[i] == b.loss[i]);
    CHECK(within(a.grad_norm[i], b.grad_norm[i], kNormRegrouping));
  }
  INFO("step " << first + 1 << ": loss " << a.loss[first] << " vs " << b.loss[first]);
  CHECK(within(a.loss[first], b.loss[first], kOneUpdateApart));
  // Evaluations of the weights before step `first`'s update: at most the tokens after step first - 1.
  const int64_t settled = first >= 2 ? a.tokens[first - 2] : 0;
  REQUIRE(b.tokens == a.tokens);
  size_t compared = 0;
  for (size_t i = 0; i < a.evals.size() && i < b.evals.size() && a.evals[i].first <= settled; ++i, ++compared) {
    INFO("evaluation at " << a.evals[i].first << " tokens");
    CHECK(a.evals[i] == b.evals[i]);
  }
  CHECK(compared >= 1);  // at least the evaluation before the first step
}

}  // namespace mxablate::test
