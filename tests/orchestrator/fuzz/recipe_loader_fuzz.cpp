// libFuzzer target for the recipe loader and every check `mxablate plan` makes: any bytes must
// give either a plan that passed the launch checks (with warnings) or a RecipeError (one line,
// naming the file) — never a crash, an unexpected exception, a sanitizer report, a hang or
// unbounded memory. Built with clang -fsanitize=fuzzer,address,undefined when available.
//
// "default" and any dataset named "data" point at a manifest-only dataset made at start-up, small
// enough (a few thousand tokens) that sequence-length, evaluation-size and epoch checks all fire.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "mxablate/data/manifest.h"
#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

using namespace mxablate::orchestrator;
namespace fs = std::filesystem;

namespace {
fs::path data_dir;
void remove_data_dir() {
  std::error_code ec;
  fs::remove_all(data_dir, ec);
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  data_dir = fs::temp_directory_path() / ("mxablate-fuzz-data-" + std::to_string(::getpid()));
  const fs::path& dir = data_dir;
  fs::create_directories(dir);
  std::atexit(remove_data_dir);
  mxablate::data::Manifest m;
  m.tokenizer.vocab_size = 4096;
  m.train.tokens = 50000;
  m.validation.tokens = 3000;
  mxablate::data::write_manifest(dir.string(), m);
  ::setenv("MXABLATE_DEFAULT_DATASET", dir.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Recipe recipe = parse_recipe(text, "fuzz.yaml");
    // Expansion is exercised too, but not for grids whose size alone would make one input slow.
    if (static_cast<double>(recipe.arms.size()) * recipe.grid_points() > 2000) return 0;
    const Plan plan = expand_recipe(recipe);
    for (const std::string& warning : check_launch(recipe, plan))
      if (warning.find('\n') != std::string::npos || warning.rfind("fuzz.yaml:", 0) != 0)
        std::abort();  // warnings are one located line too
  } catch (const RecipeError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) std::abort();  // errors are one line
    if (what.rfind("fuzz.yaml", 0) != 0) std::abort();        // and name the file
  }
  return 0;
}
