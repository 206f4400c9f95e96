#include "mxablate/orchestrator/measured_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <tuple>

#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::orchestrator {

// Defined by the file the build generates from docs/performance.md (embed_measured_rates.cmake).
std::string_view measured_rates_section();
int measured_rates_first_line();

namespace {

constexpr std::array<std::pair<GpuKind, std::string_view>, 2> kGpuNames{{
    {GpuKind::kH100, "h100"},
    {GpuKind::kH200, "h200"},
}};

constexpr std::array<std::pair<ArmClass, std::string_view>, 6> kArmNames{{
    {ArmClass::kBF16, "bf16"},
    {ArmClass::kFP8, "fp8"},
    {ArmClass::kMXFP4, "mxfp4 F+D+W"},
    {ArmClass::kMXFP4H16, "mxfp4 F+D+W+H16"},
    {ArmClass::kMXFP4H16Fp8, "mxfp4 F+D+W+H16 gemm_path=fp8"},
    {ArmClass::kMXFP4H16Exact, "mxfp4 F+D+W+H16 gemm_path=fp8-where-exact"},
}};

template <typename E, size_t N>
std::string_view name_in(const std::array<std::pair<E, std::string_view>, N>& table, E v) {
  for (const auto& [value, name] : table)
    if (value == v) return name;
  return "?";
}

template <typename E, size_t N>
std::optional<E> value_in(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view s) {
  for (const auto& [value, name] : table)
    if (name == s) return value;
  return std::nullopt;
}

template <typename E, size_t N>
std::string names_in(const std::array<std::pair<E, std::string_view>, N>& table) {
  std::string out;
  for (const auto& entry : table) out += (out.empty() ? "" : ", ") + std::string(entry.second);
  return out;
}

// The columns the plan reads, each exactly once, in any order.
enum class RateColumn : uint8_t {
  kModel, kSeq, kVocab, kMicroBatch, kGpu, kRanks, kShard, kArm, kRecompute, kRate, kDate, kSource
};
constexpr std::array<std::pair<RateColumn, std::string_view>, 12> kColumnNames{{
    {RateColumn::kModel, "model"},
    {RateColumn::kSeq, "seq"},
    {RateColumn::kVocab, "vocab"},
    {RateColumn::kMicroBatch, "micro-batch"},
    {RateColumn::kGpu, "gpu"},
    {RateColumn::kRanks, "ranks"},
    {RateColumn::kShard, "shard"},
    {RateColumn::kArm, "arm"},
    {RateColumn::kRecompute, "recompute"},
    {RateColumn::kRate, "tokens/s per GPU"},
    {RateColumn::kDate, "date"},
    {RateColumn::kSource, "source"},
}};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_table_line(std::string_view line) {
  const std::string_view t = trimmed(line);
  return !t.empty() && t.front() == '|';
}

// A table line's cells, trimmed: "| a | b |" → {a, b}. A `|` inside a cell cannot be written
// (nothing here needs one), so a stray one shows as a row of the wrong width.
std::vector<std::string> cells_of(std::string_view line) {
  std::string_view t = trimmed(line);
  t.remove_prefix(1);
  if (!t.empty() && t.back() == '|') t.remove_suffix(1);
  std::vector<std::string> cells;
  while (true) {
    const size_t bar = t.find('|');
    cells.emplace_back(trimmed(t.substr(0, bar)));
    if (bar == std::string_view::npos) break;
    t.remove_prefix(bar + 1);
  }
  return cells;
}

// A positive whole number as the page writes it: 8192 or 8,192 (groups of three after the
// first), nothing else: no sign, point, exponent or stray separator.
std::optional<int64_t> parse_whole(std::string_view s) {
  if (s.empty() || s.size() > 18 || s.front() == ',' || s.front() == '0') return std::nullopt;
  const bool grouped = s.find(',') != std::string_view::npos;
  int64_t value = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    // With separators, a comma stands exactly every fourth place from the end.
    const bool comma_here = grouped && (s.size() - i) % 4 == 0;
    if (comma_here != (c == ',')) return std::nullopt;
    if (c == ',') continue;
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

bool is_date(std::string_view s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (const size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  const int month = (s[5] - '0') * 10 + (s[6] - '0');
  const int day = (s[8] - '0') * 10 + (s[9] - '0');
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

// One table's reader: errors name the file and the line.
class RateTableReader {
 public:
  RateTableReader(std::string_view file, int first_line) : file_(file), first_line_(first_line) {}

  MeasuredRates read(std::string_view section) {
    std::vector<std::string_view> lines;
    for (size_t at = 0; at <= section.size();) {
      const size_t end = std::min(section.find('\n', at), section.size());
      lines.push_back(section.substr(at, end - at));
      at = end + 1;
    }
    const std::string heading = "## " + std::string(kMeasuredRatesSection);
    if (lines.empty() || trimmed(lines[0]) != heading)
      fail(0, fmt::format("expected the heading \"{}\"", heading));
    // The one table: the first run of lines that begin with '|'.
    size_t begin = 0;
    while (begin < lines.size() && !is_table_line(lines[begin])) ++begin;
    if (begin == lines.size()) fail(0, "the section holds no table of rates");
    size_t end = begin;
    while (end < lines.size() && is_table_line(lines[end])) ++end;
    for (size_t i = end; i < lines.size(); ++i)
      if (is_table_line(lines[i])) fail(i, "a second table: the section holds one table of rates");
    if (end - begin < 3) fail(begin, "the table has no rows");
    read_header(begin, cells_of(lines[begin]));
    check_separator(begin + 1, cells_of(lines[begin + 1]));
    MeasuredRates out;
    out.file = file_;
    for (size_t i = begin + 2; i < end; ++i) out.rows.push_back(read_row(i, cells_of(lines[i])));
    check_unique(out.rows);
    const auto [first, last] = std::minmax_element(
        out.rows.begin(), out.rows.end(), [](const auto& a, const auto& b) { return a.date < b.date; });
    out.first_date = first->date;
    out.last_date = last->date;
    return out;
  }

 private:
  [[noreturn]] void fail(size_t index, const std::string& what) const {
    throw MeasuredRatesError(fmt::format("{}:{}: {}", file_, line(index), what));
  }
  int line(size_t index) const { return first_line_ + static_cast<int>(index); }

  void read_header(size_t index, const std::vector<std::string>& cells) {
    for (const std::string& name : cells) {
      const std::optional<RateColumn> column = value_in(kColumnNames, name);
      if (!column)
        fail(index, fmt::format("column '{}' is not one the plan reads ({})", name, names_in(kColumnNames)));
      if (std::find(columns_.begin(), columns_.end(), *column) != columns_.end())
        fail(index, fmt::format("column '{}' is given twice", name));
      columns_.push_back(*column);
    }
    for (const auto& [column, name] : kColumnNames)
      if (std::find(columns_.begin(), columns_.end(), column) == columns_.end())
        fail(index, fmt::format("no column '{}' (the columns: {})", name, names_in(kColumnNames)));
  }

  void check_separator(size_t index, const std::vector<std::string>& cells) const {
    bool ok = cells.size() == columns_.size();
    for (std::string_view c : cells) {
      if (!c.empty() && c.front() == ':') c.remove_prefix(1);
      if (!c.empty() && c.back() == ':') c.remove_suffix(1);
      ok = ok && !c.empty() && c.find_first_not_of('-') == std::string_view::npos;
    }
    if (!ok) fail(index, fmt::format("expected the header's separator row of {} cells such as |---|", columns_.size()));
  }

  MeasuredRate read_row(size_t index, const std::vector<std::string>& cells) const {
    if (cells.size() != columns_.size())
      fail(index, fmt::format("the row has {} cells, the header {}", cells.size(), columns_.size()));
    MeasuredRate r;
    r.line = line(index);
    std::string recompute;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string& cell = cells[i];
      const std::string_view name = name_in(kColumnNames, columns_[i]);
      const auto whole = [&] {
        const std::optional<int64_t> v = parse_whole(cell);
        if (!v) fail(index, fmt::format("{}: '{}' is not a whole number above 0 such as 8192 or 8,192", name, cell));
        return *v;
      };
      switch (columns_[i]) {
        case RateColumn::kModel: {
          const std::optional<trainer::ModelShape> shape = trainer::find_model_preset(cell);
          if (!shape || shape->n_layers == 0)
            fail(index, fmt::format("model: '{}' is not a preset ({})", cell, trainer::model_preset_names()));
          r.model = cell;
          r.n_layers = shape->n_layers;
          break;
        }
        case RateColumn::kSeq: r.seq_len = whole(); break;
        case RateColumn::kVocab: r.vocab = whole(); break;
        case RateColumn::kMicroBatch: r.micro_batch_tokens = whole(); break;
        case RateColumn::kRanks: r.ranks = whole(); break;
        case RateColumn::kRate: r.tokens_per_second_per_gpu = static_cast<double>(whole()); break;
        case RateColumn::kGpu: {
          const std::optional<GpuKind> g = parse_gpu_kind(cell);
          if (!g) fail(index, fmt::format("gpu: '{}' is not one of: {}", cell, gpu_kind_names()));
          r.gpu = *g;
          break;
        }
        case RateColumn::kShard: {
          const std::optional<contract::ShardLevel> s = contract::parse_shard_level(cell);
          if (!s) fail(index, fmt::format("shard: '{}' is not one of: {}", cell, contract::shard_level_names()));
          r.shard = *s;
          break;
        }
        case RateColumn::kArm: {
          const std::optional<ArmClass> a = parse_arm_class(cell);
          if (!a) fail(index, fmt::format("arm: '{}' is not one of: {}", cell, arm_class_names()));
          r.arm = *a;
          break;
        }
        case RateColumn::kRecompute: recompute = cell; break;  // needs the model's blocks
        case RateColumn::kDate:
          if (!is_date(cell)) fail(index, fmt::format("date: '{}' is not a date such as 2026-11-27", cell));
          r.date = cell;
          break;
        case RateColumn::kSource:
          if (cell.empty()) fail(index, "source: empty: say which section and call the figure is from");
          r.source = cell;
          break;
      }
    }
    r.recompute = read_recompute(index, recompute, r);
    if (r.micro_batch_tokens % r.seq_len != 0)
      fail(index, fmt::format("micro-batch: {} tokens are not whole sequences of {}", r.micro_batch_tokens, r.seq_len));
    if (r.ranks == 1 && r.shard != contract::ShardLevel::kNone)
      fail(index, fmt::format("shard: {} on one rank: one rank shards nothing (write none)", contract::to_string(r.shard)));
    return r;
  }

  // "every block", "none", "K of N" with N the model's blocks and 0 < K < N, "selective", or
  // "selective and K of N whole" (recompute_text's words).
  MeasuredRecompute read_recompute(size_t index, const std::string& cell, const MeasuredRate& r) const {
    static constexpr std::string_view kSelective = "selective", kAnd = "selective and ", kWhole = " whole";
    if (cell == "every block") return {true, 0, false};
    if (cell == "none") return {false, 0, false};
    if (cell == kSelective) return {false, 0, true};
    std::string blocks = cell;
    const bool selective = cell.rfind(kAnd, 0) == 0 && cell.size() > kAnd.size() + kWhole.size() &&
                           cell.compare(cell.size() - kWhole.size(), kWhole.size(), kWhole) == 0;
    if (selective) blocks = cell.substr(kAnd.size(), cell.size() - kAnd.size() - kWhole.size());
    const size_t of = blocks.find(" of ");
    const std::optional<int64_t> k = of == std::string::npos ? std::nullopt : parse_whole(blocks.substr(0, of));
    const std::optional<int64_t> n = of == std::string::npos ? std::nullopt : parse_whole(blocks.substr(of + 4));
    if (!k || !n)
      fail(index, fmt::format("recompute: '{}' is not 'every block', 'none', 'K of N' blocks, 'selective' or "
                              "'selective and K of N whole'", cell));
    if (*n != r.n_layers || *k >= *n)
      fail(index, fmt::format("recompute: '{}': {} has {} blocks; write 'every block', 'none' or K of {} "
                              "with 0 < K < {}", cell, r.model, r.n_layers, r.n_layers, r.n_layers));
    return {false, *k, selective};
  }

  // One row per configuration: two figures of one are a choice the table must make, not the plan.
  void check_unique(const std::vector<MeasuredRate>& rows) const {
    const auto key = [](const MeasuredRate& r) {
      return std::make_tuple(r.model, r.seq_len, r.vocab, r.micro_batch_tokens, r.gpu, r.ranks,
                             r.shard, r.arm, r.recompute.every_block, r.recompute.blocks, r.recompute.selective);
    };
    std::map<decltype(key(rows[0])), int> seen;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto [it, fresh] = seen.emplace(key(rows[i]), rows[i].line);
      if (!fresh)
        throw MeasuredRatesError(fmt::format(
            "{}:{}: the same configuration as line {}: keep one figure per configuration", file_,
            rows[i].line, it->second));
    }
  }

  std::string file_;
  int first_line_;
  std::vector<RateColumn> columns_;  // the header's, in its order
};

}  // namespace

std::string_view to_string(GpuKind g) { return name_in(kGpuNames, g); }
std::optional<GpuKind> parse_gpu_kind(std::string_view s) { return value_in(kGpuNames, s); }
std::string gpu_kind_names() { return names_in(kGpuNames); }

std::string_view to_string(ArmClass a) { return name_in(kArmNames, a); }
std::optional<ArmClass> parse_arm_class(std::string_view s) { return value_in(kArmNames, s); }
std::string arm_class_names() { return names_in(kArmNames); }

std::string recompute_text(const MeasuredRate& r) {
  if (r.recompute.every_block) return "every block";
  if (r.recompute.selective)
    return r.recompute.blocks == 0 ? "selective" : fmt::format("selective and {} of {} whole", r.recompute.blocks, r.n_layers);
  if (r.recompute.blocks == 0) return "none";
  return fmt::format("{} of {}", r.recompute.blocks, r.n_layers);
}

MeasuredRates parse_measured_rates(std::string_view section, std::string_view file, int first_line) {
  return RateTableReader(file, first_line).read(section);
}

const MeasuredRates& built_in_measured_rates() {
  static const MeasuredRates rates =
      parse_measured_rates(measured_rates_section(), kMeasuredRatesFile, measured_rates_first_line());
  return rates;
}

}  // namespace mxablate::orchestrator
