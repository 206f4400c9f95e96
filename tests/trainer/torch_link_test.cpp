// A binary linked with LibTorch must use the system's std::filesystem. The pip torch exports a
// statically linked copy (pytorch/pytorch#133437); bound to it, a recursive remove crashed
// mxablate-train at its first checkpoint pruning on the GPU machine. See the root CMakeLists.
#include <link.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.h"

namespace fs = std::filesystem;

namespace {
// The loaded objects in the dynamic linker's lookup order (the executable first).
std::vector<std::string> loaded_objects() {
  std::vector<std::string> names;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        static_cast<std::vector<std::string>*>(out)->push_back(
            fs::path(info->dlpi_name ? info->dlpi_name : "").filename().string());
        return 0;
      },
      &names);
  return names;
}

long position_of(const std::vector<std::string>& names, const std::string& prefix) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].rfind(prefix, 0) == 0) return static_cast<long>(i);
  return -1;
}
}  // namespace

TEST_CASE("libstdc++ comes before LibTorch in the symbol lookup order", "[trainer][link]") {
  (void)at::zeros({1});  // LibTorch is loaded and in use
  const auto names = loaded_objects();
  std::string order;
  for (const auto& n : names) order += n + " ";
  INFO("load order: " << order);
  const long stdcxx = position_of(names, "libstdc++");
  const long torch = position_of(names, "libtorch_cpu");
  REQUIRE(stdcxx >= 0);
  REQUIRE(torch >= 0);
  // Lookups search the objects in this order: the first definition of std::filesystem wins.
  CHECK(stdcxx < torch);
}

TEST_CASE("A directory tree is removed whole", "[trainer][link]") {
  const fs::path root = fs::temp_directory_path() / ("mxablate_link_test_" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(root / "top") << "y";
  CHECK(fs::remove_all(root) == 5);
  CHECK(!fs::exists(root));
}
