#include "mxablate/trainer/rules/mllog.h"

#include <chrono>
#include <ostream>

namespace mxablate::trainer {

std::string MlLogger::format(const std::string& key, const nlohmann::json& value,
                             const nlohmann::json& metadata, const char* event_type,
                             int64_t time_ms) {
  // Key order as MLPerf's mllog writes it; nlohmann::ordered_json keeps insertion order.
  nlohmann::ordered_json line;
  line["namespace"] = "";
  line["time_ms"] = time_ms;
  line["event_type"] = event_type;
  line["key"] = key;
  line["value"] = value;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["file"] = "mxablate-train";
  meta["lineno"] = 0;
  if (metadata.is_object())
    for (const auto& item : metadata.items()) meta[item.key()] = item.value();
  line["metadata"] = meta;
  return ":::MLLOG " + line.dump();
}

void MlLogger::log(const std::string& key, const nlohmann::json& value, nlohmann::json metadata,
                   const char* event_type) {
  if (!enabled_) return;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  out_ << format(key, value, metadata, event_type, now_ms) << std::endl;
}

}  // namespace mxablate::trainer
