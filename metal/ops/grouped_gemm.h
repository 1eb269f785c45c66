// Grouped matrix products (mixture-of-experts layers), torch.nn.functional.grouped_mm semantics.
//
// Four shapes, one kernel, one launch whatever the number of groups; the group boundaries
// `offs` (int32, offs[g] = end of group g) are read here, on the device, so the host never waits:
//   kGroupRows    a (T, K)    x b (G, K, N) -> (T, N):    rows of a split by offs;
//   kGroupCols    a (G, M, K) x b (K, T)    -> (M, T):    columns of b split by offs;
//   kGroupInner   a (M, T)    x b (T, N)    -> (G, M, N): the shared dimension split by offs
//                                                        (weight gradients);
//   kGroupBatched a (G, M, K) x b (G, K, N) -> (G, M, N): no offsets.
// One thread per output element, float32 accumulation, a single rounding to the output dtype.
//
// The group of a row (column) is the number of offsets <= its index, found by a binary search
// of at most ceil(log2(G)) + 1 steps. Whatever the offsets hold, every read and write stays in
// bounds: the search returns an index in [0, G], rows (columns) past the last offset are written
// as zero, and K ranges of kGroupInner are clamped to [0, K]. Only the values are unspecified when
// offsets decrease (mpslinalg.ops.grouped_mm(check_offsets=True) rejects them).
#pragma once

#include "../common/defines.h"

namespace mpsl {

// Shape codes shared with the host (mpslinalg.ops.grouped_gemm.MODES).
constant constexpr long kGroupRows = 0;
constant constexpr long kGroupCols = 1;
constant constexpr long kGroupInner = 2;
constant constexpr long kGroupBatched = 3;

// Arguments of grouped_mm (field order: mpslinalg.ops.grouped_gemm.GROUPED_MM_PARAMS); strides
// in elements, group strides 0 for 2-D operands.
struct GroupedMmParams {
  long mode;
  long groups;
  long m, n, k;  // output rows, output columns, shared dimension (all of it for kGroupInner)
  long batch;    // leading output dimension (groups for kGroupInner / kGroupBatched, else 1)
  long a_group, a_row, a_col;
  long b_group, b_row, b_col;
  long bias_group, bias_col, has_bias;
};

// Number of entries of offs[0 : groups] that are <= index (upper bound), in [0, groups].
inline long group_of(device const int* offs, long groups, long index) {
  long lo = 0, hi = groups;
  while (lo < hi) {
    const long mid = (lo + hi) / 2;
    if (long(offs[mid]) <= index) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

inline long clamp_index(long v, long lo, long hi) { return v < lo ? lo : (v > hi ? hi : v); }

}  // namespace mpsl

// Grid: (N, M, batch), one thread per output element. offs and bias are read only when the mode
// and params.has_bias call for them.
template <typename T, typename OutT>
[[kernel]] void grouped_mm(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device const int* offs [[buffer(2)]],
    device const T* bias [[buffer(3)]],
    device OutT* out [[buffer(4)]],
    constant mpsl::GroupedMmParams& p [[buffer(5)]],
    uint3 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long j = long(gid.x), i = long(gid.y), z = long(gid.z);
  if (j >= p.n || i >= p.m || z >= p.batch) {
    return;
  }
  long g = z, k_begin = 0, k_end = p.k;
  if (p.mode == kGroupRows) {
    g = group_of(offs, p.groups, i);
  } else if (p.mode == kGroupCols) {
    g = group_of(offs, p.groups, j);
  } else if (p.mode == kGroupInner) {
    k_begin = g > 0 ? clamp_index(long(offs[g - 1]), 0, p.k) : 0;
    k_end = clamp_index(long(offs[g]), 0, p.k);
  }
  float acc = 0.0f;
  if (g < p.groups) {
    device const T* ag = a + g * p.a_group + i * p.a_row;
    device const T* bg = b + g * p.b_group + j * p.b_col;
    for (long kk = k_begin; kk < k_end; ++kk) {
      acc += float(ag[kk * p.a_col]) * float(bg[kk * p.b_row]);
    }
    if (p.has_bias) {
      acc += float(bias[g * p.bias_group + j * p.bias_col]);
    }
  }
  out[(z * p.m + i) * p.n + j] = OutT(acc);
}
