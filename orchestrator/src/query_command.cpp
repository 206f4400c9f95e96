// `mxablate query "SQL"`: read-only SQL over the results store (tables and views in
// results/src/schema.cpp). The database is opened read-only and any statement that would write
// is refused before it runs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/results/query.h"
#include "read_database.h"

namespace mxablate::cli {
namespace {

using namespace mxablate::orchestrator;

struct QueryOptions {
  std::string db = "mxablate.db";
  std::string sql;
  bool csv = false;
  bool json = false;
};

std::string cell_text(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.10g}", v.get<double>());
  return v.dump();
}

// Rows are printed as SQLite steps them: a query over millions of rows needs no memory for
// them. The text table is aligned per block of kTableBlock rows (its header repeated), since
// alignment needs the widths of the rows it covers.
constexpr size_t kTableBlock = 1000;

class RowPrinter {
 public:
  explicit RowPrinter(const QueryOptions& o) : o_(o) {}

  void columns(const std::vector<std::string>& columns) {
    columns_ = columns;
    if (o_.csv) {
      for (size_t c = 0; c < columns_.size(); ++c)
        std::cout << (c ? "," : "") << mxablate::escape::csv_field(columns_[c]);
      std::cout << "\n";
    }
  }

  void row(const std::vector<nlohmann::json>& r) {
    ++rows_;
    if (o_.json) {
      nlohmann::json obj = nlohmann::json::object();
      for (size_t c = 0; c < columns_.size(); ++c) obj[columns_[c]] = r[c];
      // Indented one level more, as inside an array; text that is not UTF-8 is shown replaced.
      std::string text = obj.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      std::string indented = "  ";
      for (char ch : text) {
        indented += ch;
        if (ch == '\n') indented += "  ";
      }
      std::cout << (rows_ == 1 ? "[\n" : ",\n") << indented;
    } else if (o_.csv) {
      for (size_t c = 0; c < r.size(); ++c) std::cout << (c ? "," : "") << mxablate::escape::csv_field(cell_text(r[c]));
      std::cout << "\n";
    } else {
      std::vector<std::string> cells;
      for (const auto& v : r) cells.push_back(v.is_null() ? "-" : cell_text(v));
      block_.push_back(std::move(cells));
      if (block_.size() == kTableBlock) flush_block();
    }
  }

  void finish() {
    if (o_.json) {
      std::cout << (rows_ == 0 ? "[]\n" : "\n]\n");
    } else if (!o_.csv) {
      if (rows_ == 0 || !block_.empty()) flush_block();
      std::cout << fmt::format("({} row{})\n", rows_, rows_ == 1 ? "" : "s");
    }
    std::cout << std::flush;
  }

 private:
  void flush_block() {
    TextTable table(columns_);
    for (auto& cells : block_) table.add_row(std::move(cells));
    block_.clear();
    std::cout << table.render();
  }

  const QueryOptions& o_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> block_;
  size_t rows_ = 0;
};

void run_query(const QueryOptions& o) {
  const std::unique_ptr<results::Database> db = open_results_for_reading(o.db);
  RowPrinter printer(o);
  try {
    results::stream_read_only_query(
        *db, o.sql, [&](const std::vector<std::string>& c) { printer.columns(c); },
        [&](const std::vector<nlohmann::json>& r) { printer.row(r); });
  } catch (const results::WriteRefused& e) {
    throw InputError(e.what());
  } catch (const results::SqliteError& e) {
    // A malformed statement is bad input; a database that cannot be read is a failure.
    if (std::string(e.what()).rfind("query:", 0) == 0) throw InputError(e.what());
    throw std::runtime_error(e.what());
  }
  printer.finish();
}

}  // namespace

void register_query_command(CLI::App& app) {
  auto o = std::make_shared<QueryOptions>();
  CLI::App* cmd = app.add_subcommand(
      "query", "Run read-only SQL on the results database (tables: sweeps, runs, run_axes, "
               "attempts, evals, train_steps, quant_stats, events, block_targets; views: "
               "run_summary, run_targets, run_tokens_to_target, run_extra_tokens, arm_summary "
               "(per model and arm), divergence_events)");
  cmd->add_option("sql", o->sql, "SQL (one or more statements; rows of the last are printed)")
      ->required();
  cmd->add_option("--db", o->db, "results database (SQLite)")->capture_default_str();
  auto* csv = cmd->add_flag("--csv", o->csv, "print CSV");
  auto* json = cmd->add_flag("--json", o->json, "print a JSON array of objects");
  csv->excludes(json);
  cmd->callback([o] { run_query(*o); });
}

}  // namespace mxablate::cli
