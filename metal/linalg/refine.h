// Mixed-precision iterative refinement: float64-class solutions of A X = B (or X A = B) from a
// float32 LU, with no float64 arithmetic (Metal has none).
//
// The host (mpslinalg/linalg/refine_metal.py) runs:
//   refine_split     each float64 of A and B (its 64 bits) -> three float pieces p0 + p1 + p2,
//                    exact, scaled by a power of two per matrix (df_split3);
//   (LU of A's p0 by the LU kernels; X = 0), then a fixed number of steps, each
//   refine_residual  R = B - A X with A and B exact (three pieces), X a three-float value, every
//                    product exact (two_prod) and summed into a three-float accumulator;
//                    rounded to float for the correction solve; a simdgroup per row of R,
//                    its lanes splitting the row of A (coalesced) and the right-hand sides;
//   (D = LU^-1 R by the blocked triangular kernels, gated by the status: a matrix that
//    stopped costs them a launch and no work)
//   refine_update    per matrix: the normwise backward error of the current X, the decision
//                    (go on, converged, failed) and X += D.
// Why three pieces and three floats: a double-float A is A rounded at 2^-49, a perturbation
// that alone leaves the forward error near cond * 2^-48, about 30 times LAPACK's; a double-float
// accumulator loses 3u^2 ~ 2^-47 of the partial sums at each addition, so the backward error
// could not reach float64's 2^-53; and a double-float X is only good to 2^-49.
//
// Convergence is decided on the device, per matrix, by the rule of LAPACK's dgerfs extended to
// the correction as in xGERFSX (Demmel et al. 2006, "Error bounds from extra-precise iterative
// refinement", ACM TOMS 32(2)): go on while the backward error berr = ||R||max / (||A||inf
// ||X||max + ||B||max) or the correction ||D||max still halves and is above float64's unit
// roundoff (relative to ||X||max for D); the result is accepted when berr <= sqrt(n) * 2^-53
// (the test of LAPACK's dsgesv, Langou et al. 2006), else the matrix is reported as failed. A matrix whose
// input holds NaN or Inf takes two steps (the second residual, the first to read A, carries the
// NaN / Inf into X: NaN in, NaN out) and is not reported.
#pragma once

#include "../common/defines.h"
#include "../common/double_float.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Per-matrix status of the refinement (refine_update writes, every kernel reads).
constant constexpr int kRefineIterating = 0;
constant constexpr int kRefineConverged = 1;
constant constexpr int kRefineFailed = 2;
constant constexpr int kRefineNonfinite = 3;
// Ints of state per matrix: status, steps applied.
constant constexpr int kRefineStateInts = 2;
// Floats of berr per matrix: the last backward error and the last correction's max norm.
constant constexpr int kRefineErrFloats = 2;
// Float64's unit roundoff, 2^-53: a backward error below it cannot improve.
constant constexpr float kRefineEps64 = 1.1102230246251565e-16f;
// A step that does not reduce the backward error by this factor ends the refinement.
constant constexpr float kRefineMinGain = 0.5f;
// Simdgroups of a refine_update threadgroup at most (sizes the reduction scratch).
constant constexpr int kRefineMaxSimdgroups = kMaxThreadsPerGroup / kSimdWidth;

// Scalars of refine_split.
struct RefineSplitParams {
  long count;       // float64 scalars in all
  long per_matrix;  // float64 scalars per matrix (shift index = scalar / per_matrix)
  long plane;       // floats per output piece plane
};

// Scalars of refine_residual and refine_update.
struct RefineParams {
  long n;          // order of A
  long rows;       // rows of B, X and R
  long cols;       // columns of B, X and R
  long left;       // 1: A X = B; 0: X A = B
  long a_plane;    // elements per piece plane of A (batch * n * n)
  long b_plane;    // elements per piece plane of B and X (batch * rows * cols)
  long step;       // the step this launch is (0-based; at step 0, X is zero)
  long max_steps;  // steps the host launches
  float tol;       // the accepted backward error, sqrt(n) * 2^-53
  long tile_cols;  // refine_residual: columns per simdgroup, a power of two dividing kSimdWidth
};

// ---- the three-float accumulator for real and complex elements ----

struct tcomplex {
  tfloat re;
  tfloat im;
};

template <typename T> struct Accum;
template <> struct Accum<float> { typedef tfloat type; };
template <> struct Accum<float2> { typedef tcomplex type; };

inline void acc_init(thread tfloat& acc) { acc = tf_zero(); }
inline void acc_init(thread tcomplex& acc) { acc = tcomplex{tf_zero(), tf_zero()}; }

inline void acc_add(thread tfloat& acc, float b) { acc = tf_add_f(acc, b); }
inline void acc_add(thread tcomplex& acc, float2 b) {
  acc.re = tf_add_f(acc.re, b.x);
  acc.im = tf_add_f(acc.im, b.y);
}

// acc -= a * x, exactly up to the accumulator's own roundings.
inline void acc_sub_prod(thread tfloat& acc, float a, float x) {
  float e;
  const float p = two_prod(a, x, e);
  acc = tf_add_f(acc, -p);
  acc = tf_add_f(acc, -e);
}
inline void acc_sub_prod(thread tcomplex& acc, float2 a, float2 x) {
  acc_sub_prod(acc.re, a.x, x.x);
  acc_sub_prod(acc.re, -a.y, x.y);
  acc_sub_prod(acc.im, a.x, x.y);
  acc_sub_prod(acc.im, a.y, x.x);
}

// acc += o (another lane's partial sum), term by term.
inline void acc_add_acc(thread tfloat& acc, tfloat o) {
  acc = tf_add_f(tf_add_f(tf_add_f(acc, o.s0), o.s1), o.s2);
}
inline void acc_add_acc(thread tcomplex& acc, tcomplex o) {
  acc_add_acc(acc.re, o.re);
  acc_add_acc(acc.im, o.im);
}

// The accumulator of the lane d above this one.
inline tfloat acc_shuffle_down(tfloat t, ushort d) {
  return tfloat{metal::simd_shuffle_down(t.s0, d), metal::simd_shuffle_down(t.s1, d),
                metal::simd_shuffle_down(t.s2, d)};
}
inline tcomplex acc_shuffle_down(tcomplex t, ushort d) {
  return tcomplex{acc_shuffle_down(t.re, d), acc_shuffle_down(t.im, d)};
}

inline void acc_renormalize(thread tfloat& acc) { acc = tf_renormalize(acc); }
inline void acc_renormalize(thread tcomplex& acc) {
  acc.re = tf_renormalize(acc.re);
  acc.im = tf_renormalize(acc.im);
}

inline float acc_value(tfloat acc) { return tf_value(acc); }
inline float2 acc_value(tcomplex acc) { return float2(tf_value(acc.re), tf_value(acc.im)); }

// x0 + x1 + x2 += d, kept normalised.
inline void tf3_add(thread float& x0, thread float& x1, thread float& x2, float d) {
  tfloat t = tf_renormalize(tf_add_f(tfloat{x0, x1, x2}, d));
  x0 = t.s0;
  x1 = t.s1;
  x2 = t.s2;
}
inline void tf3_add(thread float2& x0, thread float2& x1, thread float2& x2, float2 d) {
  tf3_add(x0.x, x1.x, x2.x, d.x);
  tf3_add(x0.y, x1.y, x2.y, d.y);
}

// |x| for the max norm (|re| + |im| for complex is within sqrt(2) of it, as LAPACK's cabs1),
// NaN as +inf so that a maximum keeps it.
inline float refine_abs(float x) { return metal::isnan(x) ? INFINITY : metal::fabs(x); }
inline float refine_abs(float2 x) { return refine_abs(metal::fabs(x.x) + metal::fabs(x.y)); }

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// bits: count float64 as (lo, hi) uint pairs; shift: one int per matrix; pieces: 3 planes of
// `plane` floats. Grid-stride over the scalars.
template <typename T>
[[kernel]] void refine_split(
    device const uint* bits [[buffer(0)]],
    device const int* shift [[buffer(1)]],
    device T* pieces [[buffer(2)]],
    constant mpsl::RefineSplitParams& p_ [[buffer(3)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long i = long(gid); i < p_.count; i += long(grid_size)) {
    T p0, p1, p2;
    mpsl::df_split3(bits[2 * i], bits[2 * i + 1], shift[i / p_.per_matrix], p0, p1, p2);
    pieces[i] = p0;
    pieces[p_.plane + i] = p1;
    pieces[2 * p_.plane + i] = p2;
  }
}

// R = B - A X (left) or B - X A; a, b: 3 piece planes, x: 3 planes of the three-float X.
// Written as one product whatever the side: R^ = B^ - op(A) X^, m x k of depth n, with
// R^ = R, X^ = X, op(A) = A for the left side and R^ = R^T, X^ = X^T, op(A) = A^T for the right
// (m = n, k = the other dimension of R; transposes are index maps, no copies).
// A simdgroup computes one row i of R^ against p_.tile_cols columns:
// lane l takes column j0 + l % tile_cols and every (32 / tile_cols)-th term of the depth from
// l / tile_cols on, so with one right-hand side the 32 lanes read 32 consecutive entries of A's
// row (coalesced) and with 32 or more each lane walks the depth for its own column (A's entry
// broadcast, X's row coalesced); for the right side op(A) = A^T, so the lanes read along a
// column of A, strided (correct, slower). The lanes' three-float partial sums are added by
// shuffles (lanes below tile_cols end with the totals), then B's pieces; the sum is rounded
// to float for the correction solve. Matrices whose refinement ended are skipped (R is then
// not read by anyone). At step 0, X is zero (the host starts from zeros): R = B rounded,
// without the product (for inv, n right-hand sides, the product is the costly part).
// Grid: (kSimdWidth * column tiles, rows of R^ rounded up to the group height, batch);
// groups (kSimdWidth, simdgroups), one simdgroup per row.
template <typename T>
[[kernel]] void refine_residual(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device const T* x [[buffer(2)]],
    device T* r [[buffer(3)]],
    device const int* state [[buffer(4)]],
    constant mpsl::RefineParams& p_ [[buffer(5)]],
    uint3 gid [[thread_position_in_grid]],
    uint3 group [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  const long n = p_.n, rows = p_.rows, cols = p_.cols, tile = p_.tile_cols;
  const bool left = p_.left != 0;
  const long m = left ? rows : cols, k = left ? cols : rows;
  const long i = long(gid.y), batch = long(gid.z);
  // Uniform over the simdgroup (one row, one batch element): no lane is left in a shuffle.
  if (i >= m || state[batch * kRefineStateInts] != kRefineIterating) {
    return;
  }
  const long slices = kSimdWidth / tile;
  const long j = long(group.x) * tile + long(lane) % tile, slice = long(lane) / tile;
  const bool active = j < k;
  // (row, column) of X^ and R^ -> index in the row-major rows x cols X and R.
  const long hat_row = left ? cols : 1, hat_col = left ? 1 : cols;
  // op(A)[i][q] -> index in A.
  const long a_row = left ? n : 1, a_col = left ? 1 : n;
  const long ap = p_.a_plane, bp = p_.b_plane;
  device const T* A = a + batch * n * n + i * a_row;
  device const T* X = x + batch * rows * cols + (active ? j : 0) * hat_col;

  // Step 0 starts from X = 0 (the host's zeros): R = B, no product to form.
  const long depth = p_.step == 0 ? 0 : n;
  typename Accum<T>::type acc;
  acc_init(acc);
  for (long q = slice; active && q < depth; q += slices) {
    const long ai = q * a_col, xi = q * hat_row;
    const T A0 = A[ai], A1 = A[ap + ai], A2 = A[2 * ap + ai];
    const T X0 = X[xi], X1 = X[bp + xi], X2 = X[2 * bp + xi];
    // The products above 2^-72 of the leading one; the order keeps the large ones first.
    acc_sub_prod(acc, A0, X0);
    acc_sub_prod(acc, A0, X1);
    acc_sub_prod(acc, A1, X0);
    acc_sub_prod(acc, A0, X2);
    acc_sub_prod(acc, A1, X1);
    acc_sub_prod(acc, A2, X0);
    acc_renormalize(acc);
  }
  for (long d = kSimdWidth / 2; d >= tile; d /= 2) {
    acc_add_acc(acc, acc_shuffle_down(acc, ushort(d)));
    acc_renormalize(acc);
  }
  if (slice != 0 || !active) {
    return;
  }
  const long at = batch * rows * cols + i * hat_row + j * hat_col;
  acc_add(acc, b[at]);
  acc_add(acc, b[bp + at]);
  acc_add(acc, b[2 * bp + at]);
  acc_renormalize(acc);
  r[at] = acc_value(acc);
}

// One threadgroup per matrix: the backward error of the current X (R its residual), the
// decision, and X += D while iterating. anorm / bnorm: ||A||inf and ||B||max per matrix;
// berr: the last backward error and correction norm per matrix (the first reported to the
// host).
// Grid: (threads, batch), one threadgroup per matrix.
template <typename T>
[[kernel]] void refine_update(
    device const T* r [[buffer(0)]],
    device const T* d [[buffer(1)]],
    device T* x [[buffer(2)]],
    device int* state [[buffer(3)]],
    device float* berr [[buffer(4)]],
    device const float* anorm [[buffer(5)]],
    device const float* bnorm [[buffer(6)]],
    constant mpsl::RefineParams& p_ [[buffer(7)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kRefineMaxSimdgroups];
  const long batch = long(group.y);
  device int* st = state + batch * kRefineStateInts;
  if (st[0] != kRefineIterating) {
    return;  // the same for every thread of the group
  }
  const long count = p_.rows * p_.cols, plane = p_.b_plane, base = batch * count;
  const long nthreads = long(tpg.x);
  // Read before the reductions' barriers: thread 0 rewrites them after them.
  const float prev_b = berr[kRefineErrFloats * batch], prev_x = berr[kRefineErrFloats * batch + 1];

  float rmax = 0.0f, xmax = 0.0f, dmax = 0.0f;
  for (long e = long(tid); e < count; e += nthreads) {
    rmax = metal::max(rmax, refine_abs(r[base + e]));
    xmax = metal::max(xmax, refine_abs(x[base + e]));
    dmax = metal::max(dmax, refine_abs(d[base + e]));
  }
  // The barrier also orders every thread's reads of state and berr before thread 0 rewrites
  // them below.
  rmax = group_max(rmax, part, lane, sg, nsg,
                   metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
  xmax = group_max(xmax, part, lane, sg, nsg);
  dmax = group_max(dmax, part, lane, sg, nsg);

  const float an = anorm[batch], bn = bnorm[batch];
  const float denom = an * xmax + bn;
  const float be = rmax == 0.0f ? 0.0f : rmax / denom;
  const bool finite_input = metal::isfinite(an) && metal::isfinite(bn);
  // Done with the backward error, and with the correction (the forward error: a graded matrix
  // may keep improving it after the normwise backward error is at float64's level).
  const bool first = p_.step == 0;
  const bool done_b = be <= kRefineEps64 || (!first && be > kRefineMinGain * prev_b);
  const bool done_x = dmax <= kRefineEps64 * xmax || (!first && dmax > kRefineMinGain * prev_x);

  int status = kRefineIterating;
  bool apply = true;
  if (!finite_input) {
    // Step 0's residual (X = 0) does not read A; step 1's carries A's NaN / Inf into X.
    status = p_.step == 0 ? kRefineIterating : kRefineNonfinite;
  } else if (!metal::isfinite(be) || !metal::isfinite(dmax)) {
    status = kRefineFailed;  // diverged (or a zero pivot: info says so first)
    apply = false;
  } else if ((done_b && done_x) || p_.step + 1 >= p_.max_steps) {
    status = be <= p_.tol ? kRefineConverged : kRefineFailed;
    apply = false;
  }
  if (apply) {
    for (long e = long(tid); e < count; e += nthreads) {
      T x0 = x[base + e], x1 = x[plane + base + e], x2 = x[2 * plane + base + e];
      tf3_add(x0, x1, x2, d[base + e]);
      x[base + e] = x0;
      x[plane + base + e] = x1;
      x[2 * plane + base + e] = x2;
    }
  }
  if (tid == 0) {
    st[0] = status;
    st[1] += apply ? 1 : 0;
    berr[kRefineErrFloats * batch] = be;
    berr[kRefineErrFloats * batch + 1] = dmax;
  }
}

// The self-test of double_float.h: known error terms from values given at run time (so that
// nothing folds at compile time); the host compares them with float64 (refine_metal.selftest).
// in: a, b (two_sum), c, d (two_prod), x, y, z (double-floats), w (float64 bits), shift;
// out: see refine_metal.SELFTEST_OUTPUTS.
template <typename T>
[[kernel]] void refine_selftest(
    device const T* in [[buffer(0)]],
    device T* out [[buffer(1)]],
    uint gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  if (gid != 0) {
    return;
  }
  float e;
  out[0] = two_sum(in[0], in[1], e);
  out[1] = e;
  out[2] = fast_two_sum(in[0], in[1], e);
  out[3] = e;
  out[4] = two_prod(in[2], in[3], e);
  out[5] = e;
  const dfloat x = dfloat{in[4], in[5]}, y = dfloat{in[6], in[7]}, z = dfloat{in[8], in[9]};
  const dfloat results[6] = {df_add(x, y), df_sub(x, y), df_mul(x, y), df_fma(x, y, z),
                             df_div(x, y), df_sqrt(x)};
  for (int k = 0; k < 6; ++k) {
    out[6 + 2 * k] = results[k].hi;
    out[7 + 2 * k] = results[k].lo;
  }
  float p0, p1, p2;
  df_split3(as_type<uint>(in[10]), as_type<uint>(in[11]), int(in[12]), p0, p1, p2);
  out[18] = p0;
  out[19] = p1;
  out[20] = p2;
  // a + b - a in the three-float accumulator: b exactly.
  tfloat t = tf_add_f(tf_add_f(tf_add_f(tf_zero(), in[0]), in[1]), -in[0]);
  out[21] = tf_value(tf_renormalize(t));
}
