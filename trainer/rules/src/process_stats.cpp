#include "mxablate/trainer/rules/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace mxablate::trainer {

int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace mxablate::trainer

namespace mxablate::trainer {

std::optional<double> process_age_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // Field 22 (starttime, clock ticks after boot); the command name (field 2) may hold spaces
  // and parentheses, so fields are counted from the last ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
  double start = 0;
  try {
    start = std::stod(field) / static_cast<double>(ticks);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const double age = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) - start;
  if (!(age >= 0) || age > 1e8) return std::nullopt;
  return age;
}

}  // namespace mxablate::trainer
