// 1-D convolution (F.conv1d): out[n, o, l] = bias[o] + sum_{c, k} w[o, c, k] *
// x[n, g * cin_g + c, l * stride + k * dilation - pad_left], with o in group g and zero outside
// the input. Inputs are read through their strides; the output is contiguous (N, C_out, L_out).
// Products are accumulated in float for every storage type (float, half, bfloat), the bias is
// added before the single rounding to T.
//
// Two kernels:
//   conv1d_depthwise: one input channel per group (depthwise, any channel multiplier), the
//     shape of audio and state-space models; each thread computes kConvDepthwiseRun
//     consecutive outputs of one channel, a run of taps over a window it reads once per tap.
//   conv1d_gemm: any grouping, as an implicit GEMM per (batch, group): the output tile
//     (output channels x positions) is the product of the weight matrix (C_out/g x C_in/g * K)
//     with the im2col matrix of the input, whose tiles are gathered on the fly into threadgroup
//     memory and never materialised.
#pragma once

#include "../common/defines.h"

namespace mpsl {

// Arguments of both kernels, passed by the host as one list of int64 (the layout is checked by
// tests/ops/test_conv1d.py against mpslinalg.ops.conv1d.CONV1D_PARAMS).
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

// Grid: (ceil(l_out / kConvTileN) * kConvSide, ceil(c_out / groups / kConvTileM) * kConvSide,
// batch * groups), groups of (kConvSide, kConvSide, 1).
template <typename T>
[[kernel]] void conv1d_gemm(
    device const T* x [[buffer(0)]],
    device const T* w [[buffer(1)]],
    device const T* bias [[buffer(2)]],
    device T* out [[buffer(3)]],
    constant mpsl::Conv1dParams& p [[buffer(4)]],
    uint3 group [[threadgroup_position_in_grid]],
    uint3 tpos [[thread_position_in_threadgroup]],
    uint tid [[thread_index_in_threadgroup]]) {
  using namespace mpsl;
  threadgroup float ws[kConvTileM][kConvTileK];
  threadgroup float xs[kConvTileK][kConvTileN];
  const long cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  const long n = long(group.z) / p.groups, g = long(group.z) % p.groups;
  const long o0 = long(group.y) * kConvTileM, l0 = long(group.x) * kConvTileN;
  const long reduce = cin_g * p.taps;  // the GEMM's inner dimension: (channel, tap) pairs
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
      const int i = e / kConvTileK, j = e % kConvTileK;
      const long o = o0 + i, r = r0 + j;
      float v = 0.0f;
      if (o < cout_g && r < reduce) {
        v = float(w[(g * cout_g + o) * p.w_strides[0] + (r / p.taps) * p.w_strides[1] +
                    (r % p.taps) * p.w_strides[2]]);
      }
      ws[i][j] = v;
    }
    for (int e = int(tid); e < kConvTileK * kConvTileN; e += threads) {
      const int i = e / kConvTileN, j = e % kConvTileN;
      const long r = r0 + i, l = l0 + j;
      float v = 0.0f;
      if (r < reduce && l < p.l_out) {
        const long pos = l * p.stride + (r % p.taps) * p.dilation - p.pad_left;
        v = conv_input(x, p, n, g * cin_g + r / p.taps, pos);
      }
      xs[i][j] = v;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int kk = 0; kk < kConvTileK; ++kk) {
      float a[kConvPerThread], b[kConvPerThread];
      for (int i = 0; i < kConvPerThread; ++i) {
        a[i] = ws[int(tpos.y) * kConvPerThread + i][kk];
        b[i] = xs[kk][int(tpos.x) * kConvPerThread + i];
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
    const long o = o0 + long(tpos.y) * kConvPerThread + i;
    if (o >= cout_g) {
      continue;
    }
    const long oc = g * cout_g + o;
    const float b = p.has_bias != 0 ? float(bias[oc]) : 0.0f;
    for (int j = 0; j < kConvPerThread; ++j) {
      const long l = l0 + long(tpos.x) * kConvPerThread + j;
      if (l < p.l_out) {
        out[(n * p.c_out + oc) * p.l_out + l] = T(acc[i][j] + b);
      }
    }
  }
}
