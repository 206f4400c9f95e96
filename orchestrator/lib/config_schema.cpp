#include "mxablate/orchestrator/config_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "mxablate/contract/run_config.h"

namespace mxablate::orchestrator {
namespace {

using nlohmann::json;

// Short axis names a recipe may use for common config paths.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> a{
      {"seed", "train.seed"},
      {"data_seed", "train.data_seed"},
  };
  return a;
}

std::string describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string expected_type(const json& def, const std::string& config_path) {
  if (contract::takes_name_or_mapping(config_path)) return "a name or a mapping";
  switch (def.type()) {
    case json::value_t::object: return "a mapping";
    case json::value_t::array: return "a list of names";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "true or false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "a number";
  }
}

bool integral(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

ConfigSchema::ConfigSchema() : defaults_(contract::config_key_tree()) {
  for (const char* identity : {"run_id", "sweep", "arm", "target"}) defaults_.erase(identity);
}

const json* ConfigSchema::node_at(const std::string& path) const {
  const json* node = &defaults_;
  size_t start = 0;
  while (start <= path.size() && !path.empty()) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos
                                                                        : dot - start);
    if (!node->is_object() || !node->contains(key)) return nullptr;
    node = &(*node)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node;
}

std::optional<std::string> ConfigSchema::resolve(const std::string& name) const {
  const auto alias = aliases().find(name);
  const std::string path = alias != aliases().end() ? alias->second : name;
  if (path.empty() || !node_at(path)) return std::nullopt;
  return path;
}

std::string ConfigSchema::closest_key(const std::string& parent_path,
                                      const std::string& name) const {
  const json* parent = parent_path.empty() ? &defaults_ : node_at(parent_path);
  std::string best;
  size_t best_distance = 3;  // only close matches are worth suggesting
  if (parent && parent->is_object()) {
    for (const auto& item : parent->items()) {
      const size_t d = edit_distance(name, item.key());
      if (d < best_distance) {
        best_distance = d;
        best = item.key();
      }
    }
  }
  if (parent_path.empty())
    for (const auto& [alias, target] : aliases())
      if (edit_distance(name, alias) < best_distance) best = alias;
  return best;
}

std::string ConfigSchema::suggestion(const std::string& parent_path,
                                     const std::string& name) const {
  const std::string best = closest_key(parent_path, name);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

void ConfigSchema::check(const LocatedJson& fragment, const std::string& config_path,
                         const std::string& label, const std::string& file) const {
  const json* expected = config_path.empty() ? &defaults_ : node_at(config_path);
  if (!expected)
    throw RecipeError(file, fragment.where(""), fmt::format("{}: not a config key", label));
  check_value(fragment, "", fragment.value, *expected, config_path, label, file);
}

void ConfigSchema::check_value(const LocatedJson& fragment, const std::string& rel,
                               const json& value, const json& expected,
                               const std::string& config_path, const std::string& label,
                               const std::string& file) const {
  const std::string name = join_path(label, rel);
  const auto type_error = [&] {
    return RecipeError(file, fragment.where(rel),
                       fmt::format("{}: expected {}, got {}", name, expected_type(expected, config_path),
                                   describe(value)));
  };
  // `activation_checkpointing: auto` where the key tree shows false: the contract reads it.
  if (contract::takes_several_types(config_path)) return;
  if (expected.is_object()) {
    // `arm: ` with nothing under it; `dge: null` turning an estimator off. Sections that must
    // not be null are refused by the contract at their key.
    if (value.is_null()) return;
    // `model: llama-20m` or `model: {d_model: …}`: the name is the contract's (and the trainer's)
    // to check; the mapping's keys are checked here like any section's.
    if (value.is_string() && contract::takes_name_or_mapping(config_path)) return;
    if (!value.is_object()) throw type_error();
    for (const auto& item : value.items()) {
      const std::string child_rel = join_path(rel, item.key());
      const std::string child_path = join_path(config_path, item.key());
      if (config_path.empty() && (item.key() == "run_id" || item.key() == "sweep" ||
                                  item.key() == "arm"))
        throw RecipeError(file, fragment.where_key(child_rel),
                          fmt::format("{}: set by mxablate for each run, not by a recipe",
                                      join_path(label, child_rel)));
      if (config_path.empty() && item.key() == "target")
        throw RecipeError(file, fragment.where_key(child_rel),
                          fmt::format("{}: the target is set once, in the recipe's top-level "
                                      "`target` section",
                                      join_path(label, child_rel)));
      if (!expected.contains(item.key())) {
        std::string known;
        for (const auto& k : expected.items()) known += (known.empty() ? "" : ", ") + k.key();
        throw RecipeError(file, fragment.where_key(child_rel),
                          fmt::format("{}: unknown key '{}'{}; expected one of: {}", name.empty() ? "recipe" : name,
                                      item.key(), suggestion(config_path, item.key()), known));
      }
      check_value(fragment, child_rel, item.value(), expected[item.key()], child_path, label,
                  file);
    }
    return;
  }
  if (expected.is_array() && !expected.empty() && expected.front().is_object()) {
    // A list of mappings (precision_schedule, overrides): each element like the example.
    if (!value.is_array()) throw type_error();
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string element = rel + "[" + std::to_string(i) + "]";
      if (!value[i].is_object())
        throw RecipeError(file, fragment.where(element),
                          fmt::format("{}[{}]: expected a mapping, got {}", name, i,
                                      describe(value[i])));
      check_value(fragment, element, value[i], expected.front(), config_path, label, file);
    }
    return;
  }
  if (expected.is_array()) {
    if (!value.is_array()) throw type_error();
    for (size_t i = 0; i < value.size(); ++i)
      if (!value[i].is_string())
        throw RecipeError(file, fragment.where(rel + "[" + std::to_string(i) + "]"),
                          fmt::format("{}[{}]: expected a name, got {}", name, i,
                                      describe(value[i])));
    return;
  }
  if (expected.is_string()) {
    if (!value.is_string()) throw type_error();
    return;
  }
  if (expected.is_boolean()) {
    if (!value.is_boolean()) throw type_error();
    return;
  }
  if (expected.is_number_integer() || expected.is_number_unsigned()) {
    if (!value.is_number() || !integral(value)) throw type_error();
    const auto range_error = [&](const std::string& range) {
      return RecipeError(file, fragment.where(rel),
                         fmt::format("{}: {} is out of range ({})", name, describe(value), range));
    };
    const std::string full_range =
        fmt::format("an integer from {} to {}",
                    expected.is_number_unsigned() ? "0" : "-9223372036854775808",
                    std::numeric_limits<int64_t>::max());
    // Beyond int64 no spelling helps; below it, digits do where an exponent cannot.
    if (value.is_number_float() && std::fabs(value.get<double>()) >= 0x1p63)
      throw range_error(full_range);
    if (value.is_number_float() && std::fabs(value.get<double>()) > contract::kLargestFloatInteger)
      throw range_error(full_range + "; beyond 9e15 write it digit by digit, without an exponent");
    if (expected.is_number_unsigned() && value.get<double>() < 0)
      throw range_error(
          fmt::format("an integer from 0 to {}", std::numeric_limits<int64_t>::max()));
    return;
  }
  if (expected.is_number()) {
    if (!value.is_number()) throw type_error();
    return;
  }
}

}  // namespace mxablate::orchestrator
