#include "mxablate/orchestrator/run_id.h"

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/string_generator.hpp>
#include <boost/uuid/uuid.hpp>

namespace mxablate::orchestrator {

std::string compute_run_id(const nlohmann::json& resolved_config) {
  nlohmann::json canonical = resolved_config;
  canonical.erase("run_id");
  // A fixed namespace: the same config hashes to the same id on every machine and version.
  static const boost::uuids::uuid kNamespace =
      boost::uuids::string_generator()("6b1f0f4e-3c2a-4d55-9a57-6d78c0a1b2e3");
  boost::uuids::name_generator_sha1 generate(kNamespace);
  // "v1:" versions the canonical form itself.
  const boost::uuids::uuid id = generate("mxablate-run-v1:" + canonical.dump());
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 8; ++i) {
    out += kHex[id.data[i] >> 4];
    out += kHex[id.data[i] & 0xF];
  }
  return out;
}

}  // namespace mxablate::orchestrator
