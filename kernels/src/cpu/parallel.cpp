#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mxablate/kernels/quantize.h"

namespace mxablate::kernels {
namespace {

int default_threads() {
  if (const char* env = std::getenv("MXABLATE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int>& thread_setting() {
  static std::atomic<int> threads{default_threads()};
  return threads;
}

}  // namespace

void set_cpu_threads(int n) { thread_setting() = std::max(1, n); }
int cpu_threads() { return thread_setting(); }

namespace detail {

void parallel_for_chunks(int64_t num_chunks, const std::function<void(int64_t)>& body) {
  const int64_t workers = std::min<int64_t>(cpu_threads(), num_chunks);
  if (workers <= 1) {
    for (int64_t c = 0; c < num_chunks; ++c) body(c);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run = [&] {
    for (int64_t c = next++; c < num_chunks; c = next++) {
      try {
        body(c);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back(run);
  run();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

int64_t lines_per_group(int64_t length) { return std::max<int64_t>(1, 16384 / length); }

int64_t line_group_count(int64_t lines, int64_t length) {
  const int64_t per = lines_per_group(length);
  return (lines + per - 1) / per;
}

void parallel_for_line_groups(int64_t lines, int64_t length,
                              const std::function<void(int64_t, int64_t, int64_t)>& body) {
  const int64_t per = lines_per_group(length);
  parallel_for_chunks(line_group_count(lines, length), [&](int64_t group) {
    const int64_t first = group * per;
    body(group, first, std::min(lines, first + per));
  });
}

}  // namespace detail
}  // namespace mxablate::kernels
