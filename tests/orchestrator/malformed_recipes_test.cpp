// Every malformed recipe in malformed/ (listed with its expected position and message in
// malformed_expectations.txt) is rejected with one line naming file:line:column and the key —
// by the loader in-process, and by `mxablate plan` with exit code 2. None crashes.
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "catch.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"
#include "test_util.h"

using namespace mxablate::orchestrator;
using namespace mxablate::testing;

namespace {

struct Expectation {
  std::string file;
  std::string location;  // "L:C" or "" (the YAML parser's own position)
  std::string message;
};

std::vector<Expectation> expectations() {
  std::ifstream in(kTestData / "malformed_expectations.txt");
  std::vector<Expectation> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t a = line.find('|');
    const size_t b = line.find('|', a + 1);
    out.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return out;
}

}  // namespace

TEST_CASE("at least 30 malformed recipes, each listed with its expected error") {
  const auto list = expectations();
  CHECK(list.size() >= 30);
  std::set<std::string> listed;
  for (const auto& e : list) listed.insert(e.file);
  for (const auto& entry : std::filesystem::directory_iterator(kTestData / "malformed")) {
    INFO(entry.path().filename().string());
    CHECK(listed.count(entry.path().filename().string()) == 1);
  }
}

TEST_CASE("the loader rejects each malformed recipe at the expected position") {
  for (const Expectation& e : expectations()) {
    const std::string path = (kTestData / "malformed" / e.file).string();
    INFO(e.file);
    try {
      const Recipe r = load_recipe(path);
      expand_recipe(r);
      FAIL("accepted a malformed recipe");
    } catch (const RecipeError& err) {
      const std::string what = err.what();
      INFO(what);
      CHECK(err.file() == path);
      CHECK(err.at().known());
      if (!e.location.empty())
        CHECK(std::to_string(err.at().line) + ":" + std::to_string(err.at().column) == e.location);
      CHECK(contains(what, e.message));
      CHECK(what.find('\n') == std::string::npos);
      CHECK(what.rfind(path + ":" + std::to_string(err.at().line) + ":", 0) == 0);
    }
  }
}

TEST_CASE("`mxablate plan` exits 2 with one line for each malformed recipe") {
  TempDir dir;
  for (const Expectation& e : expectations()) {
    const std::string path = (kTestData / "malformed" / e.file).string();
    INFO(e.file);
    const ProcessResult r = run_process({kMxablate.string(), "plan", path}, dir.path());
    INFO(r.err);
    CHECK_FALSE(r.signal);
    CHECK(r.code() == 2);
    CHECK(r.out.empty());
    const auto lines = lines_of(r.err);
    REQUIRE(lines.size() == 1);
    const std::string prefix =
        "mxablate: " + path + ":" + (e.location.empty() ? "" : e.location + ":");
    CHECK(lines[0].rfind(prefix, 0) == 0);
    CHECK(contains(lines[0], e.message));
  }
}

TEST_CASE("a recipe that does not exist, or is a directory, is one clear error") {
  TempDir dir;
  ProcessResult r = run_process({kMxablate.string(), "plan", dir.file("nope.yaml")}, dir.path());
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: " + dir.file("nope.yaml") +
                     ": cannot open the recipe (no such file, or not readable)\n");
  r = run_process({kMxablate.string(), "plan", dir.path().string()}, dir.path());
  CHECK(r.code() == 2);
  CHECK(contains(r.err, "is a directory, not a recipe file"));
}

TEST_CASE("a recipe path that is a device, a FIFO or a huge file is refused unread") {
  TempDir dir;
  const std::string fifo = dir.file("fifo.yaml");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/urandom"), fifo}) {
    INFO(path);
    const ProcessResult r = run_process({kMxablate.string(), "plan", path}, dir.path(), {},
                                        std::chrono::seconds(20));
    CHECK_FALSE(r.signal);
    CHECK(r.code() == 2);
    CHECK(r.err == "mxablate: " + path +
                       ": not a regular file (a device, FIFO or socket); a recipe is a YAML file\n");
  }
  // One byte over the cap: refused before parsing; at the cap it is parsed (and is YAML).
  const std::string big = dir.file("big.yaml");
  write_file(big, "# " + std::string(kMaxRecipeBytes - 2, 'x') + "\n");
  ProcessResult r = run_process({kMxablate.string(), "plan", big}, dir.path());
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: " + big +
                     ": larger than 1048576 bytes (1 MiB); a recipe is a short YAML file\n");
  write_file(big, "# " + std::string(kMaxRecipeBytes - 3, 'x') + "\n");
  r = run_process({kMxablate.string(), "plan", big}, dir.path());
  CHECK(r.code() == 2);
  CHECK(contains(r.err, "holds no content"));
}
