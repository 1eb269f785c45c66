// Cholesky factorization A = L L^H of Hermitian positive-definite matrices (LAPACK potrf, lower).
//
// Matrices are contiguous row-major (batch, n, n) holding the lower triangle of A with zeros
// above it (the host copies tril(A), or tril(A^H) for upper=True, into the working tensor, which
// the kernels factor in place); the batch index is the last grid dimension of every kernel, so
// one launch sequence covers the whole batch. The host (mpslinalg/linalg/cholesky_metal.py) runs:
//   chol_potf2_simd  n <= kSimdWidth: the whole matrix in one launch, one simdgroup per matrix
//                (right-looking potf2, the lower triangle held in registers, a row a lane);
//   chol_potf2   kSimdWidth < n <= kCholUnblockedMax: the same in one threadgroup per matrix,
//                a few entries of one row per thread, kCholRowThreads threads a row;
//   otherwise, per block of kCholBlock columns starting at column k0 (right-looking potrf),
//   the first block's L11 by chol_potf2_simd (on rows/columns [0, kCholBlock)), then:
//   trsm_diag    the panel below it, L21 = A21 L11^-H: the blocked triangular solve of
//                metal/linalg/triangular.h, right side, one simdgroup per row of the panel (the
//                block is one diagonal block of that solve, bs = kCholBlock, so its trsm_update
//                has nothing to do);
//   chol_update  the trailing update A22 -= L21 L21^H (HERK) on the shared simdgroup_matrix
//                product (metal/common/gemm.h), lower triangle only; the threadgroup of A22's
//                first diagonal tile, which is the next block's diagonal block, then factors
//                it (potf2 by its first simdgroup, a row a lane), so no potf2 launch is left
//                between two blocks: 2 ceil(n / kCholBlock) - 1 launches in all (the first
//                chol_potf2_simd, then trsm_diag + chol_update per block but the last).
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

// Largest order factored by a single chol_potf2 launch (one threadgroup of kCholRowThreads
// threads per row).
constant constexpr int kCholUnblockedMax = 64;
// Columns per block of the blocked factorization (the order of a diagonal block, the K of the
// trailing update): a multiple of kTriBlock of metal/linalg/triangular.h, passed to the panel's
// solve as the order of its diagonal block (TriBlockParams.bs), so that solve is one trsm_diag
// launch (tests/linalg/test_cholesky.py checks it).
constant constexpr int kCholBlock = 32;
static_assert(kCholBlock <= kCholUnblockedMax, "a diagonal block is factored by chol_potf2");
static_assert(kCholBlock <= kGemmTileM && kCholBlock <= kGemmWideTile,
              "the next diagonal block lies in the update's first tile");
static_assert(kCholBlock <= kSimdWidth, "one simdgroup factors a block, a row a lane");
// Scalars of chol_potf2_simd, chol_potf2 and chol_update (chol_lauum reads n only).
struct CholParams {
  long n;     // order of each matrix (its row stride)
  long k0;    // first row and column of the diagonal block
  long w;     // order of the diagonal block
  long next;  // chol_update: the order of the next diagonal block, which it factors (at most
              // kCholBlock), 0 for none
  long cols;  // chol_update: columns [s, s + cols) of A22 updated (the host's outer block), all
              // rows [s, n)
};

inline float chol_real(float a) { return a; }
inline float chol_real(float2 a) { return a.x; }

// |a|^2 without the square root.
inline float chol_abs2(float a) { return a * a; }
inline float chol_abs2(float2 a) { return a.x * a.x + a.y * a.y; }

template <typename T> inline T chol_from_real(float x);
template <> inline float chol_from_real<float>(float x) { return x; }
template <> inline float2 chol_from_real<float2>(float x) { return float2(x, 0.0f); }

// Threads of chol_potf2 per row of the block (G): thread t owns row t / G of the block and, of
// that row, the columns k = g + G q (g = t % G, q < N / G), held in registers. A step's work on
// a row (the entries j < k <= i) is spread over G threads, strided so that every thread of the
// row keeps a share of it as the row's active part shrinks towards the diagonal; each thread
// pays the step's fixed cost (the barrier, the loads of a_jj and a_ij, sqrt and two divisions)
// once for N / G entries. With 8: 8 entries a thread for blocks of kCholUnblockedMax columns
// (512 threads; blocks of at most kSimdWidth take chol_potf2_simd). Why 8: in NVRTC's PTX for
// sm_90 (float32, N = kSimdWidth, when these blocks took this body) a thread's step was ~43
// instructions fixed and ~11 per entry, so one entry a thread (G = 32) would issue the fixed part
// for every entry, ~2.5x the warp instructions of G = 8 a step for the same chain of dependent
// latencies; G = 4 (16 entries for N = 64) gave ptxas a stack frame (local memory).
constant constexpr int kCholRowThreads = 8;
// Threads of a chol_potf2 threadgroup at most (its max_total_threads_per_threadgroup): G threads
// for each of kCholUnblockedMax rows.
constant constexpr int kCholPotf2Threads = 512;
static_assert(kCholPotf2Threads == kCholRowThreads * kCholUnblockedMax, "G threads a row");
static_assert(kSimdWidth % kCholRowThreads == 0, "a row's threads lie in one simdgroup");
static_assert((kCholRowThreads & (kCholRowThreads - 1)) == 0, "a column's owner: low bits");
static_assert(kCholPotf2Threads <= 1024, "Metal's threadgroup limit");

// The body of chol_potf2 for blocks of order w <= N (N = kCholUnblockedMax; the host takes it for
// w > kSimdWidth) with G threads a row (kCholRowThreads), N G threads. Thread t owns the
// entries (i, g + G q) of the block, i = t / G, g = t % G, q < E = N / G, in `a` (registers):
// every loop over them runs over all E with a compile-time bound and is unrolled, so each index
// is a constant (a runtime index would put the array in local memory, whose loads are the
// latency the registers remove). Step j is right-looking (the outer-product form of
// Golub & Van Loan, Matrix Computations, section 4.2): after the barrier, col holds column j of
// the partly updated block (a_kj for k >= j, the pivot a_jj at slot j, each published by the
// owner of the entry); every thread of a row i >= j forms l_jj = sqrt(a_jj) itself; the owner
// of (i, j) stores l_ij = a_ij / l_jj (l_jj on the diagonal), and every thread of the row
// subtracts l_ij conj(l_kj) = (a_ij / a_jj) conj(a_kj) from its entries j < k <= i (two
// divisions a step, none per entry); the owner of (i, j + 1), i > j, publishes the updated
// a_i,j+1 in the other buffer of col for step j + 1. Two buffers alternate, so one barrier a
// step orders both the reads of step j and the writes for step j + 1 (a thread writes buffer
// (j + 1) & 1 only after every thread passed the barrier of step j, i.e. finished reading it at
// step j - 1). The arithmetic of every entry is that of the thread-per-row form it replaces.
// col: 2 N entries of threadgroup memory.
template <typename T, int N, int G>
inline void chol_potf2_entries(device T* A, device int* info, long n, long k0, long w, long batch,
                               int t, threadgroup T* col) {
  constexpr int E = N / G;
  static_assert(N % G == 0 && (E & (E - 1)) == 0, "a row splits into E = N / G, a power of 2");
  static_assert((G & (G - 1)) == 0, "a column's owner: low bits");
  const int i = t / G, g = t % G;
  const bool owns = i < int(w);
  device T* Ai = A + (owns ? k0 + i : k0) * n + k0;  // row i of the block
  T a[E];
#pragma unroll
  for (int q = 0; q < E; ++q) {
    const int k = g + G * q;
    a[q] = owns && k <= i ? Ai[k] : zero<T>();  // the lower triangle only
  }
  if (owns && g == 0) {
    col[i] = a[0];  // a_i0
  }
  // The block's first failed pivot (1-based), the same in every thread: recorded by one thread
  // after the loop, so info is never read and written by different threads of the launch.
  int first = 0;
  for (int j = 0; j < int(w); ++j) {
    threadgroup const T* c = col + (j & 1) * N;
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    // !(d > 0) is LAPACK's test (ajj <= 0 or NaN); a failed pivot gives NaN from here on.
    const float d = chol_real(c[j]);
    const bool fails = !(d > 0.0f);
    first = first == 0 && fails ? j + 1 : first;
    if (owns && i >= j) {  // rows above j are final: their threads only keep the barriers
      const float ljj = fails ? NAN : metal::sqrt(d);
      // l_ij and the multiplier of the unscaled column, l_ij / l_jj = a_ij / a_jj: two
      // independent divisions (one rounding each), NaN both after a failed pivot.
      const T ci = c[i];
      const T l = i == j ? chol_from_real<T>(ljj) : ci / ljj;
      const T u = ci / (fails ? NAN : d);
      // The loads first and the masks as selects, no branch between the entries: the loads
      // overlap (a branch per entry serialises each load's latency).
      T ck[E];
#pragma unroll
      for (int q = 0; q < E; ++q) {
        ck[q] = c[g + G * q];
      }
#pragma unroll
      for (int q = 0; q < E; ++q) {
        const int k = g + G * q;
        const T updated = sub_mul(a[q], u, conj(ck[q]));
        a[q] = k == j ? l : (k > j && k <= i ? updated : a[q]);
      }
      if (i > j && g == ((j + 1) & (G - 1))) {
        // a_i,j+1 (the next pivot when i = j + 1) is a[s]: a tree of selects on the bits of s
        // (depth log2 E, where a chain over the entries would be E - 1 deep).
        const int s = (j + 1) / G;
        T pick[E];
#pragma unroll
        for (int q = 0; q < E; ++q) {
          pick[q] = a[q];
        }
#pragma unroll
        for (int bit = 1, half = E / 2; half >= 1; bit *= 2, half /= 2) {
#pragma unroll
          for (int q = 0; q < half; ++q) {
            pick[q] = (s & bit) != 0 ? pick[2 * q + 1] : pick[2 * q];
          }
        }
        col[((j + 1) & 1) * N + i] = pick[0];
      }
    }
  }
  if (t == 0 && first != 0 && info[batch] == 0) {  // an earlier block's failure stays
    info[batch] = int(k0 + first);
  }
  if (owns) {
#pragma unroll
    for (int q = 0; q < E; ++q) {
      const int k = g + G * q;
      if (k <= i) {
        Ai[k] = a[q];
      }
    }
  }
}

// Entries of a row per group of broadcasts in chol_potf2_simdgroup's step (the last group has the
// rest): a group's broadcasts are issued together, ahead of the updates that use them, so they
// overlap one another's latency, and the lane holds 8 (complex: 16) broadcast floats beside its
// row at a time instead of the whole column's 31 (62), which would double a complex lane's
// registers.
constant constexpr int kCholColumnGroup = 8;

// kCholColumnGroup entries of the column of chol_potf2_simdgroup's step, those of lanes q0 + e of
// `rotated` (e < kCholColumnGroup, q0 + e < kSimdWidth); q0 is a constant where it is inlined.
template <typename T>
inline void chol_column_group(thread T* ck, T rotated, int q0) {
#pragma unroll
  for (int e = 0; e < kCholColumnGroup; ++e) {
    if (q0 + e < kSimdWidth) {
      ck[e] = simd_broadcast(rotated, ushort(q0 + e));
    }
  }
}

// The potf2 of a diagonal block of order w <= kSimdWidth by ONE simdgroup, the block in its
// registers: lane i holds the active part of row i, and step j is the right-looking update of
// chol_potf2_entries (Golub & Van Loan, Matrix Computations, section 4.2) with the threadgroup
// column replaced by simd broadcasts. At step j, a[q] = a_i,j+q (q < kSimdWidth - j; the rest,
// and every entry above the diagonal, is scratch that no entry below it reads): the pivot a_jj
// comes from lane j, and each a_kj (k > j) that lane i subtracts (a_ij / a_jj) conj(a_kj) with
// from lane k's a[0], one broadcast each; the step stores l_ij (column j is final) and shifts
// the row down one register, a[q - 1] = the updated a[q], so that column j + 1 is a[0] again.
// On Apple GPUs a simd broadcast is a register-file operation of the simdgroup, with no
// threadgroup-memory round trip, and one simdgroup needs no barrier: a step is the broadcasts,
// sqrt, two divisions and one multiply-add per entry, where chol_potf2_entries pays a
// threadgroup barrier and threadgroup stores and loads, and the sqrt and divisions in every
// thread of a row. The loops over the entries are unrolled, so every register index is a
// constant (no dynamic indexing, i.e. no local memory); the step loop is not: a body of a few
// hundred instructions, where unrolling the steps too (their lanes constants as well) gave
// NVRTC ~5500 instructions of straight-line code (complex64 ~11500), each fetched once a call,
// against a loop body of ~300 (~600). The source lanes are constants after one rotation of
// the column by j (lane q of `rotated` is lane j + q's a_j+q,j). kSimdWidth entries a lane, 32
// floats (complex: 64) and a group of broadcasts, fit the registers of one Apple GPU thread
// (chol_potf2_simd declares one simdgroup as its bound for that). The arithmetic of every entry
// is chol_potf2_entries' (l_jj = sqrt(d), l_ij = a_ij / l_jj, u = a_ij / d, sub_mul(a_ik, u,
// conj(a_kj)), the failed-pivot rule and info), so the factor and info are its. Every lane of
// the simdgroup calls it (lanes i >= w hold zeros and store nothing): the broadcasts need all.
template <typename T>
inline void chol_potf2_simdgroup(device T* A, device int* info, long n, long k0, long w,
                                 long batch, int i) {
  constexpr int N = kSimdWidth;
  const bool owns = i < int(w);
  device T* Ai = A + (owns ? k0 + i : k0) * n + k0;  // row i of the block
  T a[N];
#pragma unroll
  for (int q = 0; q < N; ++q) {
    a[q] = owns && q <= i ? Ai[q] : zero<T>();  // the lower triangle only
  }
  int first = 0;  // the block's first failed pivot (1-based), the same in every lane
  for (int j = 0; j < int(w); ++j) {
    const T ci = a[0];  // a_ij, partly updated (scratch for i < j)
    // !(d > 0) is LAPACK's test (ajj <= 0 or NaN); a failed pivot gives NaN from here on.
    const float d = simd_broadcast(chol_real(ci), ushort(j));
    // Lane q holds lane (j + q) mod kSimdWidth's a_.j (a wrapped-around lane's is scratch).
    const T rotated = metal::simd_shuffle_rotate_down(ci, ushort(j));
    const bool fails = !(d > 0.0f);
    first = first == 0 && fails ? j + 1 : first;
    const float ljj = fails ? NAN : metal::sqrt(d);
    // The first group of the column between the pivot's sqrt and its divisions, which it does
    // not depend on: the sqrt waits out the rotation's latency, the divisions the broadcasts'.
    T ck[kCholColumnGroup];
    if (j + 1 < int(w)) {
      chol_column_group(ck, rotated, 1);
    }
    // l_ij and the multiplier of the unscaled column, l_ij / l_jj = a_ij / a_jj: two
    // independent divisions (one rounding each), NaN both after a failed pivot.
    const T l = i == j ? chol_from_real<T>(ljj) : ci / ljj;
    const T u = ci / (fails ? NAN : d);
    if (owns && i >= j) {
      Ai[j] = l;
    }
    // A group from a[q0] on holds columns j + q0 and after: all scratch from column w on, where
    // no lane has a row, so the groups there are skipped (uniformly: j and w are the same in
    // every lane), and a step does ceil((w - 1 - j) / kCholColumnGroup) groups, not all. The
    // registers a skipped group leaves unshifted then hold columns w and after: scratch still.
#pragma unroll
    for (int q0 = 1; q0 < N; q0 += kCholColumnGroup) {
      if (j + q0 >= int(w)) {
        break;
      }
      if (q0 > 1) {
        chol_column_group(ck, rotated, q0);
      }
#pragma unroll
      for (int e = 0; e < kCholColumnGroup; ++e) {
        const int q = q0 + e;
        if (q < N) {
          a[q - 1] = sub_mul(a[q], u, conj(ck[e]));
        }
      }
    }
  }
  if (i == 0 && first != 0 && info[batch] == 0) {  // an earlier block's failure stays
    info[batch] = int(k0 + first);
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Right-looking potf2 on the diagonal block [k0, k0 + w) of one matrix, whose columns left of k0
// are already factored and subtracted (chol_update), w <= kSimdWidth (the blocked
// factorization's first block, kCholBlock, and matrices up to that order): one simdgroup a
// matrix, a row a lane, the block in registers (chol_potf2_simdgroup): w steps of broadcasts,
// with no barrier and no threadgroup memory. A kernel of its own, not a branch of chol_potf2:
// its max_total_threads_per_threadgroup is one simdgroup, so the compiler may give each thread
// the registers of a row and a group of broadcasts (32 + 8 floats, complex 64 + 16) where
// chol_potf2's 512 threads must fit together, and chol_potf2 keeps registers sized for its
// 8 entries a thread (NVRTC for sm_90: one kernel with both bodies took 120 registers for
// complex64 at 512 threads, against 64). Grid: (kSimdWidth, batch), one simdgroup per matrix.
template <typename T>
[[kernel, max_total_threads_per_threadgroup(mpsl::kSimdWidth)]] void chol_potf2_simd(
    device T* a [[buffer(0)]],
    device int* info [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint lane [[thread_index_in_simdgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, batch = long(group.y);
  chol_potf2_simdgroup<T>(a + batch * n * n, info, n, p_.k0, p_.w, batch, int(lane));
}

// The same potf2 for kSimdWidth < w <= kCholUnblockedMax (matrices of 33 to 64 rows, and the
// wider blocks benchmarks/sweep_cuda_cholesky.py measures), the block's lower triangle spread
// over the threadgroup's registers, kCholRowThreads threads a row (chol_potf2_entries; correct
// for any w <= kCholUnblockedMax): w steps of one barrier each, the only memory traffic in the
// loop the threadgroup column, read as broadcasts (the threads of a row read the same a_ij, all
// the same a_jj). The earlier form gave each thread a whole row (w threads, one or two
// simdgroups), so each step walked up to 64 entries serially in few warps: a latency chain of
// ~w instructions a step that no other warp hid; here a thread works on 8 entries, and the
// step's work is spread over the warps of the rows still active. (A lane of chol_potf2_simd
// also holds a whole row, but its step has no serial walk: each entry's broadcast and update
// are independent of the others'.) Grid: (threads, batch), one threadgroup per matrix; threads
// = kCholRowThreads w rounded up to kSimdWidth, at most kCholPotf2Threads (the attribute,
// Metal's bound on the launch).
template <typename T>
[[kernel, max_total_threads_per_threadgroup(mpsl::kCholPotf2Threads)]] void chol_potf2(
    device T* a [[buffer(0)]],
    device int* info [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T col[2 * kCholUnblockedMax];  // column j of the block, two steps alternating
  const long batch = long(group.y);
  chol_potf2_entries<T, kCholUnblockedMax, kCholRowThreads>(a + batch * n * n, info, n, k0, w,
                                                            batch, int(tid), col);
}

// Trailing update A22 -= L21 L21^H with A22 = rows/columns [s, n), s = k0 + w, and L21 = rows
// [s, n) x columns [k0, s), restricted to A22's first `cols` columns (all rows): one Tile x Tile
// block of A22 per threadgroup of kGemmThreads (the wide block for the outer blocks' deep
// updates in float, as the host chooses). The host's outer blocks (a two-level blocking) update
// only their own columns after each inner block, then the rest of the matrix once, with w the
// outer block's width: the rest is then read and written
// once per outer block, not once per inner block, and its product is w deep instead of 32. Only
// the lower triangle is read later, so blocks wholly above the diagonal return at once and the
// blocks on it write their lower triangle only (the zeros above it stay).
// Then the threadgroup of the tile at (s, s), which holds the next diagonal block [s, s + w')
// with w' = p.next (at most kCholBlock), factors that block as chol_potf2_simd does (its
// first simdgroup, chol_potf2_simdgroup: the same factor, info the same; the others return): no
// other threadgroup of the launch reads or writes that block (the others write the rest of A22
// and read L21 only), and the next launch (the panel's trsm_diag) reads its factor. This
// removes the potf2 launch of every block but the first: the blocks form a serial chain of
// launches, each costing the host its submission (~10 us each through the CUDA executor on an
// H200, which bounds a 1024 x 1024 call there: 63 launches, 690 us wall, 528 us of device
// time; benchmarks/results/h200_round22.md). The launch lasts as long as this threadgroup: one
// tile's update, then the w' steps the removed potf2 launch ran (13 us of the update's 19 us
// at 1024 x 1024 there), by one simdgroup (whose steps wait on no barrier: the other
// simdgroups, idle then, would only add barriers to a chain of broadcasts). Grid: (column
// blocks * kGemmThreads, row blocks, batch); max_total_threads_per_threadgroup is the launch's
// kGemmThreads (on the CUDA executor, a bound that leaves the product's accumulators and the
// potf2's row their registers).
template <typename T, int Tile>
[[kernel, max_total_threads_per_threadgroup(mpsl::kGemmThreads)]] void chol_update(
    device T* a [[buffer(0)]],
    device int* info [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup float scratch[gemm_scratch_floats<T, Tile, Tile>()];
  const long row0 = long(group.y) * Tile, col0 = long(group.x) * Tile;
  if (col0 >= row0 + Tile) {
    return;  // the whole threadgroup: no barrier is left waiting
  }
  device T* A = a + long(group.z) * n * n;
  const long s = k0 + w;
  device const T* l21 = A + s * n + k0;
  gemm_tile<T, Tile, Tile>(l21, n, kGemmNoTrans, l21, n, kGemmConjTrans, A + s * n + s, n,
                           n - s, p_.cols, w, row0, col0, -1.0f, 1.0f, kGemmLower, scratch, tid,
                           sg);
  if (p_.next == 0 || row0 != 0 || col0 != 0) {
    return;  // uniform over the threadgroup: the diagonal block is tile (0, 0) of A22 only
  }
  // gemm_tile's threads stored the tile's entries to device memory, each thread its own, and
  // the potf2 below reads them spread differently over the threads (a thread reads entries
  // others stored). threadgroup_barrier with mem_flags::mem_device (the Metal Shading Language
  // specification, synchronization functions) is an execution barrier for the threadgroup
  // that also orders its threads' device-memory operations: a store before it by one thread
  // is seen by a load after it by any thread of the same threadgroup. It promises nothing
  // about other threadgroups of the launch (that would take device-scope coherence, e.g.
  // Metal 3.2's coherent(device) buffers with device-scope fences, and an order between
  // threadgroups that Metal does not give), which is why the threadgroup that wrote the block
  // is the one that factors it, and no other touches it before the launch ends. gemm_tile's
  // own last barrier orders threadgroup memory only, hence this one.
  threadgroup_barrier(metal::mem_flags::mem_device);
  // Simdgroup 0 alone (the others return, with no barrier left to meet).
  if (sg == 0) {
    chol_potf2_simdgroup<T>(A, info, n, s, p_.next, long(group.z), int(tid));
  }
}

// potri's product (LAPACK lauum): the lower triangle of C = X^H X for lower triangular X (n x n,
// zero above its diagonal), C[i][j] = sum over k >= i of conj(x_ki) x_kj for j <= i. The block at
// rows [row0, row0 + Tile) sums from k = row0 on (the rows above hold zeros in column i), so the
// product costs n^3 / 6 multiply-adds instead of n^3 / 2. One Tile x Tile block of C per
// threadgroup of kGemmThreads. Grid: (column blocks * kGemmThreads, row blocks, batch); blocks
// wholly above the diagonal return at once.
template <typename T, int Tile>
[[kernel]] void chol_lauum(
    device const T* x [[buffer(0)]],
    device T* c [[buffer(1)]],
    constant mpsl::CholParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = p_.n;
  threadgroup float scratch[gemm_scratch_floats<T, Tile, Tile>()];
  const long row0 = long(group.y) * Tile, col0 = long(group.x) * Tile;
  if (col0 >= row0 + Tile) {
    return;  // the whole threadgroup: no barrier is left waiting
  }
  device const T* X = x + long(group.z) * n * n + row0 * n;  // rows [row0, n) of X
  gemm_tile<T, Tile, Tile>(X, n, kGemmConjTrans, X, n, kGemmNoTrans, c + long(group.z) * n * n,
                           n, n, n, n - row0, row0, col0, 1.0f, 0.0f, kGemmLower, scratch, tid,
                           sg);
}
