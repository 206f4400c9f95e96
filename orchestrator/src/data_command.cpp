// `mxablate data prepare|import|verify`: turn text (or a Megatron-LM indexed dataset) into a
// prepared data directory (token shards, manifest) for `mxablate-train`, and check one. The work
// lives in trainer/data.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/data/input_file.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/megatron_import.h"
#ifdef MXABLATE_HAVE_DATA_PREPARE
#include "mxablate/data/data_prepare.h"
#endif
#ifdef MXABLATE_HAVE_DATA_COLLECT
#include "mxablate/data/corpus_collect.h"
#endif

namespace mxablate::cli {

namespace {

// Every error of a data command reaches the user as one line (docs/design.md §4 "Reading
// input"): bad input is exit 2; a file-system failure names its path and reason, never the
// library's text.
template <class Work>
void run_data_command(const char* command, Work&& work) {
  try {
    work();
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    std::string line = std::string("data ") + command + ": " + e.path1().string();
    if (!e.path2().empty()) line += " -> " + e.path2().string();
    throw std::runtime_error(line + ": " + e.code().message());
  }
}

// The limits of the one input reader (input_file.h), as options of the commands that read text.
void add_text_limit_options(CLI::App& command, data::TextLimits& limits, bool lines) {
  if (lines)
    command.add_option("--max-line-bytes", limits.max_line_bytes,
                       "Refuse a line longer than this (a JSON-lines document is one line)")
        ->capture_default_str();
  command.add_option("--max-document-bytes", limits.max_document_bytes,
                     "Cut a longer document into pieces of a quarter of this, at blank lines "
                     "where possible")
      ->capture_default_str();
}

void register_import_command(CLI::App& parent) {
  auto options = std::make_shared<data::MegatronImportOptions>();
  CLI::App* import = parent.add_subcommand(
      "import",
      "Import already-tokenized data as a prepared data directory. --megatron PREFIX reads a "
      "Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin); documents are kept whole and split "
      "into train/validation by the same rule as `data prepare`.");
  import->add_option("--megatron", options->prefixes,
                     "PREFIX of a Megatron-LM indexed dataset (PREFIX.idx, PREFIX.bin); several "
                     "make one corpus, their documents numbered in the order given")
      ->required();
  import->add_option("--out,-o", options->out_dir, "Output data directory")->required();
  import->add_option("--vocab-size", options->vocab_size,
                     "Vocabulary size of the tokenizer that made the ids (the files do not store "
                     "it); every id must be below it")
      ->required();
  import->add_option("--tokenizer", options->tokenizer,
                     "Tokenizer file to copy into the directory and record (not read)");
  import->add_option("--val-fraction", options->val_fraction,
                     "Fraction of documents held out for validation")->capture_default_str();
  import->add_option("--split-seed", options->split_seed, "Seed of the train/validation split")
      ->capture_default_str();
  import->add_option("--shard-tokens", options->shard_tokens, "Tokens per shard file at most")
      ->capture_default_str();
  import->add_flag("--force", options->force, "Replace an existing output directory");
  import->callback([options] { run_data_command("import", [&] { data::import_megatron(*options, std::cout); }); });
}

#ifdef MXABLATE_HAVE_DATA_COLLECT
void register_collect_command(CLI::App& parent) {
  auto options = std::make_shared<data::CollectOptions>();
  auto sources = std::make_shared<std::vector<std::string>>();
  CLI::App* collect = parent.add_subcommand(
      "collect",
      "Turn source trees (unpacked packages) into JSON-lines documents for `data prepare`: "
      "source code, build files and prose are kept; binary, minified, generated and data-table "
      "files and exact duplicates (across all sources, first copy kept) are dropped and counted. "
      "Writes OUT/NAME.jsonl per source; an interrupted run resumes at the source it was in.");
  collect->add_option("--source", *sources,
                      "NAME=DIR, a source tree; several are deduplicated in the order given")
      ->required();
  collect->add_option("--out,-o", options->out_dir, "Output directory")->required();
  collect->add_option("--sample-out", options->sample_dir,
                      "Also write the documents of a sample of the kept files here");
  collect->add_option("--sample-fraction", options->sample_fraction,
                      "Share of the kept files in the sample (by a keyed hash of their bytes)")
      ->capture_default_str();
  collect->add_option("--sample-seed", options->sample_seed)->capture_default_str();
  collect->add_option("--threads", options->threads, "Reading threads (0: all cores)");
  add_text_limit_options(*collect, options->limits, false);
  collect->callback([options, sources] {
    run_data_command("collect", [&] {
      for (const auto& s : *sources) options->sources.push_back(data::parse_collect_source(s));
      data::collect_corpus(*options, std::cout);
    });
  });
}
#endif

}  // namespace

void register_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand(
      "data", "Prepare (from text), import (already tokenized) and check token data for training");
  data->require_subcommand(1);

#ifdef MXABLATE_HAVE_DATA_PREPARE
  auto options = std::make_shared<data::DataPrepareOptions>();
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text into memory-mapped token shards (train/validation) with a manifest. "
      "Inputs: plain text (documents separated by blank lines) and C4-style *.json[l][.gz] "
      "(one JSON object with \"text\" per line); directories are searched recursively.");
  prepare->add_option("--input,-i", options->inputs, "Input files or directories")->required();
  prepare->add_option("--out,-o", options->out_dir, "Output data directory")->required();
  prepare->add_option("--tokenizer", options->tokenizer_model,
                      "Use this SentencePiece model instead of training a BPE tokenizer");
  prepare->add_option("--vocab-size", options->vocab_size, "Vocabulary of the trained tokenizer")
      ->capture_default_str();
  prepare->add_option("--character-coverage", options->character_coverage,
                      "SentencePiece character coverage")->capture_default_str();
  prepare->add_flag("--byte-fallback", options->byte_fallback,
                    "Encode unknown characters as UTF-8 bytes instead of <unk>");
  prepare->add_flag("--keep-whitespace", options->keep_whitespace,
                    "Train the tokenizer on the text as it is (source code): no normalization, "
                    "spaces, tabs and line breaks kept");
  prepare->add_option("--tokenizer-sentences", options->tokenizer_max_sentences,
                      "Sentences sampled to train the tokenizer")->capture_default_str();
  prepare->add_option("--tokenizer-seed", options->tokenizer_seed)->capture_default_str();
  prepare->add_option("--val-fraction", options->val_fraction,
                      "Fraction of documents held out for validation")->capture_default_str();
  prepare->add_option("--split-seed", options->split_seed)->capture_default_str();
  prepare->add_option("--shard-tokens", options->shard_tokens, "Tokens per shard file at most")
      ->capture_default_str();
  prepare->add_option("--threads", options->threads, "Encoding threads (0: all cores)");
  prepare->add_flag("--force", options->force, "Replace an existing output directory");
  add_text_limit_options(*prepare, options->limits, true);
  prepare->callback([options] { run_data_command("prepare", [&] { data::prepare_data(*options, std::cout); }); });
#else
  CLI::App* prepare = data->add_subcommand("prepare", "(unavailable: built without SentencePiece)");
  prepare->allow_extras();
  prepare->callback([] {
    throw InputError("data prepare: this build has no SentencePiece (install libsentencepiece-dev "
                     "and rebuild)");
  });
#endif

  register_import_command(*data);
#ifdef MXABLATE_HAVE_DATA_COLLECT
  register_collect_command(*data);
#endif

  auto dir = std::make_shared<std::string>();
  CLI::App* verify = data->add_subcommand(
      "verify",
      "Check a prepared data directory: shard lengths, SHA-256 checksums and every token id");
  verify->add_option("dir", *dir, "Prepared data directory")->required();
  verify->callback([dir] {
    data::TokenDataset ds;
    try {
      ds = data::open_dataset(*dir);
    } catch (const std::runtime_error& e) {
      throw InputError(e.what());
    }
    const std::string problem = data::verify_dataset(*dir);
    if (!problem.empty()) throw InputError(problem);
    const auto& m = ds.manifest;
    std::cout << *dir << ": ok: vocabulary " << m.tokenizer.vocab_size << ", " << m.train.tokens
              << " train tokens in " << m.train.shards.size() << " shards, "
              << m.validation.tokens << " validation tokens, " << m.sources.size()
              << " sources\n\n"
              << data::composition_table(m);
  });
}

}  // namespace mxablate::cli
