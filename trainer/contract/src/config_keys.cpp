// Lookups in the config key table (config_keys.h).
#include "mxablate/contract/config_keys.h"

#include <string>
#include <utility>

namespace mxablate::contract {
namespace {

using nlohmann::json;

// `path` is `section` or a key under it.
bool covered_by(std::string_view path, std::string_view section) {
  return path.substr(0, section.size()) == section &&
         (path.size() == section.size() || path[section.size()] == '.');
}

// Some row is a key under `path` (so `path` is taken key by key).
bool has_rows_under(std::string_view path) {
  for (const ConfigKey& k : kConfigKeys)
    if (k.path.size() > path.size() && covered_by(k.path, path)) return true;
  return false;
}

json keys_with(const json& tree, const std::string& path, KeyTrait trait) {
  json out = json::object();
  if (!tree.is_object()) return out;
  for (const auto& item : tree.items()) {
    const std::string key = path.empty() ? item.key() : path + "." + item.key();
    const ConfigKey* row = config_key(key);
    if (!row) continue;
    if (item.value().is_object() && has_rows_under(key)) {
      // Key by key: a section keeps its keys with the trait (train without
      // activation_checkpointing), or gives the ones that have it (train's only execution key).
      json inner = keys_with(item.value(), key, trait);
      if (row->has(trait) || !inner.empty()) out[item.key()] = std::move(inner);
    } else if (row->has(trait)) {
      out[item.key()] = item.value();
    }
  }
  return out;
}

}  // namespace

const ConfigKey* config_key(std::string_view path) {
  const ConfigKey* best = nullptr;
  for (const ConfigKey& k : kConfigKeys)
    if (covered_by(path, k.path) && (!best || k.path.size() > best->path.size())) best = &k;
  return best;
}

json keys_with(const json& config, KeyTrait trait) { return keys_with(config, "", trait); }

}  // namespace mxablate::contract
