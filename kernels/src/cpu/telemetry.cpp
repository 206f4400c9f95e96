#include "mxablate/kernels/quantize.h"

#include <cmath>

namespace mxablate::kernels {

double QuantTelemetry::relative_error() const {
  return sum_sq_input > 0 ? std::sqrt(sum_sq_error / sum_sq_input) : 0.0;
}

double QuantTelemetry::fraction_saturated() const {
  return elements > 0 ? static_cast<double>(saturated) / static_cast<double>(elements) : 0.0;
}

double QuantTelemetry::fraction_flushed() const {
  return nonzero_inputs > 0 ? static_cast<double>(flushed) / static_cast<double>(nonzero_inputs)
                            : 0.0;
}

double QuantTelemetry::mean_error() const {
  return elements > 0 ? sum_error / static_cast<double>(elements) : 0.0;
}

void QuantTelemetry::merge(const QuantTelemetry& o) {
  elements += o.elements;
  nonzero_inputs += o.nonzero_inputs;
  saturated += o.saturated;
  flushed += o.flushed;
  nonfinite_blocks += o.nonfinite_blocks;
  dequant_clamped += o.dequant_clamped;
  sum_sq_error += o.sum_sq_error;
  sum_sq_input += o.sum_sq_input;
  sum_error += o.sum_error;
}

}  // namespace mxablate::kernels
