// searchsorted / bucketize: for each value, the index where it would be inserted into its row
// of a sorted sequence (optionally sorted through a permutation, `sorter`).
//
// One thread per value: a binary search of at most ceil(log2(M + 1)) probes, so non-finite
// input cannot lengthen it. The predicates are torch's (a probe moves right while
// !(s >= v) for side="left", !(s > v) for side="right"), which is what fixes where NaN goes:
// a NaN value lands after every element, and NaNs sorted to the end of a sequence compare as
// "move right". All operands are read in place at their strides.
#pragma once

#include "../common/elementwise.h"

namespace mpsl {

// Scalar arguments, passed from Python as one list of int64 (SEARCH_PARAMS mirrors the order).
struct SearchParams {
  long numel;        // number of values (threads of work)
  long ndim;         // dimensions of the values (>= 1)
  long seq_len;      // M, the length of each sorted row
  long seq_stride;   // stride of the sequence along its last dimension
  long sorter_stride;// stride of the sorter along its last dimension
  long has_sorter;   // 1: probe seq[sorter[j]] instead of seq[j]
  long right;        // 1: side="right" (first element > value), 0: side="left" (>= value)
};

}  // namespace mpsl

// values_sizes / values_strides: the values' shape and strides (ndim entries); seq_strides /
// sorter_strides: the strides of the row each value searches, along the values' leading
// ndim - 1 dimensions (0 for a 1-D sequence shared by every value).
template <typename T, typename I>
[[kernel]] void searchsorted(
    device const T* seq [[buffer(0)]],
    device const T* values [[buffer(1)]],
    device const long* sorter [[buffer(2)]],
    device I* out [[buffer(3)]],
    constant mpsl::SearchParams& p [[buffer(4)]],
    constant long* values_sizes [[buffer(5)]],
    constant long* values_strides [[buffer(6)]],
    constant long* seq_strides [[buffer(7)]],
    constant long* sorter_strides [[buffer(8)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  const long inner = values_sizes[p.ndim - 1];
  for (long i = long(gid); i < p.numel; i += long(grid_size)) {
    const T v = values[mpsl::strided_offset(i, values_sizes, values_strides, p.ndim)];
    const long row = i / inner;
    const long seq_base = mpsl::strided_offset(row, values_sizes, seq_strides, p.ndim - 1);
    const long sorter_base = mpsl::strided_offset(row, values_sizes, sorter_strides, p.ndim - 1);
    long lo = 0;
    long hi = p.seq_len;
    while (lo < hi) {
      const long mid = lo + (hi - lo) / 2;
      long j = mid;
      if (p.has_sorter) {
        // torch raises for an out-of-range sorter (a device read); the kernel only keeps its
        // reads in bounds.
        j = metal::clamp(sorter[sorter_base + mid * p.sorter_stride], 0L, p.seq_len - 1);
      }
      const T s = seq[seq_base + j * p.seq_stride];
      const bool move_right = p.right ? !(s > v) : !(s >= v);
      if (move_right) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    out[i] = I(lo);
  }
}
