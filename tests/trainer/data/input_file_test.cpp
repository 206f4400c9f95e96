// The one input reader of the data commands (input_file.h): verified gzip, what a tree walk
// skips and why, the limits on a line and a document, and linear time on whitespace-free text.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/data/input_file.h"
#include "mxablate/data/text_documents.h"
#include "test_support.h"

using namespace mxablate::data;
namespace fs = std::filesystem;

namespace {

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (!it->is_symlink()) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// gzip of `text`, as a stream cut at a full flush (what a stopped download leaves) or whole.
std::string gzip(const std::string& text, bool cut_at_flush = false) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(text.size() + 1024, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, cut_at_flush ? Z_FULL_FLUSH : Z_FINISH) == (cut_at_flush ? Z_OK : Z_STREAM_END));
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string read_all(const fs::path& path, bool compressed) {
  InputFile in(path, compressed);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = in.read(buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  return text;
}

// The problem and the message an InputFile read ends with.
std::pair<InputProblem, std::string> failure(const fs::path& path, bool compressed) {
  try {
    read_all(path, compressed);
  } catch (const InputFileError& e) {
    return {e.problem, e.what()};
  }
  FAIL("read without error: " << path);
  return {};
}

bool running_as_root() { return ::geteuid() == 0; }

}  // namespace

TEST_CASE("Compressed input is verified to its end, and a file named .gz must be gzip", "[data][input]") {
  Dir dir("mxablate_input_gzip");
  const std::string text = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  write(dir.path / "good.jsonl.gz", gzip(text) + gzip(text));  // two members: both read
  CHECK(read_all(dir.path / "good.jsonl.gz", true) == text + text);

  write(dir.path / "cut.jsonl.gz", gzip(text, true));
  auto [problem, message] = failure(dir.path / "cut.jsonl.gz", true);
  CHECK(problem == InputProblem::kDamaged);
  CHECK(message == (dir.path / "cut.jsonl.gz").string() +
                       ": damaged gzip stream: unexpected end of file (cut short or corrupt; `gzip -t` "
                       "says the same)");

  std::string crc = gzip(text);
  crc[crc.size() - 8] ^= 1;
  write(dir.path / "crc.jsonl.gz", crc);
  std::tie(problem, message) = failure(dir.path / "crc.jsonl.gz", true);
  CHECK(problem == InputProblem::kDamaged);
  CHECK_THAT(message, has_text("damaged gzip stream: incorrect data check"));

  for (const std::string bytes : {text, std::string()}) {
    write(dir.path / "plain.jsonl.gz", bytes);
    std::tie(problem, message) = failure(dir.path / "plain.jsonl.gz", true);
    CHECK(problem == InputProblem::kDamaged);
    CHECK(message == (dir.path / "plain.jsonl.gz").string() + ": named as gzip-compressed but is not gzip");
  }
  // read_whole (collect) takes the same verdicts, and its size limit counts decompressed bytes.
  CHECK_THROWS_AS(read_whole(dir.path / "cut.jsonl.gz", true, 1 << 20), InputFileError);
  CHECK(read_whole(dir.path / "good.jsonl.gz", true, 10).too_large);
  CHECK(read_whole(dir.path / "good.jsonl.gz", true, 1 << 20).text == text + text);
}

TEST_CASE("Files that are not regular or not readable are refused by kind, never waited on", "[data][input]") {
  Dir dir("mxablate_input_kinds");
  const fs::path fifo = dir.path / "pipe.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto [problem, message] = failure(fifo, false);  // no writer: open must not block
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(problem == InputProblem::kSpecial);
  CHECK(message == fifo.string() + ": not a regular file (a FIFO, socket or device)");
  std::tie(problem, message) = failure(dir.path, false);
  CHECK(problem == InputProblem::kSpecial);
  CHECK(message == dir.path.string() + ": is a directory");
  std::tie(problem, message) = failure(dir.path / "missing.txt", false);
  CHECK(problem == InputProblem::kUnreadable);
  CHECK(message == (dir.path / "missing.txt").string() + ": cannot open: No such file or directory");
  if (running_as_root()) {
    WARN("running as root: the unreadable-file case runs in the data commands' CLI test");
  } else {
    write(dir.path / "secret.txt", "x\n");
    fs::permissions(dir.path / "secret.txt", fs::perms::none);
    std::tie(problem, message) = failure(dir.path / "secret.txt", false);
    CHECK(problem == InputProblem::kUnreadable);
    CHECK(message == (dir.path / "secret.txt").string() + ": cannot open: Permission denied");
  }
}

TEST_CASE("A tree walk lists regular files in path order and counts what it skips", "[data][input]") {
  Dir dir("mxablate_input_walk");
  write(dir.path / "b.txt", "b\n");
  write(dir.path / "sub/a.txt", "a\n");
  write(dir.path / "sub/skip.bin", "not wanted\n");
  fs::create_symlink("loop.txt", dir.path / "loop.txt");     // a loop: never followed
  fs::create_symlink("sub", dir.path / "link_dir");          // a link to a directory: not walked
  fs::create_symlink("b.txt", dir.path / "link.bin");        // not wanted: not counted
  REQUIRE(::mkfifo((dir.path / "sub/pipe.txt").c_str(), 0644) == 0);
  const auto wanted = [](std::string_view name) { return name.size() > 4 && name.substr(name.size() - 4) == ".txt"; };
  const TreeWalk walk = walk_tree(dir.path, wanted);
  REQUIRE(walk.files.size() == 2);
  CHECK(walk.files[0].relative == "b.txt");
  CHECK(walk.files[0].bytes == 2);
  CHECK(walk.files[1].relative == "sub/a.txt");
  using Skip = std::pair<std::string, InputProblem>;
  CHECK(walk.skipped == std::vector<Skip>{{"loop.txt", InputProblem::kSpecial},
                                          {"sub/pipe.txt", InputProblem::kSpecial}});
  if (!running_as_root()) {
    write(dir.path / "closed/c.txt", "c\n");
    fs::permissions(dir.path / "closed", fs::perms::none);
    const TreeWalk closed = walk_tree(dir.path, wanted);
    CHECK(closed.files.size() == 2);
    CHECK(std::count(closed.skipped.begin(), closed.skipped.end(), Skip{"closed", InputProblem::kUnreadable}) == 1);
  }
}

TEST_CASE("A line over the limit is refused naming file and line, and long documents are cut", "[data][input]") {
  Dir dir("mxablate_input_limits");
  TextLimits limits;
  limits.max_line_bytes = 4096;
  limits.max_document_bytes = 8192;
  write(dir.path / "long.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"" + std::string(5000, 'a') + "\"}\n");
  DocumentReader long_line((dir.path / "long.jsonl").string(), limits);
  std::string doc;
  CHECK(long_line.next(doc));
  CHECK_THROWS_WITH(long_line.next(doc), (dir.path / "long.jsonl").string() +
                                             ":2: a line longer than 4096 bytes (--max-line-bytes)");

  // One paragraph of 40 KB of plain text (lines joined by spaces): documents of at most 8 KiB
  // (pieces of 2 KiB cut after a space, the last as long as the limit allows) that together
  // are the paragraph.
  std::string text, paragraph;
  for (int i = 0; paragraph.size() < 40000; ++i) {
    const std::string line = "line " + std::to_string(i) + " of a paragraph without blank lines";
    text += line + "\n";
    paragraph += (paragraph.empty() ? "" : " ") + line;
  }
  write(dir.path / "para.txt", text);
  DocumentReader plain((dir.path / "para.txt").string(), limits);
  std::vector<std::string> docs;
  while (plain.next(doc)) docs.push_back(doc);
  REQUIRE(docs.size() >= 15);
  std::string joined;
  for (size_t i = 0; i < docs.size(); ++i) {
    CHECK(docs[i].size() <= limits.max_document_bytes);
    if (i + 1 < docs.size()) CHECK(docs[i].back() == ' ');  // cut after a space
    joined += docs[i];
  }
  CHECK(joined == paragraph);

  // The same text as one JSON document (a line within the limit): cut into 2 KiB pieces.
  limits.max_line_bytes = 1 << 20;
  write(dir.path / "one.jsonl", "{\"text\": \"" + paragraph + "\"}\n");
  DocumentReader json((dir.path / "one.jsonl").string(), limits);
  joined.clear();
  while (json.next(doc)) {
    CHECK(doc.size() <= limits.document_chunk_bytes());
    joined += doc;
  }
  CHECK(joined == paragraph);
  CHECK_THROWS_WITH(validate_text_limits({100, 8192, 4096}), "--max-line-bytes: must be >= 4096, got 100");
}

TEST_CASE("Whitespace-free runs are encoded in pieces and cut for the tokenizer trainer in linear time",
          "[data][input]") {
  const TextLimits limits;
  // Words: one segment, the document itself.
  const std::string words = "a few words of prose\nand a line";
  REQUIRE(encoding_segments(words, limits).size() == 1);
  CHECK(encoding_segments(words, limits)[0] == words);
  // A run of 10,000 two-byte characters between words: cut inside the run only, at character
  // boundaries, every max_run_bytes at most; the segments concatenate to the document.
  std::string run;
  while (run.size() < 10000) run += "\xC3\xA9";
  const std::string doc = "before " + run + " after";
  const auto segments = encoding_segments(doc, limits);
  REQUIRE(segments.size() == 3);
  std::string joined;
  for (const auto s : segments) {
    CHECK((static_cast<unsigned char>(s[0]) & 0xC0) != 0x80);
    joined += s;
  }
  CHECK(joined == doc);
  CHECK(segments[0].substr(0, 7) == "before ");
  CHECK(segments[0].size() - 7 <= limits.max_run_bytes);
  CHECK(segments[1].size() <= limits.max_run_bytes);

  // 32 MB without whitespace: the old search for a cut went back to the document's start from
  // every piece (quadratic: minutes); now each piece costs its own length.
  const std::string blob(32 << 20, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  const auto pieces = split_for_tokenizer_training(blob, 4000);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(pieces.size() == (blob.size() + 3999) / 4000);
  CHECK(encoding_segments(blob, limits).size() == (blob.size() + limits.max_run_bytes - 1) / limits.max_run_bytes);

  // A window of UTF-8 continuation bytes alone (not UTF-8, found by the input fuzzer) has no
  // character boundary to back off to: it is cut at max_bytes. Backing off to the piece's start
  // cut nothing and looped forever.
  const std::string stray = "t*" + std::string(130, '\xbc');
  const auto cut = split_for_tokenizer_training(stray, 100);
  // "t" (the last boundary in the first window), then 100 bytes from '*', then the rest.
  CHECK(cut == std::vector<std::string>{"t", stray.substr(1, 100), stray.substr(101)});
  // A boundary inside the window is still where it cuts: 'é' (2 bytes) is never split.
  std::string accents;
  for (int i = 0; i < 60; ++i) accents += "\xc3\xa9";
  for (const auto& piece : split_for_tokenizer_training(accents, 101)) {
    CHECK(piece.size() <= 101);
    CHECK(piece.size() % 2 == 0);
  }
}
