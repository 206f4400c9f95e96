// Perplexity is exp(validation loss). A target given as a perplexity is kept as the loss it
// stands for, so the trainer, the store and every table compare against one number; the tables,
// captions and the plan show perplexities through perplexity_of.
#pragma once

#include <cmath>
#include <optional>

namespace mxablate::contract {

inline double loss_of_perplexity(double perplexity) { return std::log(perplexity); }

// exp(loss), or nothing where the loss is missing or not finite or its perplexity overflows.
inline std::optional<double> perplexity_of(std::optional<double> loss) {
  if (!loss || !std::isfinite(*loss)) return std::nullopt;
  const double p = std::exp(*loss);
  if (!std::isfinite(p)) return std::nullopt;
  return p;
}

}  // namespace mxablate::contract
