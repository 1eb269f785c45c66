// Comparisons and minimum / maximum of unsigned integers (uint16, uint32, uint64).
//
// Computed in the operands' own unsigned type: widening to a signed type of the same size (the
// mistake this family exists to avoid) orders 2^31 .. 2^32-1 (uint32) or 2^63 .. 2^64-1
// (uint64) below zero. Both operands are read in place at their broadcast strides.
#pragma once

#include "../common/elementwise.h"

namespace mpsl {

// Comparison codes; mirror mpslinalg.ops.unsigned._COMPARISONS.
constant constexpr int kCompareEq = 0;
constant constexpr int kCompareNe = 1;
constant constexpr int kCompareLt = 2;
constant constexpr int kCompareLe = 3;
constant constexpr int kCompareGt = 4;
constant constexpr int kCompareGe = 5;
// Extremum codes; mirror mpslinalg.ops.unsigned._EXTREMA.
constant constexpr int kExtremumMaximum = 0;
constant constexpr int kExtremumMinimum = 1;

template <typename T>
inline bool compare_unsigned(T a, T b, int op) {
  switch (op) {
    case kCompareEq: return a == b;
    case kCompareNe: return a != b;
    case kCompareLt: return a < b;
    case kCompareLe: return a <= b;
    case kCompareGt: return a > b;
    default: return a >= b;
  }
}

}  // namespace mpsl

// out[i] = a[i] OP b[i]; sizes / a_strides / b_strides: ndim entries, outermost first.
template <typename T, int OP>
[[kernel]] void unsigned_compare(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device bool* out [[buffer(2)]],
    constant long* sizes [[buffer(3)]],
    constant long* a_strides [[buffer(4)]],
    constant long* b_strides [[buffer(5)]],
    constant long& ndim [[buffer(6)]],
    constant long& numel [[buffer(7)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long i = long(gid); i < numel; i += long(grid_size)) {
    T x = a[mpsl::strided_offset(i, sizes, a_strides, ndim)];
    T y = b[mpsl::strided_offset(i, sizes, b_strides, ndim)];
    out[i] = mpsl::compare_unsigned(x, y, OP);
  }
}

// out[i] = max(a[i], b[i]) (OP = kExtremumMaximum) or min(a[i], b[i]).
template <typename T, int OP>
[[kernel]] void unsigned_extremum(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device T* out [[buffer(2)]],
    constant long* sizes [[buffer(3)]],
    constant long* a_strides [[buffer(4)]],
    constant long* b_strides [[buffer(5)]],
    constant long& ndim [[buffer(6)]],
    constant long& numel [[buffer(7)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long i = long(gid); i < numel; i += long(grid_size)) {
    T x = a[mpsl::strided_offset(i, sizes, a_strides, ndim)];
    T y = b[mpsl::strided_offset(i, sizes, b_strides, ndim)];
    out[i] = OP == mpsl::kExtremumMaximum ? metal::max(x, y) : metal::min(x, y);
  }
}
