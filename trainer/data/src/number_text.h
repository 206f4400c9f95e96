// Numbers as the data tables show them (composition.md, collect.md): one definition.
#pragma once

#include <cstdint>
#include <string>

namespace mxablate::data {

// 1234567 → "1,234,567".
inline std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -(v + 1) + uint64_t{1} : uint64_t(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace mxablate::data
