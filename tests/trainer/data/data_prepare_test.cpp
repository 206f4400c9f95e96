// `data prepare`: plain text and C4-style .jsonl.gz in, tokenizer + shards + manifest out, with
// counts and checksums that agree with the files; deterministic; a given tokenizer reproduces the
// same shards; bad inputs are named.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "catch.h"
#include <sentencepiece_processor.h>

#include "mxablate/data/data_prepare.h"
#include "mxablate/data/sha256.h"
#include "mxablate/data/text_documents.h"
#include "test_support.h"
#include "test_text.h"

using namespace mxablate::data;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// C4's layout: one JSON object per line with "text" (and other fields), gzip-compressed.
void write_jsonl_gz(const fs::path& path, int documents, uint64_t seed) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  REQUIRE(f != nullptr);
  std::istringstream paragraphs(mxablate::test::make_test_corpus(documents, seed));
  std::string line, doc;
  const auto flush = [&] {
    if (doc.empty()) return;
    const std::string json =
        nlohmann::json{{"text", doc}, {"timestamp", "2019-04-25T12:57:54Z"}, {"url", "https://example.org"}}
            .dump() + "\n";
    gzwrite(f, json.data(), static_cast<unsigned>(json.size()));
    doc.clear();
  };
  while (std::getline(paragraphs, line)) {
    if (line.empty()) {
      flush();
    } else {
      doc += (doc.empty() ? "" : "\n") + line;
    }
  }
  flush();
  gzclose(f);
}

struct Inputs {
  fs::path dir, text, jsonl;
};

Inputs make_inputs(const std::string& name) {
  Inputs in;
  in.dir = fresh_dir(name);
  fs::create_directories(in.dir / "src");
  in.text = in.dir / "src" / "book.txt";
  mxablate::test::write_test_corpus(in.text.string(), 300, 11);
  in.jsonl = in.dir / "src" / "c4-train.00000-of-01024.json.gz";
  write_jsonl_gz(in.jsonl, 200, 12);
  return in;
}

DataPrepareOptions options(const Inputs& in, const std::string& out) {
  DataPrepareOptions o;
  o.inputs = {(in.dir / "src").string()};
  o.out_dir = (in.dir / out).string();
  o.vocab_size = 160;
  o.val_fraction = 0.1;
  o.threads = 2;
  return o;
}

std::vector<int32_t> all_tokens(const TokenStream& s) {
  std::vector<int32_t> v(static_cast<size_t>(s.size()));
  s.read(0, v);
  return v;
}

}  // namespace

TEST_CASE("Documents: blank-line paragraphs in text, the text field in JSON lines", "[data][prepare]") {
  const Inputs in = make_inputs("mxablate_prepare_docs");
  DocumentReader text(in.text.string());
  std::string doc;
  int count = 0;
  while (text.next(doc)) {
    ++count;
    CHECK(doc.find('\n') == std::string::npos);  // wrapped lines joined into one paragraph
    CHECK(doc.rfind("The ", 0) == 0);
  }
  CHECK(count == 300);
  DocumentReader json(in.jsonl.string());
  count = 0;
  while (json.next(doc)) ++count;
  CHECK(count == 200);
  CHECK(split_for_tokenizer_training(std::string(50, 'a') + " " + std::string(50, 'b'), 60) ==
        std::vector<std::string>{std::string(50, 'a'), std::string(50, 'b')});
}

TEST_CASE("data prepare writes a tokenizer, shards and a consistent manifest", "[data][prepare]") {
  const Inputs in = make_inputs("mxablate_prepare_main");
  std::ostringstream log;
  const Manifest m = prepare_data(options(in, "prepared"), log);
  const std::string out = (in.dir / "prepared").string();
  CHECK(log.str().find("data prepare:") != std::string::npos);
  CHECK_FALSE(fs::exists(out + ".partial"));

  CHECK(m.tokenizer.trained_here);
  CHECK(m.tokenizer.vocab_size == 160);
  CHECK(m.tokenizer.eos_id == 2);
  CHECK(m.tokenizer.sha256 == sha256_file(out + "/tokenizer.model"));
  REQUIRE(m.sources.size() == 2);  // sorted: book.txt, then the .json.gz
  CHECK(m.sources[0].path == in.text.string());
  CHECK(m.sources[0].documents == 300);
  CHECK(m.sources[0].sha256 == sha256_file(in.text.string()));
  CHECK(m.sources[0].bytes == static_cast<int64_t>(fs::file_size(in.text)));
  CHECK(m.sources[1].documents == 200);
  CHECK(m.train.documents + m.validation.documents == 500);
  CHECK(m.validation.documents == Approx(50).margin(20));  // 10 % of the documents

  // The manifest on disk says the same, and the shards hold what it says.
  const TokenDataset ds = open_dataset(out);
  CHECK(ds.manifest.train.tokens == m.train.tokens);
  CHECK(ds.train.size() == m.train.tokens);
  CHECK(ds.validation.size() == m.validation.tokens);
  CHECK(verify_dataset(out) == "");
  // Every document ends with EOS, so the splits hold exactly one EOS per document.
  const auto train = all_tokens(ds.train);
  CHECK(std::count(train.begin(), train.end(), 2) == m.train.documents);
  CHECK(train.back() == 2);
  CHECK(*std::max_element(train.begin(), train.end()) < 160);
  // ~2 characters per token or better on this text.
  CHECK(m.train.tokens + m.validation.tokens < (m.sources[0].bytes + 200 * 300) / 2);

  // A corrupted shard is caught by verify.
  {
    std::fstream f(out + "/" + m.train.shards[0].file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x01');
  }
  CHECK_THAT(verify_dataset(out), has_text("checksum does not match"));
}

TEST_CASE("data prepare is deterministic, and a given tokenizer reproduces the shards", "[data][prepare]") {
  const Inputs in = make_inputs("mxablate_prepare_repeat");
  std::ostringstream log;
  const Manifest a = prepare_data(options(in, "a"), log);
  const Manifest b = prepare_data(options(in, "b"), log);
  // The model file embeds the path it was trained at, so compare its vocabulary (pieces and
  // scores) and what it produced.
  std::ifstream va(in.dir / "a" / "tokenizer.vocab"), vb(in.dir / "b" / "tokenizer.vocab");
  std::stringstream sa, sb;
  sa << va.rdbuf();
  sb << vb.rdbuf();
  CHECK(sa.str().size() > 1000);
  CHECK(sa.str() == sb.str());
  CHECK(a.train.shards[0].sha256 == b.train.shards[0].sha256);
  CHECK(a.validation.shards[0].sha256 == b.validation.shards[0].sha256);

  DataPrepareOptions given = options(in, "given");
  given.tokenizer_model = (in.dir / "a" / "tokenizer.model").string();
  given.vocab_size = 999;  // ignored with a given model
  given.shard_tokens = 1024;  // and cut into many shards
  const Manifest g = prepare_data(given, log);
  CHECK_FALSE(g.tokenizer.trained_here);
  CHECK(g.tokenizer.given_path == given.tokenizer_model);
  CHECK(g.tokenizer.vocab_size == 160);
  CHECK(g.train.tokens == a.train.tokens);
  CHECK(g.train.shards.size() == static_cast<size_t>((a.train.tokens + 1023) / 1024));
  CHECK(all_tokens(open_dataset((in.dir / "given").string()).train) ==
        all_tokens(open_dataset((in.dir / "a").string()).train));
}

TEST_CASE("data prepare names bad inputs", "[data][prepare]") {
  const Inputs in = make_inputs("mxablate_prepare_errors");
  std::ostringstream log;
  DataPrepareOptions o = options(in, "out");
  o.inputs = {(in.dir / "missing.txt").string()};
  CHECK_THROWS_WITH(prepare_data(o, log), has_text("missing.txt: no such file"));

  const fs::path bad = in.dir / "bad.jsonl";
  std::ofstream(bad) << "{\"text\": \"fine\"}\n{\"body\": \"no text field\"}\n";
  o.inputs = {bad.string()};
  CHECK_THROWS_WITH(prepare_data(o, log), has_text("bad.jsonl:2: no string field \"text\""));
  // Through the one JSON reader (contract/json_file.h): named by file, line and key.
  for (const auto& [line, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"{\"text\": \"a\", \"n\": 1e400}", "bad.jsonl:1: n: number overflow parsing '1e400' (not a finite double)"},
           {"{\"text\": NaN}", "bad.jsonl:1: text: not valid JSON at byte 10 (invalid literal; last read: '\"text\": N')"},
           {"{\"text\": \"cut", "bad.jsonl:1: text: not valid JSON at byte 14 (invalid string: missing closing quote; last read: '\"cut')"},
           {"[1, 2]", "bad.jsonl:1: not a JSON object"}}) {
    std::ofstream(bad, std::ios::trunc) << line << "\n";
    try {
      prepare_data(o, log);
      FAIL("accepted " << line);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK_THAT(what, has_text(message));
      CHECK(what.find("json.exception") == std::string::npos);
    }
  }

  o = options(in, "out");
  prepare_data(o, log);
  CHECK_THROWS_WITH(prepare_data(o, log), has_text("already exists"));
  o.force = true;
  CHECK_NOTHROW(prepare_data(o, log));
  o.val_fraction = 1.5;
  CHECK_THROWS_AS(prepare_data(o, log), std::invalid_argument);
}

TEST_CASE("data prepare counts text bytes and tokens per source, writes composition.md, keeps whitespace when asked", "[data][prepare]") {
  const fs::path dir = fresh_dir("mxablate_prepare_composition");
  fs::create_directories(dir / "text");
  // Two sources as `data collect` writes them: code (indentation, tabs, blank lines, runs of
  // spaces) and prose.
  std::vector<std::vector<std::string>> texts(2);
  for (int i = 0; i < 150; ++i)
    texts[0].push_back("static int f" + std::to_string(i) + "(int x) {\n\tif (x > " + std::to_string(i) +
                       ") {\n        return x  *  2;\n    }\n\n    return x;   // done\n}\n");
  std::istringstream paragraphs(mxablate::test::make_test_corpus(150, 21));
  for (std::string line, doc; std::getline(paragraphs, line);) {
    if (!line.empty()) {
      doc += line + "\n";
    } else if (!doc.empty()) {
      texts[1].push_back(doc);
      doc.clear();
    }
  }
  REQUIRE(texts[1].size() >= 140);
  const char* names[] = {"code.jsonl", "prose.jsonl"};
  for (int s = 0; s < 2; ++s) {
    std::ofstream out(dir / "text" / names[s]);
    for (const auto& t : texts[s])
      out << nlohmann::json{{"text", t}, {"path", std::string(names[s]) + "/x"}}.dump() << "\n";
  }

  DataPrepareOptions o;
  o.inputs = {(dir / "text").string()};
  o.out_dir = (dir / "prepared").string();
  o.vocab_size = 400;
  o.byte_fallback = true;
  o.keep_whitespace = true;
  o.val_fraction = 0.1;
  o.threads = 2;
  std::ostringstream log;
  const Manifest m = prepare_data(o, log);

  REQUIRE(m.sources.size() == 2);
  int64_t tokens = 0;
  for (int s = 0; s < 2; ++s) {
    int64_t bytes = 0;
    for (const auto& t : texts[s]) bytes += static_cast<int64_t>(t.size());
    CHECK(m.sources[s].text_bytes == bytes);
    CHECK(m.sources[s].documents == static_cast<int64_t>(texts[s].size()));
    CHECK(m.sources[s].tokens > m.sources[s].documents);
    tokens += m.sources[s].tokens;
  }
  CHECK(tokens == m.train.tokens + m.validation.tokens);
  CHECK(m.validation.tokens > 0);
  CHECK(m.options.at("keep_whitespace") == true);

  const Manifest on_disk = read_manifest(o.out_dir);
  CHECK(on_disk.sources[0].tokens == m.sources[0].tokens);
  CHECK(on_disk.sources[1].text_bytes == m.sources[1].text_bytes);
  std::ifstream table_file(fs::path(o.out_dir) / kCompositionFile);
  std::stringstream table;
  table << table_file.rdbuf();
  CHECK(table.str() == composition_table(m));
  CHECK(table.str() == composition_table(on_disk));
  CHECK_THAT(table.str(), has_text("\n| code | "));
  CHECK_THAT(table.str(), has_text("\n| prose | "));
  CHECK_THAT(log.str(), has_text(composition_table(m)));

  // Every document decodes back to its exact text: line breaks, tabs and runs of spaces survive.
  sentencepiece::SentencePieceProcessor sp;
  REQUIRE(sp.Load((fs::path(o.out_dir) / "tokenizer.model").string()).ok());
  std::vector<std::string> expected;
  for (const auto& source : texts) expected.insert(expected.end(), source.begin(), source.end());
  const TokenDataset ds = open_dataset(o.out_dir);
  std::vector<std::string> decoded_train, decoded_validation;
  for (auto [stream, decoded] : {std::pair{&ds.train, &decoded_train}, std::pair{&ds.validation, &decoded_validation}}) {
    std::vector<int> ids;
    for (int32_t t : all_tokens(*stream)) {
      if (t == m.tokenizer.eos_id) {
        std::string text;
        REQUIRE(sp.Decode(ids, &text).ok());
        decoded->push_back(text);
        ids.clear();
      } else {
        ids.push_back(t);
      }
    }
    CHECK(ids.empty());
  }
  CHECK(static_cast<int64_t>(decoded_validation.size()) == m.validation.documents);
  // Documents in order, each to the split its index falls in.
  size_t train_i = 0, validation_i = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("document " << i);
    if (is_validation_document(o.split_seed, static_cast<int64_t>(i), o.val_fraction)) {
      REQUIRE(validation_i < decoded_validation.size());
      CHECK(decoded_validation[validation_i++] == expected[i]);
    } else {
      REQUIRE(train_i < decoded_train.size());
      CHECK(decoded_train[train_i++] == expected[i]);
    }
  }
  CHECK(train_i == decoded_train.size());
  CHECK(validation_i == decoded_validation.size());
}

TEST_CASE("data prepare: a vocabulary the text cannot fill is bad input naming --vocab-size, and .dz is read as gzip",
          "[data][prepare]") {
  const Inputs in = make_inputs("mxablate_prepare_vocab_dz");
  std::ostringstream log;
  DataPrepareOptions o = options(in, "out");
  o.inputs = {in.text.string()};
  o.vocab_size = 100000;
  try {
    prepare_data(o, log);
    FAIL("a 100000-token vocabulary was trained on a small book");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(std::string(e.what()), has_text("--vocab-size 100000: training the SentencePiece tokenizer on the "
                                               "inputs failed: "));
    CHECK_THAT(std::string(e.what()), has_text("Vocabulary size too high"));
  }
  CHECK_FALSE(fs::exists(in.dir / "out.partial"));
  CHECK_FALSE(fs::exists(in.dir / "out"));

  // The same gzip stream named .dz (dictzip is gzip): the same documents as the .json.gz, read
  // by the same rule as `data collect` reads it.
  const fs::path dz = in.dir / "book.txt.dz";
  {
    std::ifstream book(in.text, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(book)), {});
    gzFile f = gzopen(dz.string().c_str(), "wb");
    REQUIRE(f != nullptr);
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  }
  o = options(in, "from_dz");
  o.inputs = {dz.string()};
  const Manifest from_dz = prepare_data(o, log);
  o = options(in, "from_txt");
  o.inputs = {in.text.string()};
  const Manifest from_txt = prepare_data(o, log);
  REQUIRE(from_dz.sources.size() == 1);
  CHECK(from_dz.sources[0].documents == 300);
  CHECK(from_dz.train.tokens == from_txt.train.tokens);
  CHECK(from_dz.train.shards[0].sha256 == from_txt.train.shards[0].sha256);
}
