// Loading and expanding a recipe for a command: any recipe problem becomes an InputError
// (exit code 2) whose message is the one-line "FILE:LINE:COL: key: …" of RecipeError.
#pragma once

#include <string>

#include "cli_errors.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::cli {

struct RecipeInput {
  orchestrator::Recipe recipe;
  orchestrator::Plan plan;
};

inline RecipeInput load_recipe_input(const std::string& path) {
  try {
    RecipeInput in{orchestrator::load_recipe(path), {}};
    in.plan = orchestrator::expand_recipe(in.recipe);
    return in;
  } catch (const orchestrator::RecipeError& e) {
    throw InputError(e.what());
  }
}

}  // namespace mxablate::cli
