#include "mxablate/orchestrator/launch_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "mxablate/data/dataset_location.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/sequence_sampler.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/training_plan.h"

namespace mxablate::orchestrator {
namespace {

namespace fs = std::filesystem;

// A manifest is a few kilobytes; anything larger (or not a regular file) is not one, and reading
// it could take the planner's memory or never end.
constexpr std::uintmax_t kMaxManifestBytes = 16u << 20;

std::string prepare_hint(const std::string& dataset) {
  if (dataset == data::kDefaultDataset)
    return "build it with scripts/build-corpus.sh, or point MXABLATE_DEFAULT_DATASET at a "
           "directory made by `mxablate data prepare`";
  return fmt::format("prepare it with `mxablate data prepare --input TEXT... --out {0}` (or import "
                     "tokenized data with `mxablate data import --megatron PREFIX --vocab-size N "
                     "--out {0}`)",
                     dataset);
}

std::string count_text(int64_t n) {
  if (n >= 10'000'000) return fmt::format("{:.1f} M", static_cast<double>(n) / 1e6);
  return std::to_string(n);
}

class LaunchChecker {
 public:
  explicit LaunchChecker(const Recipe& recipe) : r_(recipe) {}

  std::vector<std::string> check(const Plan& plan, DatasetVocabularies* vocabularies) {
    for (const RunSpec& run : plan.runs) check_run(run);
    if (vocabularies)
      for (const auto& [name, d] : datasets_) (*vocabularies)[name] = d.manifest.tokenizer.vocab_size;
    return warnings_;
  }

 private:
  struct Dataset {
    std::string dir;
    data::Manifest manifest;
  };

  // Where the run's `path` was set; a default value points at the run's arm.
  Location at(const RunSpec& run, const std::string& path) const {
    const Location l = run.where(path);
    return l.known() ? l : r_.arms[static_cast<size_t>(run.arm_index)].at;
  }

  RecipeError error(const RunSpec& run, const std::string& path, const std::string& message) const {
    return RecipeError(r_.file, at(run, path),
                       fmt::format("{}: {} (run: {})", path, message, run_label(run)));
  }

  // A contract::ConfigError "key.path: why" at the value that set the key (a list element's key,
  // "overrides[1].layers", at the list).
  RecipeError config_error(const RunSpec& run, const std::string& message) const {
    const std::string key = message.substr(0, message.find(": "));
    return RecipeError(r_.file, at(run, key.substr(0, key.find('['))),
                       fmt::format("{} (run: {})", message, run_label(run)));
  }

  const Dataset& dataset(const RunSpec& run) {
    const std::string& name = run.config.data.dataset;
    if (const auto it = datasets_.find(name); it != datasets_.end()) return it->second;
    const std::string dir = data::dataset_dir(name);
    const std::string shown = name == data::kDefaultDataset
                                  ? fmt::format("the default dataset ({})", dir)
                                  : fmt::format("'{}'", dir);
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw error(run, "data.dataset",
                  fmt::format("{} does not exist; {}", shown, prepare_hint(name)));
    const fs::path manifest = fs::path(dir) / data::kManifestFile;
    const fs::file_status st = fs::status(manifest, ec);
    if (!fs::exists(st))
      throw error(run, "data.dataset",
                  fmt::format("{} is not a prepared dataset (no {}); {}", shown,
                              data::kManifestFile, prepare_hint(name)));
    if (!fs::is_regular_file(st) || fs::file_size(manifest, ec) > kMaxManifestBytes)
      throw error(run, "data.dataset",
                  fmt::format("{}: {} is not a regular file of at most 16 MiB; {}", shown,
                              data::kManifestFile, prepare_hint(name)));
    Dataset d{dir, {}};
    try {
      d.manifest = data::read_manifest(dir);
    } catch (const std::exception& e) {
      throw error(run, "data.dataset",
                  fmt::format("{} cannot be used: {}; {}", shown, e.what(), prepare_hint(name)));
    }
    return datasets_.emplace(name, std::move(d)).first->second;
  }

  void check_run(const RunSpec& run) {
    const Dataset& d = dataset(run);
    const contract::RunConfig& c = run.config;
    const int64_t train_tokens = d.manifest.train.tokens;
    const int64_t val_tokens = d.manifest.validation.tokens;
    const int64_t seq_len = c.data.seq_len;

    // A sequence longer than a split allows: not one sequence fits (data/sequence_sampler.h).
    const int64_t longest = std::min(train_tokens, val_tokens) - 1;
    if (data::sequences_in_stream(std::min(train_tokens, val_tokens), seq_len) < 1)
      throw error(run, "data.seq_len",
                  fmt::format("{} is longer than {} allows: its {} split holds {} tokens, so a "
                              "sequence can be at most {}",
                              seq_len, d.dir,
                              train_tokens <= val_tokens ? "training" : "validation",
                              std::min(train_tokens, val_tokens), std::max<int64_t>(0, longest)));

    // The trainer's fit at the data's vocabulary (run_fit.h), which expansion checked without it:
    // the LM head's shapes (an override may quantize it) and the parameter count with embeddings.
    try {
      trainer::check_run_fits(c, trainer::model_shape(c.model), d.manifest.tokenizer.vocab_size);
    } catch (const contract::ConfigError& e) {
      throw config_error(run, e.what());
    }

    const trainer::TrainingPlan tp = trainer::make_training_plan(c);
    const int64_t available = data::sequences_in_stream(val_tokens, seq_len);
    if (tp.eval_sequences > available)
      throw error(run, "eval.tokens",
                  fmt::format("{:g} tokens ({} sequences of {}) are more than the validation split "
                              "of {} holds ({} tokens: {} sequences, at most {} tokens)",
                              c.eval.tokens, tp.eval_sequences, seq_len, d.dir, val_tokens,
                              available, available * seq_len));

    const double epochs = c.train.max_tokens / static_cast<double>(train_tokens);
    if (epochs > kMaxEpochsWithoutWarning) {
      const std::string message =
          RecipeError(r_.file, at(run, "train.max_tokens"),
                      fmt::format("train.max_tokens: {:g} tokens are {:.1f} epochs of the {} "
                                  "training tokens of {}; beyond ~{:g} epochs a small model "
                                  "overfits, and quantization noise then acts as a regularizer "
                                  "(FP4 arms can look better than BF16 for that reason alone)",
                                  c.train.max_tokens, epochs, count_text(train_tokens), d.dir,
                                  kMaxEpochsWithoutWarning))
              .what();
      if (warned_.insert(message).second) warnings_.push_back(message);
    }
  }

  const Recipe& r_;
  std::map<std::string, Dataset> datasets_;  // by data.dataset as written
  std::vector<std::string> warnings_;
  std::set<std::string> warned_;
};

}  // namespace

std::vector<std::string> check_launch(const Recipe& recipe, const Plan& plan,
                                      DatasetVocabularies* vocabularies) {
  return LaunchChecker(recipe).check(plan, vocabularies);
}

void check_ranks(const Recipe& recipe, const Plan& plan, const RankLimit& limit) {
  for (const RunSpec& run : plan.runs) {
    const int ranks = run.config.parallel.data;
    if (ranks <= limit.max_ranks) continue;
    const Location l = run.where("parallel.data");
    throw RecipeError(recipe.file,
                      l.known() ? l : recipe.arms[static_cast<size_t>(run.arm_index)].at,
                      fmt::format("parallel.data: {} ranks need {} {}, more than the {} of {}{} "
                                  "(run: {})",
                                  ranks, ranks, limit.unit, limit.max_ranks, limit.source,
                                  limit.hint.empty() ? "" : "; " + limit.hint, run_label(run)));
  }
}

}  // namespace mxablate::orchestrator
