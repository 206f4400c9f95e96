// `mxablate data collect`: source trees in, one JSON-lines document file per source out — the
// text stage of the large corpus (docs/design.md §4 "The large corpus"). Which files are kept is
// corpus_filter.h; this file walks the trees, removes exact duplicates across all sources, writes
// the documents (and a by-file sample of them) and counts every file under one outcome.
//
// Layout of OUT (SOURCE is the source's name):
//   SOURCE.jsonl     {"text": …, "path": "SOURCE/relative/path"} per document (what
//                    `data prepare` reads); written as SOURCE.jsonl.partial and renamed last
//   SOURCE.collect   the source's counts (JSON; see CollectStats)
//   SOURCE.hashes    SHA-256 prefixes of the files kept, so a resumed run deduplicates the
//                    sources after it against this one without reading it again
//   collect.md       the collect table of every source (collect_table), written last
// and, with a sample directory, SAMPLE/SOURCE.jsonl holding the sampled files' documents.
//
// A source whose three files are complete is not collected again (an interrupted build resumes
// at the source it was in); everything of a source is replaced together.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "mxablate/data/corpus_filter.h"

namespace mxablate::data {

struct CollectSource {
  std::string name;  // [a-z0-9][a-z0-9._-]*, at most 64 bytes
  std::string dir;
};

struct CollectOptions {
  std::vector<CollectSource> sources;  // deduplicated in this order: the first copy is kept
  std::string out_dir;
  std::string sample_dir;              // empty: no sample
  double sample_fraction = 0;          // of the kept files, by a keyed hash of their bytes
  uint64_t sample_seed = 1;
  TextLimits limits;                   // max_document_bytes cuts long texts (input_file.h)
  int threads = 0;                     // 0: all cores
};

struct DropCount {
  int64_t files = 0;
  int64_t bytes = 0;
};

struct CollectStats {
  std::string source;
  int64_t files = 0, bytes = 0;             // entries seen under the directory (kept + dropped)
  int64_t kept_files = 0, kept_bytes = 0;   // became documents
  int64_t documents = 0;                    // a kept file longer than max_document_bytes is several
  int64_t sample_files = 0, sample_bytes = 0;
  std::map<DropReason, DropCount> dropped;
  bool resumed = false;                     // read back from a previous run, not collected now
};

// Parses "NAME=DIR" (std::invalid_argument naming the argument when malformed).
CollectSource parse_collect_source(const std::string& argument);

// Validates (std::invalid_argument naming the option and value: exit 2), then collects each
// source in turn. Progress lines go to `log`, and at the end the collect table, also written
// to OUT/collect.md.
std::vector<CollectStats> collect_corpus(const CollectOptions& options, std::ostream& log);

// Files seen, kept (files, text bytes, documents, sampled) and dropped by reason, one row per
// source and a total row: a Markdown table (source names are [a-z0-9._-], nothing to escape).
std::string collect_table(const std::vector<CollectStats>& sources);
inline constexpr const char* kCollectTableFile = "collect.md";

}  // namespace mxablate::data
