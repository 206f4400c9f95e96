// The tile copy's addressing (tile_layout.h, TileVectors) against the tile's definition: every
// vector a thread moves in a step lands where tile_offset puts its row and column, and the block's
// threads move every vector of the tile exactly once.
#include <vector>

#include "catch.h"
#include "tile_layout.h"

using namespace mxablate::kernels::gpu::detail;

namespace {

template <int kVec>
void check_tile_vectors() {
  using V = TileVectors<kVec>;
  std::vector<int> moved(kTile * kTile / kVec, 0);  // per (row, vector column)
  for (unsigned thread = 0; thread < static_cast<unsigned>(kThreads); ++thread) {
    const V t(thread);
    REQUIRE(t.col % kVec == 0);
    for (int step = 0; step < V::kSteps; ++step) {
      const int row = t.row + step * V::kRowsPerStep;
      REQUIRE(row < kTile);
      INFO("kVec " << kVec << ", thread " << thread << ", step " << step);
      CHECK(t.offset(step) == tile_offset(row, t.col));
      ++moved[row * V::kVecsPerRow + t.col / kVec];
    }
  }
  for (size_t i = 0; i < moved.size(); ++i) {
    INFO("vector " << i);
    CHECK(moved[i] == 1);
  }
}

}  // namespace

TEST_CASE("the tile copy moves every 16-byte vector once, to tile_offset's place", "[gpu-model]") {
  check_tile_vectors<8>();  // bf16
  check_tile_vectors<4>();  // float32
}
