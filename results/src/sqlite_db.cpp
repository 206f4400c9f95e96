#include "mxablate/results/sqlite_db.h"

#include <sqlite3.h>

#include <fmt/format.h>

namespace mxablate::results {
namespace {

std::string message(const std::string& path, sqlite3* db, int rc, std::string_view context) {
  const char* text = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // sqlite3_errmsg may be stale when rc came from elsewhere; prefer the code's text then.
  if (db && sqlite3_errcode(db) != rc) text = sqlite3_errstr(rc);
  if (context.empty()) return fmt::format("{}: {}", path, text);
  return fmt::format("{}: {} ({})", path, text, context);
}

}  // namespace

Database::Database(const std::string& path, Mode mode, int busy_timeout_ms)
    : path_(path), mode_(mode) {
  const int access = mode == Mode::kReadOnly    ? SQLITE_OPEN_READONLY
                     : mode == Mode::kReadWrite ? SQLITE_OPEN_READWRITE
                                                : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int flags = access | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string what = message(path, db_, rc, "opening the results database");
    sqlite3_close(db_);
    db_ = nullptr;
    throw SqliteError(what, rc & 0xff);
  }
  sqlite3_extended_result_codes(db_, 0);
  sqlite3_busy_timeout(db_, busy_timeout_ms);
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

void Database::close() {
  if (!db_) return;
  const int rc = sqlite3_close(db_);
  if (rc != SQLITE_OK) fail(rc, "closing");
  db_ = nullptr;
}

void Database::fail(int rc, std::string_view context) const {
  throw SqliteError(message(path_, db_, rc & 0xff, context), rc & 0xff);
}

void Database::exec(std::string_view sql, std::string_view context) {
  const std::string text(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string detail = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw SqliteError(context.empty() ? fmt::format("{}: {}", path_, detail)
                                      : fmt::format("{}: {} ({})", path_, detail, context),
                      rc & 0xff);
  }
}

int64_t Database::changes() const { return sqlite3_changes(db_); }

Statement::Statement(Database& db, std::string_view sql) : db_(db), sql_(sql) {
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v2(db.handle(), sql_.c_str(), static_cast<int>(sql_.size()),
                                    &stmt_, &tail);
  if (rc != SQLITE_OK) db.fail(rc, fmt::format("preparing: {}", sql_.substr(0, 80)));
  if (!stmt_) throw SqliteError(db.path() + ": empty SQL statement", SQLITE_MISUSE);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, int64_t v) {
  const int rc = sqlite3_bind_int64(stmt_, index, v);
  if (rc != SQLITE_OK) db_.fail(rc, "binding a parameter");
  return *this;
}

Statement& Statement::bind(int index, double v) {
  const int rc = sqlite3_bind_double(stmt_, index, v);
  if (rc != SQLITE_OK) db_.fail(rc, "binding a parameter");
  return *this;
}

Statement& Statement::bind(int index, std::string_view v) {
  const int rc = sqlite3_bind_text(stmt_, index, v.data(), static_cast<int>(v.size()),
                                   SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) db_.fail(rc, "binding a parameter");
  return *this;
}

Statement& Statement::bind(int index, std::nullptr_t) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) db_.fail(rc, "binding a parameter");
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const int code = rc;
  sqlite3_reset(stmt_);
  db_.fail(code, fmt::format("running: {}", sql_.substr(0, 80)));
}

void Statement::run() {
  while (step()) {
  }
  reset();
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
std::string Statement::column_name(int i) const { return sqlite3_column_name(stmt_, i); }
bool Statement::is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
int Statement::column_type(int i) const { return sqlite3_column_type(stmt_, i); }
int64_t Statement::get_int(int i) const { return sqlite3_column_int64(stmt_, i); }
double Statement::get_double(int i) const { return sqlite3_column_double(stmt_, i); }

std::string Statement::get_text(int i) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, i))) : std::string();
}

std::optional<int64_t> Statement::get_opt_int(int i) const {
  if (is_null(i)) return std::nullopt;
  return get_int(i);
}
std::optional<double> Statement::get_opt_double(int i) const {
  if (is_null(i)) return std::nullopt;
  return get_double(i);
}
std::optional<std::string> Statement::get_opt_text(int i) const {
  if (is_null(i)) return std::nullopt;
  return get_text(i);
}

bool Statement::readonly() const { return sqlite3_stmt_readonly(stmt_) != 0; }

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE", "starting a transaction"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT", "committing");
  done_ = true;
}

}  // namespace mxablate::results
