#include "mxablate/orchestrator/yaml_value.h"

#include <algorithm>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <set>

namespace mxablate::orchestrator {
namespace {

using nlohmann::json;

std::string parent_of(const std::string& path) {
  const size_t bracket = path.rfind('[');
  const size_t dot = path.rfind('.');
  const size_t cut = (bracket == std::string::npos)
                         ? dot
                         : (dot == std::string::npos ? bracket : std::max(bracket, dot));
  return cut == std::string::npos ? std::string() : path.substr(0, cut);
}

// How a plain scalar reads as a number: not one, one, or one whose spelling is a number but whose
// value the type cannot hold (so that "1e999" says "out of range", not "expected a number").
enum class NumberRead { kNotANumber, kOk, kOutOfRange };

NumberRead full_match_int(const std::string& s, int64_t& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  if (b == e) return NumberRead::kNotANumber;
  const auto [p, ec] = std::from_chars(b, e, out);
  if (p != e) return NumberRead::kNotANumber;
  if (ec == std::errc::result_out_of_range) return NumberRead::kOutOfRange;
  return ec == std::errc() ? NumberRead::kOk : NumberRead::kNotANumber;
}

// YAML 1.2 core schema float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, plus the
// .inf/.nan spellings (recognised so that they can be rejected with a clear message).
NumberRead full_match_float(const std::string& s, double& out) {
  std::string t = s;
  if (!t.empty() && t[0] == '+') t.erase(0, 1);
  if (t.empty()) return NumberRead::kNotANumber;
  const char first = t[0] == '-' ? (t.size() > 1 ? t[1] : '\0') : t[0];
  if (!(std::isdigit(static_cast<unsigned char>(first)) || first == '.'))
    return NumberRead::kNotANumber;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (p != t.data() + t.size()) return NumberRead::kNotANumber;
  if (ec == std::errc::result_out_of_range) return NumberRead::kOutOfRange;
  if (ec != std::errc()) return NumberRead::kNotANumber;
  return std::isfinite(out) ? NumberRead::kOk : NumberRead::kOutOfRange;
}

// Why a number-shaped spelling has no double value: too large, or too close to zero.
std::string float_range_text(const std::string& s) {
  const size_t e = s.find_first_of("eE");
  const bool tiny = e != std::string::npos && e + 1 < s.size() && s[e + 1] == '-';
  return tiny ? "too close to 0; a number must be 0 or at least about 2.2e-308 in magnitude"
              : "a number must be at most about 1.8e308 in magnitude";
}

bool is_non_finite_spelling(const std::string& s) {
  static const std::set<std::string> names{".inf", "+.inf", "-.inf", ".Inf", "+.Inf", "-.Inf",
                                           ".INF", "+.INF", "-.INF", ".nan", ".NaN", ".NAN"};
  return names.count(s) > 0;
}

}  // namespace

size_t utf8_sequence_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = byte(0);
  if (c == 0) return 0;
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((byte(k) & 0xC0) != 0x80) return 0;
  return len;
}

size_t first_invalid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_sequence_length(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string::npos;
}

std::string join_path(const std::string& path, const std::string& key) {
  if (key.empty()) return path;
  return path.empty() ? key : path + "." + key;
}

Location LocatedJson::where(const std::string& path) const {
  std::string p = path;
  while (true) {
    const auto it = value_at.find(p);
    if (it != value_at.end() && it->second.known()) return it->second;
    if (p.empty()) return {};
    p = parent_of(p);
  }
}

Location LocatedJson::where_key(const std::string& path) const {
  const auto it = key_at.find(path);
  if (it != key_at.end() && it->second.known()) return it->second;
  return where(path);
}

Location YamlConverter::location_of(const YAML::Node& node, Location fallback) {
  const YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0) return fallback;
  return {m.line + 1, m.column + 1};
}

LocatedJson YamlConverter::convert(const YAML::Node& node, const std::string& label,
                                   Location fallback) {
  LocatedJson out;
  out.value = convert_node(node, "", label, 0, fallback, out);
  return out;
}

json YamlConverter::convert_node(const YAML::Node& node, const std::string& path,
                                 const std::string& label, int depth, Location fallback,
                                 LocatedJson& out) {
  // A null value's mark points past it (at the next token); the key's position is better.
  const Location at = node.IsNull() ? fallback : location_of(node, fallback);
  const std::string name = join_path(label, path);
  // Paths inside deep or alias-expanded values get long; the position says where anyway.
  const std::string short_name = name.size() > 60 ? name.substr(0, 57) + "..." : name;
  if (++nodes_ > limits_.max_nodes)
    throw RecipeError(file_, at,
                      fmt::format("{}: the recipe expands to more than {} values (aliases "
                                  "included); refusing to go on",
                                  name.empty() ? "recipe" : short_name, limits_.max_nodes));
  if (depth > limits_.max_depth)
    throw RecipeError(file_, at,
                      fmt::format("{}: nested more than {} levels deep",
                                  name.empty() ? "recipe" : short_name, limits_.max_depth));
  out.value_at[path] = at;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      return convert_scalar(node, name, at);
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      size_t i = 0;
      for (const YAML::Node& item : node) {
        const std::string child = path + "[" + std::to_string(i++) + "]";
        arr.push_back(convert_node(item, child, label, depth + 1, at, out));
      }
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node key = it->first;  // a copy: it-> yields a temporary
        const Location key_at = location_of(key, at);
        if (!key.IsScalar())
          throw RecipeError(file_, key_at,
                            fmt::format("{}: mapping keys must be plain names",
                                        name.empty() ? "recipe" : name));
        const std::string k = key.Scalar();
        if (first_invalid_utf8(k) != std::string::npos)
          throw RecipeError(file_, key_at,
                            fmt::format("{}: a key is not valid UTF-8 (or holds a NUL), e.g. "
                                        "from an escape like \\xff or \\udc00",
                                        name.empty() ? "recipe" : short_name));
        if (k == "<<")
          throw RecipeError(file_, key_at,
                            fmt::format("{}: YAML merge keys (<<) are not supported; use an "
                                        "arm's `extends` instead",
                                        name.empty() ? "recipe" : name));
        if (k.empty() || k.find_first_of("[]") != std::string::npos)
          throw RecipeError(file_, key_at,
                            fmt::format("{}: \"{}\" is not a valid key", name.empty() ? "recipe" : name, k));
        if (k.find('.') != std::string::npos)
          throw RecipeError(file_, key_at,
                            fmt::format("{}: dotted key \"{}\" is not allowed here; write it as "
                                        "nested mappings ({}: {{{}: …}})",
                                        name.empty() ? "recipe" : name, k, k.substr(0, k.find('.')),
                                        k.substr(k.find('.') + 1)));
        const std::string child = join_path(path, k);
        if (obj.contains(k))
          throw RecipeError(file_, key_at,
                            fmt::format("{}: duplicate key '{}' (first written at line {})",
                                        join_path(label, child), k, out.key_at[child].line));
        out.key_at[child] = key_at;
        obj[k] = convert_node(it->second, child, label, depth + 1, key_at, out);
      }
      return obj;
    }
  }
  return json(nullptr);
}

json YamlConverter::convert_scalar(const YAML::Node& node, const std::string& name,
                                   Location at) const {
  const std::string& s = node.Scalar();
  const std::string& tag = node.Tag();
  // Escapes in quoted scalars ("\xff", "\udc00", "\0") decode to bytes the raw-text check
  // never saw; the JSON library would later refuse them with an unlocated message.
  if (first_invalid_utf8(s) != std::string::npos)
    throw RecipeError(file_, at,
                      fmt::format("{}: the value is not valid UTF-8 (or holds a NUL), e.g. from an "
                                  "escape like \\xff or \\udc00",
                                  name.empty() ? "recipe" : name));
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(s);  // quoted or !!str
  const bool plain = tag == "?" || tag.empty();
  const auto bad_tag = [&] {
    return RecipeError(file_, at,
                       fmt::format("{}: cannot read \"{}\" as tagged ({})",
                                   name.empty() ? "recipe" : name, s, tag));
  };
  if (plain || tag == "tag:yaml.org,2002:null") {
    if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return json(nullptr);
    if (!plain) throw bad_tag();
  }
  if (plain || tag == "tag:yaml.org,2002:bool") {
    if (s == "true" || s == "True" || s == "TRUE") return json(true);
    if (s == "false" || s == "False" || s == "FALSE") return json(false);
    if (!plain) throw bad_tag();
  }
  if (plain || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float") {
    const std::string label = name.empty() ? "recipe" : name;
    int64_t i = 0;
    const NumberRead as_int =
        tag == "tag:yaml.org,2002:float" ? NumberRead::kNotANumber : full_match_int(s, i);
    if (as_int == NumberRead::kOk) return json(i);
    if (as_int == NumberRead::kOutOfRange && tag == "tag:yaml.org,2002:int")
      throw RecipeError(file_, at,
                        fmt::format("{}: {} is out of range (an integer from {} to {})", label, s,
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max()));
    double d = 0;
    const NumberRead as_float =
        tag == "tag:yaml.org,2002:int" ? NumberRead::kNotANumber : full_match_float(s, d);
    // An integer beyond int64 stays a number (a float); the schema decides whether the key
    // takes one that large.
    if (as_float == NumberRead::kOk) return json(d);
    if (as_float == NumberRead::kOutOfRange)
      throw RecipeError(file_, at,
                        fmt::format("{}: {} is out of range ({})", label, s, float_range_text(s)));
    if (is_non_finite_spelling(s))
      throw RecipeError(file_, at,
                        fmt::format("{}: non-finite numbers ({}) are not allowed",
                                    name.empty() ? "recipe" : name, s));
    if (!plain) throw bad_tag();
    return json(s);
  }
  throw RecipeError(file_, at,
                    fmt::format("{}: unsupported YAML tag {}", name.empty() ? "recipe" : name, tag));
}

}  // namespace mxablate::orchestrator
