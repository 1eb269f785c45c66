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
//   trsm_diag    the panel below it, L21 = A21 L11^-H: the blocked triangular solve of
//                metal/linalg/triangular.h, right side, one simdgroup per row of the panel (the
//                block is one diagonal block of that solve, bs = kCholBlock, so its trsm_update
//                has nothing to do);
//   chol_update  the trailing update A22 -= L21 L21^H (HERK) on the shared simdgroup_matrix
//                product (metal/common/gemm.h), lower triangle only.
// cholesky_inverse's potri: chol_lauum forms the lower triangle of X^H X for X = L^-1 (trtri, the
// blocked triangular solve against the identity), on the same product.
//
// A leading minor that is not positive definite (the pivot d = a_jj - sum_k |l_jk|^2 is <= 0 or
// NaN, as LAPACK's potf2 tests it) stops nothing: info records its order (1-based) if no earlier
// minor failed, and its column becomes NaN. Every later pivot then holds NaN, fails too, and
// carries NaN on, through the panel and the trailing update across blocks: the factor is NaN in
// the lower triangle from the failing column on, exact before it, and no loop depends on values.
// The imaginary part of a complex diagonal is not read (LAPACK's convention).
#pragma once

#include "../common/defines.h"
#include "../common/gemm.h"
#include "../common/scalar.h"

namespace mpsl {

// Largest order factored by a single chol_potf2 launch (a thread per row, one threadgroup).
constant constexpr int kCholUnblockedMax = 64;
// Columns per block of the blocked factorization (the order of a diagonal block, the K of the
// trailing update): a multiple of kTriBlock of metal/linalg/triangular.h, passed to the panel's
// solve as the order of its diagonal block (TriBlockParams.bs), so that solve is one trsm_diag
// launch (tests/linalg/test_cholesky.py checks it).
constant constexpr int kCholBlock = 32;
static_assert(kCholBlock <= kCholUnblockedMax, "a diagonal block is factored by chol_potf2");
static_assert(kGemmTileM == kGemmTileN, "the update's tiles straddle the diagonal squarely");

// Scalars of chol_potf2 and chol_update (chol_lauum reads n only).
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
// are already factored and subtracted (chol_update). Thread t owns row k0 + t of the block (w <=
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

// Trailing update A22 -= L21 L21^H with A22 = rows/columns [s, n), s = k0 + w, and L21 = rows
// [s, n) x columns [k0, s): one kGemmTileM x kGemmTileN block of A22 per threadgroup of
// kGemmThreads. Only the lower triangle is read later, so blocks wholly above the diagonal
// return at once and the blocks on it write their lower triangle only (the zeros above it stay).
// Grid: (column blocks * kGemmThreads, row blocks, batch).
template <typename T>
[[kernel]] void chol_update(
    device T* a [[buffer(0)]],
    constant mpsl::CholParams& p_ [[buffer(1)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup float scratch[kGemmScratchFloats];
  const long row0 = long(group.y) * kGemmTileM, col0 = long(group.x) * kGemmTileN;
  if (col0 >= row0 + kGemmTileM) {
    return;  // the whole threadgroup: no barrier is left waiting
  }
  device T* A = a + long(group.z) * n * n;
  const long s = k0 + w;
  device const T* l21 = A + s * n + k0;
  gemm_tile(l21, n, kGemmNoTrans, l21, n, kGemmConjTrans, A + s * n + s, n, n - s, n - s, w, row0,
            col0, -1.0f, 1.0f, kGemmLower, scratch, tid, sg);
}

// potri's product (LAPACK lauum): the lower triangle of C = X^H X for lower triangular X (n x n,
// zero above its diagonal), C[i][j] = sum over k >= i of conj(x_ki) x_kj for j <= i. The block at
// rows [row0, row0 + kGemmTileM) sums from k = row0 on (the rows above hold zeros in column i),
// so the product costs n^3 / 6 multiply-adds instead of n^3 / 2. Grid: (column blocks *
// kGemmThreads, row blocks, batch); blocks wholly above the diagonal return at once.
template <typename T>
[[kernel]] void chol_lauum(
    device const T* x [[buffer(0)]],
    device T* c [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n;
  threadgroup float scratch[kGemmScratchFloats];
  const long row0 = long(group.y) * kGemmTileM, col0 = long(group.x) * kGemmTileN;
  if (col0 >= row0 + kGemmTileM) {
    return;  // the whole threadgroup: no barrier is left waiting
  }
  device const T* X = x + long(group.z) * n * n + row0 * n;  // rows [row0, n) of X
  gemm_tile(X, n, kGemmConjTrans, X, n, kGemmNoTrans, c + long(group.z) * n * n, n, n, n,
            n - row0, row0, col0, 1.0f, 0.0f, kGemmLower, scratch, tid, sg);
}
