// main() of the device tests: runs Catch2 when a GPU is usable, else says why and exits with 77
// (CTest's SKIP_RETURN_CODE), so machines without a GPU report the tests as skipped, not passed.
#define CATCH_CONFIG_RUNNER
#include <cstring>
#include <iostream>

#include "catch.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  if (!listing) {
    const std::string why = mxablate::kernels::gpu::device_unavailable_reason();
    if (!why.empty()) {
      std::cout << "SKIPPED: " << why << "\n";
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
