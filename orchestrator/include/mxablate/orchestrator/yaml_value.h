// YAML (yaml-cpp) → JSON, remembering where every value and key was written so that errors found
// later — after merging arms and grid axes — can still point at the line and column that caused
// them. Scalars get YAML 1.2 core-schema types (plain `1e-3` is a number, `true` a boolean,
// `~`/empty null, quoted scalars always strings).
//
// Bounded: nesting deeper than `max_depth` or more than `max_nodes` values (aliases count every
// time they are expanded, so an alias "billion laughs" stops early) is an error, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "mxablate/orchestrator/recipe_error.h"

namespace YAML {
class Node;
}

namespace mxablate::orchestrator {

// A converted subtree. Paths are relative to it, dotted for mapping keys and [i] for sequence
// elements: "" is the subtree itself, "train.lr", "quant.hadamard.gemms[1]".
struct LocatedJson {
  nlohmann::json value;
  std::map<std::string, Location> value_at;  // where each value was written
  std::map<std::string, Location> key_at;    // where each mapping key was written

  // The position of `path`'s value, or of its nearest recorded ancestor.
  Location where(const std::string& path) const;
  Location where_key(const std::string& path) const;  // falls back to where(path)
};

// Length of the UTF-8 sequence starting at text[i] (1-4), or 0 when it is not well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) or is a NUL byte. Used for
// raw recipe text and for values decoded from escapes ("\xff", "\udc00"), so that nothing the
// JSON library would refuse to print gets past the recipe's own, located checks.
size_t utf8_sequence_length(const std::string& text, size_t i);
// Byte offset of the first byte that is not well-formed UTF-8 (or a NUL), or npos.
size_t first_invalid_utf8(const std::string& text);

// Joins a path and a key ("" + "a" = "a", "a" + "b" = "a.b").
std::string join_path(const std::string& path, const std::string& key);

class YamlConverter {
 public:
  struct Limits {
    int max_depth = 48;
    int64_t max_nodes = 20000;  // a large real recipe has a few thousand
  };
  explicit YamlConverter(std::string file) : file_(std::move(file)) {}
  YamlConverter(std::string file, Limits limits) : file_(std::move(file)), limits_(limits) {}

  // Converts `node`; `label` names it in messages ("base", "arms.F"), `fallback` is used when
  // yaml-cpp has no position for it (null values).
  LocatedJson convert(const YAML::Node& node, const std::string& label, Location fallback);

  // Position of a yaml-cpp node (1-based), or `fallback` when it has none.
  static Location location_of(const YAML::Node& node, Location fallback = {});

 private:
  nlohmann::json convert_node(const YAML::Node& node, const std::string& path,
                              const std::string& label, int depth, Location fallback,
                              LocatedJson& out);
  nlohmann::json convert_scalar(const YAML::Node& node, const std::string& label,
                                Location at) const;

  std::string file_;
  Limits limits_;
  int64_t nodes_ = 0;  // across every convert() call: the limit is per recipe
};

}  // namespace mxablate::orchestrator
