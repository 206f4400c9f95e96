// Fixed-chunk parallel loop for the CPU kernels.
//
// Work is cut into chunks whose boundaries depend only on the problem, never on the thread
// count; each chunk writes its own outputs and partial statistics, which the caller combines in
// chunk order. So the results are identical for 1 or N threads.
#pragma once

#include <cstdint>
#include <functional>

namespace mxablate::kernels::detail {

void parallel_for_chunks(int64_t num_chunks, const std::function<void(int64_t)>& body);

// Groups of whole lines of about 16 K elements: the unit of parallel work over a tensor.
int64_t line_group_count(int64_t lines, int64_t length);

// Runs body(group, first_line, end_line) for every line group, in parallel.
void parallel_for_line_groups(int64_t lines, int64_t length,
                              const std::function<void(int64_t, int64_t, int64_t)>& body);

}  // namespace mxablate::kernels::detail
