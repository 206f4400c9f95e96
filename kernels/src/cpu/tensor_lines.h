// How the CPU reference walks a row-major tensor along its quantization axis.
#pragma once

#include <cstdint>
#include <vector>

#include "mxablate/kernels/quant_spec.h"

namespace mxablate::kernels::detail {

// Line `line` is row `line` (Axis::kRows) or column `line` (Axis::kCols); `j` runs along it.
struct TensorLines {
  int64_t rows, cols;
  Axis axis;
  int64_t count;   // number of lines
  int64_t length;  // elements per line

  TensorLines(int64_t r, int64_t c, Axis a)
      : rows(r), cols(c), axis(a), count(a == Axis::kRows ? r : c), length(a == Axis::kRows ? c : r) {}

  // Row-major index of element j of a line: the element's logical index.
  int64_t logical_index(int64_t line, int64_t j) const {
    return axis == Axis::kRows ? line * cols + j : j * cols + line;
  }
};

// The input gathered line by line (count x length, line-major), each Hadamard chunk rotated.
std::vector<float> rotated_lines(const float* x, const TensorLines& lines, const QuantSpec& spec,
                                 const HadamardSigns& signs);

}  // namespace mxablate::kernels::detail
