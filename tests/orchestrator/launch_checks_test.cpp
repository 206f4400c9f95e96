// `mxablate plan` and `mxablate run` check a recipe's runs against the datasets they name before
// anything is launched, at the key's file:line:column: a missing or unprepared dataset, a
// sequence length no split can hold, more evaluation tokens than the validation split holds; and
// warn about token budgets beyond two epochs. Datasets here are described by their manifest
// alone (what the checks read), written with the same code `mxablate data prepare` uses.
#include <fmt/format.h>

#include "catch.h"
#include "mxablate/data/manifest.h"
#include "mxablate/data/sequence_sampler.h"
#include "mxablate/orchestrator/launch_checks.h"
#include "manifest_dataset.h"
#include "test_util.h"
#ifdef MXABLATE_HAVE_DATA_PREPARE
#include <sstream>

#include "mxablate/data/data_prepare.h"
#include "test_text.h"
#endif

using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

// A prepared dataset's manifest: `train` and `validation` tokens, a 4096-token vocabulary.
void write_dataset(const fs::path& dir, int64_t train, int64_t validation) {
  write_manifest_dataset(dir, {4096, train, validation});
}

struct Settings {
  std::string dataset;
  int seq_len = 64;
  int global_batch = 1024;
  int max_tokens = 8192;
  int eval_tokens = 1024;
};

// Every key on its own line, so that the positions in the messages do not move with the values:
// dataset 5:14, seq_len 6:14, max_tokens 9:17, eval.tokens 12:13, arm A 14:3.
std::string recipe(const Settings& s) {
  return fmt::format(R"(name: checks
base:
  model: smoke
  data:
    dataset: {}
    seq_len: {}
  train:
    global_batch_tokens: {}
    max_tokens: {}
  eval:
    every_tokens: 4096
    tokens: {}
arms:
  A: {{}}
  B: {{precision: {{fprop: mxfp4}}}}
)",
                     s.dataset, s.seq_len, s.global_batch, s.max_tokens, s.eval_tokens);
}

struct Fixture {
  TempDir dir;
  fs::path data = dir.path() / "data";  // 10000 training tokens, 2000 validation tokens
  fs::path file = dir.path() / "sweep.yaml";
  Fixture() { write_dataset(data, 10000, 2000); }
  ProcessResult mx(const std::string& command, const Settings& s,
                   std::map<std::string, std::string> env = {}) {
    write_file(file, recipe(s));
    std::vector<std::string> args{kMxablate.string(), command, file.string()};
    if (command == "run")
      for (const char* a : {"--trainer", FAKE_TRAINER_BIN, "--cpu", "1", "--poll-ms", "20"})
        args.push_back(a);
    return run_process(args, dir.path(), env);
  }
  std::string at(const std::string& position) const {
    return "mxablate: " + file.string() + ":" + position + ": ";
  }
};

}  // namespace

TEST_CASE("a dataset that holds the runs plans with no warning") {
  Fixture f;
  const ProcessResult r = f.mx("plan", {f.data.string()});
  INFO(r.err);
  CHECK(r.code() == 0);
  CHECK(r.err.empty());
}

TEST_CASE("eval.tokens beyond the validation split is refused at its key") {
  Fixture f;
  const ProcessResult r = f.mx("plan", {f.data.string(), 64, 1024, 8192, 4096});
  CHECK(r.code() == 2);
  CHECK(r.out.empty());
  CHECK(r.err == f.at("12:13") +
                     fmt::format("eval.tokens: 4096 tokens (64 sequences of 64) are more than the "
                                 "validation split of {} holds (2000 tokens: 31 sequences, at "
                                 "most 1984 tokens) (run: A)\n",
                                 f.data.string()));
  // The trainer's own rule: 31 sequences of 64 (each read with the token after it) fit, 32 not.
  CHECK(mxablate::data::sequences_in_stream(2000, 64) == 31);
  CHECK(f.mx("plan", {f.data.string(), 64, 1024, 8192, 1984}).code() == 0);
  CHECK(f.mx("plan", {f.data.string(), 64, 1024, 8192, 1985}).code() == 2);
}

TEST_CASE("a sequence length longer than a split holds is refused at data.seq_len") {
  Fixture f;
  const ProcessResult r = f.mx("plan", {f.data.string(), 2048, 4096, 8192, 2048});
  CHECK(r.code() == 2);
  CHECK(r.err == f.at("6:14") + fmt::format("data.seq_len: 2048 is longer than {} allows: its "
                                            "validation split holds 2000 tokens, so a sequence "
                                            "can be at most 1999 (run: A)\n",
                                            f.data.string()));
}

TEST_CASE("a missing, unprepared or unreadable dataset is refused with how to prepare it") {
  Fixture f;
  const std::string missing = (f.dir.path() / "nope").string();
  ProcessResult r = f.mx("plan", {missing});
  CHECK(r.code() == 2);
  CHECK(r.err == f.at("5:14") + fmt::format("data.dataset: '{0}' does not exist; prepare it with "
                                            "`mxablate data prepare --input TEXT... --out {0}` (or "
                                            "import tokenized data with `mxablate data import "
                                            "--megatron PREFIX --vocab-size N --out {0}`) (run: "
                                            "A)\n",
                                            missing));
  const fs::path empty = f.dir.path() / "empty";
  fs::create_directories(empty);
  r = f.mx("plan", {empty.string()});
  CHECK(r.code() == 2);
  CHECK(r.err == f.at("5:14") +
                     fmt::format("data.dataset: '{0}' is not a prepared dataset (no "
                                 "manifest.json); prepare it with `mxablate data prepare --input "
                                 "TEXT... --out {0}` (or import tokenized data with `mxablate "
                                 "data import --megatron PREFIX --vocab-size N --out {0}`) (run: "
                                 "A)\n",
                                 empty.string()));
  write_file(empty / "manifest.json", "{\"version\": 1}");
  r = f.mx("plan", {empty.string()});
  CHECK(r.code() == 2);
  CHECK(lines_of(r.err).size() == 1);
  CHECK(r.err.rfind(f.at("5:14") + "data.dataset: '" + empty.string() + "' cannot be used: " +
                        (empty / "manifest.json").string() + ": ",
                    0) == 0);
  // "default" names the corpus MXABLATE_DEFAULT_DATASET points at (or the checkout's data/default).
  r = f.mx("plan", {"default"}, {{"MXABLATE_DEFAULT_DATASET", missing}});
  CHECK(r.code() == 2);
  CHECK(r.err == f.at("5:14") + fmt::format("data.dataset: the default dataset ({}) does not "
                                            "exist; build it with scripts/build-corpus.sh, or "
                                            "point MXABLATE_DEFAULT_DATASET at a directory made "
                                            "by `mxablate data prepare` (run: A)\n",
                                            missing));
  CHECK(f.mx("plan", {"default"}, {{"MXABLATE_DEFAULT_DATASET", f.data.string()}}).code() == 0);
}

TEST_CASE("more than two epochs of the data is a warning with the epoch count") {
  Fixture f;
  const ProcessResult r = f.mx("plan", {f.data.string(), 64, 1024, 40960, 1024});
  CHECK(r.code() == 0);
  CHECK_FALSE(r.out.empty());
  // Both arms share the budget: one warning.
  CHECK(r.err == "mxablate: warning: " + f.file.string() + ":9:17: " +
                     fmt::format("train.max_tokens: 40960 tokens are 4.1 epochs of the 10000 "
                                 "training tokens of {}; beyond ~2 epochs a small model overfits, "
                                 "and quantization noise then acts as a regularizer (FP4 arms can "
                                 "look better than BF16 for that reason alone)\n",
                                 f.data.string()));
  CHECK(f.mx("plan", {f.data.string(), 64, 1024, 20000, 1024}).err.empty());  // 2.0 epochs
}

TEST_CASE("`run` makes the same checks before it creates anything") {
  Fixture f;
  const ProcessResult r = f.mx("run", {f.data.string(), 64, 1024, 8192, 4096});
  CHECK(r.code() == 2);
  CHECK(r.out.empty());
  CHECK(r.err.rfind(f.at("12:13") + "eval.tokens: 4096 tokens (64 sequences of 64)", 0) == 0);
  CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));
  CHECK_FALSE(fs::exists(f.dir.path() / "runs"));
}

#ifdef MXABLATE_HAVE_DATA_PREPARE
// The checks read what `mxablate data prepare` writes: a real (small) prepared dataset, whose
// validation split holds exactly what its manifest says.
TEST_CASE("a dataset made by data prepare: eval.tokens is checked against its validation split") {
  Fixture f;
  const fs::path prepared = f.dir.path() / "prepared";
  fs::create_directories(f.dir.path() / "text");
  mxablate::test::write_test_corpus((f.dir.path() / "text" / "stories.txt").string(), 400, 7);
  mxablate::data::DataPrepareOptions o;
  o.inputs = {(f.dir.path() / "text").string()};
  o.out_dir = prepared.string();
  o.vocab_size = 256;
  o.val_fraction = 0.05;
  o.threads = 1;
  std::ostringstream log;
  mxablate::data::prepare_data(o, log);
  const mxablate::data::Manifest m = mxablate::data::read_manifest(prepared.string());
  const int64_t fits = mxablate::data::sequences_in_stream(m.validation.tokens, 64) * 64;
  REQUIRE(fits >= 64);
  CHECK(f.mx("plan", {prepared.string(), 64, 1024, 1024, static_cast<int>(fits)}).code() == 0);
  const ProcessResult r =
      f.mx("plan", {prepared.string(), 64, 1024, 1024, static_cast<int>(fits + 1)});
  CHECK(r.code() == 2);
  CHECK(r.err == f.at("12:13") +
                     fmt::format("eval.tokens: {} tokens ({} sequences of 64) are more than the "
                                 "validation split of {} holds ({} tokens: {} sequences, at most "
                                 "{} tokens) (run: A)\n",
                                 fits + 1, fits / 64 + 1, prepared.string(), m.validation.tokens,
                                 fits / 64, fits));
}
#endif

TEST_CASE("a run of more ranks than the slots can give is refused at its parallel.data value") {
  using namespace mxablate::orchestrator;
  const std::string text = R"(name: ranks
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, micro_batch_tokens: 256, max_tokens: 8192}
arms:
  A: {}
grid:
  parallel.data: [1, 2, 4]
)";
  const Recipe recipe = parse_recipe(text, "ranks.yaml");
  const Plan plan = expand_recipe(recipe);
  RankLimit limit{2, "CPU slots", "--cpu 2", "raise --cpu, or lower parallel.data"};
  // The grid's third value (line 9, column 25) makes the only run that cannot start.
  CHECK_THROWS_WITH(check_ranks(recipe, plan, limit),
                    "ranks.yaml:9:25: parallel.data: 4 ranks need 4 CPU slots, more than the 2 of "
                    "--cpu 2; raise --cpu, or lower parallel.data (run: A parallel.data=4)");
  limit.max_ranks = 4;
  CHECK_NOTHROW(check_ranks(recipe, plan, limit));
}

// The shipped paper recipes run on the default corpus as docs/trainer.md describes it (3,684,130
// training and 110,782 validation tokens): their evaluation fits its validation split (the
// 20 M recipe once asked for 1e6 tokens, nine times what the split holds). Their budgets are
// many epochs of it: warnings, as the recipes' comments say.
TEST_CASE("the paper recipes' evaluation fits the default corpus's validation split") {
  TempDir dir;
  const fs::path data = dir.path() / "default";
  write_dataset(data, 3684130, 110782);
  ::setenv("MXABLATE_DEFAULT_DATASET", data.c_str(), 1);
  using namespace mxablate::orchestrator;
  const auto plan_of = [](const std::string& text, const std::string& file) {
    const Recipe r = parse_recipe(text, file);
    return check_launch(r, expand_recipe(r));
  };
  const fs::path paper = kRecipesDir / "paper-arms-20m.yaml";
  const std::vector<std::string> warnings = plan_of(read_file(paper), paper.string());
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "train.max_tokens: 1e+08 tokens are 27.1 epochs"));
  const fs::path scales = kRecipesDir / "paper-arms-scales.yaml";
  CHECK(plan_of(read_file(scales), scales.string()).size() == 3);  // one epoch warning per model's budget
  const fs::path grid = kRecipesDir / "paper-grid-20m.yaml";
  const std::vector<std::string> grid_warnings = plan_of(read_file(grid), grid.string());
  REQUIRE(grid_warnings.size() == 1);  // 100,096 evaluation tokens fit; 2.2 epochs, as it says
  CHECK(contains(grid_warnings[0], "train.max_tokens: 8.2e+06 tokens are 2.2 epochs"));
  // What the 20 M recipe used to ask for is refused at eval.tokens.
  std::string old = read_file(paper);
  old.replace(old.find("tokens: 98304"), std::string("tokens: 98304").size(), "tokens: 1e6");
  std::string error;
  try {
    plan_of(old, "old.yaml");
  } catch (const RecipeError& e) {
    error = e.what();
  }
  CHECK(error.rfind("old.yaml:18:37: eval.tokens: 1e+06 tokens (1954 sequences of 512) are more "
                    "than the validation split", 0) == 0);
  ::unsetenv("MXABLATE_DEFAULT_DATASET");
}
