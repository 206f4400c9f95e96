// MLPerf-style log lines on stdout (`:::MLLOG {json}`), so existing MLPerf log tooling can read a
// run: run_start / run_stop as an interval (run_stop carries status "success" or "aborted"),
// eval_accuracy (the validation log-perplexity, i.e. loss) with samples_count, and the usual
// hyperparameter keys. Written only when the run config says `mllog: true`.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

namespace mxablate::trainer {

class MlLogger {
 public:
  MlLogger(bool enabled, std::ostream& out) : enabled_(enabled), out_(out) {}
  bool enabled() const { return enabled_; }

  // event_type: "POINT_IN_TIME", "INTERVAL_START" or "INTERVAL_END".
  void log(const std::string& key, const nlohmann::json& value, nlohmann::json metadata = {},
           const char* event_type = "POINT_IN_TIME");
  void point(const std::string& key, const nlohmann::json& value, nlohmann::json metadata = {}) {
    log(key, value, std::move(metadata), "POINT_IN_TIME");
  }
  void start(const std::string& key, nlohmann::json metadata = {}) {
    log(key, nullptr, std::move(metadata), "INTERVAL_START");
  }
  void end(const std::string& key, nlohmann::json metadata = {}) {
    log(key, nullptr, std::move(metadata), "INTERVAL_END");
  }

  // The line log() would print, without the time (for tests): ":::MLLOG {...}".
  static std::string format(const std::string& key, const nlohmann::json& value,
                            const nlohmann::json& metadata, const char* event_type,
                            int64_t time_ms);

 private:
  bool enabled_;
  std::ostream& out_;
};

}  // namespace mxablate::trainer
