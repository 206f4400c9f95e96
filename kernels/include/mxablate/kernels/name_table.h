// One table of names per setting: the parser, the error messages ("one of: a, b, c"), the
// printers and the JSON writer all read the same table, so a name is spelled once. Used for the
// kernels' enums (quant_spec.cpp) and the run config's (contract/quant_settings.h).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mxablate::kernels {

template <typename Enum, size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

template <typename Enum, size_t N>
constexpr std::string_view name_of(const NameTable<Enum, N>& table, Enum v) {
  for (const auto& [e, name] : table)
    if (e == v) return name;
  return "?";
}

template <typename Enum, size_t N>
constexpr std::optional<Enum> parse_from(const NameTable<Enum, N>& table, std::string_view s) {
  for (const auto& [e, name] : table)
    if (name == s) return e;
  return std::nullopt;
}

// "a, b, c": the accepted names, for messages.
template <typename Enum, size_t N>
std::string names_of(const NameTable<Enum, N>& table) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += ", ";
    out += entry.second;
  }
  return out;
}

}  // namespace mxablate::kernels
