// element_scales: the quantizer's scale outputs (codes per block, the NVFP4 global scale),
// decoded and spread over the elements with tensor ops on the tensor's device.
#include "mxablate/kernels/torch/block_scales.h"

#include <ATen/ATen.h>

#include <array>
#include <stdexcept>
#include <string>

#include "mxablate/kernels/block_scaling.h"
#include "tensor_checks.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "gpu_ops.h"
#endif

namespace mxablate::kernels {
namespace {

// Scale code -> decoded scale, for all 256 byte values of the format's scale code.
at::Tensor scale_table(QuantFormat format, const at::Device& device) {
  std::array<float, 256> table{};
  for (uint32_t c = 0; c < 256; ++c) {
    if (format == QuantFormat::kMXFP4) {
      table[c] = c == kE8M0NaN ? quiet_nan() : pow2f(static_cast<int>(c) - kE8M0Bias);
    } else {
      table[c] = c == kE4M3NaNCode ? quiet_nan() : nvfp4_block_scale(static_cast<uint8_t>(c));
    }
  }
  return at::from_blob(table.data(), {256}, at::kFloat).clone().to(device);
}

struct ScaleCodes {
  at::Tensor codes;   // (lines, length / block) uint8, line by line (quantize.h layout)
  float global = 1;   // NVFP4's tensor scale
};

ScaleCodes scale_codes_cpu(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key) {
  const at::Tensor in = x.to(at::kFloat).contiguous();
  const int64_t lines = axis == Axis::kRows ? in.size(0) : in.size(1);
  const int64_t length = axis == Axis::kRows ? in.size(1) : in.size(0);
  ScaleCodes r;
  r.codes = at::empty({lines, length / block_size(spec.format)}, in.options().dtype(at::kByte));
  QuantOutputs out;
  out.scales = r.codes.data_ptr<uint8_t>();
  if (spec.format == QuantFormat::kNVFP4) out.tensor_scale = &r.global;
  quantize(in.data_ptr<float>(), in.size(0), in.size(1), axis, spec, key, out);
  return r;
}

}  // namespace

at::Tensor element_scales(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key) {
  if (!is_fp4(spec.format))
    throw std::invalid_argument("element_scales: block scales of mxfp4 or nvfp4 only, got " +
                                std::string(to_string(spec.format)));
  detail::check_quantizable(x, axis, spec, "element_scales input");
  at::Tensor codes;
  at::Tensor global;  // a one-element float tensor on x's device (NVFP4), or undefined
  if (x.is_cuda()) {
#if MXABLATE_KERNELS_TORCH_CUDA
    detail::ScaleCodesGpu g = detail::scale_codes_gpu(x, axis, spec, key);
    codes = g.codes;
    if (spec.format == QuantFormat::kNVFP4) global = g.tensor_scale;
#else
    throw std::invalid_argument("tensor on " + x.device().str() +
                                " but this build of mxablate_kernels_torch has no GPU kernels");
#endif
  } else if (x.is_cpu()) {
    ScaleCodes c = scale_codes_cpu(x, axis, spec, key);
    codes = c.codes;
    if (spec.format == QuantFormat::kNVFP4) global = at::full({1}, c.global, x.options().dtype(at::kFloat));
  } else {
    throw std::invalid_argument("element_scales: tensors on " + x.device().str() + " are not supported");
  }
  const int block = block_size(spec.format);
  at::Tensor per_block = scale_table(spec.format, x.device()).index_select(0, codes.flatten().to(at::kLong));
  per_block = per_block.view(codes.sizes());
  // A NaN scale stays the one quiet NaN the table holds: CUDA's multiply would return its own
  // canonical NaN, CPU's the operand's, and the two must agree bit for bit.
  if (global.defined())
    per_block = at::where(per_block.isnan() | global.isnan(), per_block.new_full({}, quiet_nan()),
                          per_block * global);
  // (lines, blocks) -> (lines, length): each block's scale repeated over its elements.
  const int64_t lines = codes.size(0);
  at::Tensor per_element =
      per_block.unsqueeze(-1).expand({lines, codes.size(1), block}).reshape({lines, codes.size(1) * block});
  return axis == Axis::kRows ? per_element : per_element.t().contiguous();
}

}  // namespace mxablate::kernels
