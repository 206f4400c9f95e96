// A binary linked with LibTorch must use the system's std::filesystem. The pip torch exports a
// statically linked copy (pytorch/pytorch#133437); bound to it, a recursive remove crashed
// mxablate-train at its first checkpoint pruning on the GPU machine. See the root CMakeLists.
#include <dlfcn.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "catch.h"

namespace fs = std::filesystem;

TEST_CASE("std::filesystem resolves to libstdc++, not to LibTorch's copy", "[trainer][link]") {
  (void)at::zeros({1});  // LibTorch is loaded and in use
  // std::filesystem::remove_all(const path&), the C++11-ABI path; the first definition in the
  // global lookup scope is the one every call binds to.
  void* symbol = ::dlsym(RTLD_DEFAULT, "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE");
  REQUIRE(symbol != nullptr);
  Dl_info info{};
  REQUIRE(::dladdr(symbol, &info) != 0);
  const std::string library = info.dli_fname ? info.dli_fname : "";
  INFO("std::filesystem::remove_all comes from " << library);
  CHECK(fs::path(library).filename().string().rfind("libstdc++", 0) == 0);
}

TEST_CASE("A directory tree is removed whole", "[trainer][link]") {
  const fs::path root = fs::temp_directory_path() / ("mxablate_link_test_" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(root / "top") << "y";
  CHECK(fs::remove_all(root) == 5);
  CHECK(!fs::exists(root));
}
