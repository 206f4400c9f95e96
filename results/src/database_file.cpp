#include "mxablate/results/database_file.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "mxablate/results/schema.h"

namespace mxablate::results {
namespace {

namespace fs = std::filesystem;

// The SQLite result code that best describes a failed system call (the CLI's hints key on it).
int code_for(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return SQLITE_FULL;
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOENT:
    case ENOTDIR: return SQLITE_CANTOPEN;
    default: return SQLITE_IOERR;
  }
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& doing) {
  const int err = errno;
  throw SqliteError(fmt::format("{}: {}: {}", path, doing, std::strerror(err)), code_for(err));
}

void fsync_path(const std::string& path, int flags, const std::string& shown,
                const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) fail_errno(shown, "cannot open " + what + " to sync it");
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno(shown, "cannot sync " + what);
  }
  ::close(fd);
}

// Puts `tmp` at `path` unless something is there. False when something was.
bool publish(const std::string& tmp, const std::string& path) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0)
    return true;
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS) fail_errno(path, "cannot move the new database into place");
  // A filesystem without RENAME_NOREPLACE (NFS, some FUSE): a hard link fails on an existing
  // name just the same.
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) return false;
    fail_errno(path, "cannot move the new database into place");
  }
  ::unlink(tmp.c_str());
  return true;
}

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{}-{:08x}", ::getpid(), rd());
}

}  // namespace

bool create_database_if_missing(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return false;
  if (errno != ENOENT) fail_errno(path, "cannot look at the results database");
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".creating-" + random_suffix())).string();
  const auto cleanup = [&] {
    std::error_code ec;
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(tmp + suffix, ec);
  };
  try {
    {
      // A rollback journal while it is built: every committed page is in the file itself, so
      // what is renamed into place needs no -wal beside it.
      Database db(tmp, Database::Mode::kReadWriteCreate);
      db.exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL", "creating");
      migrate(db);
      db.close();
    }
    {
      Database check(tmp, Database::Mode::kReadOnly);
      if (schema_version(check) != latest_schema_version())
        throw SqliteError(tmp + ": the new database did not get its schema", SQLITE_IOERR);
      {
        Statement quick(check, "PRAGMA quick_check");
        if (!quick.step() || quick.get_text(0) != "ok")
          throw SqliteError(tmp + ": the new database does not read back intact", SQLITE_CORRUPT);
      }
      check.close();
    }
    fsync_path(tmp, O_RDONLY, path, "the new database");
    if (!publish(tmp, path)) {
      cleanup();
      return false;  // another process was quicker; its file is checked by the caller
    }
    fsync_path(dir.string(), O_RDONLY | O_DIRECTORY, path, "its directory");
  } catch (const SqliteError& e) {
    cleanup();
    std::string what = e.what();  // name the file the user asked for, not the temporary one
    for (size_t at; (at = what.find(tmp)) != std::string::npos;) what.replace(at, tmp.size(), path);
    throw SqliteError(what, e.code);
  }
  return true;
}

void check_database_file(const std::string& path, bool read_header) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      throw NotAResultsDatabase(fmt::format(
          "{}: no results database here (run a sweep first, or pass --db)", path));
    fail_errno(path, "cannot look at the results database");
  }
  if (!S_ISREG(st.st_mode))
    throw NotAResultsDatabase(fmt::format("{}: not a results database (not a regular file)", path));
  if (st.st_size == 0)
    throw NotAResultsDatabase(fmt::format(
        "{}: an empty file, not a results database; it is left alone — remove it or pass "
        "another --db",
        path));
  if (!read_header) return;
  char header[16] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot read the results database");
  const ssize_t n = ::pread(fd, header, sizeof header, 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof header) || std::memcmp(header, "SQLite format 3", 16) != 0)
    throw NotAResultsDatabase(fmt::format(
        "{}: not a results database (not an SQLite file); it is left alone — pass another --db",
        path));
}

void check_results_schema(Database& db) {
  int version = 0;
  try {
    version = schema_version(db);
  } catch (const SqliteError& e) {
    if (e.code == SQLITE_NOTADB || e.code == SQLITE_CORRUPT)
      throw NotAResultsDatabase(fmt::format(
          "{}: not a results database (not an SQLite file, or a damaged one: {}); it is left "
          "alone — pass another --db",
          db.path(), sqlite3_errstr(e.code)));
    throw;
  }
  if (version > latest_schema_version())
    throw NotAResultsDatabase(fmt::format(
        "{}: schema version {} is newer than this mxablate knows ({}); use a newer mxablate",
        db.path(), version, latest_schema_version()));
  if (version == 0)
    throw NotAResultsDatabase(fmt::format(
        "{}: an SQLite database but not an mxablate results database (schema version 0); it is "
        "left alone — pass another --db",
        db.path()));
}

}  // namespace mxablate::results
