// `mxablate plan` (and `run`) refuse exactly what mxablate-train refuses at start whatever the
// machine, through the trainer's own function (trainer::check_runnable; docs/design.md §5,
// "Validation before anything runs"). Each row of the table below sets a few keys in an arm of a
// small recipe; `plan` and `run` must exit 2 with one line at the position of the key the refusal
// names, and mxablate-train, given the same resolved config, must exit 2 with the same message
// (it checks the config before it looks for a GPU, so it refuses on this CPU machine too), as the
// shared rule does when called directly. Rows the trainer starts are planned.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "catch.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/data/manifest.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "manifest_dataset.h"
#include "test_util.h"

using namespace mxablate;
using namespace mxablate::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kTrainer = MXABLATE_TRAIN_EXE;

// One setting of the arm: a dotted config path and its value as JSON text (which YAML reads as
// the same value).
struct Setting {
  std::string path;
  std::string value;
};

struct Row {
  std::string name;
  std::vector<Setting> set;
  std::string key;      // the key the refusal names; it is reported where the recipe sets it
  std::string message;  // a part of the one line
};

const std::string kCuda = R"("cuda")";
const std::string kMX = R"("mxfp4")";
const std::string kFP8 = R"("fp8")";

// The trainer's start-up refusals that a config decides, one row each.
const std::vector<Row> kRefused = {
    // train.cuda_graphs: on (trainer/plan step_capture.h): the three combinations the plan used to
    // accept, and the CPU device.
    {"cuda_graphs on with two data-parallel ranks",
     {{"device", kCuda}, {"parallel.data", "2"}, {"train.cuda_graphs", R"("on")"}},
     "train.cuda_graphs",
     R"(train.cuda_graphs: "on", but the run has 2 data-parallel ranks (graphs capture one rank's step))"},
    {"cuda_graphs on with OCC",
     {{"device", kCuda}, {"precision.fprop", kMX}, {"quant.occ", R"({"quantile": 0.99})"},
      {"train.cuda_graphs", R"("on")"}},
     "train.cuda_graphs",
     R"(train.cuda_graphs: "on", but a layer clamps outliers (quant.occ), whose threshold is read back every step)"},
    {"cuda_graphs on on the CPU",
     {{"train.cuda_graphs", R"("on")"}},
     "train.cuda_graphs",
     R"(train.cuda_graphs: "on", but the run's device is not a CUDA GPU)"},
    // quant.gemm_path (contract/gemm_routing.h): a path demanding FP8 tensor cores for a GEMM shape
    // they cannot take (Wgrad reduces over the micro-batch's 1000 tokens).
    {"gemm_path fp8 with an FP8 GEMM of K 1000",
     {{"device", kCuda}, {"data.seq_len", "40"}, {"train.global_batch_tokens", "1000"},
      {"train.micro_batch_tokens", "1000"}, {"precision.wgrad", kFP8}, {"quant.gemm_path", kFP8}},
     "quant.gemm_path",
     R"(quant.gemm_path: "fp8" cannot run the fp8 GEMMs here: blocks.0.attn.q wgrad: FP8 tensor cores need K and N to be multiples of 16, got K 1000)"},
    {"gemm_path fp8-where-exact with an FP8 GEMM of K 1000",
     {{"device", kCuda}, {"data.seq_len", "40"}, {"train.global_batch_tokens", "1000"},
      {"train.micro_batch_tokens", "1000"}, {"precision.wgrad", kFP8},
      {"quant.gemm_path", R"("fp8-where-exact")"}},
     "quant.gemm_path",
     R"(quant.gemm_path: "fp8-where-exact" cannot run the fp8 GEMMs here: blocks.0.attn.q wgrad)"},
    {"gemm_path fp8 on the CPU",
     {{"quant.gemm_path", kFP8}},
     "quant.gemm_path",
     R"(quant.gemm_path: "fp8" (FP8 and MXFP4 GEMMs on FP8 tensor cores) needs device: cuda, this run's device is "cpu")"},
    // The contract's ranges (validate.cpp).
    {"threads beyond 1024", {{"threads", "2000"}}, "threads", "threads: must be in [0, 1024]"},
    // The model and its fit (run_fit.h, plan_rules.h).
    {"an unknown model preset", {{"model", R"("llama-7x")"}}, "model", "model: expected one of"},
    {"heads that do not divide d_model",
     {{"model.d_model", "64"}, {"model.n_layers", "2"}, {"model.n_heads", "3"}, {"model.n_kv_heads", "1"},
      {"model.ffn_hidden", "192"}},
     "model.n_heads",
     "model.n_heads: must divide model.d_model (64), got 3"},
    {"an MXFP4 block that does not divide the tokens",
     {{"data.seq_len", "65"}, {"train.global_batch_tokens", "1040"}, {"train.micro_batch_tokens", "1040"},
      {"precision.wgrad", kMX}},
     "precision.wgrad",
     "precision.wgrad: layer blocks.0.attn.q of model smoke with 1040 tokens per micro-batch: wgrad operand dy"},
    {"a Hadamard size larger than the model",
     {{"precision.fprop", kMX}, {"quant.hadamard.mode", R"("deterministic")"}, {"quant.hadamard.size", "128"},
      {"quant.hadamard.gemms", R"(["fprop"])"}},
     "quant.hadamard.size",
     "quant.hadamard.size: layer blocks.0.attn.q of model smoke"},
    {"DGE without an FP4 Fprop",
     {{"quant.dge", R"({"k": 5})"}},
     "quant.dge",
     "quant.dge: needs precision.fprop mxfp4 or nvfp4"},
};

// Near misses of the rows above that the trainer starts: the plan accepts them.
const std::vector<Row> kAccepted = {
    {"cuda_graphs on with one rank", {{"device", kCuda}, {"train.cuda_graphs", R"("on")"}}, "", ""},
    {"cuda_graphs on with fp8-where-exact and no MXFP4 GEMM",
     {{"device", kCuda}, {"quant.gemm_path", R"("fp8-where-exact")"}, {"train.cuda_graphs", R"("on")"}},
     "",
     ""},
    // The route decides each output tile on the device (its fix-up): nothing for a graph to miss.
    {"cuda_graphs on with an MXFP4 GEMM on fp8-where-exact",
     {{"device", kCuda}, {"precision.wgrad", kMX}, {"quant.gemm_path", R"("fp8-where-exact")"},
      {"train.cuda_graphs", R"("on")"}},
     "",
     ""},
    {"cuda_graphs auto with two ranks and OCC",
     {{"device", kCuda}, {"parallel.data", "2"}, {"precision.fprop", kMX}, {"quant.occ", R"({"quantile": 0.99})"}},
     "",
     ""},
    {"gemm_path fp8 with FP8 GEMMs of multiples of 16",
     {{"device", kCuda}, {"precision.fprop", kFP8}, {"precision.dgrad", kFP8}, {"precision.wgrad", kFP8},
      {"quant.gemm_path", kFP8}},
     "",
     ""},
};

// The base every row's arm extends; two micro-batches a step, so two ranks can share one.
const json kBase = {{"model", "smoke"},
                    {"data", {{"seq_len", 64}}},
                    {"train", {{"global_batch_tokens", 1024}, {"micro_batch_tokens", 512}, {"max_tokens", 100000}}}};
const char* const kBaseText = R"(name: refusals
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, micro_batch_tokens: 512, max_tokens: 100000}
arms:
  a:
)";

// A nested mapping in block style, each value on the line of its key, remembering where each
// value starts ("LINE:COL", 1-based) by its dotted path.
struct Node {
  std::string key;
  std::string value;  // a leaf's JSON text
  std::vector<Node> children;
};

void insert(std::vector<Node>& nodes, const std::string& path, const std::string& value) {
  const size_t dot = path.find('.');
  const std::string head = path.substr(0, dot);
  auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.key == head; });
  if (it == nodes.end()) it = nodes.insert(nodes.end(), Node{head, "", {}});
  if (dot == std::string::npos) it->value = value;
  else insert(it->children, path.substr(dot + 1), value);
}

void emit(const std::vector<Node>& nodes, int indent, const std::string& prefix, std::string& text, int& line,
          std::map<std::string, std::string>& where) {
  for (const Node& n : nodes) {
    const std::string path = prefix.empty() ? n.key : prefix + "." + n.key;
    text += std::string(static_cast<size_t>(indent), ' ') + n.key + ":";
    if (n.children.empty()) {
      where[path] = fmt::format("{}:{}", line, indent + static_cast<int>(n.key.size()) + 3);
      text += " " + n.value;
    }
    text += "\n";
    ++line;
    emit(n.children, indent + 2, path, text, line, where);
  }
}

struct Written {
  std::string file;
  std::map<std::string, std::string> where;  // "LINE:COL" of each setting's value
  json config;                               // the run's resolved config: base ⊕ arm
};

// The recipe of one arm, `a` (at 7:3), with `set`; on the dataset at `dataset` where given.
Written write_recipe(const fs::path& dir, const std::vector<Setting>& set, const std::string& dataset = "") {
  std::vector<Node> arm;
  json overrides = json::object();
  for (const Setting& s : set) {
    insert(arm, s.path, s.value);
    overrides[json::json_pointer("/" + std::regex_replace(s.path, std::regex("\\."), "/"))] = json::parse(s.value);
  }
  std::string text = kBaseText;
  if (!dataset.empty()) text.replace(text.find("seq_len: 64}"), 12, "seq_len: 64, dataset: " + dataset + "}");
  int line = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  Written w;
  emit(arm, 4, "", text, line, w.where);
  w.file = (dir / "refusals.yaml").string();
  write_file(w.file, text);
  w.config = kBase;
  w.config.merge_patch(overrides);
  return w;
}

// The shared rule called directly: the contract's parser, then what mxablate-train checks first.
std::string rule_refusal(const json& config) {
  try {
    trainer::check_runnable(contract::run_config_from_json(config));
  } catch (const contract::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every config refusal of the trainer's start is the plan's, at the key's line and column") {
  for (const Row& row : kRefused) {
    INFO(row.name);
    TempDir dir;
    const Written w = write_recipe(dir.path(), row.set);
    REQUIRE(w.where.count(row.key) == 1);
    const std::string prefix = "mxablate: " + w.file + ":" + w.where.at(row.key) + ": ";

    for (const char* command : {"plan", "run"}) {
      INFO(command);
      std::vector<std::string> args{kMxablate.string(), command, w.file};
      if (std::string(command) == "run")
        for (const char* a : {"--trainer", FAKE_TRAINER_BIN, "--cpu", "2"}) args.push_back(a);
      const ProcessResult r = run_process(args, dir.path());
      INFO(r.err);
      CHECK(r.code() == 2);
      CHECK(r.out.empty());
      const auto lines = lines_of(r.err);
      REQUIRE(lines.size() == 1);
      CHECK(lines[0].rfind(prefix, 0) == 0);
      CHECK(contains(lines[0], row.message));
    }
    CHECK_FALSE(fs::exists(dir.path() / "mxablate.db"));  // `run` created nothing

    // The trainer on the same resolved config: one line, exit 2, before it looks for a GPU.
    const fs::path run_dir = dir.path() / "run";
    fs::create_directories(run_dir);
    write_file(run_dir / "config.json", w.config.dump(2));
    const ProcessResult t = run_process({kTrainer.string(), "--run-dir", run_dir.string()}, dir.path());
    INFO(t.err);
    CHECK(t.code() == 2);
    CHECK(lines_of(t.err).size() == 1);
    CHECK(contains(t.err, row.message));
    CHECK_FALSE(fs::exists(run_dir / "events.jsonl"));

    CHECK(contains(rule_refusal(w.config), row.message));
  }
}

TEST_CASE("near misses of the trainer's start-up refusals are planned") {
  for (const Row& row : kAccepted) {
    INFO(row.name);
    TempDir dir;
    const Written w = write_recipe(dir.path(), row.set);
    const ProcessResult r = run_process({kMxablate.string(), "plan", w.file}, dir.path());
    INFO(r.err);
    CHECK(r.code() == 0);
    CHECK(rule_refusal(w.config).empty());
  }
}

TEST_CASE("a run that fits only without the data's vocabulary is refused at the key") {
  // An LM head with MXFP4 Dgrad reduces over the vocabulary, whose blocks of 32 must divide it:
  // 4100 does not, 4096 does. Expansion does not know the vocabulary; the launch checks do.
  TempDir dir;
  const auto dataset = [&](int64_t vocab) {
    const fs::path d = dir.path() / ("data-" + std::to_string(vocab));
    write_manifest_dataset(d, {vocab});
    return d.string();
  };
  const std::vector<Setting> lm_head = {{"overrides", R"([{"layers": "lm_head", "precision": {"dgrad": "mxfp4"}}])"}};
  const std::string message =
      "precision.dgrad: layer lm_head of model smoke with 512 tokens per micro-batch: dgrad operand dy (512x4100)";

  Written w = write_recipe(dir.path(), lm_head, dataset(4100));
  ProcessResult r = run_process({kMxablate.string(), "plan", w.file}, dir.path());
  INFO(r.err);
  CHECK(r.code() == 2);
  const auto lines = lines_of(r.err);
  REQUIRE(lines.size() == 1);
  // The key the trainer names is set inside overrides[0], not at precision.dgrad: the arm.
  CHECK(lines[0].rfind("mxablate: " + w.file + ":7:3: " + message, 0) == 0);
  CHECK(rule_refusal(w.config).empty());  // fits without the vocabulary…
  try {  // …and the trainer's own rule at the data's vocabulary refuses it
    const contract::RunConfig c = contract::run_config_from_json(w.config);
    trainer::check_run_fits(c, trainer::model_shape(c.model), 4100);
    FAIL("check_run_fits accepted an LM head of 4100 outputs in MXFP4 blocks of 32");
  } catch (const contract::ConfigError& e) {
    CHECK(contains(e.what(), message));
  }

  w = write_recipe(dir.path(), lm_head, dataset(4096));
  r = run_process({kMxablate.string(), "plan", w.file}, dir.path());
  INFO(r.err);
  CHECK(r.code() == 0);
}
