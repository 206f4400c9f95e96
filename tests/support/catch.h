// One include for Catch2 v2 (Debian 12) and v3 (the GPU machine): the only place that knows.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define MXABLATE_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#define MXABLATE_CATCH_V3 0
#endif

// v3 moved Approx and the matchers into namespaces that v2 does not have.
#if MXABLATE_CATCH_V3
using Catch::Approx;
#endif

// Ends a test case that cannot run here (a tool it needs is missing), saying why. v3 reports it
// to CTest as skipped; v2 has no skip, so it leaves a warning in the output and passes.
#if MXABLATE_CATCH_V3
#define MXABLATE_SKIP(reason) SKIP(reason)
#else
#define MXABLATE_SKIP(reason)    \
  do {                           \
    WARN("skipped: " << reason); \
    return;                      \
  } while (0)
#endif
