// A thin RAII layer over the sqlite3 C API: a connection, prepared statements, transactions.
// Errors are SqliteError carrying the database path, SQLite's message and what was being done,
// so a CLI can print them as one line ("mxablate.db: database or disk is full (ingesting …)").
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace mxablate::results {

struct SqliteError : std::runtime_error {
  SqliteError(const std::string& what, int code) : std::runtime_error(what), code(code) {}
  int code;  // the primary SQLite result code (SQLITE_FULL, SQLITE_READONLY, …)
};

class Database {
 public:
  // kReadWrite never creates a file: only database_file.h creates databases (atomically).
  enum class Mode { kReadWriteCreate, kReadWrite, kReadOnly };
  // Opens with a busy timeout so that short lock waits (checkpoints, another writer's commit)
  // are waited out instead of failing with "database is locked".
  Database(const std::string& path, Mode mode, int busy_timeout_ms = 10000);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Closes now and reports a failure (the destructor cannot): a close may write (a WAL
  // checkpoint), and a database being created must not be used unless that worked.
  void close();

  // Runs one or more statements that return no rows.
  void exec(std::string_view sql, std::string_view context = {});
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  Mode mode() const { return mode_; }
  int64_t changes() const;

  // Throws SqliteError for result code `rc` (which must not be OK/ROW/DONE).
  [[noreturn]] void fail(int rc, std::string_view context) const;

 private:
  std::string path_;
  Mode mode_;
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, int64_t v);
  Statement& bind(int index, int v) { return bind(index, static_cast<int64_t>(v)); }
  Statement& bind(int index, double v);
  Statement& bind(int index, std::string_view v);
  Statement& bind(int index, const char* v) { return bind(index, std::string_view(v)); }
  Statement& bind(int index, const std::string& v) { return bind(index, std::string_view(v)); }
  Statement& bind(int index, std::nullptr_t);
  template <typename T>
  Statement& bind(int index, const std::optional<T>& v) {
    return v ? bind(index, *v) : bind(index, nullptr);
  }

  // Advances; true while a row is available.
  bool step();
  // step() for statements that return no rows; resets so the statement can be reused.
  void run();
  void reset();

  int column_count() const;
  std::string column_name(int i) const;
  bool is_null(int i) const;
  int column_type(int i) const;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL
  int64_t get_int(int i) const;
  double get_double(int i) const;
  std::string get_text(int i) const;
  std::optional<int64_t> get_opt_int(int i) const;
  std::optional<double> get_opt_double(int i) const;
  std::optional<std::string> get_opt_text(int i) const;

  bool readonly() const;  // the statement does not write the database
  const std::string& sql() const { return sql_; }

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// BEGIN IMMEDIATE … COMMIT; rolls back unless committed (an exception in between loses nothing
// that was committed before, and leaves no half-applied batch).
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace mxablate::results
