// The one place that knows where Boost.Process v1 lives: boost/process.hpp up to Boost 1.85
// (Debian 12 has 1.74, the GPU machine 1.83); from 1.86 v1 has its own header and namespace
// (and 1.88 made boost/process.hpp v2). Everything else writes `bp::`.
#pragma once

#if __has_include(<boost/process/v1.hpp>)
#include <boost/process/v1.hpp>
namespace bp = boost::process::v1;
#else
#include <boost/process.hpp>
#include <boost/process/extend.hpp>
namespace bp = boost::process;
#endif
