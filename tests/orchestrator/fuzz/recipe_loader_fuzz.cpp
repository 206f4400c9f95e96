// libFuzzer target for the recipe loader: any bytes must give either a plan or a RecipeError
// (one line, with a position) — never a crash, an unexpected exception, a sanitizer report, a
// hang or unbounded memory. Built with clang -fsanitize=fuzzer,address,undefined when available.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

using namespace mxablate::orchestrator;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Recipe recipe = parse_recipe(text, "fuzz.yaml");
    // Expansion is exercised too, but not for grids whose size alone would make one input slow.
    size_t runs = recipe.arms.size();
    for (const GridAxis& axis : recipe.grid) runs *= axis.values.size();
    if (runs <= 2000) expand_recipe(recipe);
  } catch (const RecipeError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) std::abort();  // errors are one line
    if (what.rfind("fuzz.yaml", 0) != 0) std::abort();        // and name the file
  }
  return 0;
}
