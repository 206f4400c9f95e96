// A prepared dataset that is only its manifest.json: what `plan` and the launch checks read of a
// dataset (its vocabulary and its token counts) without any tokens on disk.
#pragma once

#include <cstdint>
#include <filesystem>

#include "mxablate/data/manifest.h"

namespace mxablate::testing {

struct ManifestDataset {
  int64_t vocab_size = 4096;
  int64_t train_tokens = 1'000'000;
  int64_t validation_tokens = 100'000;
  int bytes_per_token = 0;  // 0: the manifest's default
};

inline void write_manifest_dataset(const std::filesystem::path& dir, const ManifestDataset& d) {
  std::filesystem::create_directories(dir);
  data::Manifest m;
  m.tokenizer.file = "tokenizer.model";
  m.tokenizer.model_type = "bpe";
  m.tokenizer.vocab_size = d.vocab_size;
  if (d.bytes_per_token) m.bytes_per_token = d.bytes_per_token;
  m.train.tokens = d.train_tokens;
  m.validation.tokens = d.validation_tokens;
  data::write_manifest(dir.string(), m);
}

}  // namespace mxablate::testing
