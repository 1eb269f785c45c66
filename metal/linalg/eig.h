// Nonsymmetric eigensolver (torch.linalg.eig / eigvals): balance, Hessenberg reduction, Schur form
// by Francis' QR iteration, eigenvectors by back-substitution, all in one threadgroup per matrix.
//
// A = V diag(w) V^-1 with w and V complex. The stages follow LAPACK's xGEEV:
//   1. Exact scaling: A is multiplied by 2^-e with 2^(e-1) <= max|a_ij| < 2^e (the eigenvalues are
//      multiplied back; the vectors do not change), so 1e-30 and 1e30 keep full accuracy.
//   2. Balancing (xGEBAL): rows and columns that isolate an eigenvalue are permuted to the ends,
//      leaving an active block [ilo, ihi]; its rows and columns are scaled by powers of 2 until
//      their 2-norms are within a factor 2 (Parlett and Reinsch 1969).
//   3. Hessenberg reduction of the active block by Householder reflectors (xGEHD2), and Q formed
//      explicitly (xORGHR) when vectors are wanted.
//   4. Schur form of the Hessenberg matrix (xLAHQR): real input by the Francis double-shift QR
//      iteration in real arithmetic, ending in the real Schur form (2 x 2 blocks standardised by
//      xLANV2 hold the complex pairs); complex input by the single-shift complex QR iteration
//      (Wilkinson shift). Deflation by the criterion of Ahues and Tisseur (1997) as LAPACK's,
//      exceptional shifts every kEigExceptional iterations without a deflation, and at most
//      kEigItmaxPerOrder * max(kEigItmaxMinOrder, ihi - ilo + 1) iterations per eigenvalue, as
//      LAPACK's itmax. The complex iteration does not keep the subdiagonal real (zlahqr does, to
//      save flops): its reflectors are general complex ones. In eig_device, real windows of at
//      least kEigMultishiftMinOrder rows take multishift sweeps (xLAQR0 / xLAQR5 without
//      aggressive early deflation): a chain of double-shift bulges chased together.
//   5. Eigenvectors (xTREVC): for each eigenvalue lambda_k, back-substitution in (T - lambda_k I)
//      x = 0 with x_k = 1 (2 x 2 blocks of the real Schur form solved by Cramer's rule, forward
//      stable for order 2), divisors below smin = max(ulp |lambda_k|, smlnum) replaced by smin
//      as LAPACK does, and x rescaled by powers of 2 before it could overflow; then v = Q Z x,
//      the balancing undone (xGEBAK) and v normalised to unit 2-norm with its largest component
//      real (xGEEV's normalisation). For real input the second eigenvalue and vector of a complex
//      pair are the conjugates of the first (exactly), the first having positive imaginary part.
//
// Every loop has a bounded trip count. Non-finite input gives NaN eigenvalues and vectors (found
// before any work); a matrix whose QR iteration does not converge within the bound gets NaN
// results and info = the 1-based index of the eigenvalue that failed (LAPACK's info > 0).
//
// All threads run the same control flow on the same shared data (every decision is computed
// redundantly by every thread from memory that no thread writes until the next barrier); the
// work on rows and columns is split among the threads.
//
// Kernels (grid (threads, batch), one threadgroup per matrix):
//   eig_group<T>   H (and Z) staged in threadgroup memory (see kEigStageBytes);
//   eig_device<T>  H and Z in a device workspace, for any order.
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Arguments of the eig kernels, passed by the host as one list of int64.
struct EigParams {
  long n;        // order of the matrices
  long batch;    // number of matrices
  long vectors;  // 1: eigenvectors are computed and written
  long aed;      // 1: eig_device's multishift path deflates aggressively (eig_aed)
};

// xLAHQR's iteration bound: kEigItmaxPerOrder * max(kEigItmaxMinOrder, order of the block).
constant constexpr int kEigItmaxPerOrder = 30;
constant constexpr int kEigItmaxMinOrder = 10;
// Iterations without a deflation between exceptional shifts (xLAHQR's kexsh).
constant constexpr int kEigExceptional = 10;
// xLAHQR's exceptional-shift constants (dat1, dat2).
constant constexpr float kEigExcDat1 = 0.75f;
constant constexpr float kEigExcDat2 = -0.4375f;
// float32's relative machine precision, LAPACK's slamch('P') = 2^-23.
constant constexpr float kEigUlp = 1.1920929e-7f;
// xGEBAL: a scaling is kept only if it reduces the row + column norm below this fraction.
constant constexpr float kEigBalanceFactor = 0.95f;
// Bound on the balancing sweeps (a few suffice; the bound only guarantees termination).
constant constexpr int kEigBalanceMaxSweeps = 64;
// Bound on xGEBAL's doublings and halvings of one scaling factor (float's exponent range).
constant constexpr int kEigBalanceMaxSteps = 256;
// xLANV2: 4 eps decides between real and complex eigenvalues of a 2 x 2 block.
constant constexpr float kEigLanv2Multpl = 4.0f;
// xLANV2's rescaling bounds safmn2 = 2^-51 (float) and the bound on its rescalings.
constant constexpr float kEigLanv2SafMin2 = 4.4408921e-16f;
constant constexpr int kEigLanv2MaxRescale = 20;
// The back-substitution keeps |x| below 2^kEigGrowthExp by exact rescaling of x.
constant constexpr int kEigGrowthExp = 64;
// Multishift sweeps (eig_device, real input): kEigShifts shifts a sweep, chased as a chain of
// kEigShifts / 2 double-shift bulges kEigBulgeRows rows apart, on active windows of at least
// kEigMultishiftMinOrder rows (smaller ones take xLAHQR's double-shift sweeps). The shifts are
// the eigenvalues of the trailing kEigShifts x kEigShifts block, found in threadgroup memory.
constant constexpr int kEigShifts = 20;
constant constexpr int kEigBulgeRows = 3;
constant constexpr int kEigMultishiftMinOrder = 60;
static_assert(kEigShifts % 2 == 0 && kEigMultishiftMinOrder >= kEigShifts + 3,
              "shifts come in pairs, and the window holds the shift block and a bulge above it");
static_assert(kEigBulgeRows * (kEigShifts / 2) <= kSimdWidth,
              "the right updates give each column of the chain a lane of one simdgroup");
// Aggressive early deflation (xLAQR3) before each multishift sweep: the order of its window at
// the bottom of the active block, 3/2 of the shifts a sweep as xLAQR0 takes it for large
// orders (IPARMQ's NW), small enough that the window's Schur form T, its Schur vectors V and
// the Hessenberg reduction's Q (kEigAedWindow^2 floats each) lie in threadgroup memory and
// that one simdgroup reorders T, a lane a row or a column.
constant constexpr int kEigAedWindow = 30;
static_assert(2 * kEigAedWindow == 3 * kEigShifts, "3/2 of the shifts, as xLAQR0's");
static_assert(kEigAedWindow <= kSimdWidth, "one simdgroup reorders the window's Schur form");
static_assert(kEigMultishiftMinOrder > kEigAedWindow, "the window starts below the active top");
// xLAQR0's NIBBLE: after a deflation window that deflated more than this percentage of its
// order, the next window comes without a sweep between them.
constant constexpr int kEigAedNibble = 14;
// Loads a thread issues together before their stores in eig_device's update loops (a store
// may alias the next load for all the compiler knows: one at a time, each waits for memory).
constant constexpr int kEigLoadBatch = 4;
// Bulges whose left-update entries a thread loads together (3 entries each).
constant constexpr int kEigChainBulges = 2;
static_assert((kEigShifts / 2) % kEigChainBulges == 0, "whole groups of bulges");
// The Hessenberg reduction's right update takes a simdgroup per row from this order (eig_group
// stages at most order 63, so its orders keep a thread per row).
constant constexpr int kEigRowsBySimdgroupMinOrder = 64;
// Threadgroup memory for H (and Z) in eig_group: n^2 elements each, so n <= 63 in float32 and
// n <= 44 in complex64 with vectors, 89 and 63 without.
constant constexpr int kEigStageBytes = 32256;
// Threads per threadgroup at most.
constant constexpr int kEigMaxThreads = 1024;

static_assert((2 * (kEigMaxThreads / kSimdWidth) + kEigShifts * kEigShifts + 4 * (kEigShifts / 2) +
               3 * kEigAedWindow * kEigAedWindow + 1) * sizeof(float) <=
                  kMaxThreadgroupMemoryBytes,
              "eig_device's threadgroup memory (reductions, shift block, bulges, window) fits");
static_assert(kEigStageBytes + 2 * (kEigMaxThreads / kSimdWidth) * sizeof(float) <=
                  kMaxThreadgroupMemoryBytes,
              "eig_group's threadgroup memory must fit");

// ---- element helpers (T = float or float2) ----

inline float eig_re(float a) { return a; }
inline float eig_re(float2 a) { return a.x; }
inline float eig_im(float a) { return 0.0f; }
inline float eig_im(float2 a) { return a.y; }
inline float2 eig_c(float a) { return float2(a, 0.0f); }
inline float2 eig_c(float2 a) { return a; }
inline bool eig_finite(float a) { return metal::isfinite(a); }
inline bool eig_finite(float2 a) { return metal::isfinite(a.x) && metal::isfinite(a.y); }
inline float eig_ldexp(float a, int e) { return metal::ldexp(a, e); }
inline float2 eig_ldexp(float2 a, int e) {
  return float2(metal::ldexp(a.x, e), metal::ldexp(a.y, e));
}
template <typename T> inline T eig_from(float2 a);
template <> inline float eig_from<float>(float2 a) { return a.x; }
template <> inline float2 eig_from<float2>(float2 a) { return a; }
// |a|^2 for real and complex.
inline float eig_abs2(float2 a) { return a.x * a.x + a.y * a.y; }

// sqrt of a complex number (principal branch), without overflow for the scaled entries here.
inline float2 eig_csqrt(float2 a) {
  const float m = modulus(a);
  if (m == 0.0f) {
    return float2(0.0f, 0.0f);
  }
  const float r = metal::sqrt(0.5f * (m + metal::fabs(a.x)));
  if (a.x >= 0.0f) {
    return float2(r, a.y / (2.0f * r));
  }
  return float2(metal::fabs(a.y) / (2.0f * r), a.y < 0.0f ? -r : r);
}

// sqrt(a^2 + b^2 + c^2) without overflow or underflow (xLAPY3).
inline float eig_hypot3(float a, float b, float c) {
  const float w = metal::max(metal::fabs(a), metal::max(metal::fabs(b), metal::fabs(c)));
  if (w == 0.0f) {
    return 0.0f;
  }
  const float x = a / w, y = b / w, z = c / w;
  return w * metal::sqrt(x * x + y * y + z * z);
}

// The 2-norm of the count entries x[first + q stride], scaled by their largest modulus (no
// overflow or underflow of the squares).
template <typename P>
inline float eig_norm(P x, int first, int stride, int count) {
  float big = 0.0f;
  for (int q = 0; q < count; ++q) {
    big = metal::max(big, modulus(x[first + q * stride]));
  }
  if (big == 0.0f) {
    return 0.0f;
  }
  float sum = 0.0f;
  for (int q = 0; q < count; ++q) {
    const float r = modulus(x[first + q * stride]) / big;
    sum += r * r;
  }
  return big * metal::sqrt(sum);
}

// xLARFG's reflector I - tau u u^H taking (alpha, x) to (beta, 0), x of 2-norm xnorm: returns
// tau, with beta and scal = 1 / (alpha - beta) (u = (1, scal x)); tau = 0, beta = alpha and
// scal = 0 where x is below the smallest normal number and alpha real (the callers then set x
// to zero, a perturbation of relative size 1e-38).
template <typename T>
inline T eig_reflector(T alpha, float xnorm, thread T& beta, thread T& scal) {
  const float ar = eig_re(alpha), ai = eig_im(alpha);
  beta = alpha;
  scal = zero<T>();
  if (xnorm <= kSafeMin && ai == 0.0f) {
    return zero<T>();
  }
  const float b = -metal::copysign(eig_hypot3(ar, ai, xnorm), ar);
  beta = eig_from<T>(float2(b, 0.0f));
  scal = recip(alpha - beta);
  return eig_from<T>(float2((b - ar) / b, -ai / b));
}

// The elementary reflector of xLARFG for (alpha, x1, x2) (x2 unused when m == 2): on return
// alpha = beta, x1, x2 = the reflector's v (v0 = 1), tau. Below the smallest normal number the
// column counts as zero (tau = 0): the callers then set the entries to zero, a perturbation of
// relative size 1e-38.
template <typename T>
inline T eig_larfg(thread T& alpha, thread T& x1, thread T& x2, int m) {
  const float a1 = modulus(x1), a2 = m == 3 ? modulus(x2) : 0.0f;
  const float big = metal::max(a1, a2);
  float xnorm = 0.0f;
  if (big > 0.0f) {
    const float r1 = a1 / big, r2 = a2 / big;
    xnorm = big * metal::sqrt(r1 * r1 + r2 * r2);
  }
  T beta, scal;
  const T tau = eig_reflector(alpha, xnorm, beta, scal);
  x1 = mul(x1, scal);  // 0 with tau = 0: the reflector is then the identity, v unused
  if (m == 3) {
    x2 = mul(x2, scal);
  }
  alpha = beta;
  return tau;
}

// H and Z live in threadgroup or device memory: every barrier orders both.
constant constexpr metal::mem_flags kEigMemory =
    metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;

inline void eig_sync() { threadgroup_barrier(kEigMemory); }

// Who runs eig_hessenberg and eig_schur, whose barriers follow: the whole threadgroup, or one
// simdgroup alone (eig_aed's window, in threadgroup memory, with device scratch of its own).
struct EigGroupSync {};
struct EigSimdSync {};
inline void eig_barrier(EigGroupSync) { eig_sync(); }
inline void eig_barrier(EigSimdSync) { simdgroup_barrier(kEigMemory); }

// What one matrix's kernel works with.
template <typename T, typename P>
struct EigWork {
  P h;                     // n x n, row-major: A, then H, then the Schur form T
  P z;                     // n x n: Q, then Q Z (vectors only)
  device T* tau;           // n reflector scalars of the Hessenberg reduction
  device T* hv;            // n: the current Hessenberg reflector's vector
  device float* scale;     // n balancing scale factors
  device int* perm;        // n balancing permutation records
  device float2* x;        // n x n: the eigenvectors of T (vectors only)
  threadgroup float* red;  // reduction scratch: 2 floats per simdgroup
  // eig_device only (the multishift sweeps): the trailing block whose eigenvalues are the
  // shifts, and each bulge's reflector (v2, v3, tau, beta).
  threadgroup float* shift_block;
  threadgroup float4* bulges;
  // and the deflation window (eig_aed, where aed_on): T, V and Q, kEigAedWindow^2 floats each,
  // and the number of its eigenvalues that did not deflate.
  threadgroup float* aed;
  threadgroup int* aed_kept;
  bool aed_on;
  int n;
  bool vectors;
  uint tid, nth, lane, sg, nsg;
};

// ---- 2. balancing (xGEBAL) ----

// Swap columns i and j (rows 0..l) then rows i and j (columns k..n-1).
template <typename T, typename P>
inline void eig_swap(thread EigWork<T, P>& w, int i, int j, int k, int l) {
  const int n = w.n;
  if (i != j) {
    for (int r = int(w.tid); r <= l; r += int(w.nth)) {
      const T t = w.h[r * n + i];
      w.h[r * n + i] = w.h[r * n + j];
      w.h[r * n + j] = t;
    }
    eig_sync();
    for (int c = k + int(w.tid); c < n; c += int(w.nth)) {
      const T t = w.h[i * n + c];
      w.h[i * n + c] = w.h[j * n + c];
      w.h[j * n + c] = t;
    }
  }
  eig_sync();
}

// Permutes and scales h; returns the active block in ilo, ihi.
template <typename T, typename P>
inline void eig_balance(thread EigWork<T, P>& w, thread int& ilo, thread int& ihi) {
  const int n = w.n;
  for (int t = int(w.tid); t < n; t += int(w.nth)) {
    w.scale[t] = 1.0f;
    w.perm[t] = t;
  }
  eig_sync();
  int k = 0, l = n - 1;
  // Rows with no off-diagonal entry in columns 0..l go to the bottom (the last such row first).
  for (int pass = 0; pass < n; ++pass) {
    float found = -1.0f;
    for (int i = int(w.tid); i <= l; i += int(w.nth)) {
      bool isolated = true;
      for (int j = 0; j <= l && isolated; ++j) {
        isolated = j == i || is_zero(w.h[i * n + j]);
      }
      found = isolated ? metal::max(found, float(i)) : found;
    }
    found = group_max(found, w.red, w.lane, w.sg, w.nsg, kEigMemory);
    if (found < 0.0f) {
      break;
    }
    const int i = int(found);
    if (w.tid == 0) {
      w.perm[l] = i;
    }
    eig_swap(w, i, l, 0, l);
    if (l == 0) {
      ilo = 0;
      ihi = 0;
      return;
    }
    --l;
  }
  // Columns with no off-diagonal entry in rows k..l go to the left (the first such column first).
  for (int pass = 0; pass < n; ++pass) {
    float found = -float(n);
    for (int j = k + int(w.tid); j <= l; j += int(w.nth)) {
      bool isolated = true;
      for (int i = k; i <= l && isolated; ++i) {
        isolated = i == j || is_zero(w.h[i * n + j]);
      }
      found = isolated ? metal::max(found, -float(j)) : found;
    }
    found = group_max(found, w.red, w.lane, w.sg, w.nsg, kEigMemory);
    if (found <= -float(n)) {
      break;
    }
    const int j = int(-found);
    if (w.tid == 0) {
      w.perm[k] = j;
    }
    eig_swap(w, j, k, k, l);
    ++k;
    if (k > l) {
      break;
    }
  }
  ilo = k;
  ihi = l;
  // Scaling by powers of 2 (the radix), each row and column in turn, until a sweep changes none.
  const float sfmin1 = kSafeMin / kEigUlp, sfmax1 = 1.0f / sfmin1;
  const float sfmin2 = 2.0f * sfmin1, sfmax2 = 1.0f / sfmin2;
  for (int sweep = 0; sweep < kEigBalanceMaxSweeps; ++sweep) {
    bool changed = false;
    for (int i = k; i <= l; ++i) {
      const float scale_i = w.scale[i];  // read before the reductions' barriers (thread 0 writes)
      float ca = 0.0f, ra = 0.0f;
      for (int t = int(w.tid); t < n; t += int(w.nth)) {
        if (t <= l) {
          ca = metal::max(ca, modulus(w.h[t * n + i]));
        }
        if (t >= k) {
          ra = metal::max(ra, modulus(w.h[i * n + t]));
        }
      }
      ca = group_max(ca, w.red, w.lane, w.sg, w.nsg, kEigMemory);
      ra = group_max(ra, w.red, w.lane, w.sg, w.nsg, kEigMemory);
      float sums[2] = {0.0f, 0.0f};
      for (int t = k + int(w.tid); t <= l; t += int(w.nth)) {
        if (ca > 0.0f) {
          const float c = modulus(w.h[t * n + i]) / ca;
          sums[0] += c * c;
        }
        if (ra > 0.0f) {
          const float r = modulus(w.h[i * n + t]) / ra;
          sums[1] += r * r;
        }
      }
      group_sum_each<float, 2>(sums, w.red, w.lane, w.sg, w.nsg, kEigMemory);
      float c = ca * metal::sqrt(sums[0]), r = ra * metal::sqrt(sums[1]);
      if (c == 0.0f || r == 0.0f) {
        continue;
      }
      float g = r * 0.5f, f = 1.0f;
      const float s = c + r;
      for (int step = 0; step < kEigBalanceMaxSteps; ++step) {
        if (!(c < g && metal::max(f, metal::max(c, ca)) < sfmax2 &&
              metal::min(r, metal::min(g, ra)) > sfmin2)) {
          break;
        }
        f *= 2.0f;
        c *= 2.0f;
        ca *= 2.0f;
        r *= 0.5f;
        g *= 0.5f;
        ra *= 0.5f;
      }
      g = c * 0.5f;
      for (int step = 0; step < kEigBalanceMaxSteps; ++step) {
        if (!(g >= r && metal::max(r, ra) < sfmax2 &&
              metal::min(metal::min(f, c), metal::min(g, ca)) > sfmin2)) {
          break;
        }
        f *= 0.5f;
        c *= 0.5f;
        g *= 0.5f;
        ca *= 0.5f;
        r *= 2.0f;
        ra *= 2.0f;
      }
      if (c + r >= kEigBalanceFactor * s) {
        continue;
      }
      if (f < 1.0f && scale_i < 1.0f && f * scale_i <= sfmin1) {
        continue;
      }
      if (f > 1.0f && scale_i > 1.0f && scale_i >= sfmax1 / f) {
        continue;
      }
      changed = true;
      const float inv = 1.0f / f;  // exact: f is a power of 2
      if (w.tid == 0) {
        w.scale[i] = scale_i * f;
      }
      // Row i by 1/f, column i by f; h_ii keeps its value (f / f = 1 exactly) and is left alone.
      for (int t = int(w.tid); t < n; t += int(w.nth)) {
        if (t >= k && t != i) {
          w.h[i * n + t] = w.h[i * n + t] * inv;
        }
        if (t <= l && t != i) {
          w.h[t * n + i] = w.h[t * n + i] * f;
        }
      }
      eig_sync();
    }
    if (!changed) {
      break;
    }
  }
  eig_sync();
}

// ---- 3. Hessenberg reduction (xGEHD2) and Q (xORGHR) ----

// a[a0 + q astride] -= s b[b0 + q bstride] (b conjugated when asked) for q < count, with
// kEigLoadBatch entries of a and b loaded before their stores: a store may alias the next load
// for all the compiler knows, so one entry at a time waits for memory once an entry.
template <typename T, typename PA, typename PB>
inline void eig_sub_scaled(PA a, int a0, int astride, PB b, int b0, int bstride, T s, int count,
                           bool conj_b) {
  for (int q0 = 0; q0 < count; q0 += kEigLoadBatch) {
    T x[kEigLoadBatch], y[kEigLoadBatch];
    for (int q = 0; q < kEigLoadBatch; ++q) {
      const bool on = q0 + q < count;
      x[q] = on ? a[a0 + (q0 + q) * astride] : zero<T>();
      y[q] = on ? b[b0 + (q0 + q) * bstride] : zero<T>();
    }
    for (int q = 0; q < kEigLoadBatch; ++q) {
      if (q0 + q < count) {
        a[a0 + (q0 + q) * astride] = x[q] - mul(s, conj_b ? conj(y[q]) : y[q]);
      }
    }
  }
}

template <typename T, typename P, typename Sync = EigGroupSync>
inline void eig_hessenberg(thread EigWork<T, P>& w, int ilo, int ihi) {
  const int n = w.n;
  T prev_beta = zero<T>(), prev_scal = zero<T>();
  for (int k = ilo; k <= ihi - 2; ++k) {
    // Column k-1 gets beta and v (its other readers are done: the last barrier passed).
    if (k > ilo) {
      for (int i = k + int(w.tid); i <= ihi; i += int(w.nth)) {
        w.h[i * n + (k - 1)] = i == k ? prev_beta : mul(w.h[i * n + (k - 1)], prev_scal);
      }
    }
    // The reflector of column k, by every thread from the same column: v_i = h_ik * scal.
    const T alpha = w.h[(k + 1) * n + k];
    T beta, scal;
    const T tau = eig_reflector(alpha, eig_norm(w.h, (k + 2) * n + k, n, ihi - k - 1), beta,
                                scal);
    if (w.tid == 0) {
      w.tau[k] = tau;
    }
    prev_beta = beta;
    prev_scal = scal;
    // v (v_(k+1) = 1) staged contiguously: the right update reads it along rows, coalesced.
    for (int i = k + 1 + int(w.tid); i <= ihi; i += int(w.nth)) {
      w.hv[i] = i == k + 1 ? one<T>() : mul(w.h[i * n + k], scal);
    }
    eig_barrier(Sync());
    // H <- (I - conj(tau) v v^H) H on rows k+1..ihi, columns k+1..n-1: one thread per column.
    const T ctau = conj(tau);
    for (int j = k + 1 + int(w.tid); j < n; j += int(w.nth)) {
      T s = w.h[(k + 1) * n + j];
      for (int i = k + 2; i <= ihi; ++i) {
        s += mul(conj(w.hv[i]), w.h[i * n + j]);
      }
      s = mul(ctau, s);
      w.h[(k + 1) * n + j] -= s;
      eig_sub_scaled(w.h, (k + 2) * n + j, n, w.hv, k + 2, 1, s, ihi - k - 1, false);
    }
    eig_barrier(Sync());
    // H <- H (I - tau v v^H) on rows 0..ihi, columns k+1..ihi. Large orders: one simdgroup per
    // row, its lanes along the row (a thread per row would read n different rows at each step);
    // small ones: one thread per row (a simdgroup would take its rows one at a time).
    if (n >= kEigRowsBySimdgroupMinOrder) {
      for (int r = int(w.sg); r <= ihi; r += int(w.nsg)) {
        T s = zero<T>();
        for (int i = k + 1 + int(w.lane); i <= ihi; i += kSimdWidth) {
          s += mul(w.h[r * n + i], w.hv[i]);
        }
        s = mul(tau, simd_sum(s));
        const int i0 = k + 1 + int(w.lane);
        eig_sub_scaled(w.h, r * n + i0, kSimdWidth, w.hv, i0, kSimdWidth, s,
                       i0 <= ihi ? (ihi - i0) / kSimdWidth + 1 : 0, true);
      }
    } else {
      for (int r = int(w.tid); r <= ihi; r += int(w.nth)) {
        T s = w.h[r * n + k + 1];
        for (int i = k + 2; i <= ihi; ++i) {
          s += mul(w.h[r * n + i], w.hv[i]);
        }
        s = mul(tau, s);
        w.h[r * n + k + 1] -= s;
        for (int i = k + 2; i <= ihi; ++i) {
          w.h[r * n + i] -= mul(s, conj(w.hv[i]));
        }
      }
    }
    eig_barrier(Sync());
  }
  if (ihi - 2 >= ilo) {
    const int k = ihi - 1;
    for (int i = k + int(w.tid); i <= ihi; i += int(w.nth)) {
      w.h[i * n + (k - 1)] = i == k ? prev_beta : mul(w.h[i * n + (k - 1)], prev_scal);
    }
    eig_barrier(Sync());
  }
  if (w.vectors) {
    // Q = H_ilo ... H_(ihi-2), applied backwards to the identity: one thread per column.
    for (int j = int(w.tid); j < n; j += int(w.nth)) {
      for (int i = 0; i < n; ++i) {
        w.z[i * n + j] = i == j ? one<T>() : zero<T>();
      }
      for (int k = ihi - 2; k >= ilo; --k) {
        if (j <= k) {
          continue;
        }
        const T tk = w.tau[k];
        T s = w.z[(k + 1) * n + j];
        for (int i = k + 2; i <= ihi; ++i) {
          s += mul(conj(w.h[i * n + k]), w.z[i * n + j]);
        }
        s = mul(tk, s);
        w.z[(k + 1) * n + j] -= s;
        eig_sub_scaled(w.z, (k + 2) * n + j, n, w.h, (k + 2) * n + k, n, s, ihi - k - 1, false);
      }
    }
    eig_barrier(Sync());
  }
  // Below the subdiagonal: zero (the reflectors were stored there).
  for (int j = int(w.tid); j < n; j += int(w.nth)) {
    for (int i = j + 2; i < n; ++i) {
      w.h[i * n + j] = zero<T>();
    }
  }
  eig_barrier(Sync());
}

// ---- 4. Schur form ----

// xLAHQR's search for a negligible subdiagonal entry in rows l+1..i (Ahues and Tisseur's
// criterion); returns the new l.
template <typename T, typename P>
inline int eig_deflation_point(thread EigWork<T, P>& w, int l, int i, int ilo, int ihi,
                               float smlnum) {
  const int n = w.n;
  int k = i;
  for (; k > l; --k) {
    const float sub = abs1(w.h[k * n + k - 1]);
    if (sub <= smlnum) {
      break;
    }
    float tst = abs1(w.h[(k - 1) * n + k - 1]) + abs1(w.h[k * n + k]);
    if (tst == 0.0f) {
      if (k - 2 >= ilo) {
        tst += abs1(w.h[(k - 1) * n + k - 2]);
      }
      if (k + 1 <= ihi) {
        tst += abs1(w.h[(k + 1) * n + k]);
      }
    }
    if (sub <= kEigUlp * tst) {
      const float up = abs1(w.h[(k - 1) * n + k]);
      const float ab = metal::max(sub, up), ba = metal::min(sub, up);
      const float dd = abs1(w.h[(k - 1) * n + k - 1] - w.h[k * n + k]);
      const float hkk = abs1(w.h[k * n + k]);
      const float aa = metal::max(hkk, dd), bb = metal::min(hkk, dd);
      const float s = aa + ab;
      if (ba * (ab / s) <= metal::max(smlnum, kEigUlp * (bb * (aa / s)))) {
        break;
      }
    }
  }
  return k;
}

// xLANV2: the Schur factorisation of the real 2 x 2 [[a, b], [c, d]] = [[cs, -sn], [sn, cs]]
// [[aa, bb], [cc, dd]] [[cs, sn], [-sn, cs]], standardised (cc = 0, or aa = dd and bb cc < 0).
struct EigLanv2 {
  float a, b, c, d, cs, sn;
};

inline EigLanv2 eig_lanv2(float a, float b, float c, float d) {
  EigLanv2 r;
  float cs = 1.0f, sn = 0.0f;
  if (c == 0.0f) {
  } else if (b == 0.0f) {
    cs = 0.0f;
    sn = 1.0f;
    const float t = d;
    d = a;
    a = t;
    b = -c;
    c = 0.0f;
  } else if ((a - d) == 0.0f && metal::sign(b) != metal::sign(c)) {
  } else {
    float temp = a - d;
    float p = 0.5f * temp;
    const float bcmax = metal::max(metal::fabs(b), metal::fabs(c));
    const float bcmis = metal::min(metal::fabs(b), metal::fabs(c)) * metal::copysign(1.0f, b) *
                        metal::copysign(1.0f, c);
    float sc = metal::max(metal::fabs(p), bcmax);
    float zz = (p / sc) * p + (bcmax / sc) * bcmis;
    if (zz >= kEigLanv2Multpl * kEigUlp) {
      // Real eigenvalues: the upper triangular form.
      zz = p + metal::copysign(metal::sqrt(sc) * metal::sqrt(zz), p);
      a = d + zz;
      d = d - (bcmax / zz) * bcmis;
      const float tau = metal::sqrt(c * c + zz * zz);
      cs = zz / tau;
      sn = c / tau;
      b = b - c;
      c = 0.0f;
    } else {
      // Complex or nearly equal real eigenvalues: make the diagonal equal.
      float sigma = b + c;
      for (int count = 0; count < kEigLanv2MaxRescale; ++count) {
        sc = metal::max(metal::fabs(temp), metal::fabs(sigma));
        if (sc >= 1.0f / kEigLanv2SafMin2) {
          sigma *= kEigLanv2SafMin2;
          temp *= kEigLanv2SafMin2;
        } else if (sc <= kEigLanv2SafMin2) {
          sigma /= kEigLanv2SafMin2;
          temp /= kEigLanv2SafMin2;
        } else {
          break;
        }
      }
      p = 0.5f * temp;
      float tau = metal::sqrt(sigma * sigma + temp * temp);
      cs = metal::sqrt(0.5f * (1.0f + metal::fabs(sigma) / tau));
      sn = -(p / (tau * cs)) * metal::copysign(1.0f, sigma);
      const float aa = a * cs + b * sn, bb = -a * sn + b * cs;
      const float cc = c * cs + d * sn, dd = -c * sn + d * cs;
      a = aa * cs + cc * sn;
      b = bb * cs + dd * sn;
      c = -aa * sn + cc * cs;
      d = -bb * sn + dd * cs;
      temp = 0.5f * (a + d);
      a = temp;
      d = temp;
      if (c != 0.0f) {
        if (b != 0.0f) {
          if (metal::sign(b) == metal::sign(c)) {
            // Real eigenvalues after all: the upper triangular form.
            const float sab = metal::sqrt(metal::fabs(b)), sac = metal::sqrt(metal::fabs(c));
            p = metal::copysign(sab * sac, c);
            tau = 1.0f / metal::sqrt(metal::fabs(b + c));
            a = temp + p;
            d = temp - p;
            b = b - c;
            c = 0.0f;
            const float cs1 = sab * tau, sn1 = sac * tau;
            temp = cs * cs1 - sn * sn1;
            sn = cs * sn1 + sn * cs1;
            cs = temp;
          }
        } else {
          b = -c;
          c = 0.0f;
          temp = cs;
          cs = -sn;
          sn = temp;
        }
      }
    }
  }
  r.a = a;
  r.b = b;
  r.c = c;
  r.d = d;
  r.cs = cs;
  r.sn = sn;
  return r;
}

// The rotation [[cs, sn], [-sn, cs]] of rows and columns j, j + 1 of the order-n row-major h
// applied outside its 2 x 2 block (the rows right of it, the columns above it) and to z's
// columns j, j + 1: what standardising the block (xLANV2) or swapping two 1 x 1 blocks
// (xLAEXC) leaves to do. Thread tid of nth.
template <typename P>
inline void eig_rotate_pair(P h, P z, int n, int j, float cs, float sn, uint tid, uint nth) {
  for (int c = j + 2 + int(tid); c < n; c += int(nth)) {
    const float x = h[j * n + c], y = h[(j + 1) * n + c];
    h[j * n + c] = cs * x + sn * y;
    h[(j + 1) * n + c] = cs * y - sn * x;
  }
  for (int r = int(tid); r < j; r += int(nth)) {
    const float x = h[r * n + j], y = h[r * n + j + 1];
    h[r * n + j] = cs * x + sn * y;
    h[r * n + j + 1] = cs * y - sn * x;
  }
  for (int r = int(tid); r < n; r += int(nth)) {
    const float x = z[r * n + j], y = z[r * n + j + 1];
    z[r * n + j] = cs * x + sn * y;
    z[r * n + j + 1] = cs * y - sn * x;
  }
}

// The first column of (H - s1 I)(H - s2 I) at rows m..m+2 (xLAQR1), scaled by the sum of its
// moduli: the first reflector of a double-shift bulge introduced at m, for the shifts
// s1 = rt1r + i rt1i and s2 = rt2r + i rt2i (a complex-conjugate pair or two real shifts).
template <typename P>
inline void eig_bulge_start(thread EigWork<float, P>& w, int m, float rt1r, float rt1i,
                            float rt2r, float rt2i, thread float* v) {
  const int n = w.n;
  float h21s = w.h[(m + 1) * n + m];
  float sm = metal::fabs(w.h[m * n + m] - rt2r) + metal::fabs(rt2i) + metal::fabs(h21s);
  h21s = w.h[(m + 1) * n + m] / sm;
  v[0] = h21s * w.h[m * n + m + 1] + (w.h[m * n + m] - rt1r) * ((w.h[m * n + m] - rt2r) / sm) -
         rt1i * (rt2i / sm);
  v[1] = h21s * (w.h[m * n + m] + w.h[(m + 1) * n + m + 1] - rt1r - rt2r);
  v[2] = h21s * w.h[(m + 2) * n + m + 1];
  sm = metal::fabs(v[0]) + metal::fabs(v[1]) + metal::fabs(v[2]);
  v[0] /= sm;
  v[1] /= sm;
  v[2] /= sm;
}

// (I - t1 u u^T) applied from the left to rows k..k+nr-1 of the columns c0, c0 + step, .. <= c1
// of the order-n row-major a, u = (1, v2, v3) (v3 unused when nr == 2).
template <typename P>
inline void eig_reflect_rows(P a, int n, int k, int nr, float v2, float v3, float t1, int c0,
                             int c1, int step) {
  const float t2 = t1 * v2, t3 = t1 * v3;
  for (int j = c0; j <= c1; j += step) {
    float sum = a[k * n + j] + v2 * a[(k + 1) * n + j];
    if (nr == 3) {
      sum += v3 * a[(k + 2) * n + j];
      a[(k + 2) * n + j] -= sum * t3;
    }
    a[k * n + j] -= sum * t1;
    a[(k + 1) * n + j] -= sum * t2;
  }
}

// The same reflector from the right, to columns k..k+nr-1 of the rows r0, r0 + step, .. <= r1.
template <typename P>
inline void eig_reflect_cols(P a, int n, int k, int nr, float v2, float v3, float t1, int r0,
                             int r1, int step) {
  const float t2 = t1 * v2, t3 = t1 * v3;
  for (int r = r0; r <= r1; r += step) {
    float sum = a[r * n + k] + v2 * a[r * n + k + 1];
    if (nr == 3) {
      sum += v3 * a[r * n + k + 2];
      a[r * n + k + 2] -= sum * t3;
    }
    a[r * n + k] -= sum * t1;
    a[r * n + k + 1] -= sum * t2;
  }
}

// Francis double-shift QR (xLAHQR) on the real Hessenberg h, rows/columns ilo..ihi; eigenvalues
// into wv (scaled matrix). Returns 0, or the 1-based index of the eigenvalue that failed.
template <typename P, typename Sync = EigGroupSync>
inline int eig_schur(thread EigWork<float, P>& w, int ilo, int ihi, device float2* wv) {
  const int n = w.n;
  const bool wantt = w.vectors;
  const int nh = ihi - ilo + 1;
  const float smlnum = kSafeMin * (float(nh) / kEigUlp);
  const int itmax = kEigItmaxPerOrder * metal::max(kEigItmaxMinOrder, nh);
  int kdefl = 0;
  int i = ihi;
  for (int outer = 0; outer < n && i >= ilo; ++outer) {
    int l = ilo;
    bool converged = false;
    EigLanv2 blk;
    for (int its = 0; its <= itmax; ++its) {
      l = eig_deflation_point(w, l, i, ilo, ihi, smlnum);
      const int i1 = wantt ? 0 : l, i2 = wantt ? n - 1 : i;
      float v[3] = {0.0f, 0.0f, 0.0f};
      int m = l;
      if (l == i - 1) {
        blk = eig_lanv2(w.h[(i - 1) * n + i - 1], w.h[(i - 1) * n + i], w.h[i * n + i - 1],
                        w.h[i * n + i]);
      } else if (l < i - 1) {
        ++kdefl;
        float h11, h12, h21, h22;
        if (kdefl % (2 * kEigExceptional) == 0) {
          const float s = metal::fabs(w.h[i * n + i - 1]) + metal::fabs(w.h[(i - 1) * n + i - 2]);
          h11 = kEigExcDat1 * s + w.h[i * n + i];
          h12 = kEigExcDat2 * s;
          h21 = s;
          h22 = h11;
        } else if (kdefl % kEigExceptional == 0) {
          const float s = metal::fabs(w.h[(l + 1) * n + l]) + metal::fabs(w.h[(l + 2) * n + l + 1]);
          h11 = kEigExcDat1 * s + w.h[l * n + l];
          h12 = kEigExcDat2 * s;
          h21 = s;
          h22 = h11;
        } else {
          h11 = w.h[(i - 1) * n + i - 1];
          h21 = w.h[i * n + i - 1];
          h12 = w.h[(i - 1) * n + i];
          h22 = w.h[i * n + i];
        }
        // The shifts: the eigenvalues of the trailing 2 x 2 (both the one nearer h22 if real).
        float rt1r = 0.0f, rt1i = 0.0f, rt2r = 0.0f, rt2i = 0.0f;
        const float s = metal::fabs(h11) + metal::fabs(h12) + metal::fabs(h21) + metal::fabs(h22);
        if (s != 0.0f) {
          h11 /= s;
          h21 /= s;
          h12 /= s;
          h22 /= s;
          const float tr = (h11 + h22) * 0.5f;
          const float det = (h11 - tr) * (h22 - tr) - h12 * h21;
          const float rtdisc = metal::sqrt(metal::fabs(det));
          if (det >= 0.0f) {
            rt1r = tr * s;
            rt2r = rt1r;
            rt1i = rtdisc * s;
            rt2i = -rt1i;
          } else {
            rt1r = tr + rtdisc;
            rt2r = tr - rtdisc;
            if (metal::fabs(rt1r - h22) <= metal::fabs(rt2r - h22)) {
              rt1r *= s;
              rt2r = rt1r;
            } else {
              rt2r *= s;
              rt1r = rt2r;
            }
          }
        }
        // Two consecutive small subdiagonals: where the bulge may start.
        for (m = i - 2; m >= l; --m) {
          eig_bulge_start(w, m, rt1r, rt1i, rt2r, rt2i, v);
          if (m == l) {
            break;
          }
          const float h00 = metal::fabs(w.h[m * n + m - 1]) * (metal::fabs(v[1]) + metal::fabs(v[2]));
          const float h01 = metal::fabs(v[0]) * (metal::fabs(w.h[(m - 1) * n + m - 1]) +
                                                  metal::fabs(w.h[m * n + m]) +
                                                  metal::fabs(w.h[(m + 1) * n + m + 1]));
          if (h00 <= kEigUlp * h01) {
            break;
          }
        }
      }
      eig_barrier(Sync());  // every thread has read what it decides from
      if (w.tid == 0 && l > ilo) {
        w.h[l * n + l - 1] = 0.0f;
      }
      if (l >= i - 1) {
        converged = true;
        break;
      }
      // The double-shift QR step: the bulge chased from m to i.
      for (int k = m; k <= i - 1; ++k) {
        const int nr = metal::min(3, i - k + 1);
        if (k > m) {
          v[0] = w.h[k * n + k - 1];
          v[1] = w.h[(k + 1) * n + k - 1];
          v[2] = nr == 3 ? w.h[(k + 2) * n + k - 1] : 0.0f;
        }
        const float t1 = eig_larfg(v[0], v[1], v[2], nr);
        const float v2 = v[1], v3 = nr == 3 ? v[2] : 0.0f;
        eig_reflect_rows(w.h, n, k, nr, v2, v3, t1, k + int(w.tid), i2, int(w.nth));
        eig_barrier(Sync());
        eig_reflect_cols(w.h, n, k, nr, v2, v3, t1, i1 + int(w.tid), metal::min(k + 3, i),
                         int(w.nth));
        if (wantt) {
          eig_reflect_cols(w.z, n, k, nr, v2, v3, t1, int(w.tid), n - 1, int(w.nth));
        }
        if (w.tid == 0) {
          if (k > m) {
            w.h[k * n + k - 1] = v[0];
            w.h[(k + 1) * n + k - 1] = 0.0f;
            if (k < i - 1) {
              w.h[(k + 2) * n + k - 1] = 0.0f;
            }
          } else if (m > l) {
            // The reflector from the left on column m-1 (v2 and v3 may underflow: not -h).
            w.h[k * n + k - 1] *= (1.0f - t1);
          }
        }
        eig_barrier(Sync());
      }
    }
    if (!converged) {
      return i + 1;
    }
    if (l == i) {
      if (w.tid == 0) {
        wv[i] = float2(w.h[i * n + i], 0.0f);
      }
    } else {
      // The 2 x 2 block at i-1, i: its Schur form, the rotation applied to the rest.
      const float cs = blk.cs, sn = blk.sn;
      if (w.tid == 0) {
        w.h[(i - 1) * n + i - 1] = blk.a;
        w.h[(i - 1) * n + i] = blk.b;
        w.h[i * n + i - 1] = blk.c;
        w.h[i * n + i] = blk.d;
        const float im = blk.c == 0.0f ? 0.0f
                                       : metal::sqrt(metal::fabs(blk.b)) *
                                             metal::sqrt(metal::fabs(blk.c));
        wv[i - 1] = float2(blk.a, im);
        wv[i] = float2(blk.d, -im);
      }
      if (wantt) {
        eig_rotate_pair(w.h, w.z, n, i - 1, cs, sn, w.tid, w.nth);
      }
    }
    eig_barrier(Sync());
    kdefl = 0;
    i = l - 1;
  }
  return 0;
}

// The work of one simdgroup alone (simdgroup 0, its lanes as threads) on a small matrix of
// order n in threadgroup memory (h, and z when vectors), with w's scratch (the Hessenberg
// reduction's, free once w's Q is formed): the multishift shifts and eig_aed's window.
template <typename P>
inline EigWork<float, threadgroup float*> eig_simdgroup_work(thread const EigWork<float, P>& w,
                                                             threadgroup float* h,
                                                             threadgroup float* z, int n,
                                                             bool vectors) {
  EigWork<float, threadgroup float*> s;
  s.h = h;
  s.z = z;
  s.tau = w.tau;
  s.hv = w.hv;
  s.red = w.red;
  s.n = n;
  s.vectors = vectors;
  s.tid = w.lane;
  s.nth = kSimdWidth;
  s.lane = w.lane;
  s.sg = 0;
  s.nsg = 1;
  return s;
}

// The shifts of a multishift sweep on the window ktop..kbot, into wv[kbot - kEigShifts + 1 ..
// kbot] (scratch: those eigenvalues are not final yet), in the bulges' order: shift 2 j and
// 2 j + 1 for bulge j, each pair complex-conjugate or real. The eigenvalues of the trailing
// block (xLAQR0 takes them from its deflation window), or, every kEigExceptional sweeps without
// a deflation or when the block's iteration fails, xLAQR0's exceptional shifts.
template <typename P>
inline void eig_multishift_shifts(thread EigWork<float, P>& w, int ktop, int kbot, bool exceptional,
                                  device float2* wv) {
  const int n = w.n, ns = kEigShifts, ks = kbot - ns + 1;
  device float2* sh = wv + ks;
  bool ok = false;
  if (!exceptional) {
    for (int q = int(w.tid); q < ns * ns; q += int(w.nth)) {
      const int r = q / ns, c = q % ns;
      w.shift_block[q] = r > c + 1 ? 0.0f : w.h[(ks + r) * n + ks + c];
    }
    eig_sync();
    // By simdgroup 0 alone (its barriers a simdgroup's; only thread 0 reads ok below).
    if (w.sg == 0) {
      EigWork<float, threadgroup float*> blk =
          eig_simdgroup_work(w, w.shift_block, w.shift_block, ns, false);
      ok = eig_schur<threadgroup float*, EigSimdSync>(blk, 0, ns - 1, sh) == 0;
    }
  }
  eig_sync();
  if (w.tid == 0) {
    float2 s[kEigShifts];
    if (ok) {
      for (int q = 0; q < ns; ++q) {
        s[q] = sh[q];
      }
    } else {
      for (int i = kbot; i >= ks + 1; i -= 2) {
        const float ss = metal::fabs(w.h[i * n + i - 1]) + metal::fabs(w.h[(i - 1) * n + i - 2]);
        const float aa = kEigExcDat1 * ss + w.h[i * n + i];
        const EigLanv2 b = eig_lanv2(aa, ss, kEigExcDat2 * ss, aa);
        const float im = b.c == 0.0f ? 0.0f : metal::sqrt(metal::fabs(b.b)) *
                                                  metal::sqrt(metal::fabs(b.c));
        s[i - 1 - ks] = float2(b.a, im);
        s[i - ks] = float2(b.d, -im);
      }
    }
    // Complex pairs (adjacent, positive imaginary part first) first, then the real shifts two
    // by two (their number is even).
    int out = 0;
    for (int q = 0; q < ns; ++q) {
      if (s[q].y > 0.0f && q + 1 < ns) {
        sh[out++] = s[q];
        sh[out++] = s[q + 1];
        ++q;
      }
    }
    for (int q = 0; q < ns; ++q) {
      if (s[q].y == 0.0f) {
        sh[out++] = s[q];
      }
    }
  }
  eig_sync();
}

// One lane's share of the multishift sweep's right updates: rows r0, r0 + step, .. <= r1 of
// the order-n row-major a, the lane on column c (rows up to its bulge's last row `mine`), u its
// entry of the reflector's vector, tp = tau u, and `first` the bulge's first lane. Every lane of
// the simdgroup runs it (the shuffles).
template <typename P>
inline void eig_sweep_columns(P a, int n, int c, int mine, float u, float tp, int first, int r0,
                              int r1, int step) {
  const ushort l0 = ushort(first), l1 = ushort(metal::min(first + 1, kSimdWidth - 1)),
               l2 = ushort(metal::min(first + 2, kSimdWidth - 1));
  // kEigLoadBatch rows' loads before their stores (a store may alias the next row's load for
  // all the compiler knows, so a row at a time waits for memory once a row).
  for (int r = r0; r <= r1; r += step * kEigLoadBatch) {
    float x[kEigLoadBatch];
    for (int q = 0; q < kEigLoadBatch; ++q) {
      const int rq = r + q * step;
      x[q] = rq <= r1 && rq <= mine ? a[rq * n + c] : 0.0f;
    }
    for (int q = 0; q < kEigLoadBatch; ++q) {
      const int rq = r + q * step;
      const float s = x[q] * u;
      const float sum = simd_shuffle(s, l0) + simd_shuffle(s, l1) + simd_shuffle(s, l2);
      if (rq <= r1 && rq <= mine) {
        a[rq * n + c] = x[q] - sum * tp;
      }
    }
  }
}

// The left updates of every active bulge at time t (rows k..k+nr-1 of columns k..i2): a thread
// takes a column offset and the bulges kEigChainBulges at a time, loading a group's entries
// before storing them (the bulges' rows are disjoint), so that it waits for memory once a group
// rather than once a bulge. All ten bulges at once held 30 entries a thread and spilled registers
// at 1024 threads (ptxas, sm_90), 27% slower at 1024^2 on the H200 (round 14). The same
// arithmetic as eig_reflect_rows.
template <typename P>
inline void eig_chain_rows(thread EigWork<float, P>& w, int ktop, int kbot, int t, int i2) {
  const int n = w.n, nb = kEigShifts / 2;
  const int kmin = ktop + t - kEigBulgeRows * metal::min(nb - 1, t / kEigBulgeRows);
  for (int o = int(w.tid); o <= i2 - kmin; o += int(w.nth)) {
    for (int j0 = 0; j0 < nb; j0 += kEigChainBulges) {
      float x0[kEigChainBulges], x1[kEigChainBulges], x2[kEigChainBulges];
      for (int q = 0; q < kEigChainBulges; ++q) {
        const int k = ktop + t - kEigBulgeRows * (j0 + q), c = k + o;
        const bool on = k >= ktop && k <= kbot - 1 && c <= i2;
        x0[q] = on ? w.h[k * n + c] : 0.0f;
        x1[q] = on ? w.h[(k + 1) * n + c] : 0.0f;
        x2[q] = on && k + 2 <= kbot ? w.h[(k + 2) * n + c] : 0.0f;
      }
      for (int q = 0; q < kEigChainBulges; ++q) {
        const int k = ktop + t - kEigBulgeRows * (j0 + q), c = k + o;
        if (k < ktop || k > kbot - 1 || c > i2) {
          continue;
        }
        const float4 b = w.bulges[j0 + q];
        const float t1 = b.z, t2 = t1 * b.x, t3 = t1 * b.y;
        float sum = x0[q] + b.x * x1[q];
        if (k + 2 <= kbot) {
          sum += b.y * x2[q];
          w.h[(k + 2) * n + c] = x2[q] - sum * t3;
        }
        w.h[k * n + c] = x0[q] - sum * t1;
        w.h[(k + 1) * n + c] = x1[q] - sum * t2;
      }
    }
  }
}

// One multishift sweep on the window ktop..kbot (the small-bulge chain of Braman, Byers and
// Mathias 2002, as xLAQR5 chases it, without its blocked updates): bulge j is introduced at ktop
// at time 3 j and moves one row per time step, so at time t it acts on rows k = ktop + t - 3 j
// .. k + 2. Bulges kEigBulgeRows apart touch disjoint rows and columns except where a left and a
// right update meet, which commute, so each time step computes every bulge's reflector, then
// applies all left updates, then all right updates: three barriers for all bulges. xLAQR5's
// order (the lower bulge first) gives the same matrix in exact arithmetic.
template <typename P>
inline void eig_multishift_sweep(thread EigWork<float, P>& w, int ktop, int kbot,
                                 device const float2* shifts) {
  const int n = w.n, nb = kEigShifts / 2;
  const bool wantt = w.vectors;
  const int i1 = wantt ? 0 : ktop, i2 = wantt ? n - 1 : kbot;
  const int steps = kEigBulgeRows * (nb - 1) + (kbot - ktop);
  for (int t = 0; t < steps; ++t) {
    if (int(w.tid) < nb) {
      const int j = int(w.tid), k = ktop + t - kEigBulgeRows * j;
      float4 r = float4(0.0f);
      if (k >= ktop && k <= kbot - 1) {
        const int nr = metal::min(3, kbot - k + 1);
        float v[3];
        if (k == ktop) {
          const float2 s1 = shifts[2 * j], s2 = shifts[2 * j + 1];
          eig_bulge_start(w, k, s1.x, s1.y, s2.x, s2.y, v);
        } else {
          v[0] = w.h[k * n + k - 1];
          v[1] = w.h[(k + 1) * n + k - 1];
          v[2] = nr == 3 ? w.h[(k + 2) * n + k - 1] : 0.0f;
        }
        const float t1 = eig_larfg(v[0], v[1], v[2], nr);
        r = float4(v[1], nr == 3 ? v[2] : 0.0f, t1, v[0]);
      }
      w.bulges[j] = r;
    }
    eig_sync();
    eig_chain_rows(w, ktop, kbot, t, i2);
    // Each moved bulge's column k - 1: beta and two zeros.
    for (int j = 0; w.tid == 0 && j < nb; ++j) {
      const int k = ktop + t - kEigBulgeRows * j;
      if (k > ktop && k <= kbot - 1) {
        w.h[k * n + k - 1] = w.bulges[j].w;
        w.h[(k + 1) * n + k - 1] = 0.0f;
        if (k < kbot - 1) {
          w.h[(k + 2) * n + k - 1] = 0.0f;
        }
      }
    }
    eig_sync();
    // The right updates: the active bulges' columns are contiguous (kEigBulgeRows each), so a
    // simdgroup takes a row, its lanes on those columns, and a bulge's three lanes sum by
    // shuffles. (A thread a row would read each row's three entries apart from its
    // neighbours': one cache line a lane.)
    const int lane = int(w.lane), p = lane % kEigBulgeRows, first = lane - p;
    const int jhi = metal::min(nb - 1, t / kEigBulgeRows);
    const int j = jhi - lane / kEigBulgeRows;
    const int k = ktop + t - kEigBulgeRows * j;
    const bool live = j >= 0 && k <= kbot - 1 && p < metal::min(3, kbot - k + 1);
    float u = 0.0f, tp = 0.0f;
    if (live) {
      const float4 b = w.bulges[j];
      u = p == 0 ? 1.0f : (p == 1 ? b.x : b.y);
      tp = b.z * u;
    }
    const int c = live ? k + p : 0;
    const int rows = metal::min(ktop + t + 3, kbot);  // the lowest bulge's last row
    eig_sweep_columns(w.h, n, c, live ? metal::min(k + 3, kbot) : -1, u, tp, first,
                      i1 + int(w.sg), rows, int(w.nsg));
    if (wantt) {
      eig_sweep_columns(w.z, n, c, live ? n - 1 : -1, u, tp, first, int(w.sg), n - 1,
                        int(w.nsg));
    }
    eig_sync();
  }
}

// ---- aggressive early deflation (xLAQR3; Braman, Byers and Mathias 2002, part II) ----

// xLARTG: cs and sn of the rotation [[cs, sn], [-sn, cs]] taking (f, g) to (r, 0).
inline void eig_lartg(float f, float g, thread float& cs, thread float& sn) {
  if (g == 0.0f) {
    cs = 1.0f;
    sn = 0.0f;
  } else if (f == 0.0f) {
    cs = 0.0f;
    sn = metal::copysign(1.0f, g);
  } else {
    const float big = metal::max(metal::fabs(f), metal::fabs(g));
    const float fs = f / big, gs = g / big;
    const float r = metal::copysign(big * metal::sqrt(fs * fs + gs * gs), f);
    cs = f / r;
    sn = g / r;
  }
}

// (I - tau u u^T) on the three entries (x0, x1, x2).
inline void eig_house3(thread float& x0, thread float& x1, thread float& x2, float3 u,
                       float tau) {
  const float s = tau * (u.x * x0 + u.y * x1 + u.z * x2);
  x0 -= s * u.x;
  x1 -= s * u.y;
  x2 -= s * u.z;
}

// The same reflector on rows r..r+2 of column c (left) or on columns c..c+2 of row r (right) of
// the row-major a with row stride m.
// (Through thread copies: a threadgroup entry does not bind to a thread reference in Metal.)
inline void eig_house3_at(threadgroup float* a, int i0, int i1, int i2, float3 u, float tau) {
  float x0 = a[i0], x1 = a[i1], x2 = a[i2];
  eig_house3(x0, x1, x2, u, tau);
  a[i0] = x0;
  a[i1] = x1;
  a[i2] = x2;
}
inline void eig_house3_left(threadgroup float* a, int m, int r, int c, float3 u, float tau) {
  eig_house3_at(a, r * m + c, (r + 1) * m + c, (r + 2) * m + c, u, tau);
}
inline void eig_house3_right(threadgroup float* a, int m, int r, int c, float3 u, float tau) {
  eig_house3_at(a, r * m + c, r * m + c + 1, r * m + c + 2, u, tau);
}
// The same on the 4 x 4 row-major d of eig_swap_blocks.
inline void eig_house3_left(thread float* d, int r, int c, float3 u, float tau) {
  eig_house3(d[r * 4 + c], d[(r + 1) * 4 + c], d[(r + 2) * 4 + c], u, tau);
}
inline void eig_house3_right(thread float* d, int r, int c, float3 u, float tau) {
  eig_house3(d[r * 4 + c], d[r * 4 + c + 1], d[r * 4 + c + 2], u, tau);
}

inline void eig_exchange(thread float* a, int i, int j) {
  const float t = a[i];
  a[i] = a[j];
  a[j] = t;
}

// X with T11 X - X T22 = T12 for the blocks T11 (n1 x n1), T22 (n2 x n2) and T12 of the
// order n1 + n2 matrix d (4 x 4, row-major; n1, n2 <= 2), into x (2 x 2, row-major), as xLASY2
// with its scale 1: the Kronecker system of order n1 n2 by Gaussian elimination with complete
// pivoting, pivots below xLASY2's smin raised to it (a swap that needs it is ill-conditioned
// and fails eig_swap_blocks' test).
inline void eig_sylvester(thread const float* d, int n1, int n2, thread float* x) {
  const int nu = n1 * n2;
  float a[16], b[4], y[4];
  int unknown[4];  // the unknown of each column after the column interchanges
  float amax = 0.0f;
  for (int u = 0; u < 4; ++u) {
    b[u] = 0.0f;
    unknown[u] = u;
    for (int q = 0; q < 4; ++q) {
      a[u * 4 + q] = 0.0f;
    }
  }
  for (int i = 0; i < n1; ++i) {
    for (int j = 0; j < n2; ++j) {
      const int u = i * n2 + j;  // the equation of entry (i, j), the unknown x_ij
      b[u] = d[i * 4 + n1 + j];
      for (int k = 0; k < n1; ++k) {
        a[u * 4 + k * n2 + j] += d[i * 4 + k];
      }
      for (int k = 0; k < n2; ++k) {
        a[u * 4 + i * n2 + k] -= d[(n1 + k) * 4 + n1 + j];
      }
    }
  }
  for (int u = 0; u < nu; ++u) {
    for (int q = 0; q < nu; ++q) {
      amax = metal::max(amax, metal::fabs(a[u * 4 + q]));
    }
  }
  const float smin = metal::max(kEigUlp * amax, kSafeMin / kEigUlp);
  for (int p = 0; p < nu; ++p) {
    int pr = p, pc = p;
    for (int u = p; u < nu; ++u) {
      for (int q = p; q < nu; ++q) {
        if (metal::fabs(a[u * 4 + q]) > metal::fabs(a[pr * 4 + pc])) {
          pr = u;
          pc = q;
        }
      }
    }
    for (int q = 0; q < nu; ++q) {
      eig_exchange(a, p * 4 + q, pr * 4 + q);
    }
    eig_exchange(b, p, pr);
    for (int u = 0; u < nu; ++u) {
      eig_exchange(a, u * 4 + p, u * 4 + pc);
    }
    const int tu = unknown[p];
    unknown[p] = unknown[pc];
    unknown[pc] = tu;
    if (metal::fabs(a[p * 4 + p]) < smin) {
      a[p * 4 + p] = smin;
    }
    for (int u = p + 1; u < nu; ++u) {
      const float f = a[u * 4 + p] / a[p * 4 + p];
      for (int q = p + 1; q < nu; ++q) {
        a[u * 4 + q] -= f * a[p * 4 + q];
      }
      b[u] -= f * b[p];
    }
  }
  for (int p = nu - 1; p >= 0; --p) {
    float s = b[p];
    for (int q = p + 1; q < nu; ++q) {
      s -= a[p * 4 + q] * y[q];
    }
    y[p] = s / a[p * 4 + p];
  }
  for (int p = 0; p < nu; ++p) {
    const int u = unknown[p];
    x[(u / n2) * 2 + u % n2] = y[p];
  }
}

// The 2 x 2 block at j of t (order m, row-major) in xLANV2's standard form, the rotation
// applied to the rest of t and to v's columns j, j + 1 (a lane a row and a column).
inline void eig_standardize_block(threadgroup float* t, threadgroup float* v, int m, int j,
                                  int lane) {
  const EigLanv2 r = eig_lanv2(t[j * m + j], t[j * m + j + 1], t[(j + 1) * m + j],
                               t[(j + 1) * m + j + 1]);
  eig_barrier(EigSimdSync());  // every lane has read the block
  eig_rotate_pair(t, v, m, j, r.cs, r.sn, uint(lane), kSimdWidth);
  if (lane == 0) {
    t[j * m + j] = r.a;
    t[j * m + j + 1] = r.b;
    t[(j + 1) * m + j] = r.c;
    t[(j + 1) * m + j + 1] = r.d;
  }
  eig_barrier(EigSimdSync());
}

// xLAEXC: the adjacent diagonal blocks of orders n1 and n2 at j1 of the real Schur form t
// (order m <= kSimdWidth, row-major, in threadgroup memory) swapped by an orthogonal
// similarity, accumulated in the columns of v; false, with nothing changed, where the swap is
// rejected (LAPACK's test: the swapped block would be perturbed by more than 10 eps ||D||).
// Run by every lane of one simdgroup: each computes the same small transform from the same
// entries, then applies it to its own column (from the left) or row (from the right).
inline bool eig_swap_blocks(threadgroup float* t, threadgroup float* v, int m, int j1, int n1,
                            int n2, int lane) {
  if (n1 == 1 && n2 == 1) {
    const int j2 = j1 + 1;
    const float t11 = t[j1 * m + j1], t22 = t[j2 * m + j2];
    float cs, sn;
    eig_lartg(t[j1 * m + j2], t22 - t11, cs, sn);
    eig_barrier(EigSimdSync());
    eig_rotate_pair(t, v, m, j1, cs, sn, uint(lane), kSimdWidth);
    if (lane == 0) {
      t[j1 * m + j1] = t22;
      t[j2 * m + j2] = t11;
    }
    eig_barrier(EigSimdSync());
    return true;
  }
  const int nd = n1 + n2;
  float d[16];
  float dnorm = 0.0f;
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      d[r * 4 + c] = r < nd && c < nd ? t[(j1 + r) * m + j1 + c] : 0.0f;
      dnorm = metal::max(dnorm, metal::fabs(d[r * 4 + c]));
    }
  }
  const float thresh = metal::max(10.0f * kEigUlp * dnorm, kSafeMin / kEigUlp);
  float x[4];
  eig_sylvester(d, n1, n2, x);
  float3 u1 = float3(0.0f), u2 = float3(0.0f);
  float tau1 = 0.0f, tau2 = 0.0f;
  float fixed = 0.0f;  // the 1 x 1 block's entry, which the swap moves exactly
  bool accept = false;
  if (n1 == 1) {
    // (1, x11, x12) H = (0, 0, *): the reflector's 1 last.
    float alpha = x[1], a1 = 1.0f, a2 = x[0];
    tau1 = eig_larfg(alpha, a1, a2, 3);
    u1 = float3(a1, a2, 1.0f);
    fixed = t[j1 * m + j1];
    eig_house3_left(d, 0, 0, u1, tau1);
    eig_house3_left(d, 0, 1, u1, tau1);
    eig_house3_left(d, 0, 2, u1, tau1);
    for (int r = 0; r < 3; ++r) {
      eig_house3_right(d, r, 0, u1, tau1);
    }
    accept = metal::max(metal::max(metal::fabs(d[2 * 4 + 0]), metal::fabs(d[2 * 4 + 1])),
                        metal::fabs(d[2 * 4 + 2] - fixed)) <= thresh;
  } else if (n2 == 1) {
    // H (-x11, -x21, 1)^T = (*, 0, 0)^T.
    float alpha = -x[0], a1 = -x[2], a2 = 1.0f;
    tau1 = eig_larfg(alpha, a1, a2, 3);
    u1 = float3(1.0f, a1, a2);
    fixed = t[(j1 + 2) * m + j1 + 2];
    for (int c = 0; c < 3; ++c) {
      eig_house3_left(d, 0, c, u1, tau1);
    }
    for (int r = 0; r < 3; ++r) {
      eig_house3_right(d, r, 0, u1, tau1);
    }
    accept = metal::max(metal::max(metal::fabs(d[1 * 4 + 0]), metal::fabs(d[2 * 4 + 0])),
                        metal::fabs(d[0 * 4 + 0] - fixed)) <= thresh;
  } else {
    // H2 H1 [-X; I] = [R; 0].
    float alpha = -x[0], a1 = -x[2], a2 = 1.0f;
    tau1 = eig_larfg(alpha, a1, a2, 3);
    u1 = float3(1.0f, a1, a2);
    const float temp = -tau1 * (x[1] + u1.y * x[3]);
    float beta = -temp * u1.y - x[3], b1 = -temp * u1.z, b2 = 1.0f;
    tau2 = eig_larfg(beta, b1, b2, 3);
    u2 = float3(1.0f, b1, b2);
    for (int c = 0; c < 4; ++c) {
      eig_house3_left(d, 0, c, u1, tau1);
    }
    for (int r = 0; r < 4; ++r) {
      eig_house3_right(d, r, 0, u1, tau1);
    }
    for (int c = 0; c < 4; ++c) {
      eig_house3_left(d, 1, c, u2, tau2);
    }
    for (int r = 0; r < 4; ++r) {
      eig_house3_right(d, r, 1, u2, tau2);
    }
    accept = metal::max(metal::max(metal::fabs(d[2 * 4 + 0]), metal::fabs(d[2 * 4 + 1])),
                        metal::max(metal::fabs(d[3 * 4 + 0]), metal::fabs(d[3 * 4 + 1]))) <= thresh;
  }
  if (!accept) {
    return false;  // nothing written: the lanes' reads need no barrier
  }
  eig_barrier(EigSimdSync());  // every lane has read d
  if (n1 == 1) {
    if (lane >= j1 && lane < m) {
      eig_house3_left(t, m, j1, lane, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane <= j1 + 1) {
      eig_house3_right(t, m, lane, j1, u1, tau1);
    }
    if (lane < m) {
      eig_house3_right(v, m, lane, j1, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane == 0) {
      t[(j1 + 2) * m + j1] = 0.0f;
      t[(j1 + 2) * m + j1 + 1] = 0.0f;
      t[(j1 + 2) * m + j1 + 2] = fixed;
    }
  } else if (n2 == 1) {
    // From the right first (LAPACK's order): the left one skips column j1, set below.
    if (lane <= j1 + 2) {
      eig_house3_right(t, m, lane, j1, u1, tau1);
    }
    if (lane < m) {
      eig_house3_right(v, m, lane, j1, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane > j1 && lane < m) {
      eig_house3_left(t, m, j1, lane, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane == 0) {
      t[j1 * m + j1] = fixed;
      t[(j1 + 1) * m + j1] = 0.0f;
      t[(j1 + 2) * m + j1] = 0.0f;
    }
  } else {
    if (lane >= j1 && lane < m) {
      eig_house3_left(t, m, j1, lane, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane <= j1 + 3) {
      eig_house3_right(t, m, lane, j1, u1, tau1);
    }
    eig_barrier(EigSimdSync());
    if (lane >= j1 && lane < m) {
      eig_house3_left(t, m, j1 + 1, lane, u2, tau2);
    }
    eig_barrier(EigSimdSync());
    if (lane <= j1 + 3) {
      eig_house3_right(t, m, lane, j1 + 1, u2, tau2);
    }
    if (lane < m) {
      eig_house3_right(v, m, lane, j1, u1, tau1);
      eig_house3_right(v, m, lane, j1 + 1, u2, tau2);
    }
    eig_barrier(EigSimdSync());
    if (lane == 0) {
      t[(j1 + 2) * m + j1] = 0.0f;
      t[(j1 + 2) * m + j1 + 1] = 0.0f;
      t[(j1 + 3) * m + j1] = 0.0f;
      t[(j1 + 3) * m + j1 + 1] = 0.0f;
    }
  }
  eig_barrier(EigSimdSync());
  if (n2 == 2) {
    eig_standardize_block(t, v, m, j1, lane);
  }
  if (n1 == 2) {
    eig_standardize_block(t, v, m, j1 + n2, lane);
  }
  return true;
}

// (I - tau u u^T) on the count entries a[base + i stride] (a row, from the right, or a column,
// from the left: the same sums).
inline void eig_reflect_strided(threadgroup float* a, int base, int stride,
                                threadgroup const float* u, int count, float tau) {
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) {
    sum += u[i] * a[base + i * stride];
  }
  sum *= tau;
  for (int i = 0; i < count; ++i) {
    a[base + i * stride] -= sum * u[i];
  }
}

// The jw entries a[base + k stride] (a row of a slab, multiplied by V from the right, or a
// column, by V^T from the left: the same sums) replaced by their product with V (jw x jw,
// row-major), by one simdgroup: lane k loads entry k, and lane c sums its result from the
// others' by broadcasts (no lane holds the whole row or column: registers stay few).
template <typename P>
inline void eig_aed_apply(P a, long base, int stride, int jw, threadgroup const float* v,
                          int lane) {
  const bool mine = lane < jw;
  const float x = mine ? a[base + long(lane) * stride] : 0.0f;
  float s = 0.0f;
  for (int k = 0; k < jw; ++k) {
    s += simd_broadcast(x, ushort(k)) * (mine ? v[k * jw + lane] : 0.0f);
  }
  if (mine) {
    a[base + long(lane) * stride] = s;
  }
}

// Aggressive early deflation (xLAQR3) on the trailing jw = kEigAedWindow rows of the active
// block ktop..kbot: the window's Schur form T = V^T H_w V (eig_schur in threadgroup memory), the
// spike s V(0, :) that joins it to the rest (s = H[kwtop, kwtop - 1]), and the eigenvalues at
// the bottom of T whose spike entries are negligible (LAPACK's test: |s v_0j| <= max(smlnum,
// ulp |t_jj|), a 2 x 2 block by both entries and |t| + sqrt|b| sqrt|c|) deflated; an eigenvalue
// that is not is moved to the top of T (xTREXC, by eig_swap_blocks) and the next one is tried.
// Those left are taken back to Hessenberg form (the spike reflected onto its first entry,
// xGEHRD), T is written back into H and V applied to the rows above the window, the columns to
// its right and Z (LAPACK's wantt and wantz: the rows of the active block only, no columns and
// no Z for eigenvalues alone). Returns the number of eigenvalues deflated (their values in wv),
// 0 with H unchanged where the window's QR iteration failed. Braman, Byers and Mathias, "The
// multishift QR algorithm. Part II: Aggressive early deflation", SIAM J. Matrix Anal. Appl. 23
// (2002) 948-973.
template <typename P>
inline int eig_aed(thread EigWork<float, P>& w, int ktop, int kbot, device float2* wv,
                   float smlnum) {
  const int n = w.n, jw = kEigAedWindow, kwtop = kbot - jw + 1;
  threadgroup float* t = w.aed;
  threadgroup float* v = t + jw * jw;
  threadgroup float* q = v + jw * jw;
  const float s = w.h[kwtop * n + kwtop - 1];
  // Simdgroup 0 alone, a lane a row or a column (its barriers are a simdgroup's), up to T and V
  // final; the others wait at the barrier after it.
  if (w.sg == 0) {
    const int lane = int(w.lane);
    for (int e = lane; e < jw * jw; e += kSimdWidth) {
      const int r = e / jw, c = e % jw;
      t[e] = r > c + 1 ? 0.0f : w.h[(kwtop + r) * n + kwtop + c];
      v[e] = r == c ? 1.0f : 0.0f;
    }
    eig_barrier(EigSimdSync());
    // The window's whole Schur form and its vectors, whatever H's.
    EigWork<float, threadgroup float*> win = eig_simdgroup_work(w, t, v, jw, true);
    int kept = -1;  // the window's QR iteration failed: no deflation, H unchanged
    if (eig_schur<threadgroup float*, EigSimdSync>(win, 0, jw - 1, wv + kwtop) == 0) {
      // The deflation test from the bottom (the same decisions in every lane): positions
      // [0, top) hold the eigenvalues found not to deflate, [top, kept) those still to test,
      // [kept, jw) the deflated ones.
      kept = jw;
      int top = 0;
      for (int pass = 0; pass < jw && top < kept; ++pass) {
        const bool pair = kept - 2 >= top && t[(kept - 1) * jw + kept - 2] != 0.0f;
        const int nb = pair ? 2 : 1, k = kept - nb;
        float foo = metal::fabs(t[(kept - 1) * jw + kept - 1]);
        float spike = metal::fabs(s * v[kept - 1]);
        if (pair) {
          foo += metal::sqrt(metal::fabs(t[(kept - 1) * jw + kept - 2])) *
                 metal::sqrt(metal::fabs(t[(kept - 2) * jw + kept - 1]));
          spike = metal::max(spike, metal::fabs(s * v[kept - 2]));
        }
        if (foo == 0.0f) {
          foo = metal::fabs(s);
        }
        if (spike <= metal::max(smlnum, kEigUlp * foo)) {
          kept = k;
          continue;
        }
        // Not deflatable: moved up to position top, block by block.
        int here = k;
        bool moved = true;
        while (moved && here > top) {
          const int above = here - 2 >= top && t[(here - 1) * jw + here - 2] != 0.0f ? 2 : 1;
          moved = eig_swap_blocks(t, v, jw, here - above, above, nb, lane);
          if (moved) {
            here -= above;
            // A pair whose eigenvalues came out real (xLANV2 split it) stops the search.
            moved = nb == 1 || t[(here + 1) * jw + here] != 0.0f;
          }
        }
        if (!moved || here != top) {
          break;  // the rest stays undeflated
        }
        top += nb;
      }
      if (kept > 1 && s != 0.0f) {
        // The spike s V(0, 0:kept) reflected onto its first entry: H0 = I - tau u u^T with
        // H0 V(0, 0:kept)^T = beta e_0, applied to T's first kept rows and columns and to V.
        float beta, scal;
        const float tau = eig_reflector(v[0], eig_norm(v, 1, 1, kept - 1), beta, scal);
        threadgroup float* u = q;  // Q is formed below, after u's last use
        for (int i = lane; i < kept; i += kSimdWidth) {
          u[i] = i == 0 ? 1.0f : v[i] * scal;
        }
        eig_barrier(EigSimdSync());
        for (int c = lane; c < jw; c += kSimdWidth) {
          eig_reflect_strided(t, c, jw, u, kept, tau);
        }
        eig_barrier(EigSimdSync());
        for (int r = lane; r < jw; r += kSimdWidth) {
          if (r < kept) {
            eig_reflect_strided(t, r * jw, 1, u, kept, tau);
          }
          eig_reflect_strided(v, r * jw, 1, u, kept, tau);
        }
        eig_barrier(EigSimdSync());
        if (kept > 2) {
          // T's first kept rows and columns back to Hessenberg form, Q formed in q; V <- V Q.
          win.z = q;
          eig_hessenberg<float, threadgroup float*, EigSimdSync>(win, 0, kept - 1);
          for (int r = 0; r < jw; ++r) {
            eig_aed_apply(v, long(r) * jw, 1, jw, q, lane);
          }
          eig_barrier(EigSimdSync());
        }
      }
    }
    if (lane == 0) {
      w.aed_kept[0] = kept;
    }
  }
  eig_sync();
  const int kept = w.aed_kept[0];
  if (kept < 0) {
    return 0;
  }
  // T back into H (its Hessenberg part; below it H is zero) and the spike's one entry left
  // (none when every eigenvalue deflated: xLAQR3's s = 0).
  for (int e = int(w.tid); e < jw * jw; e += int(w.nth)) {
    const int r = e / jw, c = e % jw;
    if (r <= c + 1) {
      w.h[(kwtop + r) * n + kwtop + c] = t[e];
    }
  }
  if (w.tid == 0) {
    w.h[kwtop * n + kwtop - 1] = kept == 0 ? 0.0f : s * v[0];
  }
  // The deflated eigenvalues, from T's standardised blocks.
  for (int i = kept + int(w.tid); i < jw; i += int(w.nth)) {
    const bool first = i + 1 < jw && t[(i + 1) * jw + i] != 0.0f;
    const bool second = i > kept && t[i * jw + i - 1] != 0.0f;
    const int j = second ? i - 1 : i;  // the block's first row
    const float im = first || second ? metal::sqrt(metal::fabs(t[j * jw + j + 1])) *
                                           metal::sqrt(metal::fabs(t[(j + 1) * jw + j]))
                                     : 0.0f;
    wv[kwtop + i] = float2(t[i * jw + i], second ? -im : im);
  }
  // V applied to the rest: the rows above the window, the columns right of it, Z.
  // A simdgroup a row or a column.
  const bool wantt = w.vectors;
  const int lane = int(w.lane);
  for (int r = (wantt ? 0 : ktop) + int(w.sg); r < kwtop; r += int(w.nsg)) {
    eig_aed_apply(w.h, long(r) * n + kwtop, 1, jw, v, lane);
  }
  if (wantt) {
    for (int c = kbot + 1 + int(w.sg); c < n; c += int(w.nsg)) {
      eig_aed_apply(w.h, long(kwtop) * n + c, n, jw, v, lane);
    }
    for (int r = int(w.sg); r < n; r += int(w.nsg)) {
      eig_aed_apply(w.z, long(r) * n + kwtop, 1, jw, v, lane);
    }
  }
  eig_sync();
  return jw - kept;
}

// The Schur form by multishift sweeps while the active window is large (xLAQR0's outer loop),
// each preceded by aggressive early deflation (eig_aed) where w.aed is set, xLAHQR's
// double-shift sweeps (eig_schur) on the small windows left at the bottom. Same contract as
// eig_schur.
template <typename P>
inline int eig_schur_multishift(thread EigWork<float, P>& w, int ilo, int ihi,
                                device float2* wv) {
  const int n = w.n;
  const int nh = ihi - ilo + 1;
  if (nh < kEigMultishiftMinOrder) {
    return eig_schur(w, ilo, ihi, wv);
  }
  const float smlnum = kSafeMin * (float(nh) / kEigUlp);
  const int itmax = kEigItmaxPerOrder * metal::max(kEigItmaxMinOrder, nh);
  int kbot = ihi;
  int sweeps = 0;  // multishift sweeps since the last deflation
  for (int it = 0; it <= itmax && kbot >= ilo; ++it) {
    const int ktop = eig_deflation_point(w, ilo, kbot, ilo, ihi, smlnum);
    eig_sync();  // every thread has read where the window starts
    if (w.tid == 0 && ktop > ilo) {
      w.h[ktop * n + ktop - 1] = 0.0f;
    }
    eig_sync();
    if (kbot - ktop + 1 < kEigMultishiftMinOrder) {
      const int status = eig_schur(w, ktop, kbot, wv);
      if (status != 0) {
        return status;
      }
      kbot = ktop - 1;
      sweeps = 0;
      continue;
    }
    if (w.aed_on) {
      const int deflated = eig_aed(w, ktop, kbot, wv, smlnum);
      if (deflated > 0) {
        kbot -= deflated;
        sweeps = 0;
        // xLAQR0: no sweep after a window that deflated many (the next one likely deflates
        // more without it), nor once the active block is small.
        if (100 * deflated > kEigAedNibble * kEigAedWindow ||
            kbot - ktop + 1 < kEigMultishiftMinOrder) {
          continue;
        }
      }
    }
    ++sweeps;
    eig_multishift_shifts(w, ktop, kbot, sweeps % kEigExceptional == 0, wv);
    eig_multishift_sweep(w, ktop, kbot, wv + kbot - kEigShifts + 1);
  }
  return kbot >= ilo ? kbot + 1 : 0;
}

// Which QR iteration eig_solve runs: eig_device on real input takes the multishift sweeps
// (EigMultishift), the other kernels xLAHQR's (EigDoubleShift). A tag type, not an overload on
// the pointer's address space: the CUDA executor erases address spaces, and there an overload
// set on them silently resolved eig_group to the device kernel's sweeps.
struct EigDoubleShift {};
struct EigMultishift {};
template <typename T> struct EigDeviceSchur { using type = EigDoubleShift; };
template <> struct EigDeviceSchur<float> { using type = EigMultishift; };

template <typename P>
inline int eig_schur_by(EigMultishift, thread EigWork<float, P>& w, int ilo, int ihi,
                        device float2* wv) {
  return eig_schur_multishift(w, ilo, ihi, wv);
}

// Single-shift complex QR on the complex Hessenberg h (xLAHQR's complex form, with general
// complex reflectors). Same contract as the real one.
template <typename P>
inline int eig_schur(thread EigWork<float2, P>& w, int ilo, int ihi, device float2* wv) {
  const int n = w.n;
  const bool wantt = w.vectors;
  const int nh = ihi - ilo + 1;
  const float smlnum = kSafeMin * (float(nh) / kEigUlp);
  const int itmax = kEigItmaxPerOrder * metal::max(kEigItmaxMinOrder, nh);
  int kdefl = 0;
  int i = ihi;
  for (int outer = 0; outer < n && i >= ilo; ++outer) {
    int l = ilo;
    bool converged = false;
    for (int its = 0; its <= itmax; ++its) {
      l = eig_deflation_point(w, l, i, ilo, ihi, smlnum);
      const int i1 = wantt ? 0 : l, i2 = wantt ? n - 1 : i;
      float2 v[2] = {float2(0.0f), float2(0.0f)};
      int m = l;
      if (l < i) {
        ++kdefl;
        float2 t;
        if (kdefl % (2 * kEigExceptional) == 0) {
          t = float2(kEigExcDat1 * abs1(w.h[i * n + i - 1]), 0.0f) + w.h[i * n + i];
        } else if (kdefl % kEigExceptional == 0) {
          t = float2(kEigExcDat1 * abs1(w.h[(l + 1) * n + l]), 0.0f) + w.h[l * n + l];
        } else {
          // Wilkinson's shift: the eigenvalue of the trailing 2 x 2 nearer h_ii.
          t = w.h[i * n + i];
          const float2 u = mul(eig_csqrt(w.h[(i - 1) * n + i]), eig_csqrt(w.h[i * n + i - 1]));
          float s = abs1(u);
          if (s != 0.0f) {
            const float2 x = 0.5f * (w.h[(i - 1) * n + i - 1] - t);
            const float sx = abs1(x);
            s = metal::max(s, sx);
            float2 y = s * eig_csqrt(mul(x / s, x / s) + mul(u / s, u / s));
            if (sx > 0.0f && (x.x / sx) * y.x + (x.y / sx) * y.y < 0.0f) {
              y = -y;
            }
            t = t - mul(u, div(u, x + y));
          }
        }
        // Two consecutive small subdiagonals: where the bulge may start.
        for (m = i - 1; m >= l; --m) {
          const float2 h11 = w.h[m * n + m], h22 = w.h[(m + 1) * n + m + 1];
          float2 h11s = h11 - t;
          float2 h21 = w.h[(m + 1) * n + m];
          const float s = abs1(h11s) + abs1(h21);
          h11s /= s;
          h21 /= s;
          v[0] = h11s;
          v[1] = h21;
          if (m == l) {
            break;
          }
          const float h10 = abs1(w.h[m * n + m - 1]);
          if (h10 * abs1(h21) <= kEigUlp * (abs1(h11s) * (abs1(h11) + abs1(h22)))) {
            break;
          }
        }
      }
      eig_sync();  // every thread has read what it decides from
      if (w.tid == 0 && l > ilo) {
        w.h[l * n + l - 1] = float2(0.0f);
      }
      if (l >= i) {
        converged = true;
        break;
      }
      for (int k = m; k <= i - 1; ++k) {
        if (k > m) {
          v[0] = w.h[k * n + k - 1];
          v[1] = w.h[(k + 1) * n + k - 1];
        }
        float2 unused = float2(0.0f);
        const float2 t1 = eig_larfg(v[0], v[1], unused, 2);
        const float2 v2 = v[1], ct1 = conj(t1);
        for (int j = k + int(w.tid); j <= i2; j += int(w.nth)) {
          const float2 s = mul(ct1, w.h[k * n + j] + mul(conj(v2), w.h[(k + 1) * n + j]));
          w.h[k * n + j] -= s;
          w.h[(k + 1) * n + j] -= mul(s, v2);
        }
        eig_sync();
        const int last = metal::min(k + 2, i);
        for (int r = i1 + int(w.tid); r <= last; r += int(w.nth)) {
          const float2 s = mul(t1, w.h[r * n + k] + mul(v2, w.h[r * n + k + 1]));
          w.h[r * n + k] -= s;
          w.h[r * n + k + 1] -= mul(s, conj(v2));
        }
        if (wantt) {
          for (int r = int(w.tid); r < n; r += int(w.nth)) {
            const float2 s = mul(t1, w.z[r * n + k] + mul(v2, w.z[r * n + k + 1]));
            w.z[r * n + k] -= s;
            w.z[r * n + k + 1] -= mul(s, conj(v2));
          }
        }
        if (w.tid == 0) {
          if (k > m) {
            w.h[k * n + k - 1] = v[0];
            w.h[(k + 1) * n + k - 1] = float2(0.0f);
          } else if (m > l) {
            w.h[k * n + k - 1] = mul(w.h[k * n + k - 1], float2(1.0f, 0.0f) - ct1);
          }
        }
        eig_sync();
      }
    }
    if (!converged) {
      return i + 1;
    }
    if (w.tid == 0) {
      wv[i] = w.h[i * n + i];
    }
    eig_sync();
    kdefl = 0;
    i = l - 1;
  }
  return 0;
}

template <typename T, typename P>
inline int eig_schur_by(EigDoubleShift, thread EigWork<T, P>& w, int ilo, int ihi,
                        device float2* wv) {
  return eig_schur(w, ilo, ihi, wv);
}

// ---- 5. eigenvectors ----

// x scaled by 2^-shift in rows lo..hi (exact, small entries may flush to zero).
inline void eig_rescale(device float2* x, int n, int k, int lo, int hi, int shift) {
  for (int r = lo; r <= hi; ++r) {
    x[r * n + k] = eig_ldexp(x[r * n + k], -shift);
  }
}

// The exponent by which num / den would exceed 2^kEigGrowthExp (0 if it does not).
inline int eig_growth(float num, float den) {
  if (num == 0.0f) {
    return 0;
  }
  int en = 0, ed = 0;
  metal::frexp(num, en);
  metal::frexp(den, ed);
  return metal::max(0, en - ed - kEigGrowthExp);
}

// Column k of X: the eigenvector of the quasi-triangular t for eigenvalue lam (for the first of
// a complex pair of a real t, top = k + 1). Returns the last row used.
template <typename T, typename P>
inline int eig_back_substitute(P t, int n, int k, float2 lam, device float2* x, float smlnum) {
  int top = k;
  const bool pair = k + 1 < n && !is_zero(t[(k + 1) * n + k]);
  if (pair) {
    top = k + 1;
    const float2 a = eig_c(t[k * n + k]), b = eig_c(t[k * n + k + 1]);
    const float2 c = eig_c(t[(k + 1) * n + k]), d = eig_c(t[(k + 1) * n + k + 1]);
    // A null vector of the block minus lam: (b, lam - a) or (lam - d, c), the larger.
    if (abs1(b) + abs1(lam - a) >= abs1(c) + abs1(lam - d)) {
      x[k * n + k] = b;
      x[(k + 1) * n + k] = lam - a;
    } else {
      x[k * n + k] = lam - d;
      x[(k + 1) * n + k] = c;
    }
  } else {
    x[k * n + k] = float2(1.0f, 0.0f);
  }
  const float smin = metal::max(kEigUlp * abs1(lam), smlnum);
  int j = k - 1;
  for (int step = 0; step < n && j >= 0; ++step) {
    const bool block = j >= 1 && !is_zero(t[j * n + j - 1]);
    if (!block) {
      float2 rhs = float2(0.0f);
      for (int c = j + 1; c <= top; ++c) {
        rhs -= mul(eig_c(t[j * n + c]), x[c * n + k]);
      }
      float2 den = eig_c(t[j * n + j]) - lam;
      if (abs1(den) < smin) {
        den = float2(smin, 0.0f);
      }
      const int shift = eig_growth(abs1(rhs), abs1(den));
      if (shift > 0) {
        eig_rescale(x, n, k, j + 1, top, shift);
        rhs = eig_ldexp(rhs, -shift);
      }
      x[j * n + k] = div(rhs, den);
      --j;
      continue;
    }
    // Rows j-1, j: a 2 x 2 block of the real Schur form.
    float2 r0 = float2(0.0f), r1 = float2(0.0f);
    for (int c = j + 1; c <= top; ++c) {
      r0 -= mul(eig_c(t[(j - 1) * n + c]), x[c * n + k]);
      r1 -= mul(eig_c(t[j * n + c]), x[c * n + k]);
    }
    const float2 a11 = eig_c(t[(j - 1) * n + j - 1]) - lam, a12 = eig_c(t[(j - 1) * n + j]);
    const float2 a21 = eig_c(t[j * n + j - 1]), a22 = eig_c(t[j * n + j]) - lam;
    float2 det = mul(a11, a22) - mul(a12, a21);
    const float amax = metal::max(metal::max(abs1(a11), abs1(a12)), metal::max(abs1(a21), abs1(a22)));
    const float dmin = smin * metal::max(amax, smin);
    if (abs1(det) < dmin) {
      det = float2(dmin, 0.0f);
    }
    float2 n0 = mul(r0, a22) - mul(a12, r1);
    float2 n1 = mul(a11, r1) - mul(a21, r0);
    const int shift = eig_growth(metal::max(abs1(n0), abs1(n1)), abs1(det));
    if (shift > 0) {
      eig_rescale(x, n, k, j + 1, top, shift);
      n0 = eig_ldexp(n0, -shift);
      n1 = eig_ldexp(n1, -shift);
    }
    x[(j - 1) * n + k] = div(n0, det);
    x[j * n + k] = div(n1, det);
    j -= 2;
  }
  return top;
}

inline float2 eig_mul(float a, float2 b) { return a * b; }
inline float2 eig_mul(float2 a, float2 b) { return mul(a, b); }

// Whether column k of the eigenvectors is computed as the conjugate of column k - 1 (the second
// of a complex pair of real input).
template <typename T, typename P>
inline bool eig_second_of_pair(P t, int n, int k, T) {
  return false;
}
template <typename P>
inline bool eig_second_of_pair(P t, int n, int k, float) {
  return k >= 1 && t[k * n + k - 1] != 0.0f;
}

// log2 of row r's balancing scale (a power of 2; 1 outside ilo..ihi).
template <typename T, typename P>
inline int eig_balance_exponent(thread EigWork<T, P>& w, int r, int ilo, int ihi) {
  int e = 1;
  if (r >= ilo && r <= ihi) {
    metal::frexp(w.scale[r], e);  // scale = 2^(e - 1)
  }
  return e - 1;
}

template <typename T, typename P>
inline void eig_vectors(thread EigWork<T, P>& w, int ilo, int ihi, device float2* wv,
                        device float2* vout, float smlnum) {
  const int n = w.n;
  // X: one thread per eigenvector.
  for (int k = int(w.tid); k < n; k += int(w.nth)) {
    if (!eig_second_of_pair(w.h, n, k, T())) {
      eig_back_substitute<T>(w.h, n, k, wv[k], w.x, smlnum);
    }
  }
  eig_sync();
  // V = Z X (X is upper quasi-triangular): one thread per entry.
  for (int item = int(w.tid); item < n * n; item += int(w.nth)) {
    const int r = item / n, k = item % n;
    if (eig_second_of_pair(w.h, n, k, T())) {
      continue;
    }
    const bool pair = k + 1 < n && !is_zero(w.h[(k + 1) * n + k]);
    const int top = pair ? k + 1 : k;
    float2 s = float2(0.0f);
    for (int j = 0; j <= top; ++j) {
      s += eig_mul(w.z[r * n + j], w.x[j * n + k]);
    }
    vout[r * n + k] = s;
  }
  eig_sync();
  // The balancing undone (xGEBAK), then unit 2-norm with the largest component real: one thread
  // per column.
  for (int k = int(w.tid); k < n; k += int(w.nth)) {
    if (eig_second_of_pair(w.h, n, k, T())) {
      continue;
    }
    // Each entry times its row's balancing power of 2 and 2^-shift at once, the shift putting
    // the largest product near 1: entries of x near 2^kEigGrowthExp times the balancing's
    // powers could overflow before the normalisation. Powers of 2 only: the normalised vectors
    // have the bits the plain products give where those do not overflow.
    int shift = 0;
    bool any = false;
    for (int r = 0; r < n; ++r) {
      const float m = modulus(vout[r * n + k]);
      if (m > 0.0f) {
        int e = 0;
        metal::frexp(m, e);
        const int product = e + eig_balance_exponent(w, r, ilo, ihi);
        shift = any ? metal::max(shift, product) : product;
        any = true;
      }
    }
    for (int r = 0; r < n; ++r) {
      vout[r * n + k] = eig_ldexp(vout[r * n + k], eig_balance_exponent(w, r, ilo, ihi) - shift);
    }
    for (int r = ilo - 1; r >= 0; --r) {
      const int p = w.perm[r];
      const float2 tmp = vout[r * n + k];
      vout[r * n + k] = vout[p * n + k];
      vout[p * n + k] = tmp;
    }
    for (int r = ihi + 1; r < n; ++r) {
      const int p = w.perm[r];
      const float2 tmp = vout[r * n + k];
      vout[r * n + k] = vout[p * n + k];
      vout[p * n + k] = tmp;
    }
    float big = 0.0f;
    for (int r = 0; r < n; ++r) {
      big = metal::max(big, modulus(vout[r * n + k]));
    }
    float sum = 0.0f, best = -1.0f;
    int at = 0;
    for (int r = 0; r < n; ++r) {
      const float2 q = vout[r * n + k] / big;
      const float a2 = eig_abs2(q);
      sum += a2;
      if (a2 > best) {
        best = a2;
        at = r;
      }
    }
    const float inv = 1.0f / (big * metal::sqrt(sum));
    const bool pair = k + 1 < n && !is_zero(w.h[(k + 1) * n + k]);
    // The phase making the largest component real (a real vector of real input keeps its sign,
    // as LAPACK's).
    float2 phase = float2(inv, 0.0f);
    const float2 top = vout[at * n + k];
    if (top.y != 0.0f) {
      phase = conj(top) * (inv / modulus(top));
    }
    for (int r = 0; r < n; ++r) {
      float2 q = mul(vout[r * n + k], phase);
      if (r == at) {
        q.y = 0.0f;
      }
      vout[r * n + k] = q;
      if (pair) {
        vout[r * n + k + 1] = conj(q);
      }
    }
  }
}

// ---- the whole solver for one matrix ----

template <typename T, typename Schur, typename P>
inline void eig_solve(device const T* a, device float2* wout, device float2* vout,
                      device int* info, thread EigWork<T, P>& w, long b) {
  const int n = w.n;
  const long nn = long(n) * n;
  device const T* ab = a + b * nn;
  device float2* wb = wout + b * n;
  device float2* vb = vout + b * nn;
  float amax = 0.0f, bad = 0.0f;
  for (long q = long(w.tid); q < nn; q += long(w.nth)) {
    const T value = ab[q];
    w.h[q] = value;
    bad = eig_finite(value) ? bad : 1.0f;
    amax = metal::max(amax, modulus(value));
  }
  bad = group_max(bad, w.red, w.lane, w.sg, w.nsg, kEigMemory);
  amax = group_max(amax, w.red, w.lane, w.sg, w.nsg, kEigMemory);
  int status = 0;
  int e = 0;
  if (bad == 0.0f) {
    if (amax > 0.0f) {
      metal::frexp(amax, e);
    }
    for (long q = long(w.tid); q < nn; q += long(w.nth)) {
      w.h[q] = eig_ldexp(w.h[q], -e);
    }
    eig_sync();
    int ilo = 0, ihi = n - 1;
    eig_balance(w, ilo, ihi);
    // The balancing can move the whole matrix far from 1 (a companion matrix with coefficients
    // up to 1e29 came out near 1e-28, where the eigenvectors' 2 x 2 solves underflowed to 0 /
    // 0): its largest entry back to [1/2, 1), exactly, the exponent into e.
    float bmax = 0.0f;
    for (long q = long(w.tid); q < nn; q += long(w.nth)) {
      bmax = metal::max(bmax, modulus(w.h[q]));
    }
    bmax = group_max(bmax, w.red, w.lane, w.sg, w.nsg, kEigMemory);
    int eb = 0;
    if (bmax > 0.0f) {
      metal::frexp(bmax, eb);
    }
    if (eb != 0) {
      for (long q = long(w.tid); q < nn; q += long(w.nth)) {
        w.h[q] = eig_ldexp(w.h[q], -eb);
      }
      e += eb;
      eig_sync();
    }
    eig_hessenberg(w, ilo, ihi);
    // Eigenvalues isolated by the balancing.
    for (int t = int(w.tid); t < n; t += int(w.nth)) {
      if (t < ilo || t > ihi) {
        wb[t] = eig_c(w.h[t * n + t]);
      }
    }
    status = eig_schur_by(Schur(), w, ilo, ihi, wb);
    eig_sync();
    if (status == 0 && w.vectors) {
      const float smlnum = kSafeMin * (float(n) / kEigUlp);
      eig_vectors(w, ilo, ihi, wb, vb, smlnum);
      eig_sync();
    }
    if (status == 0) {
      for (int t = int(w.tid); t < n; t += int(w.nth)) {
        wb[t] = eig_ldexp(wb[t], e);
      }
    }
  }
  if (bad != 0.0f || status != 0) {
    for (long q = long(w.tid); q < nn; q += long(w.nth)) {
      if (w.vectors) {
        vb[q] = float2(NAN, NAN);
      }
      if (q < n) {
        wb[q] = float2(NAN, NAN);
      }
    }
  }
  if (w.tid == 0) {
    info[b] = status;
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).
//
// Buffers: a (batch, n, n) input; w (batch, n) complex eigenvalues; v (batch, n, n) complex
// eigenvectors (columns; written when p.vectors); info (batch); tau (batch, 2 n), scale, perm
// (batch, n) workspace; x (batch, n, n) complex workspace (when p.vectors).

// Grid: (threads, batch), one threadgroup per matrix; H (and Z) staged in threadgroup memory:
// n^2 (2 n^2 with vectors) elements within kEigStageBytes.
template <typename T>
[[kernel]] void eig_group(
    device const T* a [[buffer(0)]],
    device float2* w [[buffer(1)]],
    device float2* v [[buffer(2)]],
    device int* info [[buffer(3)]],
    constant mpsl::EigParams& p [[buffer(4)]],
    device T* tau [[buffer(5)]],
    device float* scale [[buffer(6)]],
    device int* perm [[buffer(7)]],
    device float2* x [[buffer(8)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float2 stage[kEigStageBytes / sizeof(float2)];
  threadgroup float red[2 * (kEigMaxThreads / kSimdWidth)];
  const long b = long(tgpos.y);
  const int n = int(p.n);
  threadgroup T* h = reinterpret_cast<threadgroup T*>(&stage[0]);
  EigWork<T, threadgroup T*> wk;
  wk.h = h;
  wk.z = h + long(n) * n;
  wk.tau = tau + b * 2 * n;
  wk.hv = wk.tau + n;
  wk.scale = scale + b * n;
  wk.perm = perm + b * n;
  wk.x = x + (p.vectors != 0 ? b * long(n) * n : 0);
  wk.red = &red[0];
  wk.n = n;
  wk.aed_on = false;  // no multishift sweeps here
  wk.vectors = p.vectors != 0;
  wk.tid = tpos.x;
  wk.nth = tpg.x;
  wk.lane = tpos.x % uint(kSimdWidth);
  wk.sg = tpos.x / uint(kSimdWidth);
  wk.nsg = (tpg.x + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  eig_solve<T, EigDoubleShift>(a, w, v, info, wk, b);
}

// Grid: (threads, batch), one threadgroup per matrix of any order; hz holds H and Z (2 n^2
// elements per matrix).
template <typename T>
[[kernel]] void eig_device(
    device const T* a [[buffer(0)]],
    device float2* w [[buffer(1)]],
    device float2* v [[buffer(2)]],
    device int* info [[buffer(3)]],
    constant mpsl::EigParams& p [[buffer(4)]],
    device T* tau [[buffer(5)]],
    device float* scale [[buffer(6)]],
    device int* perm [[buffer(7)]],
    device float2* x [[buffer(8)]],
    device T* hz [[buffer(9)]],
    uint2 tpos [[thread_position_in_threadgroup]],
    uint2 tgpos [[threadgroup_position_in_grid]],
    uint2 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float red[2 * (kEigMaxThreads / kSimdWidth)];
  threadgroup float shift_block[kEigShifts * kEigShifts];
  threadgroup float4 bulges[kEigShifts / 2];
  threadgroup float aed[3 * kEigAedWindow * kEigAedWindow];
  threadgroup int aed_kept[1];
  const long b = long(tgpos.y);
  const int n = int(p.n);
  const long nn = long(n) * n;
  EigWork<T, device T*> wk;
  wk.shift_block = &shift_block[0];
  wk.bulges = &bulges[0];
  // the deflation windows need a whole simdgroup (always there: the host launches at least one)
  wk.aed_on = p.aed != 0 && tpg.x >= uint(kSimdWidth);
  wk.aed = &aed[0];
  wk.aed_kept = &aed_kept[0];
  wk.h = hz + b * 2 * nn;
  wk.z = wk.h + nn;
  wk.tau = tau + b * 2 * n;
  wk.hv = wk.tau + n;
  wk.scale = scale + b * n;
  wk.perm = perm + b * n;
  wk.x = x + (p.vectors != 0 ? b * nn : 0);
  wk.red = &red[0];
  wk.n = n;
  wk.vectors = p.vectors != 0;
  wk.tid = tpos.x;
  wk.nth = tpg.x;
  wk.lane = tpos.x % uint(kSimdWidth);
  wk.sg = tpos.x / uint(kSimdWidth);
  wk.nsg = (tpg.x + uint(kSimdWidth) - 1) / uint(kSimdWidth);
  eig_solve<T, typename EigDeviceSchur<T>::type>(a, w, v, info, wk, b);
}
