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

void run_query(const QueryOptions& o) {
  results::QueryResult result;
  try {
    auto db = results::open_read_only(o.db);
    result = results::run_read_only_query(*db, o.sql);
  } catch (const results::WriteRefused& e) {
    throw InputError(e.what());
  } catch (const results::SqliteError& e) {
    // A malformed statement is bad input; a database that cannot be read is a failure.
    if (std::string(e.what()).rfind("query:", 0) == 0) throw InputError(e.what());
    throw std::runtime_error(e.what());
  }
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : result.rows) {
      nlohmann::json obj = nlohmann::json::object();
      for (size_t c = 0; c < result.columns.size(); ++c) obj[result.columns[c]] = r[c];
      rows.push_back(obj);
    }
    std::cout << rows.dump(2) << "\n";
  } else if (o.csv) {
    for (size_t c = 0; c < result.columns.size(); ++c)
      std::cout << (c ? "," : "") << mxablate::escape::csv_field(result.columns[c]);
    std::cout << "\n";
    for (const auto& r : result.rows) {
      for (size_t c = 0; c < r.size(); ++c) std::cout << (c ? "," : "") << mxablate::escape::csv_field(cell_text(r[c]));
      std::cout << "\n";
    }
  } else {
    TextTable table(result.columns);
    for (const auto& r : result.rows) {
      std::vector<std::string> row;
      for (const auto& v : r) row.push_back(v.is_null() ? "-" : cell_text(v));
      table.add_row(row);
    }
    std::cout << table.render();
    std::cout << fmt::format("({} row{})\n", result.rows.size(), result.rows.size() == 1 ? "" : "s");
  }
}

}  // namespace

void register_query_command(CLI::App& app) {
  auto o = std::make_shared<QueryOptions>();
  CLI::App* cmd = app.add_subcommand(
      "query", "Run read-only SQL on the results database (tables: sweeps, runs, run_axes, "
               "attempts, evals, train_steps, quant_stats, events; views: run_summary, "
               "run_tokens_to_target, arm_summary, divergence_events)");
  cmd->add_option("sql", o->sql, "SQL (one or more statements; rows of the last are printed)")
      ->required();
  cmd->add_option("--db", o->db, "results database (SQLite)")->capture_default_str();
  auto* csv = cmd->add_flag("--csv", o->csv, "print CSV");
  auto* json = cmd->add_flag("--json", o->json, "print a JSON array of objects");
  csv->excludes(json);
  cmd->callback([o] { run_query(*o); });
}

}  // namespace mxablate::cli
