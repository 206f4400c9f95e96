#include "mxablate/orchestrator/model_fit.h"

#include "mxablate/trainer/model_presets.h"
#include "mxablate/trainer/run_fit.h"

namespace mxablate::orchestrator {

void check_model_fit(const contract::RunConfig& c) {
  trainer::check_run_fits(c, trainer::runnable_model_shape(c), 0);
}

}  // namespace mxablate::orchestrator
