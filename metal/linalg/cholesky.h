// Cholesky factorization A = L L^H of Hermitian positive-definite matrices (LAPACK potrf, lower).
//
// Matrices are contiguous row-major (batch, n, n) holding the lower triangle of A with zeros
// above it (the host copies tril(A), or tril(A^H) for upper=True, into the working tensor, which
// the kernels factor in place); the batch index is the last grid dimension of every kernel, so
// one launch sequence covers the whole batch. The host (mpslinalg/linalg/cholesky_metal.py) runs:
//   chol_potf2   n <= kCholUnblockedMax: the whole matrix in one launch, one threadgroup per
//                matrix (left-looking potf2, a thread per row);
//   otherwise, per block of kCholBlock columns starting at column k0 (right-looking potrf):
//   chol_potf2   the diagonal block L11 (the same kernel on rows/columns [k0, k0 + w));
//   chol_trsm    the panel below it, L21 = A21 L11^-H (a thread per row, L11 staged);
//   chol_syrk    the trailing update A22 -= L21 L21^H on the lower triangle's tiles.
//
// A leading minor that is not positive definite (the pivot d = a_jj - sum_k |l_jk|^2 is <= 0 or
// NaN, as LAPACK's potf2 tests it) stops nothing: info records its order (1-based) if no earlier
// minor failed, and its column becomes NaN. Every later pivot then holds NaN, fails too, and
// carries NaN on, through the panel and the trailing update across blocks: the factor is NaN in
// the lower triangle from the failing column on, exact before it, and no loop depends on values.
// The imaginary part of a complex diagonal is not read (LAPACK's convention).
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"

namespace mpsl {

// Largest order factored by a single chol_potf2 launch (a thread per row, one threadgroup).
constant constexpr int kCholUnblockedMax = 64;
// Columns per block of the blocked factorization (the order of a diagonal block, the K of the
// trailing update); L11 is staged as a kCholBlock x kCholBlock tile.
constant constexpr int kCholBlock = 32;
static_assert(kCholBlock <= kCholUnblockedMax, "a diagonal block is factored by chol_potf2");
static_assert(kCholBlock * kCholBlock * sizeof(float2) <= kMaxThreadgroupMemoryBytes,
              "the staged L11 must fit in threadgroup memory");
// Trailing update: a kCholTile x kCholTile output tile per threadgroup of kCholTileThreads
// threads, each owning a kCholMicro x kCholMicro register tile (rows and columns strided by
// kCholTileLanes); L21's rows are staged kCholTileK columns at a time.
constant constexpr int kCholTile = 64;
constant constexpr int kCholTileLanes = 16;
constant constexpr int kCholMicro = kCholTile / kCholTileLanes;
constant constexpr int kCholTileThreads = kCholTileLanes * kCholTileLanes;
constant constexpr int kCholTileK = 16;
static_assert(2 * kCholTile * kCholTileK * sizeof(float2) <= kMaxThreadgroupMemoryBytes,
              "the staged L21 tiles must fit in threadgroup memory");

// Scalars of chol_potf2, chol_trsm and chol_syrk.
struct CholParams {
  long n;   // order of each matrix (its row stride)
  long k0;  // first row and column of the diagonal block
  long w;   // order of the diagonal block
};

inline float chol_real(float a) { return a; }
inline float chol_real(float2 a) { return a.x; }

// |a|^2 without the square root.
inline float chol_abs2(float a) { return a * a; }
inline float chol_abs2(float2 a) { return a.x * a.x + a.y * a.y; }

template <typename T> inline T chol_from_real(float x);
template <> inline float chol_from_real<float>(float x) { return x; }
template <> inline float2 chol_from_real<float2>(float x) { return float2(x, 0.0f); }

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Left-looking potf2 on the diagonal block [k0, k0 + w) of one matrix, whose columns left of k0
// are already factored and subtracted (chol_syrk). Thread t owns row k0 + t of the block (w <=
// threads): it keeps sum_k |l_rk|^2 of its row in a register, so step j needs one barrier: the
// owner of row k0 + j turns its pivot into l_jj (published in threadgroup memory, one slot per
// column, so no slot is overwritten while read), then every row below takes its entry of
// column j, l_ij = (a_ij - sum_k l_ik conj(l_jk)) / l_jj, reading row j from device memory.
// Grid: (threads, batch), one threadgroup per matrix; threads a multiple of kSimdWidth, >= w.
template <typename T>
[[kernel]] void chol_potf2(
    device T* a [[buffer(0)]],
    device int* info [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup float diag[kCholUnblockedMax];

  const long batch = long(group.y);
  device T* A = a + batch * n * n;
  const long t = long(tid);
  const long i = k0 + t;  // this thread's row
  const bool owns = t < w;
  float norm2 = 0.0f;  // sum of |l_ik|^2 over the block's columns solved so far

  for (long j = 0; j < w; ++j) {
    const long r = k0 + j;
    if (t == j) {
      const float d = chol_real(A[r * n + r]) - norm2;
      // !(d > 0) is LAPACK's test (ajj <= 0 or NaN); a failed pivot gives NaN from here on.
      const bool fails = !(d > 0.0f);
      const float ljj = fails ? NAN : metal::sqrt(d);
      if (fails && info[batch] == 0) {
        info[batch] = int(r + 1);
      }
      A[r * n + r] = chol_from_real<T>(ljj);
      diag[j] = ljj;
    }
    // Publishes l_jj and orders row j's entries (written by its owner in earlier steps).
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    if (owns && t > j) {
      T v = A[i * n + r];
      for (long k = k0; k < r; ++k) {
        v = sub_mul(v, A[i * n + k], conj(A[r * n + k]));
      }
      v = v / diag[j];
      A[i * n + r] = v;
      norm2 += chol_abs2(v);
    }
  }
}

// The panel L21 = A21 L11^-H below the diagonal block [k0, k0 + w): row i of L21 solves
// L11 conj(l_i) = conj(a_i), forward substitution along the row, L11 staged in threadgroup
// memory. One thread per row of [k0 + w, n); grid: (rows rounded up to the group, batch).
template <typename T>
[[kernel]] void chol_trsm(
    device T* a [[buffer(0)]],
    constant mpsl::CholParams& p_ [[buffer(1)]],
    uint2 gid [[thread_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T l11[kCholBlock * kCholBlock];

  const long batch = long(group.y);
  device T* A = a + batch * n * n;
  for (long e = long(tid); e < w * w; e += long(tpg.x)) {
    const long r = e / w, c = e - (e / w) * w;
    l11[r * kCholBlock + c] = A[(k0 + r) * n + k0 + c];
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);

  const long i = k0 + w + long(gid.x);
  if (i >= n) {
    return;
  }
  device T* row = A + i * n + k0;
  T x[kCholBlock];
  for (int c = 0; c < kCholBlock; ++c) {
    if (c < w) {
      T v = row[c];
      for (int k = 0; k < c; ++k) {
        v = sub_mul(v, x[k], conj(l11[c * kCholBlock + k]));
      }
      x[c] = v / chol_real(l11[c * kCholBlock + c]);
    }
  }
  for (int c = 0; c < kCholBlock; ++c) {
    if (c < w) {
      row[c] = x[c];
    }
  }
}

// Trailing update A22 -= L21 L21^H on the lower triangle of A22 = rows/columns [s, n), s = k0 +
// w, with L21 = rows [s, n) x columns [k0, s). Tiles wholly above the diagonal return at once;
// entries above it in a diagonal tile are left alone (they stay zero). This is the place of the
// shared simdgroup_matrix GEMM (metal/common/gemm.h) once it exists: a plain register-tiled
// product meanwhile.
// Grid: (column tiles * kCholTileThreads, row tiles, batch), threadgroups of kCholTileThreads.
template <typename T>
[[kernel]] void chol_syrk(
    device T* a [[buffer(0)]],
    constant mpsl::CholParams& p_ [[buffer(1)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T rs[kCholTile * kCholTileK];  // L21 rows of the tile's rows, [row][k]
  threadgroup T cs[kCholTileK * kCholTile];  // conj(L21) rows of the tile's columns, [k][col]

  const long s = k0 + w;
  const long row0 = s + long(group.y) * kCholTile;
  const long col0 = s + long(group.x) * kCholTile;
  if (col0 > row0 + kCholTile - 1) {
    return;  // the whole threadgroup: no barrier is left waiting
  }
  device T* A = a + long(group.z) * n * n;
  const int tx = int(tid) % kCholTileLanes;
  const int ty = int(tid) / kCholTileLanes;

  T acc[kCholMicro][kCholMicro];
  for (int u = 0; u < kCholMicro; ++u) {
    for (int v = 0; v < kCholMicro; ++v) {
      acc[u][v] = zero<T>();
    }
  }
  for (long kb = 0; kb < w; kb += kCholTileK) {
    for (int e = int(tid); e < kCholTile * kCholTileK; e += kCholTileThreads) {
      const int r = e / kCholTileK, k = e % kCholTileK;
      const long gr = row0 + r, gk = kb + k;
      rs[e] = (gr < n && gk < w) ? A[gr * n + k0 + gk] : zero<T>();
    }
    for (int e = int(tid); e < kCholTileK * kCholTile; e += kCholTileThreads) {
      const int k = e / kCholTile, c = e % kCholTile;
      const long gk = kb + k, gc = col0 + c;
      cs[e] = (gk < w && gc < n) ? conj(A[gc * n + k0 + gk]) : zero<T>();
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int k = 0; k < kCholTileK; ++k) {
      T rv[kCholMicro], cv[kCholMicro];
      for (int u = 0; u < kCholMicro; ++u) {
        rv[u] = rs[(ty + u * kCholTileLanes) * kCholTileK + k];
        cv[u] = cs[k * kCholTile + tx + u * kCholTileLanes];
      }
      for (int u = 0; u < kCholMicro; ++u) {
        for (int v = 0; v < kCholMicro; ++v) {
          acc[u][v] += mul(rv[u], cv[v]);
        }
      }
    }
    // The next block overwrites rs / cs.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  for (int u = 0; u < kCholMicro; ++u) {
    const long gr = row0 + ty + u * kCholTileLanes;
    for (int v = 0; v < kCholMicro; ++v) {
      const long gc = col0 + tx + v * kCholTileLanes;
      if (gr < n && gc <= gr) {
        A[gr * n + gc] -= acc[u][v];
      }
    }
  }
}
