// `mxablate data prepare` and `data collect` through the binary on hostile input, one row per
// input (docs/design.md §4 "Reading input"): each ends with the exact line, the exit code, within
// a bounded time and under a 1 GiB address-space limit, and leaves nothing partial behind.
// Where the test runs as root it drops to an ordinary user (setpriv), so unreadable files are.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "process_util.h"

using mxablate::test::run_command;
using mxablate::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kBin = MXABLATE_BIN;
constexpr int kAddressSpaceKiB = 1 << 20;  // the stated bound: 1 GiB, two threads
constexpr auto kTimeLimit = std::chrono::seconds(240);

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string prose(size_t bytes, bool blank_lines) {
  static const char* words[] = {"the", "model", "trains", "in", "four", "bits", "and", "scales", "each", "block"};
  std::string text;
  for (size_t i = 0; text.size() < bytes; ++i) {
    text += words[(i * 7 + i / 10) % 10];
    text += (i % 12 == 11) ? (blank_lines && i % 120 == 119 ? "\n\n" : "\n") : " ";
  }
  return text;
}

// A gzip stream of `n` copies of `chunk`, whole or cut at a full flush (a stopped download).
std::string gzip_repeated(const std::string& chunk, size_t n, bool cut_at_flush) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out;
  std::vector<char> buffer(1 << 16);
  for (size_t i = 0; i <= n; ++i) {
    const bool last = i == n;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
    z.avail_in = last ? 0 : static_cast<uInt>(chunk.size());
    const int flush = last ? (cut_at_flush ? Z_FULL_FLUSH : Z_FINISH) : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer.data());
      z.avail_out = static_cast<uInt>(buffer.size());
      deflate(&z, flush);
      out.append(buffer.data(), buffer.size() - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out;
}

// How a command is run: under the address-space limit, as an ordinary user where we are root.
struct Runner {
  std::string as_user;
  mxablate::test::CommandResult run(const std::string& args, std::chrono::duration<double>& took) const {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_command(as_user + "bash -c " +
                         quoted("ulimit -v " + std::to_string(kAddressSpaceKiB) + " && exec " + kBin + " " + args));
    took = std::chrono::steady_clock::now() - t0;
    return r;
  }
};

// One hostile input: what it is, how the test makes it, and what each command says of it.
struct Case {
  std::string name;
  std::function<void(const fs::path& dir)> make;  // into dir/in (prepare) and dir/tree (collect)
  std::string prepare_input;                      // relative to dir
  std::string prepare_extra;                      // further options
  int prepare_exit;
  std::string prepare_says;  // exit 2: the whole output; else lines in it, or "{manifest …}"
  std::vector<std::string> collect_says;  // parts of the source's log line (exit 0)
};

// The documents `data prepare` made of the source whose path ends with `name`.
int64_t documents_of(const fs::path& out, const std::string& name) {
  std::ifstream in(out / "manifest.json");
  const auto m = nlohmann::json::parse(in, nullptr, false);
  if (!m.is_object()) return -1;
  for (const auto& source : m.at("sources")) {
    const std::string path = source.at("path").get<std::string>();
    if (path.size() >= name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0)
      return source.at("documents").get<int64_t>();
  }
  return -1;
}

bool no_partial_left(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied))
    if (e.path().filename().string().find(".partial") != std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("data prepare and data collect on hostile input: one line, the exit code, bounded time and "
          "memory, nothing partial left",
          "[cli][data][hostile]") {
  TempDir root("mxablate_data_hostile");
  Runner runner;
  if (::geteuid() == 0) {
    if (run_command("command -v setpriv").exit_code != 0) MXABLATE_SKIP("running as root without setpriv: cannot drop privileges");
    runner.as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    fs::permissions(root.path, fs::perms::all);
  }
  // A tokenizer for the rows that do not train one.
  write(root.path / "good.txt", prose(200000, true));
  std::chrono::duration<double> took{};
  auto r = runner.run("data prepare -i " + quoted(root / "good.txt") + " -o " + quoted(root / "tok") +
                          " --vocab-size 100 --threads 2",
                      took);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string tokenizer = root / "tok/tokenizer.model";

  const std::vector<Case> cases{
      {"a .jsonl.gz cut short at a flush point",
       [](const fs::path& d) {
         const std::string line = "{\"text\": \"" + prose(400, false) + "\"}\n";
         write(d / "in/cut.jsonl.gz", gzip_repeated(line, 200, true));
         write(d / "tree/cut.txt.gz", gzip_repeated(prose(400, true), 20, true));
       },
       "in/cut.jsonl.gz", "", 2,
       "mxablate: @/in/cut.jsonl.gz: damaged gzip stream: unexpected end of file (cut short or corrupt; "
       "`gzip -t` says the same)\n",
       {": 0 of 1 files kept (0.0 MiB of 0.0 MiB), 0 documents; damaged 1 ("}},
      {"a .gz that is not gzip",
       [](const fs::path& d) {
         write(d / "in/plain.jsonl.gz", "{\"text\": \"not compressed\"}\n");
         write(d / "tree/plain.txt.gz", prose(1000, true));
       },
       "in/plain.jsonl.gz", "", 2, "mxablate: @/in/plain.jsonl.gz: named as gzip-compressed but is not gzip\n",
       {": 0 of 1 files kept (0.0 MiB of 0.0 MiB), 0 documents; damaged 1 ("}},
      {"a 50 MB document (no blank line)",
       [](const fs::path& d) {
         const std::string text = prose(50 << 20, false);
         write(d / "in/big.txt", text);
         write(d / "tree/big.txt", text);
       },
       "in/big.txt", "", 0, "{documents big.txt >= 50}", {": 1 of 1 files kept (50.0 MiB of 50.0 MiB), 20"}},
      {"a gzip bomb (1 GiB of zeros in 1 MB)",
       [](const fs::path& d) {
         const std::string bomb = gzip_repeated(std::string(1 << 20, '\0'), 1024, false);
         write(d / "in/bomb.jsonl.gz", bomb);
         write(d / "tree/bomb.txt.gz", bomb);
       },
       "in/bomb.jsonl.gz", "", 2,
       "mxablate: @/in/bomb.jsonl.gz:1: a line longer than 67108864 bytes (--max-line-bytes)\n",
       {": 0 of 1 files kept (", "; too_large 1 ("}},
      {"a 50 MB line without whitespace, the tokenizer trained on it",
       [](const fs::path& d) {
         std::string line(50 << 20, 'a');
         for (size_t i = 0; i < line.size(); ++i) line[i] = static_cast<char>('a' + (i * 2654435761u >> 7) % 26);
         write(d / "in/run.txt", line + "\n");
         write(d / "tree/run.txt", line + "\n");
       },
       "in/run.txt", "--vocab-size 100 --tokenizer-sentences 20000", 0, "{documents run.txt >= 50}",
       {": 0 of 1 files kept (0.0 MiB of 50.0 MiB), 0 documents; minified 1 ("}},
      {"a symbolic link loop",
       [](const fs::path& d) {
         fs::create_directories(d / "in");
         fs::create_symlink("loop.txt", d / "in/loop.txt");
         fs::create_directories(d / "tree");
         fs::create_symlink("loop.txt", d / "tree/loop.txt");
       },
       "in", "", 0, "data prepare: skipped @/in/loop.txt (special)\n",
       {": 0 of 1 files kept (0.0 MiB of 0.0 MiB), 0 documents; special 1 ("}},
      {"a symbolic link loop named as the input",
       [](const fs::path& d) {
         fs::create_directories(d / "in");
         fs::create_symlink("loop.txt", d / "in/loop.txt");
         fs::create_directories(d / "tree");
       },
       "in/loop.txt", "", 2, "mxablate: @/in/loop.txt: cannot read: Too many levels of symbolic links\n",
       {": 0 of 0 files kept ("}},
      {"a FIFO",
       [](const fs::path& d) {
         fs::create_directories(d / "in");
         REQUIRE(::mkfifo((d / "in/pipe.txt").c_str(), 0666) == 0);
         fs::create_directories(d / "tree");
         REQUIRE(::mkfifo((d / "tree/pipe.txt").c_str(), 0666) == 0);
       },
       "in", "", 0, "data prepare: skipped @/in/pipe.txt (special)\n",
       {": 0 of 1 files kept (0.0 MiB of 0.0 MiB), 0 documents; special 1 ("}},
      {"a FIFO named as the input",
       [](const fs::path& d) {
         fs::create_directories(d / "in");
         REQUIRE(::mkfifo((d / "in/pipe.txt").c_str(), 0666) == 0);
         fs::create_directories(d / "tree");
       },
       "in/pipe.txt", "", 2, "mxablate: @/in/pipe.txt: not a regular file (a FIFO, socket or device)\n",
       {": 0 of 0 files kept ("}},
      {"a file name that is not UTF-8",
       [](const fs::path& d) {
         write(d / "in/bad\xff.txt", prose(20000, true));
         write(d / "tree/bad\xff.c", "int bad_name;\n");
       },
       "in", "", 0, "{documents bad\xEF\xBF\xBD.txt >= 1}", {": 1 of 1 files kept ("}},
      {"an unreadable file and directory",
       [](const fs::path& d) {
         for (const char* sub : {"in", "tree"}) {
           write(d / sub / "secret.txt", prose(1000, true));
           fs::permissions(d / sub / "secret.txt", fs::perms::none);
           write(d / sub / "closed/inner.txt", prose(1000, true));
           fs::permissions(d / sub / "closed", fs::perms::none);
         }
       },
       "in", "", 0, "data prepare: skipped @/in/closed (unreadable)\ndata prepare: skipped @/in/secret.txt (unreadable)\n",
       {": 0 of 2 files kept (0.0 MiB of 0.0 MiB), 0 documents; unreadable 2 ("}},
      {"an unreadable file named as the input",
       [](const fs::path& d) {
         write(d / "in/secret.txt", prose(1000, true));
         fs::permissions(d / "in/secret.txt", fs::perms::none);
         fs::create_directories(d / "tree");
       },
       "in/secret.txt", "", 2, "mxablate: @/in/secret.txt: cannot open: Permission denied\n", {": 0 of 0 files kept ("}},
      {"an empty source",
       [](const fs::path& d) {
         write(d / "in/empty.txt", "");
         fs::create_directories(d / "tree");
       },
       "in/empty.txt", "", 2, "mxablate: --input: the inputs produced no training tokens\n", {": 0 of 0 files kept ("}},
  };

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("case: " << c.name);
    const fs::path dir = root.path / ("case" + std::to_string(i));
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::all);
    c.make(dir);
    const auto expand = [&](std::string text) {
      for (size_t at; (at = text.find('@')) != std::string::npos;) text.replace(at, 1, dir.string());
      return text;
    };
    // data prepare: inputs the row does not break are prepared with good text beside them.
    const bool alone = c.prepare_exit != 0;
    std::string args = "data prepare -i " + quoted((dir / c.prepare_input).string()) +
                       (alone ? "" : " -i " + quoted(root / "good.txt")) + " -o " + quoted((dir / "out").string()) +
                       " --threads 2 " + (c.prepare_extra.empty() ? "--tokenizer " + quoted(tokenizer) : c.prepare_extra);
    r = runner.run(args, took);
    {
      INFO(args << "\n" << r.output.substr(0, 4000));
      CHECK(took < kTimeLimit);
      CHECK(r.exit_code == c.prepare_exit);
      if (c.prepare_exit == 2) {
        CHECK(r.output == expand(c.prepare_says));
        CHECK_FALSE(fs::exists(dir / "out"));
      } else if (c.prepare_says.rfind("{documents ", 0) == 0) {  // "{documents NAME >= N}"
        const std::string spec = c.prepare_says.substr(11, c.prepare_says.size() - 12);
        const size_t ge = spec.find(" >= ");
        CHECK(documents_of(dir / "out", spec.substr(0, ge)) >= std::stoll(spec.substr(ge + 4)));
      } else {
        CHECK(r.output.find(expand(c.prepare_says)) != std::string::npos);
      }
      CHECK(no_partial_left(dir));
    }
    // data collect: the same input in a source tree is counted, never an error.
    args = "data collect --source s=" + quoted((dir / "tree").string()) + " --out " +
           quoted((dir / "collected").string()) + " --threads 2";
    r = runner.run(args, took);
    {
      INFO(args << "\n" << r.output.substr(0, 4000));
      CHECK(took < kTimeLimit);
      CHECK(r.exit_code == 0);
      const size_t line = r.output.find("data collect: s: ");
      REQUIRE(line != std::string::npos);
      const std::string said = r.output.substr(line + 15, r.output.find('\n', line) - line - 15);
      for (const auto& part : c.collect_says) CHECK(said.find(part) != std::string::npos);
      CHECK(no_partial_left(dir));
    }
    fs::remove_all(dir);  // 50 MB inputs: one case's files at a time
  }
}
