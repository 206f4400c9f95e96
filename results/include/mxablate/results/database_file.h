// The results database as a file. It appears at its path whole or not at all: it is created and
// migrated under a temporary name in the same directory, synced, and renamed into place without
// replacing anything (a creation cut short by a full disk or a crash leaves no file, and the next
// attempt starts clean). A file already at the path is used only when it is an mxablate results
// database; anything else is refused with a message, never overwritten or "repaired".
#pragma once

#include <string>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {

// Missing, not a regular file, empty, not SQLite, not an mxablate schema, or a newer schema.
// Bad input (the --db argument), where other SqliteErrors are failures of the database.
struct NotAResultsDatabase : SqliteError {
  explicit NotAResultsDatabase(const std::string& what) : SqliteError(what, 26 /*SQLITE_NOTADB*/) {}
};

// Creates a fully migrated database at `path` unless something is there already. Returns
// whether this call created it (false also when another process created it meanwhile). On
// failure nothing is left behind and the error names `path`.
bool create_database_if_missing(const std::string& path);

// Throws NotAResultsDatabase when the file at `path` cannot be an mxablate database: missing,
// not a regular file, empty, or (with read_header) without the SQLite header.
// The header read opens and closes a descriptor of the file, and closing any descriptor drops
// every POSIX lock this process holds on it, SQLite's included: only a writer about to open the
// file, before any connection of its own, reads the header. Readers open read-only and let
// check_results_schema refuse what SQLite cannot read.
void check_database_file(const std::string& path, bool read_header);

// Throws NotAResultsDatabase when the open database is not an mxablate results database (schema
// version 0: some other SQLite file) or is newer than this build knows.
void check_results_schema(Database& db);

}  // namespace mxablate::results
