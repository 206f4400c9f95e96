// The JSON reading toolkit (json_reading.h): one value into one typed field, one object key
// by key. The run config's section readers (run_config.cpp, quant_keys.cpp) are built from it.
#include "json_reading.h"

#include <cstdio>

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

// The value rules are json_file.h's (one definition for every JSON reader); a refusal here is a
// ConfigError at the key's path.
std::string shown(const json& v) { return shown_json(v); }

namespace {

template <typename T>
void read_scalar(const json& v, const std::string& path, T& out) {
  if (const std::string why = json_to(v, out); !why.empty()) throw ConfigError(path + ": " + why);
}

}  // namespace

void read_value(const json& v, const std::string& path, double& out) { read_scalar(v, path, out); }
void read_value(const json& v, const std::string& path, int64_t& out) { read_scalar(v, path, out); }
void read_value(const json& v, const std::string& path, int& out) { read_scalar(v, path, out); }
void read_value(const json& v, const std::string& path, uint64_t& out) { read_scalar(v, path, out); }
void read_value(const json& v, const std::string& path, bool& out) { read_scalar(v, path, out); }
void read_value(const json& v, const std::string& path, std::string& out) {
  read_scalar(v, path, out);
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

// "selective" or "selective+N" (N from 0, which is "selective", to the most layers), else nullopt.
// Every block recomputed whole is `true`: no block is left to recompute selectively.
std::optional<Recompute> parse_selective(const std::string& text) {
  const std::string prefix = "selective";
  if (text.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = text.substr(prefix.size());
  if (rest.empty()) return Recompute{Recompute::Mode::kNone, 0, true};
  const std::string digits = rest.substr(1);
  if (rest[0] != '+' || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int n = std::stoi(digits);
  if (n > kMaxModelLayers) return std::nullopt;
  // One identity per setting: +0 is "selective" itself.
  return n == 0 ? Recompute{Recompute::Mode::kNone, 0, true} : Recompute{Recompute::Mode::kFirstBlocks, n, true};
}

void read_value(const json& v, const std::string& path, Recompute& out) {
  const std::string expected = "expected true, false, auto, selective, selective+N (N blocks recomputed whole "
                               "besides) or a number of blocks from 0 to " +
                               std::to_string(kMaxModelLayers) + ", got " + shown(v);
  if (v.is_boolean()) {
    out = {v.get<bool>() ? Recompute::Mode::kAll : Recompute::Mode::kNone, 0};
  } else if (v.is_string()) {
    const std::string text = v.get<std::string>();
    if (text == "auto") {
      out = {Recompute::Mode::kAuto, 0};
    } else if (const std::optional<Recompute> selective = parse_selective(text)) {
      out = *selective;
    } else {
      throw ConfigError(path + ": " + expected);
    }
  } else if (v.is_number()) {
    int64_t n = 0;
    if (!json_to(v, n).empty() || n < 0 || n > kMaxModelLayers) throw ConfigError(path + ": " + expected);
    // 0 blocks is false's setting, written as false (one identity per setting).
    out = n == 0 ? Recompute{} : Recompute{Recompute::Mode::kFirstBlocks, static_cast<int>(n)};
  } else {
    throw ConfigError(path + ": " + expected);
  }
}

void read_value(const json& v, const std::string& path, Fp8Scaling& out) {
  read_name(v, path, out, parse_fp8_scaling, fp8_scaling_names);
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

std::string shown_key(const std::string& key) { return shown_json_key(key); }

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
