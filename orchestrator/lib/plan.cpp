#include "mxablate/orchestrator/plan.h"

#include "mxablate/contract/settings_difference.h"

#include <algorithm>
#include <fmt/format.h>

#include <functional>
#include <map>
#include <set>

#include "mxablate/orchestrator/run_id.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/plan/run_fit.h"

namespace mxablate::orchestrator {
namespace {

using nlohmann::json;

// Where a resolved value came from, for messages.
struct Origin {
  Location at;
  std::string source;  // "in base", "in arm 'F'", "by grid axis 'seed'", "in include[0]"
};

struct Resolved {
  json config = json::object();
  std::map<std::string, Origin> origins;  // by config path
};

bool is_under(const std::string& path, const std::string& prefix) {
  return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         (path[prefix.size()] == '.' || path[prefix.size()] == '[');
}

void forget_below(std::map<std::string, Origin>& origins, const std::string& path) {
  for (auto it = origins.begin(); it != origins.end();)
    it = is_under(it->first, path) ? origins.erase(it) : std::next(it);
}

// Deep-merges `src` (the value at `rel` of `frag`) into `dst` (the value at config `path`):
// mappings merge key by key, anything else replaces (lists included).
void merge_into(json& dst, const json& src, const std::string& path, const LocatedJson& frag,
                const std::string& rel, const std::string& source,
                std::map<std::string, Origin>& origins) {
  if (src.is_object()) {
    if (!dst.is_object()) {
      dst = json::object();
      forget_below(origins, path);
    }
    if (!path.empty()) origins[path] = {frag.where(rel), source};
    for (const auto& item : src.items())
      merge_into(dst[item.key()], item.value(), join_path(path, item.key()), frag,
                 join_path(rel, item.key()), source, origins);
    return;
  }
  dst = src;
  forget_below(origins, path);
  origins[path] = {frag.where(rel), source};
}

json& slot_at(json& root, const std::string& path) {
  json* node = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos
                                                                        : dot - start);
    if (!node->is_object()) *node = json::object();
    node = &(*node)[key];
    if (dot == std::string::npos) return *node;
    start = dot + 1;
  }
}

void leaf_paths(const json& v, const std::string& path, std::vector<std::string>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& item : v.items()) leaf_paths(item.value(), join_path(path, item.key()), out);
  } else if (!path.empty()) {
    out.push_back(path);
  }
}

bool overlaps(const std::string& a, const std::string& b) {
  return a == b || is_under(a, b) || is_under(b, a);
}

std::string describe_axes(const std::string& arm, const std::vector<AxisValue>& axes) {
  std::string s = "arm " + arm;
  for (const auto& a : axes) s += fmt::format(", {}={}", a.axis, a.value.dump());
  return s;
}

constexpr size_t kMaxRuns = 100000;

class Expander {
 public:
  explicit Expander(const Recipe& r) : r_(r), dims_(r.grid_dimensions()) {
    merge_into(base_.config, r.base.value.is_object() ? r.base.value : json::object(), "", r.base,
               "", "in base", base_.origins);
  }

  Plan expand() {
    check_arms_against_grid();
    // A typo like `seed: [1, …, 1000]` on six axes must be an error, not hours of expansion.
    const double product = static_cast<double>(r_.arms.size()) * r_.grid_points();
    if (product > kMaxRuns)
      throw RecipeError(r_.file, r_.grid.empty() ? Location{1, 1} : r_.grid.front().at,
                        fmt::format("grid: {} arm{} × the grid make {:.0f} runs, more than {} "
                                    "in one sweep; split the recipe",
                                    r_.arms.size(), r_.arms.size() == 1 ? "" : "s", product,
                                    kMaxRuns));
    Plan plan;
    plan.sweep = r_.name;
    plan.target = r_.target.as_json();
    plan.target_val_loss = r_.target.val_loss;
    for (const auto& axis : r_.grid) plan.axis_names.push_back(axis.name);
    std::vector<size_t> exclude_hits(r_.exclude.size(), 0);
    for (size_t a = 0; a < r_.arms.size(); ++a) {
      for_each_combination([&](const std::vector<size_t>& pick) {
        std::vector<AxisValue> axes;
        std::vector<std::pair<const LocatedJson*, Origin>> sets;
        for (size_t g = 0; g < r_.grid.size(); ++g) {
          const GridAxis& axis = r_.grid[g];
          const LocatedJson& v = axis.values[pick[g]];
          axes.push_back({axis.name, axis.path, v.value});
          sets.push_back({&v, {v.where(""), fmt::format("by grid axis '{}'", axis.name)}});
        }
        bool excluded = false;
        for (size_t e = 0; e < r_.exclude.size(); ++e)
          if (matches(r_.exclude[e], r_.arms[a].name, axes)) {
            ++exclude_hits[e];
            excluded = true;
          }
        if (!excluded) add_run(plan, a, axes, sets);
      });
    }
    for (size_t e = 0; e < r_.exclude.size(); ++e)
      if (exclude_hits[e] == 0)
        throw RecipeError(r_.file, r_.exclude[e].at,
                          fmt::format("exclude[{}]: matches no run (check the arm name and the "
                                      "axis values)",
                                      e));
    for (size_t i = 0; i < r_.include.size(); ++i) add_included(plan, i);
    check_something_runs(plan, product);
    describe_against_baseline(plan);
    for (const RunSpec& run : plan.runs)
      for (const AxisValue& a : run.axes)
        if (std::find(plan.axis_names.begin(), plan.axis_names.end(), a.axis) ==
            plan.axis_names.end())
          plan.axis_names.push_back(a.axis);
    return plan;
  }

 private:
  // Each run against the baseline arm's run at the same grid point (any of its runs when the
  // point was excluded): the one description plan, table, report and the store show.
  void describe_against_baseline(Plan& plan) const {
    plan.baseline_arm = r_.target.from_arm ? *r_.target.from_arm : r_.arms.front().name;
    // A grid point's key: its axes and values. One pass indexes the baseline's runs, so a plan of
    // many runs is described in linear time.
    const auto point = [](const RunSpec& run) {
      nlohmann::json key = nlohmann::json::array();
      for (const AxisValue& a : run.axes) key.push_back({a.axis, a.value});
      return key.dump();
    };
    std::map<std::string, const RunSpec*> baseline_at;
    const RunSpec* any_baseline = nullptr;
    for (const RunSpec& run : plan.runs) {
      if (run.arm != plan.baseline_arm) continue;
      baseline_at.emplace(point(run), &run);
      if (!any_baseline) any_baseline = &run;
    }
    for (RunSpec& run : plan.runs) {
      const auto it = baseline_at.find(point(run));
      const RunSpec* baseline = it != baseline_at.end() ? it->second : any_baseline;
      if (baseline)
        run.interventions = contract::describe_differences(
            contract::settings_difference(run.config, baseline->config), false);
    }
  }

  // An arm (or an arm it extends) setting a grid axis would be overridden silently by every
  // grid value; say so instead.
  void check_arms_against_grid() const {
    for (const ArmDef& arm : r_.arms) {
      std::vector<std::string> leaves;
      leaf_paths(arm.overrides.value, "", leaves);
      for (const std::string& leaf : leaves)
        for (const GridAxis& axis : r_.grid)
          if (overlaps(leaf, axis.path))
            throw RecipeError(r_.file, arm.overrides.where_key(leaf),
                              fmt::format("arms.{}.{}: also set by grid axis '{}' (line {}), "
                                          "which would silently replace it; set it in one place",
                                          arm.name, leaf, axis.name, axis.at.line));
    }
  }

  // Excludes that together remove every run, or every run of the arm the target is derived from,
  // leave a sweep that plans "cleanly" but can never give an answer.
  void check_something_runs(const Plan& plan, double before_exclude) const {
    if (plan.runs.empty())
      throw RecipeError(r_.file, r_.exclude_at.known() ? r_.exclude_at : r_.name_at,
                        fmt::format("exclude: removes every one of the {:.0f} runs; nothing would "
                                    "run",
                                    before_exclude));
    if (!r_.target.from_arm) return;
    const std::string& arm = *r_.target.from_arm;
    if (std::none_of(plan.runs.begin(), plan.runs.end(),
                     [&](const RunSpec& run) { return run.arm == arm; }))
      throw RecipeError(r_.file, r_.target.from_arm_at,
                        fmt::format("target.from_arm: every run of arm '{}' is excluded, so the "
                                    "target could never be derived",
                                    arm));
  }

  // Calls `fn` with a value index per grid axis for every grid point; the axes of a linked axis
  // take the same index (they move together).
  void for_each_combination(const std::function<void(const std::vector<size_t>&)>& fn) const {
    std::vector<size_t> dim_pick(dims_.size(), 0);
    std::vector<size_t> pick(r_.grid.size(), 0);
    while (true) {
      for (size_t d = 0; d < dims_.size(); ++d)
        for (const size_t g : dims_[d]) pick[g] = dim_pick[d];
      fn(pick);
      size_t d = dims_.size();
      while (d > 0) {
        --d;
        if (++dim_pick[d] < r_.grid[dims_[d].front()].values.size()) break;
        dim_pick[d] = 0;
        if (d == 0) return;
      }
      if (dims_.empty()) return;
    }
  }

  static bool matches(const Selector& s, const std::string& arm,
                      const std::vector<AxisValue>& axes) {
    if (s.arm && *s.arm != arm) return false;
    for (const auto& assignment : s.assignments) {
      const auto it = std::find_if(axes.begin(), axes.end(),
                                   [&](const AxisValue& a) { return a.path == assignment.path; });
      if (it == axes.end() || it->value != assignment.value.value) return false;
    }
    return true;
  }

  void add_included(Plan& plan, size_t index) {
    const Selector& s = r_.include[index];
    const size_t arm_index = static_cast<size_t>(r_.find_arm(*s.arm) - r_.arms.data());
    const std::string source = fmt::format("in include[{}]", index);
    const size_t before = plan.runs.size();
    for_each_combination([&](const std::vector<size_t>& pick) {
      std::vector<AxisValue> axes;
      std::vector<std::pair<const LocatedJson*, Origin>> sets;
      std::set<std::string> assigned;
      for (size_t g = 0; g < r_.grid.size(); ++g) {
        const GridAxis& axis = r_.grid[g];
        const auto it = std::find_if(s.assignments.begin(), s.assignments.end(),
                                     [&](const auto& a) { return a.path == axis.path; });
        if (it != s.assignments.end()) {
          if (fully_assigned(s, g)) {
            // Only the first value of this axis' loop adds the run; the others would repeat it.
            if (pick[g] != 0) return;
          } else if (axis.values[pick[g]].value != it->value.value) {
            // Part of a linked axis named: the entry picks the grid points with that value,
            // and the linked paths it does not name take theirs.
            return;
          }
          axes.push_back({axis.name, axis.path, it->value.value});
          sets.push_back({&it->value, {it->value.where(""), source}});
          assigned.insert(axis.path);
        } else {
          const LocatedJson& v = axis.values[pick[g]];
          axes.push_back({axis.name, axis.path, v.value});
          sets.push_back({&v, {v.where(""), fmt::format("by grid axis '{}'", axis.name)}});
        }
      }
      for (const auto& a : s.assignments) {
        if (assigned.count(a.path)) continue;
        axes.push_back({a.name, a.path, a.value.value});
        sets.push_back({&a.value, {a.value.where(""), source}});
      }
      add_run(plan, arm_index, axes, sets, &s);
    });
    if (plan.runs.size() == before)
      throw RecipeError(r_.file, s.at, fmt::format("include[{}]: adds no run", index));
  }

  // Whether the include entry `s` names every path of grid axis `g`'s dimension (an ordinary
  // axis, or all paths of a linked one).
  bool fully_assigned(const Selector& s, size_t g) const {
    for (const auto& dim : dims_) {
      if (std::find(dim.begin(), dim.end(), g) == dim.end()) continue;
      return std::all_of(dim.begin(), dim.end(), [&](size_t other) {
        return std::any_of(s.assignments.begin(), s.assignments.end(),
                           [&](const auto& a) { return a.path == r_.grid[other].path; });
      });
    }
    return true;
  }

  const Resolved& resolved_arm(size_t index) {
    if (const auto it = arms_.find(index); it != arms_.end()) return it->second;
    const ArmDef& arm = r_.arms[index];
    Resolved out = arm.extends
                       ? resolved_arm(static_cast<size_t>(r_.find_arm(*arm.extends) - r_.arms.data()))
                       : base_;
    merge_into(out.config, arm.overrides.value, "", arm.overrides, "",
               fmt::format("in arm '{}'", arm.name), out.origins);
    return arms_.emplace(index, std::move(out)).first->second;
  }

  void add_run(Plan& plan, size_t arm_index, const std::vector<AxisValue>& axes,
               const std::vector<std::pair<const LocatedJson*, Origin>>& sets,
               const Selector* included_by = nullptr) {
    const ArmDef& arm = r_.arms[arm_index];
    Resolved run = resolved_arm(arm_index);
    for (size_t i = 0; i < axes.size(); ++i) {
      json& slot = slot_at(run.config, axes[i].path);
      merge_into(slot, sets[i].first->value, axes[i].path, *sets[i].first, "", sets[i].second.source,
                 run.origins);
    }
    run.config["sweep"] = r_.name;
    run.config["arm"] = arm.name;
    json target = json::object();
    target["val_loss"] = r_.target.val_loss ? json(*r_.target.val_loss) : json(nullptr);
    target["stop_at_target"] = r_.target.stop_at_target;
    if (r_.target.stop_hopeless) target["stop_hopeless"] = *r_.target.stop_hopeless;
    if (r_.target.hopeless_confidence) target["hopeless_confidence"] = *r_.target.hopeless_confidence;
    run.config["target"] = target;

    RunSpec spec;
    spec.arm = arm.name;
    spec.arm_index = static_cast<int>(arm_index);
    spec.axes = axes;
    try {
      spec.config = contract::run_config_from_json(run.config);
      // What mxablate-train refuses at start whatever the machine and the data: the same
      // function (trainer/plan run_fit.h), so a recipe can plan only runs the trainer starts.
      trainer::check_runnable(spec.config);
    } catch (const contract::ConfigError& e) {
      throw located(e.what(), run, arm, axes);
    }
    spec.config_json = contract::to_json(spec.config);
    spec.run_id = compute_run_id(spec.config_json);
    spec.config.run_id = spec.run_id;
    spec.config_json["run_id"] = spec.run_id;
    for (const auto& [path, origin] : run.origins) spec.origins[path] = origin.at;
    for (const RunSpec& other : plan.runs)
      if (other.run_id == spec.run_id)
        throw RecipeError(r_.file, included_by ? included_by->at : arm.at,
                          fmt::format("{}: the same run as an earlier one ({}); every run "
                                      "must differ",
                                      included_by ? "include entry" : "arms." + arm.name,
                                      describe_axes(arm.name, axes)));
    plan.runs.push_back(std::move(spec));
  }

  // Turns the contract's "key.path: message" into an error at the value that set key.path.
  RecipeError located(const std::string& message, const Resolved& run, const ArmDef& arm,
                      const std::vector<AxisValue>& axes) const {
    const size_t colon = message.find(": ");
    const std::string key = colon == std::string::npos ? "" : message.substr(0, colon);
    const std::string rest = colon == std::string::npos ? message : message.substr(colon + 2);
    // A list element's key ("overrides[1].layers") is located at the list, named in full.
    std::string path = key;
    if (const size_t bracket = path.find('['); bracket != std::string::npos)
      path = path.substr(0, bracket);
    for (std::string p = path; !p.empty();) {
      if (const auto it = run.origins.find(p); it != run.origins.end() && it->second.at.known())
        return RecipeError(r_.file, it->second.at,
                           fmt::format("{}: {} (set {}; run: {})", key, rest, it->second.source,
                                       describe_axes(arm.name, axes)));
      const size_t dot = p.rfind('.');
      p = dot == std::string::npos ? "" : p.substr(0, dot);
    }
    return RecipeError(r_.file, arm.at,
                       fmt::format("{}: {} (a default value; run: {})", key.empty() ? "config" : key,
                                   rest, describe_axes(arm.name, axes)));
  }

  const Recipe& r_;
  const std::vector<std::vector<size_t>> dims_;
  Resolved base_;
  std::map<size_t, Resolved> arms_;
};

}  // namespace

Location RunSpec::where(const std::string& config_path) const {
  for (std::string p = config_path; !p.empty();) {
    if (const auto it = origins.find(p); it != origins.end() && it->second.known())
      return it->second;
    const size_t dot = p.rfind('.');
    p = dot == std::string::npos ? "" : p.substr(0, dot);
  }
  return {};
}

std::string axis_text(const RunSpec& spec, const AxisValue& a) {
  // The axis sets the whole model: the run's resolved model is what it set.
  if (a.path == contract::kModelKey) return contract::model_label(spec.config.model);
  return a.value.is_string() ? a.value.get<std::string>() : a.value.dump();
}

std::string run_label(const RunSpec& spec) {
  std::string s = spec.arm;
  for (const AxisValue& a : spec.axes) s += fmt::format(" {}={}", a.axis, axis_text(spec, a));
  return s;
}

double Plan::total_tokens() const {
  double total = 0;
  for (const RunSpec& r : runs) total += r.config.train.max_tokens;
  return total;
}

Plan expand_recipe(const Recipe& recipe) { return Expander(recipe).expand(); }

double predicted_work(const RunSpec& run, std::optional<int64_t> vocab) {
  // The planner resolved and checked every run's model: this cannot throw.
  const trainer::ModelShape shape = trainer::model_shape(run.config.model);
  const int64_t params = vocab ? trainer::parameter_count(shape, *vocab)
                               : trainer::non_embedding_parameter_count(shape);
  return run.config.train.max_tokens * static_cast<double>(params);
}

std::vector<std::string> launch_order(const Plan& plan, LaunchOrder order,
                                      const std::map<std::string, int64_t>& vocabularies) {
  std::vector<std::pair<double, std::string>> runs;
  runs.reserve(plan.runs.size());
  for (const RunSpec& r : plan.runs) {
    const auto it = vocabularies.find(r.config.data.dataset);
    const double work = order == LaunchOrder::kLongestFirst
                            ? predicted_work(r, it == vocabularies.end()
                                                    ? std::nullopt
                                                    : std::optional<int64_t>(it->second))
                            : 0.0;
    runs.emplace_back(work, r.run_id);
  }
  std::stable_sort(runs.begin(), runs.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> ids;
  ids.reserve(runs.size());
  for (auto& [work, id] : runs) ids.push_back(std::move(id));
  return ids;
}

}  // namespace mxablate::orchestrator
