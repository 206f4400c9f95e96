// What the contract says of a config JSON: the ConfigError message, or "no error".
#pragma once

#include <string>

#include "mxablate/contract/run_config.h"

namespace mxablate::test {

inline std::string error_of(const nlohmann::json& j) {
  try {
    contract::run_config_from_json(j);
  } catch (const contract::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// A valid config: the defaults.
inline nlohmann::json valid() { return contract::to_json(contract::RunConfig{}); }

}  // namespace mxablate::test
