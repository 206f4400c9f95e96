// RUN_DIR/target.json (contract/target_file.h): the orchestrator's write is read back exactly, and
// whatever else lies there (damaged, huge, not a number, a directory, a FIFO) is a problem in one
// printable line naming the file, never an exception: a run must never end on a side file.
#include "mxablate/contract/target_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.h"

using namespace mxablate::contract;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mxablate-target-file-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void put(const fs::path& dir, const std::string& text) {
  std::ofstream(dir / kTargetFileName, std::ios::binary) << text;
}

void check_one_line(const std::string& m) {
  INFO(m);
  CHECK(m.find("json.exception") == std::string::npos);
  CHECK(m.find("target.json") != std::string::npos);
  for (const char ch : m) {
    const auto u = static_cast<unsigned char>(ch);
    CHECK((u >= 0x20 && u < 0x7f));
  }
}

}  // namespace

TEST_CASE("a written target file is read back exactly, and replaced atomically") {
  TempDir dir;
  CHECK_FALSE(read_target_file(dir.path).target);  // absent: no target, no problem
  CHECK(read_target_file(dir.path).problem.empty());
  write_target_file(dir.path, {3.2995123456789, "median of arm fp8 at 30 % of its budget"});
  TargetFileRead r = read_target_file(dir.path);
  REQUIRE(r.target);
  CHECK(r.problem.empty());
  CHECK(r.target->val_loss == 3.2995123456789);  // bit for bit: JSON round-trips doubles
  CHECK(r.target->basis == "median of arm fp8 at 30 % of its budget");
  write_target_file(dir.path, {4.5, ""});
  r = read_target_file(dir.path);
  REQUIRE(r.target);
  CHECK(r.target->val_loss == 4.5);
  CHECK(r.target->basis.empty());
  CHECK_FALSE(fs::exists(dir.path / (std::string(kTargetFileName) + ".tmp")));
  remove_target_file(dir.path);
  CHECK_FALSE(fs::exists(dir.path / kTargetFileName));
  remove_target_file(dir.path);  // absent already: nothing to do
  CHECK_THROWS_AS(write_target_file(dir.path, {std::nan(""), ""}), std::invalid_argument);
  CHECK_THROWS_AS(write_target_file(dir.path, {-1.0, ""}), std::invalid_argument);
  CHECK_THROWS_AS(write_target_file(dir.path / "missing", {3.0, ""}), std::runtime_error);
}

TEST_CASE("a damaged, huge or non-numeric target file is a one-line problem, never a throw") {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"", "not valid JSON"},
      {"{\"val_loss\": 3.3", "not valid JSON"},
      {"\xff\xfe{}", "not valid JSON"},
      {"[3.3]", "expected an object"},
      {"3.3", "expected an object"},
      {"{\"val_loss\": \"3.3\"}", "val_loss: expected a finite number > 0, got \"3.3\""},
      {"{\"val_loss\": -2}", "val_loss: expected a finite number > 0, got -2"},
      {"{\"val_loss\": 0}", "val_loss: expected a finite number > 0"},
      {"{\"val_loss\": 1e999}", "not a finite double"},
      {"{\"val_loss\": null}", "val_loss: expected a finite number > 0, got null"},
      {"{\"basis\": \"x\"}", "val_loss is missing"},
      {"{\"val_loss\": 3.3, \"basis\": 7}", "basis:"},
      {"{\"val_loss\": 3.3, \"stop\": true}", "unknown key stop"},
      {"{\"val_loss\": 3.3, \"\\u0001\\n\": 1}", "unknown key"},
      {std::string(5000, ' ') + "{\"val_loss\": 3.3}", "more than the 4096"},
      {std::string(200, '['), "nested deeper than 64"},
  };
  for (const auto& [text, expected] : cases) {
    put(dir.path, text);
    const TargetFileRead r = read_target_file(dir.path);
    INFO(text.substr(0, 60));
    CHECK_FALSE(r.target);
    CHECK(r.problem.find(expected) != std::string::npos);
    check_one_line(r.problem);
  }
}

TEST_CASE("a target file that is not a regular file is refused unread") {
  TempDir dir;
  fs::create_directory(dir.path / kTargetFileName);
  TargetFileRead r = read_target_file(dir.path);
  CHECK_FALSE(r.target);
  CHECK(r.problem.find("not a regular file") != std::string::npos);
  check_one_line(r.problem);
  fs::remove(dir.path / kTargetFileName);
  // A FIFO would block a reader that opened it: refused by its type, at once.
  REQUIRE(::mkfifo((dir.path / kTargetFileName).c_str(), 0600) == 0);
  r = read_target_file(dir.path);
  CHECK_FALSE(r.target);
  CHECK(r.problem.find("not a regular file") != std::string::npos);
}
