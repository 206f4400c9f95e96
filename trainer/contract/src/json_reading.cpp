// The JSON reading toolkit (json_reading.h): one value into one typed field, one object key
// by key. The run config's section readers (run_config.cpp, quant_keys.cpp) are built from it.
#include "json_reading.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "mxablate/kernels/quant_spec.h"

namespace mxablate::contract::detail {
namespace {

using nlohmann::json;

// A name from a setting's table: "expected one of a, b, c, got "x"".
template <typename E>
void read_name(const json& v, const std::string& path, E& out,
               std::optional<E> (*parse)(std::string_view), std::string (*names)()) {
  std::string s;
  read_value(v, path, s);
  const std::optional<E> parsed = parse(s);
  if (!parsed) throw ConfigError(path + ": expected one of " + names() + ", got " + shown(v));
  out = *parsed;
}

template <typename E>
void read_name_set(const json& v, const std::string& path, EnumSet<E>& out,
                   std::optional<E> (*parse)(std::string_view), std::string (*names)()) {
  if (!v.is_array()) throw ConfigError(path + ": expected a list, got " + shown(v));
  out = {};
  for (size_t i = 0; i < v.size(); ++i) {
    E e{};
    read_name(v[i], path + "[" + std::to_string(i) + "]", e, parse, names);
    out.add(e);
  }
}

}  // namespace

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A value as it appears in an error message: JSON text, with invalid UTF-8 replaced (a config
// built in-process from YAML may carry any bytes) and non-finite numbers spelled out (JSON would
// print them as null).
std::string shown(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    const double d = v.get<double>();
    return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

void read_value(const json& v, const std::string& path, double& out) {
  if (!v.is_number()) throw ConfigError(path + ": expected a number, got " + shown(v));
  out = v.get<double>();
  if (!std::isfinite(out)) throw ConfigError(path + ": must be a finite number, got " + shown(v));
}

void read_value(const json& v, const std::string& path, int64_t& out) {
  // YAML writes 100e6 as a float; accept any number with an integral value.
  if (!v.is_number()) throw ConfigError(path + ": expected an integer, got " + shown(v));
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d)
      throw ConfigError(path + ": expected an integer, got " + shown(v));
    if (std::fabs(d) > kLargestFloatInteger)
      throw ConfigError(path + ": out of range (beyond 9e15 write an integer digit by digit, "
                        "without an exponent), got " + shown(v));
    out = static_cast<int64_t>(d);
  } else if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ConfigError(path + ": out of range (an integer from -9223372036854775808 to "
                        "9223372036854775807), got " + shown(v));
    out = static_cast<int64_t>(v.get<uint64_t>());
  } else {
    out = v.get<int64_t>();
  }
}

void read_value(const json& v, const std::string& path, int& out) {
  int64_t wide = 0;
  read_value(v, path, wide);
  if (wide < -(1ll << 31) || wide >= (1ll << 31))
    throw ConfigError(path + ": out of range (an integer from -2147483648 to 2147483647), got " +
                      v.dump());
  out = static_cast<int>(wide);
}

void read_value(const json& v, const std::string& path, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return;
  }
  int64_t wide = 0;
  read_value(v, path, wide);
  if (wide < 0) throw ConfigError(path + ": must be >= 0, got " + shown(v));
  out = static_cast<uint64_t>(wide);
}

void read_value(const json& v, const std::string& path, bool& out) {
  if (!v.is_boolean()) throw ConfigError(path + ": expected true or false, got " + shown(v));
  out = v.get<bool>();
}

// Strings end up in file names, event logs and SQLite: they must be valid UTF-8 without NULs.
void read_value(const json& v, const std::string& path, std::string& out) {
  if (!v.is_string()) throw ConfigError(path + ": expected a string, got " + shown(v));
  try {
    (void)v.dump();  // throws on invalid UTF-8
  } catch (const json::type_error&) {
    throw ConfigError(path + ": not valid UTF-8, got " + shown(v));
  }
  out = v.get<std::string>();
  if (out.find('\0') != std::string::npos)
    throw ConfigError(path + ": contains a NUL character, got " + shown(v));
}


void read_value(const json& v, const std::string& path, std::optional<double>& out) {
  if (v.is_null()) {
    out.reset();
    return;
  }
  double d = 0;
  read_value(v, path, d);
  out = d;
}

void read_value(const json& v, const std::string& path, GemmPrecision& out) {
  read_name(v, path, out, parse_gemm_precision, gemm_precision_names);
}
void read_value(const json& v, const std::string& path, ScaleRule& out) {
  read_name(v, path, out, kernels::parse_scale_rule, kernels::scale_rule_names);
}
void read_value(const json& v, const std::string& path, HadamardMode& out) {
  read_name(v, path, out, kernels::parse_hadamard_mode, kernels::hadamard_mode_names);
}
void read_value(const json& v, const std::string& path, kernels::BlockShape& out) {
  read_name(v, path, out, kernels::parse_block_shape, kernels::block_shape_names);
}
void read_value(const json& v, const std::string& path, GemmPath& out) {
  read_name(v, path, out, parse_gemm_path, gemm_path_names);
}
void read_value(const json& v, const std::string& path, Device& out) {
  read_name(v, path, out, parse_device, device_names);
}
void read_value(const json& v, const std::string& path, ShardLevel& out) {
  read_name(v, path, out, parse_shard_level, shard_level_names);
}

void read_value(const json& v, const std::string& path, CudaGraphs& out) {
  read_name(v, path, out, parse_cuda_graphs, cuda_graphs_names);
}
void read_value(const json& v, const std::string& path, OperandClassSet& out) {
  read_name_set(v, path, out, parse_operand_class, operand_class_names);
}
void read_value(const json& v, const std::string& path, GemmSet& out) {
  read_name_set(v, path, out, kernels::parse_gemm_kind, kernels::gemm_kind_names);
}

// A message as one line: a value quoted in it may hold control characters (a string from YAML),
// shown as escapes.
std::string one_line(const std::string& m) {
  std::string out;
  for (const char ch : m) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u != 0x7f) {
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

// An unknown key as it appears in an error message: as is when it is plain, else quoted.
std::string shown_key(const std::string& key) {
  const std::string quoted = shown(json(key));
  return quoted.size() == key.size() + 2 && quoted.substr(1, key.size()) == key ? key : quoted;
}

ObjectReader::ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object())
    throw ConfigError((path_.empty() ? "config" : path_) + ": expected an object, got " +
                      shown(j_));
}

const json* ObjectReader::child(const std::string& key) {
  seen_.insert(key);
  const auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

void ObjectReader::finish() const {
  for (const auto& item : j_.items())
    if (!seen_.count(item.key()))
      throw ConfigError(join(path_, shown_key(item.key())) + ": unknown key");
}

void require(bool ok, const std::string& path, const std::string& what, const json& got) {
  if (!ok) throw ConfigError(path + ": " + what + ", got " + shown(got));
}

}  // namespace mxablate::contract::detail
