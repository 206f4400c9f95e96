#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "mxablate/contract/perplexity.h"
#include "mxablate/orchestrator/config_schema.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::orchestrator {
namespace {

using nlohmann::json;

constexpr const char* kTopLevelKeys =
    "name, description, base, arms, grid, include, exclude, target";

std::string type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return fmt::format("\"{}\"", n.Scalar().substr(0, 40));
    case YAML::NodeType::Null: return "nothing";
    default: return "an undefined value";
  }
}

bool valid_name(const std::string& s, bool allow_plus) {
  if (s.empty() || s.size() > 64) return false;
  if (!std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') continue;
    if (allow_plus && (c == '+' || c == '=' || c == '@')) continue;
    return false;
  }
  return true;
}

// Position of the first byte that makes `text` not UTF-8 (or a NUL), for a precise error on
// binary input; nullopt when the text is clean.
std::optional<Location> first_bad_byte(const std::string& text) {
  const size_t bad = first_invalid_utf8(text);
  if (bad == std::string::npos) return std::nullopt;
  int line = 1, column = 1;
  for (size_t i = 0; i < bad;) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += utf8_sequence_length(text, i);
  }
  return Location{line, column};
}

class Loader {
 public:
  Loader(const std::string& text, const std::string& file)
      : file_(file), text_(text), yaml_(file) {}

  Recipe load() {
    Recipe r;
    r.file = file_;
    r.text = text_;
    const YAML::Node root = parse_document();
    const Location root_at = YamlConverter::location_of(root, {1, 1});
    if (!root.IsMap())
      throw error(root_at, fmt::format("recipe: expected a mapping with keys {}, got {}",
                                       kTopLevelKeys, type_name(root)));
    std::set<std::string> seen;
    std::optional<YAML::Node> target_node, include_node, exclude_node;
    Location target_at, include_at, exclude_at;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const Location key_at = YamlConverter::location_of(it->first, root_at);
      const std::string key = key_name(it->first, key_at, "recipe");
      if (!seen.insert(key).second)
        throw error(key_at, fmt::format("{}: duplicate key", key));
      const YAML::Node value = it->second;  // a copy: it-> yields a temporary
      const Location value_at =
          value.IsNull() ? key_at : YamlConverter::location_of(value, key_at);
      if (key == "name") {
        r.name = scalar_string(value, "name", value_at);
        r.name_at = value_at;
        if (!valid_name(r.name, false))
          throw error(value_at, fmt::format("name: \"{}\" is not a valid sweep name (letters, "
                                            "digits, '.', '_', '-'; at most 64; it names a "
                                            "directory)",
                                            r.name));
      } else if (key == "description") {
        r.description = scalar_string(value, "description", value_at);
      } else if (key == "base") {
        r.base_at = key_at;
        r.base = yaml_.convert(value, "base", key_at);
        schema_.check(r.base, "", "base", file_);
      } else if (key == "arms") {
        read_arms(value, key_at, r);
      } else if (key == "grid") {
        read_grid(value, key_at, r);
      } else if (key == "target") {
        target_node = value;
        target_at = key_at;
      } else if (key == "include") {
        include_node = value;
        include_at = key_at;
      } else if (key == "exclude") {
        exclude_node = value;
        exclude_at = key_at;
        r.exclude_at = key_at;
      } else {
        std::string hint;
        for (const char* k : {"name", "description", "base", "arms", "grid", "include",
                              "exclude", "target"})
          if (edit_distance(key, k) <= 2) hint = fmt::format(" (did you mean '{}'?)", k);
        throw error(key_at, fmt::format("recipe: unknown key '{}'{}; expected one of: {}", key,
                                        hint, kTopLevelKeys));
      }
    }
    if (!seen.count("name"))
      throw error(root_at, "recipe: missing required key 'name' (the sweep's name)");
    if (!seen.count("arms"))
      throw error(root_at, "recipe: missing required key 'arms' (at least one arm, e.g. "
                           "`arms: {baseline: {}}`)");
    check_extends(r);
    // These refer to arms and axes, so they are read once both are known.
    if (target_node) read_target(*target_node, target_at, r);
    if (include_node) r.include = read_selectors(*include_node, include_at, "include", r);
    if (exclude_node) r.exclude = read_selectors(*exclude_node, exclude_at, "exclude", r);
    return r;
  }

 private:
  RecipeError error(Location at, const std::string& message) const {
    return RecipeError(file_, at, message);
  }

  // A mapping key read as a plain name: escapes in a quoted key may decode to bytes that are not
  // UTF-8, which no message could print.
  std::string key_name(const YAML::Node& key, Location at, const std::string& what) const {
    if (!key.IsScalar()) throw error(at, fmt::format("{}: keys must be plain names", what));
    if (first_invalid_utf8(key.Scalar()) != std::string::npos)
      throw error(at, fmt::format("{}: a key is not valid UTF-8 (or holds a NUL), e.g. from an "
                                  "escape like \\xff or \\udc00",
                                  what));
    return key.Scalar();
  }

  YAML::Node parse_document() {
    if (text_.find_first_not_of(" \t\r\n") == std::string::npos)
      throw error({1, 1}, fmt::format("recipe: the file is empty; expected a mapping with keys {}",
                                      kTopLevelKeys));
    if (const auto bad = first_bad_byte(text_))
      throw error(*bad, "recipe: not a text file (a NUL byte or invalid UTF-8 here)");
    YAML::Node root;
    try {
      check_single_document();
      root = YAML::Load(text_);
    } catch (const YAML::Exception& e) {
      const Location at = e.mark.is_null() ? Location{1, 1}
                                           : Location{e.mark.line + 1, e.mark.column + 1};
      throw error(at, fmt::format("invalid YAML: {}", e.msg));
    } catch (const RecipeError&) {
      throw;
    } catch (const std::exception& e) {
      throw error({1, 1}, fmt::format("invalid YAML: {}", e.what()));
    }
    if (root.IsNull())
      throw error({1, 1}, fmt::format("recipe: the file holds no content; expected a mapping "
                                      "with keys {}",
                                      kTopLevelKeys));
    return root;
  }

  // A recipe is one YAML document. Counted with the event parser, stopping at the second: a
  // stray ',' outside any [..] or {..} makes yaml-cpp 0.7 report an endless series of empty
  // documents (YAML::LoadAll never returns on ", a"), so documents are never loaded in a loop.
  void check_single_document() {
    struct Counter : YAML::EventHandler {
      int documents = 0;
      YAML::Mark second;
      void OnDocumentStart(const YAML::Mark& mark) override {
        if (++documents == 2) second = mark;
      }
      void OnDocumentEnd() override {}
      void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
      void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
      void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    const std::string&) override {}
      void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                           YAML::EmitterStyle::value) override {}
      void OnSequenceEnd() override {}
      void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                      YAML::EmitterStyle::value) override {}
      void OnMapEnd() override {}
    } counter;
    std::istringstream in(text_);
    YAML::Parser parser(in);
    while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.documents < 2) return;
    const Location at{counter.second.line + 1, counter.second.column + 1};
    const size_t offset = static_cast<size_t>(std::max(0, counter.second.pos));
    if (offset < text_.size() && text_[offset] == ',')
      throw error(at, "invalid YAML: a ',' outside any [list] or {mapping}");
    throw error(at, "recipe: a second YAML document; a recipe is exactly one document");
  }

  std::string scalar_string(const YAML::Node& n, const std::string& key, Location at) {
    const LocatedJson v = yaml_.convert(n, key, at);
    if (!v.value.is_string())
      throw error(at, fmt::format("{}: expected a string, got {}", key, v.value.dump()));
    return v.value.get<std::string>();
  }

  void read_arms(const YAML::Node& node, Location key_at, Recipe& r) {
    if (!node.IsMap())
      throw error(node.IsNull() ? key_at : YamlConverter::location_of(node, key_at),
                  fmt::format("arms: expected a mapping of arm names to settings, got {}",
                              type_name(node)));
    if (node.size() == 0) throw error(key_at, "arms: at least one arm is needed");
    std::set<std::string> names;
    for (auto it = node.begin(); it != node.end(); ++it) {
      ArmDef arm;
      arm.at = YamlConverter::location_of(it->first, key_at);
      if (!it->first.IsScalar()) throw error(arm.at, "arms: arm names must be plain names");
      arm.name = key_name(it->first, arm.at, "arms");
      if (!valid_name(arm.name, true))
        throw error(arm.at, fmt::format("arms: \"{}\" is not a valid arm name (letters, digits "
                                        "and _ - . + = @, at most 64)",
                                        arm.name));
      if (!names.insert(arm.name).second)
        throw error(arm.at, fmt::format("arms.{}: duplicate arm", arm.name));
      const std::string label = "arms." + arm.name;
      arm.overrides = yaml_.convert(it->second, label, arm.at);
      json& v = arm.overrides.value;
      if (v.is_null()) v = json::object();
      if (!v.is_object())
        throw error(arm.overrides.where(""),
                    fmt::format("{}: expected a mapping of settings (or {{}}), got {}", label,
                                v.dump().substr(0, 40)));
      if (v.contains("extends")) {
        arm.extends_at = arm.overrides.where("extends");
        if (!v["extends"].is_string())
          throw error(arm.extends_at, fmt::format("{}.extends: expected an arm name, got {}",
                                                  label, v["extends"].dump()));
        arm.extends = v["extends"].get<std::string>();
        v.erase("extends");
      }
      schema_.check(arm.overrides, "", label, file_);
      r.arms.push_back(std::move(arm));
    }
  }

  void check_extends(const Recipe& r) {
    for (const ArmDef& arm : r.arms) {
      if (!arm.extends) continue;
      if (*arm.extends == arm.name)
        throw error(arm.extends_at,
                    fmt::format("arms.{}.extends: an arm cannot extend itself", arm.name));
      if (!r.find_arm(*arm.extends))
        throw error(arm.extends_at,
                    fmt::format("arms.{}.extends: no arm named '{}'{}", arm.name, *arm.extends,
                                arm_hint(r, *arm.extends)));
    }
    // Only now that every parent exists is each chain walkable to its root (or into a cycle):
    // walking earlier would step off a later arm's missing parent.
    for (const ArmDef& arm : r.arms) {
      if (!arm.extends) continue;
      // Walk the chain: a cycle would make the arm's settings undefined.
      std::vector<std::string> chain{arm.name};
      const ArmDef* cur = &arm;
      while (cur->extends) {
        if (std::find(chain.begin(), chain.end(), *cur->extends) != chain.end()) {
          chain.push_back(*cur->extends);
          std::string path;
          for (const auto& n : chain) path += (path.empty() ? "" : " → ") + n;
          throw error(arm.extends_at,
                      fmt::format("arms.{}.extends: arms extend each other in a cycle ({})",
                                  arm.name, path));
        }
        chain.push_back(*cur->extends);
        cur = r.find_arm(*cur->extends);
      }
    }
  }

  static std::string arm_hint(const Recipe& r, const std::string& name) {
    for (const ArmDef& a : r.arms)
      if (edit_distance(a.name, name) <= 2) return fmt::format(" (did you mean '{}'?)", a.name);
    std::string all;
    for (const ArmDef& a : r.arms) all += (all.empty() ? "" : ", ") + a.name;
    return fmt::format("; arms are: {}", all);
  }

  std::string path_hint(const std::string& name) const {
    const size_t dot = name.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    const std::string best = schema_.closest_key(parent, leaf);
    return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", join_path(parent, best));
  }

  void read_grid(const YAML::Node& node, Location key_at, Recipe& r) {
    if (node.IsNull()) return;  // `grid:` with nothing: a single combination
    if (!node.IsMap())
      throw error(YamlConverter::location_of(node, key_at),
                  fmt::format("grid: expected a mapping of axes to lists of values, got {}",
                              type_name(node)));
    std::set<std::string> paths;
    std::set<std::string> names;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const Location name_at = YamlConverter::location_of(it->first, key_at);
      if (!it->first.IsScalar()) throw error(name_at, "grid: axis names must be plain names");
      const std::string name = key_name(it->first, name_at, "grid");
      // yaml-cpp keeps both of two equal keys; two linked axes of one name would read as one.
      if (!names.insert(name).second)
        throw error(name_at, fmt::format("grid.{}: duplicate axis", name));
      const YAML::Node values = it->second;  // a copy: it-> yields a temporary
      const std::string label = "grid." + name;
      const auto path = schema_.resolve(name);
      if (!path && holds_a_mapping(values)) {
        read_linked_axis(name, name_at, values, paths, r);
        continue;
      }
      GridAxis axis;
      axis.at = name_at;
      axis.name = name;
      if (!path) {
        const std::string why = (axis.name == "arm" || axis.name == "arms")
                                    ? "; arms are listed under `arms`, every axis is crossed "
                                      "with every arm"
                                    : path_hint(axis.name);
        throw error(axis.at, fmt::format("grid: '{}' is not a config path{} (an axis of another "
                                         "name links several paths: a list of mappings like "
                                         "{{model: llama-20m, train.max_tokens: 1e8}})",
                                         axis.name, why));
      }
      axis.path = *path;
      claim_path(axis.path, label, axis.at, paths);
      if (!values.IsSequence())
        throw error(values.IsNull() ? axis.at : YamlConverter::location_of(values, axis.at),
                    fmt::format("{}: expected a list of values (e.g. [1, 2, 3]), got {}", label,
                                type_name(values)));
      if (values.size() == 0) throw error(axis.at, fmt::format("{}: the list is empty", label));
      size_t i = 0;
      for (const YAML::Node& item : values) {
        const std::string item_label = fmt::format("{}[{}]", label, i++);
        LocatedJson v = yaml_.convert(item, item_label, YamlConverter::location_of(values));
        schema_.check(v, axis.path, item_label, file_);
        for (size_t j = 0; j < axis.values.size(); ++j)
          if (axis.values[j].value == v.value)
            throw error(v.where(""), fmt::format("{}: value {} is already listed (as {}[{}])",
                                                 item_label, v.value.dump(), label, j));
        axis.values.push_back(std::move(v));
      }
      r.grid.push_back(std::move(axis));
    }
  }

  // A list with a mapping in it, under a name that is no config path: meant as a linked axis.
  static bool holds_a_mapping(const YAML::Node& values) {
    if (!values.IsSequence()) return false;
    for (const YAML::Node& item : values)
      if (item.IsMap()) return true;
    return false;
  }

  // One value may be set by one axis only: a path twice (or a path and one below it) would be
  // set twice per run.
  void claim_path(const std::string& path, const std::string& label, Location at,
                  std::set<std::string>& paths) const {
    for (const std::string& other : paths)
      if (other == path || other.rfind(path + ".", 0) == 0 || path.rfind(other + ".", 0) == 0)
        throw error(at, fmt::format("{}: overlaps another axis ({}): one value would be "
                                    "set twice",
                                    label, other));
    paths.insert(path);
  }

  // `NAME: [{path: value, …}, …]` where NAME is not a config path: every mapping sets the same
  // paths; the i-th mapping's values go together into the i-th grid point of this axis.
  void read_linked_axis(const std::string& name, Location name_at, const YAML::Node& values,
                        std::set<std::string>& paths, Recipe& r) {
    if (!valid_name(name, false))
      throw error(name_at, fmt::format("grid: \"{}\" is not a valid name for a linked axis "
                                       "(letters, digits, '.', '_', '-'; at most 64)",
                                       name));
    const std::string label = "grid." + name;
    std::vector<GridAxis> linked;  // one per path, in the first mapping's order
    std::vector<nlohmann::json> seen;
    size_t i = 0;
    for (const YAML::Node& item : values) {
      const std::string item_label = fmt::format("{}[{}]", label, i);
      const Location item_at = YamlConverter::location_of(item, name_at);
      if (!item.IsMap())
        throw error(item_at, fmt::format("{}: expected a mapping of config paths to values (every "
                                         "value of a linked axis is one), got {}",
                                         item_label, type_name(item)));
      if (item.size() == 0)
        throw error(item_at, fmt::format("{}: an empty mapping sets nothing", item_label));
      // Keys are config paths, dotted ones included (`train.max_tokens`), so each value is
      // converted on its own; `settings` is the whole entry, to find an entry listed twice.
      nlohmann::json settings = nlohmann::json::object();
      std::set<std::string> set_here;
      for (auto kv = item.begin(); kv != item.end(); ++kv) {
        const Location key_at = YamlConverter::location_of(kv->first, item_at);
        const std::string key = key_name(kv->first, key_at, item_label);
        const auto path = schema_.resolve(key);
        if (!path)
          throw error(key_at, fmt::format("{}: '{}' is not a config path{}", item_label, key,
                                          path_hint(key)));
        if (set_here.count(*path))
          throw error(key_at, fmt::format("{}: '{}' sets {} again", item_label, key, *path));
        LocatedJson part = yaml_.convert(kv->second, item_label + "." + key, key_at);
        schema_.check(part, *path, item_label + "." + key, file_);
        settings[*path] = part.value;
        auto axis = std::find_if(linked.begin(), linked.end(),
                                 [&](const GridAxis& a) { return a.path == *path; });
        if (i == 0) {
          GridAxis a;
          a.name = key;
          a.path = *path;
          a.at = key_at;
          a.link = name;
          claim_path(a.path, item_label + "." + key, a.at, paths);
          linked.push_back(std::move(a));
          axis = linked.end() - 1;
        } else if (axis == linked.end() || axis->values.size() != i) {
          throw error(key_at, fmt::format("{}: sets '{}', which {}[0] does not (every value of "
                                          "a linked axis sets the same paths: {})",
                                          item_label, key, label, path_list(linked)));
        }
        set_here.insert(*path);
        axis->values.push_back(std::move(part));
      }
      for (const GridAxis& a : linked)
        if (!set_here.count(a.path))
          throw error(item_at, fmt::format("{}: does not set '{}', which {}[0] does (every value "
                                           "of a linked axis sets the same paths: {})",
                                           item_label, a.name, label, path_list(linked)));
      for (size_t j = 0; j < seen.size(); ++j)
        if (seen[j] == settings)
          throw error(item_at, fmt::format("{}: the same settings as {}[{}]", item_label, label, j));
      seen.push_back(std::move(settings));
      ++i;
    }
    for (GridAxis& a : linked) r.grid.push_back(std::move(a));
  }

  static std::string path_list(const std::vector<GridAxis>& axes) {
    std::string s;
    for (const GridAxis& a : axes) s += (s.empty() ? "" : ", ") + a.name;
    return s;
  }

  void read_target(const YAML::Node& node, Location key_at, Recipe& r) {
    TargetSpec& t = r.target;
    t.at = key_at;
    if (node.IsNull()) return;
    const LocatedJson v = yaml_.convert(node, "target", key_at);
    if (!v.value.is_object())
      throw error(v.where(""), fmt::format("target: expected a mapping ({{val_loss: 3.3}}, "
                                           "{{perplexity: 27.1}} or {{from_arm: ARM, "
                                           "at_fraction: 0.8}}), got {}",
                                           v.value.dump().substr(0, 40)));
    for (const auto& item : v.value.items()) {
      const std::string& k = item.key();
      const json& x = item.value();
      const Location at = v.where(k);
      if (k == "val_loss") {
        if (!x.is_number() || x.get<double>() <= 0)
          throw error(at, fmt::format("target.val_loss: expected a positive number, got {}",
                                      x.dump()));
        t.val_loss = x.get<double>();
      } else if (k == "perplexity") {
        // Kept as the loss it stands for (contract/perplexity.h); the YAML reader refuses
        // non-finite numbers already.
        if (!x.is_number() || !(x.get<double>() > 1))
          throw error(at, fmt::format("target.perplexity: expected a finite number > 1 (the "
                                      "loss is its logarithm), got {}",
                                      x.dump()));
        t.perplexity = x.get<double>();
        t.val_loss = contract::loss_of_perplexity(*t.perplexity);
      } else if (k == "from_arm") {
        if (!x.is_string())
          throw error(at, fmt::format("target.from_arm: expected an arm name, got {}", x.dump()));
        t.from_arm = x.get<std::string>();
        t.from_arm_at = at;
        if (!r.find_arm(*t.from_arm))
          throw error(at, fmt::format("target.from_arm: no arm named '{}'{}", *t.from_arm,
                                      arm_hint(r, *t.from_arm)));
      } else if (k == "at_fraction") {
        if (!x.is_number() || x.get<double>() <= 0 || x.get<double>() > 1)
          throw error(at, fmt::format("target.at_fraction: expected a number in (0, 1], got {}",
                                      x.dump()));
        t.at_fraction = x.get<double>();
      } else if (k == "stop_at_target") {
        if (!x.is_boolean())
          throw error(at, fmt::format("target.stop_at_target: expected true or false, got {}",
                                      x.dump()));
        t.stop_at_target = x.get<bool>();
      } else if (k == "min_ceiling") {
        // A fraction of extra tokens (0.5 = +50 %); the YAML reader refuses non-finite numbers.
        if (!x.is_number() || !(x.get<double>() > 0))
          throw error(at, fmt::format("target.min_ceiling: expected a positive number (a fraction "
                                      "of extra tokens: 0.5 = +50 %), got {}",
                                      x.dump()));
        t.min_ceiling = x.get<double>();
      } else if (k == "stop_hopeless") {
        if (!x.is_boolean())
          throw error(at, fmt::format("target.stop_hopeless: expected true or false, got {}", x.dump()));
        t.stop_hopeless = x.get<bool>();
      } else if (k == "hopeless_confidence") {
        // The confidence with which a run must be projected not to reach before it is stopped.
        if (!x.is_number() || !(x.get<double>() > 0.5 && x.get<double>() < 1))
          throw error(at, fmt::format("target.hopeless_confidence: expected a number in (0.5, 1), "
                                      "got {}",
                                      x.dump()));
        t.hopeless_confidence = x.get<double>();
      } else {
        throw error(v.where_key(k),
                    fmt::format("target: unknown key '{}'; expected one of: val_loss, perplexity, "
                                "from_arm, at_fraction, stop_at_target, min_ceiling, "
                                "stop_hopeless, hopeless_confidence",
                                k));
      }
    }
    if (v.value.contains("val_loss") && v.value.contains("perplexity"))
      throw error(v.where_key("perplexity"),
                  "target: give either val_loss or perplexity (its exponential), not both");
    if (t.val_loss && t.from_arm)
      throw error(v.where_key("from_arm"),
                  fmt::format("target: give either {} (a fixed target) or from_arm (derived from "
                              "a baseline arm), not both",
                              t.perplexity ? "perplexity" : "val_loss"));
    if (t.stop_hopeless.value_or(false) && !t.val_loss && !t.from_arm)
      throw error(v.where_key("stop_hopeless"),
                  "target.stop_hopeless: needs a target to judge against (val_loss, perplexity or "
                  "from_arm)");
    if (!t.val_loss && !t.from_arm)
      throw error(v.where(""), "target: needs val_loss (e.g. 3.3), perplexity (e.g. 27.1) or "
                               "from_arm (a baseline arm)");
    if (v.value.contains("at_fraction") && !t.from_arm)
      throw error(v.where_key("at_fraction"), "target.at_fraction: only meaningful with from_arm");
    // stop_at_target with from_arm: the runs stop once the target, fixed mid-sweep, reaches them
    // (docs/design.md §5, "Live targets").
    if (t.min_ceiling && !t.from_arm)
      throw error(v.where_key("min_ceiling"),
                  "target.min_ceiling: only meaningful with from_arm (a fixed loss's tokens to "
                  "target are not known before the runs)");
  }

  std::vector<Selector> read_selectors(const YAML::Node& node, Location key_at,
                                       const std::string& section, const Recipe& r) {
    std::vector<Selector> out;
    if (node.IsNull()) return out;
    if (!node.IsSequence())
      throw error(YamlConverter::location_of(node, key_at),
                  fmt::format("{}: expected a list of entries like {{arm: F, seed: 4}}, got {}",
                              section, type_name(node)));
    size_t index = 0;
    for (const YAML::Node& entry : node) {
      const std::string label = fmt::format("{}[{}]", section, index++);
      Selector s;
      s.at = YamlConverter::location_of(entry, key_at);
      if (!entry.IsMap())
        throw error(s.at, fmt::format("{}: expected a mapping like {{arm: F, seed: 4}}, got {}",
                                      label, type_name(entry)));
      for (auto it = entry.begin(); it != entry.end(); ++it) {
        const Location at = YamlConverter::location_of(it->first, s.at);
        const std::string name = key_name(it->first, at, label);
        if (name == "arm") {
          if (s.arm) throw error(at, fmt::format("{}.arm: given twice", label));
          const LocatedJson v = yaml_.convert(it->second, label + ".arm", at);
          if (!v.value.is_string())
            throw error(v.where(""), fmt::format("{}.arm: expected an arm name, got {}", label,
                                                 v.value.dump()));
          s.arm = v.value.get<std::string>();
          s.arm_at = v.where("");
          if (!r.find_arm(*s.arm))
            throw error(s.arm_at, fmt::format("{}.arm: no arm named '{}'{}", label, *s.arm,
                                              arm_hint(r, *s.arm)));
          continue;
        }
        const auto path = schema_.resolve(name);
        if (!path)
          throw error(at, fmt::format("{}: '{}' is not a config path{}", label, name,
                                      path_hint(name)));
        for (const auto& a : s.assignments)
          if (a.path == *path)
            throw error(at, fmt::format("{}: '{}' is given twice", label, name));
        if (section == "exclude") {
          const bool is_axis = std::any_of(r.grid.begin(), r.grid.end(),
                                           [&](const GridAxis& g) { return g.path == *path; });
          if (!is_axis)
            throw error(at, fmt::format("{}: '{}' is not a grid axis; exclude entries match "
                                        "arms and grid axis values",
                                        label, name));
        }
        Selector::Assignment a{name, *path, at, yaml_.convert(it->second, label + "." + name, at)};
        schema_.check(a.value, *path, label + "." + name, file_);
        s.assignments.push_back(std::move(a));
      }
      if (section == "include" && !s.arm)
        throw error(s.at, fmt::format("{}: an include entry needs `arm` (which arm to add the "
                                      "run to)",
                                      label));
      if (!s.arm && s.assignments.empty())
        throw error(s.at, fmt::format("{}: an empty entry would match every run", label));
      out.push_back(std::move(s));
    }
    return out;
  }

  std::string file_;
  const std::string& text_;
  YamlConverter yaml_;
  ConfigSchema schema_;
};

}  // namespace

// The stored target is the loss alone (a perplexity target is stored as its logarithm): one
// definition for the trainer, the store's views and the tables.
json TargetSpec::as_json() const {
  json j = json::object();
  if (val_loss) j["val_loss"] = *val_loss;
  if (from_arm) {
    j["from_arm"] = *from_arm;
    j["at_fraction"] = at_fraction;
  }
  if (val_loss || from_arm) j["stop_at_target"] = stop_at_target;
  // Only when set: a recipe without it keeps the stored target section it always had (a
  // changed section forgets a resolved target, results/store.h).
  if (min_ceiling) j["min_ceiling"] = *min_ceiling;
  if (stop_hopeless) j["stop_hopeless"] = *stop_hopeless;
  if (hopeless_confidence) j["hopeless_confidence"] = *hopeless_confidence;
  return j;
}

std::vector<std::vector<size_t>> Recipe::grid_dimensions() const {
  std::vector<std::vector<size_t>> dims;
  for (size_t g = 0; g < grid.size(); ++g) {
    const bool joins = g > 0 && !grid[g].link.empty() && grid[g].link == grid[g - 1].link;
    if (joins) {
      dims.back().push_back(g);
    } else {
      dims.push_back({g});
    }
  }
  return dims;
}

double Recipe::grid_points() const {
  double points = 1;
  for (const auto& dim : grid_dimensions())
    points *= static_cast<double>(grid[dim.front()].values.size());
  return points;
}

const ArmDef* Recipe::find_arm(const std::string& arm_name) const {
  for (const ArmDef& a : arms)
    if (a.name == arm_name) return &a;
  return nullptr;
}

Recipe parse_recipe(const std::string& text, const std::string& file) {
  return Loader(text, file).load();
}

Recipe load_recipe(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) throw RecipeError(path, {}, "is a directory, not a recipe file");
  // A device, FIFO or socket would be read until memory runs out (or block forever); opening a
  // FIFO for reading already blocks, so the type is checked before the file is opened.
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw RecipeError(path, {}, "not a regular file (a device, FIFO or socket); a recipe is a "
                                "YAML file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RecipeError(path, {}, "cannot open the recipe (no such file, or not readable)");
  // Read at most one byte past the cap: a regular file can still be endless (/proc) or huge.
  std::string text(kMaxRecipeBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw RecipeError(path, {}, "cannot read the recipe");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxRecipeBytes)
    throw RecipeError(path, {}, fmt::format("larger than {} bytes (1 MiB); a recipe is a short "
                                            "YAML file",
                                            kMaxRecipeBytes));
  return parse_recipe(text, path);
}

bool valid_sweep_name(const std::string& name) { return valid_name(name, false); }

}  // namespace mxablate::orchestrator
