// 1-D convolution (F.conv1d): out[n, o, l] = bias[o] + sum_{c, k} w[o, c, k] *
// x[n, g * cin_g + c, l * stride + k * dilation - pad_left], with o in group g and zero outside
// the input. Inputs are read through their strides; the output is contiguous (N, C_out, L_out).
// Products are accumulated in float for every storage type (float, half, bfloat), the bias is
// added before the single rounding to T.
//
// Forward kernels:
//   conv1d_depthwise: one input channel per group (depthwise, any channel multiplier), the
//     shape of audio and state-space models; each thread computes kConvDepthwiseRun
//     consecutive outputs of one channel.
//   conv1d_gemm: any grouping, as an implicit GEMM per (batch, group): the output tile
//     (output channels x positions) is the product of the weight matrix (C_out/g x C_in/g * K)
//     with the im2col matrix of the input, whose tiles are gathered on the fly into threadgroup
//     memory and never materialised.
// Backward kernels, the same tiled implicit GEMM with other gathers (see the roles below):
//   conv1d_input_grad: dx = the transposed convolution of dy with w;
//   conv1d_weight_grad: dw = the correlation of dy with x, reduced over batch and positions.
#pragma once

#include "../common/defines.h"

namespace mpsl {

// Arguments of both kernels, passed by the host as one list of int64 (the layout is checked by
// tests/ops/test_convolution.py against mpslinalg.ops.convolution.CONV1D_PARAMS).
struct Conv1dParams {
  long batch;        // N
  long c_in;         // input channels
  long l_in;         // input length
  long c_out;        // output channels
  long l_out;        // output length
  long taps;         // kernel size K
  long stride;
  long pad_left;     // zeros before the input (those after it only shorten l_out's bound)
  long dilation;
  long groups;
  long has_bias;     // 1: add bias[o]
  long x_strides[3];  // input strides (n, c, l), in elements
  long w_strides[3];  // weight strides (o, c, k), in elements
};

// Outputs per thread of the depthwise kernel.
constant constexpr int kConvDepthwiseRun = 4;

// Implicit-GEMM tile: kConvTileM output channels x kConvTileN positions per threadgroup,
// reduced kConvTileK (channel, tap) pairs at a time; kConvSide x kConvSide threads, each
// computing kConvPerThread x kConvPerThread outputs.
constant constexpr int kConvSide = 16;
constant constexpr int kConvPerThread = 2;
constant constexpr int kConvTileM = kConvSide * kConvPerThread;
constant constexpr int kConvTileN = kConvSide * kConvPerThread;
constant constexpr int kConvTileK = 16;
static_assert((kConvTileM + kConvTileN) * kConvTileK * sizeof(float) <=
                  kMaxThreadgroupMemoryBytes,
              "the staged tiles must fit in threadgroup memory");

template <typename T>
inline float conv_input(device const T* x, constant Conv1dParams& p, long n, long c, long pos) {
  if (pos < 0 || pos >= p.l_in) {
    return 0.0f;  // the zero padding
  }
  return float(x[n * p.x_strides[0] + c * p.x_strides[1] + pos * p.x_strides[2]]);
}

}  // namespace mpsl

// Grid: (ceil(l_out / kConvDepthwiseRun), c_out, batch).
template <typename T>
[[kernel]] void conv1d_depthwise(
    device const T* x [[buffer(0)]],
    device const T* w [[buffer(1)]],
    device const T* bias [[buffer(2)]],
    device T* out [[buffer(3)]],
    constant mpsl::Conv1dParams& p [[buffer(4)]],
    uint3 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long o = long(gid.y), n = long(gid.z);
  const long l0 = long(gid.x) * kConvDepthwiseRun;
  if (l0 >= p.l_out || o >= p.c_out || n >= p.batch) {
    return;
  }
  const long c = o / (p.c_out / p.groups);  // the one input channel of o's group
  const float b = p.has_bias != 0 ? float(bias[o]) : 0.0f;
  float acc[kConvDepthwiseRun];
  for (int r = 0; r < kConvDepthwiseRun; ++r) {
    acc[r] = 0.0f;
  }
  for (long k = 0; k < p.taps; ++k) {
    const float wk = float(w[o * p.w_strides[0] + k * p.w_strides[2]]);
    for (int r = 0; r < kConvDepthwiseRun; ++r) {
      const long pos = (l0 + r) * p.stride + k * p.dilation - p.pad_left;
      acc[r] += wk * conv_input(x, p, n, c, pos);
    }
  }
  device T* row = out + (n * p.c_out + o) * p.l_out;
  for (int r = 0; r < kConvDepthwiseRun; ++r) {
    if (l0 + r < p.l_out) {
      row[l0 + r] = T(acc[r] + b);
    }
  }
}

namespace mpsl {

// The three implicit GEMMs C[row, col] = sum_r A[row, r] * B[r, col], per "slice" (a (batch,
// group) pair, or a group for the weight gradient). A role says what rows, columns and the
// reduction index stand for, how A and B are gathered (zero outside the tensors) and where C
// goes. Buffers: x (the input), w (the weight), aux (the bias, or dy for the gradients), out.

// Forward: rows o (output channels of the group), columns l (output positions), r = (c, k).
struct ConvForward {
  static long slices(constant Conv1dParams& p) { return p.batch * p.groups; }
  static long rows(constant Conv1dParams& p) { return p.c_out / p.groups; }
  static long cols(constant Conv1dParams& p) { return p.l_out; }
  static long reduce(constant Conv1dParams& p) { return p.c_in / p.groups * p.taps; }
  template <typename T>
  static float a(device const T* x, device const T* w, device const T* aux,
                 constant Conv1dParams& p, long n, long g, long o, long r) {
    return float(w[(g * rows(p) + o) * p.w_strides[0] + (r / p.taps) * p.w_strides[1] +
                   (r % p.taps) * p.w_strides[2]]);
  }
  template <typename T>
  static float b(device const T* x, device const T* w, device const T* aux,
                 constant Conv1dParams& p, long n, long g, long r, long l) {
    const long pos = l * p.stride + (r % p.taps) * p.dilation - p.pad_left;
    return conv_input(x, p, n, g * (p.c_in / p.groups) + r / p.taps, pos);
  }
  template <typename T>
  static void store(device T* out, device const T* aux, constant Conv1dParams& p, long n,
                    long g, long o, long l, float acc) {
    const long oc = g * rows(p) + o;
    const float bias = p.has_bias != 0 ? float(aux[oc]) : 0.0f;
    out[(n * p.c_out + oc) * p.l_out + l] = T(acc + bias);
  }
};

// Input gradient: rows c (input channels of the group), columns q (input positions),
// r = (o, k); dy[n, o, l] reaches x[n, c, q] through tap k when q = l * stride + k * dilation -
// pad_left, so B gathers dy at l = (q + pad_left - k * dilation) / stride when that divides.
struct ConvInputGrad {
  static long slices(constant Conv1dParams& p) { return p.batch * p.groups; }
  static long rows(constant Conv1dParams& p) { return p.c_in / p.groups; }
  static long cols(constant Conv1dParams& p) { return p.l_in; }
  static long reduce(constant Conv1dParams& p) { return p.c_out / p.groups * p.taps; }
  template <typename T>
  static float a(device const T* x, device const T* w, device const T* dy,
                 constant Conv1dParams& p, long n, long g, long c, long r) {
    const long o = g * (p.c_out / p.groups) + r / p.taps;
    return float(w[o * p.w_strides[0] + c * p.w_strides[1] + (r % p.taps) * p.w_strides[2]]);
  }
  template <typename T>
  static float b(device const T* x, device const T* w, device const T* dy,
                 constant Conv1dParams& p, long n, long g, long r, long q) {
    const long t = q + p.pad_left - (r % p.taps) * p.dilation;
    if (t < 0 || t % p.stride != 0 || t / p.stride >= p.l_out) {
      return 0.0f;
    }
    const long o = g * (p.c_out / p.groups) + r / p.taps;
    return float(dy[(n * p.c_out + o) * p.l_out + t / p.stride]);
  }
  template <typename T>
  static void store(device T* out, device const T* aux, constant Conv1dParams& p, long n,
                    long g, long c, long q, float acc) {
    out[(n * p.c_in + g * rows(p) + c) * p.l_in + q] = T(acc);
  }
};

// Weight gradient: rows o, columns (c, k), r = (n, l) over the whole batch; one slice per
// group, so the output is written once and needs no atomics.
struct ConvWeightGrad {
  static long slices(constant Conv1dParams& p) { return p.groups; }
  static long rows(constant Conv1dParams& p) { return p.c_out / p.groups; }
  static long cols(constant Conv1dParams& p) { return p.c_in / p.groups * p.taps; }
  static long reduce(constant Conv1dParams& p) { return p.batch * p.l_out; }
  template <typename T>
  static float a(device const T* x, device const T* w, device const T* dy,
                 constant Conv1dParams& p, long n, long g, long o, long r) {
    return float(dy[((r / p.l_out) * p.c_out + g * rows(p) + o) * p.l_out + r % p.l_out]);
  }
  template <typename T>
  static float b(device const T* x, device const T* w, device const T* dy,
                 constant Conv1dParams& p, long n, long g, long r, long col) {
    const long pos = (r % p.l_out) * p.stride + (col % p.taps) * p.dilation - p.pad_left;
    return conv_input(x, p, r / p.l_out, g * (p.c_in / p.groups) + col / p.taps, pos);
  }
  template <typename T>
  static void store(device T* out, device const T* aux, constant Conv1dParams& p, long n,
                    long g, long o, long col, float acc) {
    out[(g * rows(p) + o) * cols(p) + col] = T(acc);
  }
};

// One kConvTileM x kConvTileN tile of C for slice group.z; ws and xs are the kernel's staged
// tiles of A and B (row-major).
template <typename T, typename Role>
inline void conv_implicit_gemm(device const T* x, device const T* w, device const T* aux,
                               device T* out, constant Conv1dParams& p, uint3 group,
                               uint3 tpos, uint tid, threadgroup float* ws,
                               threadgroup float* xs) {
  const long rows = Role::rows(p), cols = Role::cols(p), reduce = Role::reduce(p);
  const long n = long(group.z) / p.groups, g = long(group.z) % p.groups;
  const long row0 = long(group.y) * kConvTileM, col0 = long(group.x) * kConvTileN;
  const int threads = kConvSide * kConvSide;

  float acc[kConvPerThread][kConvPerThread];
  for (int i = 0; i < kConvPerThread; ++i) {
    for (int j = 0; j < kConvPerThread; ++j) {
      acc[i][j] = 0.0f;
    }
  }
  for (long r0 = 0; r0 < reduce; r0 += kConvTileK) {
    // Entries outside the matrices are staged as zero, so they add nothing.
    for (int e = int(tid); e < kConvTileM * kConvTileK; e += threads) {
      const long row = row0 + e / kConvTileK, r = r0 + e % kConvTileK;
      ws[e] = row < rows && r < reduce ? Role::a(x, w, aux, p, n, g, row, r) : 0.0f;
    }
    for (int e = int(tid); e < kConvTileK * kConvTileN; e += threads) {
      const long r = r0 + e / kConvTileN, col = col0 + e % kConvTileN;
      xs[e] = r < reduce && col < cols ? Role::b(x, w, aux, p, n, g, r, col) : 0.0f;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int kk = 0; kk < kConvTileK; ++kk) {
      float a[kConvPerThread], b[kConvPerThread];
      for (int i = 0; i < kConvPerThread; ++i) {
        a[i] = ws[(int(tpos.y) * kConvPerThread + i) * kConvTileK + kk];
        b[i] = xs[kk * kConvTileN + int(tpos.x) * kConvPerThread + i];
      }
      for (int i = 0; i < kConvPerThread; ++i) {
        for (int j = 0; j < kConvPerThread; ++j) {
          acc[i][j] += a[i] * b[j];
        }
      }
    }
    // The next step overwrites the tiles others may still be reading.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  for (int i = 0; i < kConvPerThread; ++i) {
    const long row = row0 + long(tpos.y) * kConvPerThread + i;
    for (int j = 0; j < kConvPerThread; ++j) {
      const long col = col0 + long(tpos.x) * kConvPerThread + j;
      if (row < rows && col < cols) {
        Role::store(out, aux, p, n, g, row, col, acc[i][j]);
      }
    }
  }
}

}  // namespace mpsl

// Each GEMM kernel's grid: (ceil(cols / kConvTileN) * kConvSide, ceil(rows / kConvTileM) *
// kConvSide, slices), groups of (kConvSide, kConvSide, 1), with its role's rows, cols, slices.
#define MPSL_CONV_GEMM_KERNEL(name, role)                                                  \
  template <typename T>                                                                    \
  [[kernel]] void name(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],   \
                       device const T* aux [[buffer(2)]], device T* out [[buffer(3)]],     \
                       constant mpsl::Conv1dParams& p [[buffer(4)]],                       \
                       uint3 group [[threadgroup_position_in_grid]],                       \
                       uint3 tpos [[thread_position_in_threadgroup]],                      \
                       uint tid [[thread_index_in_threadgroup]]) {                         \
    threadgroup float ws[mpsl::kConvTileM * mpsl::kConvTileK];                             \
    threadgroup float xs[mpsl::kConvTileK * mpsl::kConvTileN];                             \
    mpsl::conv_implicit_gemm<T, mpsl::role>(x, w, aux, out, p, group, tpos, tid, ws, xs);  \
  }

MPSL_CONV_GEMM_KERNEL(conv1d_gemm, ConvForward)
MPSL_CONV_GEMM_KERNEL(conv1d_input_grad, ConvInputGrad)
MPSL_CONV_GEMM_KERNEL(conv1d_weight_grad, ConvWeightGrad)
