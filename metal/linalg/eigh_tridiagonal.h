// Hermitian eigensolver for large matrices: Householder reduction to a real tridiagonal T, then
// the implicit QL / QR iteration on T with its rotations applied to the eigenvectors (LAPACK's
// xHETD2 and xSTEQR), every stage spread over many threadgroups per matrix.
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
//   eigh_tridiag_ql    eigh: xSTEQR on (d, e): the serial part (shifts, deflation, the rotations of
//                      one sweep) runs on one thread of every threadgroup, redundantly and
//                      with the same bits, while the other simdgroups apply the previous
//                      sweep's rotations to their own rows of Z; so no rotation is stored
//                      beyond two sweeps and no launch waits for another.
// Shifts, deflation tests, the 2 x 2 blocks (laev2), the choice of QL or QR per block and the
// limit of 30 n sweeps are xSTEQR's; a block whose norm is outside [2^-15, 2^62] (xSTEQR's
// ssfmin and ssfmax in float32) is scaled by a power of two (exact) rather than by a ratio.
// Eigenvalues are sorted ascending with their vectors (ranks, ties by index).
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
  long groups;   // threadgroups per matrix that own scratch (eigh_tridiag_step at k = 0, ql)
  long lower;    // 1: the lower triangle of A is read (UPLO='L'), 0: the upper one
  long vectors;  // 1 (eigh): eigh_tridiag_step stores the reflectors
};

// xSTEQR's MAXIT: at most this many sweeps per eigenvalue, 30 n in all.
constant constexpr int kTridiagMaxSweepsPerValue = 30;
// float32's relative machine precision, LAPACK's slamch('E') = 2^-24.
constant constexpr float kTridiagEps = 5.9604645e-8f;
// Blocks whose largest entry lies outside [kTridiagScaleMin, kTridiagScaleMax] are scaled first
// (xSTEQR's sqrt(safmin) / eps^2 and sqrt(safmax) / 3 in float32, as powers of two).
constant constexpr float kTridiagScaleMin = 3.0517578e-5f;  // 2^-15
constant constexpr float kTridiagScaleMax = 4.6116860e18f;  // 2^62
// Floats of eigh_tridiag_ql's scratch per threadgroup and order: two sweeps of (c, s), the
// ranks, and d and e where they are not staged.
constant constexpr int kTridiagQlScratch = 7;
// eigh_tridiag_ql stages d and e in threadgroup memory up to this order (31 KiB).
constant constexpr int kTridiagQlStageMax = 3968;
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

// ---- xSTEQR's scalar kernels ----

// sqrt(1 + g^2) without overflow (lapy2(g, 1)).
inline float tridiag_hypot1(float g) {
  const float ag = metal::fabs(g);
  if (ag > 1.0f) {
    const float r = 1.0f / ag;
    return ag * metal::sqrt(1.0f + r * r);
  }
  return metal::sqrt(1.0f + ag * ag);
}

// The plane rotation of LAPACK 3.10's lartg (Anderson, "Algorithm 978: Safe scaling in the
// Level 1 BLAS", 2017): c f + s g = r, -s f + c g = 0, c >= 0, r with f's sign. The common case
// (both moduli in [1e-18, 1e18], where f^2 + g^2 neither underflows nor overflows) is tested
// first and alone: on the QL iteration's serial path every branch is a wait.
inline void tridiag_lartg(float f, float g, thread float& c, thread float& s, thread float& r) {
  const float f1 = metal::fabs(f), g1 = metal::fabs(g);
  if (metal::min(f1, g1) > 1.0e-18f && metal::max(f1, g1) < 1.0e18f) {
    // one division: c and s through 1 / d
    const float d = metal::sqrt(f * f + g * g), inv = 1.0f / d;
    c = f1 * inv;
    r = metal::copysign(d, f);
    s = g * metal::copysign(inv, f);
    return;
  }
  if (g == 0.0f) {
    c = 1.0f;
    s = 0.0f;
    r = f;
    return;
  }
  if (f == 0.0f) {
    c = 0.0f;
    s = metal::copysign(1.0f, g);
    r = g1;
    return;
  }
  const float u = metal::min(1.0e38f, metal::max(kSafeMin, metal::max(f1, g1)));
  const float fs = f / u, gs = g / u;
  const float d = metal::sqrt(fs * fs + gs * gs);
  c = metal::fabs(fs) / d;
  r = metal::copysign(d, f);
  s = gs / r;
  r *= u;
}

// The eigensystem of [[a, b], [b, c]] (LAPACK's laev2): rt1 the eigenvalue of larger modulus,
// rt2 the other, (cs, sn) rt1's unit eigenvector.
inline void tridiag_laev2(float a, float b, float c, thread float& rt1, thread float& rt2,
                          thread float& cs, thread float& sn) {
  const float sm = a + c, df = a - c, adf = metal::fabs(df), tb = b + b, ab = metal::fabs(tb);
  const bool a_larger = metal::fabs(a) > metal::fabs(c);
  const float acmx = a_larger ? a : c, acmn = a_larger ? c : a;
  float rt;
  if (adf > ab) {
    const float q = ab / adf;
    rt = adf * metal::sqrt(1.0f + q * q);
  } else if (adf < ab) {
    const float q = adf / ab;
    rt = ab * metal::sqrt(1.0f + q * q);
  } else {
    rt = ab * 1.41421356f;
  }
  int sgn1;
  if (sm < 0.0f) {
    rt1 = 0.5f * (sm - rt);
    sgn1 = -1;
    rt2 = (acmx / rt1) * acmn - (b / rt1) * b;
  } else if (sm > 0.0f) {
    rt1 = 0.5f * (sm + rt);
    sgn1 = 1;
    rt2 = (acmx / rt1) * acmn - (b / rt1) * b;
  } else {
    rt1 = 0.5f * rt;
    rt2 = -0.5f * rt;
    sgn1 = 1;
  }
  int sgn2;
  float cs0;
  if (df >= 0.0f) {
    cs0 = df + rt;
    sgn2 = 1;
  } else {
    cs0 = df - rt;
    sgn2 = -1;
  }
  if (metal::fabs(cs0) > ab) {
    const float ct = -tb / cs0;
    sn = 1.0f / metal::sqrt(1.0f + ct * ct);
    cs = ct * sn;
  } else if (ab == 0.0f) {
    cs = 1.0f;
    sn = 0.0f;
  } else {
    const float tn = -cs0 / tb;
    cs = 1.0f / metal::sqrt(1.0f + tn * tn);
    sn = tn * cs;
  }
  if (sgn1 == sgn2) {
    const float tn = cs;
    cs = -sn;
    sn = tn;
  }
}

// One sweep of rotations as the appliers read it: planes (j, j + 1) for j = lo, lo - 1, ...
// (backward, a QL sweep) or lo, lo + 1, ... (forward, QR), count of them, (c, s) in rc / rs in
// that order, applied as LAPACK's lasr('R', 'V', ...): z_j+1 <- c z_j+1 - s z_j, z_j <- s z_j+1
// + c z_j.
struct TridiagSweep {
  int lo;
  int count;
  int forward;
  int done;
};

// xSTEQR's control state, advanced by tridiag_next_sweep (0-based indices).
struct TridiagState {
  int l1;       // first row of the part not yet split into blocks
  int l, lend;  // the block being iterated: from l towards lend
  int lsv, lendsv;
  int jtot, nmaxit;
  int scale;    // the block was multiplied by 2^-scale
  int info;     // nonzero e left after nmaxit sweeps (LAPACK's info)
  bool block;   // a block is being iterated
  bool ql;      // QL (lend > l) or QR
  bool stalled; // the sweep limit was reached in this block
};

inline void tridiag_begin(thread TridiagState& st, int n) {
  st.l1 = 0;
  st.l = st.lend = st.lsv = st.lendsv = 0;
  st.jtot = 0;
  st.nmaxit = kTridiagMaxSweepsPerValue * n;
  st.scale = 0;
  st.info = 0;
  st.block = false;
  st.ql = true;
  st.stalled = false;
}

// Runs xSTEQR's control flow on (d, e) until it has produced one sweep of rotations (returned
// in sw, rotations in rc / rs) or finished (sw.done). One thread calls it; every loop is
// bounded (a pass either returns, or moves l or l1 on, or ends a block).
template <typename P>
inline void tridiag_next_sweep(thread TridiagState& st, P d, P e, device float* rc,
                               device float* rs, int n, threadgroup TridiagSweep& sw) {
  const float eps = kTridiagEps, eps2 = eps * eps;
  sw.done = 0;
  for (int pass = 0; pass < 4 * n + 16; ++pass) {
    if (!st.block) {
      if (st.l1 >= n) {
        sw.done = 1;
        return;
      }
      if (st.l1 > 0) {
        e[st.l1 - 1] = 0.0f;
      }
      int m = n - 1;
      for (int i = st.l1; i < n - 1; ++i) {
        const float tst = metal::fabs(e[i]);
        if (tst == 0.0f ||
            tst <= metal::sqrt(metal::fabs(d[i])) * metal::sqrt(metal::fabs(d[i + 1])) * eps) {
          e[i] = 0.0f;
          m = i;
          break;
        }
      }
      st.l = st.l1;
      st.lsv = st.l;
      st.lend = m;
      st.lendsv = m;
      st.l1 = m + 1;
      if (st.lend == st.l) {
        continue;
      }
      float anorm = 0.0f;
      for (int i = st.l; i <= st.lend; ++i) {
        anorm = metal::max(anorm, metal::fabs(d[i]));
        if (i < st.lend) {
          anorm = metal::max(anorm, metal::fabs(e[i]));
        }
      }
      if (anorm == 0.0f) {
        continue;
      }
      st.scale = 0;
      if (anorm < kTridiagScaleMin || anorm > kTridiagScaleMax) {
        metal::frexp(anorm, st.scale);
        for (int i = st.l; i <= st.lend; ++i) {
          d[i] = metal::ldexp(d[i], -st.scale);
          if (i < st.lend) {
            e[i] = metal::ldexp(e[i], -st.scale);
          }
        }
      }
      if (metal::fabs(d[st.lend]) < metal::fabs(d[st.l])) {
        st.lend = st.lsv;
        st.l = st.lendsv;
      }
      st.ql = st.lend > st.l;
      st.stalled = false;
      st.block = true;
    }
    const int l = st.l, lend = st.lend;
    if (st.stalled || (st.ql ? l > lend : l < lend)) {
      // The block is done (or out of sweeps): undo its scaling.
      if (st.scale != 0) {
        for (int i = st.lsv; i <= st.lendsv; ++i) {
          d[i] = metal::ldexp(d[i], st.scale);
          if (i < st.lendsv) {
            e[i] = metal::ldexp(e[i], st.scale);
          }
        }
      }
      st.block = false;
      if (st.jtot >= st.nmaxit) {
        for (int i = 0; i < n - 1; ++i) {
          st.info += e[i] != 0.0f ? 1 : 0;
        }
        sw.done = 1;
        return;
      }
      continue;
    }
    if (st.ql) {
      int m = lend;
      for (int i = l; i < lend; ++i) {
        const float t = metal::fabs(e[i]);
        if (t * t <= (eps2 * metal::fabs(d[i])) * metal::fabs(d[i + 1]) + kSafeMin) {
          m = i;
          break;
        }
      }
      if (m < lend) {
        e[m] = 0.0f;
      }
      float p = d[l];
      if (m == l) {  // an eigenvalue
        st.l = l + 1;
        continue;
      }
      if (m == l + 1) {  // a 2 x 2 block, solved exactly
        float rt1, rt2, c, s;
        tridiag_laev2(d[l], e[l], d[l + 1], rt1, rt2, c, s);
        rc[0] = c;
        rs[0] = s;
        d[l] = rt1;
        d[l + 1] = rt2;
        e[l] = 0.0f;
        st.l = l + 2;
        sw.lo = l;
        sw.count = 1;
        sw.forward = 0;
        return;
      }
      if (st.jtot == st.nmaxit) {
        st.stalled = true;
        continue;
      }
      ++st.jtot;
      float g = (d[l + 1] - p) / (2.0f * e[l]);
      float r = tridiag_hypot1(g);
      g = d[m] - p + e[l] / (g + metal::copysign(r, g));
      float s = 1.0f, c = 1.0f;
      p = 0.0f;
      int t = 0;
      // d[i + 1] is the previous pass's d[i] (read, not yet written): carried in a register,
      // and the next pass's d and e are loaded before this pass's stores, off the serial path.
      float d_hi = d[m], d_i = d[m - 1], e_i = e[m - 1];
      for (int i = m - 1; i >= l; --i) {
        const float d_next = i > l ? d[i - 1] : 0.0f, e_next = i > l ? e[i - 1] : 0.0f;
        const float f = s * e_i, b = c * e_i;
        tridiag_lartg(g, f, c, s, r);
        if (i != m - 1) {
          e[i + 1] = r;
        }
        g = d_hi - p;
        r = (d_i - g) * s + 2.0f * c * b;
        p = s * r;
        d[i + 1] = g + p;
        g = c * r - b;
        rc[t] = c;
        rs[t] = -s;
        ++t;
        d_hi = d_i;
        d_i = d_next;
        e_i = e_next;
      }
      d[l] -= p;
      e[l] = g;
      sw.lo = m - 1;
      sw.count = m - l;
      sw.forward = 0;
      return;
    }
    int m = lend;
    for (int i = l; i > lend; --i) {
      const float t = metal::fabs(e[i - 1]);
      if (t * t <= (eps2 * metal::fabs(d[i])) * metal::fabs(d[i - 1]) + kSafeMin) {
        m = i;
        break;
      }
    }
    if (m > lend) {
      e[m - 1] = 0.0f;
    }
    float p = d[l];
    if (m == l) {
      st.l = l - 1;
      continue;
    }
    if (m == l - 1) {
      float rt1, rt2, c, s;
      tridiag_laev2(d[l - 1], e[l - 1], d[l], rt1, rt2, c, s);
      rc[0] = c;
      rs[0] = s;
      d[l - 1] = rt1;
      d[l] = rt2;
      e[l - 1] = 0.0f;
      st.l = l - 2;
      sw.lo = l - 1;
      sw.count = 1;
      sw.forward = 1;
      return;
    }
    if (st.jtot == st.nmaxit) {
      st.stalled = true;
      continue;
    }
    ++st.jtot;
    float g = (d[l - 1] - p) / (2.0f * e[l - 1]);
    float r = tridiag_hypot1(g);
    g = d[m] - p + e[l - 1] / (g + metal::copysign(r, g));
    float s = 1.0f, c = 1.0f;
    p = 0.0f;
    int t = 0;
    float d_lo = d[m], d_i1 = d[m + 1], e_i = e[m];  // as in the QL pass, mirrored
    for (int i = m; i <= l - 1; ++i) {
      const float d_next = i < l - 1 ? d[i + 2] : 0.0f, e_next = i < l - 1 ? e[i + 1] : 0.0f;
      const float f = s * e_i, b = c * e_i;
      tridiag_lartg(g, f, c, s, r);
      if (i != m) {
        e[i - 1] = r;
      }
      g = d_lo - p;
      r = (d_i1 - g) * s + 2.0f * c * b;
      p = s * r;
      d[i] = g + p;
      g = c * r - b;
      rc[t] = c;
      rs[t] = s;
      ++t;
      d_lo = d_i1;
      d_i1 = d_next;
      e_i = e_next;
    }
    d[l] -= p;
    e[l - 1] = g;
    sw.lo = m;
    sw.count = l - m;
    sw.forward = 1;
    return;
  }
  sw.done = 1;  // not reached: every pass above advances
}

// Applies one sweep to row r of Z, held as column r of Zt (z points at Zt[0][r], stride n):
// the value shared by consecutive planes stays in a register, so a rotation loads and stores
// one entry, and kTridiagApplyBatch entries are loaded before any of their rotations (each is
// stored only by a later rotation, so the loads may run ahead of the stores; the compiler may
// not move them there itself, the pointers could alias).
constant constexpr int kTridiagApplyBatch = 8;

inline void tridiag_apply(device float* z, int n, TridiagSweep sw, device const float* rc,
                          device const float* rs) {
  const int dir = sw.forward != 0 ? 1 : -1;
  // QL (backward): planes (j, j + 1), j = lo, lo - 1, ...: the carry is z_j+1, the loaded
  // entry z_j. QR (forward): j = lo, lo + 1, ...: the carry is z_j, the loaded entry z_j+1.
  const int first = sw.forward != 0 ? sw.lo : sw.lo + 1;
  float carry = z[first * n];
  for (int t0 = 0; t0 < sw.count; t0 += kTridiagApplyBatch) {
    float zl[kTridiagApplyBatch], cs[kTridiagApplyBatch], sn[kTridiagApplyBatch];
    for (int u = 0; u < kTridiagApplyBatch; ++u) {
      const int t = t0 + u;
      if (t < sw.count) {
        zl[u] = z[(first + dir * (t + 1)) * n];
        cs[u] = rc[t];
        sn[u] = rs[t];
      }
    }
    for (int u = 0; u < kTridiagApplyBatch; ++u) {
      const int t = t0 + u;
      if (t < sw.count) {
        const float c = cs[u], s = sn[u];
        if (sw.forward != 0) {  // z_j = carry, z_j+1 = zl: store z_j, carry z_j+1
          z[(first + t) * n] = s * zl[u] + c * carry;
          carry = c * zl[u] - s * carry;
        } else {  // z_j+1 = carry, z_j = zl: store z_j+1, carry z_j
          z[(first - t) * n] = c * carry - s * zl[u];
          carry = s * carry + c * zl[u];
        }
      }
    }
  }
  z[(first + dir * sw.count) * n] = carry;
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

// The body of eigh_tridiag_ql with d and e at P (threadgroup memory up to kTridiagQlStageMax,
// device memory past it).
template <typename T, typename P>
inline void tridiag_ql(device const float* de, device const int* flags, device float* w,
                       device T* v, device int* status, device float* zt, device float* work,
                       constant TridiagParams& p, P d, P e, threadgroup TridiagSweep* sweeps,
                       long b, int g, uint tid, uint nthreads) {
  const int n = int(p.n);
  const long nn = long(n) * n;
  const int appliers = int(nthreads) - kSimdWidth;
  const int r = g * appliers + int(tid) - kSimdWidth;
  const bool owner = int(tid) >= kSimdWidth && r < n;
  device float* rc = work + (b * p.groups + g) * kTridiagQlScratch * n;  // two sweeps of c
  device float* rs = rc + 2 * n;                                        // and of s
  device float* rank = rs + 2 * n;
  device float* z = zt + b * nn + (owner ? r : 0);
  const auto mem = metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup;
  if (flags[b * 2] != 0) {
    for (int i = int(tid); i < n && g == 0; i += int(nthreads)) {
      w[b * n + i] = NAN;
    }
    if (owner) {
      for (int i = 0; i < n; ++i) {
        v[b * nn + long(r) * n + i] = eigh_from_real<T>(NAN);
      }
    }
    if (g == 0 && tid == 0) {
      status[b * kEighStatusInts] = n;
      status[b * kEighStatusInts + 1] = 0;
    }
    return;
  }
  for (int i = int(tid); i < n; i += int(nthreads)) {
    d[i] = de[b * 2 * n + i];
    e[i] = de[b * 2 * n + n + i];
  }
  if (owner) {
    for (int i = 0; i < n; ++i) {
      z[i * n] = i == r ? 1.0f : 0.0f;
    }
  }
  threadgroup_barrier(mem);
  TridiagState st;
  tridiag_begin(st, n);
  if (tid == 0) {
    tridiag_next_sweep(st, d, e, rc, rs, n, sweeps[0]);
  }
  threadgroup_barrier(mem);
  // A sweep per pass (the bound is xSTEQR's 30 n sweeps plus the 2 x 2 blocks and a margin):
  // the generator writes sweep s + 1 into the other half of rc / rs while the owners apply s.
  const int bound = st.nmaxit + n + 2;
  for (int s = 0; s < bound; ++s) {
    const int cur = s & 1;
    const TridiagSweep sw = sweeps[cur];
    if (sw.done != 0) {
      break;
    }
    if (tid == 0) {
      tridiag_next_sweep(st, d, e, rc + (1 - cur) * n, rs + (1 - cur) * n, n, sweeps[1 - cur]);
    } else if (owner) {
      tridiag_apply(z, n, sw, rc + cur * n, rs + cur * n);
    }
    threadgroup_barrier(mem);
  }
  for (int i = int(tid); i < n; i += int(nthreads)) {
    const float di = d[i];
    int position = 0;
    for (int j = 0; j < n; ++j) {
      position += j == i ? 0 : eigh_rank(di, i, d[j], j);
    }
    rank[i] = float(position);
    if (g == 0) {
      w[b * n + position] = metal::ldexp(di, flags[b * 2 + 1]);
    }
  }
  threadgroup_barrier(mem);
  if (owner) {
    for (int i = 0; i < n; ++i) {
      v[b * nn + long(r) * n + int(rank[i])] = eigh_from_real<T>(z[i * n]);
    }
  }
  if (g == 0 && tid == 0) {
    status[b * kEighStatusInts] = st.info;
    status[b * kEighStatusInts + 1] = st.jtot;
  }
}

}  // namespace mpsl

// xSTEQR on (d, e) of every matrix and the eigenvectors of T. Grid: (threads * p.groups,
// batch). Simdgroup 0's first thread runs the iteration (every threadgroup the same); the other
// simdgroups of threadgroup g own rows g (threads - kSimdWidth) + i of Z, held transposed in zt
// (batch, n, n: zt[i][r] = Z[r][i], so that a rotation's loads are contiguous across threads).
// d and e sit in threadgroup memory up to kTridiagQlStageMax (the serial loop reads them at
// every rotation), in work past it. Outputs: w (batch, n) ascending, multiplied back by 2^e;
// v (batch, n, n) Z's columns in that order; status (batch, kEighStatusInts):
// LAPACK's info (0, or the off-diagonal entries left after 30 n sweeps; n for non-finite input)
// and the QL / QR sweeps run. work holds kTridiagQlScratch n floats per (matrix, threadgroup).
template <typename T>
[[kernel]] void eigh_tridiag_ql(
    device const float* de [[buffer(0)]],
    device const int* flags [[buffer(1)]],
    device float* w [[buffer(2)]],
    device T* v [[buffer(3)]],
    device int* status [[buffer(4)]],
    device float* zt [[buffer(5)]],
    device float* work [[buffer(6)]],
    constant mpsl::TridiagParams& p [[buffer(7)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup TridiagSweep sweeps[2];
  threadgroup float stage[2 * kTridiagQlStageMax];
  const int n = int(p.n);
  const long b = long(tgpos.y);
  const int g = int(tgpos.x);
  if (n <= kTridiagQlStageMax) {
    tridiag_ql<T>(de, flags, w, v, status, zt, work, p, &stage[0], &stage[n], sweeps, b, g,
                  tpos.x, tpg.x);
  } else {
    device float* de_work = work + (b * p.groups + g) * kTridiagQlScratch * n + 5 * n;
    tridiag_ql<T>(de, flags, w, v, status, zt, work, p, de_work, de_work + n, sweeps, b, g,
                  tpos.x, tpg.x);
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
// count. The iteration of xSTEQR is serial; this is n independent ones. Grid: (threads *
// groups, batch), one thread per eigenvalue. de and flags as eigh_tridiag_ql reads them; w (batch,
// n) ascending, multiplied back by 2^e; status (batch, kEighStatusInts) = [0, bisection steps of
// eigenvalue 0] (n, 0 for non-finite input, with NaN eigenvalues).
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
