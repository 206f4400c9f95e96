// The results database as a file: created whole or not at all (a full disk, a file-size limit,
// a missing directory leave nothing behind, and a later attempt succeeds); a file at the path
// that is not an mxablate database is refused and left untouched; one writer per database,
// however the path reaches it, and readers are never blocked by that writer.
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "mxablate/results/database_file.h"
#include "mxablate/results/query.h"
#include "mxablate/results/schema.h"
#include "mxablate/results/store.h"
#include "mxablate/results/writer_lock.h"
#include "temp_dir.h"

using namespace mxablate::results;
using mxablate::testing::read_file;
using mxablate::testing::TempDir;
using mxablate::testing::write_file;
namespace fs = std::filesystem;

namespace {

// Nothing at `path`, or a complete mxablate database; and never a temporary left beside it.
void check_nothing_or_valid(const fs::path& dir, const std::string& path) {
  for (const auto& entry : fs::directory_iterator(dir))
    CHECK(entry.path().filename().string().find(".creating-") == std::string::npos);
  if (!fs::exists(path)) return;
  auto db = open_read_only(path);
  CHECK(schema_version(*db) == latest_schema_version());
  Statement quick(*db, "PRAGMA quick_check");
  REQUIRE(quick.step());
  CHECK(quick.get_text(0) == "ok");
}

struct FileSizeLimit {
  rlimit saved{};
  explicit FileSizeLimit(rlim_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    ::getrlimit(RLIMIT_FSIZE, &saved);
    rlimit lim = saved;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &saved); }
};

}  // namespace

TEST_CASE("creation cut short by a write failure leaves nothing, and the next one succeeds") {
  TempDir dir;
  const std::string path = dir.file("results.db");
  int failed = 0;
  for (rlim_t limit : {0, 100, 512, 1024, 2048, 4096, 8192, 12288, 16384, 32768, 65536}) {
    INFO("file size limit " << limit);
    {
      FileSizeLimit l(limit);
      try {
        ResultsStore store(path);
      } catch (const SqliteError& e) {
        ++failed;
        const std::string what = e.what();
        CHECK(what.rfind(path + ": ", 0) == 0);  // names the file asked for, in one line
        CHECK(what.find('\n') == std::string::npos);
      }
    }
    check_nothing_or_valid(dir.path(), path);
    { ResultsStore store(path); }  // space is back: the same command works
    check_nothing_or_valid(dir.path(), path);
    fs::remove(path);
    fs::remove(path + "-wal");
    fs::remove(path + "-shm");
  }
  CHECK(failed > 3);  // the limits did make creation fail
}

TEST_CASE("creation in a directory that cannot be written leaves nothing and says so") {
  TempDir dir;
  const std::string bad = dir.file("no-such-dir/x.db");
  try {
    ResultsStore store(bad);
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).rfind(bad + ": unable to open database file", 0) == 0);
  }
  CHECK_FALSE(fs::exists(bad));
  // A directory where no file can be created, even by root (who ignores permission bits).
  const std::string ro = "/proc/mxablate-test.db";
  try {
    ResultsStore store(ro);
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).rfind(ro + ": ", 0) == 0);
  }
  CHECK_FALSE(fs::exists(ro));
}

TEST_CASE("a file that is not an mxablate database is refused and left as it was") {
  TempDir dir;
  struct Case {
    std::string name, content, reason;
  };
  const std::vector<Case> cases{
      {"empty.db", "", "an empty file, not a results database"},
      {"text.db", "hello, I am notes\n", "not a results database (not an SQLite file)"},
      {"torn.db", std::string("SQLite format 3\0", 16) + std::string(50, '\x07'),
       "not a results database (not an SQLite file, or a damaged one"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string path = dir.file(c.name);
    write_file(path, c.content);
    try {
      ResultsStore store(path);
      FAIL("expected an error");
    } catch (const NotAResultsDatabase& e) {
      CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);
      CHECK(std::string(e.what()).find(c.reason) != std::string::npos);
    }
    CHECK(read_file(path) == c.content);
    CHECK_THROWS_AS(open_read_only(path), NotAResultsDatabase);
  }
  // Some other program's SQLite database.
  const std::string foreign = dir.file("foreign.db");
  {
    Database db(foreign, Database::Mode::kReadWriteCreate);
    db.exec("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('keep me')");
  }
  const std::string before = read_file(foreign);
  try {
    ResultsStore store(foreign);
    FAIL("expected an error");
  } catch (const NotAResultsDatabase& e) {
    CHECK(std::string(e.what()).find("not an mxablate results database (schema version 0)") !=
          std::string::npos);
  }
  CHECK(read_file(foreign) == before);
  CHECK_THROWS_AS(ResultsStore(dir.path().string()), NotAResultsDatabase);  // a directory
}

TEST_CASE("a database created on a nearly full filesystem is whole or absent") {
  if (::geteuid() != 0) MXABLATE_SKIP("mounting a small tmpfs needs root");
  TempDir dir;
  const fs::path mnt = dir.path() / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=512k") != 0)
    MXABLATE_SKIP("cannot mount a tmpfs here (" << std::strerror(errno) << ")");
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string path = (mnt / "results.db").string();
  int failed = 0;
  for (int free_kib = 0; free_kib <= 160; free_kib += 8) {
    INFO(free_kib << " KiB free");
    struct statvfs vfs {};
    REQUIRE(::statvfs(mnt.c_str(), &vfs) == 0);
    const auto avail = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    const int64_t fill = avail - int64_t{free_kib} * 1024;
    if (fill > 0) {
      std::ofstream(mnt / "filler", std::ios::binary) << std::string(static_cast<size_t>(fill), 'f');
    }
    try {
      ResultsStore store(path);
    } catch (const SqliteError& e) {
      ++failed;
      CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);
    }
    fs::remove(mnt / "filler");  // (a WAL database cannot even be read on a full disk)
    check_nothing_or_valid(mnt, path);
    { ResultsStore store(path); }  // space freed: it works, and is not "malformed"
    check_nothing_or_valid(mnt, path);
    for (const char* s : {"", "-wal", "-shm", ".writer"}) fs::remove(path + s);
  }
  CHECK(failed > 0);
}

TEST_CASE("one writer per database, whatever path leads to it, readers are never blocked") {
  TempDir dir;
  const std::string path = dir.file("results.db");
  fs::create_directories(dir.path() / "elsewhere");
  const std::string symlink = dir.file("elsewhere/link.db");
  const std::string hardlink = dir.file("elsewhere/hard.db");
  const std::string dotted = (dir.path() / "elsewhere" / ".." / "results.db").string();
  auto writer = std::make_unique<ResultsStore>(path);
  fs::create_symlink(path, symlink);
  fs::create_hard_link(path, hardlink);
  for (const std::string& other : {path, symlink, hardlink, dotted}) {
    INFO(other);
    try {
      ResultsStore second(other);
      FAIL("expected the second writer to be refused");
    } catch (const DatabaseLocked& e) {
      const std::string what = e.what();
      // The holder's pid is noted beside the name it used; another name only knows it is held.
      CHECK(what.find(other == hardlink ? "another mxablate (pid unknown)"
                                        : "another mxablate (pid " + std::to_string(::getpid())) !=
            std::string::npos);
      CHECK(what.find("is writing to this results database") != std::string::npos);
      CHECK(what.find(other == hardlink ? "hard.db" : fs::canonical(path).string()) != std::string::npos);
    }
  }
  // Readers open and query while the writer holds the lock and writes.
  SweepRecord s;
  s.name = "s";
  s.recipe_path = "r";
  s.recipe_text = "t";
  s.runs_dir = "runs";
  writer->register_sweep(s);
  {
    Transaction tx(writer->db());
    writer->db().exec("UPDATE sweeps SET recipe_text = 'x'");
    auto reader = open_read_only(symlink);
    CHECK(run_read_only_query(*reader, "SELECT COUNT(*) FROM sweeps").rows.at(0).at(0) == 1);
    tx.commit();
  }
  // The lock goes with the writer.
  writer.reset();
  CHECK_NOTHROW(ResultsStore(hardlink));
}
