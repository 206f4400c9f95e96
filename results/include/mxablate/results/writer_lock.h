// One writer per results database, whatever path, symlink, hard link or runs directory leads to
// it: an open-file-description lock (F_OFD_SETLK) on one byte of the database file itself, far
// beyond anything SQLite locks. Being on the file, it is keyed on the file's identity (device
// and inode), and is held across NFS through the lock manager. The kernel drops it when the
// holder exits however it exits, so a killed orchestrator never leaves a stale lock; closing
// other descriptors of the file (SQLite's own) does not drop it, unlike a classic POSIX lock.
// Readers never take it: `status`, `query`, `table` and `report` are never blocked by a writer.
//
// The holder's pid and host are written to PATH.writer for the message another writer prints
// (informational only: the lock is the byte, not that file).
#pragma once

#include <stdexcept>
#include <string>

namespace mxablate::results {

struct DatabaseLocked : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class WriterLock {
 public:
  // Throws DatabaseLocked when another process holds it, SqliteError when the file cannot be
  // opened for writing.
  explicit WriterLock(const std::string& db_path);
  ~WriterLock();
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

  // Whether `path` is (still) the file that is locked: a database replaced between taking the
  // lock and opening it must not be written unlocked.
  bool covers(const std::string& path) const;

  static constexpr long long kLockByte = 1LL << 40;

 private:
  int fd_ = -1;
};

}  // namespace mxablate::results
