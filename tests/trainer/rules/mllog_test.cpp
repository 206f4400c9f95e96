// MLPerf-style log lines: the shape MLPerf's log parsers expect.
#include <sstream>

#include "catch.h"
#include "mxablate/trainer/rules/mllog.h"

using namespace mxablate::trainer;

TEST_CASE("MLLOG lines carry namespace, time, event type, key, value and metadata", "[trainer][mllog]") {
  const std::string line = MlLogger::format("eval_accuracy", 3.25, {{"samples_count", 1024}},
                                            "POINT_IN_TIME", 1700000000123);
  REQUIRE(line.rfind(":::MLLOG ", 0) == 0);
  const auto j = nlohmann::json::parse(line.substr(9));
  CHECK(j["namespace"] == "");
  CHECK(j["time_ms"] == 1700000000123);
  CHECK(j["event_type"] == "POINT_IN_TIME");
  CHECK(j["key"] == "eval_accuracy");
  CHECK(j["value"] == 3.25);
  CHECK(j["metadata"]["samples_count"] == 1024);
  CHECK(j["metadata"].contains("file"));
  CHECK(j["metadata"].contains("lineno"));
  // Key order as mllog writes it.
  CHECK(line.find("\"namespace\"") < line.find("\"time_ms\""));
  CHECK(line.find("\"key\"") < line.find("\"value\""));
}

TEST_CASE("A disabled logger writes nothing, an enabled one one line per call", "[trainer][mllog]") {
  std::ostringstream off_out, on_out;
  MlLogger off(false, off_out), on(true, on_out);
  off.start("run_start");
  on.start("run_start");
  on.end("run_stop", {{"status", "success"}});
  CHECK(off_out.str().empty());
  std::istringstream lines(on_out.str());
  std::string first, second, third;
  std::getline(lines, first);
  std::getline(lines, second);
  CHECK_FALSE(std::getline(lines, third));
  CHECK(nlohmann::json::parse(first.substr(9))["event_type"] == "INTERVAL_START");
  const auto stop = nlohmann::json::parse(second.substr(9));
  CHECK(stop["event_type"] == "INTERVAL_END");
  CHECK(stop["metadata"]["status"] == "success");
}
