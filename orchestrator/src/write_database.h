// How every command that writes the results database (run, ingest) opens it: as its only writer,
// for the whole command (the store holds the database's writer lock until it is destroyed). A
// file that is not an mxablate results database is bad input (exit 2); a database another
// process is writing, or one that cannot be created or written, is a failure (exit 1), its line
// saying what to check.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "cli_errors.h"
#include "mxablate/results/database_file.h"
#include "mxablate/results/store.h"

namespace mxablate::cli {

inline std::unique_ptr<results::ResultsStore> open_results_for_writing(const std::string& path) {
  try {
    return std::make_unique<results::ResultsStore>(path);
  } catch (const results::NotAResultsDatabase& e) {
    throw InputError(e.what());
  } catch (const results::DatabaseLocked& e) {
    throw std::runtime_error(e.what());
  } catch (const results::SqliteError& e) {
    std::string hint;
    if (e.code == 14 /*SQLITE_CANTOPEN*/ || e.code == 8 /*SQLITE_READONLY*/)
      hint = " — is the path's directory writable?";
    else if (e.code == 13 /*SQLITE_FULL*/)
      hint = " — free some space, then run the same command again";
    else if (e.code == 10 /*SQLITE_IOERR*/)
      hint = " — is the disk full?";
    throw std::runtime_error(fmt::format("results database: {}{}", e.what(), hint));
  }
}

}  // namespace mxablate::cli
