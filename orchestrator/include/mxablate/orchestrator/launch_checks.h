// Checks of an expanded plan against the prepared datasets its runs name, made by `mxablate plan`
// and `mxablate run` before anything is launched: what would make every attempt of a run fail
// once the trainer opens its data is refused here, at the recipe position of the key that decides
// it. Only each dataset's manifest.json is read (token counts, vocabulary), never the shards.
//
// Errors (RecipeError): a dataset that does not exist or is not prepared; data.seq_len longer than
// a split can hold; a run that does not fit its model at the data's vocabulary
// (trainer::check_run_fits, as mxablate-train checks it: the LM head's shapes, the parameter
// count); eval.tokens more than the validation split holds at that sequence length.
// check_ranks, made by `run` once it knows its slots: a run of more ranks than the executor can
// ever give one run.
// Warnings: a token budget of more than two epochs of the training split (small models overfit a
// small corpus, and quantization noise then acts as a regularizer: an FP4 arm can look better
// than BF16 for that reason alone).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::orchestrator {

// More epochs than this draw the overfitting warning.
inline constexpr double kMaxEpochsWithoutWarning = 2.0;

// Each dataset's vocabulary (its manifest's), by data.dataset as the runs write it: what sizes
// the embeddings, for the parameter counts `mxablate plan` shows.
using DatasetVocabularies = std::map<std::string, int64_t>;

// Throws RecipeError at the first problem; returns the warnings, each one line
// "FILE:LINE:COL: key: …", one per distinct message. Fills `vocabularies` when given.
std::vector<std::string> check_launch(const Recipe& recipe, const Plan& plan,
                                      DatasetVocabularies* vocabularies = nullptr);

// What the executor `mxablate run` builds can give one run: at most `max_ranks` ranks
// (Executor::max_ranks), counted in `unit` ("distinct GPUs", "CPU slots"), with where that
// number comes from ("--gpus 0", "the default --cpu 1") and how to get more.
struct RankLimit {
  int max_ranks = 1;
  std::string unit;
  std::string source;
  std::string hint;
};

// A run whose parallel.data is more ranks than `limit` allows could never start: throws
// RecipeError at the first such run, at the position of its parallel.data —
// "FILE:LINE:COL: parallel.data: 2 ranks need 2 distinct GPUs, more than the 1 of --gpus 0; … (run: B seed=1)".
void check_ranks(const Recipe& recipe, const Plan& plan, const RankLimit& limit);

}  // namespace mxablate::orchestrator
