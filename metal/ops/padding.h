// Constant padding (F.pad mode="constant"): one kernel writes every element of the output, read
// from the (arbitrarily strided) input or set to the fill value. Negative pads crop.
//
// Padding moves bits: the kernel is instantiated per element width, and the host hands each
// tensor to it reinterpreted as an integer (or 16-byte) type of the same width, with the fill
// value's bit pattern in PadParams. So every dtype torch pads is covered, and the fill value is
// exact in the input's dtype (an int64 beyond 2^53, a bfloat16, a complex number).
//
// Index arithmetic is 64-bit (the "wide1" kernels): output sizes, input strides and the linear
// index may each pass 2^31, and the grid-stride loop lets a bounded grid cover outputs past 2^32
// elements. Calls whose sizes, indices and offsets all fit in 31 bits take the "wide0" kernels,
// the same code in 32-bit integers.
#pragma once

#include "../common/defines.h"

namespace mpsl {

// Dimensions the kernel takes after the host merged the ones it can (adjacent unpadded
// dimensions that are contiguous in the input, and size-1 dimensions).
constant constexpr int kPadMaxDims = 16;

// Arguments of pad, passed by the host as one list of int64 (the layout is checked by
// tests/ops/test_padding.py against mpslinalg.ops.padding.PAD_PARAMS).
struct PadParams {
  long ndim;                     // dimensions used in the arrays below, outermost first
  long numel;                    // elements of the output
  long value_lo;                 // bit pattern of the fill value (the low 8 bytes) ...
  long value_hi;                 // ... and the high 8 bytes of 16-byte elements
  long out_sizes[kPadMaxDims];   // output shape
  long in_sizes[kPadMaxDims];    // input shape
  long in_strides[kPadMaxDims];  // input strides, in elements
  long before[kPadMaxDims];      // padding before each dimension (negative: cropped)
};

// A 16-byte element (complex128), copied as two 8-byte words.
struct PadBits128 {
  long lo;
  long hi;
};

// The fill value from its bit pattern: integer types keep the low bytes of value_lo, which is
// the two's-complement truncation of the pattern the host stored.
template <typename T>
inline T pad_fill(long value_lo, long value_hi) {
  return T(value_lo);
}

template <>
inline PadBits128 pad_fill<PadBits128>(long value_lo, long value_hi) {
  PadBits128 v;
  v.lo = value_lo;
  v.hi = value_hi;
  return v;
}

// Offset in elements into the input of output element `index`, or -1 when that element lies in
// the padding. Index is long, or int when the host has checked that every size, index and
// offset of the call fits (GPUs divide 64-bit integers far more slowly than 32-bit ones).
template <typename Index>
inline Index pad_source_offset(Index index, constant PadParams& p) {
  Index offset = 0;
  bool inside = true;
  for (int d = int(p.ndim) - 1; d >= 0; --d) {
    const Index size = Index(p.out_sizes[d]);
    const Index source = index % size - Index(p.before[d]);
    index /= size;
    if (source >= 0 && source < Index(p.in_sizes[d])) {
      offset += source * Index(p.in_strides[d]);  // within the input: no overflow
    } else {
      inside = false;
    }
  }
  return inside ? offset : Index(-1);
}

}  // namespace mpsl

// Grid: any size; the loop strides over the output by the grid size.
template <typename T, typename Index>
[[kernel]] void pad(
    device const T* x [[buffer(0)]],
    device T* out [[buffer(1)]],
    constant mpsl::PadParams& params [[buffer(2)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  using namespace mpsl;
  const T fill = pad_fill<T>(params.value_lo, params.value_hi);
  for (long i = long(gid); i < params.numel; i += long(grid_size)) {
    const Index source = pad_source_offset<Index>(Index(i), params);
    out[i] = source >= 0 ? x[source] : fill;
  }
}
