// Read-only access for `mxablate query` and `mxablate status`: opens the database read-only
// (so nothing here can take the writer's lock for long), and refuses any statement that would
// write before it runs, with a message saying so.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/results/database_file.h"
#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

// The statement would modify the database (or attach another file).
struct WriteRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Opens `path` read-only. A file that is missing or is not an mxablate results database (or is
// newer than this build) is NotAResultsDatabase (database_file.h), naming the path: every read
// command reports it the same way.
std::unique_ptr<Database> open_read_only(const std::string& path);

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;  // each cell: null, integer, float or string
};

using QueryColumns = std::function<void(const std::vector<std::string>& columns)>;
using QueryRow = std::function<void(const std::vector<nlohmann::json>& row)>;

// Runs every statement of `sql` (separated by ';'); the last one that has columns is shown:
// `on_columns` once, then `on_row` for each row as it is stepped (nothing is collected). Throws
// WriteRefused before running anything when a statement would write.
void stream_read_only_query(Database& db, const std::string& sql, const QueryColumns& on_columns,
                            const QueryRow& on_row);

// The same, collected (for small results and tests).
QueryResult run_read_only_query(Database& db, const std::string& sql);

}  // namespace mxablate::results
