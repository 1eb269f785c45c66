// Matrix-vector products for decode shapes: out (M, N) = x (M, K) . w^T, w (N, K), M <= 8 rows.
//
// One simdgroup owns one output column n and every row of its row block: at each step the 32
// lanes read 32 runs of kGemvLaneElems consecutive weight elements (kGemvStep = 128 values of
// the weight row; one aligned 4-wide vector load per lane when the weight's rows are contiguous
// and aligned, which the host checks), decode them once into registers and use them for all R rows, so the weight
// (the large operand at decode shapes) is streamed from memory exactly once. Sums are kept in
// float32 per lane and reduced with simd_sum at the end; the bias is added before the single
// rounding to the output dtype. Larger M runs the same kernel over blocks of R rows.
//
// gemv_rows() is shared with the fp8 kernels (fp8.h), which plug in a decoding source with
// per-block scales; kGemvStep equals the 128-wide block of the blockwise fp8 recipes, so one
// step of a lane never straddles two scale blocks.
#pragma once

#include "../common/defines.h"
#include "../common/simd.h"

namespace mpsl {

// Rows one simdgroup computes at most (the decode-shape limit; instantiated for 1, 2, 4, 8).
constant constexpr int kGemvMaxRows = 8;
// Consecutive K elements a lane reads per step.
constant constexpr int kGemvLaneElems = 4;
// K elements one simdgroup consumes per step.
constant constexpr int kGemvStep = kSimdWidth * kGemvLaneElems;
// Output columns (simdgroups) per threadgroup.
constant constexpr int kGemvColsPerGroup = 4;
static_assert(kGemvLaneElems == 4, "a lane's weights are one float4 (one 4-wide load)");

// Arguments of gemv, one list of int64 from the host (field order: mpslinalg.ops.gemv
// GEMV_PARAMS, checked by tests/ops/test_gemv.py). Strides are in elements.
struct GemvParams {
  long m;          // rows of x
  long n;          // rows of w = columns of out
  long k;          // shared dimension
  long x_row;      // x strides
  long x_col;
  long w_row;      // w strides (w is (N, K))
  long w_col;
  long bias_step;  // bias stride; meaningful when has_bias
  long has_bias;
  long w_vec4;     // 1: w_col == 1 and rows start 4-element aligned: vector loads of 4
};

// One aligned 4-wide vector load, widened to float (p must be 4-element aligned).
inline float4 load4(device const float* p) { return *reinterpret_cast<device const float4*>(p); }
inline float4 load4(device const half* p) {
  return float4(*reinterpret_cast<device const half4*>(p));
}
inline float4 load4(device const bfloat* p) {
  return float4(*reinterpret_cast<device const bfloat4*>(p));
}

// The kGemvLaneElems weights from k0 one by one (zero past K): any strides, the tail of K.
template <typename Src>
inline float4 rhs4_scalar(thread const Src& src, long col, long k0, long K) {
  float4 v = float4(0.0f);
  for (int e = 0; e < kGemvLaneElems; ++e) {
    if (k0 + e < K) {
      v[e] = src.rhs(col, k0 + e);
    }
  }
  return v;
}

// Reads of a plain (already decoded) operand pair; scales are 1.
template <typename T>
struct PlainSource {
  device const T* x;
  device const T* w;
  long x_row, x_col, w_row, w_col, w_vec4;
  float lhs(long r, long kk) const { return float(x[r * x_row + kk * x_col]); }
  float rhs(long col, long kk) const { return float(w[col * w_row + kk * w_col]); }
  // kGemvLaneElems consecutive weights from k0: one aligned 4-wide load when the layout allows.
  float4 rhs4(long col, long k0, long K) const {
    if (w_vec4 && k0 + kGemvLaneElems <= K) {
      return load4(w + col * w_row + k0);
    }
    return rhs4_scalar(*this, col, k0, K);
  }
  float lhs_scale(long r, long kblock) const { return 1.0f; }
  float rhs_scale(long col, long kblock) const { return 1.0f; }
};

// acc[r] (lane partial sums, r < R) += sum over this lane's K elements of lhs(row0 + r, k) *
// rhs(col, k), each step's product scaled by its K block's scales. Rows past `rows` are left
// untouched. The trip count is fixed by K.
template <int R, typename Src>
inline void gemv_rows(thread float* acc, thread const Src& src, long row0, long rows, long col,
                      long K, uint lane) {
  for (long k0 = long(lane) * kGemvLaneElems; k0 < K; k0 += kGemvStep) {
    const long kblock = k0 / kGemvStep;
    const float4 wv = src.rhs4(col, k0, K);
    const float w_scale = src.rhs_scale(col, kblock);
    for (int r = 0; r < R; ++r) {
      if (r < rows) {
        float part = 0.0f;
        for (int e = 0; e < kGemvLaneElems; ++e) {
          if (k0 + e < K) {
            part += src.lhs(row0 + r, k0 + e) * wv[e];
          }
        }
        acc[r] += part * (src.lhs_scale(row0 + r, kblock) * w_scale);
      }
    }
  }
}

}  // namespace mpsl

// Grid: (kGemvColsPerGroup simdgroups per threadgroup along x, one per column; row blocks of R
// along y). bias is read only when params.has_bias.
template <typename T, int R>
[[kernel]] void gemv(
    device const T* x [[buffer(0)]],
    device const T* w [[buffer(1)]],
    device const T* bias [[buffer(2)]],
    device T* out [[buffer(3)]],
    constant mpsl::GemvParams& params [[buffer(4)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  static_assert(R >= 1 && R <= kGemvMaxRows, "R rows per simdgroup");
  const long col = long(group.x) * kGemvColsPerGroup + long(sg);
  const long row0 = long(group.y) * R;
  if (col >= params.n || row0 >= params.m) {
    return;  // the whole simdgroup leaves together: simd_sum below sees uniform lanes
  }
  const long rows = (params.m - row0 < long(R)) ? params.m - row0 : long(R);
  PlainSource<T> src = {x, w, params.x_row, params.x_col, params.w_row, params.w_col,
                        params.w_vec4};
  float acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.0f;
  }
  gemv_rows<R>(acc, src, row0, rows, col, params.k, lane);
  const float b = params.has_bias ? float(bias[col * params.bias_step]) : 0.0f;
  for (int r = 0; r < R; ++r) {
    const float total = simd_sum(acc[r]);
    if (r < rows && lane == 0) {
      out[(row0 + r) * params.n + col] = T(total + b);
    }
  }
}
