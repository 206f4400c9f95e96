#include "mxablate/results/query.h"

#include <sqlite3.h>

#include <fmt/format.h>

#include "mxablate/results/database_file.h"
#include "mxablate/results/schema.h"

namespace mxablate::results {
namespace {

// ATTACH would let a query open (and, with a URI, create) other files; refuse it outright.
int deny_attach(void*, int action, const char*, const char*, const char*, const char*) {
  return (action == SQLITE_ATTACH || action == SQLITE_DETACH) ? SQLITE_DENY : SQLITE_OK;
}

std::string first_words(const std::string& sql) {
  std::string s;
  for (char c : sql) {
    s += (c == '\n' || c == '\t' || c == '\r') ? ' ' : c;
    if (s.size() >= 60) {
      s += "…";
      break;
    }
  }
  return s;
}

}  // namespace

std::unique_ptr<Database> open_read_only(const std::string& path) {
  check_database_file(path, /*read_header=*/false);
  auto db = std::make_unique<Database>(path, Database::Mode::kReadOnly);
  check_results_schema(*db);
  sqlite3_set_authorizer(db->handle(), deny_attach, nullptr);
  return db;
}

void stream_read_only_query(Database& db, const std::string& sql, const QueryColumns& on_columns,
                            const QueryRow& on_row) {
  // Prepare everything first: a write in the third statement must stop the first two as well.
  std::vector<sqlite3_stmt*> prepared;
  struct Finalizer {
    std::vector<sqlite3_stmt*>& list;
    ~Finalizer() {
      for (auto* s : list) sqlite3_finalize(s);
    }
  } finalizer{prepared};
  const char* tail = sql.c_str();
  const char* end = sql.c_str() + sql.size();
  while (tail < end) {
    sqlite3_stmt* st = nullptr;
    const char* start = tail;
    const int rc = sqlite3_prepare_v2(db.handle(), tail, static_cast<int>(end - tail), &st, &tail);
    if (rc == SQLITE_AUTH)
      throw WriteRefused("query: ATTACH/DETACH is not allowed; the database is opened read-only");
    if (rc != SQLITE_OK)
      throw SqliteError(fmt::format("query: {}", sqlite3_errmsg(db.handle())), rc);
    if (!st) continue;  // whitespace or a comment
    prepared.push_back(st);
    if (!sqlite3_stmt_readonly(st))
      throw WriteRefused(fmt::format(
          "query: refusing a statement that would modify the database ({}); `mxablate query` is "
          "read-only",
          first_words(std::string(start, tail))));
  }
  if (prepared.empty()) throw SqliteError("query: no SQL statement given", SQLITE_MISUSE);

  // Only the last statement with columns is shown; its rows go out as they are stepped, so a
  // result of any size never has to fit in memory.
  sqlite3_stmt* shown = nullptr;
  for (sqlite3_stmt* st : prepared)
    if (sqlite3_column_count(st) > 0) shown = st;
  for (sqlite3_stmt* st : prepared) {
    const int ncol = sqlite3_column_count(st);
    if (st == shown) {
      std::vector<std::string> columns;
      for (int c = 0; c < ncol; ++c) columns.emplace_back(sqlite3_column_name(st, c));
      on_columns(columns);
    }
    std::vector<nlohmann::json> row;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      if (st != shown) continue;
      row.clear();
      for (int c = 0; c < ncol; ++c) {
        switch (sqlite3_column_type(st, c)) {
          case SQLITE_INTEGER: row.emplace_back(sqlite3_column_int64(st, c)); break;
          case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(st, c)); break;
          case SQLITE_NULL: row.emplace_back(nullptr); break;
          case SQLITE_BLOB:
            row.emplace_back(fmt::format("<blob {} bytes>", sqlite3_column_bytes(st, c)));
            break;
          default:
            row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, c)),
                                         static_cast<size_t>(sqlite3_column_bytes(st, c))));
        }
      }
      on_row(row);
    }
    if (rc != SQLITE_DONE)
      throw SqliteError(fmt::format("query: {}", sqlite3_errmsg(db.handle())), rc);
  }
}

QueryResult run_read_only_query(Database& db, const std::string& sql) {
  QueryResult result;
  stream_read_only_query(
      db, sql, [&](const std::vector<std::string>& columns) { result.columns = columns; },
      [&](const std::vector<nlohmann::json>& row) { result.rows.push_back(row); });
  return result;
}

}  // namespace mxablate::results
