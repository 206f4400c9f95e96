// The run's target at each evaluation (trainer/live_target.h, docs/design.md §5 "Live targets"):
// a fixed target never moves; a derived one is taken from RUN_DIR/target.json when it appears,
// and a damaged file keeps what was known and is reported once per problem, never thrown.
#include "mxablate/trainer/rules/live_target.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "catch.h"
#include "mxablate/contract/target_file.h"

using mxablate::trainer::LiveTarget;
namespace contract = mxablate::contract;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mxablate-live-target-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("a derived target arrives through target.json, and damage keeps the last one, reported once") {
  TempDir dir;
  contract::TargetConfig config;  // from_arm: no val_loss in the config
  config.stop_at_target = true;
  LiveTarget t(config, dir.path);
  CHECK(t.live());
  CHECK(t.stop_at_target());
  CHECK_FALSE(t.current());
  LiveTarget::Change c = t.read();  // no file yet: nothing known, nothing to say
  CHECK_FALSE(c.adopted);
  CHECK(c.ignored.empty());
  CHECK_FALSE(t.current());

  contract::write_target_file(dir.path, {3.25, "median of arm fp8 at 30 % of its budget"});
  c = t.read();
  REQUIRE(c.adopted);
  CHECK(*c.adopted == 3.25);
  CHECK(c.basis == "median of arm fp8 at 30 % of its budget");
  CHECK(t.current() == 3.25);
  CHECK_FALSE(t.read().adopted);  // the same target again: no new event

  std::ofstream(dir.path / contract::kTargetFileName) << "{\"val_loss\": \"lots\"}";
  c = t.read();
  CHECK_FALSE(c.adopted);
  CHECK(c.ignored.find("val_loss: expected a finite number > 0") != std::string::npos);
  CHECK(t.current() == 3.25);  // the damaged file does not take the known target away
  CHECK(t.read().ignored.empty());  // the same problem is reported once
  std::ofstream(dir.path / contract::kTargetFileName) << std::string(10000, '9');
  CHECK(t.read().ignored.find("more than the 4096") != std::string::npos);

  contract::write_target_file(dir.path, {3.5, ""});
  c = t.read();
  REQUIRE(c.adopted);
  CHECK(t.current() == 3.5);
  // Another rank takes rank 0's target.
  LiveTarget other(config, dir.path / "elsewhere");
  other.agree(3.5);
  CHECK(other.current() == 3.5);
}

TEST_CASE("a fixed target is the config's and no file changes it") {
  TempDir dir;
  contract::TargetConfig config;
  config.val_loss = 3.3;
  LiveTarget t(config, dir.path);
  CHECK_FALSE(t.live());
  CHECK_FALSE(t.stop_at_target());
  contract::write_target_file(dir.path, {9.0, ""});
  CHECK_FALSE(t.read().adopted);
  t.agree(9.0);
  CHECK(t.current() == 3.3);
}
