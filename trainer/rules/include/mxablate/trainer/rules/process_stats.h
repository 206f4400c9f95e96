// What run_end reports about the process itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace mxablate::trainer {

// Peak resident set size of this process so far (getrusage; Linux reports kilobytes).
int64_t peak_rss_bytes();

// Seconds since this process was started (forked: a re-exec keeps the start), from
// /proc/self/stat and the boot clock, to 1/CLK_TCK (10 ms); nullopt where /proc cannot tell.
std::optional<double> process_age_seconds();

// Seconds from `a` to `b` on the steady clock (the run's timings: setup, standby, train, eval).
inline double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace mxablate::trainer
