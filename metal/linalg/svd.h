// One-sided Jacobi SVD (Hestenes 1958; Demmel and Veselic 1992, "Jacobi's method is more
// accurate than QR", SIAM J. Matrix Anal. Appl. 13(4)): columns x = W[:, p], y = W[:, q] of the
// working matrix are rotated until every pair is orthogonal to working precision; then the
// singular values are the column norms, U the normalised columns and V the product of the
// rotations. A^H A is never formed, so the condition number is not squared.
//
// Robustness:
// - the matrix is first scaled by a power of two (exact) so that max|a_ij| lies in [0.5, 1)
//   (LAPACK's xGESVD scales only when max|a_ij| leaves [SMLNUM, BIGNUM]; a float32 Jacobi needs
//   the tighter range because it forms squared norms); sigma is scaled back by the same power;
// - every pair's norms and cosine are computed from the columns divided by their own largest
//   entry, so that neither tiny nor huge columns under- or overflow their squares;
// - non-finite input gives NaN outputs and info = kSvdNonFinite at once, before any sweep;
// - at most kSvdMaxSweeps sweeps (LAPACK xGESVJ's NSWEEP); info is the number of sweeps run (the
//   last one applied no rotation), or kSvdNotConverged;
// - columns of U whose singular value is too small to normalise (zero, or below kSvdTinyNorm of
//   the scaled matrix) are completed to an orthonormal set by Gram-Schmidt (twice) from the
//   coordinate vector least represented in the columns already set, so U^H U = I also for
//   rank-deficient input.
//
// Kernels:
// - svd_jacobi: square n x n matrices (the host reduces tall and wide ones to their triangular
//   QR factor), one threadgroup per matrix, the working matrix and V column-major in device
//   memory; one simdgroup rotates one pair, the pairs of a step in parallel in the round-robin
//   ("circle") ordering (Brent and Luk 1985), which meets every pair once per sweep of
//   n' - 1 steps (n' = n rounded up to even).
// - svd_small_<dtype>_m<m>_n<n>: matrices with m, n <= kSvdSmallMax, one matrix per thread in
//   registers (the batched 3 x 3 camera case), generated from the n <= 4 description of
//   mpslinalg/small/codegen.py into svd_small.h (its own robustness rules: the matrix divided
//   by max |a_ij|, a scale-invariant eps test, at most 12 sweeps, the same info values); wide
//   matrices through their conjugate transpose; U completed to m x m when full_matrices.
#pragma once

#include "../common/defines.h"
#include "../common/jacobi.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// LAPACK xGESVJ's bound on the number of sweeps.
constant constexpr int kSvdMaxSweeps = 30;
// info values other than a sweep count.
constant constexpr int kSvdNotConverged = -1;
constant constexpr int kSvdNonFinite = -2;
// A pair is rotated when |x^H y| / (|x| |y|) exceeds kSvdTolFactor * sqrt(rows) * eps (xGESVJ's
// CTOL = sqrt(M) when U is wanted): |U^H U - I| stays O(n eps) rather than O(n^2 eps).
constant constexpr float kSvdTolFactor = 1.0f;
constant constexpr float kSvdEps = 1.1920929e-7f;  // FLT_EPSILON
// Below this norm (of the matrix scaled to max|a_ij| in [0.5, 1)) a column's entries may be
// subnormal and its direction inaccurate: its U column is completed instead of normalised. Its
// contribution to A is below eps * |A| anyway.
constant constexpr float kSvdTinyNorm = kSafeMin / kSvdEps;
// IEEE float32 layout, for exact powers of two: 2^k = bits (k + bias) << mantissa bits for k in
// [kSvdMinExp, kSvdMaxExp]; exponents of the scaling stay within twice that range.
constant constexpr int kSvdFloatBias = 127;
constant constexpr int kSvdFloatMantissaBits = 23;
constant constexpr uint kSvdFloatExpMask = 0xffu;
constant constexpr int kSvdMinExp = -126;
constant constexpr int kSvdMaxExp = 127;
constant constexpr int kSvdSubnormalShift = 64;
// svd_jacobi: at most this many simdgroups per threadgroup (one pair each at a time).
constant constexpr int kSvdMaxSimdgroups = 32;
static_assert(kSvdMaxSimdgroups * kSimdWidth <= kMaxThreadsPerGroup,
              "svd_jacobi's simdgroups must fit one threadgroup");
// svd_jacobi keeps W and V in threadgroup memory when 2 n^2 elements fit in this many bytes
// (n <= 63 for float32, n <= 45 for complex64), in the device workspace otherwise.
constant constexpr int kSvdStageBytes = kMaxThreadgroupMemoryBytes - kSvdMaxSimdgroups * 4;
template <typename T>
constexpr int svd_stage_elems() {
  return kSvdStageBytes / int(sizeof(T));
}
// Rows of a column pair that a lane loads before it stores any (svd_rotate_column_pair): the
// compiler may not move a load above a store that might alias it, so a row at a time waits for
// memory once per row. The rows are independent, so the values do not depend on it.
constant constexpr int kSvdLoadBatch = 4;
// svd_small serves matrices with m and n at most this.
constant constexpr int kSvdSmallMax = 4;

// ---- shared pieces ----

// max(|re|, |im|): the entry scale used for norms (any norm-equivalent measure serves).
inline float svd_absmax(float a) { return metal::fabs(a); }
inline float svd_absmax(float2 a) { return metal::max(metal::fabs(a.x), metal::fabs(a.y)); }

inline bool svd_finite(float a) { return metal::isfinite(a); }
inline bool svd_finite(float2 a) { return metal::isfinite(a.x) && metal::isfinite(a.y); }

inline float svd_abs2(float a) { return a * a; }
inline float svd_abs2(float2 a) { return a.x * a.x + a.y * a.y; }

// 2^k for k in [kSvdMinExp, kSvdMaxExp], built from its bits (exact; ldexp and frexp are not
// available to every executor of these sources).
inline float svd_pow2(int k) {
  return as_type<float>(uint(k + kSvdFloatBias) << kSvdFloatMantissaBits);
}

// a * 2^e, exactly unless the result (or, for entries below eps times the largest, the
// intermediate product) leaves the normal range; |e| <= 2 kSvdMaxExp, in two factors.
inline float svd_ldexp(float a, int e) {
  const int half = e / 2;
  return a * svd_pow2(half) * svd_pow2(e - half);
}
inline float2 svd_ldexp(float2 a, int e) { return float2(svd_ldexp(a.x, e), svd_ldexp(a.y, e)); }

inline float svd_real(float a) { return a; }
inline float svd_real(float2 a) { return a.x; }

inline float svd_nan(float) { return NAN; }
inline float2 svd_nan(float2) { return float2(NAN, NAN); }

// The exponent e with max|a_ij| * 2^-e in [0.5, 1) (0 for a zero matrix), from the bits of
// max|a_ij| (a subnormal one first scaled up by 2^kSvdSubnormalShift).
inline int svd_scale_exponent(float anrm) {
  if (!(anrm > 0.0f)) {
    return 0;
  }
  int shift = 0;
  if (anrm < kSafeMin) {
    anrm *= svd_pow2(kSvdSubnormalShift);
    shift = kSvdSubnormalShift;
  }
  const uint biased = (as_type<uint>(anrm) >> kSvdFloatMantissaBits) & kSvdFloatExpMask;
  return int(biased) - (kSvdFloatBias - 1) - shift;
}

inline float svd_tolerance(long rows) { return kSvdTolFactor * metal::sqrt(float(rows)) * kSvdEps; }

// The rotation that makes columns x, y orthogonal, given their norms nx, ny > 0 and the cosine
// c = x^H y / (nx ny): the Gram matrix [[nx^2, x^H y], [conj, ny^2]] divided by nx ny has the
// same eigenvectors, and its entries cannot overflow for columns of any relative size.
template <typename T>
inline JacobiRotation<T> svd_pair_rotation(float nx, float ny, T c) {
  return jacobi_rotation(nx / ny, ny / nx, c);
}

// ---- svd_jacobi: one threadgroup per square matrix ----

// Norm of the column x[0 .. n) from its entries divided by its largest one (rows strided over
// the simdgroup's lanes; every lane gets the result).
template <typename T, typename P>
inline float svd_column_norm(P x, long n, uint lane) {
  float mx = 0.0f;
  for (long i = lane; i < n; i += kSimdWidth) {
    mx = metal::max(mx, svd_absmax(x[i]));
  }
  mx = metal::simd_max(mx);
  if (mx == 0.0f) {
    return 0.0f;
  }
  float ss = 0.0f;
  for (long i = lane; i < n; i += kSimdWidth) {
    ss += svd_abs2(x[i] / mx);
  }
  return mx * metal::sqrt(metal::simd_sum(ss));
}

// [x, y] <- [x, y] J for the columns x, y of length n (rows strided over the simdgroup's lanes),
// kSvdLoadBatch rows of a lane loaded before their stores.
template <typename T, typename P>
inline void svd_rotate_column_pair(P x, P y, long n, JacobiRotation<T> rot, uint lane) {
  for (long i0 = lane; i0 < n; i0 += kSvdLoadBatch * kSimdWidth) {
    T xs[kSvdLoadBatch], ys[kSvdLoadBatch];
    for (int u = 0; u < kSvdLoadBatch; ++u) {
      const long i = i0 + u * kSimdWidth;
      xs[u] = i < n ? x[i] : zero<T>();
      ys[u] = i < n ? y[i] : zero<T>();
    }
    for (int u = 0; u < kSvdLoadBatch; ++u) {
      const long i = i0 + u * kSimdWidth;
      if (i < n) {
        rotate_pair(xs[u], ys[u], rot);
        x[i] = xs[u];
        y[i] = ys[u];
      }
    }
  }
}

// Rotates columns p and q of W (and of V when `vectors`) if they are not yet orthogonal;
// returns whether it did. One simdgroup; W, V column-major n x n in device or threadgroup
// memory (P is the pointer type).
template <typename T, typename P>
inline bool svd_rotate_columns(P w, P v, long n, long p, long q, bool vectors, float tol,
                               uint lane) {
  P x = w + p * n;
  P y = w + q * n;
  float mx = 0.0f, my = 0.0f;
  for (long i = lane; i < n; i += kSimdWidth) {
    mx = metal::max(mx, svd_absmax(x[i]));
    my = metal::max(my, svd_absmax(y[i]));
  }
  mx = metal::simd_max(mx);
  my = metal::simd_max(my);
  if (mx == 0.0f || my == 0.0f) {
    return false;
  }
  float sxx = 0.0f, syy = 0.0f;
  T sxy = zero<T>();
  for (long i = lane; i < n; i += kSimdWidth) {
    const T xs = x[i] / mx, ys = y[i] / my;
    sxx += svd_abs2(xs);
    syy += svd_abs2(ys);
    sxy += mul(conj(xs), ys);
  }
  sxx = metal::simd_sum(sxx);
  syy = metal::simd_sum(syy);
  sxy = simd_sum(sxy);
  const float rx = metal::sqrt(sxx), ry = metal::sqrt(syy);
  const T c = sxy / (rx * ry);
  if (!(modulus(c) > tol)) {
    return false;
  }
  const JacobiRotation<T> rot = svd_pair_rotation(mx * rx, my * ry, c);
  if (rot.t == 0.0f) {
    return false;  // the columns differ so much in size that the rotation rounds to I
  }
  svd_rotate_column_pair(x, y, n, rot, lane);
  if (vectors) {
    svd_rotate_column_pair(v + p * n, v + q * n, n, rot, lane);
  }
  return true;
}

// Column j of the converged W (its norm nj, its rank r by decreasing norm) and of V, at wj and
// vj, as singular value r, column r of U (normalised, or zero for completion when nj < tiny)
// and row r of Vh; rows strided over the calling threads (first, first + stride, ...).
template <typename T, typename P>
inline void svd_output_column(P wj, P vj, device T* ub, device float* sb, device T* vhb, long n,
                              long r, float nj, int ex, bool vectors, float tiny, uint first,
                              uint stride) {
  if (first == 0) {
    sb[r] = svd_ldexp(nj, ex);
  }
  if (vectors) {
    const bool normalise = nj >= tiny;
    const float inv = normalise ? 1.0f / nj : 0.0f;
    for (long i = first; i < n; i += stride) {
      ub[i * n + r] = normalise ? inv * wj[i] : zero<T>();
      vhb[r * n + i] = conj(vj[i]);
    }
  }
}

// max|a_ij| of the nn entries at ab, and in `bad` whether one is NaN or Inf (every thread of
// the group gets both).
template <typename T>
inline float svd_scan(device const T* ab, long nn, thread bool& bad, threadgroup float* part,
                      uint tid, uint nthreads, uint lane, uint sg, uint nsg) {
  float anrm = 0.0f, nonfinite = 0.0f;
  for (long e = tid; e < nn; e += nthreads) {
    const T x = ab[e];
    if (svd_finite(x)) {
      anrm = metal::max(anrm, svd_absmax(x));
    } else {
      nonfinite = 1.0f;
    }
  }
  anrm = group_max(anrm, part, lane, sg, nsg);
  bad = group_max(nonfinite, part, lane, sg, nsg) != 0.0f;
  return anrm;
}

// The outputs of a matrix with a NaN or Inf: S, U and Vh NaN, info kSvdNonFinite.
template <typename T>
inline void svd_write_nonfinite(device float* sb, device T* ub, device T* vhb, device int* info,
                                long n, bool vectors, uint tid, uint nthreads) {
  for (long e = tid; e < n; e += nthreads) {
    sb[e] = NAN;
  }
  if (vectors) {
    for (long e = tid; e < n * n; e += nthreads) {
      ub[e] = svd_nan(T());
      vhb[e] = svd_nan(T());
    }
  }
  if (tid == 0) {
    info[0] = kSvdNonFinite;
  }
}

// Whether column k (norm sk) comes before column j (norm sj) in the order of decreasing norm
// (stable: the lower index first on ties).
inline bool svd_before(float sk, long k, float sj, long j) {
  return sk > sj || (sk == sj && k < j);
}

// Position of column j when the columns are sorted by decreasing norm (stable): the count over
// columns first, first + stride, ... (the caller sums the strided parts; 0, 1 counts them all).
inline long svd_rank(device const float* norms, long n, long j, long first = 0,
                     long stride = 1) {
  const float sj = norms[j];
  long r = 0;
  for (long k = first; k < n; k += stride) {
    r += svd_before(norms[k], k, sj, j) ? 1 : 0;
  }
  return r;
}

// Columns whose norm reaches `tiny`: normalised into U, the others completed (they rank last).
inline long svd_kept(device const float* norms, long n, float tiny) {
  long kept = 0;
  for (long j = 0; j < n; ++j) {
    kept += norms[j] >= tiny ? 1 : 0;
  }
  return kept;
}

// Completes columns first .. n - 1 of the row-major n x n U (columns 0 .. first - 1
// orthonormal) to an orthonormal set, one column at a time: the coordinate vector e_k with the
// largest residual 1 - sum_j |U[k, j]|^2 (at least (n - r) / n), orthogonalised twice against
// the columns already set (classical Gram-Schmidt, twice: Giraud et al. 2005) and normalised.
// All threads of the group take part; `scratch` holds 2 n elements.
template <typename T>
inline void svd_complete_columns(device T* u, device T* scratch, long n, long first, uint tid,
                                 uint nthreads) {
  for (long r = first; r < n; ++r) {
    for (long i = tid; i < n; i += nthreads) {
      float rowsum = 0.0f;
      for (long j = 0; j < r; ++j) {
        rowsum += svd_abs2(u[i * n + j]);
      }
      scratch[i] = (1.0f - rowsum) * one<T>();
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
    long k = 0;
    float best = -1.0f;
    for (long i = 0; i < n; ++i) {
      const float res = svd_real(scratch[i]);
      if (res > best) {
        best = res;
        k = i;
      }
    }
    for (long i = tid; i < n; i += nthreads) {
      T vi = i == k ? one<T>() : zero<T>();
      for (long j = 0; j < r; ++j) {
        vi -= mul(u[i * n + j], conj(u[k * n + j]));
      }
      u[i * n + r] = vi;
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
    for (long j = tid; j < r; j += nthreads) {
      T d = zero<T>();
      for (long i = 0; i < n; ++i) {
        d += mul(conj(u[i * n + j]), u[i * n + r]);
      }
      scratch[n + j] = d;
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
    for (long i = tid; i < n; i += nthreads) {
      T vi = u[i * n + r];
      for (long j = 0; j < r; ++j) {
        vi -= mul(u[i * n + j], scratch[n + j]);
      }
      u[i * n + r] = vi;
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
    float ss = 0.0f;
    for (long i = 0; i < n; ++i) {
      ss += svd_abs2(u[i * n + r]);
    }
    const float inv = 1.0f / metal::sqrt(ss);
    threadgroup_barrier(metal::mem_flags::mem_device);
    for (long i = tid; i < n; i += nthreads) {
      u[i * n + r] = inv * u[i * n + r];
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
  }
}

// The sweeps, sorting and output of svd_jacobi for one matrix, its W and V (column-major
// n x n) at w and v: threadgroup memory when both fit (svd_stage_elems), else the device
// workspace (P is the pointer type). `scratch` (device, 2 n elements) serves the completion of U.
template <typename T, typename P>
inline void svd_jacobi_body(P w, P v, device const T* ab, device T* scratch, device float* nb,
                            device T* ub, device float* sb, device T* vhb, device int* info,
                            long n, int ex, bool vectors, threadgroup float* part, uint tid,
                            uint nthreads, uint lane, uint sg, uint nsg) {
  const long nn = n * n;
  for (long e = tid; e < nn; e += nthreads) {
    const long i = e / n, j = e % n;
    w[j * n + i] = svd_ldexp(ab[e], -ex);
    if (vectors) {
      v[j * n + i] = i == j ? one<T>() : zero<T>();
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);

  // ---- sweeps ----
  const long n2 = n + (n & 1);
  const long pairs = n2 / 2;
  const float tol = svd_tolerance(n);
  int sweeps = kSvdNotConverged;
  for (int sweep = 1; sweep <= kSvdMaxSweeps; ++sweep) {
    float rotated = 0.0f;
    for (int step = 0; step < int(n2) - 1; ++step) {
      for (int slot = int(sg); slot < int(pairs); slot += int(nsg)) {
        int p, q;
        jacobi_round_robin(int(n2), step, slot, p, q);
        if (q < n && svd_rotate_columns<T>(w, v, n, p, q, vectors, tol, lane)) {
          rotated = 1.0f;
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
    }
    if (group_max(rotated, part, lane, sg, nsg) == 0.0f) {
      sweeps = sweep;
      break;
    }
  }
  if (tid == 0) {
    info[0] = sweeps;
  }

  // ---- singular values, sorted, and the vectors permuted alike ----
  for (long j = sg; j < n; j += nsg) {
    const float nj = svd_column_norm<T>(w + j * n, n, lane);
    if (lane == 0) {
      nb[j] = nj;
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_device);
  const long kept = svd_kept(nb, n, kSvdTinyNorm);
  for (long j = 0; j < n; ++j) {
    svd_output_column<T>(w + j * n, v + j * n, ub, sb, vhb, n, svd_rank(nb, n, j), nb[j], ex,
                         vectors, kSvdTinyNorm, tid, nthreads);
  }
  if (vectors && kept < n) {
    threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
    svd_complete_columns(ub, scratch, n, kept, tid, nthreads);
  }
}

template <typename T>
[[kernel]] void svd_jacobi(
    device const T* a [[buffer(0)]],    // (batch, n, n) row-major, not modified
    device T* work [[buffer(1)]],       // (batch, 2, n, n): W then V, column-major
    device float* norms [[buffer(2)]],  // (batch, n): column norms before sorting
    device T* u [[buffer(3)]],          // (batch, n, n) when vectors
    device float* s [[buffer(4)]],      // (batch, n), descending
    device T* vh [[buffer(5)]],         // (batch, n, n) when vectors
    device int* info [[buffer(6)]],     // (batch,)
    constant long& n [[buffer(7)]],
    constant long& vectors_arg [[buffer(8)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kSvdMaxSimdgroups];
  threadgroup T stage[svd_stage_elems<T>()];

  const long b = long(group.y);
  const uint nthreads = tpg.x;
  const bool vectors = vectors_arg != 0;
  const long nn = n * n;
  device const T* ab = a + b * nn;
  device float* nb = norms + b * n;
  device T* ub = u + (vectors ? b * nn : 0);
  device float* sb = s + b * n;
  device T* vhb = vh + (vectors ? b * nn : 0);

  // ---- scale (and reject non-finite input) ----
  bool bad;
  const float anrm = svd_scan(ab, nn, bad, part, tid, nthreads, lane, sg, nsg);
  if (bad) {
    svd_write_nonfinite(sb, ub, vhb, info + b, n, vectors, tid, nthreads);
    return;
  }
  const int ex = svd_scale_exponent(anrm);
  if (2 * nn <= long(svd_stage_elems<T>())) {
    svd_jacobi_body<T>(&stage[0], &stage[nn], ab, work + b * 2 * nn, nb, ub, sb, vhb, info + b,
                       n, ex, vectors, part, tid, nthreads, lane, sg, nsg);
  } else {
    device T* w = work + b * 2 * nn;
    svd_jacobi_body<T>(w, w + nn, ab, w, nb, ub, sb, vhb, info + b, n, ex, vectors, part, tid,
                       nthreads, lane, sg, nsg);
  }
}

// Scalars of svd_small (svd_small.h).
struct SvdSmallParams {
  long batch;    // matrices (threads of work)
  long vectors;  // 1: u and vh are written
  long full;     // 1: full_matrices (u M x M, vh N x N)
};

}  // namespace mpsl
