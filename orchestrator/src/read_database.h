// How every read command (status, query, table, report, cancel) opens the results database,
// so they all answer a bad --db the same way: a missing file, or one that is not an mxablate
// results database, is bad input (exit 2) reported in one line naming the path; a database
// that cannot be read is a failure (exit 1). Read-only: never blocked by a running sweep.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "cli_errors.h"
#include "mxablate/results/database_file.h"
#include "mxablate/results/query.h"

namespace mxablate::cli {

inline std::unique_ptr<results::Database> open_results_for_reading(const std::string& path) {
  try {
    return results::open_read_only(path);
  } catch (const results::NotAResultsDatabase& e) {
    throw InputError(e.what());
  } catch (const results::SqliteError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace mxablate::cli
