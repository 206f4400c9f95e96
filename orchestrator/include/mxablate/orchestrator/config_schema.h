// Which keys a recipe may set and with which types. The source of truth is the run config
// itself: the tree of contract::to_json(RunConfig{}) — its keys are the recipe keys (docs/design.md §5:
// recipe keys = RunConfig JSON keys), the types of its defaults the expected types. So a field
// added to the contract is settable from recipes with no change here.
//
// Excluded: the identity the orchestrator sets (run_id, sweep, arm) and `target`, which has its
// own top-level section in a recipe.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mxablate/orchestrator/yaml_value.h"

namespace mxablate::orchestrator {

class ConfigSchema {
 public:
  ConfigSchema();

  // Checks keys and value types of `fragment`, which will be merged at `config_path` ("" = the
  // config root). `label` prefixes key names in messages ("base", "arms.F", "grid.seed[1]").
  // Throws RecipeError at the offending key or value.
  void check(const LocatedJson& fragment, const std::string& config_path, const std::string& label,
             const std::string& file) const;

  // The config path an axis/include key names: a dotted path ("train.lr", "model") or a short
  // alias ("seed" = train.seed). nullopt when it names nothing settable.
  std::optional<std::string> resolve(const std::string& name) const;

  // The known key at `parent_path` ("" for the root) closest to `name`, or "" if none is close.
  std::string closest_key(const std::string& parent_path, const std::string& name) const;
  // " (did you mean 'lr'?)" for an unknown name at `parent_path`, or "".
  std::string suggestion(const std::string& parent_path, const std::string& name) const;

  const nlohmann::json& defaults() const { return defaults_; }

 private:
  const nlohmann::json* node_at(const std::string& path) const;
  void check_value(const LocatedJson& fragment, const std::string& rel, const nlohmann::json& value,
                   const nlohmann::json& expected, const std::string& config_path,
                   const std::string& label, const std::string& file) const;

  nlohmann::json defaults_;
};

// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace mxablate::orchestrator
