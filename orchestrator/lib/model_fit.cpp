#include "mxablate/orchestrator/model_fit.h"

#include <fmt/format.h>

#include "mxablate/trainer/model_presets.h"
#include "mxablate/trainer/run_fit.h"

namespace mxablate::orchestrator {

using contract::ConfigError;

void check_model_fit(const contract::RunConfig& c) {
  const auto shape = trainer::find_model_preset(c.model);
  if (!shape)
    throw ConfigError(fmt::format("model: expected one of {}, got \"{}\"",
                                  trainer::model_preset_names(), c.model));
  if (shape->shape_check_only)
    throw ConfigError(fmt::format("model: \"{}\" is for shape checks only ({})", c.model,
                                  shape->note));
  trainer::check_run_fits(c, *shape, 0);
}

}  // namespace mxablate::orchestrator
