// `mxablate data collect` through the binary: a run's line per source, and bad input as exit 2
// with one line on stderr naming the option and value (docs/design.md §10).
#include <filesystem>
#include <fstream>
#include <string>

#include "catch.h"
#include "hostile_json.h"
#include "process_util.h"

using mxablate::test::run_command;
using mxablate::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kBin = MXABLATE_BIN;

}  // namespace

TEST_CASE("mxablate data collect: a run, then bad input as exit 2 and one line naming the option", "[cli][data][collect]") {
  TempDir dir("mxablate_data_collect_cli");
  fs::create_directories(dir.path / "src");
  std::ofstream(dir / "src/main.c") << "int main(void) { return 0; }\n";
  std::ofstream(dir / "src/copy.c") << "int main(void) { return 0; }\n";
  std::ofstream(dir / "src/logo.png") << "PNG";
  const std::string out = dir / "out";
  auto r = run_command(kBin + " data collect --source code='" + (dir / "src") + "' --out '" + out +
                       "' --sample-out '" + (dir / "sample") + "' --sample-fraction 1 --threads 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.rfind("data collect: code: 1 of 3 files kept (0.0 MiB of 0.0 MiB), 1 documents, 1 files sampled; not_text 1; duplicate 1 (", 0) == 0);
  CHECK(fs::exists(out + "/code.jsonl"));
  CHECK(fs::exists(dir / "sample/code.jsonl"));
  r = run_command(kBin + " data collect --source code='" + (dir / "src") + "' --out '" + out + "'");
  CHECK(r.exit_code == 0);
  CHECK(r.output.rfind("data collect: code: already collected: 1 of 3 files kept", 0) == 0);

  const std::string src = dir / "src";
  struct Bad {
    std::string args, message;
  };
  for (const Bad& bad : {
           Bad{"--source Code=" + src + " --out " + out,
               "mxablate: --source: 'Code': a name is 1-64 of a-z 0-9 . _ - starting with a letter or digit\n"},
           Bad{"--source code --out " + out, "mxablate: --source: 'code': expected NAME=DIR\n"},
           Bad{"--source code= --out " + out, "mxablate: --source: 'code=': expected NAME=DIR\n"},
           Bad{"--source a=" + src + " --source a=" + src + " --out " + out,
               "mxablate: --source: 'a' is given twice\n"},
           Bad{"--source code=" + src + "/missing --out " + out,
               "mxablate: --source: code=" + src + "/missing: not a directory\n"},
           Bad{"--source code=" + src + " --out " + out + " --sample-out " + out + "/s --sample-fraction 2",
               "mxablate: --sample-fraction: must be in [0, 1], got 2\n"},
           Bad{"--source code=" + src + " --out " + out + " --sample-fraction 0.5",
               "mxablate: --sample-fraction: needs --sample-out\n"},
           Bad{"--source code=" + src + " --out " + out + "/new --sample-out " + out + "/new/ --sample-fraction 0.5",
               "mxablate: --sample-out: must differ from --out\n"},
       }) {
    INFO(bad.args);
    r = run_command(kBin + " data collect " + bad.args);
    CHECK(r.exit_code == 2);
    CHECK(r.output == bad.message);
  }
  // What the option parser refuses: one line naming the option or value too.
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"--source code=" + src + " --out " + out + " --sample-fraction half", "half"},
           {"--source code=" + src + " --out " + out + " --threads many", "many"},
           {"--out " + out, "--source"},
           {"--source code=" + src, "--out"}}) {
    INFO(args);
    r = run_command(kBin + " data collect " + args);
    CHECK(r.exit_code == 2);
    CHECK(mxablate::test::is_one_clean_line(r.output));
    CHECK(r.output.rfind("mxablate: ", 0) == 0);
    CHECK(r.output.find(named) != std::string::npos);
  }
  CHECK_FALSE(fs::exists(out + "/new"));
}
