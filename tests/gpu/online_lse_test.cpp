// The fused cross-entropy's running logsumexp (kernels/gpu/online_lse.h) on the host, folded and
// merged exactly as cross_entropy_forward_kernel does (256 threads with strided elements, warp
// butterflies of 32 or 64 lanes, then warps in order): against a long double reference, with
// -inf, NaN, huge and tiny logits, and the butterfly's claim that every lane ends with the same
// pair.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.h"
#include "online_lse.h"

using mxablate::kernels::gpu::OnlineLse;

namespace {

constexpr int kThreads = 256;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The kernel's reduction of one row; `lanes_agree` is false if a butterfly left two lanes of a
// warp with different non-NaN values.
float kernel_lse(const std::vector<float>& row, int warp, bool* lanes_agree) {
  std::vector<OnlineLse> t(kThreads);
  for (int i = 0; i < kThreads; ++i)
    for (size_t j = static_cast<size_t>(i); j < row.size(); j += kThreads) t[static_cast<size_t>(i)].add(row[j]);
  for (int offset = warp / 2; offset > 0; offset >>= 1) {
    std::vector<OnlineLse> next = t;
    for (int i = 0; i < kThreads; ++i) {
      const int partner = (i / warp) * warp + ((i % warp) ^ offset);
      next[static_cast<size_t>(i)].merge(t[static_cast<size_t>(partner)].m, t[static_cast<size_t>(partner)].s);
    }
    t = next;
  }
  *lanes_agree = true;
  for (int i = 0; i < kThreads; ++i) {
    const OnlineLse& a = t[static_cast<size_t>(i)];
    const OnlineLse& lead = t[static_cast<size_t>((i / warp) * warp)];
    const bool nan = std::isnan(a.value()) && std::isnan(lead.value());
    if (!nan && !(same_bits(a.m, lead.m) && same_bits(a.s, lead.s))) *lanes_agree = false;
  }
  OnlineLse total;
  for (int w = 0; w < kThreads / warp; ++w) total.merge(t[static_cast<size_t>(w * warp)].m, t[static_cast<size_t>(w * warp)].s);
  return total.value();
}

long double reference_lse(const std::vector<float>& row) {
  long double m = -std::numeric_limits<long double>::infinity();
  for (float v : row) m = std::max<long double>(m, v);
  if (std::isinf(m) && m < 0) return m;
  long double s = 0;
  for (float v : row) s += std::exp(static_cast<long double>(v) - m);
  return m + std::log(s);
}

std::vector<float> random_row(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> row(n);
  for (float& v : row) v = normal(gen);
  return row;
}

}  // namespace

TEST_CASE("The running logsumexp, reduced like the kernel, equals logsumexp", "[gpu-model][fused]") {
  for (int warp : {32, 64}) {
    for (size_t vocab : {size_t{1}, size_t{7}, size_t{255}, size_t{1000}, size_t{4096}, size_t{50257}}) {
      for (float scale : {1e-30f, 1.0f, 30.0f, 1e4f}) {
        INFO("warp " << warp << " vocab " << vocab << " scale " << scale);
        const std::vector<float> row = random_row(vocab, static_cast<uint32_t>(vocab) + 3u, scale);
        bool agree = false;
        const float got = kernel_lse(row, warp, &agree);
        const long double want = reference_lse(row);
        CHECK(agree);
        // float32 exp/log and sums of up to ~200 terms per thread: a few 1e-7 of the sum, and
        // the max itself is exact.
        CHECK(std::fabs(static_cast<long double>(got) - want) <= 1e-5L * std::max<long double>(1, std::fabs(want)));
      }
    }
  }
}

TEST_CASE("The running logsumexp handles -inf and NaN wherever they fall", "[gpu-model][fused]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int warp : {32, 64}) {
    bool agree = false;
    // All -inf: -inf, not NaN.
    CHECK(kernel_lse(std::vector<float>(1000, -inf), warp, &agree) == -inf);
    // -inf entries drop out.
    std::vector<float> row = random_row(1000, 5, 2.0f);
    std::vector<float> finite;
    for (size_t j = 0; j < row.size(); ++j) {
      if (j % 3 == 0) row[j] = -inf;
      else finite.push_back(row[j]);
    }
    const float got = kernel_lse(row, warp, &agree);
    CHECK(agree);
    CHECK(std::fabs(static_cast<long double>(got) - reference_lse(finite)) <= 1e-5L * std::max<long double>(1, std::fabs(reference_lse(finite))));
    // A NaN anywhere, whatever its thread saw besides (only -inf, only NaN, finite values), makes
    // the row NaN.
    for (size_t at : {size_t{0}, size_t{3}, size_t{256}, size_t{999}}) {
      INFO("NaN at " << at << ", warp " << warp);
      std::vector<float> with_nan = row;
      with_nan[at] = nan;
      CHECK(std::isnan(kernel_lse(with_nan, warp, &agree)));
      std::vector<float> nan_among_inf(1000, -inf);
      nan_among_inf[500] = 1.0f;
      nan_among_inf[at] = nan;
      CHECK(std::isnan(kernel_lse(nan_among_inf, warp, &agree)));
    }
  }
}

TEST_CASE("Merging running pairs commutes bit for bit", "[gpu-model][fused]") {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 10000; ++i) {
    OnlineLse a, b;
    const int na = i % 5, nb = (i / 5) % 5;  // zero elements leave the pair at (-inf, 0)
    for (int k = 0; k < na; ++k) a.add(normal(gen));
    for (int k = 0; k < nb; ++k) b.add(normal(gen));
    OnlineLse ab = a, ba = b;
    ab.merge(b.m, b.s);
    ba.merge(a.m, a.s);
    CHECK((same_bits(ab.m, ba.m) && same_bits(ab.s, ba.s)));
  }
}
