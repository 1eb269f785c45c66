// Cholesky factorization A = L L^H of Hermitian positive-definite matrices (LAPACK potrf, lower).
//
// Matrices are contiguous row-major (batch, n, n) holding the lower triangle of A with zeros
// above it (the host copies tril(A), or tril(A^H) for upper=True, into the working tensor, which
// the kernels factor in place); the batch index is the last grid dimension of every kernel, so
// one launch sequence covers the whole batch. The host (mpslinalg/linalg/cholesky_metal.py) runs:
//   chol_potf2   n <= kCholUnblockedMax: the whole matrix in one launch, one threadgroup per
//                matrix (right-looking potf2, a thread per row held in registers);
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

// Columns of a register row handled under one test of whether any of them is still to update
// (chol_potf2_rows): the rows shorten and the columns finish as the factorization advances, so
// whole groups are skipped, while every index into the row stays a compile-time constant.
constant constexpr int kCholRowChunk = 8;
static_assert(kCholUnblockedMax % kCholRowChunk == 0 && kSimdWidth % kCholRowChunk == 0,
              "the register rows (kSimdWidth or kCholUnblockedMax long) split into chunks");
static_assert((kCholRowChunk & (kCholRowChunk - 1)) == 0, "a chunk's entry is picked by bits");

// The body of chol_potf2 for blocks of order w <= N (N = kSimdWidth or kCholUnblockedMax, the
// threads of the group). Thread t owns row t of the block and keeps it in `row` (registers):
// every loop over it runs over all N entries with a compile-time bound and is unrolled, so each
// index is a constant (a runtime index would put the array in local memory, whose loads are the
// latency the registers remove). Step j is right-looking (the outer-product form of Golub & Van
// Loan, Matrix Computations, section 4.2): after the barrier, col holds column j of the partly
// updated block (a_kj for k >= j, the pivot a_jj at slot j, each published by its row's owner);
// every thread forms l_jj = sqrt(a_jj) itself; row j stores it, the rows i below store l_ij =
// a_ij / l_jj and subtract l_ij conj(l_kj) = (a_ij / a_jj) conj(a_kj) from their entries
// j < k <= i (two divisions a step, none per entry), then publish their updated a_i,j+1 in the
// other buffer of col for step j + 1. Two buffers alternate, so one barrier a step orders both
// the reads of step j and the writes for step j + 1 (a thread writes buffer (j + 1) & 1 only
// after every thread passed the barrier of step j, i.e. finished reading it at step j - 1).
template <typename T, int N>
inline void chol_potf2_rows(device T* A, device int* info, long n, long k0, long w, long batch,
                            int t, threadgroup T* col) {
  const bool owns = t < int(w);
  device T* Ai = A + (owns ? k0 + t : k0) * n + k0;  // row t of the block
  T row[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    row[k] = owns && k <= t ? Ai[k] : zero<T>();  // the lower triangle only
  }
  if (owns) {
    col[t] = row[0];
  }
  // The block's first failed pivot (1-based), the same in every thread: recorded by one thread
  // after the loop, so info is never read and written by different threads of the launch.
  int first = 0;
  for (int j = 0; j < int(w); ++j) {
    threadgroup const T* c = col + (j & 1) * kCholUnblockedMax;
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    // !(d > 0) is LAPACK's test (ajj <= 0 or NaN); a failed pivot gives NaN from here on.
    const float d = chol_real(c[j]);
    const bool fails = !(d > 0.0f);
    const float ljj = fails ? NAN : metal::sqrt(d);
    first = first == 0 && fails ? j + 1 : first;
    if (owns && t >= j) {
      // l_ij and the multiplier of the unscaled column, l_ij / l_jj = a_ij / a_jj: two
      // independent divisions (one rounding each), NaN both after a failed pivot.
      const T l = t == j ? chol_from_real<T>(ljj) : c[t] / ljj;
      const T u = c[t] / (fails ? NAN : d);
      T next = zero<T>();
#pragma unroll
      for (int c0 = 0; c0 < N; c0 += kCholRowChunk) {
        if (c0 + kCholRowChunk > j && c0 <= t) {  // a chunk holding j, or k in (j, t]
          // The chunk's loads first and the masks as selects, no branch between its entries:
          // the loads overlap (a branch per entry serialises each load's latency).
          T ck[kCholRowChunk];
#pragma unroll
          for (int q = 0; q < kCholRowChunk; ++q) {
            ck[q] = c[c0 + q];
          }
#pragma unroll
          for (int q = 0; q < kCholRowChunk; ++q) {
            const int k = c0 + q;
            const T updated = sub_mul(row[k], u, conj(ck[q]));
            row[k] = k == j ? l : (k > j && k <= t ? updated : row[k]);
          }
          // next = row[j + 1] when it lies in this chunk: a tree of selects on the bits of its
          // place s (depth log2 of the chunk, where a chain over the row would be N deep).
          const int s = j + 1 - c0;
          if (s >= 0 && s < kCholRowChunk) {
            T pick[kCholRowChunk];
#pragma unroll
            for (int q = 0; q < kCholRowChunk; ++q) {
              pick[q] = row[c0 + q];
            }
#pragma unroll
            for (int bit = 1, half = kCholRowChunk / 2; half >= 1; bit *= 2, half /= 2) {
#pragma unroll
              for (int q = 0; q < half; ++q) {
                pick[q] = (s & bit) != 0 ? pick[2 * q + 1] : pick[2 * q];
              }
            }
            next = pick[0];
          }
        }
      }
      if (t > j) {
        // a_i,j+1 (the next pivot when t = j + 1)
        col[((j + 1) & 1) * kCholUnblockedMax + t] = next;
      }
    }
  }
  if (t == 0 && first != 0 && info[batch] == 0) {  // an earlier block's failure stays
    info[batch] = int(k0 + first);
  }
  if (owns) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k <= t) {
        Ai[k] = row[k];
      }
    }
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Right-looking potf2 on the diagonal block [k0, k0 + w) of one matrix, whose columns left of k0
// are already factored and subtracted (chol_update), each thread's row of the block in registers
// (chol_potf2_rows): w steps of one barrier each, the only memory traffic in the loop the
// threadgroup column, read as broadcasts (every row reads the same a_kj). The old left-looking
// form read its row and row j from device memory for every multiply-add, a chain of ~w^2 / 2
// dependent loads per thread. Blocks of w <= kSimdWidth (the blocked factorization's
// kCholBlock) run the body with rows of kSimdWidth, half the unrolled work of kCholUnblockedMax.
// Grid: (threads, batch), one threadgroup per matrix; threads = w rounded up to kSimdWidth (the
// attribute lets a compiler give each thread the registers of its row: 64 floats, 128 for
// complex).
template <typename T>
[[kernel, max_total_threads_per_threadgroup(mpsl::kCholUnblockedMax)]] void chol_potf2(
    device T* a [[buffer(0)]],
    device int* info [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T col[2 * kCholUnblockedMax];  // column j of the block, two steps alternating
  const long batch = long(group.y);
  device T* A = a + batch * n * n;
  if (w <= kSimdWidth) {  // uniform over the group: one body runs, barriers stay matched
    chol_potf2_rows<T, kSimdWidth>(A, info, n, k0, w, batch, int(tid), col);
  } else {
    chol_potf2_rows<T, kCholUnblockedMax>(A, info, n, k0, w, batch, int(tid), col);
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
