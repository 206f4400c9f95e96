// Aligned plain-text tables for plan / status / query, and durations. (CSV fields and every other
// output format's escaping: mxablate/analysis/escape.h.)
#pragma once

#include <string>
#include <vector>

namespace mxablate::orchestrator {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Columns whose cells are all numbers (or "-") are right-aligned. Each line ends in '\n';
  // `indent` spaces precede every line. Headers and cells are shown through escape::terminal:
  // a control character or an invalid UTF-8 byte in them appears as "\x1b", "\xff", ...
  std::string render(size_t indent = 0) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "90" / "90s" / "15m" / "2h" → milliseconds; throws std::invalid_argument with a message.
long long parse_duration_ms(const std::string& text);

}  // namespace mxablate::orchestrator
