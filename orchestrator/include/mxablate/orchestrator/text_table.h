// Aligned plain-text tables for plan / status / query, and CSV cells.
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
  // `indent` spaces precede every line.
  std::string render(size_t indent = 0) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// RFC 4180: quoted when it holds a comma, quote or line break.
std::string csv_cell(const std::string& s);

// "90" / "90s" / "15m" / "2h" → milliseconds; throws std::invalid_argument with a message.
long long parse_duration_ms(const std::string& text);

}  // namespace mxablate::orchestrator
