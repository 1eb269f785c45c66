// Hermitian eigensolver for large matrices: Householder reduction to a real tridiagonal T
// (LAPACK's xHETD2) spread over many threadgroups per matrix, and T's eigenvalues by bisection
// (xSTEBZ); T's eigenvectors come from divide and conquer (eigh_divide.h).
//
// A = Q T Q^H with Q = H(0) ... H(n - 2), H(k) = I - tau_k v_k v_k^H (LAPACK's larfg convention:
// v_k has its unit at row k + 1 and zeros above, beta real, so T's off-diagonal is real even
// for complex A). T = Z diag(w) Z^T with Z real orthogonal, and A's eigenvectors are V = Q Z:
// the host forms them with the QR family's blocked apply-Q (ormqr) on the reflectors this file
// stores. The kernels (the host, mpslinalg/linalg/eigh.py, launches them in this order):
//   eigh_tridiag_load  one threadgroup per matrix: the full Hermitian matrix from the UPLO
//                      triangle into a workspace, multiplied by 2^-e with 2^(e-1) <= max|a_ij|
//                      < 2^e (exact, as eigh.h's Jacobi does), and a flag for non-finite input.
//   eigh_tridiag_step  one launch per column k: A22 <- H(k-1)^H A22 H(k-1) applied to the rows
//                      below k (the rank-2 update of xHER2, deferred from the previous launch)
//                      fused with p = tau_k A22 v_k (xHEMV) on the same rows, so the trailing
//                      matrix is read and written once per column. Every threadgroup forms
//                      the column k it needs (and the reflector v_k) itself from the stale
//                      column and the previous step's vectors: an O(n) prologue that saves a
//                      launch (and a host round of submission) per column.
//   eigh_tridiag_tail  the last columns in one launch, one threadgroup per matrix running the
//                      step's body per column (the trailing matrix is too small there for a
//                      launch per column to pay).
//   eigh_tridiag_bisect  eigvalsh: the eigenvalues of T by bisection, one thread each (xSTEBZ).
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"
#include "../common/simd.h"
#include "eigh.h"

namespace mpsl {

// Arguments of the tridiagonal kernels, passed by the host as one list of int64.
struct TridiagParams {
  long n;        // order of the matrices
  long batch;    // number of matrices
  long step;     // eigh_tridiag_step: the column k being reduced
  long rows;     // eigh_tridiag_step: trailing rows per threadgroup
  long groups;   // threadgroups per matrix that own scratch (eigh_tridiag_step at k = 0)
  long lower;    // 1: the lower triangle of A is read (UPLO='L'), 0: the upper one
  long vectors;  // 1 (eigh): eigh_tridiag_step stores the reflectors
};

// float32's relative machine precision, LAPACK's slamch('E') = 2^-24.
constant constexpr float kTridiagEps = 5.9604645e-8f;
// eigh_tridiag_bisect's bound on the bisection steps of one eigenvalue (its tolerance takes
// about 26 from Gershgorin's interval; float32 has no more than 278 halvings in all).
constant constexpr int kTridiagBisectMaxSteps = 300;
// Threads of an eigh_tridiag_bisect threadgroup (one eigenvalue each).
constant constexpr int kTridiagBisectThreads = 64;
// Entries of each operand a lane of eigh_tridiag_step loads before it stores any.
constant constexpr int kTridiagRowBatch = 4;
// The T-typed entries per matrix of eigh_tridiag_step's vectors: v and p of the two last steps
// (ping-pong by the parity of k: a launch reads k - 1's while writing k's) and their tau.
inline long tridiag_vec_stride(long n) { return 4 * n + 2; }

// ---- the reflector of one column ----

inline float tridiag_imag(float a) { return 0.0f; }
inline float tridiag_imag(float2 a) { return a.y; }

// tau = (beta - alpha) / beta (real beta).
inline float tridiag_tau(float alpha, float beta) { return (beta - alpha) / beta; }
inline float2 tridiag_tau(float2 alpha, float beta) {
  return float2((beta - alpha.x) / beta, -alpha.y / beta);
}

}  // namespace mpsl

// ---- kernels ----

// Grid: (threads * p.groups, batch); threadgroup g copies rows [g p.rows, (g + 1) p.rows) of
// the full Hermitian matrix from the UPLO triangle into x (batch, n, n) and leaves its largest
// modulus and a non-finite flag in part (batch, p.groups, 2). The scaling by 2^-e waits for
// step 0, which folds these partials (no launch waits for a single threadgroup's reduction).
template <typename T>
[[kernel]] void eigh_tridiag_load(
    device const T* a [[buffer(0)]],
    device T* x [[buffer(1)]],
    device float* part [[buffer(2)]],
    constant mpsl::TridiagParams& p [[buffer(3)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float scratch[kMaxThreadsPerGroup / kSimdWidth];
  const int n = int(p.n);
  const bool lower = p.lower != 0;
  const long b = long(tgpos.y), nn = long(n) * n;
  const int g = int(tgpos.x);
  const uint tid = tpos.x, nthreads = tpg.x;
  const uint lane = tid % uint(kSimdWidth), sg = tid / uint(kSimdWidth);
  const uint nsg = (nthreads + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  const long first = long(g) * p.rows * n, last = metal::min(nn, first + p.rows * n);
  float amax = 0.0f, bad = 0.0f;
  for (long k = first + long(tid); k < last; k += long(nthreads)) {
    const T value = eigh_read(a + b * nn, n, k / n, k % n, lower);
    x[b * nn + k] = value;
    bad = eigh_finite(value) ? bad : 1.0f;
    amax = metal::max(amax, modulus(value));
  }
  bad = group_max(bad, scratch, lane, sg, nsg);
  amax = group_max(amax, scratch, lane, sg, nsg);
  if (tid == 0) {
    part[(b * p.groups + g) * 2] = amax;
    part[(b * p.groups + g) * 2 + 1] = bad;
  }
}

// Column k = p.step of every matrix (see the file's comment). Grid: (threads * groups at this
// step, batch); threadgroup g owns the trailing rows [k + 1 + g p.rows, ...). vec holds
// tridiag_vec_stride(n) entries per matrix, scratch 2 n per (matrix, threadgroup) for
// p.groups threadgroups; de receives d[k] and e[k] (2 n floats per matrix: d, then e); refl
// (batch, n - 1, n - 1) and taus (batch, n - 1) the reflectors as geqrf stores them (column k:
// v_k's entries below its unit) when p.vectors. Step 0 also scales: it folds eigh_tridiag_load's
// partials (part) into e, multiplies its rows by 2^-e as it reads them, and threadgroup 0 writes
// flags (batch, 2) = [non-finite input, e].
namespace mpsl {

// Column k of matrix b for the trailing rows [k + 1 + g rows, ...) (see eigh_tridiag_step);
// every thread of the threadgroup calls it (it has barriers).
template <typename T>
inline void tridiag_step(device T* x, device T* vec, device T* scratch, device float* de,
                         device T* refl, device T* taus, device const float* part,
                         device int* flags, constant TridiagParams& p, int k, int rows, long b,
                         int g, uint tid, uint nthreads, threadgroup T* partial,
                         threadgroup float* partf) {
  const int n = int(p.n);
  const long nn = long(n) * n;
  const uint lane = tid % uint(kSimdWidth), sg = tid / uint(kSimdWidth);
  const uint nsg = (nthreads + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  device T* xb = x + b * nn;
  device T* vb = vec + b * tridiag_vec_stride(n);
  const int now = k & 1, before = (k + 1) & 1;
  device T* vprev = vb + before * n;
  device T* pprev = vb + 2 * n + before * n;
  device T* vnew = vb + now * n;
  device T* pnew = vb + 2 * n + now * n;
  device T* mv = scratch + (b * p.groups + g) * 2 * n;  // this threadgroup's v_k
  device T* mw = mv + n;                                // and w of step k - 1
  device float* d = de + b * 2 * n;
  device float* e = d + n;
  const bool pending = k > 0;
  const auto mem = metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup;
  // Step 0: the exponent of the whole matrix from the load's partials (every threadgroup
  // folds them in the same order).
  int expo = 0;
  if (!pending) {
    float amax = 0.0f, bad = 0.0f;
    for (int i = 0; i < int(p.groups); ++i) {
      amax = metal::max(amax, part[(b * p.groups + i) * 2]);
      bad = metal::max(bad, part[(b * p.groups + i) * 2 + 1]);
    }
    if (amax > 0.0f && bad == 0.0f) {
      metal::frexp(amax, expo);
    }
    if (g == 0 && tid == 0) {
      flags[b * 2] = bad != 0.0f ? 1 : 0;
      flags[b * 2 + 1] = expo;
    }
  }
  // w = p + alpha v of step k - 1, alpha = -tau (p^H v) / 2 (xHETD2), on [k, n).
  T wk = zero<T>(), vk = zero<T>();
  if (pending) {
    T dot = zero<T>();
    for (int j = k + int(tid); j < n; j += int(nthreads)) {
      dot += mul(conj(pprev[j]), vprev[j]);
    }
    dot = group_sum(dot, partial, lane, sg, nsg);
    const T alpha = -0.5f * mul(vb[4 * n + before], dot);
    for (int j = k + int(tid); j < n; j += int(nthreads)) {
      mw[j] = pprev[j] + mul(alpha, vprev[j]);
    }
    threadgroup_barrier(mem);
    wk = mw[k];
    vk = vprev[k];
  }
  device T* rowk = xb + long(k) * n;
  const float dk = pending ? eigh_real(rowk[k]) - 2.0f * eigh_real(mul(vk, conj(wk)))
                           : metal::ldexp(eigh_real(rowk[k]), -expo);
  if (k == n - 1) {
    if (g == 0 && tid == 0) {
      d[k] = dk;
      e[k] = 0.0f;
    }
    return;
  }
  // Column k below the diagonal, brought up to date (read as the conjugate of row k, which is
  // contiguous): its sum of squares past the first entry, and that entry (alpha of larfg; one
  // thread holds it, the sum hands it to all).
  float ssq = 0.0f;
  T alpha = zero<T>();
  for (int j = k + 1 + int(tid); j < n; j += int(nthreads)) {
    T c = conj(rowk[j]);
    c = pending ? c - mul(vprev[j], conj(wk)) - mul(mw[j], conj(vk)) : eigh_ldexp(c, -expo);
    mv[j] = c;
    if (j == k + 1) {
      alpha = c;
    } else {
      const float mod = modulus(c);
      ssq += mod * mod;
    }
  }
  ssq = group_sum(ssq, partf, lane, sg, nsg);
  alpha = group_sum(alpha, partial, lane, sg, nsg);
  // larfg: H^H (alpha, x) = (beta, 0), beta real.
  T tau = zero<T>(), scale = zero<T>();
  float beta = eigh_real(alpha);
  if (ssq != 0.0f || tridiag_imag(alpha) != 0.0f) {
    const float mod = modulus(alpha);
    beta = -metal::copysign(metal::sqrt(mod * mod + ssq), eigh_real(alpha));
    tau = tridiag_tau(alpha, beta);
    scale = recip(alpha - eigh_from_real<T>(beta));
  }
  for (int j = k + 1 + int(tid); j < n; j += int(nthreads)) {
    mv[j] = j == k + 1 ? one<T>() : mul(mv[j], scale);
  }
  threadgroup_barrier(mem);
  // The rows of this threadgroup, a simdgroup each: the deferred update of step k - 1 (step 0:
  // the scaling), then p = tau A22 v_k. A lane loads kTridiagRowBatch entries of each operand
  // before it stores any (see tridiag_apply on why by hand).
  const int r0 = k + 1 + g * rows, r1 = metal::min(n, r0 + rows);
  for (int r = r0 + int(sg); r < r1; r += int(nsg)) {
    const T vr = pending ? vprev[r] : zero<T>(), wr = pending ? mw[r] : zero<T>();
    device T* row = xb + long(r) * n;
    T acc = zero<T>();
    for (int j0 = k + 1 + int(lane); j0 < n; j0 += kSimdWidth * kTridiagRowBatch) {
      T a[kTridiagRowBatch], wj[kTridiagRowBatch], vj[kTridiagRowBatch], uj[kTridiagRowBatch];
      for (int u = 0; u < kTridiagRowBatch; ++u) {
        const int j = j0 + u * kSimdWidth;
        if (j < n) {
          a[u] = row[j];
          uj[u] = mv[j];
          if (pending) {
            wj[u] = mw[j];
            vj[u] = vprev[j];
          }
        }
      }
      for (int u = 0; u < kTridiagRowBatch; ++u) {
        const int j = j0 + u * kSimdWidth;
        if (j < n) {
          T value = a[u];
          if (pending) {
            value = value - mul(vr, conj(wj[u])) - mul(wr, conj(vj[u]));
            if (j == r) {
              value = eigh_from_real<T>(eigh_real(value));  // xHER2 keeps the diagonal real
            }
          } else {
            value = eigh_ldexp(value, -expo);
          }
          row[j] = value;
          acc += mul(value, uj[u]);
        }
      }
    }
    acc = simd_sum(acc);
    if (lane == 0) {
      pnew[r] = mul(tau, acc);
    }
  }
  if (g != 0) {
    return;
  }
  const long m1 = long(n) - 1;
  for (int j = k + 1 + int(tid); j < n; j += int(nthreads)) {
    vnew[j] = mv[j];
    if (p.vectors != 0 && j > k + 1) {
      refl[b * m1 * m1 + long(j - 1) * m1 + k] = mv[j];
    }
  }
  if (tid == 0) {
    d[k] = dk;
    e[k] = beta;
    vb[4 * n + now] = tau;
    if (p.vectors != 0) {
      taus[b * m1 + k] = tau;
    }
  }
}

}  // namespace mpsl

template <typename T>
[[kernel]] void eigh_tridiag_step(
    device T* x [[buffer(0)]],
    device T* vec [[buffer(1)]],
    device T* scratch [[buffer(2)]],
    device float* de [[buffer(3)]],
    device T* refl [[buffer(4)]],
    device T* taus [[buffer(5)]],
    device const float* part [[buffer(6)]],
    device int* flags [[buffer(7)]],
    constant mpsl::TridiagParams& p [[buffer(8)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup T partial[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup float partf[kMaxThreadsPerGroup / kSimdWidth];
  tridiag_step<T>(x, vec, scratch, de, refl, taus, part, flags, p, int(p.step), int(p.rows),
                  long(tgpos.y), int(tgpos.x), tpos.x, tpg.x, partial, partf);
}

// The columns k = p.step .. n - 1 of every matrix in one launch, one threadgroup per matrix
// owning every trailing row: eigh_tridiag_step's body once per column with a barrier between,
// where the trailing matrix is small enough that a launch per column would cost more than the
// column's work (arguments as eigh_tridiag_step's). Grid: (threads, batch).
template <typename T>
[[kernel]] void eigh_tridiag_tail(
    device T* x [[buffer(0)]],
    device T* vec [[buffer(1)]],
    device T* scratch [[buffer(2)]],
    device float* de [[buffer(3)]],
    device T* refl [[buffer(4)]],
    device T* taus [[buffer(5)]],
    device const float* part [[buffer(6)]],
    device int* flags [[buffer(7)]],
    constant mpsl::TridiagParams& p [[buffer(8)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup T partial[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup float partf[kMaxThreadsPerGroup / kSimdWidth];
  for (int k = int(p.step); k < int(p.n); ++k) {
    tridiag_step<T>(x, vec, scratch, de, refl, taus, part, flags, p, k, int(p.n), long(tgpos.y),
                    0, tpos.x, tpg.x, partial, partf);
    threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
  }
}

namespace mpsl {

// Eigenvalues of T below x (Sturm count, LAPACK's laebz recurrence): a pivot at or below
// pivmin counts as negative and is replaced by -pivmin, so no division by zero or by a
// denormal happens.
inline int tridiag_count_below(device const float* d, device const float* e, int n, float x,
                               float pivmin) {
  int count = 0;
  float q = d[0] - x;
  for (int j = 0;; ++j) {
    if (q <= pivmin) {
      ++count;
      q = metal::min(q, -pivmin);
    }
    if (j == n - 1) {
      return count;
    }
    q = d[j + 1] - x - e[j] * e[j] / q;
  }
}

}  // namespace mpsl

// eigvalsh's tridiagonal eigenvalues by bisection (LAPACK's xSTEBZ with its default tolerance):
// thread i of a matrix finds eigenvalue i (ascending) alone, in Gershgorin's interval widened as
// xSTEBZ does, until the interval is below max(eps |T|, 2 eps |lambda|); every step one Sturm
// count: n independent searches. Grid: (threads * groups, batch), one thread per eigenvalue.
// de (batch, 2 n: d, then e) and flags (batch, 2: [non-finite input, e]) from
// eigh_tridiag_step; w (batch, n) ascending, multiplied back by 2^e; status (batch,
// kEighStatusInts) = [0, bisection steps of eigenvalue 0] (n, 0 for non-finite input, with NaN
// eigenvalues).
template <typename T>
[[kernel]] void eigh_tridiag_bisect(
    device const float* de [[buffer(0)]],
    device const int* flags [[buffer(1)]],
    device float* w [[buffer(2)]],
    device int* status [[buffer(3)]],
    constant mpsl::TridiagParams& p [[buffer(4)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const int n = int(p.n), i = int(gid.x);
  const long b = long(gid.y);
  if (i >= n) {
    return;
  }
  if (flags[b * 2] != 0) {
    w[b * n + i] = NAN;
    if (i == 0) {
      status[b * kEighStatusInts] = n;
      status[b * kEighStatusInts + 1] = 0;
    }
    return;
  }
  device const float* d = de + b * 2 * n;
  device const float* e = d + n;
  float lo = d[0], hi = d[0], emax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float r = (j > 0 ? metal::fabs(e[j - 1]) : 0.0f) +
                    (j < n - 1 ? metal::fabs(e[j]) : 0.0f);
    lo = metal::min(lo, d[j] - r);
    hi = metal::max(hi, d[j] + r);
    if (j < n - 1) {
      emax = metal::max(emax, metal::fabs(e[j]));
    }
  }
  const float pivmin = kSafeMin * metal::max(1.0f, emax * emax);
  const float tnorm = metal::max(metal::fabs(lo), metal::fabs(hi));
  const float widen = 2.1f * kTridiagEps * tnorm * float(n) + 4.2f * pivmin;
  lo -= widen;
  hi += widen;
  const float atol = kTridiagEps * tnorm;
  int steps = 0;
  for (; steps < kTridiagBisectMaxSteps; ++steps) {
    const float width = hi - lo;
    if (width <= metal::max(metal::max(atol, pivmin),
                            2.0f * kTridiagEps * metal::max(metal::fabs(lo), metal::fabs(hi)))) {
      break;
    }
    const float mid = 0.5f * (lo + hi);
    if (mid <= lo || mid >= hi) {
      break;  // no float between them
    }
    if (tridiag_count_below(d, e, n, mid, pivmin) <= i) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  w[b * n + i] = metal::ldexp(0.5f * (lo + hi), flags[b * 2 + 1]);
  if (i == 0) {
    status[b * kEighStatusInts] = 0;
    status[b * kEighStatusInts + 1] = steps;
  }
}
