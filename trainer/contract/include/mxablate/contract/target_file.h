// RUN_DIR/target.json: a target fixed while the run trains (docs/design.md §5, "Live targets").
// A `from_arm` target is the baseline arm's median validation loss at a fraction of its budget;
// the orchestrator fixes it the moment every baseline run of the model has evaluated that far and
// hands it to every run of the model still training or not yet started, through this file beside
// config.json and events.jsonl. The trainer reads it at each evaluation (docs/design.md §4,
// "Training"). It is no part of the run's config: the run id and a checkpoint's trajectory never
// depend on it (docs/design.md §2, "Identity and resumption").
//
// The file is one small JSON object: {"val_loss": 3.2995, "basis": "median of arm fp8 at 30 %
// of its budget"}. val_loss is a finite number > 0; basis, optional, is text for people.
// The writer replaces it atomically (a temporary file in the same directory, fsynced, renamed),
// so a reader sees the old file or the new one, never a part. This header is the one definition
// both sides use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace mxablate::contract {

inline constexpr const char* kTargetFileName = "target.json";
// A target file is a few dozen bytes; anything larger is refused unread.
inline constexpr std::uintmax_t kMaxTargetFileBytes = 4096;

struct TargetFile {
  double val_loss = 0;
  std::string basis;
};

// Writes RUN_DIR/target.json atomically. Throws std::runtime_error naming the file when it
// cannot (the orchestrator's run directory is unwritable: a failure of the sweep, not the run),
// and std::invalid_argument for a val_loss that is not a finite number > 0.
void write_target_file(const std::filesystem::path& run_dir, const TargetFile& target);

// Removes RUN_DIR/target.json if it is there (a target forgotten because the recipe's target
// changed must not reach a run again). Throws std::runtime_error when it cannot.
void remove_target_file(const std::filesystem::path& run_dir);

// What a reader found in RUN_DIR/target.json.
struct TargetFileRead {
  std::optional<TargetFile> target;  // a valid file's target
  // Why the file was not used, one printable line naming it ("" when it is absent or valid):
  // not a regular file, larger than kMaxTargetFileBytes, not JSON, not an object, an unknown
  // key, a val_loss that is missing or not a finite number > 0, a basis that is not text.
  std::string problem;
};

// Never throws: the file comes from outside the trainer, and a damaged one must never end a run
// (the trainer records the problem as a warning event and trains on; docs/design.md §10).
TargetFileRead read_target_file(const std::filesystem::path& run_dir);

}  // namespace mxablate::contract
