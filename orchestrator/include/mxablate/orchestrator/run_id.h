// run_id: a stable hash of a fully resolved run config. Stable because it hashes the contract's
// canonical JSON (keys sorted, numbers normalised by their C++ types), never the YAML text: key
// order, formatting, `1e-3` vs `0.001`, or which arm a value was inherited from cannot change
// it, while any change of any resolved value (including the sweep and arm names) does.
// Re-running a recipe therefore finds its runs again and resumes them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mxablate::orchestrator {

// 16 lowercase hex digits: the first 8 bytes of a name-based (SHA-1, RFC 4122 v5) UUID of the
// canonical config (60 bits of hash; 4 are the UUID version);
// the config's own run_id field is ignored.
std::string compute_run_id(const nlohmann::json& resolved_config);

}  // namespace mxablate::orchestrator
