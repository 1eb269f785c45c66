// Householder QR (LAPACK geqrf / orgqr / ormqr semantics), blocked, for real and complex.
//
// Matrices are contiguous row-major (batch, m, n); the batch index is the last grid dimension of
// every kernel, so one launch sequence covers the whole batch. The host
// (mpslinalg/linalg/qr_metal.py) runs, for each panel of kQrPanelWidth columns starting at k0:
//   qr_panel         geqr2 on rows [k0, m) x columns [k0, k0 + w): one reflector per column
//                    (larfg), each applied to the rest of the panel, and the panel's compact-WY
//                    factor T (larft), so that H(k0) ... H(k0 + w - 1) = I - V T V^H. The panel
//                    lives in threadgroup memory when it fits (kQrStageElems), else in device
//                    memory. It writes V and Y = V T as plain matrices;
//   qr_apply_w       P = Y^H C for a block of columns C, split over chunks of rows (shared
//                    GEMM): with Y = V op(T), Y^H C is larfb's W = op(T)^H V^H C (op(T) = T
//                    applies Q^H, as geqrf's trailing update and ormqr; T^H applies Q, as orgqr);
//   qr_apply_sum     W = P[0] + P[1] + ... (no launch for a single chunk);
//   qr_apply_update  C -= V W (shared GEMM: the matrix product of larfb).
// qr_larft builds every panel's T from reflectors given by the caller (householder_product);
// qr_explicit_v writes stored reflectors as plain V and Y = V op(T) for the products (apply-Q).
// qr_tsqr_* factor tall-skinny matrices by the TSQR tree (its own section below).
// qr_small factors a batch of m, n <= kQrSmallMax matrices, one matrix per thread (generated:
//                  qr_small.h, included by qr.metal).
// lstsq_gelsy solves least-squares problems as LAPACK's xGELSY (QR with column pivoting), one
// matrix per threadgroup (its own section below).
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
#include "../common/gemm.h"
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
  long adjoint;  // qr_explicit_v: Y for Q^H (1: W = T^H V^H C) or for Q (0: W = T V^H C)
  long ldv;      // row stride of the explicit V (qr_panel writes it, qr_apply_* read it)
  long v_col0;   // column of V holding the panel's first reflector
  long chunks;   // qr_apply_w: row chunks of kQrApplyChunk rows from k0
};

// Columns per panel: the K of the trailing update and the order of each T.
constant constexpr int kQrPanelWidth = 16;
// Most simdgroups of a qr_panel threadgroup (its host caps the group at this many simdgroups).
constant constexpr int kQrMaxSimdgroups = 8;
// A panel of at most this many elements (rows times the pitch qr_stage_pitch) is factored in
// threadgroup memory: 128 rows of a full panel (pitch 17).
constant constexpr int kQrStageElems = 2176;
// qr_apply_w: rows of C per threadgroup (the depth of one split-K partial product): a tall C
// gives (m - k0) / kQrApplyChunk threadgroups per column tile instead of one.
constant constexpr int kQrApplyChunk = 256;
// qr_apply_sum: threads per threadgroup (one per entry of W).
constant constexpr int kQrApplyCols = 64;
// qr_explicit_v: threads per threadgroup (one per entry of V).
constant constexpr int kQrExplicitThreads = 256;
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
static_assert(kQrPanelWidth <= kGemmTileM, "a panel's reflectors fit one gemm_tile row block");

// The row pitch of a panel or a TSQR node staged in threadgroup memory: its width n, or n + 1
// when n is even. Their column steps have the lanes of a simdgroup read one column of
// consecutive rows; threadgroup memory is banked by 32-bit words (32 banks on NVIDIA GPUs, as on
// Apple's), and an even pitch puts those rows in few banks (n = 16 or 32: one bank for all 32
// lanes, each access replayed 32 times). An odd pitch spreads them over distinct banks (distinct
// pairs for complex entries, whose 64-bit accesses are served half a simdgroup at a time).
inline int qr_stage_pitch(int n) {
  return n | 1;
}
static_assert(kQrStageElems == 128 * (kQrPanelWidth | 1), "128 rows of a full staged panel");

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
// npart 2 kQrMaxSimdgroups.
template <typename T, typename P>
inline void qr_geqr2(P a, long lda, long rows, int w, threadgroup T* tau_out, threadgroup T* t,
                     threadgroup T* part, threadgroup float* npart, uint tid, uint nthreads,
                     uint lane, uint sg, uint nsg) {
  for (int j = 0; j < w; ++j) {
    // |x| for x = a[j + 1 : rows, j]: per-thread scaled sums of squares, each rescaled to the
    // group's largest scale and summed.
    float scale = 0.0f, ssq = 1.0f;
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i > j) {
        qr_ssq_add(scale, ssq, a[i * lda + j]);
      }
    }
    // The max and the sum reduce through halves of npart of their own, so neither needs its
    // releasing barrier (the next write to a half comes a column later, past this column's
    // barriers), as tsqr_geqr2's.
    const float smax = group_max(scale, npart, lane, sg, nsg, metal::mem_flags::mem_threadgroup,
                                 false);
    const float s = group_sum(qr_ssq_rescale(scale, ssq, smax), npart + kQrMaxSimdgroups, lane,
                              sg, nsg, metal::mem_flags::mem_threadgroup, false);
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
    T dot[kQrPanelWidth];
    for (int c = 0; c < kQrPanelWidth; ++c) {
      dot[c] = zero<T>();
    }
    for (long i = long(tid); i < rows; i += long(nthreads)) {
      if (i >= j) {
        const T v = i == j ? one<T>() : a[i * lda + j];
        for (int c = 0; c < kQrPanelWidth; ++c) {
          if (c < j) {
            dot[c] += mul(conj(a[i * lda + c]), v);
          } else if (c > j && c < w) {
            dot[c] += mul(conj(v), a[i * lda + c]);
          }
        }
      }
    }
    // qr_panel's threadgroup is whole simdgroups. Device memory too: the panel may live there
    // (P). No releasing barrier: part is written next a column later, past this column's
    // barriers.
    group_sum_each_whole<T, kQrPanelWidth>(
        dot, part, lane, sg, nsg, metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device,
        false);

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

// The reflectors of a factored panel (rows x w at `panel`, row stride lda; its last barrier
// ordered the writes) as a plain matrix V (row stride ldv): the unit diagonal, zeros above it.
template <typename T, typename P>
inline void qr_write_v(P panel, long lda, long rows, long w, device T* v, long ldv, uint tid,
                       uint nthreads) {
  for (long e = long(tid); e < rows * w; e += long(nthreads)) {
    const long i = e / w, c = e - i * w;
    v[i * ldv + c] = i < c ? zero<T>() : (i == c ? one<T>() : T(panel[i * lda + c]));
  }
}

// Y[i][c] = sum_l V[i][l] op(T)[l][c] over one panel of w reflectors: V's row i read from
// `row` (the panel's stored row: the unit at l == i, zeros past it, none for i < 0, a row above
// the panel), op(T) = T (`adjoint`: Y for Q^H) or T^H (Y for Q), T upper triangular at t.
template <typename T, typename P, typename Q>
inline T qr_y_entry(P row, long i, long w, Q t, long c, bool adjoint) {
  T acc = zero<T>();
  for (long l = 0; l < w && l <= i; ++l) {
    if (adjoint ? l <= c : l >= c) {
      const T v = l == i ? one<T>() : T(row[l]);
      acc += mul(v, adjoint ? T(t[l * kQrPanelWidth + c]) : conj(T(t[c * kQrPanelWidth + l])));
    }
  }
  return acc;
}

// Y = V T of a factored panel (as qr_write_v reads it) and its T (threadgroup): the first
// product of geqrf's trailing update, Y^H C = T^H V^H C, then needs no launch for T (row stride
// ldy).
template <typename T, typename P>
inline void qr_write_y(P panel, long lda, long rows, long w, threadgroup const T* t,
                       device T* y, long ldy, uint tid, uint nthreads) {
  for (long e = long(tid); e < rows * w; e += long(nthreads)) {
    const long i = e / w, c = e - i * w;
    y[i * ldy + c] = qr_y_entry<T>(panel + i * lda, i, w, t, c, true);
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// geqr2 + larft of the panel rows [k0, m) x columns [k0, k0 + w) of one matrix per threadgroup.
// Writes tau[k0 : k0 + w], the panel's T (kQrPanelWidth square, zero past w), its reflectors
// as an explicit V (vout, row stride ldv, columns from v_col0) and Y = V T (yout, the same
// layout) for the trailing update.
// Grid: (nthreads, batch), nthreads a multiple of kSimdWidth, at most kQrMaxSimdgroups of them.
template <typename T>
[[kernel]] void qr_panel(
    device T* a [[buffer(0)]],
    device T* tau [[buffer(1)]],
    device T* tmat [[buffer(2)]],
    device T* vout [[buffer(3)]],
    device T* yout [[buffer(4)]],
    constant mpsl::QrParams& p [[buffer(5)]],
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
  device T* V = vout + batch * m * p.ldv + k0 * p.ldv + p.v_col0;
  device T* Y = yout + batch * m * p.ldv + k0 * p.ldv + p.v_col0;

  const long ld = qr_stage_pitch(int(w));
  if (rows * ld <= kQrStageElems) {
    for (long e = long(tid); e < rows * w; e += long(nthreads)) {
      const long i = e / w, c = e - i * w;
      stage[i * ld + c] = A[i * n + c];
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    qr_geqr2(&stage[0], ld, rows, int(w), tau_panel, t, part, npart, tid, nthreads, lane, sg,
             nsg);
    for (long e = long(tid); e < rows * w; e += long(nthreads)) {
      const long i = e / w, c = e - i * w;
      A[i * n + c] = stage[i * ld + c];
    }
    qr_write_v(&stage[0], ld, rows, w, V, p.ldv, tid, nthreads);
    qr_write_y(&stage[0], ld, rows, w, t, Y, p.ldv, tid, nthreads);
  } else {
    qr_geqr2(A, n, rows, int(w), tau_panel, t, part, npart, tid, nthreads, lane, sg, nsg);
    qr_write_v(A, n, rows, w, V, p.ldv, tid, nthreads);
    qr_write_y(A, n, rows, w, t, Y, p.ldv, tid, nthreads);
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

// V of the first k reflectors stored in a (below the diagonal), as an explicit m x k matrix with
// its unit diagonal and zeros above it, for the products of qr_apply_w and qr_apply_update
// (gemm_tile reads plain matrices), and beside it Y = V op(T) panel by panel (op(T) = T for Q^H,
// T^H for Q: p.adjoint), so that qr_apply_w's Y^H C is already larfb's W = op(T)^H V^H C and no
// launch per panel multiplies by T. Grid: (ceil(m k / kQrExplicitThreads) threads, batch).
template <typename T>
[[kernel]] void qr_explicit_v(
    device const T* a [[buffer(0)]],
    device const T* tmat [[buffer(1)]],
    device T* v [[buffer(2)]],
    device T* y [[buffer(3)]],
    constant mpsl::QrParams& p [[buffer(4)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long batch = long(gid.y);
  const long m = p.m, n = p.n, k = p.k;
  const long e = long(gid.x);
  if (e >= m * k) {
    return;
  }
  const long r = e / k, i = e - r * k;
  device const T* ab = a + batch * m * n;
  v[batch * m * k + e] = qr_v(ab, n, m, 0, k, r, i);
  // Y's entry over the panel of column i, from row r of the stored reflectors
  const long panel = i / kQrPanelWidth, k0 = panel * kQrPanelWidth;
  y[batch * m * k + e] = qr_y_entry<T>(
      ab + r * n + k0, r - k0, metal::min(long(kQrPanelWidth), k - k0),
      tmat + (batch * p.npanels + panel) * kQrPanelWidth * kQrPanelWidth, i - k0,
      p.adjoint != 0);
}

// Partial products P[chunk] = V^H C over the rows [k0 + chunk kQrApplyChunk, ...) of C's columns
// [c_col0, c_col0 + c_cols): the first product of larfb, split over the rows so that a tall C
// keeps many threadgroups busy (split-K; qr_apply_sum adds the chunks in a fixed order). V is the
// panel's columns [v_col0, v_col0 + w) of the explicit V (row stride ldv); P is (batch, chunks,
// kQrPanelWidth, c_cols). Grid: (column tiles * kGemmThreads, chunks, batch).
template <typename T>
[[kernel]] void qr_apply_w(
    device const T* v [[buffer(0)]],
    device const T* c [[buffer(1)]],
    device T* part [[buffer(2)]],
    constant mpsl::QrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup float scratch[kGemmScratchFloats];
  const long batch = long(group.z), chunk = long(group.y);
  const long r0 = p.k0 + chunk * kQrApplyChunk;
  const long rows = metal::min(long(kQrApplyChunk), p.m - r0);
  gemm_tile(v + batch * p.m * p.ldv + r0 * p.ldv + p.v_col0, p.ldv, kGemmConjTrans,
            c + batch * p.m * p.ldc + r0 * p.ldc + p.c_col0, p.ldc, kGemmNoTrans,
            part + (batch * p.chunks + chunk) * kQrPanelWidth * p.c_cols, p.c_cols, p.w,
            p.c_cols, rows, 0, long(group.x) * kGemmTileN, 1.0f, 0.0f, kGemmFull, scratch, tid, sg);
}

// W = P[0] + P[1] + ... where qr_apply_w's products already carry op(T) (apply-Q, whose
// qr_apply_w reads Y = V op(T)): one thread per entry of W, the chunks added in index order.
// Grid: (kQrPanelWidth c_cols rounded up to kQrApplyCols, batch).
template <typename T>
[[kernel]] void qr_apply_sum(
    device const T* part [[buffer(0)]],
    device T* work [[buffer(1)]],
    constant mpsl::QrParams& p [[buffer(2)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long batch = long(gid.y), e = long(gid.x), size = kQrPanelWidth * p.c_cols;
  if (e >= p.w * p.c_cols) {
    return;
  }
  T acc = zero<T>();
  for (long chunk = 0; chunk < p.chunks; ++chunk) {
    acc += part[(batch * p.chunks + chunk) * size + e];
  }
  work[batch * size + e] = acc;
}

// C -= V W over the rows [k0, m) and columns [c_col0, c_col0 + c_cols) of C (larfb's last
// product), on the shared GEMM. C may be the factored matrix itself (geqrf's trailing update):
// V is read from the explicit copy, never from C. Grid: (column tiles * kGemmThreads, row tiles,
// batch).
template <typename T>
[[kernel]] void qr_apply_update(
    device const T* v [[buffer(0)]],
    device const T* work [[buffer(1)]],
    device T* c [[buffer(2)]],
    constant mpsl::QrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup float scratch[kGemmScratchFloats];
  const long batch = long(group.z);
  gemm_tile(v + batch * p.m * p.ldv + p.k0 * p.ldv + p.v_col0, p.ldv, kGemmNoTrans,
            work + batch * kQrPanelWidth * p.c_cols, p.c_cols, kGemmNoTrans,
            c + batch * p.m * p.ldc + p.k0 * p.ldc + p.c_col0, p.ldc, p.m - p.k0, p.c_cols, p.w,
            long(group.y) * kGemmTileM, long(group.x) * kGemmTileN, -1.0f, 1.0f, kGemmFull, scratch,
            tid, sg);
}

// ---- TSQR: the tall-skinny QR tree (m >> n, n <= kTsqrMaxCols) ----
//
// Demmel, Grigori, Hoemmen and Langou 2012 ("Communication-optimal parallel and sequential QR
// and LU factorizations", SIAM J. Sci. Comput. 34(1), sec. 3 and 6): the rows of A are split
// into leaves of at least n rows, each factored by one threadgroup (Householder, LAPACK's larfg);
// the leaves' n x n R factors are stacked in groups, and each group (a node) factored by one
// threadgroup, up a tree to the single R at the root. One launch of qr_tsqr_factor per level
// covers every node of the level and every matrix of the batch.
//
// The host describes level l by TsqrParams: its matrix has `rows` rows per batch element (A at
// the leaves; the stacked R factors of level l - 1 above), dealt to `nodes` nodes as `parts`
// units of `unit` rows: node g owns the units [g parts / nodes, (g + 1) parts / nodes) (integer
// division: counts differ by at most one). Leaves: unit 1, parts m; nodes above: unit n, parts the
// children (each an n x n upper triangle, zero below the diagonal). The host picks the leaf size
// so that every leaf has at least n rows.
//
// A stack of upper triangles keeps its structure under the factorisation: reflector j has
// nonzeros only in rows r >= j whose row within their child, r mod n, is <= j, and so does
// column j of the explicit Q (Q's columns satisfy the same bound). qr_tsqr_factor visits those
// rows alone ("stacked"): a node does about a third of a dense factorisation's work.
//
// With want_q each node's rows are then overwritten by its explicit Q (org2r: its reflectors
// applied backwards to the first n columns of the identity), and qr_tsqr_q forms
// Q = diag(Q_leaves) diag(Q_level1) ... Q_root top down, one GEMM launch per level below the
// root: the rows of node g at level l times the n x n block g of the level above's result.
// A node's rows are staged in threadgroup memory when they fit (kTsqrStageBytes), else factored
// in device memory in place. A staged node's rows are qr_stage_pitch(n) elements apart, n
// rounded up to an odd count: the column steps have the lanes of a simdgroup read one column of
// consecutive rows, and with an even pitch those words share banks (n = 32: all 32 lanes in one
// bank, so every access is replayed 32 times; n = 8: 8 times).

namespace mpsl {

struct TsqrParams {
  long n;       // columns
  long rows;    // rows of this level's matrix (per batch element)
  long nodes;   // nodes (threadgroups per batch element) of this level
  long parts;   // units dealt to the nodes: m rows at the leaves, the children above
  long unit;    // rows per unit: 1 at the leaves, n above (stacked n x n triangles)
  long want_q;  // qr_tsqr_factor: overwrite each node's rows with its explicit Q
  long stage;   // qr_tsqr_factor: 1 stages a node that fits in threadgroup memory, 0 never
  long tiles;   // qr_tsqr_q: row tiles (kGemmTileM) of the tallest node
};

// Columns TSQR serves (the tau of a node are kept in threadgroup memory).
constant constexpr int kTsqrMaxCols = 256;
// Threads of a qr_tsqr_factor threadgroup; each simdgroup applies a reflector to its own columns.
constant constexpr int kTsqrThreads = 256;
constant constexpr int kTsqrSimdgroups = kTsqrThreads / kSimdWidth;
// A node of at most this many bytes is factored in threadgroup memory.
constant constexpr int kTsqrStageBytes = 24576;

static_assert(kTsqrStageBytes + kTsqrMaxCols * sizeof(float2) +
                      2 * kTsqrSimdgroups * sizeof(float) <=
                  kMaxThreadgroupMemoryBytes,
              "qr_tsqr_factor's threadgroup memory must fit");
static_assert(kTsqrThreads <= kMaxThreadsPerGroup, "qr_tsqr_factor's threadgroup is too large");
static_assert(kTsqrMaxCols <= kTsqrThreads, "tsqr_stage_copy steps a thread by whole rows");

// Most elements (rows n) of a node: qr_tsqr_factor indexes within a node in 32-bit ints, the
// arithmetic Apple GPUs do natively (a 64-bit product or compare is several instructions). Half
// of int's range, so that an offset plus a walk's step and carry (TsqrWalk: at most
// kTsqrThreads + 1 children of n rows) still fits. The host's nodes are far below it (leaves of
// at most max(2 n, 256) rows, nodes of at most 16 stacked R factors: 2^20 elements) and
// tsqr_levels checks it. A staged node is smaller still.
constant constexpr int kTsqrMaxNodeElems = 1073741824;  // 2^30
static_assert(long(kTsqrMaxNodeElems) + (kTsqrThreads + 1L) * kTsqrMaxCols * kTsqrMaxCols <
                  (1L << 31),
              "a node's offsets and a walk's step past them must fit an int");
static_assert(kTsqrStageBytes / sizeof(float) <= kTsqrMaxNodeElems, "a staged node fits an int");
// Columns a simdgroup updates per pass of tsqr_apply (one walk of the rows, one load of v per
// row for all of them; independent dot products in flight). 4: the n - 1 - j <= n - 1 columns
// of a step over kTsqrSimdgroups simdgroups are one pass for n <= 33, the usual TSQR width,
// and 4 accumulators (8 floats complex) keep a lane's registers well within Apple's budget.
constant constexpr int kTsqrApplyCols = 4;

// The rows of node g: [first, last) of the level's matrix.
inline void tsqr_node_rows(constant TsqrParams& p, long g, thread long& first, thread long& last) {
  first = p.unit * ((g * p.parts) / p.nodes);
  last = p.unit * (((g + 1) * p.parts) / p.nodes);
}

// The active rows of reflector j (see "stacked" above) as one thread walks them: the e-th
// active row is r = (e / span) pitch + e % span, with span = j + 1 and pitch = n stacked, span
// = pitch = rows otherwise (r = e), and the thread takes e = first, first + stride, ... from
// the first of them >= lo. Rows are ld elements apart (n in device memory, qr_stage_pitch(n)
// staged). The rows above row j are the e < j (child 0's e-th row is row e), so
// lo = j (or j + 1) skips them without a test per row; a thread's remaining e are those it had,
// in the same order. The walk keeps r's element offset r n and e % span and moves by a fixed
// step and at most one carry: integer division is a long software sequence on GPUs (Apple's
// have no integer divider), so it is done twice when a walk starts instead of once per row.
// Offsets are ints (kTsqrMaxNodeElems).
struct TsqrWalk {
  int at;     // r ld: the current row's offset (rows ld and beyond once past the last active row)
  int i;      // e % span: its row within its child
  int span;   // active rows per child
  int di;     // stride % span: what i advances by
  int step;   // what at advances by before the carry
  int carry;  // (pitch - span) ld: the inactive rows skipped when i wraps past span
};

inline TsqrWalk tsqr_walk(int first, int stride, int lo, int rows, int n, int ld, int j,
                          bool stacked) {
  const int span = stacked ? j + 1 : rows;
  const int pitch = stacked ? n : rows;
  if (first < lo) {
    first += (lo - first + stride - 1) / stride * stride;  // stride: a power of two at every call
  }
  // Unsigned: every operand is >= 0, and an unsigned division needs no sign fix-ups.
  const int k = int(uint(first) / uint(span)), q = int(uint(stride) / uint(span));
  TsqrWalk w;
  w.i = first - k * span;
  w.at = (k * pitch + w.i) * ld;
  w.span = span;
  w.di = stride - q * span;
  w.step = (q * pitch + w.di) * ld;
  w.carry = (pitch - span) * ld;
  return w;
}

inline void tsqr_next(thread TsqrWalk& w) {
  w.at += w.step;
  w.i += w.di;
  if (w.i >= w.span) {  // i + di < 2 span: one wrap at most
    w.i -= w.span;
    w.at += w.carry;
  }
}

// (I - t v v^H) applied to the columns j + 1 .. n - 1 of the node (row stride ld), v = (1,
// a[j + 1 :, j]) over the active rows; t = conj(tau) applies H^H (geqr2), tau applies H (org2r).
// Each simdgroup takes whole columns (the dot product by simd_sum: no barrier inside), its
// columns c = j + 1 + sg + q kTsqrSimdgroups kTsqrApplyCols at a time: one walk of the rows and
// one load of each v entry serve them all, and their dot products are independent chains that
// overlap. Each column's sum is its own, lane by lane in the order of e, then simd_sum: the
// same bits as one column at a time.
template <typename T, typename P>
inline void tsqr_apply(P a, int rows, int n, int ld, int j, bool stacked, T t, uint lane,
                       uint sg) {
  if (is_zero(t)) {
    return;  // H = I (LAPACK skips it too: no 0 * Inf)
  }
  const TsqrWalk start = tsqr_walk(int(lane), kSimdWidth, j, rows, n, ld, j, stacked);
  const int end = rows * ld, jn = j * ld;
  const P v = a + j;
  for (int c = j + 1 + int(sg); c < n; c += kTsqrSimdgroups * kTsqrApplyCols) {
    const int cols = metal::min(kTsqrApplyCols, (n - c + kTsqrSimdgroups - 1) / kTsqrSimdgroups);
    T dot[kTsqrApplyCols];
    for (int q = 0; q < kTsqrApplyCols; ++q) {
      dot[q] = zero<T>();
    }
    for (TsqrWalk w = start; w.at < end; tsqr_next(w)) {
      const T vr = conj(w.at == jn ? one<T>() : T(v[w.at]));
      const P x = a + (w.at + c);  // the pass's columns of this row: x[q kTsqrSimdgroups]
      for (int q = 0; q < kTsqrApplyCols; ++q) {
        if (q < cols) {
          dot[q] += mul(vr, T(x[q * kTsqrSimdgroups]));
        }
      }
    }
    T td[kTsqrApplyCols];
    for (int q = 0; q < kTsqrApplyCols; ++q) {
      td[q] = q < cols ? mul(t, simd_sum(dot[q])) : zero<T>();  // cols: the same on every lane
    }
    for (TsqrWalk w = start; w.at < end; tsqr_next(w)) {
      const T vr = w.at == jn ? one<T>() : T(v[w.at]);
      const P x = a + (w.at + c);
      for (int q = 0; q < kTsqrApplyCols; ++q) {
        if (q < cols) {
          x[q * kTsqrSimdgroups] = sub_mul(T(x[q * kTsqrSimdgroups]), vr, td[q]);
        }
      }
    }
  }
}

// geqr2 of a node (rows x n at a, row stride ld, rows >= n) by the whole threadgroup: R on and
// above the diagonal of its first n rows, the reflectors below, tau in taus. npart holds
// 2 kTsqrSimdgroups floats: the norm's max and sum reduce through halves of their own, so that
// neither needs its releasing barrier (the next write to a half comes a step later, past this
// step's barriers): four barriers a column, not six.
template <typename T, typename P>
inline void tsqr_geqr2(P a, int rows, int n, int ld, bool stacked, threadgroup T* taus,
                       threadgroup float* npart, uint tid, uint lane, uint sg) {
  const metal::mem_flags both = metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;
  const int end = rows * ld;
  for (int j = 0; j < n; ++j) {
    const int jn = j * ld;
    // The rows below row j: reflector j's tail.
    const TsqrWalk start = tsqr_walk(int(tid), kTsqrThreads, j + 1, rows, n, ld, j, stacked);
    const P x = a + j;
    float scale = 0.0f, ssq = 1.0f;
    for (TsqrWalk w = start; w.at < end; tsqr_next(w)) {
      qr_ssq_add(scale, ssq, T(x[w.at]));
    }
    const float smax = group_max(scale, npart, lane, sg, kTsqrSimdgroups, both, false);
    const float s = group_sum(qr_ssq_rescale(scale, ssq, smax), npart + kTsqrSimdgroups, lane, sg,
                              kTsqrSimdgroups, metal::mem_flags::mem_threadgroup, false);
    const float xnorm = smax == 0.0f ? (metal::isnan(s) ? s : 0.0f) : smax * metal::sqrt(s);

    const T alpha = a[jn + j];
    T tau, denom;
    const QrReflector h = qr_larfg(alpha, xnorm, tau, denom);
    const T inv_denom = recip(denom);
    const bool use_recip = modulus(denom) >= kSafeMin;
    if (!h.identity) {
      for (TsqrWalk w = start; w.at < end; tsqr_next(w)) {
        x[w.at] = qr_scale(T(x[w.at]), denom, inv_denom, use_recip);
      }
    }
    // Every thread has read alpha before the diagonal is overwritten, and the scaled tail is
    // visible to the simdgroups that apply it.
    threadgroup_barrier(both);
    if (tid == 0) {
      a[jn + j] = qr_real(h.beta, alpha);
      taus[j] = tau;
    }
    tsqr_apply(a, rows, n, ld, j, stacked, conj(tau), lane, sg);
    threadgroup_barrier(both);
  }
}

// org2r of a factored node in place: its first n columns of Q = H(0) ... H(n - 1).
template <typename T, typename P>
inline void tsqr_org2r(P a, int rows, int n, int ld, bool stacked, threadgroup const T* taus,
                       uint tid, uint lane, uint sg) {
  const metal::mem_flags both = metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;
  const int end = rows * ld;
  for (int step = 0; step < n; ++step) {
    const int j = n - 1 - step, jn = j * ld;
    const T tau = taus[j];
    tsqr_apply(a, rows, n, ld, j, stacked, tau, lane, sg);
    // Column j (the reflector) has been read by every simdgroup.
    threadgroup_barrier(both);
    const P x = a + j;
    for (TsqrWalk w = tsqr_walk(int(tid), kTsqrThreads, 0, rows, n, ld, j, stacked); w.at < end;
         tsqr_next(w)) {
      x[w.at] = w.at < jn ? zero<T>() : (w.at == jn ? one<T>() - tau : -mul(tau, T(x[w.at])));
    }
    threadgroup_barrier(both);
  }
}

// R of a factored node (its first n rows' upper triangle) into the n x n slot r, zero below.
template <typename T, typename P>
inline void tsqr_write_r(P a, int n, int ld, device T* r, uint tid) {
  for (int e = int(tid); e < n * n; e += kTsqrThreads) {
    const int i = e / n, c = e - i * n;
    r[e] = c >= i ? T(a[i * ld + c]) : zero<T>();
  }
}

// The whole of one node: factor, R out, explicit Q in place when asked.
template <typename T, typename P>
inline void tsqr_node(P a, int rows, int n, int ld, bool stacked, bool want_q, device T* r,
                      threadgroup T* taus, threadgroup float* npart, uint tid, uint lane,
                      uint sg) {
  tsqr_geqr2(a, rows, n, ld, stacked, taus, npart, tid, lane, sg);
  tsqr_write_r(a, n, ld, r, tid);
  if (want_q) {
    // R is read (by the threads that wrote it out) before org2r overwrites it.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    tsqr_org2r(a, rows, n, ld, stacked, taus, tid, lane, sg);
  }
}

// A node's rows between device memory (row pitch n) and the stage (pitch ld), into the stage or
// out of it: thread tid takes elements tid, tid + kTsqrThreads, ... in device order (coalesced),
// its row and column kept by a fixed step and a carry rather than a division per element.
template <typename T>
inline void tsqr_stage_copy(device T* a, threadgroup T* stage, int rows, int n, int ld, bool in,
                            uint tid) {
  const int dr = kTsqrThreads / n, dc = kTsqrThreads - dr * n;  // n <= kTsqrMaxCols: dr >= 1
  int r = int(tid) / n, c = int(tid) - r * n;
  while (r < rows) {
    if (in) {
      stage[r * ld + c] = a[r * n + c];
    } else {
      a[r * n + c] = stage[r * ld + c];
    }
    r += dr;
    c += dc;
    if (c >= n) {
      c -= n;
      ++r;
    }
  }
}

}  // namespace mpsl

// One level of the TSQR tree: node g = group.y of batch element group.z factors its rows of
// `a` (batch, rows, n), writes its R to rout (batch, nodes, n, n) and, with want_q, leaves its
// explicit Q in its rows. Grid: (kTsqrThreads, nodes, batch). Within a node (at A, after the
// batch's and the node's 64-bit offsets) every index is an int: rows n <= kTsqrMaxNodeElems.
template <typename T>
[[kernel]] void qr_tsqr_factor(
    device T* a [[buffer(0)]],
    device T* rout [[buffer(1)]],
    constant mpsl::TsqrParams& p [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  using namespace mpsl;
  threadgroup float2 stage_raw[kTsqrStageBytes / sizeof(float2)];
  threadgroup T taus[kTsqrMaxCols];
  threadgroup float npart[2 * kTsqrSimdgroups];

  const long batch = long(group.z), g = long(group.y);
  long first, last;
  tsqr_node_rows(p, g, first, last);
  const int rows = int(last - first), n = int(p.n);
  const bool stacked = p.unit > 1;
  const bool want_q = p.want_q != 0;
  device T* A = a + batch * p.rows * p.n + first * p.n;
  device T* R = rout + (batch * p.nodes + g) * p.n * p.n;
  const int ld = qr_stage_pitch(n);
  if (p.stage != 0 && rows * ld <= kTsqrStageBytes / int(sizeof(T))) {
    threadgroup T* stage = reinterpret_cast<threadgroup T*>(stage_raw);
    tsqr_stage_copy(A, stage, rows, n, ld, true, tid);
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    tsqr_node(stage, rows, n, ld, stacked, want_q, R, taus, npart, tid, lane, sg);
    if (want_q) {
      tsqr_stage_copy(A, stage, rows, n, ld, false, tid);
    }
  } else {
    tsqr_node(A, rows, n, n, stacked, want_q, R, taus, npart, tid, lane, sg);
  }
}

// One level of Q's formation, top down: out = the rows of node g of q (its explicit Q) times the
// n x n block g of x (the result of the level above; the root's explicit Q for the level below
// it). q and out are (batch, rows, n), x (batch, nodes * n, n). Grid: (column tiles *
// kGemmThreads, nodes * tiles, batch); tiles past a node's rows return at once.
template <typename T>
[[kernel]] void qr_tsqr_q(
    device const T* q [[buffer(0)]],
    device const T* x [[buffer(1)]],
    device T* out [[buffer(2)]],
    constant mpsl::TsqrParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup float scratch[kGemmScratchFloats];
  const long batch = long(group.z), n = p.n;
  const long g = long(group.y) / p.tiles, tile = long(group.y) - g * p.tiles;
  long first, last;
  tsqr_node_rows(p, g, first, last);
  if (tile * kGemmTileM >= last - first) {
    return;  // the whole threadgroup alike, before any barrier
  }
  const long off = batch * p.rows * n + first * n;
  gemm_tile(q + off, n, kGemmNoTrans, x + (batch * p.nodes + g) * n * n, n, kGemmNoTrans,
            out + off, n, last - first, n, n, tile * kGemmTileM, long(group.x) * kGemmTileN, 1.0f,
            0.0f, kGemmFull, scratch, tid, sg);
}

namespace mpsl {

inline float qr_re(float a) { return a; }
inline float qr_re(float2 a) { return a.x; }

// LAPACK's signs for the tree's factors. R is unique up to the signs of its rows (A of full
// rank; the diagonal is real on both sides), so R_lapack = D R and Q_lapack = Q D for a diagonal
// D of +-1, found from the top n x n block Q1 of the tree's Q (Ballard, Demmel, Grigori,
// Jacquelin, Nguyen and Solomonik 2014, "Reconstructing Householder vectors from tall-skinny
// QR", sec. 3): LAPACK's Q1 - I = -Y1 T Y1^H is an LU factorisation without pivoting whose
// pivots are -tau_j, and LAPACK's larfg makes Re(1 - tau_j) = Re(alpha_j) / beta_j <= 0. So the
// LU of Q1 D - I is run column by column, d_j chosen as it is reached: with g the Schur
// complement's diagonal entry of Q1 (the column not yet signed), d_j = -sign(Re g), the pivot
// d_j g - 1 has modulus >= 1 (the LU is as stable as partial pivoting's). A column LAPACK
// leaves alone (H = I, tau = 0: nothing below the diagonal) has g exactly 1 here too (the tree
// skips the same reflectors): d_j = 1 and the column is skipped, as LAPACK's.

// Q1 D - I = L U run on G = Q1 (n x n, row stride n, device memory) in place; d_j into d.
template <typename T>
inline void tsqr_sign_lu(device T* G, long n, threadgroup float* d, uint tid) {
  const metal::mem_flags both = metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;
  for (long j = 0; j < n; ++j) {
    const T g = G[j * n + j];
    const bool untouched = is_zero(g - one<T>());
    const float dj = untouched ? 1.0f : (qr_re(g) > 0.0f ? -1.0f : 1.0f);
    const T pivot = dj * g - one<T>();
    // Every thread has read the pivot column before row j's entries are scaled below.
    threadgroup_barrier(both);
    if (tid == 0) {
      d[j] = dj;
    }
    if (!untouched) {
      const T inv = recip(pivot);
      const long rest = n - j - 1;
      for (long e = long(tid); e < rest * rest; e += kTsqrThreads) {
        const long i = j + 1 + e / rest, c = j + 1 + e % rest;
        const T l = mul(dj * G[i * n + j], inv);  // L[i][j]
        G[i * n + c] = sub_mul(G[i * n + c], l, G[j * n + c]);
      }
    }
    threadgroup_barrier(both);
  }
}

}  // namespace mpsl

// LAPACK's signs for the tree's R (and, through d, its Q; see tsqr_sign_lu): Q1 = the first n
// rows of the leaf level's explicit Q (q, batch stride rows * n) times the n x n block 0 of the
// level above's product (x, batch stride nodes * n * n; nodes = 0 when the tree is one leaf,
// Q1 then being q's first rows), formed in work (batch, n, n); R's rows are multiplied by d
// and d written out (batch, n) for qr_tsqr_scale. One threadgroup per matrix. Grid:
// (kTsqrThreads, batch).
template <typename T>
[[kernel]] void qr_tsqr_signs(
    device const T* q [[buffer(0)]],
    device const T* x [[buffer(1)]],
    device T* work [[buffer(2)]],
    device T* r [[buffer(3)]],
    device float* dout [[buffer(4)]],
    constant mpsl::TsqrParams& p [[buffer(5)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup float d[kTsqrMaxCols];
  const long batch = long(group.y), n = p.n;
  device const T* Q = q + batch * p.rows * n;
  device const T* X = x + batch * p.nodes * n * n;
  device T* G = work + batch * n * n;
  for (long e = long(tid); e < n * n; e += kTsqrThreads) {
    const long i = e / n, c = e - i * n;
    T s = zero<T>();
    if (p.nodes == 0) {
      s = Q[e];
    } else {
      for (long l = 0; l < n; ++l) {
        s += mul(Q[i * n + l], X[l * n + c]);
      }
    }
    G[e] = s;
  }
  threadgroup_barrier(metal::mem_flags::mem_device);
  tsqr_sign_lu(G, n, d, tid);
  device T* R = r + batch * n * n;
  for (long e = long(tid); e < n * n; e += kTsqrThreads) {
    R[e] = d[e / n] * R[e];
  }
  for (long j = long(tid); j < n; j += kTsqrThreads) {
    dout[batch * n + j] = d[j];
  }
}

// Columns of x (batch, rows, n) times d (batch, n): Q D, applied to the factor of the tree's Q
// that is smallest to scale. Grid: (ceil(rows n / kTsqrThreads) * kTsqrThreads, batch).
template <typename T>
[[kernel]] void qr_tsqr_scale(
    device T* x [[buffer(0)]],
    device const float* d [[buffer(1)]],
    constant mpsl::TsqrParams& p [[buffer(2)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long batch = long(gid.y), e = long(gid.x);
  if (e < p.rows * p.n) {
    x[batch * p.rows * p.n + e] = d[batch * p.n + e % p.n] * x[batch * p.rows * p.n + e];
  }
}

// qr_small_<dtype>_m<m>_n<n> (m, n <= kQrSmallMax) are generated: qr_small.h.

// ---- lstsq_gelsy: LAPACK xGELSY (QR with column pivoting, incremental rank, minimum norm) ----
//
// One threadgroup per matrix, working in device memory (so any size fits; threadgroup memory
// holds a few broadcast scalars). The sequential parts (the pivot search, each reflector's norm,
// the condition estimator) are run by thread 0; the parallel parts go over columns (each
// reflector applied to one column by one thread) or rows (swaps, scalings), so every element is
// written by one thread in a fixed order and the results do not depend on the order of lanes.
//  1. A P = Q R by Householder reflectors with column pivoting (LAPACK geqp3 / laqp2): pivot on
//     the largest remaining column norm (the first one on ties), norms downdated after each step
//     and recomputed when the downdate loses too much (tol3z); Q^H is applied to B on the way.
//  2. The numerical rank r as xGELSY decides it: the largest r for which the incremental
//     condition estimate (laic1) of R[0:r, 0:r] satisfies smax * rcond <= smin (0 when
//     R[0][0] = 0).
//  3. The minimum-norm solution of [R11 R12] y = (Q^H B)[0:r] (R11 r x r): with the QR of
//     W = [R11 R12]^H = Q2 R2 (n x r), y = Q2 [R2^-H c; 0] = W (W^H W)^-1 c, the solution
//     xGELSY's complete orthogonal factorisation (tzrzf) gives; then x = P y.
// NaN in a matrix makes its solution NaN (its pivots and rank are then unspecified); the other
// matrices of the batch are unaffected. Every loop is bounded by m, n or k.

namespace mpsl {

// Sizes of one lstsq_gelsy launch, passed by the host as one list of int64 (field order:
// mpslinalg.linalg.qr_metal.LSTSQ_PARAMS; tests/linalg/test_qr.py checks the two agree).
struct LstsqParams {
  long m;       // rows of A and B
  long n;       // columns of A (rows of X)
  long k;       // columns of B and X
  float rcond;  // the rank is the largest r with smax * rcond <= smin of R[0:r, 0:r]
};

// Most threads of an lstsq_gelsy threadgroup.
constant constexpr int kLstsqMaxThreads = 256;
// LAPACK's slamch('Epsilon') = 2^-24: laic1's negligibility threshold.
constant constexpr float kLstsqEps = 5.9604644775390625e-8f;
// LAPACK laqp2's tol3z = sqrt(slamch('Epsilon')): a downdated column norm whose square fell
// below this fraction of the last computed one is recomputed from the column.
constant constexpr float kLstsqTol3z = 2.44140625e-4f;

static_assert(kLstsqMaxThreads <= kMaxThreadsPerGroup, "lstsq_gelsy's threadgroup must fit");

inline float lstsq_abs2(float x) { return x * x; }
inline float lstsq_abs2(float2 x) { return x.x * x.x + x.y * x.y; }

// |x| of the len entries x[0], x[stride], ... as LAPACK's nrm2 (by one thread).
template <typename T>
inline float lstsq_nrm2(device const T* x, long stride, long len) {
  float scale = 0.0f, ssq = 1.0f;
  for (long i = 0; i < len; ++i) {
    qr_ssq_add(scale, ssq, x[i * stride]);
  }
  return scale == 0.0f ? (metal::isnan(ssq) ? ssq : 0.0f) : scale * metal::sqrt(ssq);
}

// The reflector H = I - tau v v^H (larfg) of the column x[0], x[stride], ... x[(len-1) stride]:
// x[0] becomes beta, the tail becomes v[1:] (v[0] = 1). The norm and larfg by thread 0, the
// tail scaled by every thread; returns tau to every thread. shared: 3 elements, flags: 2.
template <typename T>
inline T lstsq_larfg(device T* x, long stride, long len, threadgroup T* shared,
                     threadgroup int* flags, uint tid, uint nthreads) {
  if (tid == 0) {
    const float xnorm = lstsq_nrm2(x + stride, stride, len - 1);
    const T alpha = x[0];
    T tau, denom;
    const QrReflector h = qr_larfg(alpha, xnorm, tau, denom);
    x[0] = qr_real(h.beta, alpha);
    shared[0] = tau;
    shared[1] = denom;
    shared[2] = recip(denom);
    flags[0] = h.identity ? 1 : 0;
    flags[1] = modulus(denom) >= kSafeMin ? 1 : 0;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  const T tau = shared[0], denom = shared[1], inv_denom = shared[2];
  const bool identity = flags[0] != 0, use_recip = flags[1] != 0;
  if (!identity) {
    for (long i = 1 + long(tid); i < len; i += long(nthreads)) {
      x[i * stride] = qr_scale(x[i * stride], denom, inv_denom, use_recip);
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  return tau;
}

// c <- (I - t v v^H) c for one column c (stride cstride) of len entries, v (stride vstride) with
// v[0] = 1 implicit; t = conj(tau) applies H^H, t = tau applies H. By one thread.
template <typename T>
inline void lstsq_apply(device const T* v, long vstride, long len, T t, device T* c,
                        long cstride) {
  T d = c[0];
  for (long i = 1; i < len; ++i) {
    d += mul(conj(v[i * vstride]), c[i * cstride]);
  }
  const T td = mul(t, d);
  c[0] -= td;
  for (long i = 1; i < len; ++i) {
    c[i * cstride] = sub_mul(c[i * cstride], v[i * vstride], td);
  }
}

// LAPACK laic1 with job = 1: the estimate sestpr of the largest singular value of [L 0; w^H
// gamma] from sest, the estimate for the lower triangular L with its vector x, alpha = x^H w;
// the new vector is (s x, c). Real and complex alike (the real sign(alpha) is alpha / |alpha|).
template <typename T>
inline void lstsq_laic1_max(T alpha, float sest, T gamma, thread float& sestpr, thread T& s,
                            thread T& c) {
  const float absalp = modulus(alpha), absgam = modulus(gamma), absest = metal::fabs(sest);
  if (sest == 0.0f) {
    const float s1 = metal::max(absgam, absalp);
    if (s1 == 0.0f) {
      s = zero<T>();
      c = one<T>();
      sestpr = 0.0f;
      return;
    }
    s = alpha / s1;
    c = gamma / s1;
    const float tmp = metal::sqrt(lstsq_abs2(s) + lstsq_abs2(c));
    s = s / tmp;
    c = c / tmp;
    sestpr = s1 * tmp;
    return;
  }
  if (absgam <= kLstsqEps * absest) {
    s = one<T>();
    c = zero<T>();
    const float tmp = metal::max(absest, absalp);
    const float s1 = absest / tmp, s2 = absalp / tmp;
    sestpr = tmp * metal::sqrt(s1 * s1 + s2 * s2);
    return;
  }
  if (absalp <= kLstsqEps * absest) {
    const bool keep = absgam <= absest;
    s = keep ? one<T>() : zero<T>();
    c = keep ? zero<T>() : one<T>();
    sestpr = keep ? absest : absgam;
    return;
  }
  if (absest <= kLstsqEps * absalp || absest <= kLstsqEps * absgam) {
    const float big = metal::max(absgam, absalp), small = metal::min(absgam, absalp);
    const float tmp = small / big;
    const float scl = metal::sqrt(1.0f + tmp * tmp);
    sestpr = big * scl;
    s = (alpha / big) / scl;
    c = (gamma / big) / scl;
    return;
  }
  const float zeta1 = absalp / absest, zeta2 = absgam / absest;
  const float b = (1.0f - zeta1 * zeta1 - zeta2 * zeta2) * 0.5f;
  const float cc = zeta1 * zeta1;
  const float t = b > 0.0f ? cc / (b + metal::sqrt(b * b + cc)) : metal::sqrt(b * b + cc) - b;
  const T sine = -(alpha / absest) / t;
  const T cosine = -(gamma / absest) / (1.0f + t);
  const float tmp = metal::sqrt(lstsq_abs2(sine) + lstsq_abs2(cosine));
  s = sine / tmp;
  c = cosine / tmp;
  sestpr = metal::sqrt(t + 1.0f) * absest;
}

// LAPACK laic1 with job = 2: as lstsq_laic1_max for the smallest singular value.
template <typename T>
inline void lstsq_laic1_min(T alpha, float sest, T gamma, thread float& sestpr, thread T& s,
                            thread T& c) {
  const float absalp = modulus(alpha), absgam = modulus(gamma), absest = metal::fabs(sest);
  if (sest == 0.0f) {
    sestpr = 0.0f;
    const bool none = metal::max(absgam, absalp) == 0.0f;
    const T sine = none ? one<T>() : -conj(gamma);
    const T cosine = none ? zero<T>() : conj(alpha);
    const float s1 = metal::max(modulus(sine), modulus(cosine));
    s = sine / s1;
    c = cosine / s1;
    const float tmp = metal::sqrt(lstsq_abs2(s) + lstsq_abs2(c));
    s = s / tmp;
    c = c / tmp;
    return;
  }
  if (absgam <= kLstsqEps * absest) {
    s = zero<T>();
    c = one<T>();
    sestpr = absgam;
    return;
  }
  if (absalp <= kLstsqEps * absest) {
    const bool grow = absgam <= absest;
    s = grow ? zero<T>() : one<T>();
    c = grow ? one<T>() : zero<T>();
    sestpr = grow ? absgam : absest;
    return;
  }
  if (absest <= kLstsqEps * absalp || absest <= kLstsqEps * absgam) {
    const float big = metal::max(absgam, absalp), small = metal::min(absgam, absalp);
    const float tmp = small / big;
    const float scl = metal::sqrt(1.0f + tmp * tmp);
    sestpr = absgam <= absalp ? absest * (tmp / scl) : absest / scl;
    s = -(conj(gamma) / big) / scl;
    c = (conj(alpha) / big) / scl;
    return;
  }
  const float zeta1 = absalp / absest, zeta2 = absgam / absest;
  const float norma = metal::max(1.0f + zeta1 * zeta1 + zeta1 * zeta2,
                                 zeta1 * zeta2 + zeta2 * zeta2);
  const float test = 1.0f + 2.0f * (zeta1 - zeta2) * (zeta1 + zeta2);
  T sine, cosine;
  if (test >= 0.0f) {  // the root is close to zero: computed directly
    const float b = (zeta1 * zeta1 + zeta2 * zeta2 + 1.0f) * 0.5f;
    const float cc = zeta2 * zeta2;
    const float t = cc / (b + metal::sqrt(metal::fabs(b * b - cc)));
    sine = (alpha / absest) / (1.0f - t);
    cosine = -(gamma / absest) / t;
    sestpr = metal::sqrt(t + 4.0f * kLstsqEps * kLstsqEps * norma) * absest;
  } else {  // the root is closer to one: shifted by it
    const float b = (zeta2 * zeta2 + zeta1 * zeta1 - 1.0f) * 0.5f;
    const float cc = zeta1 * zeta1;
    const float t = b >= 0.0f ? -cc / (b + metal::sqrt(b * b + cc)) : b - metal::sqrt(b * b + cc);
    sine = -(alpha / absest) / t;
    cosine = -(gamma / absest) / (1.0f + t);
    sestpr = metal::sqrt(1.0f + t + 4.0f * kLstsqEps * kLstsqEps * norma) * absest;
  }
  const float tmp = metal::sqrt(lstsq_abs2(sine) + lstsq_abs2(cosine));
  s = sine / tmp;
  c = cosine / tmp;
}

}  // namespace mpsl

// xGELSY of one matrix per threadgroup (see the section comment above). Grid: (nthreads, batch),
// nthreads a multiple of kSimdWidth, at most kLstsqMaxThreads.
template <typename T>
[[kernel]] void lstsq_gelsy(
    device T* a [[buffer(0)]],            // (batch, m, n): overwritten by the factorisation
    device T* bw [[buffer(1)]],           // (batch, max(m, n), k): B in the first m rows; work
    device T* x [[buffer(2)]],            // (batch, n, k): the solution
    device int* rank [[buffer(3)]],       // (batch)
    device int* jpvt [[buffer(4)]],       // (batch, n) work: the column permutation
    device float* norms [[buffer(5)]],    // (batch, 2, n) work: LAPACK's vn1, vn2
    device T* wt [[buffer(6)]],           // (batch, n, min(m, n)) work: W and its QR
    device T* tau2 [[buffer(7)]],         // (batch, min(m, n)) work: the tau of W's QR
    device T* ice [[buffer(8)]],          // (batch, 2, min(m, n)) work: laic1's two vectors
    constant mpsl::LstsqParams& p [[buffer(9)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup T shared[3];
  threadgroup int flags[2];
  threadgroup int pivot[1];
  threadgroup int rank_shared[1];

  const long e = long(group.y);
  const long m = p.m, n = p.n, k = p.k;
  const long mn = m < n ? m : n;
  const long rows_b = m > n ? m : n;
  const uint nt = tpg.x;
  device T* A = a + e * m * n;
  device T* B = bw + e * rows_b * k;
  device T* X = x + e * n * k;
  device int* piv = jpvt + e * n;
  device float* vn1 = norms + e * 2 * n;
  device float* vn2 = vn1 + n;
  device T* W = wt + e * n * mn;
  device T* tw = tau2 + e * mn;
  device T* xmin = ice + e * 2 * mn;
  device T* xmax = xmin + mn;

  // 1. QR with column pivoting (laqp2), Q^H applied to B.
  for (long c = long(tid); c < n; c += long(nt)) {
    piv[c] = int(c);
    vn1[c] = lstsq_nrm2(A + c, n, m);
    vn2[c] = vn1[c];
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  for (long i = 0; i < mn; ++i) {
    if (tid == 0) {
      long best = i;
      float largest = vn1[i];
      for (long c = i + 1; c < n; ++c) {
        if (vn1[c] > largest) {
          largest = vn1[c];
          best = c;
        }
      }
      pivot[0] = int(best);
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    const long pvt = long(pivot[0]);
    if (pvt != i) {
      for (long r = long(tid); r < m; r += long(nt)) {
        const T held = A[r * n + pvt];
        A[r * n + pvt] = A[r * n + i];
        A[r * n + i] = held;
      }
      if (tid == 0) {
        const int held = piv[pvt];
        piv[pvt] = piv[i];
        piv[i] = held;
        vn1[pvt] = vn1[i];
        vn2[pvt] = vn2[i];
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    device T* v = A + i * n + i;
    const T ctau = conj(lstsq_larfg(v, n, m - i, shared, flags, tid, nt));
    const long right = n - i - 1;  // columns of A right of the pivot, then the k of B
    for (long q = long(tid); q < right + k; q += long(nt)) {
      if (q < right) {
        lstsq_apply(v, n, m - i, ctau, v + 1 + q, n);
      } else {
        lstsq_apply(v, n, m - i, ctau, B + i * k + (q - right), k);
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    for (long c = i + 1 + long(tid); c < n; c += long(nt)) {
      if (vn1[c] != 0.0f) {
        const float ratio = modulus(A[i * n + c]) / vn1[c];
        const float temp = metal::max(1.0f - ratio * ratio, 0.0f);
        const float last = vn1[c] / vn2[c];
        if (temp * last * last <= kLstsqTol3z) {
          vn1[c] = i + 1 < m ? lstsq_nrm2(A + (i + 1) * n + c, n, m - i - 1) : 0.0f;
          vn2[c] = vn1[c];
        } else {
          vn1[c] *= metal::sqrt(temp);
        }
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  }

  // 2. The numerical rank (xGELSY's incremental condition estimation).
  if (tid == 0) {
    long r = 0;
    if (mn > 0 && modulus(A[0]) != 0.0f) {
      r = 1;
      float smax = modulus(A[0]), smin = smax;
      xmin[0] = one<T>();
      xmax[0] = one<T>();
      for (long i = 1; i < mn; ++i) {
        T amin = zero<T>(), amax = zero<T>();
        for (long l = 0; l < i; ++l) {
          amin += mul(conj(xmin[l]), A[l * n + i]);
          amax += mul(conj(xmax[l]), A[l * n + i]);
        }
        const T gamma = A[i * n + i];
        float sminpr, smaxpr;
        T s1, c1, s2, c2;
        lstsq_laic1_min(amin, smin, gamma, sminpr, s1, c1);
        lstsq_laic1_max(amax, smax, gamma, smaxpr, s2, c2);
        if (!(smaxpr * p.rcond <= sminpr)) {
          break;
        }
        for (long l = 0; l < i; ++l) {
          xmin[l] = mul(s1, xmin[l]);
          xmax[l] = mul(s2, xmax[l]);
        }
        xmin[i] = c1;
        xmax[i] = c2;
        smin = sminpr;
        smax = smaxpr;
        r = i + 1;
      }
    }
    rank_shared[0] = int(r);
    rank[e] = int(r);
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  const long r = long(rank_shared[0]);

  // 3. The minimum-norm solution through the QR of W = [R11 R12]^H (n x r, row stride mn).
  for (long idx = long(tid); idx < n * r; idx += long(nt)) {
    const long j = idx / r, i = idx - j * r;
    W[j * mn + i] = j >= i ? conj(A[i * n + j]) : zero<T>();
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  for (long i = 0; i < r; ++i) {
    device T* w = W + i * mn + i;
    const T t2 = lstsq_larfg(w, mn, n - i, shared, flags, tid, nt);
    if (tid == 0) {
      tw[i] = t2;
    }
    for (long c = i + 1 + long(tid); c < r; c += long(nt)) {
      lstsq_apply(w, mn, n - i, conj(t2), w + (c - i), mn);
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  }
  for (long c = long(tid); c < k; c += long(nt)) {
    device T* y = B + c;  // (Q^H B)[:, c], then y
    for (long i = 0; i < r; ++i) {  // R2^H z = c[0:r], forward substitution
      T s = y[i * k];
      for (long l = 0; l < i; ++l) {
        s = sub_mul(s, conj(W[l * mn + i]), y[l * k]);
      }
      y[i * k] = div(s, conj(W[i * mn + i]));
    }
    for (long i = r; i < n; ++i) {
      y[i * k] = zero<T>();
    }
    for (long step = 0; step < r; ++step) {  // y = H2_0 ... H2_{r-1} [z; 0]
      const long i = r - 1 - step;
      lstsq_apply(W + i * mn + i, mn, n - i, tw[i], y + i * k, k);
    }
    for (long i = 0; i < n; ++i) {
      X[long(piv[i]) * k + c] = y[i * k];
    }
  }
}
