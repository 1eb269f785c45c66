// Symmetric-indefinite LDL^T factorization with Bunch-Kaufman pivoting (LAPACK sytf2 / hetf2,
// UPLO = 'L') and the solve with its factors (sytrs / hetrs).
//
// A = P1 L1 P2 L2 ... D ... L2^T P2^T L1^T P1^T (^H for the Hermitian variant), with D block
// diagonal (1 x 1 and 2 x 2 blocks) and each Lk unit lower triangular, written over the lower
// triangle of A as LAPACK does: D's blocks on the diagonal (a 2 x 2 block's off-diagonal entry
// below it), the multipliers below them. Pivots are LAPACK's, 1-based: p > 0 is a 1 x 1 block
// whose row and column were interchanged with p; p = pivots[k] = pivots[k + 1] < 0 a 2 x 2 block
// at (k, k + 1) whose second row and column were interchanged with -p. Only the lower triangle
// of A is read; the upper triangle of the result is zero (as torch returns it).
//
// The pivot choice is Bunch and Kaufman's ("Some stable methods for calculating inertia and
// solving symmetric linear systems", Math. Comp. 31, 1977) exactly as sytf2 makes it, with
// alpha = (1 + sqrt(17)) / 8 and magnitudes |re| + |im| (LAPACK's cabs1 / icamax; the real part
// alone for a Hermitian diagonal), ties to the lowest row, so the pivots are LAPACK's. A column
// that is zero (or whose diagonal is NaN) is skipped and reported in info, the first such
// column 1-based, as sytf2 does: the factorization completes and D(k, k) is exactly zero.
// The complex symmetric variant (sytrf) uses no conjugation; the Hermitian one (hetrf) keeps D's
// diagonal real and ignores the imaginary part of A's diagonal.
//
// Kernels:
//   ldl_factor_group<T>   one threadgroup per matrix, the matrix staged in threadgroup memory
//                         (n^2 elements in kLdlStageBytes);
//   ldl_factor_device<T>  the same on the result buffer in device memory, for larger matrices;
//   ldl_solve<T>          one thread per right-hand side column (sytrs / hetrs), no barriers.
//
// Each step of the factorization: the pivot searches (group_argmax over column k, group_max
// over row and column imax when the diagonal is small), the interchange, then the update in two
// phases separated by a barrier: (1) each row's old multipliers are parked in the (unused, never
// read) upper triangle, row k (and k + 1), and the new ones written to column k (and k + 1);
// (2) every entry of the trailing lower triangle is updated by one thread, as
// a_ij - x_ik conj?(l_jk) [- x_i,k+1 conj?(l_j,k+1)], the operations of syr / the rank-2 loop of
// sytf2 in their order. The upper triangle is zeroed at the end. Every result element is written
// by one thread in a fixed order, so results do not depend on lane order or thread count.
#pragma once

#include "../common/defines.h"
#include "../common/pivots.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Bunch-Kaufman's alpha = (1 + sqrt(17)) / 8: it bounds the element growth of both pivot kinds
// equally.
constant constexpr float kLdlAlpha = 0.640388203f;
// Threadgroup memory of ldl_factor_group's staged matrix: n <= 89 in float32, 62 in complex64
// (the rest holds the reductions' partials).
constant constexpr int kLdlStageBytes = 31744;
// Simdgroups a threadgroup can hold: sizes the reductions' partials.
constant constexpr int kLdlMaxSimdgroups = kMaxThreadsPerGroup / kSimdWidth;
// Pivot search: the row of a thread without a candidate (loses every tie) and its key (below
// NaN's key -1 and every magnitude).
constant constexpr int kLdlNoRow = 0x7fffffff;
constant constexpr float kLdlNoKey = -2.0f;

static_assert(kLdlStageBytes + kLdlMaxSimdgroups * (sizeof(KeyIndex) + sizeof(float)) <=
                  kMaxThreadgroupMemoryBytes,
              "ldl_factor_group's threadgroup memory must fit");

// Scalars of ldl_factor_group / ldl_factor_device.
struct LdlParams {
  long n;          // order of the matrices
  long hermitian;  // 1: hetrf (complex Hermitian), 0: sytrf (real, or complex symmetric)
};

// Scalars of ldl_solve.
struct LdlSolveParams {
  long n;          // order of the matrices
  long nrhs;       // right-hand side columns (row stride of B)
  long hermitian;  // 1: hetrs, 0: sytrs
};

// ---- element helpers (real: the Hermitian flag changes nothing) ----

// Conjugate for the Hermitian variant, the value itself for the symmetric ones.
inline float ldl_cj(float x, bool herm) { return x; }
inline float2 ldl_cj(float2 x, bool herm) { return herm ? conj(x) : x; }

// A diagonal entry as the variant reads it: the real part alone for the Hermitian one.
inline float ldl_diag(float x, bool herm) { return x; }
inline float2 ldl_diag(float2 x, bool herm) { return herm ? float2(x.x, 0.0f) : x; }

inline float ldl_re(float x) { return x; }
inline float ldl_re(float2 x) { return x.x; }

// Magnitude of a diagonal entry in the pivot tests: |re| + |im|, or |re| (Hermitian).
inline float ldl_diag_abs(float x, bool herm) { return metal::fabs(x); }
inline float ldl_diag_abs(float2 x, bool herm) { return herm ? metal::fabs(x.x) : abs1(x); }

// Pivot search key: abs1, NaN ranked below every number (never chosen over one).
template <typename T>
inline float ldl_key(T x) {
  const float v = abs1(x);
  return metal::isnan(v) ? -1.0f : v;
}

// Scale by a real factor (the Hermitian 1 x 1 block's 1 / d, zdscal).
inline float ldl_scale(float x, float s) { return x * s; }
inline float2 ldl_scale(float2 x, float s) { return x * s; }

// New multipliers (w_k, w_k+1) of row j from its old entries (x0, x1) for a 2 x 2 block: sytf2's
// D21 (d11 d22 - 1)^-1 / D21 form, or hetf2's with the block scaled by |D21|.
struct LdlBlock2 {
  float2 d21;  // sytf2: t / D21; hetf2: D21 / |D21| (float: .x only)
  float2 d11;  // sytf2: A(k+1,k+1) / D21; hetf2: re A(k+1,k+1) / |D21| (in .x)
  float2 d22;  // sytf2: A(k,k) / D21; hetf2: re A(k,k) / |D21| (in .x)
  float d;     // hetf2: (d11 d22 - 1)^-1 / |D21|
};

inline LdlBlock2 ldl_block2(float a00, float e, float a11, bool herm) {
  const float d11 = a11 / e, d22 = a00 / e;
  const float t = 1.0f / (d11 * d22 - 1.0f);
  return LdlBlock2{float2(t / e, 0.0f), float2(d11, 0.0f), float2(d22, 0.0f), 0.0f};
}

inline LdlBlock2 ldl_block2(float2 a00, float2 e, float2 a11, bool herm) {
  if (herm) {
    const float r = modulus(e);
    const float d11 = a11.x / r, d22 = a00.x / r;
    const float tt = 1.0f / (d11 * d22 - 1.0f);
    return LdlBlock2{e / r, float2(d11, 0.0f), float2(d22, 0.0f), tt / r};
  }
  const float2 d11 = div(a11, e), d22 = div(a00, e);
  const float2 t = recip(mul(d11, d22) - one<float2>());
  return LdlBlock2{div(t, e), d11, d22, 0.0f};
}

inline void ldl_block2_row(LdlBlock2 b, float x0, float x1, bool herm, thread float& w0,
                           thread float& w1) {
  w0 = b.d21.x * (b.d11.x * x0 - x1);
  w1 = b.d21.x * (b.d22.x * x1 - x0);
}

inline void ldl_block2_row(LdlBlock2 b, float2 x0, float2 x1, bool herm, thread float2& w0,
                           thread float2& w1) {
  if (herm) {
    w0 = b.d * (b.d11.x * x0 - mul(b.d21, x1));
    w1 = b.d * (b.d22.x * x1 - mul(conj(b.d21), x0));
  } else {
    w0 = mul(b.d21, mul(b.d11, x0) - x1);
    w1 = mul(b.d21, mul(b.d22, x1) - x0);
  }
}

// ---- the factorization of one matrix by one threadgroup ----

// sytf2 / hetf2 of the n x n row-major matrix at a (threadgroup or device memory: P is the
// pointer type) whose lower triangle holds A and whose upper triangle is free scratch; writes
// the 1-based pivots and returns info (the same in every thread). The whole threadgroup calls
// it; nthreads is a multiple of kSimdWidth. Barriers order both memories (one body serves both).
template <typename T, typename P>
inline int ldl_factor_matrix(P a, long n, bool herm, device int* piv,
                             threadgroup KeyIndex* kpart, threadgroup float* fpart, uint tid,
                             uint nthreads, uint lane, uint sg, uint nsg) {
  const metal::mem_flags both = metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;
  const long rows = long(nthreads) / kSimdWidth;  // row groups of the trailing update
  int info = 0;
  long k = 0;
  while (k < n) {  // k grows by 1 or 2 per step
    // The pivot searches read values written before the previous step's last barrier.
    const float absakk = ldl_diag_abs(a[k * n + k], herm);
    float key = kLdlNoKey;
    int row = kLdlNoRow;
    for (long i = k + 1 + long(tid); i < n; i += long(nthreads)) {
      const float v = ldl_key(a[i * n + k]);
      if (v > key) {
        key = v;
        row = int(i);
      }
    }
    const KeyIndex at = group_argmax(KeyIndex{key, row}, KeyIndex{kLdlNoKey, kLdlNoRow}, kpart,
                                     lane, sg, nsg, both);
    const long imax = k + 1 < n ? long(at.index) : k;
    const float colmax = k + 1 < n ? abs1(a[imax * n + k]) : 0.0f;

    // Every thread takes the same decisions from the same values.
    long kp = k;
    int kstep = 1;
    const bool skip = metal::max(absakk, colmax) == 0.0f || metal::isnan(absakk);
    if (skip) {
      if (info == 0) {
        info = int(k + 1);
      }
    } else if (!(absakk >= kLdlAlpha * colmax)) {
      float r = 0.0f;
      for (long j = k + long(tid); j < imax; j += long(nthreads)) {
        r = metal::max(r, abs1(a[imax * n + j]));
      }
      for (long i = imax + 1 + long(tid); i < n; i += long(nthreads)) {
        r = metal::max(r, abs1(a[i * n + imax]));
      }
      const float rowmax = group_max(r, fpart, lane, sg, nsg, both);
      if (absakk >= kLdlAlpha * colmax * (colmax / rowmax)) {
        kp = k;
      } else if (ldl_diag_abs(a[imax * n + imax], herm) >= kLdlAlpha * rowmax) {
        kp = imax;
      } else {
        kp = imax;
        kstep = 2;
      }
    }
    const long kk = k + kstep - 1;
    // The decision above read entries the interchange and the fixes below write.
    threadgroup_barrier(both);

    // Interchange rows and columns kk and kp of the trailing matrix (k <= kk < kp).
    if (kp != kk) {
      for (long i = kp + 1 + long(tid); i < n; i += long(nthreads)) {
        const T x = a[i * n + kk];
        a[i * n + kk] = a[i * n + kp];
        a[i * n + kp] = x;
      }
      for (long j = kk + 1 + long(tid); j < kp; j += long(nthreads)) {
        const T x = a[j * n + kk];
        a[j * n + kk] = ldl_cj(a[kp * n + j], herm);
        a[kp * n + j] = ldl_cj(x, herm);
      }
    }
    if (tid == 0) {
      if (kp != kk) {
        a[kp * n + kk] = ldl_cj(a[kp * n + kk], herm);
        const T x = a[kk * n + kk];
        a[kk * n + kk] = ldl_diag(a[kp * n + kp], herm);
        a[kp * n + kp] = ldl_diag(x, herm);
        if (kstep == 2) {
          const T y = a[(k + 1) * n + k];
          a[(k + 1) * n + k] = a[kp * n + k];
          a[kp * n + k] = y;
        }
      }
      a[k * n + k] = ldl_diag(a[k * n + k], herm);
      if (kstep == 2) {
        a[(k + 1) * n + k + 1] = ldl_diag(a[(k + 1) * n + k + 1], herm);
        piv[k] = -int(kp + 1);
        piv[k + 1] = -int(kp + 1);
      } else {
        piv[k] = int(kp + 1);
      }
    }
    threadgroup_barrier(both);

    const long s = k + kstep;  // first trailing row and column
    if (!skip && s < n) {
      // Phase 1: park the old column(s) in the upper triangle, write the multipliers.
      if (kstep == 1) {
        const T d = a[k * n + k];
        const float r1 = 1.0f / ldl_re(d);
        const T d11 = recip(d);
        for (long j = s + long(tid); j < n; j += long(nthreads)) {
          const T x = a[j * n + k];
          a[k * n + j] = x;
          a[j * n + k] = herm ? ldl_scale(x, r1) : mul(d11, x);
        }
      } else {
        const LdlBlock2 blk = ldl_block2(a[k * n + k], a[(k + 1) * n + k],
                                         a[(k + 1) * n + k + 1], herm);
        for (long j = s + long(tid); j < n; j += long(nthreads)) {
          const T x0 = a[j * n + k], x1 = a[j * n + k + 1];
          a[k * n + j] = x0;
          a[(k + 1) * n + j] = x1;
          T w0, w1;
          ldl_block2_row(blk, x0, x1, herm, w0, w1);
          a[j * n + k] = w0;
          a[j * n + k + 1] = w1;
        }
      }
      threadgroup_barrier(both);
      // Phase 2: the trailing lower triangle, rows over the simdgroups, columns over the lanes.
      for (long i = s + long(sg); i < n; i += rows) {
        const T x0 = a[k * n + i];
        const T x1 = kstep == 2 ? a[(k + 1) * n + i] : zero<T>();
        for (long j = s + long(lane); j <= i; j += kSimdWidth) {
          T v = sub_mul(a[i * n + j], x0, ldl_cj(a[j * n + k], herm));
          if (kstep == 2) {
            v = sub_mul(v, x1, ldl_cj(a[j * n + k + 1], herm));
          }
          a[i * n + j] = i == j ? ldl_diag(v, herm) : v;
        }
      }
    }
    // The next step's searches read the updated entries.
    threadgroup_barrier(both);
    k += kstep;
  }
  return info;
}

// The lower triangle of the staged result at x written to out (row-major, n x n), zeros above.
template <typename T, typename P>
inline void ldl_store_lower(P x, device T* out, long n, uint tid, uint nthreads) {
  for (long e = long(tid); e < n * n; e += long(nthreads)) {
    const long i = e / n, j = e - (e / n) * n;
    out[e] = j <= i ? x[e] : zero<T>();
  }
}

// ---- the solve of one right-hand side column ----

// x (n entries, stride apart) <- A^-1 x with A = L D L^T given by the factors at l and the pivots
// (sytrs / hetrs, UPLO = 'L'). Pivots are clamped into the rows each step may touch, so corrupt
// pivots never index out of bounds.
template <typename T>
inline void ldl_solve_column(device const T* l, device const int* piv, device T* x, long n,
                             long stride, bool herm) {
  // L D y = b: forward, interchanges interleaved with the block eliminations.
  long k = 0;
  while (k < n) {
    const int p = piv[k];
    if (p > 0 || k + 1 == n) {
      const long kp = clamp_row(long(p > 0 ? p : -p) - 1, k, n - 1);
      const T t = x[kp * stride];
      x[kp * stride] = x[k * stride];
      x[k * stride] = t;
      for (long i = k + 1; i < n; ++i) {
        x[i * stride] = sub_mul(x[i * stride], l[i * n + k], t);
      }
      const T d = l[k * n + k];
      x[k * stride] = herm ? ldl_scale(t, 1.0f / ldl_re(d)) : mul(t, recip(d));
      k += 1;
    } else {
      const long kp = clamp_row(long(-p) - 1, k + 1, n - 1);
      const T t = x[kp * stride];
      x[kp * stride] = x[(k + 1) * stride];
      x[(k + 1) * stride] = t;
      const T x0 = x[k * stride], x1 = t;
      for (long i = k + 2; i < n; ++i) {
        x[i * stride] = sub_mul(sub_mul(x[i * stride], l[i * n + k], x0), l[i * n + k + 1], x1);
      }
      const T e = l[(k + 1) * n + k];
      const T ec = ldl_cj(e, herm);
      const T akm1 = div(l[k * n + k], ec), ak = div(l[(k + 1) * n + k + 1], e);
      const T denom = mul(akm1, ak) - one<T>();
      const T bkm1 = div(x0, ec), bk = div(x1, e);
      x[k * stride] = div(mul(ak, bkm1) - bk, denom);
      x[(k + 1) * stride] = div(mul(akm1, bk) - bkm1, denom);
      k += 2;
    }
  }
  // L^T x = y (L^H for hetrs): backward, undoing the interchanges.
  k = n - 1;
  while (k >= 0) {
    const int p = piv[k];
    const bool pair = p < 0 && k > 0;
    for (long c = pair ? k - 1 : k; c <= k; ++c) {
      T acc = zero<T>();
      for (long i = k + 1; i < n; ++i) {
        acc += mul(ldl_cj(l[i * n + c], herm), x[i * stride]);
      }
      x[c * stride] -= acc;
    }
    const long kp = clamp_row(long(p > 0 ? p : -p) - 1, k, n - 1);
    const T t = x[kp * stride];
    x[kp * stride] = x[k * stride];
    x[k * stride] = t;
    k -= pair ? 2 : 1;
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Grid: (threads, batch), one threadgroup per matrix, threads a multiple of kSimdWidth;
// n^2 elements fit in kLdlStageBytes. a, ld (batch, n, n), pivots (batch, n), info (batch).
template <typename T>
[[kernel]] void ldl_factor_group(
    device const T* a [[buffer(0)]],
    device T* ld [[buffer(1)]],
    device int* pivots [[buffer(2)]],
    device int* info [[buffer(3)]],
    constant mpsl::LdlParams& p [[buffer(4)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float2 stage[kLdlStageBytes / sizeof(float2)];
  threadgroup KeyIndex kpart[kLdlMaxSimdgroups];
  threadgroup float fpart[kLdlMaxSimdgroups];
  threadgroup T* x = reinterpret_cast<threadgroup T*>(&stage[0]);
  const long n = p.n, b = long(group.y);
  const long nn = n * n;
  for (long e = long(tid); e < nn; e += long(tpg.x)) {
    const long i = e / n, j = e - (e / n) * n;
    x[e] = j <= i ? a[b * nn + e] : zero<T>();
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  const int status = ldl_factor_matrix<T>(x, n, p.hermitian != 0, pivots + b * n, &kpart[0],
                                          &fpart[0], tid, tpg.x, lane, sg, nsg);
  ldl_store_lower(x, ld + b * nn, n, tid, tpg.x);
  if (tid == 0) {
    info[b] = status;
  }
}

// Grid: (threads, batch), one threadgroup per matrix of any order, factored in place in ld.
template <typename T>
[[kernel]] void ldl_factor_device(
    device const T* a [[buffer(0)]],
    device T* ld [[buffer(1)]],
    device int* pivots [[buffer(2)]],
    device int* info [[buffer(3)]],
    constant mpsl::LdlParams& p [[buffer(4)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup KeyIndex kpart[kLdlMaxSimdgroups];
  threadgroup float fpart[kLdlMaxSimdgroups];
  const long n = p.n, b = long(group.y);
  const long nn = n * n;
  device T* x = ld + b * nn;
  // The upper triangle of A is never read: it becomes the scratch of the update.
  ldl_store_lower(a + b * nn, x, n, tid, tpg.x);
  threadgroup_barrier(metal::mem_flags::mem_device);
  const int status = ldl_factor_matrix<T>(x, n, p.hermitian != 0, pivots + b * n, &kpart[0],
                                          &fpart[0], tid, tpg.x, lane, sg, nsg);
  for (long e = long(tid); e < nn; e += long(tpg.x)) {
    const long i = e / n, j = e - (e / n) * n;
    if (j > i) {
      x[e] = zero<T>();
    }
  }
  if (tid == 0) {
    info[b] = status;
  }
}

// Grid: (nrhs, batch), one thread per right-hand side column. ld (batch, n, n), pivots
// (batch, n), b (batch, n, nrhs) overwritten with the solution.
template <typename T>
[[kernel]] void ldl_solve(
    device const T* ld [[buffer(0)]],
    device const int* pivots [[buffer(1)]],
    device T* b [[buffer(2)]],
    constant mpsl::LdlSolveParams& p [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long n = p.n, nrhs = p.nrhs, c = long(gid.x), batch = long(gid.y);
  if (c >= nrhs) {
    return;
  }
  ldl_solve_column(ld + batch * n * n, pivots + batch * n, b + batch * n * nrhs + c, n, nrhs,
                   p.hermitian != 0);
}
