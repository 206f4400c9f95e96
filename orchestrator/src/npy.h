// NumPy .npy files (format versions 1.0-3.0): the exchange format for `mxablate quant`, so a
// researcher can dump an activation or gradient from any framework and inspect it.
// Only what we need: reading 2-D C-order float32/float16, writing 2-D float32/uint8.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxablate::npy {

// A malformed or unsupported file. The message names the file and what is wrong with it.
struct NpyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::string dtype;        // as stored: "float32" or "float16"
  std::vector<float> data;  // row-major, converted to float32 (float16 converts exactly)
};

Matrix read_matrix(const std::string& path);

void write_matrix(const std::string& path, const float* data, int64_t rows, int64_t cols);
void write_matrix(const std::string& path, const uint8_t* data, int64_t rows, int64_t cols);

// IEEE binary16 bits to float (exact, subnormals and NaN/Inf included).
float half_to_float(uint16_t h);

}  // namespace mxablate::npy
