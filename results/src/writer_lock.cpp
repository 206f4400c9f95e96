#include "mxablate/results/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "mxablate/results/sqlite_db.h"

namespace mxablate::results {
namespace {

namespace fs = std::filesystem;

std::string shown_path(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  return ec ? path : canonical.string();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Tries the lock; false when another open file description holds it.
bool try_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = WriterLock::kLockByte;
  fl.l_len = 1;
  while (true) {
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EACCES) return false;
    if (errno == EINVAL) break;  // a kernel or filesystem without OFD locks
    throw SqliteError(fmt::format("cannot lock the results database for writing: {}",
                                  std::strerror(errno)),
                      10 /*SQLITE_IOERR*/);
  }
  // flock is per open file description too (and independent of SQLite's fcntl locks locally).
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  if (errno == EWOULDBLOCK) return false;
  throw SqliteError(fmt::format("cannot lock the results database for writing: {}",
                                std::strerror(errno)),
                    10 /*SQLITE_IOERR*/);
}

}  // namespace

WriterLock::WriterLock(const std::string& db_path) {
  const std::string shown = shown_path(db_path);
  fd_ = ::open(db_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0)
    throw SqliteError(fmt::format("{}: cannot open the results database for writing: {}", shown,
                                  std::strerror(errno)),
                      14 /*SQLITE_CANTOPEN*/);
  bool locked = false;
  try {
    locked = try_lock(fd_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  const std::string holder_file = shown + ".writer";
  if (!locked) {
    ::close(fd_);
    fd_ = -1;
    std::string holder;
    std::getline(std::ifstream(holder_file), holder);
    if (holder.size() > 200) holder.resize(200);
    throw DatabaseLocked(fmt::format(
        "{}: another mxablate ({}) is writing to this results database; one database has one "
        "writer at a time — wait for it to finish or stop it (status, query, table and report "
        "can read it meanwhile)",
        shown, holder.empty() ? "pid unknown" : holder));
  }
  std::ofstream(holder_file, std::ios::trunc) << fmt::format("pid {} on {}\n", ::getpid(),
                                                             host_name());
}

WriterLock::~WriterLock() {
  if (fd_ >= 0) ::close(fd_);
}

bool WriterLock::covers(const std::string& path) const {
  struct stat mine {}, theirs {};
  return ::fstat(fd_, &mine) == 0 && ::stat(path.c_str(), &theirs) == 0 &&
         mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

}  // namespace mxablate::results
