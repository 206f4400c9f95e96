// Small helpers shared by the trainer tests.
#pragma once

#include <string>

#include "catch.h"

// Substring matcher under both Catch2 v2 (Contains) and v3 (ContainsSubstring).
#if MXABLATE_CATCH_V3
inline auto has_text(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
#else
inline auto has_text(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif
