// The run config's ranges (internal to trainer/contract): what run_config_from_json checks once
// every key is read. The one definition of the ranges the trainer and the planner share
// (docs/design.md §2, "The contract between orchestrator and trainer"; §11).
#pragma once

#include "mxablate/contract/run_config.h"

namespace mxablate::contract::detail {

// Throws ConfigError naming the key and the value of the first range a config breaks.
void validate(const RunConfig& c);

}  // namespace mxablate::contract::detail
