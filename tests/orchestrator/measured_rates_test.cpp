// The measured rates `mxablate plan --gpu` reads (measured_rates.h, run_cost.h): the table built
// into the binary parses, and is docs/performance.md's as it stands; hostile tables are refused
// in one line naming the table's line; runs get an arm class from their numerics, a row only
// where the row's run did at least as much work a token, and their tokens are counted at most.
#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "catch.h"
#include "mxablate/orchestrator/measured_rates.h"
#include "mxablate/orchestrator/run_cost.h"

using namespace mxablate::orchestrator;
using mxablate::contract::RunConfig;

namespace {

const char* const kHeader =
    "| model | seq | vocab | micro-batch | gpu | ranks | shard | arm | recompute | tokens/s per GPU | date | source |\n"
    "|---|---:|---:|---:|---|---:|---|---|---|---:|---|---|\n";

// A section of `rows` under the heading and the header; its heading on line 10, so the header is
// on line 12 and the first row on line 14.
std::string section(const std::string& rows, const std::string& header = kHeader) {
  return "## Rates the plan uses\nSome words.\n" + header + rows + "\nMore words.\n";
}

MeasuredRates parse(const std::string& text) { return parse_measured_rates(text, "perf.md", 10); }

// A row of kHeader: llama-8b BF16 on 4 H200s, with the cells `changes` names changed.
std::string row_with(const std::map<std::string, std::string>& changes) {
  const std::vector<std::pair<std::string, std::string>> cells{
      {"model", "llama-8b"}, {"seq", "8,192"},     {"vocab", "128,256"},          {"micro-batch", "8,192"},
      {"gpu", "h200"},       {"ranks", "4"},       {"shard", "gradients"},        {"arm", "bf16"},
      {"recompute", "every block"}, {"tokens/s per GPU", "7,010"}, {"date", "2026-11-27"}, {"source", "G3"}};
  std::string out = "|";
  for (const auto& [column, value] : cells) out += " " + (changes.count(column) ? changes.at(column) : value) + " |";
  return out + "\n";
}

const std::string kRow8b = row_with({});

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CUDA run of llama-8b at seq 8192 on 4 ranks sharding gradients, one sequence a micro-batch,
// every block recomputed, in BF16.
RunConfig run_8b() {
  RunConfig c;
  c.model = "llama-8b";
  c.device = mxablate::contract::Device::kCUDA;
  c.data.seq_len = 8192;
  c.train.global_batch_tokens = 65536;
  c.train.micro_batch_tokens = 8192;
  c.train.max_tokens = 6553600;
  c.train.activation_checkpointing.mode = mxablate::contract::Recompute::Mode::kAll;
  c.eval.every_tokens = 1638400;
  c.eval.tokens = 32768;
  c.parallel.data = 4;
  c.parallel.shard = mxablate::contract::ShardLevel::kGradients;
  return c;
}

void set_all(RunConfig& c, mxablate::contract::GemmPrecision p) {
  c.precision.fprop = c.precision.dgrad = c.precision.wgrad = p;
}

}  // namespace

TEST_CASE("the rates built in are docs/performance.md's table, and it parses") {
  const MeasuredRates& built_in = built_in_measured_rates();
  REQUIRE(!built_in.rows.empty());
  CHECK(built_in.file == "docs/performance.md");
  // The copy built in is the page as it stands in this tree: the same rows from the same lines.
  const std::string page = read_text(std::string(MXABLATE_SOURCE_DIR) + "/docs/performance.md");
  const size_t at = page.find("\n## Rates the plan uses\n");
  REQUIRE(at != std::string::npos);
  const size_t end = page.find("\n## ", at + 1);
  const int line = 2 + static_cast<int>(std::count(page.begin(), page.begin() + static_cast<long>(at), '\n'));
  const MeasuredRates from_page =
      parse_measured_rates(page.substr(at + 1, end - at), "docs/performance.md", line);
  REQUIRE(from_page.rows.size() == built_in.rows.size());
  for (size_t i = 0; i < built_in.rows.size(); ++i) {
    INFO("row " << i);
    CHECK(from_page.rows[i].line == built_in.rows[i].line);
    CHECK(from_page.rows[i].tokens_per_second_per_gpu == built_in.rows[i].tokens_per_second_per_gpu);
    CHECK(from_page.rows[i].source == built_in.rows[i].source);
  }
  // The row README.md's "What it costs" quotes: llama-8b BF16 on 4 × H100.
  const auto it = std::find_if(built_in.rows.begin(), built_in.rows.end(), [](const MeasuredRate& r) {
    return r.model == "llama-8b" && r.gpu == GpuKind::kH100 && r.ranks == 4 && r.arm == ArmClass::kBF16;
  });
  REQUIRE(it != built_in.rows.end());
  CHECK(it->seq_len == 8192);
  CHECK(it->vocab == 128256);
  CHECK(it->shard == mxablate::contract::ShardLevel::kGradients);
  CHECK(it->recompute.every_block);
  CHECK(built_in.first_date <= built_in.last_date);
}

TEST_CASE("a table of rates parses into types, in any column order") {
  const MeasuredRates r = parse(section(
      kRow8b +
      "| llama-1.3b | 2048 | 4,096 | 16,384 | h100 | 1 | none | mxfp4 F+D+W+H16 gemm_path=fp8 | none | 31,704 | 2026-11-26 | S5 (the BF16 of the call) |\n"
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | 30 of 32 | 7,661 | 2026-12-02 | G8 |\n"));
  REQUIRE(r.rows.size() == 3);
  CHECK(r.file == "perf.md");
  CHECK(r.rows[0].line == 14);
  CHECK(r.rows[0].model == "llama-8b");
  CHECK(r.rows[0].seq_len == 8192);
  CHECK(r.rows[0].vocab == 128256);
  CHECK(r.rows[0].micro_batch_tokens == 8192);
  CHECK(r.rows[0].gpu == GpuKind::kH200);
  CHECK(r.rows[0].ranks == 4);
  CHECK(r.rows[0].shard == mxablate::contract::ShardLevel::kGradients);
  CHECK(r.rows[0].arm == ArmClass::kBF16);
  CHECK(r.rows[0].recompute.every_block);
  CHECK(r.rows[0].tokens_per_second_per_gpu == 7010);
  CHECK(r.rows[0].date == "2026-11-27");
  CHECK(r.rows[0].source == "G3");
  CHECK(r.rows[1].seq_len == 2048);  // without separators too
  CHECK(r.rows[1].arm == ArmClass::kMXFP4H16Fp8);
  CHECK(recompute_text(r.rows[1]) == "none");
  CHECK(r.rows[1].source == "S5 (the BF16 of the call)");
  CHECK(recompute_text(r.rows[2]) == "30 of 32");
  CHECK(r.rows[2].recompute.of(32) == 30);
  CHECK(r.first_date == "2026-11-26");
  CHECK(r.last_date == "2026-12-02");

  const MeasuredRates reordered = parse(section(
      "| llama-8b | 8,192 | G3 | 2026-11-27 | 7,010 | every block | bf16 | gradients | 4 | h200 | 8,192 | 128,256 |\n",
      "| model | seq | source | date | tokens/s per GPU | recompute | arm | shard | ranks | gpu | micro-batch | vocab |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n"));
  REQUIRE(reordered.rows.size() == 1);
  CHECK(reordered.rows[0].vocab == 128256);
  CHECK(reordered.rows[0].tokens_per_second_per_gpu == 7010);
}

TEST_CASE("a hostile table of rates is refused in one line naming its line") {
  const auto refused = [](const std::string& text, const std::string& message) {
    INFO(text);
    CHECK_THROWS_MATCHES(parse(text), MeasuredRatesError, Catch::Matchers::Message(message));
  };
  const auto row = [](const std::string& column, const std::string& value) { return row_with({{column, value}}); };
  // Numbers: whole, above 0, separators exactly every three digits or none.
  for (const char* bad : {"7,01", "70,10", "7,0100", "7,,010", ",7010", "7010,", "-7010", "7e3", "7010.5",
                          "0", "07010", "7 010", "", "seven"}) {
    refused(section(row("tokens/s per GPU", bad)),
            std::string("perf.md:14: tokens/s per GPU: '") + bad +
                "' is not a whole number above 0 such as 8192 or 8,192");
  }
  refused(section(row("vocab", "128,25")),
          "perf.md:14: vocab: '128,25' is not a whole number above 0 such as 8192 or 8,192");
  refused(section(row("arm", "mxfp4")),
          "perf.md:14: arm: 'mxfp4' is not one of: bf16, fp8, mxfp4 F+D+W, mxfp4 F+D+W+H16, mxfp4 "
          "F+D+W+H16 gemm_path=fp8, mxfp4 F+D+W+H16 gemm_path=fp8-where-exact");
  refused(section(row("gpu", "a100")), "perf.md:14: gpu: 'a100' is not one of: h100, h200");
  refused(section(row("shard", "zero2")),
          "perf.md:14: shard: 'zero2' is not one of: none, optimizer, gradients");
  CHECK_THROWS_WITH(parse(section(row("model", "llama-9b"))),
                    Catch::Matchers::StartsWith("perf.md:14: model: 'llama-9b' is not a preset ("));
  // A recompute that is none of the table's words, or blocks the model does not have.
  for (const char* bad : {"all", "selective and 4 of 32", "0 of 32"})
    refused(section(row("recompute", bad)),
            std::string("perf.md:14: recompute: '") + bad +
                "' is not 'every block', 'none', 'K of N' blocks, 'selective' or 'selective and K of N whole'");
  for (const char* bad : {"selective and 32 of 32 whole", "30 of 24", "32 of 32"})
    refused(section(row("recompute", bad)), std::string("perf.md:14: recompute: '") + bad +
                                                "': llama-8b has 32 blocks; write 'every block', 'none' or "
                                                "K of 32 with 0 < K < 32");
  refused(section(row("date", "27.11.2026")), "perf.md:14: date: '27.11.2026' is not a date such as 2026-11-27");
  refused(section(row("date", "2026-13-01")), "perf.md:14: date: '2026-13-01' is not a date such as 2026-11-27");
  refused(section(row("source", "")), "perf.md:14: source: empty: say which section and call the figure is from");
  // Extra or missing pipes: a row of another width.
  refused(section(row("source", "G3 | G4")), "perf.md:14: the row has 13 cells, the header 12");
  refused(section("| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 4 | gradients | bf16 | every block | 7,010 | 2026-11-27 |\n"),
          "perf.md:14: the row has 11 cells, the header 12");
  // One configuration twice: the table must choose its figure.
  refused(section(kRow8b + row("tokens/s per GPU", "7,100")),
          "perf.md:15: the same configuration as line 14: keep one figure per configuration");
  // Rows the model or the ranks make impossible.
  refused(section(row("seq", "3,000")), "perf.md:14: micro-batch: 8192 tokens are not whole sequences of 3000");
  refused(section(row("ranks", "1")), "perf.md:14: shard: gradients on one rank: one rank shards nothing (write none)");

  // The header: every column the plan reads, once, and nothing else.
  const std::string header_without_vocab =
      "| model | seq | micro-batch | gpu | ranks | shard | arm | recompute | tokens/s per GPU | date | source |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  refused(section("", header_without_vocab), "perf.md:12: the table has no rows");
  refused(section("| llama-8b | 8,192 | 8,192 | h200 | 4 | gradients | bf16 | every block | 7,010 | 2026-11-27 | G3 |\n",
                  header_without_vocab),
          "perf.md:12: no column 'vocab' (the columns: model, seq, vocab, micro-batch, gpu, ranks, shard, "
          "arm, recompute, tokens/s per GPU, date, source)");
  std::string header = kHeader;
  refused(section(kRow8b, std::string(header).replace(header.find("| source |"), 10, "| where |")),
          "perf.md:12: column 'where' is not one the plan reads (model, seq, vocab, micro-batch, gpu, ranks, "
          "shard, arm, recompute, tokens/s per GPU, date, source)");
  refused(section(kRow8b, std::string(header).replace(header.find("| source |"), 10, "| seq |")),
          "perf.md:12: column 'seq' is given twice");
  refused(section(kRow8b, std::string(header).replace(header.find("|---|---:|"), 10, "| - | x |")),
          "perf.md:13: expected the header's separator row of 12 cells such as |---|");
  // The section: its heading, one table.
  refused("## Rates\n" + std::string(kHeader) + kRow8b, "perf.md:10: expected the heading \"## Rates the plan uses\"");
  refused("## Rates the plan uses\n\nNo table yet.\n", "perf.md:10: the section holds no table of rates");
  refused(section(kRow8b) + "\n" + kHeader + kRow8b, "perf.md:18: a second table: the section holds one table of rates");
}

TEST_CASE("a run's arm class comes from its precisions, rotation and GEMM path alone") {
  using mxablate::contract::GemmPath;
  using mxablate::contract::GemmPrecision;
  RunConfig c = run_8b();
  CHECK(arm_class(c) == ArmClass::kBF16);
  c.quant.gemm_path = GemmPath::kFP8;  // BF16 GEMMs take the same engine on every path
  CHECK(arm_class(c) == ArmClass::kBF16);
  set_all(c, GemmPrecision::kFP8);
  CHECK(arm_class(c) == ArmClass::kFP8);
  c.quant.gemm_path = GemmPath::kEmulated;  // FP8 emulated: not the FP8 that was measured
  CHECK(arm_class(c) == std::nullopt);
  c.quant.gemm_path = GemmPath::kAuto;
  c.quant.fp8_scaling = mxablate::contract::Fp8Scaling::kDelayed;
  CHECK(arm_class(c) == std::nullopt);
  c.quant.fp8_scaling = mxablate::contract::Fp8Scaling::kCurrent;

  set_all(c, GemmPrecision::kMXFP4);
  CHECK(arm_class(c) == ArmClass::kMXFP4);
  c.quant.gemm_path = GemmPath::kEmulated;
  CHECK(arm_class(c) == ArmClass::kMXFP4);
  c.quant.gemm_path = GemmPath::kFP8;  // measured only with the rotation
  CHECK(arm_class(c) == std::nullopt);
  c.quant.gemm_path = GemmPath::kAuto;
  c.quant.hadamard.mode = mxablate::kernels::HadamardMode::kDeterministic;
  CHECK(arm_class(c) == ArmClass::kMXFP4H16);
  c.quant.gemm_path = GemmPath::kFP8;
  CHECK(arm_class(c) == ArmClass::kMXFP4H16Fp8);
  c.quant.gemm_path = GemmPath::kFP8WhereExact;
  CHECK(arm_class(c) == ArmClass::kMXFP4H16Exact);
  c.quant.gemm_path = GemmPath::kAuto;

  // Numerics no measured run had.
  const auto without = [&](const std::function<void(RunConfig&)>& change) {
    RunConfig d = c;
    change(d);
    return arm_class(d);
  };
  using mxablate::contract::OperandClass;
  CHECK(without([](RunConfig& d) { d.quant.hadamard.mode = mxablate::kernels::HadamardMode::kPerStepRandom; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.hadamard.size = 32; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.stochastic_rounding = {OperandClass::kGrad}; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.scale_rule = mxablate::kernels::ScaleRule::kMse; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.weight_blocks = mxablate::kernels::BlockShape::k2D; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.dge = mxablate::contract::DgeConfig{}; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.occ = mxablate::contract::OccConfig{}; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.quant.bf16_first_blocks = 1; }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.overrides.push_back({"lm_head", {}}); }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.precision_schedule.push_back({0.9, {}}); }) == std::nullopt);
  CHECK(without([](RunConfig& d) { d.precision.fprop = GemmPrecision::kFP8; }) == std::nullopt);  // a mix
}

TEST_CASE("a run gets the rate of a row that did as much work a token, and says where it did more") {
  const MeasuredRates rates = parse(section(
      kRow8b +
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 4 | gradients | fp8 | every block | 8,846 | 2026-11-27 | G3 |\n"
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | every block | 7,550 | 2026-11-27 | G6 |\n"
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | 30 of 32 | 7,661 | 2026-12-02 | G8 |\n"
      "| llama-1.3b | 2,048 | 32,000 | 8,192 | h100 | 1 | none | bf16 | every block | 40,905 | 2026-11-26 | G1 |\n"
      "| llama-1.3b | 2,048 | 4,096 | 16,384 | h100 | 1 | none | bf16 | every block | 45,804 | 2026-11-27 | S5 |\n"));
  const RunFacts facts{128256, std::nullopt};
  RunConfig c = run_8b();

  // At the run's own settings: no bound said.
  RateMatch m = match_rate(rates, GpuKind::kH200, c, facts);
  REQUIRE(m.rate == &rates.rows[0]);
  CHECK(m.bounds.empty());
  CHECK(m.no_rate.empty());
  // Fewer blocks recomputed than measured, a smaller vocabulary, larger micro-batches: bounds.
  c.train.activation_checkpointing.mode = mxablate::contract::Recompute::Mode::kNone;
  c.train.micro_batch_tokens = 16384;
  m = match_rate(rates, GpuKind::kH200, c, {100000, std::nullopt});
  REQUIRE(m.rate == &rates.rows[0]);
  CHECK(m.bounds == std::vector<std::string>{
                        "measured with every block recomputed, where the run recomputes none",
                        "measured at a vocabulary of 128256, the run's 100000",
                        "measured with micro-batches of 8192 tokens, the run's 16384"});
  // auto, unresolved, is at most every block; --gpu-memory resolves it (141 GB: none at 4 ranks).
  c = run_8b();
  c.train.activation_checkpointing.mode = mxablate::contract::Recompute::Mode::kAuto;
  m = match_rate(rates, GpuKind::kH200, c, facts);
  REQUIRE(m.rate == &rates.rows[0]);
  CHECK(m.bounds == std::vector<std::string>{
                        "measured with every block recomputed, the most auto may choose (--gpu-memory resolves auto)"});
  m = match_rate(rates, GpuKind::kH200, c, {128256, int64_t{141'000'000'000}});
  REQUIRE(m.rate == &rates.rows[0]);
  CHECK(m.bounds == std::vector<std::string>{"measured with every block recomputed, where the run recomputes none"});
  // A row that recomputed fewer blocks than the run does not bound it; one that recomputed more,
  // or as many, does: the exact one first, else the fastest.
  c = run_8b();
  c.parallel.data = 1;
  c.parallel.shard = mxablate::contract::ShardLevel::kNone;
  c.train.global_batch_tokens = 16384;
  m = match_rate(rates, GpuKind::kH200, c, facts);
  CHECK(m.rate == &rates.rows[2]);  // every block: 30 of 32 recomputed less
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 30};
  m = match_rate(rates, GpuKind::kH200, c, facts);
  CHECK(m.rate == &rates.rows[3]);
  CHECK(m.bounds.empty());
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 10};
  m = match_rate(rates, GpuKind::kH200, c, facts);
  CHECK(m.rate == &rates.rows[3]);  // both bound it; the faster
  CHECK(m.bounds == std::vector<std::string>{"measured with 30 of 32 recomputed, where the run recomputes 10 of 32"});
  // Selective recompute was never measured: a row with one block more recomputed whole bounds it
  // (its elementwise work is far less than a block's forward), never the row of its own count.
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 30, true};
  m = match_rate(rates, GpuKind::kH200, c, facts);
  CHECK(m.rate == &rates.rows[2]);  // every block: 30 of 32 is not a bound of selective+30
  CHECK(m.bounds == std::vector<std::string>{
                        "measured with every block recomputed, where the run recomputes selectively and 30 of 32 whole"});
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 29, true};
  m = match_rate(rates, GpuKind::kH200, c, facts);
  CHECK(m.rate == &rates.rows[3]);
  CHECK(m.bounds == std::vector<std::string>{
                        "measured with 30 of 32 recomputed, where the run recomputes selectively and 29 of 32 whole"});
  // A row measured selectively: the run of its own settings takes it exactly; it bounds a run
  // recomputing as many blocks whole, never one selective with more whole.
  const MeasuredRates with_selective = parse(section(
      kRow8b +
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | every block | 7,550 | 2026-11-27 | G6 |\n"
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | selective and 29 of 32 whole | 7,657 | 2026-12-03 | G11 |\n"
      "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | 30 of 32 | 7,661 | 2026-12-02 | G8 |\n"));
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 29, true};
  m = match_rate(with_selective, GpuKind::kH200, c, facts);
  CHECK(m.rate == &with_selective.rows[2]);
  CHECK(m.bounds.empty());
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 29};
  m = match_rate(with_selective, GpuKind::kH200, c, facts);
  CHECK(m.rate == &with_selective.rows[3]);  // all three bound 29 whole: the fastest
  CHECK(m.bounds == std::vector<std::string>{"measured with 30 of 32 recomputed, where the run recomputes 29 of 32"});
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kFirstBlocks, 30, true};
  m = match_rate(with_selective, GpuKind::kH200, c, facts);
  CHECK(m.rate == &with_selective.rows[1]);  // selective+29 and 30 whole do less than selective+30
  CHECK(m.bounds == std::vector<std::string>{
                        "measured with every block recomputed, where the run recomputes selectively and 30 of 32 whole"});
  CHECK(recompute_text(with_selective.rows[2]) == "selective and 29 of 32 whole");

  // llama-1.3b at vocabulary 4096 and micro-batches of 16384: both rows bound it, S5 exactly.
  RunConfig small;
  small.model = "llama-1.3b";
  small.device = mxablate::contract::Device::kCUDA;
  small.data.seq_len = 2048;
  small.train.global_batch_tokens = 65536;
  small.train.micro_batch_tokens = 16384;
  small.train.activation_checkpointing.mode = mxablate::contract::Recompute::Mode::kAll;
  m = match_rate(rates, GpuKind::kH100, small, {4096, std::nullopt});
  CHECK(m.rate == &rates.rows[5]);
  CHECK(m.bounds.empty());
  m = match_rate(rates, GpuKind::kH100, small, {32000, std::nullopt});  // only G1 bounds it
  CHECK(m.rate == &rates.rows[4]);
  CHECK(m.bounds == std::vector<std::string>{"measured with micro-batches of 8192 tokens, the run's 16384"});
}

TEST_CASE("a run without a measured rate is told the first property no row has") {
  const MeasuredRates rates = parse(section(
      kRow8b + "| llama-8b | 8,192 | 128,256 | 8,192 | h200 | 1 | none | bf16 | 30 of 32 | 7,661 | 2026-12-02 | G8 |\n"));
  const auto why = [&](const std::function<void(RunConfig&)>& change, GpuKind gpu = GpuKind::kH200,
                       RunFacts f = {128256, std::nullopt}) {
    RunConfig c = run_8b();
    change(c);
    const RateMatch m = match_rate(rates, gpu, c, f);
    CHECK(m.rate == nullptr);
    return m.no_rate;
  };
  CHECK(why([](RunConfig& c) { c.device = mxablate::contract::Device::kCPU; }) == "a CPU run");
  CHECK(why([](RunConfig& c) { c.train.deterministic = true; }) == "train.deterministic: true, not measured");
  CHECK(why([](RunConfig& c) { c.train.fused_producers = true; }) == "train.fused_producers: true, not measured");
  CHECK(why([](RunConfig& c) { c.train.cuda_graphs = mxablate::contract::CudaGraphs::kOff; }) ==
        "train.cuda_graphs: off, not measured");
  CHECK(why([](RunConfig& c) { c.quant.stochastic_rounding = {mxablate::contract::OperandClass::kGrad}; }) ==
        "its numerics are none of the measured arms (bf16, fp8, mxfp4 F+D+W, mxfp4 F+D+W+H16, mxfp4 "
        "F+D+W+H16 gemm_path=fp8, mxfp4 F+D+W+H16 gemm_path=fp8-where-exact)");
  CHECK(why([](RunConfig&) {}, GpuKind::kH200, {std::nullopt, std::nullopt}) ==
        "its dataset's vocabulary is not known");
  CHECK(why([](RunConfig& c) { c.model = mxablate::contract::ModelChoice::shaped({4096, 32, 32, 8, 14336}); }) ==
        "model d4096-L32-h32/8-f14336: only presets were measured");
  CHECK(why([](RunConfig& c) { c.model = "llama-20m"; }) == "no row of llama-20m (measured: llama-8b)");
  CHECK(why([](RunConfig&) {}, GpuKind::kH100) == "no row of llama-8b on h100 (measured: h200)");
  CHECK(why([](RunConfig& c) { c.data.seq_len = 4096; }) ==
        "no row of llama-8b on h200 at seq 4096 (measured: seq 8192)");
  CHECK(why([](RunConfig& c) { c.parallel.data = 8; }) ==
        "no row of llama-8b on h200 at seq 8192 on 8 ranks (measured: 4 ranks, 1 rank)");
  CHECK(why([](RunConfig& c) { c.parallel.shard = mxablate::contract::ShardLevel::kOptimizer; }) ==
        "no row of llama-8b on h200 at seq 8192 on 4 ranks with shard optimizer (measured: shard gradients)");
  CHECK(why([](RunConfig& c) { set_all(c, mxablate::contract::GemmPrecision::kFP8); }) ==
        "no row of llama-8b on h200 at seq 8192 on 4 ranks with shard gradients of arm fp8 (measured: bf16)");
  CHECK(why([](RunConfig&) {}, GpuKind::kH200, {200000, std::nullopt}) ==
        "no row of llama-8b on h200 at seq 8192 on 4 ranks with shard gradients of arm bf16 at a "
        "vocabulary of 200000 or more (measured: vocabulary 128256)");
  // One rank: the G8 row recomputed 30 of 32 blocks, fewer than every block.
  CHECK(why([](RunConfig& c) {
          c.parallel.data = 1;
          c.parallel.shard = mxablate::contract::ShardLevel::kNone;
        }) == "no row of llama-8b on h200 at seq 8192 on 1 rank of arm bf16 at a vocabulary of 128256 or "
              "more with micro-batches of 8192 tokens or fewer recomputing every block (measured: recompute 30 of 32)");
  CHECK(why([](RunConfig& c) {
          c.parallel.data = 1;
          c.parallel.shard = mxablate::contract::ShardLevel::kNone;
          c.train.activation_checkpointing.mode = mxablate::contract::Recompute::Mode::kAuto;
        }) == "no row of llama-8b on h200 at seq 8192 on 1 rank of arm bf16 at a vocabulary of 128256 or "
              "more with micro-batches of 8192 tokens or fewer recomputing every block, the most auto may "
              "choose (--gpu-memory resolves auto) (measured: recompute 30 of 32)");
}

TEST_CASE("a run's tokens at most: whole steps, and every evaluation in whole micro-batches per rank") {
  RunConfig c = run_8b();
  // 100 steps of 65,536; evaluations at 1/4, 2/4, 3/4 and at the end, where the last step passes
  // the fourth multiple: 4, each 4 sequences of one micro-batch, one a rank.
  RunTokens t = tokens_at_most(c);
  CHECK(t.trained == 6553600);
  CHECK(t.evaluated == 4 * 32768);
  // A budget that is not whole steps: 101 steps; the last passes no multiple, so one more
  // evaluation after it; 5 sequences over 4 ranks: the busiest takes 2, so 8 are counted.
  c.train.max_tokens = 6553600 + 1;
  c.eval.tokens = 5 * 8192;
  t = tokens_at_most(c);
  CHECK(t.trained == 101 * 65536.0);
  CHECK(t.evaluated == 5 * 8 * 8192.0);
  // Steps longer than the interval evaluate after every step.
  c.eval.every_tokens = 1000;
  t = tokens_at_most(c);
  CHECK(t.evaluated == 101 * 8 * 8192.0);
  // GPU-hours: every token at the measured rate a GPU.
  const MeasuredRates rates = parse(section(kRow8b));
  const RunCost cost = run_cost(rates, GpuKind::kH200, run_8b(), {128256, std::nullopt});
  REQUIRE(cost.gpu_hours);
  CHECK(*cost.gpu_hours == Approx((6553600.0 + 4 * 32768.0) / 7010 / 3600));
  CHECK_FALSE(run_cost(rates, GpuKind::kH100, run_8b(), {128256, std::nullopt}).gpu_hours);
}
