// The toolkit the run config's reader is built from (internal to trainer/contract): strict
// reading of one JSON value into one typed field, and of one JSON object key by key. Every
// refusal is a ConfigError naming the key path and the value as the config holds it
// (docs/design.md §11, "Errors"), so the sections' readers only say which key goes where.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mxablate/contract/quant_settings.h"
#include "mxablate/contract/run_config.h"

namespace mxablate::contract::detail {

// "train" + "lr" → "train.lr"; "" + "device" → "device".
std::string join(const std::string& path, const std::string& key);

// A value as it appears in an error message: JSON text, with invalid UTF-8 replaced and
// non-finite numbers spelled out.
std::string shown(const nlohmann::json& v);
// An unknown key as it appears in an error message: as is when it is plain, else quoted.
std::string shown_key(const std::string& key);
// A message as one line: control characters shown as escapes.
std::string one_line(const std::string& m);

// Throws "PATH: WHAT, got VALUE" unless `ok`.
void require(bool ok, const std::string& path, const std::string& what, const nlohmann::json& got);

// One value into one field, each type with its rules (finite numbers, integers that fit,
// UTF-8 strings without NULs, a setting's names from its name table).
void read_value(const nlohmann::json& v, const std::string& path, double& out);
void read_value(const nlohmann::json& v, const std::string& path, int64_t& out);
void read_value(const nlohmann::json& v, const std::string& path, int& out);
void read_value(const nlohmann::json& v, const std::string& path, uint64_t& out);
void read_value(const nlohmann::json& v, const std::string& path, bool& out);
void read_value(const nlohmann::json& v, const std::string& path, std::string& out);
void read_value(const nlohmann::json& v, const std::string& path, std::optional<double>& out);
void read_value(const nlohmann::json& v, const std::string& path, GemmPrecision& out);
void read_value(const nlohmann::json& v, const std::string& path, ScaleRule& out);
void read_value(const nlohmann::json& v, const std::string& path, HadamardMode& out);
void read_value(const nlohmann::json& v, const std::string& path, kernels::BlockShape& out);
void read_value(const nlohmann::json& v, const std::string& path, GemmPath& out);
void read_value(const nlohmann::json& v, const std::string& path, Device& out);
void read_value(const nlohmann::json& v, const std::string& path, ShardLevel& out);
void read_value(const nlohmann::json& v, const std::string& path, CudaGraphs& out);
void read_value(const nlohmann::json& v, const std::string& path, Recompute& out);
void read_value(const nlohmann::json& v, const std::string& path, Fp8Scaling& out);
void read_value(const nlohmann::json& v, const std::string& path, OperandClassSet& out);
void read_value(const nlohmann::json& v, const std::string& path, GemmSet& out);

// Reads the known keys of one JSON object and rejects the rest.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& j, std::string path);
  template <typename T>
  void get(const std::string& key, T& out) {
    seen_.insert(key);
    const auto it = j_.find(key);
    if (it != j_.end()) read_value(*it, join(path_, key), out);
  }
  // Sets `out` only when the key is present (a patch records what it sets).
  template <typename T>
  void get_optional(const std::string& key, std::optional<T>& out) {
    seen_.insert(key);
    const auto it = j_.find(key);
    if (it == j_.end()) return;
    T value{};
    read_value(*it, join(path_, key), value);
    out = value;
  }
  const nlohmann::json* child(const std::string& key);
  std::string path(const std::string& key) const { return join(path_, key); }
  void finish() const;

 private:
  const nlohmann::json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace mxablate::contract::detail
