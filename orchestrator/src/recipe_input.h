// Loading and expanding a recipe for a command: any recipe problem becomes an InputError
// (exit code 2) whose message is the one-line "FILE:LINE:COL: key: …" of RecipeError.
#pragma once

#include <iostream>
#include <string>

#include "cli_errors.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::cli {

struct RecipeInput {
  orchestrator::Recipe recipe;
  orchestrator::Plan plan;
  orchestrator::DatasetVocabularies vocabularies;  // filled by load_checked_recipe_input
};

inline RecipeInput load_recipe_input(const std::string& path) {
  try {
    RecipeInput in{orchestrator::load_recipe(path), {}, {}};
    in.plan = orchestrator::expand_recipe(in.recipe);
    return in;
  } catch (const orchestrator::RecipeError& e) {
    throw InputError(e.what());
  }
}

// What `plan` and `run` check before anything runs: the recipe, then the plan against the
// datasets it names (launch_checks.h). Errors are InputErrors; warnings go to stderr, one line
// each.
inline RecipeInput load_checked_recipe_input(const std::string& path) {
  RecipeInput in = load_recipe_input(path);
  try {
    for (const std::string& warning : orchestrator::check_launch(in.recipe, in.plan, &in.vocabularies))
      // Dataset paths come from the recipe: shown, never sent raw to the terminal.
      std::cerr << "mxablate: warning: " << escape::terminal(warning) << "\n";
  } catch (const orchestrator::RecipeError& e) {
    throw InputError(e.what());
  }
  return in;
}

}  // namespace mxablate::cli
