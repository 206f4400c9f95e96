#include "mxablate/orchestrator/text_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "mxablate/analysis/escape.h"

namespace mxablate::orchestrator {
namespace {

bool numeric(const std::string& s) {
  if (s == "-" || s.empty()) return true;
  double d = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  const auto [p, ec] = std::from_chars(b, e, d);
  return ec == std::errc() && p == e;
}

// Display width: UTF-8 continuation bytes take no column.
size_t width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

// Cells are stored as they will be shown: control characters and escape sequences from the data
// never reach the terminal, and widths are those of the shown text.
TextTable::TextTable(std::vector<std::string> headers) {
  for (const auto& h : headers) headers_.push_back(escape::terminal(h));
}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (auto& c : cells) c = escape::terminal(c);
  rows_.push_back(std::move(cells));
}

std::string TextTable::render(size_t indent) const {
  const size_t n = headers_.size();
  std::vector<size_t> w(n);
  std::vector<bool> right(n, true);
  for (size_t c = 0; c < n; ++c) {
    w[c] = width(headers_[c]);
    bool any = false;
    for (const auto& row : rows_) {
      w[c] = std::max(w[c], width(row[c]));
      if (!numeric(row[c])) right[c] = false;
      any = any || (row[c] != "-" && !row[c].empty());
    }
    if (!any) right[c] = false;
  }
  std::string out;
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string l(indent, ' ');
    for (size_t c = 0; c < n; ++c) {
      const size_t pad = w[c] - width(cells[c]);
      if (c > 0) l += "  ";
      if (right[c]) l += std::string(pad, ' ') + cells[c];
      else l += cells[c] + (c + 1 < n ? std::string(pad, ' ') : "");
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
  return out;
}

long long parse_duration_ms(const std::string& text) {
  const auto bad = [&] {
    return std::invalid_argument("'" + text +
                                 "' is not a duration (e.g. 90, 90s, 15m, 2h; 0 for none)");
  };
  if (text.empty()) throw bad();
  double value = 0;
  const char* b = text.data();
  const char* e = text.data() + text.size();
  const auto [p, ec] = std::from_chars(b, e, value);
  if (ec != std::errc() || value < 0 || !std::isfinite(value)) throw bad();
  const std::string unit(p, e);
  double scale = 1000;
  if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "ms") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60000;
  else if (unit == "h") scale = 3600000;
  else throw bad();
  return std::llround(value * scale);
}

}  // namespace mxablate::orchestrator
