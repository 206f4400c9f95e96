// What run_end reports about the process itself.
#pragma once

#include <cstdint>

namespace mxablate::trainer {

// Peak resident set size of this process so far (getrusage; Linux reports kilobytes).
int64_t peak_rss_bytes();

}  // namespace mxablate::trainer
