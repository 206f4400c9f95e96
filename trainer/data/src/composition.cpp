// The composition table of a prepared data directory (manifest.h: composition_table).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "mxablate/data/manifest.h"
#include "number_text.h"

namespace mxablate::data {
namespace {

// "linux" for ".../text/linux.jsonl": the name `data collect` gave the source.
std::string source_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".jsonl.gz", ".json.gz", ".jsonl", ".json", ".txt", ".text"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
      break;
    }
  }
  // A table cell: a '|' or a line break in a file name must not make a new column or row.
  for (char& c : name)
    if (c == '|' || c == '\n' || c == '\r') c = '_';
  return name;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string composition_table(const Manifest& m) {
  int64_t bytes = 0, text_bytes = 0, documents = 0, tokens = 0;
  bool all_counted = true;
  for (const auto& s : m.sources) {
    bytes += s.bytes;
    documents += s.documents;
    if (s.tokens < 0 || s.text_bytes < 0) {
      all_counted = false;
    } else {
      tokens += s.tokens;
      text_bytes += s.text_bytes;
    }
  }
  std::string out =
      "| source | file bytes | text bytes | documents | tokens | share of tokens | text bytes per "
      "token |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n";
  const auto row = [&](const std::string& name, int64_t b, int64_t tb, int64_t d, int64_t t) {
    out += "| " + name + " | " + with_commas(b) + " | ";
    if (t < 0 || tb < 0) {
      out += "unknown | " + with_commas(d) + " | unknown | | |\n";
      return;
    }
    out += with_commas(tb) + " | " + with_commas(d) + " | " + with_commas(t) + " | " +
           (all_counted && tokens > 0
                ? fixed(100.0 * static_cast<double>(t) / static_cast<double>(tokens), 1) + " %"
                : std::string()) +
           " | " + (t > 0 ? fixed(static_cast<double>(tb) / static_cast<double>(t), 2) : "") +
           " |\n";
  };
  for (const auto& s : m.sources)
    row(source_name(s.path), s.bytes, s.text_bytes, s.documents, s.tokens);
  row("**total**", bytes, all_counted ? text_bytes : -1, documents, all_counted ? tokens : -1);
  out += "\nTraining split: " + with_commas(m.train.tokens) + " tokens in " +
         with_commas(m.train.documents) + " documents; validation: " +
         with_commas(m.validation.tokens) + " tokens in " + with_commas(m.validation.documents) +
         " documents; vocabulary " + with_commas(m.tokenizer.vocab_size) + ".\n";
  if (!m.skipped.empty()) {
    // Counted by reason in the names' order of first appearance, then each path.
    std::vector<std::pair<std::string, int64_t>> counts;
    for (const auto& s : m.skipped) {
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == s.reason; });
      if (it == counts.end()) counts.emplace_back(s.reason, 1);
      else ++it->second;
    }
    out += "Skipped, found in an input directory but not readable:";
    for (size_t i = 0; i < counts.size(); ++i)
      out += (i ? ", " : " ") + with_commas(counts[i].second) + " " + counts[i].first;
    out += ".\n";
  }
  return out;
}

}  // namespace mxablate::data
