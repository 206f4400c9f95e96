// The running logsumexp of the fused cross-entropy (fused_cross_entropy.cu), host/device so that
// tests/gpu/online_lse_test.cpp checks it on the CPU: each thread folds its elements in, then
// threads merge pairwise (warp butterflies, then warps in order).
#pragma once

#include <math.h>

#include "mxablate/kernels/portability.h"

namespace mxablate::kernels::gpu {

// A running (max, sum of exp(v - max)) pair; logsumexp = m + log(s). -inf contributes nothing
// (an all -inf row gives -inf). A NaN poisons the pair (m and s NaN) and stays: a row holding a
// NaN logit gets a NaN logsumexp whichever thread saw it, so divergence is never hidden.
struct OnlineLse {
  float m = -INFINITY;
  float s = 0.0f;

  MX_HD void add(float v) {
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else if (v != v) {
      m = v;
      s = v;
    } else if (!(v == -INFINITY)) {
      s += expf(v - m);  // NaN once m is NaN
    }
  }

  // Commutative for non-NaN pairs: merging (m2, s2) into (m, s) gives the same bits as the
  // reverse, so both lanes of a butterfly exchange hold the same pair afterwards (with a NaN, both
  // hold NaN).
  MX_HD void merge(float m2, float s2) {
    if (m2 > m) {
      s = s * expf(m - m2) + s2;
      m = m2;
    } else if (m2 != m2) {
      m = m2;
      s = m2;
    } else if (!(m2 == -INFINITY)) {
      s += s2 * expf(m2 - m);
    }
  }

  MX_HD float value() const { return m + logf(s); }
};

}  // namespace mxablate::kernels::gpu
