#include "tensor_lines.h"

#include "parallel.h"

namespace mxablate::kernels::detail {

std::vector<float> rotated_lines(const float* x, const TensorLines& lines, const QuantSpec& spec,
                                 const HadamardSigns& signs) {
  std::vector<float> out(static_cast<size_t>(lines.count * lines.length));
  parallel_for_line_groups(lines.count, lines.length, [&](int64_t, int64_t first, int64_t last) {
    for (int64_t line = first; line < last; ++line) {
      float* dst = out.data() + line * lines.length;
      for (int64_t j = 0; j < lines.length; ++j) dst[j] = x[lines.logical_index(line, j)];
      if (spec.hadamard == HadamardMode::kNone) continue;
      for (int64_t c = 0; c < lines.length; c += spec.hadamard_size)
        hadamard_rotate_chunk(dst + c, spec.hadamard_size, signs);
    }
  });
  return out;
}

}  // namespace mxablate::kernels::detail
