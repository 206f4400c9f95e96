// A recipe (docs/design.md §5) as written: base config, named arms (with `extends`), grid axes,
// include/exclude entries and the target. Loading checks everything that can be checked without
// resolving runs — syntax, structure, key names, value types, references between arms — and
// throws RecipeError at the first problem, naming file:line:column and the key. Value checks
// that need a resolved run (the contract's validation, model fit) happen in plan.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/orchestrator/recipe_error.h"
#include "mxablate/orchestrator/yaml_value.h"

namespace mxablate::orchestrator {

struct ArmDef {
  std::string name;
  Location at;  // the arm's key
  std::optional<std::string> extends;
  Location extends_at;
  LocatedJson overrides;  // config keys only (`extends` removed)
};

struct GridAxis {
  std::string name;  // as written ("seed", "train.lr")
  std::string path;  // the config path it sets ("train.seed")
  Location at;
  std::vector<LocatedJson> values;  // each converted with its own positions
  // A linked axis (docs/design.md §5) sets several config paths together: `scale: [{model:
  // llama-20m, train.max_tokens: 1e8}, …]` is read as one GridAxis per path ("model",
  // "train.max_tokens"), adjacent in `grid`, each with the linked axis' name here and values
  // index-aligned: they move as one axis. Empty for an ordinary axis.
  std::string link;
};

// One include or exclude entry: an arm (optional for exclude) and values for config paths.
struct Selector {
  Location at;
  std::optional<std::string> arm;
  Location arm_at;
  struct Assignment {
    std::string name;  // as written
    std::string path;  // resolved config path
    Location at;
    LocatedJson value;
  };
  std::vector<Assignment> assignments;
};

struct TargetSpec {
  std::optional<double> val_loss;    // fixed target (log of `perplexity` when that was given)
  std::optional<double> perplexity;  // as written, when the target was given as a perplexity
  std::optional<std::string> from_arm;
  Location from_arm_at;
  // A from_arm target is the baseline's median loss at this fraction of its budget, fixed
  // mid-sweep and handed to the runs (docs/design.md §5, "Live targets").
  double at_fraction = 1.0;
  bool stop_at_target = false;
  // The smallest measurable ceiling the recipe accepts (0.5 = +50 %), below which `plan` warns
  // (docs/design.md §5, "The measurable ceiling"); nullopt: the default, kDefaultMinCeiling.
  std::optional<double> min_ceiling;
  // End a run projected not to reach the target (docs/design.md §4, "Projected outcomes and
  // hopeless runs"), and how sure the projection must be; unset: the contract's defaults.
  std::optional<bool> stop_hopeless;
  std::optional<double> hopeless_confidence;
  Location at;
  nlohmann::json as_json() const;  // what the store keeps
};

// Below this ceiling `plan` warns unless the recipe sets target.min_ceiling: the paper's
// headline effect (+26 %) needs room above it.
inline constexpr double kDefaultMinCeiling = 0.5;

struct Recipe {
  std::string file;  // as given (used in messages)
  std::string text;
  std::string name;
  Location name_at;
  std::string description;
  LocatedJson base;
  Location base_at;
  std::vector<ArmDef> arms;  // in recipe order
  std::vector<GridAxis> grid;
  std::vector<Selector> include;
  std::vector<Selector> exclude;
  Location exclude_at;  // the `exclude` key
  TargetSpec target;

  const ArmDef* find_arm(const std::string& name) const;
  // The grid's dimensions: indexes into `grid`, one group per ordinary axis and one per linked
  // axis (its paths move together). Every count of grid points goes through this.
  std::vector<std::vector<size_t>> grid_dimensions() const;
  double grid_points() const;  // the product of the dimensions' sizes
};

// A recipe is a short text file; anything larger is refused before it is parsed.
inline constexpr size_t kMaxRecipeBytes = size_t{1} << 20;

// Reads and checks a recipe file: a regular file of at most kMaxRecipeBytes (a device, FIFO or
// socket is refused unread). Throws RecipeError (also for an unreadable file).
Recipe load_recipe(const std::string& path);
// Parses recipe text; `file` names it in messages.
Recipe parse_recipe(const std::string& text, const std::string& file);
// A sweep's name as a recipe may give it: letters, digits, '.', '_', '-', at most 64 bytes,
// beginning with a letter or digit (it names a directory).
bool valid_sweep_name(const std::string& name);

}  // namespace mxablate::orchestrator
