// Read-only access for `mxablate query` and `mxablate status`: opens the database read-only
// (so nothing here can take the writer's lock for long), and refuses any statement that would
// write before it runs, with a message saying so.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

// The statement would modify the database (or attach another file).
struct WriteRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Opens `path` read-only; a missing file is an error naming it (SQLite would otherwise report a
// bare "unable to open database file"), a newer schema is refused.
std::unique_ptr<Database> open_read_only(const std::string& path);

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;  // each cell: null, integer, float or string
};

// Runs every statement of `sql` (separated by ';'); returns the rows of the last one that has
// columns. Throws WriteRefused before running anything when a statement would write.
QueryResult run_read_only_query(Database& db, const std::string& sql);

}  // namespace mxablate::results
