#include "mxablate/data/corpus_collect.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "mxablate/contract/json_file.h"
#include "mxablate/data/sequence_sampler.h"  // splitmix64
#include "mxablate/data/input_file.h"
#include "mxablate/data/sha256.h"
#include "number_text.h"

namespace mxablate::data {
namespace {

namespace fs = std::filesystem;

// A batch of files read in parallel, then taken in path order: at most this many files, and at
// most kBatchTextBytes of text they may hold (a compressed file counted at the most it may
// decompress to), or one file per thread when that is more. This bounds the text held at once
// (docs/design.md §4 "Reading input"), whatever the tree holds.
constexpr size_t kBatchFiles = 512;
constexpr int64_t kBatchTextBytes = int64_t{512} << 20;
constexpr size_t kHashBytes = 16;  // 128 bits of SHA-256: no collision among billions of files

using FileKey = std::array<uint8_t, kHashBytes>;

struct FileKeyHash {
  size_t operator()(const FileKey& k) const {
    uint64_t v;
    std::memcpy(&v, k.data(), sizeof v);
    return static_cast<size_t>(v);
  }
};
using KeySet = std::unordered_set<FileKey, FileKeyHash>;

FileKey key_of(std::string_view text) {
  Sha256 h;
  h.update(text);
  const std::string hex = h.hex_digest();
  FileKey key{};
  for (size_t i = 0; i < kHashBytes; ++i)
    key[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return key;
}

// The sample takes whole files: a keyed hash of the file's bytes against the fraction.
bool in_sample(const FileKey& key, uint64_t seed, double fraction) {
  if (fraction <= 0) return false;
  uint64_t v;
  std::memcpy(&v, key.data(), sizeof v);
  const double u = static_cast<double>(splitmix64(v ^ splitmix64(seed)) >> 11) * 0x1.0p-53;
  return u < fraction;
}

bool valid_source_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  const auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (!first && (c == '.' || c == '_' || c == '-'));
  };
  for (size_t i = 0; i < name.size(); ++i)
    if (!ok(name[i], i == 0)) return false;
  return true;
}

// A directory as one comparable path: "out", "out/", "out/." and "x/../out" are one, whether or
// not it exists yet (weakly_canonical keeps the trailing separator of a path that does not).
fs::path comparable_dir(const std::string& dir) {
  fs::path p = fs::weakly_canonical(fs::absolute(dir)).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

// The value as given ("1.5", "-1e-09", "nan"), not std::to_string's six decimals ("-0.000000").
std::string shown_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

void validate(const CollectOptions& o) {
  if (o.sources.empty()) throw std::invalid_argument("--source: at least one NAME=DIR");
  if (o.out_dir.empty()) throw std::invalid_argument("--out: required");
  std::unordered_set<std::string> names;
  for (const auto& s : o.sources) {
    if (!valid_source_name(s.name))
      throw std::invalid_argument("--source: '" + s.name +
                                  "': a name is 1-64 of a-z 0-9 . _ - starting with a letter or "
                                  "digit");
    if (!names.insert(s.name).second)
      throw std::invalid_argument("--source: '" + s.name + "' is given twice");
    std::error_code ec;
    if (!fs::is_directory(s.dir, ec))
      throw std::invalid_argument("--source: " + s.name + "=" + s.dir + ": not a directory");
  }
  if (!(o.sample_fraction >= 0 && o.sample_fraction <= 1))
    throw std::invalid_argument("--sample-fraction: must be in [0, 1], got " +
                                shown_number(o.sample_fraction));
  if (o.sample_fraction > 0 && o.sample_dir.empty())
    throw std::invalid_argument("--sample-fraction: needs --sample-out");
  if (!o.sample_dir.empty() && comparable_dir(o.sample_dir) == comparable_dir(o.out_dir))
    throw std::invalid_argument("--sample-out: must differ from --out");
  validate_text_limits(o.limits);
}

struct FileResult {
  int64_t bytes = 0;
  std::optional<DropReason> dropped;
  std::string text;
  FileKey key{};
};

// A file's outcome. What the one input reader (input_file.h) cannot read is counted under its
// problem, as `data prepare` lists it: never an error that stops the collect.
FileResult examine(const fs::path& path, int64_t bytes) {
  FileResult r;
  r.bytes = bytes;
  const std::string name = path.filename().string();
  if (!is_text_file_name(name)) {
    r.dropped = DropReason::kNotText;
    return r;
  }
  if (bytes > kMaxCollectFileBytes) {
    r.dropped = DropReason::kTooLarge;
    return r;
  }
  WholeText read;
  try {
    read = read_whole(path, is_compressed_file_name(name), kMaxCollectFileBytes);
  } catch (const InputFileError& e) {
    r.dropped = drop_reason_of(e.problem);
    return r;
  }
  if (read.too_large) {
    r.dropped = DropReason::kTooLarge;
    return r;
  }
  r.dropped = classify_text(read.text);
  if (!r.dropped) {
    r.key = key_of(read.text);
    repair_utf8(read.text);
    r.text = std::move(read.text);
  }
  return r;
}

nlohmann::json stats_json(const CollectStats& s, const std::string& dir) {
  nlohmann::json dropped = nlohmann::json::object();
  for (DropReason r : kAllDropReasons) {
    const auto it = s.dropped.find(r);
    const DropCount c = it == s.dropped.end() ? DropCount{} : it->second;
    dropped[drop_reason_name(r)] = {{"files", c.files}, {"bytes", c.bytes}};
  }
  return {{"source", s.source},       {"dir", dir},
          {"files", s.files},         {"bytes", s.bytes},
          {"kept_files", s.kept_files}, {"kept_bytes", s.kept_bytes},
          {"documents", s.documents}, {"sample_files", s.sample_files},
          {"sample_bytes", s.sample_bytes}, {"dropped", dropped}};
}

// A previous run's counts, or nullopt when the file is missing or not what we wrote (then the
// source is collected again: these are our own files, and a damaged one costs only time).
std::optional<CollectStats> read_stats(const fs::path& file, const std::string& source) {
  try {
    const nlohmann::json j = contract::parse_json_file(file.string());
    CollectStats s;
    std::string name;
    if (!contract::json_to(j.at("source"), name).empty() || name != source) return std::nullopt;
    s.source = name;
    for (auto [key, field] : {std::pair{"files", &s.files}, {"bytes", &s.bytes},
                              {"kept_files", &s.kept_files}, {"kept_bytes", &s.kept_bytes},
                              {"documents", &s.documents}, {"sample_files", &s.sample_files},
                              {"sample_bytes", &s.sample_bytes}})
      if (!contract::json_to(j.at(key), *field).empty()) return std::nullopt;
    for (DropReason r : kAllDropReasons) {
      const auto& d = j.at("dropped").at(drop_reason_name(r));
      DropCount c;
      if (!contract::json_to(d.at("files"), c.files).empty() ||
          !contract::json_to(d.at("bytes"), c.bytes).empty())
        return std::nullopt;
      if (c.files) s.dropped[r] = c;
    }
    s.resumed = true;
    return s;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::vector<FileKey>> read_hashes(const fs::path& file, int64_t expected) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec || size != static_cast<uintmax_t>(expected) * kHashBytes) return std::nullopt;
  std::vector<FileKey> keys(static_cast<size_t>(expected));
  std::ifstream in(file, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(keys.data()), static_cast<std::streamsize>(size)))
    return std::nullopt;
  return keys;
}

// Writes `path` by way of PATH.partial, so a complete name never holds a partial file.
class PartialFile {
 public:
  explicit PartialFile(fs::path path) : path_(std::move(path)), partial_(path_.string() + ".partial") {
    out_ = std::fopen(partial_.c_str(), "wb");
    if (!out_) throw std::runtime_error(partial_.string() + ": cannot create: " + std::strerror(errno));
  }
  ~PartialFile() {
    if (out_) {
      std::fclose(out_);
      std::error_code ec;
      fs::remove(partial_, ec);
    }
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  void write(const void* data, size_t n) {
    if (n && std::fwrite(data, 1, n, out_) != n)
      throw std::runtime_error(partial_.string() + ": write failed: " + std::strerror(errno));
  }
  void write(std::string_view s) { write(s.data(), s.size()); }
  void publish() {
    const bool ok = std::fflush(out_) == 0 && ::fsync(fileno(out_)) == 0;
    std::fclose(out_);
    out_ = nullptr;
    if (!ok) throw std::runtime_error(partial_.string() + ": write failed: " + std::strerror(errno));
    fs::rename(partial_, path_);
  }

 private:
  fs::path path_, partial_;
  std::FILE* out_ = nullptr;
};

std::string human_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void log_source(std::ostream& log, const CollectStats& s, double seconds) {
  log << "data collect: " << s.source << ": " << (s.resumed ? "already collected: " : "")
      << s.kept_files << " of " << s.files << " files kept (" << human_bytes(s.kept_bytes)
      << " of " << human_bytes(s.bytes) << "), " << s.documents << " documents";
  if (s.sample_files) log << ", " << s.sample_files << " files sampled";
  for (DropReason r : kAllDropReasons)
    if (const auto it = s.dropped.find(r); it != s.dropped.end())
      log << "; " << drop_reason_name(r) << " " << it->second.files;
  if (!s.resumed) log << " (" << seconds << " s)";
  log << std::endl;  // a line per source as it ends, also into a file
}

class SourceCollector {
 public:
  SourceCollector(const CollectOptions& o, int threads, KeySet& seen)
      : o_(o), threads_(threads), seen_(seen) {}

  CollectStats run(const CollectSource& source) {
    const fs::path out(o_.out_dir);
    const fs::path jsonl = out / (source.name + ".jsonl");
    const fs::path stats_file = out / (source.name + ".collect");
    const fs::path hashes_file = out / (source.name + ".hashes");
    const bool sampling = !o_.sample_dir.empty();
    const fs::path sample = fs::path(o_.sample_dir) / (source.name + ".jsonl");

    if (fs::exists(jsonl) && (!sampling || fs::exists(sample))) {
      if (auto stats = read_stats(stats_file, source.name)) {
        if (auto keys = read_hashes(hashes_file, stats->kept_files)) {
          for (const auto& k : *keys) seen_.insert(k);
          return *stats;
        }
      }
    }
    // Not complete: everything of this source is made again, together.
    for (const fs::path& p : {jsonl, stats_file, hashes_file})
      fs::remove(p);
    if (sampling) fs::remove(sample);

    CollectStats stats;
    stats.source = source.name;
    PartialFile documents(jsonl);
    std::optional<PartialFile> sampled;
    if (sampling) sampled.emplace(sample);
    std::vector<FileKey> kept_keys;

    // Links are not followed (a link out of the tree must not pull in files of another source,
    // or loop); they, special files and what cannot be read are counted, never an error.
    const TreeWalk walk = walk_tree(source.dir, [](std::string_view) { return true; });
    for (const auto& [relative, problem] : walk.skipped) {
      FileResult skipped;
      skipped.dropped = drop_reason_of(problem);
      take(stats, skipped, source.name + "/" + relative, documents, sampled, kept_keys);
    }
    std::vector<std::pair<std::string, int64_t>> files;
    for (const auto& f : walk.files) files.emplace_back(f.relative, f.bytes);
    std::vector<FileResult> results;
    const int64_t budget = std::max(kBatchTextBytes, kMaxCollectFileBytes * threads_);
    for (size_t begin = 0, end = 0; begin < files.size(); begin = end) {
      int64_t text = 0;
      for (end = begin; end < files.size() && end - begin < kBatchFiles; ++end) {
        const int64_t most = is_compressed_file_name(files[end].first) ? kMaxCollectFileBytes
                                                                       : std::min(files[end].second, kMaxCollectFileBytes);
        if (end > begin && text + most > budget) break;
        text += most;
      }
      results.assign(end - begin, {});
      std::vector<std::thread> workers;
      std::vector<std::string> errors(static_cast<size_t>(threads_));
      for (int t = 0; t < threads_; ++t) {
        workers.emplace_back([&, t] {
          try {
            for (size_t i = begin + static_cast<size_t>(t); i < end;
                 i += static_cast<size_t>(threads_))
              results[i - begin] = examine(fs::path(source.dir) / files[i].first, files[i].second);
          } catch (const std::exception& e) {
            errors[static_cast<size_t>(t)] = e.what();
          }
        });
      }
      for (auto& w : workers) w.join();
      for (const auto& e : errors)
        if (!e.empty()) throw std::runtime_error("data collect: " + source.name + ": " + e);
      // In path order, so which copy of a duplicate is kept does not depend on the threads.
      for (size_t i = begin; i < end; ++i) take(stats, results[i - begin], source.name + "/" +
                                                files[i].first, documents, sampled, kept_keys);
    }

    PartialFile hashes(hashes_file);
    for (const auto& k : kept_keys) hashes.write(k.data(), k.size());
    hashes.publish();
    PartialFile stats_out(stats_file);
    stats_out.write(stats_json(stats, source.dir).dump(1) + "\n");
    stats_out.publish();
    if (sampled) sampled->publish();
    documents.publish();  // last: its presence marks the source complete
    return stats;
  }

 private:
  void take(CollectStats& stats, FileResult& r, const std::string& path, PartialFile& documents,
            std::optional<PartialFile>& sampled, std::vector<FileKey>& kept_keys) {
    ++stats.files;
    stats.bytes += r.bytes;
    std::optional<DropReason> reason = r.dropped;
    if (!reason && !seen_.insert(r.key).second) reason = DropReason::kDuplicate;
    if (reason) {
      auto& c = stats.dropped[*reason];
      ++c.files;
      c.bytes += r.bytes;
      return;
    }
    kept_keys.push_back(r.key);
    ++stats.kept_files;
    stats.kept_bytes += static_cast<int64_t>(r.text.size());
    const bool sample = sampled && in_sample(r.key, o_.sample_seed, o_.sample_fraction);
    if (sample) {
      ++stats.sample_files;
      stats.sample_bytes += static_cast<int64_t>(r.text.size());
    }
    for (auto& piece : split_into_documents(std::move(r.text), o_.limits)) {
      if (piece.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
      // File names come from the archive as bytes: shown, never trusted to be UTF-8.
      const std::string line =
          nlohmann::json{{"text", piece}, {"path", path}}.dump(
              -1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      documents.write(line);
      if (sample) sampled->write(line);
      ++stats.documents;
    }
  }

  const CollectOptions& o_;
  int threads_;
  KeySet& seen_;
};

}  // namespace

CollectSource parse_collect_source(const std::string& argument) {
  const size_t eq = argument.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == argument.size())
    throw std::invalid_argument("--source: '" + argument + "': expected NAME=DIR");
  return {argument.substr(0, eq), argument.substr(eq + 1)};
}

std::vector<CollectStats> collect_corpus(const CollectOptions& o, std::ostream& log) {
  validate(o);
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  fs::create_directories(o.out_dir);
  if (!o.sample_dir.empty()) fs::create_directories(o.sample_dir);
  KeySet seen;
  SourceCollector collector(o, threads, seen);
  std::vector<CollectStats> all;
  for (const auto& source : o.sources) {
    const auto t0 = std::chrono::steady_clock::now();
    all.push_back(collector.run(source));
    log_source(log, all.back(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const std::string table = collect_table(all);
  PartialFile out(fs::path(o.out_dir) / kCollectTableFile);
  out.write(table);
  out.publish();
  log << table << std::flush;
  return all;
}

std::string collect_table(const std::vector<CollectStats>& sources) {
  std::string out = "| source | files | kept | kept text bytes | documents | sampled";
  for (DropReason r : kAllDropReasons) out += std::string(" | ") + drop_reason_name(r);
  out += " |\n|---|---:|---:|---:|---:|---:";
  for (size_t i = 0; i < std::size(kAllDropReasons); ++i) out += "|---:";
  out += "|\n";
  CollectStats total;
  const auto row = [&out](const std::string& name, const CollectStats& s) {
    out += "| " + name + " | " + with_commas(s.files) + " | " + with_commas(s.kept_files) + " | " +
           with_commas(s.kept_bytes) + " | " + with_commas(s.documents) + " | " +
           with_commas(s.sample_files);
    for (DropReason r : kAllDropReasons) {
      const auto it = s.dropped.find(r);
      out += " | " + with_commas(it == s.dropped.end() ? 0 : it->second.files);
    }
    out += " |\n";
  };
  for (const auto& s : sources) {
    row(s.source, s);
    total.files += s.files;
    total.kept_files += s.kept_files;
    total.kept_bytes += s.kept_bytes;
    total.documents += s.documents;
    total.sample_files += s.sample_files;
    for (const auto& [r, c] : s.dropped) {
      total.dropped[r].files += c.files;
      total.dropped[r].bytes += c.bytes;
    }
  }
  row("**total**", total);
  return out;
}

}  // namespace mxablate::data
