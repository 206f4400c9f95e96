// How the fused quantizer cuts a tensor into work: tiles of 128 x 128 elements, one per thread
// block, staged in shared memory; inside a tile, segments of 32 elements along the quantization
// axis, one per thread and sweep. Host/device so the tests can check the arithmetic.
#pragma once

#include "mxablate/kernels/portability.h"
#include "mxablate/kernels/quant_spec.h"
#include "segment_quant.h"

namespace mxablate::kernels::gpu::detail {

inline constexpr int kTile = 128;      // rows and columns of a tile; the longest Hadamard chunk
inline constexpr int kThreads = 256;   // threads per block
inline constexpr int kLinesPerSweep = kThreads / kSegmentsPerChunk;  // 64 lines, 4 threads each
inline constexpr int kSweeps = kTile / kLinesPerSweep;               // 2 sweeps cover a tile

// Shared-memory position of tile element (r, c). Rows are stored unpadded with the column index
// XOR-swizzled in units of 8 elements: by the 32-row group, so that the four threads of a chunk
// reading down a column hit four different bank groups, and by row parity, so that neighbouring
// rows read along a row do too. Runs of 8 aligned columns stay contiguous (16-byte vectors).
MX_HD int tile_offset(int r, int c) {
  const int swizzle = (((r >> 5) & 3) << 3) ^ ((r & 1) << 4);
  return r * kTile + (c ^ swizzle);
}

// A tile's 16-byte vectors of kVec elements as one thread block copies them between global and
// shared memory (load_tile, store_tile): kThreads threads cover kRowsPerStep whole rows a step,
// thread t the vector at column (t % kVecsPerRow) * kVec of row t / kVecsPerRow + step *
// kRowsPerStep. Every step moves the thread by the same number of rows, so it needs one global
// address, advanced by a stride, and shared offsets that differ from step 0's by a compile-time
// constant: kRowsPerStep is even and divides 32, so a row's parity is the thread's and its 32-row
// group is the step's alone. Computed per vector from the tile indices, the addressing took more
// instructions than the quantization (kernels/README.md, "The quantizer's instruction budget").
template <int kVec>
struct TileVectors {
  static constexpr int kVecsPerRow = kTile / kVec;
  static constexpr int kRowsPerStep = kThreads / kVecsPerRow;
  static constexpr int kSteps = kTile / kRowsPerStep;
  static_assert(kRowsPerStep % 2 == 0 && 32 % kRowsPerStep == 0, "a step's rows keep the parity and group");

  int row;  // the thread's row in step 0
  int col;  // its vector's first column (every step)
  int parity_col;  // col with the row-parity swizzle applied

  MX_HD explicit TileVectors(unsigned thread)
      : row(static_cast<int>(thread / kVecsPerRow)),
        col(static_cast<int>(thread % kVecsPerRow) * kVec),
        parity_col(col ^ ((row & 1) << 4)) {}

  // tile_offset(row + step * kRowsPerStep, col).
  MX_HD int offset(int step) const {
    const int first = step * kRowsPerStep;
    return (row + first) * kTile + (parity_col ^ (((first >> 5) & 3) << 3));
  }
};

// The segment a thread owns in one sweep of a pass over the tile at (tile_r0, tile_c0).
struct SegmentPlace {
  int line_in_tile;  // 0..127
  int part;          // 0..3: which 32 elements of the tile's 128 along the axis
  int64_t line;      // line index in the tensor (a row for kRows, a column for kCols)
  int64_t start;     // position along the line of the segment's first element
  int count;         // elements inside the tensor: 32, fewer at the end of a line whose length
                     // is not a multiple of 32 (formats without 32-blocks), 0 past the edges
  bool valid;        // count > 0
};

MX_HD SegmentPlace place_segment(Axis axis, int thread, int sweep, int64_t tile_r0,
                                 int64_t tile_c0, int64_t rows, int64_t cols) {
  SegmentPlace s;
  s.line_in_tile = sweep * kLinesPerSweep + thread / kSegmentsPerChunk;
  s.part = thread % kSegmentsPerChunk;
  if (axis == Axis::kRows) {
    s.line = tile_r0 + s.line_in_tile;
    s.start = tile_c0 + s.part * kSegment;
    s.count = s.line < rows && s.start < cols ? static_cast<int>(cols - s.start < kSegment ? cols - s.start : kSegment) : 0;
  } else {
    s.line = tile_c0 + s.line_in_tile;
    s.start = tile_r0 + s.part * kSegment;
    s.count = s.line < cols && s.start < rows ? static_cast<int>(rows - s.start < kSegment ? rows - s.start : kSegment) : 0;
  }
  s.valid = s.count > 0;
  return s;
}

// Tile-local row / column of element j of the segment.
MX_HD int segment_tile_row(Axis axis, const SegmentPlace& s, int j) {
  return axis == Axis::kRows ? s.line_in_tile : s.part * kSegment + j;
}
MX_HD int segment_tile_col(Axis axis, const SegmentPlace& s, int j) {
  return axis == Axis::kRows ? s.part * kSegment + j : s.line_in_tile;
}

// 2-D blocks (docs/design.md §3): a thread block's tile holds (kTile / block)^2 square scale
// tiles of side `block` (32 MXFP4, 16 NVFP4), numbered row-major inside it. Slot of the scale
// tile holding block b (of `block` elements) of the segment: the same slot along rows and down
// columns for the same elements.
inline constexpr int kMaxTileSlots = (kTile / kNVBlockSize) * (kTile / kNVBlockSize);  // 64

MX_HD int tile_2d_slot(Axis axis, const SegmentPlace& s, int b, int block) {
  const int r = segment_tile_row(axis, s, b * block);
  const int c = segment_tile_col(axis, s, b * block);
  return (r / block) * (kTile / block) + c / block;
}

// Row-major logical index of the segment's first element, and the step between its elements.
MX_HD int64_t segment_first_index(Axis axis, const SegmentPlace& s, int64_t cols) {
  return axis == Axis::kRows ? s.line * cols + s.start : s.start * cols + s.line;
}
MX_HD int64_t segment_index_stride(Axis axis, int64_t cols) { return axis == Axis::kRows ? 1 : cols; }

}  // namespace mxablate::kernels::gpu::detail
