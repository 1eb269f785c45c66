// Index arithmetic of elementwise kernels over broadcast, strided views.
//
// Host code hands each operand as the storage of its broadcast view (stride 0 along broadcast
// dimensions) with the output's sizes and that operand's strides, so a kernel reads any view
// in place, without a gather launch. Offsets are 64-bit: views may exceed 2^31 elements.
#pragma once

#include "defines.h"

namespace mpsl {

// Most dimensions an elementwise kernel's host code passes (torch's own limit is 64; host code
// coalesces nothing and raises above this).
constant constexpr int kMaxElementwiseDims = 16;

// Storage offset of the element at row-major position `index` of a view.
inline long strided_offset(long index, constant long* sizes, constant long* strides, long ndim) {
  long offset = 0;
  for (long d = ndim - 1; d >= 0; --d) {
    offset += (index % sizes[d]) * strides[d];
    index /= sizes[d];
  }
  return offset;
}

}  // namespace mpsl
