// Strided batched gather: copy an arbitrary strided view into a contiguous buffer.
//
// Lets host code hand any view (transposed, sliced, broadcast with stride 0) to kernels that
// expect contiguous row-major matrices, in one launch and without a round trip through torch.
#pragma once

#include "defines.h"

// sizes/strides: ndim entries each, in elements, outermost first. The grid is strided over
// numel with 64-bit indices, so views past 2^32 elements are copied by a bounded grid.
template <typename T>
[[kernel]] void copy_strided(
    device const T* src [[buffer(0)]],
    device T* dst [[buffer(1)]],
    constant long* sizes [[buffer(2)]],
    constant long* strides [[buffer(3)]],
    constant long& ndim [[buffer(4)]],
    constant long& numel [[buffer(5)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long i = long(gid); i < numel; i += long(grid_size)) {
    long rest = i;
    long offset = 0;
    for (long d = ndim - 1; d >= 0; --d) {
      long coord = rest % sizes[d];
      rest /= sizes[d];
      offset += coord * strides[d];
    }
    dst[i] = src[offset];
  }
}
