// Householder QR (LAPACK geqrf / orgqr / ormqr semantics), blocked, for real and complex.
//
// Matrices are contiguous row-major (batch, m, n); the batch index is the last grid dimension of
// every kernel, so one launch sequence covers the whole batch. The host
// (mpslinalg/linalg/qr_metal.py) runs, for each panel of kQrPanelWidth columns starting at k0:
//   qr_panel         geqr2 on rows [k0, m) x columns [k0, k0 + w): one reflector per column
//                    (larfg), each applied to the rest of the panel, and the panel's compact-WY
//                    factor T (larft), so that H(k0) ... H(k0 + w - 1) = I - V T V^H. The panel
//                    lives in threadgroup memory when it fits (kQrStageElems), else in device
//                    memory;
//   qr_apply_w       W = op(T) V^H C for a block of columns C (op = ^H applies Q^H, as geqrf's
//                    trailing update and ormqr; op = identity applies Q, as orgqr);
//   qr_apply_update  C -= V W in threadgroup tiles (the matrix product of larfb).
// qr_larft builds every panel's T from reflectors given by the caller (householder_product).
// qr_small factors a batch of m, n <= kQrSmallMax matrices, one matrix per thread.
//
// Reflector conventions are LAPACK's larfg: H = I - tau v v^H with v[0] = 1, beta real (so the
// diagonal of R is real), beta = -sign(re alpha) * |(alpha, x)|, tau = (beta - alpha) / beta;
// H = I (tau = 0) when x = 0 and alpha is real. Column norms are LAPACK's nrm2: a scaled sum of
// squares (scale, ssq) per thread, combined across threads by rescaling to the largest scale, so
// entries near the overflow or underflow threshold give exact-order norms. Every result element
// is written by one thread in a fixed order; reductions run in a fixed tree, so results do not
// depend on the order in which lanes run. NaN in gives NaN out; every loop has a bounded trip
// count.
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Arguments of the QR kernels, passed by the host as one list of int64 (field order:
// mpslinalg.linalg.qr_metal.QR_PARAMS; tests/linalg/test_qr.py checks the two agree).
struct QrParams {
  long m;        // rows of the factored matrix (and of C)
  long n;        // columns (row stride) of the factored matrix
  long k;        // reflectors stored per matrix (length of tau)
  long k0;       // first column of the panel
  long w;        // columns of the panel (<= kQrPanelWidth)
  long panel;    // index of the panel's T in the T buffer
  long npanels;  // panels per matrix in the T buffer
  long ldc;      // row stride of C (and of the W workspace)
  long c_col0;   // first column of C that is updated
  long c_cols;   // columns of C that are updated
  long adjoint;  // qr_apply_w: 1 applies Q^H (W = T^H V^H C), 0 applies Q (W = T V^H C)
};

// Columns per panel: the K of the trailing update and the order of each T.
constant constexpr int kQrPanelWidth = 16;
// Most simdgroups of a qr_panel threadgroup (its host caps the group at this many simdgroups).
constant constexpr int kQrMaxSimdgroups = 8;
// A panel of at most this many elements is factored in threadgroup memory.
constant constexpr int kQrStageElems = 2048;
// qr_apply_w: one thread per column of C, kQrApplyCols per threadgroup; V staged
// kQrApplyRows rows at a time.
constant constexpr int kQrApplyCols = 64;
constant constexpr int kQrApplyRows = 32;
// qr_apply_update: a kQrTile x kQrTile tile of C per threadgroup of kQrTileThreads threads, each
// owning a kQrMicro x kQrMicro register tile (rows and columns strided by kQrTileLanes).
constant constexpr int kQrTile = 64;
constant constexpr int kQrTileLanes = 16;
constant constexpr int kQrMicro = kQrTile / kQrTileLanes;
constant constexpr int kQrTileThreads = kQrTileLanes * kQrTileLanes;
// qr_larft: one thread per entry of V^H V.
constant constexpr int kQrLarftThreads = kQrPanelWidth * kQrPanelWidth;
// qr_small serves matrices with m and n at most this.
constant constexpr int kQrSmallMax = 4;
// qr_small's mode argument.
constant constexpr long kQrModeReduced = 0;
constant constexpr long kQrModeComplete = 1;
constant constexpr long kQrModeR = 2;

static_assert(kQrStageElems * sizeof(float2) + kQrMaxSimdgroups * kQrPanelWidth * sizeof(float2) +
                      2 * kQrPanelWidth * kQrPanelWidth * sizeof(float2) <=
                  kMaxThreadgroupMemoryBytes,
              "qr_panel's threadgroup memory must fit");
static_assert(2 * kQrTile * kQrPanelWidth * sizeof(float2) <= kMaxThreadgroupMemoryBytes,
              "qr_apply_update's staged V and W must fit");

// ---- nrm2: a scaled sum of squares ----

// Add |x|^2 to the sum of squares scale^2 * ssq without forming a square that could overflow or
// underflow (LAPACK's classic nrm2 / lassq update; start from scale = 0, ssq = 1).
inline void qr_ssq_add(thread float& scale, thread float& ssq, float x) {
  const float ax = metal::fabs(x);
  if (x != 0.0f || metal::isnan(x)) {
    if (scale < ax) {
      const float r = scale / ax;
      ssq = 1.0f + ssq * r * r;
      scale = ax;
    } else {
      const float r = ax / scale;
      ssq += r * r;  // NaN when x is NaN
    }
  }
}
inline void qr_ssq_add(thread float& scale, thread float& ssq, float2 x) {
  qr_ssq_add(scale, ssq, x.x);
  qr_ssq_add(scale, ssq, x.y);
}

// ssq rescaled from its own scale to the common (larger or equal) scale `to`.
inline float qr_ssq_rescale(float scale, float ssq, float to) {
  if (scale == 0.0f) {
    return metal::isnan(ssq) ? ssq : 0.0f;  // only NaN entries were seen
  }
  const float r = scale / to;
  return ssq * r * r;
}

// sqrt(x^2 + y^2 + z^2) without overflow or underflow (LAPACK lapy3).
inline float qr_lapy3(float x, float y, float z) {
  const float ax = metal::fabs(x), ay = metal::fabs(y), az = metal::fabs(z);
  if (metal::isnan(ax) || metal::isnan(ay) || metal::isnan(az)) {
    return ax + ay + az;
  }
  const float big = metal::max(ax, metal::max(ay, az));
  if (big == 0.0f || metal::isinf(big)) {
    return big;
  }
  const float rx = ax / big, ry = ay / big, rz = az / big;
  return big * metal::sqrt(rx * rx + ry * ry + rz * rz);
}

// ---- larfg ----

// One elementary reflector (LAPACK larfg) for the vector (alpha, x) with |x| = xnorm: the new
// diagonal entry beta (real), tau, and the denominator alpha - beta the tail x is divided by.
// identity is true when H = I (tau = 0; x is left as it is).
struct QrReflector {
  float beta;
  bool identity;
};

inline QrReflector qr_larfg(float alpha, float xnorm, thread float& tau, thread float& denom) {
  QrReflector h;
  if (xnorm == 0.0f) {
    h.beta = alpha;
    h.identity = true;
    tau = 0.0f;
    denom = 1.0f;
    return h;
  }
  h.beta = -metal::copysign(qr_lapy3(alpha, 0.0f, xnorm), alpha);
  h.identity = false;
  tau = (h.beta - alpha) / h.beta;
  denom = alpha - h.beta;
  return h;
}

inline QrReflector qr_larfg(float2 alpha, float xnorm, thread float2& tau, thread float2& denom) {
  QrReflector h;
  if (xnorm == 0.0f && alpha.y == 0.0f) {
    h.beta = alpha.x;
    h.identity = true;
    tau = float2(0.0f, 0.0f);
    denom = float2(1.0f, 0.0f);
    return h;
  }
  h.beta = -metal::copysign(qr_lapy3(alpha.x, alpha.y, xnorm), alpha.x);
  h.identity = false;
  tau = float2((h.beta - alpha.x) / h.beta, -alpha.y / h.beta);
  denom = alpha - float2(h.beta, 0.0f);
  return h;
}

inline float qr_real(float beta, float) { return beta; }
inline float2 qr_real(float beta, float2) { return float2(beta, 0.0f); }

// x / denom as larfg scales the tail: by the reciprocal unless |denom| is below safmin.
template <typename T>
inline T qr_scale(T x, T denom, T inv_denom, bool use_recip) {
  return use_recip ? mul(x, inv_denom) : div(x, denom);
}

// Column j of the compact-WY factor (LAPACK larft, forward, columnwise): T[j][j] = tau and
// T[0:j, j] = T[0:j, 0:j] * y with y = -tau V[:, 0:j]^H v_j given. t is kQrPanelWidth square.
template <typename T>
inline void qr_t_column(threadgroup T* t, int j, T tau, thread const T* y) {
  for (int i = 0; i < kQrPanelWidth; ++i) {
    if (i < j) {
      T s = zero<T>();
      for (int l = 0; l < kQrPanelWidth; ++l) {
        if (l >= i && l < j) {
          s += mul(t[i * kQrPanelWidth + l], y[l]);
        }
      }
      t[i * kQrPanelWidth + j] = s;
    } else {
      t[i * kQrPanelWidth + j] = i == j ? tau : zero<T>();
    }
  }
}

// Unblocked geqr2 of a panel of `rows` rows and w columns, row stride lda, held at `a` (device or
// threadgroup memory: P is the pointer type), by the whole threadgroup; rows are dealt to
// threads cyclically. Leaves R on and above the diagonal, the reflectors below it, tau in
// tau_out[0:w] and T in t (both threadgroup). part is kQrMaxSimdgroups * kQrPanelWidth scratch,
// npart 2 * kQrMaxSimdgroups.
template <typename T, typename P>
inline void qr_geqr2(P a, long lda, long rows, int w, threadgroup T* tau_out, threadgroup T* t,
                     threadgroup T* part, threadgroup float* npart, uint tid, uint nthreads,
                     uint lane, uint sg, uint nsg) {
  for (int j = 0; j < w; ++j) {
    // |x| for x = a[j + 1 : rows, j]: per-thread scaled sums of squares, then within the
    // simdgroup and across simdgroups, each rescaled to the largest scale.
    float scale = 0.0f, ssq = 1.0f;
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i > j) {
        qr_ssq_add(scale, ssq, a[i * lda + j]);
      }
    }
    float smax = metal::simd_max(scale);
    float s = metal::simd_sum(qr_ssq_rescale(scale, ssq, smax));
    if (lane == 0) {
      npart[sg] = smax;
      npart[kQrMaxSimdgroups + sg] = s;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    smax = 0.0f;
    for (uint g = 0; g < nsg; ++g) {
      smax = metal::max(smax, npart[g]);
    }
    s = 0.0f;
    for (uint g = 0; g < nsg; ++g) {
      s += qr_ssq_rescale(npart[g], npart[kQrMaxSimdgroups + g], smax);
    }
    const float xnorm = smax == 0.0f ? (metal::isnan(s) ? s : 0.0f) : smax * metal::sqrt(s);

    const T alpha = a[j * lda + j];
    T tau, denom;
    const QrReflector h = qr_larfg(alpha, xnorm, tau, denom);
    const T inv_denom = recip(denom);
    const bool use_recip = modulus(denom) >= kSafeMin;
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i > j && !h.identity) {
        a[i * lda + j] = qr_scale(a[i * lda + j], denom, inv_denom, use_recip);
      }
    }
    // Every thread has read alpha (and the norm partials) before the diagonal is overwritten.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    if (tid == 0) {
      a[j * lda + j] = qr_real(h.beta, alpha);
    }

    // Dot products with v = (1, a[j + 1 : rows, j]): v^H a_c for the columns c > j (to apply
    // H^H), V_c^H v for the reflectors c < j (for T).
    T acc[kQrPanelWidth];
    for (int c = 0; c < kQrPanelWidth; ++c) {
      acc[c] = zero<T>();
    }
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i >= j) {
        const T v = i == j ? one<T>() : a[i * lda + j];
        for (int c = 0; c < kQrPanelWidth; ++c) {
          if (c < j) {
            acc[c] += mul(conj(a[i * lda + c]), v);
          } else if (c > j && c < w) {
            acc[c] += mul(conj(v), a[i * lda + c]);
          }
        }
      }
    }
    for (int c = 0; c < kQrPanelWidth; ++c) {
      const T total = simd_sum(acc[c]);
      if (lane == 0) {
        part[sg * kQrPanelWidth + c] = total;
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    T dot[kQrPanelWidth];
    for (int c = 0; c < kQrPanelWidth; ++c) {
      T total = zero<T>();
      for (uint g = 0; g < nsg; ++g) {
        total += part[g * kQrPanelWidth + c];
      }
      dot[c] = total;
    }

    // a_c -= conj(tau) v (v^H a_c): H^H applied to the rest of the panel (geqr2 / larf).
    const T ctau = conj(tau);
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i >= j) {
        const T v = i == j ? one<T>() : a[i * lda + j];
        const T cv = mul(ctau, v);
        for (int c = 0; c < kQrPanelWidth; ++c) {
          if (c > j && c < w) {
            a[i * lda + c] = sub_mul(a[i * lda + c], cv, dot[c]);
          }
        }
      }
    }
    if (tid == 0) {
      T y[kQrPanelWidth];
      for (int c = 0; c < kQrPanelWidth; ++c) {
        y[c] = c < j ? -mul(tau, dot[c]) : zero<T>();
      }
      qr_t_column(t, j, tau, y);
      tau_out[j] = tau;
    }
    // The next column's norm reads the updated panel; part is rewritten by the next step.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  }
}

// V[r][i] of a panel's reflectors, as stored by geqrf: 1 on the diagonal (r == k0 + i), the
// stored entry below it, 0 above it and past the panel.
template <typename T>
inline T qr_v(device const T* A, long n, long m, long k0, long w, long r, long i) {
  if (r >= m || i >= w || r < k0 + i) {
    return zero<T>();
  }
  return r == k0 + i ? one<T>() : A[r * n + k0 + i];
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// geqr2 + larft of the panel rows [k0, m) x columns [k0, k0 + w) of one matrix per threadgroup.
// Writes tau[k0 : k0 + w] and the panel's T (kQrPanelWidth square, zero past w).
// Grid: (nthreads, batch), nthreads a multiple of kSimdWidth, at most kQrMaxSimdgroups of them.
template <typename T>
[[kernel]] void qr_panel(
    device T* a [[buffer(0)]],
    device T* tau [[buffer(1)]],
    device T* tmat [[buffer(2)]],
    constant mpsl::QrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup T stage[kQrStageElems];
  threadgroup T part[kQrMaxSimdgroups * kQrPanelWidth];
  threadgroup float npart[2 * kQrMaxSimdgroups];
  threadgroup T t[kQrPanelWidth * kQrPanelWidth];
  threadgroup T tau_panel[kQrPanelWidth];

  const long batch = long(group.y);
  const long m = p.m, n = p.n, k0 = p.k0, w = p.w;
  const long rows = m - k0;
  const uint nthreads = tpg.x;
  device T* A = a + batch * m * n + k0 * n + k0;

  if (rows * w <= kQrStageElems) {
    for (long e = long(tid); e < rows * w; e += long(nthreads)) {
      const long i = e / w, c = e - i * w;
      stage[e] = A[i * n + c];
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    qr_geqr2(&stage[0], w, rows, int(w), tau_panel, t, part, npart, tid, nthreads, lane, sg, nsg);
    for (long e = long(tid); e < rows * w; e += long(nthreads)) {
      const long i = e / w, c = e - i * w;
      A[i * n + c] = stage[e];
    }
  } else {
    qr_geqr2(A, n, rows, int(w), tau_panel, t, part, npart, tid, nthreads, lane, sg, nsg);
  }
  device T* tout = tmat + (batch * p.npanels + p.panel) * kQrPanelWidth * kQrPanelWidth;
  for (int e = int(tid); e < kQrPanelWidth * kQrPanelWidth; e += int(nthreads)) {
    const int i = e / kQrPanelWidth, c = e % kQrPanelWidth;
    tout[e] = (i < w && c < w) ? t[e] : zero<T>();
  }
  for (long j = long(tid); j < w; j += long(nthreads)) {
    tau[batch * p.k + k0 + j] = tau_panel[j];
  }
}

// The T of every panel (columns [k0, k0 + w), k0 = panel * kQrPanelWidth, w up to p.k) from
// reflectors stored below the diagonal of a and their tau (LAPACK larft): G = V^H V by one
// thread per entry, then the columns of T in turn. Grid: (npanels * kQrLarftThreads, batch), one
// threadgroup per panel.
template <typename T>
[[kernel]] void qr_larft(
    device const T* a [[buffer(0)]],
    device const T* tau [[buffer(1)]],
    device T* tmat [[buffer(2)]],
    constant mpsl::QrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup T g[kQrPanelWidth * kQrPanelWidth];
  threadgroup T t[kQrPanelWidth * kQrPanelWidth];

  const long batch = long(group.y);
  const long panel = long(group.x);
  const long m = p.m, n = p.n;
  const long k0 = panel * kQrPanelWidth;
  const long w = p.k - k0 < kQrPanelWidth ? p.k - k0 : long(kQrPanelWidth);
  device const T* A = a + batch * m * n;
  device const T* tv = tau + batch * p.k + k0;

  const int i = int(tid) / kQrPanelWidth, j = int(tid) % kQrPanelWidth;
  T s = zero<T>();
  if (i < j && j < w) {
    // V[:, j] is zero above row k0 + j and 1 on it.
    for (long r = k0 + j; r < m; ++r) {
      s += mul(conj(qr_v(A, n, m, k0, w, r, long(i))), qr_v(A, n, m, k0, w, r, long(j)));
    }
  }
  g[tid] = s;
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (tid == 0) {
    for (int c = 0; c < kQrPanelWidth; ++c) {
      const T tc = c < w ? tv[c] : zero<T>();
      T y[kQrPanelWidth];
      for (int l = 0; l < kQrPanelWidth; ++l) {
        y[l] = l < c ? -mul(tc, g[l * kQrPanelWidth + c]) : zero<T>();
      }
      qr_t_column(t, c, tc, y);
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  device T* tout = tmat + (batch * p.npanels + panel) * kQrPanelWidth * kQrPanelWidth;
  tout[tid] = (i < w && j < w) ? t[tid] : zero<T>();
}

// W = op(T) V^H C for the columns [c_col0, c_col0 + c_cols) of C over its rows [k0, m), V the
// panel's reflectors in a; W is the workspace (batch, kQrPanelWidth, ldc). One thread per
// column, V staged kQrApplyRows rows at a time. Grid: (columns rounded up to kQrApplyCols,
// batch).
template <typename T>
[[kernel]] void qr_apply_w(
    device const T* a [[buffer(0)]],
    device const T* tmat [[buffer(1)]],
    device const T* c [[buffer(2)]],
    device T* work [[buffer(3)]],
    constant mpsl::QrParams& p [[buffer(4)]],
    uint2 gid [[thread_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup T vs[kQrApplyRows * kQrPanelWidth];
  threadgroup T ts[kQrPanelWidth * kQrPanelWidth];

  const long batch = long(group.y);
  const long m = p.m, n = p.n, k0 = p.k0, w = p.w, ldc = p.ldc;
  device const T* A = a + batch * m * n;
  device const T* C = c + batch * m * ldc;
  device const T* tp = tmat + (batch * p.npanels + p.panel) * kQrPanelWidth * kQrPanelWidth;
  for (int e = int(tid); e < kQrPanelWidth * kQrPanelWidth; e += int(tpg.x)) {
    ts[e] = tp[e];
  }
  const bool active = long(gid.x) < p.c_cols;
  const long col = p.c_col0 + (active ? long(gid.x) : 0);

  T acc[kQrPanelWidth];
  for (int i = 0; i < kQrPanelWidth; ++i) {
    acc[i] = zero<T>();
  }
  for (long r0 = k0; r0 < m; r0 += kQrApplyRows) {
    // vs is still read by the previous block.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int e = int(tid); e < kQrApplyRows * kQrPanelWidth; e += int(tpg.x)) {
      const int rr = e / kQrPanelWidth, i = e % kQrPanelWidth;
      vs[e] = qr_v(A, n, m, k0, w, r0 + rr, long(i));
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (active) {
      for (int rr = 0; rr < kQrApplyRows; ++rr) {
        if (r0 + rr < m) {
          const T x = C[(r0 + rr) * ldc + col];
          for (int i = 0; i < kQrPanelWidth; ++i) {
            acc[i] += mul(conj(vs[rr * kQrPanelWidth + i]), x);
          }
        }
      }
    }
  }
  if (!active) {
    return;
  }
  device T* W = work + batch * kQrPanelWidth * ldc;
  for (int i = 0; i < kQrPanelWidth; ++i) {
    if (i < w) {
      T s = zero<T>();
      for (int l = 0; l < kQrPanelWidth; ++l) {
        if (p.adjoint != 0 && l <= i) {
          s += mul(conj(ts[l * kQrPanelWidth + i]), acc[l]);  // (T^H)[i][l]
        } else if (p.adjoint == 0 && l >= i) {
          s += mul(ts[i * kQrPanelWidth + l], acc[l]);
        }
      }
      W[i * ldc + col] = s;
    }
  }
}

// C -= V W over rows [k0, m) and columns [c_col0, c_col0 + c_cols) of C (larfb's last product).
// C may be the factored matrix itself (geqrf's trailing update): V is read from the panel's
// columns, which are not among the updated ones.
// Grid: (column tiles * kQrTileThreads, row tiles, batch), threadgroups of kQrTileThreads.
template <typename T>
[[kernel]] void qr_apply_update(
    device const T* a [[buffer(0)]],
    device const T* work [[buffer(1)]],
    device T* c [[buffer(2)]],
    constant mpsl::QrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup T vs[kQrTile * kQrPanelWidth];  // [row][reflector]
  threadgroup T ws[kQrPanelWidth * kQrTile];  // [reflector][column]

  const long batch = long(group.z);
  const long m = p.m, n = p.n, k0 = p.k0, w = p.w, ldc = p.ldc;
  device const T* A = a + batch * m * n;
  device const T* W = work + batch * kQrPanelWidth * ldc;
  device T* C = c + batch * m * ldc;
  const long row0 = k0 + long(group.y) * kQrTile;
  const long tile_col0 = long(group.x) * kQrTile;  // relative to c_col0
  for (int e = int(tid); e < kQrTile * kQrPanelWidth; e += kQrTileThreads) {
    const int rr = e / kQrPanelWidth, i = e % kQrPanelWidth;
    vs[e] = qr_v(A, n, m, k0, w, row0 + rr, long(i));
  }
  for (int e = int(tid); e < kQrPanelWidth * kQrTile; e += kQrTileThreads) {
    const int i = e / kQrTile, cc = e % kQrTile;
    const long col = tile_col0 + cc;
    ws[e] = (i < w && col < p.c_cols) ? W[i * ldc + p.c_col0 + col] : zero<T>();
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  const int tx = int(tid) % kQrTileLanes;
  const int ty = int(tid) / kQrTileLanes;
  for (int i = 0; i < kQrMicro; ++i) {
    const int rr = ty + i * kQrTileLanes;
    const long r = row0 + rr;
    for (int j = 0; j < kQrMicro; ++j) {
      const int cc = tx + j * kQrTileLanes;
      const long col = tile_col0 + cc;
      if (r < m && col < p.c_cols) {
        T s = zero<T>();
        for (int l = 0; l < kQrPanelWidth; ++l) {
          s += mul(vs[rr * kQrPanelWidth + l], ws[l * kQrTile + cc]);
        }
        C[r * ldc + p.c_col0 + col] -= s;
      }
    }
  }
}

// QR of a batch of M x N matrices (M, N <= kQrSmallMax), one matrix per thread in registers, with
// the same reflectors as the blocked kernels (geqr2, then orgqr by backward accumulation).
// mode: kQrModeReduced (Q is M x K, R K x N, K = min(M, N)), kQrModeComplete (Q M x M, R M x N),
// kQrModeR (R only, K x N; q is not written). Grid: (batch rounded up to the group width).
template <typename T, int M, int N>
[[kernel]] void qr_small(
    device const T* a [[buffer(0)]],
    device T* q [[buffer(1)]],
    device T* r [[buffer(2)]],
    constant long& batch [[buffer(3)]],
    constant long& mode [[buffer(4)]],
    uint gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  constexpr int K = M < N ? M : N;
  const long b = long(gid);
  if (b >= batch) {
    return;
  }
  T x[M][N];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      x[i][j] = a[b * M * N + i * N + j];
    }
  }
  T tau[K];
  for (int j = 0; j < K; ++j) {
    float scale = 0.0f, ssq = 1.0f;
    for (int i = j + 1; i < M; ++i) {
      qr_ssq_add(scale, ssq, x[i][j]);
    }
    const float xnorm = scale == 0.0f ? (metal::isnan(ssq) ? ssq : 0.0f)
                                      : scale * metal::sqrt(ssq);
    const T alpha = x[j][j];
    T denom;
    const QrReflector h = qr_larfg(alpha, xnorm, tau[j], denom);
    const T inv_denom = recip(denom);
    const bool use_recip = modulus(denom) >= kSafeMin;
    if (!h.identity) {
      for (int i = j + 1; i < M; ++i) {
        x[i][j] = qr_scale(x[i][j], denom, inv_denom, use_recip);
      }
    }
    x[j][j] = qr_real(h.beta, alpha);
    const T ctau = conj(tau[j]);
    for (int c = j + 1; c < N; ++c) {
      T d = x[j][c];
      for (int i = j + 1; i < M; ++i) {
        d += mul(conj(x[i][j]), x[i][c]);
      }
      const T cd = mul(ctau, d);
      x[j][c] -= cd;
      for (int i = j + 1; i < M; ++i) {
        x[i][c] = sub_mul(x[i][c], x[i][j], cd);
      }
    }
  }
  const int rrows = mode == kQrModeComplete ? M : K;
  device T* R = r + b * long(rrows) * N;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      if (i < rrows) {
        R[i * N + j] = (i <= j && i < K) ? x[i][j] : zero<T>();
      }
    }
  }
  if (mode == kQrModeR) {
    return;
  }
  const int qcols = mode == kQrModeComplete ? M : K;
  T qm[M][M];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < M; ++j) {
      qm[i][j] = i == j ? one<T>() : zero<T>();
    }
  }
  for (int s = 0; s < K; ++s) {
    const int j = K - 1 - s;
    for (int c = 0; c < M; ++c) {
      T d = qm[j][c];
      for (int i = j + 1; i < M; ++i) {
        d += mul(conj(x[i][j]), qm[i][c]);
      }
      const T td = mul(tau[j], d);
      qm[j][c] -= td;
      for (int i = j + 1; i < M; ++i) {
        qm[i][c] = sub_mul(qm[i][c], x[i][j], td);
      }
    }
  }
  device T* Q = q + b * long(M) * qcols;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < M; ++j) {
      if (j < qcols) {
        Q[i * qcols + j] = qm[i][j];
      }
    }
  }
}
