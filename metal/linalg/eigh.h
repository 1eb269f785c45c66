// Hermitian eigensolver: two-sided cyclic Jacobi (torch.linalg.eigh / eigvalsh).
//
// A = V diag(w) V^H for a Hermitian A given by one triangle (UPLO): the other triangle is never
// read and the imaginary part of the diagonal is ignored (as LAPACK's heevd does). Each rotation
// is metal/common/jacobi.h's (the one the Jacobi SVD uses): J^H A J zeroes a_pq, the diagonal
// becomes a_pp - t |a_pq|, a_qq + t |a_pq| (Rutishauser's update, written exactly), and the
// vectors accumulate as V <- V J.
//
// Scaling (LAPACK's xHEEV idea, made exact): A is multiplied by 2^-e with 2^(e-1) <= max|a_ij| <
// 2^e, so the entries are O(1) whatever their scale (1e-30 and 1e30 in float32 keep full relative
// accuracy); the eigenvalues are multiplied back by 2^e (exact unless the result itself
// overflows or underflows).
//
// Convergence (Demmel and Veselic 1992, "Jacobi's method is more accurate than QR", the relative
// criterion): the pair (p, q) is rotated while |a_pq| > eps sqrt(|a_pp| |a_qq|) (and above a
// negligible absolute size); a sweep with no rotation ends the iteration. At most kEighMaxSweeps
// sweeps run: every loop has a fixed or bounded trip count, so nothing hangs.
//
// Non-finite input (any NaN or Inf in the read triangle): eigenvalues and vectors are NaN, found
// before any sweep (so it costs one pass over the matrix).
//
// The status buffer holds two int32 per matrix: info (0 converged; n for non-finite input; else
// the number of rotations of the last sweep, > 0) and the sweeps run (the last, rotation-free
// one included).
//
// Kernels (the scaling, criterion and status above are theirs; eigh_small_<dtype>_n<n>, n <=
// kEighSmallMax, one matrix per thread in registers, is generated from the n <= 4 description
// of mpslinalg/small/codegen.py into eigh_small.h: the matrix divided by max |a_ij|, cyclic
// order, at most 12 sweeps, the same status buffer):
//   eigh_group<T>      one threadgroup per matrix, A and V staged in threadgroup memory; pairs
//                      in the parallel round-robin order (Brent and Luk 1985, "The solution of
//                      singular-value and symmetric eigenvalue problems on multiprocessor
//                      arrays"): each of the m - 1 steps of a sweep (m = n rounded up to even)
//                      rotates m / 2 disjoint pairs at once.
//   eigh_device<T>     the same on A and V held in device memory (workspace), for matrices
//                      larger than threadgroup memory: one threadgroup per matrix.
#pragma once

#include "../common/defines.h"
#include "../common/jacobi.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Arguments of the eigh kernels, passed by the host as one list of int64 (field order:
// mpslinalg.linalg.eigh.EIGH_PARAMS; tests/linalg/test_eigh.py checks the two agree).
struct EighParams {
  long n;        // order of the matrices
  long batch;    // number of matrices
  long lower;    // 1: the lower triangle is read (UPLO='L'), 0: the upper one
  long vectors;  // 1: eigenvectors are computed and written
};

// eigh_small serves matrices of order at most this.
constant constexpr int kEighSmallMax = 4;
// Bound on the sweeps (quadratic convergence takes about 5 to 12 in float32).
constant constexpr int kEighMaxSweeps = 40;
// Relative convergence threshold: float32's machine epsilon (2^-23).
constant constexpr float kEighTol = 1.1920929e-7f;
// Off-diagonal entries below this (the matrix scaled to max|a_ij| ~ 1) are negligible.
constant constexpr float kEighNegligible = 1.0e-30f;
// Threadgroup memory of eigh_group staging A and V (the rest holds the rotations and scratch):
// n^2 elements each, so n <= 62 in float32 and n <= 44 in complex64.
constant constexpr int kEighStageBytes = 31744;
// Floats per pair in the rotation buffer: c, Re s, Im s, new a_pp, new a_qq, active flag.
constant constexpr int kEighRotFloats = 6;
// Most pairs of one eigh_group step (n <= 62 gives 31; 32 for the rounding).
constant constexpr int kEighGroupMaxPairs = 32;
// Threads per threadgroup of eigh_group / eigh_device at most.
constant constexpr int kEighMaxThreads = kMaxThreadsPerGroup;
// Items of a step's block update that a thread of eigh_device loads before it stores any: the
// compiler may not move a load above a store that might alias it, so items taken one at a time
// wait for device memory once each; a batch waits once for all. An item holds 8 entries (A's
// block, V's) in registers, so the batch is what fits 64 registers a thread (1024 threads on the
// CUDA executor; ptxas sm_90 spilled 2 complex64 items, and 3 float32 ones). eigh_group takes
// one: its entries are in threadgroup memory and n <= 62 leaves a thread at most one item. The
// items are disjoint blocks, so the values do not depend on it.
template <typename T>
constexpr int eigh_device_load_batch() {
  return sizeof(T) == sizeof(float) ? 2 : 1;
}
// status buffer: int32 per matrix.
constant constexpr int kEighStatusInts = 2;

static_assert(kEighStageBytes + kEighGroupMaxPairs * kEighRotFloats * sizeof(float) +
                      2 * (kMaxThreadsPerGroup / kSimdWidth) * sizeof(float) <=
                  kMaxThreadgroupMemoryBytes,
              "eigh_group's threadgroup memory must fit");

// ---- element helpers ----

inline float eigh_real(float a) { return a; }
inline float eigh_real(float2 a) { return a.x; }
inline bool eigh_finite(float a) { return metal::isfinite(a); }
inline bool eigh_finite(float2 a) { return metal::isfinite(a.x) && metal::isfinite(a.y); }
inline float eigh_ldexp(float a, int e) { return metal::ldexp(a, e); }
inline float2 eigh_ldexp(float2 a, int e) {
  return float2(metal::ldexp(a.x, e), metal::ldexp(a.y, e));
}

template <typename T> inline T eigh_from_real(float a);
template <> inline float eigh_from_real<float>(float a) { return a; }
template <> inline float2 eigh_from_real<float2>(float a) { return float2(a, 0.0f); }

inline void eigh_store_sine(thread float* r, float s) {
  r[1] = s;
  r[2] = 0.0f;
}
inline void eigh_store_sine(thread float* r, float2 s) {
  r[1] = s.x;
  r[2] = s.y;
}
template <typename T> inline T eigh_load_sine(float re, float im);
template <> inline float eigh_load_sine<float>(float re, float im) { return re; }
template <> inline float2 eigh_load_sine<float2>(float re, float im) { return float2(re, im); }

// Entry (i, j) of the Hermitian matrix whose `lower` (or upper) triangle is stored row-major
// at a: the mirrored triangle is the conjugate, the diagonal real.
template <typename T>
inline T eigh_read(device const T* a, long n, long i, long j, bool lower) {
  if (i == j) {
    return eigh_from_real<T>(eigh_real(a[i * n + i]));
  }
  const bool stored = lower ? i > j : i < j;
  return stored ? a[i * n + j] : conj(a[j * n + i]);
}

// Whether the pair with this off-diagonal entry and diagonal is rotated (relative threshold
// `tol`: the eigensolver's own, or the one-sided SVD's test on a Gram matrix, svd_block.h).
inline bool eigh_needs_rotation(float off, float a_pp, float a_qq, float tol = kEighTol) {
  return off > kEighNegligible &&
         off > tol * metal::sqrt(metal::fabs(a_pp)) * metal::sqrt(metal::fabs(a_qq));
}

// One item of a step's block update (see eigh_jacobi) in registers: its pairs, rotations and
// entries, a = A's block (p1, p2), (p1, q2), (q1, p2), (q1, q2), v = V's alike (a diagonal
// block's a: its new values, read from the rotation buffer rather than from A).
template <typename T>
struct EighBlock {
  bool on;    // some rotation touches the block
  bool act1;  // pair k1 (the rows) rotates
  bool act2;  // pair k2 (the columns) rotates
  bool diag;  // k1 == k2
  int p1, q1, p2, q2;
  JacobiRotation<T> j1, j2;
  T a[4];
  T v[4];
};

template <typename T, typename R>
inline JacobiRotation<T> eigh_load_rotation(R rot, int k) {
  JacobiRotation<T> j;
  j.c = rot[k * kEighRotFloats];
  j.s = eigh_load_sine<T>(rot[k * kEighRotFloats + 1], rot[k * kEighRotFloats + 2]);
  j.t = 0.0f;
  return j;
}

// The loads of item `item` of step r (nothing when item >= items or no rotation touches it).
// An active pair has q < n, so act1 implies row q1 exists and act2 column q2.
template <typename T, typename P, typename R>
inline void eigh_block_load(thread EighBlock<T>& blk, P x, P vm, R rot, int n, int m, int r,
                            int pairs, int item, int items, bool vectors) {
  blk.on = false;
  if (item >= items) {
    return;
  }
  const int k1 = item / pairs, k2 = item % pairs;
  blk.act1 = rot[k1 * kEighRotFloats + 5] != 0.0f;
  blk.act2 = rot[k2 * kEighRotFloats + 5] != 0.0f;
  blk.on = blk.act1 || blk.act2;
  if (!blk.on) {
    return;
  }
  blk.diag = k1 == k2;
  jacobi_round_robin(m, r, k1, blk.p1, blk.q1);
  jacobi_round_robin(m, r, k2, blk.p2, blk.q2);
  const bool row_q = blk.q1 < n, col_q = blk.q2 < n;
  if (blk.act1 && !blk.diag) {
    blk.j1 = eigh_load_rotation<T>(rot, k1);
  }
  if (blk.act2) {
    blk.j2 = eigh_load_rotation<T>(rot, k2);
  }
  if (blk.diag) {  // act1 == act2: the pair's own block
    blk.a[0] = eigh_from_real<T>(rot[k1 * kEighRotFloats + 3]);
    blk.a[1] = zero<T>();
    blk.a[2] = zero<T>();
    blk.a[3] = eigh_from_real<T>(rot[k1 * kEighRotFloats + 4]);
  } else {
    blk.a[0] = x[blk.p1 * n + blk.p2];
    blk.a[1] = col_q ? x[blk.p1 * n + blk.q2] : zero<T>();
    blk.a[2] = row_q ? x[blk.q1 * n + blk.p2] : zero<T>();
    blk.a[3] = row_q && col_q ? x[blk.q1 * n + blk.q2] : zero<T>();
  }
  if (vectors && blk.act2) {
    blk.v[0] = vm[blk.p1 * n + blk.p2];
    blk.v[1] = vm[blk.p1 * n + blk.q2];
    blk.v[2] = row_q ? vm[blk.q1 * n + blk.p2] : zero<T>();
    blk.v[3] = row_q ? vm[blk.q1 * n + blk.q2] : zero<T>();
  }
}

// [y0; y1] <- J^H [y0; y1], through the conjugates (rotate_pair applies J from the right).
template <typename T>
inline void eigh_rotate_conj(thread T& y0, thread T& y1, JacobiRotation<T> jr) {
  T r0 = conj(y0), r1 = conj(y1);
  rotate_pair(r0, r1, jr);
  y0 = conj(r0);
  y1 = conj(r1);
}

// The arithmetic and stores of an item loaded by eigh_block_load: A J2 along the block's rows,
// then J1^H along its columns (the order of the two whole-matrix passes it stands for), and
// V J2.
template <typename T, typename P>
inline void eigh_block_store(thread EighBlock<T>& blk, P x, P vm, int n, bool vectors) {
  if (!blk.on) {
    return;
  }
  const int p1 = blk.p1, q1 = blk.q1, p2 = blk.p2, q2 = blk.q2;
  const bool row_q = q1 < n, col_q = q2 < n;
  if (vectors && blk.act2) {
    rotate_pair(blk.v[0], blk.v[1], blk.j2);
    vm[p1 * n + p2] = blk.v[0];
    vm[p1 * n + q2] = blk.v[1];
    if (row_q) {
      rotate_pair(blk.v[2], blk.v[3], blk.j2);
      vm[q1 * n + p2] = blk.v[2];
      vm[q1 * n + q2] = blk.v[3];
    }
  }
  if (blk.act2 && !blk.diag) {
    rotate_pair(blk.a[0], blk.a[1], blk.j2);
    if (row_q) {
      rotate_pair(blk.a[2], blk.a[3], blk.j2);
    }
  }
  if (blk.act1 && !blk.diag) {
    eigh_rotate_conj(blk.a[0], blk.a[2], blk.j1);
    if (col_q) {
      eigh_rotate_conj(blk.a[1], blk.a[3], blk.j1);
    }
  }
  x[p1 * n + p2] = blk.a[0];
  if (col_q) {
    x[p1 * n + q2] = blk.a[1];
  }
  if (row_q) {
    x[q1 * n + p2] = blk.a[2];
    if (col_q) {
      x[q1 * n + q2] = blk.a[3];
    }
  }
}

// Position of eigenvalue i in ascending order (ties by index; NaN last, as in a total order).
inline int eigh_rank(float wi, int i, float wj, int j) {
  const bool i_nan = metal::isnan(wi), j_nan = metal::isnan(wj);
  if (i_nan || j_nan) {
    return (j_nan && !i_nan) ? 0 : ((i_nan && !j_nan) ? 1 : (j < i ? 1 : 0));
  }
  return (wj < wi || (wj == wi && j < i)) ? 1 : 0;
}

// Position of the diagonal entry i of the n x n matrix x (row-major, threadgroup or device
// memory: P) among its diagonal in ascending order (eigh_rank's): where a Jacobi-diagonalised
// matrix's eigenvalue i and its vector go.
template <typename P>
inline int eigh_diagonal_rank(P x, int n, int i) {
  const float di = eigh_real(x[i * n + i]);
  int rank = 0;
  for (int j = 0; j < n; ++j) {
    rank += j == i ? 0 : eigh_rank(di, i, eigh_real(x[j * n + j]), j);
  }
  return rank;
}

// ---- one threadgroup per matrix ----

// The sweeps of the cyclic Jacobi method on the scaled Hermitian x (n x n, row-major) and, when
// `vectors`, the rotations accumulated into vm (V <- V J from the vm given): at most
// max_sweeps, until a sweep rotates nothing. Returns the sweeps run (the rotation-free one
// included) and sets `rotations` to the last sweep's count. The whole threadgroup calls it;
// barriers are on both memories (x, vm, rot in threadgroup or device memory: P, R).
template <typename T, int Batch, typename P, typename R>
inline int eigh_jacobi_sweeps(P x, P vm, R rot, threadgroup float* scratch, int n, bool vectors,
                              int max_sweeps, uint tid, uint nthreads, thread float& rotations) {
  const uint lane = tid % uint(kSimdWidth), sg = tid / uint(kSimdWidth);
  const uint nsg = (nthreads + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  const int m = n + (n & 1);
  const int pairs = m / 2;
  int sweeps = 0;
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    ++sweeps;
    float mine = 0.0f;  // rotations of this thread's pairs in this sweep
    for (int r = 0; r < m - 1; ++r) {
      // The rotations of the m / 2 disjoint pairs, from the same A.
      for (int k = int(tid); k < pairs; k += int(nthreads)) {
        int pp, qq;
        jacobi_round_robin(m, r, k, pp, qq);
        float rk[kEighRotFloats] = {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (qq < n) {
          const float a_pp = eigh_real(x[pp * n + pp]), a_qq = eigh_real(x[qq * n + qq]);
          const T a_pq = x[pp * n + qq];
          const float off = modulus(a_pq);
          if (eigh_needs_rotation(off, a_pp, a_qq)) {
            const JacobiRotation<T> jr = jacobi_rotation(a_pp, a_qq, a_pq);
            rk[0] = jr.c;
            eigh_store_sine(rk, jr.s);
            rk[3] = a_pp - jr.t * off;
            rk[4] = a_qq + jr.t * off;
            rk[5] = 1.0f;
            mine += 1.0f;
          }
        }
        for (int f = 0; f < kEighRotFloats; ++f) {
          rot[k * kEighRotFloats + f] = rk[f];
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
      // A <- J^H A J and V <- V J in one pass: item (k1, k2) owns the 2 x 2 block of A on
      // rows p1, q1 (pair k1) and columns p2, q2 (pair k2) and V's rows p1, q1 of columns p2,
      // q2. Each entry gets A J (pair k2's rotation, along its row) and then J^H (pair k1's,
      // along its column, through the conjugates) in that order, the operations of two passes
      // over the whole matrix with a barrier between them, so the same values with one barrier
      // less; a diagonal block (k1 == k2) gets its exact values. Index n (odd n) is the dummy:
      // its pair never rotates, its row and column do not exist. (int indices, as the entries':
      // a 64-bit division would be a long emulation.) The blocks are disjoint, so a thread
      // loads Batch of its items before storing any.
      const int items = pairs * pairs;
      const int stride = int(nthreads);
      for (int first = int(tid); first < items; first += Batch * stride) {
        EighBlock<T> blk[Batch];
        for (int u = 0; u < Batch; ++u) {
          eigh_block_load(blk[u], x, vm, rot, n, m, r, pairs, first + u * stride, items,
                          vectors);
        }
        for (int u = 0; u < Batch; ++u) {
          eigh_block_store(blk[u], x, vm, n, vectors);
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    }
    rotations = group_sum(mine, scratch, lane, sg, nsg);
    if (rotations == 0.0f) {
      break;
    }
  }
  return sweeps;
}

// The sweeps and the output of one matrix, held at x (A) and vm (V) (threadgroup or device
// memory: P is the pointer type), with rotations in rot (kEighRotFloats per pair, threadgroup or
// device memory: R); Batch items of the block update loaded at once (eigh_device_load_batch).
// The whole threadgroup calls it; barriers are on both memories (the same code serves both).
template <typename T, int Batch, typename P, typename R>
inline void eigh_jacobi(device const T* a, device float* w, device T* v, device int* status,
                        constant EighParams& p, P x, P vm, R rot, threadgroup float* scratch,
                        long b, uint tid, uint nthreads) {
  const int n = int(p.n);
  const bool lower = p.lower != 0;
  const bool vectors = p.vectors != 0;
  const long nn = long(n) * n;
  device const T* ab = a + b * nn;
  float amax = 0.0f;
  float bad = 0.0f;
  for (long k = long(tid); k < nn; k += long(nthreads)) {
    const long i = k / n, j = k % n;
    const T value = eigh_read(ab, n, i, j, lower);
    x[k] = value;
    if (vectors) {
      vm[k] = i == j ? one<T>() : zero<T>();
    }
    bad = eigh_finite(value) ? bad : 1.0f;
    amax = metal::max(amax, modulus(value));
  }
  const uint lane = tid % uint(kSimdWidth), sg = tid / uint(kSimdWidth);
  const uint nsg = (nthreads + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  const float any_bad = group_max(bad, scratch, lane, sg, nsg);
  amax = group_max(amax, scratch, lane, sg, nsg);
  device int* st = status + b * kEighStatusInts;
  if (any_bad != 0.0f) {
    for (long k = long(tid); k < nn; k += long(nthreads)) {
      if (vectors) {
        v[b * nn + k] = eigh_from_real<T>(NAN);
      }
      if (k < n) {
        w[b * n + k] = NAN;
      }
    }
    if (tid == 0) {
      st[0] = n;
      st[1] = 0;
    }
    return;
  }
  int e = 0;
  if (amax > 0.0f) {
    metal::frexp(amax, e);
  }
  for (long k = long(tid); k < nn; k += long(nthreads)) {
    x[k] = eigh_ldexp(x[k], -e);
  }
  float rotations = 0.0f;
  const int sweeps = eigh_jacobi_sweeps<T, Batch>(x, vm, rot, scratch, n, vectors,
                                                  kEighMaxSweeps, tid, nthreads, rotations);
  for (int i = int(tid); i < n; i += int(nthreads)) {
    const int rank = eigh_diagonal_rank(x, n, i);
    w[b * n + rank] = metal::ldexp(eigh_real(x[i * n + i]), e);
    if (vectors) {
      for (int row = 0; row < n; ++row) {
        v[b * nn + long(row) * n + rank] = vm[row * n + i];
      }
    }
  }
  if (tid == 0) {
    st[0] = int(rotations);
    st[1] = sweeps;
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Grid: (group width, batch), one threadgroup per matrix; n <= the staging limit (see
// kEighStageBytes). w (batch, n) real, v (batch, n, n) when p.vectors, status (batch, 2).
template <typename T>
[[kernel]] void eigh_group(
    device const T* a [[buffer(0)]],
    device float* w [[buffer(1)]],
    device T* v [[buffer(2)]],
    device int* status [[buffer(3)]],
    constant mpsl::EighParams& p [[buffer(4)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float2 stage[kEighStageBytes / sizeof(float2)];
  threadgroup float rot[kEighGroupMaxPairs * kEighRotFloats];
  threadgroup float scratch[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup T* x = reinterpret_cast<threadgroup T*>(&stage[0]);
  threadgroup T* vm = x + p.n * p.n;
  eigh_jacobi<T, 1>(a, w, v, status, p, x, vm, &rot[0], &scratch[0], long(tgpos.y), tpos.x,
                    tpg.x);
}

// Grid: (group width, batch), one threadgroup per matrix of any order. work holds 2 n^2
// elements per matrix (A and V), rot kEighRotFloats floats per pair per matrix.
template <typename T>
[[kernel]] void eigh_device(
    device const T* a [[buffer(0)]],
    device float* w [[buffer(1)]],
    device T* v [[buffer(2)]],
    device int* status [[buffer(3)]],
    constant mpsl::EighParams& p [[buffer(4)]],
    device T* work [[buffer(5)]],
    device float* rot [[buffer(6)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float scratch[kMaxThreadsPerGroup / kSimdWidth];
  const long b = long(tgpos.y);
  const long nn = p.n * p.n;
  const long pairs = (p.n + 1) / 2;
  device T* x = work + b * 2 * nn;
  eigh_jacobi<T, eigh_device_load_batch<T>()>(a, w, v, status, p, x, x + nn,
                                               rot + b * pairs * kEighRotFloats, &scratch[0], b,
                                               tpos.x, tpg.x);
}
