// A binary linked with LibTorch must use the system's std::filesystem. The pip torch (2.11 on the
// GPU machine) exports a statically linked copy (pytorch/pytorch#133437); a binary whose link
// line named libtorch_cpu before libstdc++ bound its calls to that copy and crashed in its first
// recursive remove: mxablate-train at its first checkpoint pruning (exit 139, reproduced on the
// H100 by relinking without the fix; see the root CMakeLists.txt). This binary is linked like
// mxablate-train, so the same call crashes here if the fix is lost.
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "catch.h"

namespace fs = std::filesystem;

TEST_CASE("A directory tree is removed whole", "[trainer][link]") {
  const fs::path root = fs::temp_directory_path() / ("mxablate_link_test_" + std::to_string(::getpid()));
  (void)at::zeros({1});  // LibTorch is loaded and in use
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(root / "top") << "y";
  CHECK(fs::remove_all(root) == 5);
  CHECK(!fs::exists(root));
}
