// The eigenvectors of a real symmetric tridiagonal T by divide and conquer (Cuppen's method as
// LAPACK's xSTEDC / xLAED0-xLAED4 run it), every stage spread over many threadgroups per matrix:
// eigh's path past one threadgroup (T from eigh_tridiagonal.h; it replaced xSTEQR's serial
// iteration, one thread's chain of dependent rotations: 170 ms of GPU time against 2.3 ms for
// this at 1024 on an H200 through the CUDA executor).
//
// T is torn at every position: with d'_i = d_i - |e_{i-1}| - |e_i|, T = diag(d') + sum_i |e_i|
// v_i v_i^T, v_i = e_i + sign(e_i) e_{i+1}. The 1 x 1 leaves are merged pairwise over
// L = ceil(log2 n) levels; block j of level l holds the rows [b(j, l), b(j + 1, l)) with
// b(j, l) = floor(j 2^l n / 2^L), so siblings differ in size by at most one and every level's
// blocks fit one stride (`width`). Merging two solved blocks (D1, W1), (D2, W2) (eigenvalues
// ascending, eigenvectors as the rows of W) is the rank-one update D + rho z z^T of xLAED1, with
// z = (W1's last column, +-W2's first column) / sqrt(2) and rho = 2 |e_cut|:
//   eigh_dc_merge    one threadgroup per merge: D and z, the merged order, xLAED2's deflation
//                    (small z_i; close pairs of D rotated until one z_i vanishes; tolerance
//                    8 eps max(|D|, |z|)), and W_rot = diag(W1, W2) with those rotations.
//   eigh_dc_secular  one simdgroup per root: the secular equation 1 + rho sum z_j^2 / (D_j -
//                    lambda) = 0 on the kept (undeflated) D, solved by bisection in the offset
//                    from the nearer pole (xLAED4's origin shift: lambda - D_o to full relative
//                    accuracy), the lanes summing the terms.
//   eigh_dc_zhat     one simdgroup per kept j: Gu and Eisenstat's z-hat (Loewner's formula,
//                    SIAM J. Matrix Anal. Appl. 16 (1995) 172-191), for which the computed
//                    roots are exact, so the vectors below are orthogonal to working precision.
//   eigh_dc_mix      one simdgroup per eigenvalue of the merge: its rank among them, and its row
//                    of the mixing matrix M (the normalised zhat_j / (D_j - lambda), or the unit
//                    row of a deflated one) at that rank, so W_new = M W_rot is in ascending
//                    order.
// then the host's shared GEMM forms M W_rot for every merge of the level (at the last level
// Z = W_rot^T M^T, the eigenvectors as columns). Five launches per level whatever the batch.
// The levels whose blocks have at most kDivideLeafMax rows are not merged: eigh_dc_leaf solves
// the blocks of the highest of them (below the last level) whole by Jacobi, one launch.
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"
#include "../common/simd.h"
#include "eigh.h"
#include "eigh_tridiagonal.h"

namespace mpsl {

// Arguments of the divide-and-conquer kernels, passed by the host as one list of int64.
struct DivideParams {
  long n;       // order of the matrices
  long batch;   // number of matrices
  long level;   // the level being merged, 1 .. levels
  long levels;  // ceil(log2 n)
  long width;   // the largest block of this level: the stride of its blocks
  long child;   // the largest block of the level below
  long stage;   // eigh_dc_merge stages merges up to this order (at most kDivideStageMax)
};

// Upper bound on the bisection steps of one root (the interval halves to adjacent floats: about
// 24 steps from the pole's gap, and float32 has no more than 278 halvings in all).
constant constexpr int kDivideBisectMaxSteps = 300;
// Floats and ints of one merge's workspace per order of its block (offsets below).
constant constexpr int kDivideWorkFloats = 10;
constant constexpr int kDivideWorkInts = 7;
// eigh_dc_merge stages a merge's sorted D, z and indices in threadgroup memory up to this
// order (24 KiB), in its workspace past it.
constant constexpr int kDivideStageMax = 2048;
// The leaves: the blocks of the lowest level whose blocks have at most this many rows (and below
// the last level) are solved whole by eigh_dc_leaf, one launch for them all, instead of being
// merged up from 1 x 1 blocks at five launches a level (4 levels of 20 launches at 16).
// Jacobi's cyclic sweeps on an order-16 block are 15 rounds of two barriers in one simdgroup.
constant constexpr int kDivideLeafMax = 16;
// Threads of an eigh_dc_leaf threadgroup: one simdgroup, (kDivideLeafMax / 2)^2 items of a
// round's block update, two a thread.
constant constexpr int kDivideLeafThreads = kSimdWidth;
// 1 / sqrt(2): z's scale, as both halves are unit rows.
constant constexpr float kDivideRsqrt2 = 0.70710678f;

// Row j of level l's blocks begins at this row of T.
inline int divide_bound(long j, long level, constant DivideParams& p) {
  return int(((j << level) * p.n) >> p.levels);
}

// One merge's workspace (w = the level's width): floats D, z (by the merge's own index), the
// kept Dk and zk (ascending), the roots' offsets tau, zhat, the rotations' c and s, D and z in
// the merged order (where eigh_dc_merge does not stage them), then rho;
// ints: the merged order, the kept and the deflated indices, the rotations' rows, the roots'
// poles, each index's slot (kept position, or -1 - deflated position), then K and the rotations.
struct DivideMerge {
  device float* D;
  device float* z;
  device float* Dk;
  device float* zk;
  device float* tau;
  device float* zhat;
  device float* rc;
  device float* rs;
  device float* sd;
  device float* sz;
  device float* rho;
  device int* order;
  device int* kept;
  device int* deflated;
  device int* ra;
  device int* rb;
  device int* pole;
  device int* slot;
  device int* counts;  // [K, rotations]
};

// The blocks of the level being merged (every matrix's).
inline long divide_blocks(constant DivideParams& p) { return 1L << (p.levels - p.level); }

// The workspace of merge j of matrix b at the level being merged.
inline DivideMerge divide_merge(device float* work, device int* iwork, constant DivideParams& p,
                                long b, long j) {
  const long index = b * divide_blocks(p) + j;
  const int w = int(p.width);
  DivideMerge mg;
  device float* f = work + index * (long(kDivideWorkFloats) * w + 1);
  device int* i = iwork + index * (long(kDivideWorkInts) * w + 2);
  mg.D = f;
  mg.z = f + w;
  mg.Dk = f + 2 * w;
  mg.zk = f + 3 * w;
  mg.tau = f + 4 * w;
  mg.zhat = f + 5 * w;
  mg.rc = f + 6 * w;
  mg.rs = f + 7 * w;
  mg.sd = f + 8 * w;
  mg.sz = f + 9 * w;
  mg.rho = f + 10 * w;
  mg.order = i;
  mg.kept = i + w;
  mg.deflated = i + 2 * w;
  mg.ra = i + 3 * w;
  mg.rb = i + 4 * w;
  mg.pole = i + 5 * w;
  mg.slot = i + 6 * w;
  mg.counts = i + 7 * w;
  return mg;
}

// The value of index i of a merge's children (both ascending): at level 1 the leaves, T's torn
// diagonal d'_r = d_r - |e_r-1| - |e_r| at row r = lo + i.
inline float divide_child(bool leaves, device const float* d, device const float* e, int n,
                          int lo, device const float* lam1, device const float* lam2, int m1,
                          int i) {
  if (leaves) {
    const int r = lo + i;
    return d[r] - (r > 0 ? metal::fabs(e[r - 1]) : 0.0f) - (r < n - 1 ? metal::fabs(e[r]) : 0.0f);
  }
  return i < m1 ? lam1[i] : lam2[i - m1];
}

// The secular function 1 + rho sum_j zk_j^2 / ((Dk_j - Dk_o) - t) at lambda = Dk_o + t, the
// lanes of a simdgroup summing K terms (every lane gets the same value).
inline float divide_secular(DivideMerge mg, int K, int o, float t, uint lane) {
  const float origin = mg.Dk[o];
  float sum = 0.0f;
  for (int j = int(lane); j < K; j += kSimdWidth) {
    const float zj = mg.zk[j];
    sum += zj * zj / ((mg.Dk[j] - origin) - t);
  }
  return 1.0f + mg.rho[0] * simd_sum(sum);
}

// lambda_i - x for root i and a pole value x, to the accuracy of tau_i.
inline float divide_gap(DivideMerge mg, int i, float x) {
  return (mg.Dk[mg.pole[i]] - x) + mg.tau[i];
}

// The value of source q of a merge: root q below K, the deflated D's after it.
inline float divide_value(DivideMerge mg, int K, int q) {
  return q < K ? mg.Dk[mg.pole[q]] + mg.tau[q] : mg.D[mg.deflated[q - K]];
}

// A merge's D and z in the merged (ascending) order in sd, sz, with their indices in so, then
// xLAED2's deflation scan on them by one thread (see the file's comment), and D written back by
// index. sd, sz, so are threadgroup memory when the merge fits kDivideStageMax (the scan is a
// chain of dependent loads), the workspace's past it. Every thread of the threadgroup calls it.
template <typename F, typename I>
inline void divide_deflate(F sd, F sz, I so, DivideMerge mg, device const float* d,
                           device const float* e, int n, int lo, int m1, int m, bool leaves,
                           device const float* lam1, device const float* lam2,
                           device const float* w1, device const float* w2, int cw, bool torn,
                           float ecut, threadgroup float* part, int tid, int nt, uint lane,
                           uint sg, uint nsg) {
  const float rho = 2.0f * metal::fabs(ecut);
  const float zsign = ecut < 0.0f ? -kDivideRsqrt2 : kDivideRsqrt2;
  float dmax = 0.0f, zmax = 0.0f;
  for (int i = tid; i < m; i += nt) {
    const float di = divide_child(leaves, d, e, n, lo, lam1, lam2, m1, i);
    float zi = 0.0f;
    if (torn) {
      zi = leaves ? 1.0f : (i < m1 ? w1[long(i) * cw + m1 - 1] : w2[long(i - m1) * cw]);
      zi *= i < m1 ? kDivideRsqrt2 : zsign;
    }
    // the merged order: each child is ascending, so a position is the index in its own child
    // plus the count of the other child's entries before it (ties: the first child's first)
    const bool first = i < m1;
    int lo2 = first ? m1 : 0, hi2 = first ? m : m1;
    while (lo2 < hi2) {
      const int mid = (lo2 + hi2) / 2;
      const float x = divide_child(leaves, d, e, n, lo, lam1, lam2, m1, mid);
      if (first ? x < di : x <= di) {
        lo2 = mid + 1;
      } else {
        hi2 = mid;
      }
    }
    const int position = (first ? i : i - m1) + lo2 - (first ? m1 : 0);
    sd[position] = di;
    sz[position] = zi;
    so[position] = i;
    dmax = metal::max(dmax, metal::fabs(di));
    zmax = metal::max(zmax, metal::fabs(zi));
  }
  const auto mem = metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup;
  const float tol = 8.0f * kTridiagEps * metal::max(group_max(dmax, part, lane, sg, nsg, mem),
                                                    group_max(zmax, part, lane, sg, nsg));
  if (tid == 0) {
    mg.rho[0] = rho;
    int K = 0, nd = 0, nr = 0, prev = -1;  // prev: the position of the last undecided one
    for (int k = 0; k < m; ++k) {
      if (rho * metal::fabs(sz[k]) <= tol) {
        mg.slot[so[k]] = -1 - nd;
        mg.deflated[nd++] = so[k];
        continue;
      }
      if (prev < 0) {
        prev = k;
        continue;
      }
      float s = sz[prev], c = sz[k];
      const float r = metal::precise::sqrt(c * c + s * s);  // no overflow: |z| <= 1
      const float t = sd[k] - sd[prev];
      c /= r;
      s = -s / r;
      if (metal::fabs(t * c * s) <= tol) {
        // rotate the pair until z[prev] vanishes; prev is then an eigenvalue to tol
        sz[k] = r;
        sz[prev] = 0.0f;
        mg.ra[nr] = so[prev];
        mg.rb[nr] = so[k];
        mg.rc[nr] = c;
        mg.rs[nr] = s;
        ++nr;
        const float dp = sd[prev], dk = sd[k];
        sd[prev] = dp * c * c + dk * s * s;
        sd[k] = dp * s * s + dk * c * c;
        mg.slot[so[prev]] = -1 - nd;
        mg.deflated[nd++] = so[prev];
      } else {  // kept: its D and z are final
        mg.slot[so[prev]] = K;
        mg.Dk[K] = sd[prev];
        mg.zk[K] = sz[prev];
        mg.kept[K++] = so[prev];
      }
      prev = k;
    }
    if (prev >= 0) {
      mg.slot[so[prev]] = K;
      mg.Dk[K] = sd[prev];
      mg.zk[K] = sz[prev];
      mg.kept[K++] = so[prev];
    }
    mg.counts[0] = K;
    mg.counts[1] = nr;
  }
  threadgroup_barrier(mem);
  for (int k = tid; k < m; k += nt) {
    mg.D[so[k]] = sd[k];  // (eigh_dc_mix reads the deflated ones by index)
  }
  threadgroup_barrier(mem);
}

}  // namespace mpsl

// The blocks of level p.level (the leaves, at most kDivideLeafMax rows), each solved whole: the
// block of T on its rows [lo, hi) with the two tears at its ends (d_lo less |e_lo-1| and d_hi-1
// less |e_hi-1|, as the merges below it would have built it) by eigh.h's cyclic Jacobi sweeps
// (eigh_jacobi_sweeps: rotations accumulated from I; backward stable, its vectors orthogonal to
// working precision, as the merges need). Writes what eigh_dc_mix and the level's GEMM leave
// for the next level: the eigenvalues ascending (ties by index, eigh_rank) in lam_out (batch,
// blocks, width) and the eigenvectors as the rows of w_out (batch, blocks, width, width).
// Grid: (kDivideLeafThreads, blocks of the level, batch).
template <typename T>
[[kernel, max_total_threads_per_threadgroup(mpsl::kDivideLeafThreads)]] void eigh_dc_leaf(
    device const float* de [[buffer(0)]],
    device const int* flags [[buffer(1)]],
    device float* lam_out [[buffer(2)]],
    device float* w_out [[buffer(3)]],
    constant mpsl::DivideParams& p [[buffer(4)]],
    uint3 tpos [[thread_position_in_threadgroup]],
    uint3 tgpos [[threadgroup_position_in_grid]],
    uint3 tpg [[threads_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float x[kDivideLeafMax * kDivideLeafMax];
  threadgroup float vm[kDivideLeafMax * kDivideLeafMax];
  threadgroup float rot[kDivideLeafMax / 2 * kEighRotFloats];
  threadgroup float scratch[kMaxThreadsPerGroup / kSimdWidth];
  const long b = long(tgpos.z), j = long(tgpos.y);
  if (flags[b * 2] != 0) {
    return;  // the whole threadgroup; eigh_dc_mix writes NaN at the last level
  }
  const int n = int(p.n), cw = int(p.width);
  const int tid = int(tpos.x), nt = int(tpg.x);
  const int lo = divide_bound(j, p.level, p), hi = divide_bound(j + 1, p.level, p);
  const int m = hi - lo;
  device const float* d = de + b * 2 * n;
  device const float* e = d + n;
  for (int k = tid; k < m * m; k += nt) {
    const int i = k / m, c = k % m;
    float value = 0.0f;
    if (i == c) {
      value = d[lo + i] - (i == 0 && lo > 0 ? metal::fabs(e[lo - 1]) : 0.0f) -
              (i == m - 1 && hi < n ? metal::fabs(e[hi - 1]) : 0.0f);
    } else if (c == i + 1 || i == c + 1) {
      value = e[lo + metal::min(i, c)];
    }
    x[k] = value;
    vm[k] = i == c ? 1.0f : 0.0f;
  }
  float rotations = 0.0f;
  eigh_jacobi_sweeps<float, 1>(&x[0], &vm[0], &rot[0], &scratch[0], m, true, kEighMaxSweeps,
                               uint(tid), uint(nt), rotations);
  const long blocks = divide_blocks(p);
  device float* lam = lam_out + (b * blocks + j) * cw;
  device float* rows = w_out + (b * blocks + j) * long(cw) * cw;
  for (int i = tid; i < m; i += nt) {
    const int rank = eigh_diagonal_rank(&x[0], m, i);
    lam[rank] = x[i * m + i];
    for (int c = 0; c < m; ++c) {
      rows[long(rank) * cw + c] = vm[c * m + i];
    }
  }
}

// One threadgroup per merge: grid (threads, blocks of the level, batch). lam_in and w_in are
// the level below's eigenvalues (batch, 2 blocks, child) and eigenvector rows (batch, 2 blocks,
// child, child); at level 1 the leaves are read from de (d' on the diagonal, W = 1). w_rot
// (batch, blocks, width, width) gets diag(W1, W2) with the deflating rotations applied, zero
// past the block's order.
template <typename T>
[[kernel]] void eigh_dc_merge(
    device const float* de [[buffer(0)]],
    device const int* flags [[buffer(1)]],
    device const float* lam_in [[buffer(2)]],
    device const float* w_in [[buffer(3)]],
    device float* w_rot [[buffer(4)]],
    device float* work [[buffer(5)]],
    device int* iwork [[buffer(6)]],
    constant mpsl::DivideParams& p [[buffer(7)]],
    uint3 tpos [[thread_position_in_threadgroup]],
    uint3 tgpos [[threadgroup_position_in_grid]],
    uint3 tpg [[threads_per_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kMaxThreadsPerGroup / kSimdWidth];
  const long b = long(tgpos.z), j = long(tgpos.y);
  if (flags[b * 2] != 0) {
    return;  // eigh_dc_mix writes NaN at the last level
  }
  const int n = int(p.n), w = int(p.width), cw = int(p.child);
  const int tid = int(tpos.x), nt = int(tpg.x);
  const uint nsg = (tpg.x + kSimdWidth - 1) / kSimdWidth;
  const long blocks = divide_blocks(p);
  const int lo = divide_bound(j, p.level, p), hi = divide_bound(j + 1, p.level, p);
  const int cut = divide_bound(2 * j + 1, p.level - 1, p);
  const int m1 = cut - lo, m = hi - lo;
  device const float* d = de + b * 2 * n;
  device const float* e = d + n;
  const bool leaves = p.level == 1;
  device const float* lam1 = lam_in + (b * 2 * blocks + 2 * j) * cw;
  device const float* lam2 = lam1 + cw;
  device const float* w1 = w_in + (b * 2 * blocks + 2 * j) * long(cw) * cw;
  device const float* w2 = w1 + long(cw) * cw;
  const DivideMerge mg = divide_merge(work, iwork, p, b, j);
  const bool torn = m1 > 0 && m1 < m;
  const float ecut = torn ? e[cut - 1] : 0.0f;
  if (m <= metal::min(int(p.stage), kDivideStageMax)) {
    threadgroup float sd[kDivideStageMax], sz[kDivideStageMax];
    threadgroup int so[kDivideStageMax];
    divide_deflate(sd, sz, so, mg, d, e, n, lo, m1, m, leaves, lam1, lam2, w1, w2, cw, torn,
                   ecut, part, tid, nt, lane, sg, nsg);
  } else {
    divide_deflate(mg.sd, mg.sz, mg.order, mg, d, e, n, lo, m1, m, leaves, lam1, lam2, w1, w2,
                   cw, torn, ecut, part, tid, nt, lane, sg, nsg);
  }
  // W_rot = diag(W1, W2) by columns (a thread's loads and stores are contiguous across the
  // threadgroup), then the rotations on the column's entries in order
  const int nr = mg.counts[1];
  device float* wr = w_rot + (b * blocks + j) * long(w) * w;
  for (int col = tid; col < w; col += nt) {
    for (int i = 0; i < w; ++i) {
      float x = 0.0f;
      if (i < m1 && col < m1) {
        x = leaves ? 1.0f : w1[long(i) * cw + col];
      } else if (i >= m1 && i < m && col >= m1 && col < m) {
        x = leaves ? 1.0f : w2[long(i - m1) * cw + col - m1];
      }
      wr[long(i) * w + col] = x;
    }
    for (int r = 0; r < nr; ++r) {
      const long ia = long(mg.ra[r]) * w + col, ib = long(mg.rb[r]) * w + col;
      const float c = mg.rc[r], s = mg.rs[r];
      const float xa = wr[ia], xb = wr[ib];
      wr[ia] = c * xa + s * xb;
      wr[ib] = c * xb - s * xa;
    }
  }
}

// One simdgroup per root: grid (threads * groups, blocks, batch) with groups = ceil(width /
// simdgroups per threadgroup). Root i (i < K) of a merge lies in (Dk_i, Dk_{i+1}) (the last
// in (Dk_K-1, Dk_K-1 + rho |zk|^2]); the midpoint's sign picks the nearer pole o as the origin
// and the bisection runs on t = lambda - Dk_o until no float lies between its ends.
template <typename T>
[[kernel]] void eigh_dc_secular(
    device const int* flags [[buffer(0)]],
    device float* work [[buffer(1)]],
    device int* iwork [[buffer(2)]],
    constant mpsl::DivideParams& p [[buffer(3)]],
    uint3 tgpos [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long b = long(tgpos.z), j = long(tgpos.y);
  const DivideMerge mg = divide_merge(work, iwork, p, b, j);
  const int i = int(tgpos.x * nsg + sg);
  if (flags[b * 2] != 0 || i >= mg.counts[0]) {
    return;
  }
  const int K = mg.counts[0];
  int o = i;
  float lo = 0.0f, hi;
  if (i < K - 1) {
    const float half = 0.5f * (mg.Dk[i + 1] - mg.Dk[i]);
    if (divide_secular(mg, K, i, half, lane) >= 0.0f) {
      hi = half;
    } else {
      o = i + 1;
      lo = -half;
      hi = 0.0f;
    }
  } else {
    float zz = 0.0f;
    for (int k = int(lane); k < K; k += kSimdWidth) {
      zz += mg.zk[k] * mg.zk[k];
    }
    hi = mg.rho[0] * simd_sum(zz);
  }
  for (int step = 0; step < kDivideBisectMaxSteps; ++step) {
    const float mid = 0.5f * (lo + hi);
    if (mid <= lo || mid >= hi) {
      break;
    }
    if (divide_secular(mg, K, o, mid, lane) < 0.0f) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (lane == 0) {
    mg.pole[i] = o;
    mg.tau[i] = 0.5f * (lo + hi);
  }
}

// One simdgroup per kept index j: zhat_j^2 = (lambda_j - Dk_j) / rho prod_{i != j} (lambda_i -
// Dk_j) / (Dk_i - Dk_j), every factor positive (the roots interlace the poles) and the
// partial products bounded by the telescoping products of the gaps, so none overflows. Grid as
// eigh_dc_secular's.
template <typename T>
[[kernel]] void eigh_dc_zhat(
    device const int* flags [[buffer(0)]],
    device float* work [[buffer(1)]],
    device int* iwork [[buffer(2)]],
    constant mpsl::DivideParams& p [[buffer(3)]],
    uint3 tgpos [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long b = long(tgpos.z), jb = long(tgpos.y);
  const DivideMerge mg = divide_merge(work, iwork, p, b, jb);
  const int j = int(tgpos.x * nsg + sg);
  if (flags[b * 2] != 0 || j >= mg.counts[0]) {
    return;
  }
  const int K = mg.counts[0];
  const float dj = mg.Dk[j];
  float prod = lane == 0 ? divide_gap(mg, j, dj) / mg.rho[0] : 1.0f;
  for (int i = int(lane); i < K; i += kSimdWidth) {
    prod *= i == j ? 1.0f : divide_gap(mg, i, dj) / (mg.Dk[i] - dj);
  }
  prod = metal::simd_product(prod);
  if (lane == 0) {
    mg.zhat[j] = metal::copysign(metal::precise::sqrt(prod), mg.zk[j]);
  }
}

// One simdgroup per eigenvalue q of a merge (root q below K, deflated after): its rank r among
// the merge's m (ties by q), lam_out[r], and row r of the mixing matrix mix (batch, blocks,
// width, width). At the last level the eigenvalues go to w (batch, n) times 2^e, and a matrix
// with non-finite input gets NaN values and rows (status [n, 0]; [0, 0] otherwise). Grid as
// eigh_dc_secular's.
template <typename T>
[[kernel]] void eigh_dc_mix(
    device const int* flags [[buffer(0)]],
    device float* work [[buffer(1)]],
    device int* iwork [[buffer(2)]],
    device float* lam_out [[buffer(3)]],
    device float* mix [[buffer(4)]],
    device float* w [[buffer(5)]],
    device int* status [[buffer(6)]],
    constant mpsl::DivideParams& p [[buffer(7)]],
    uint3 tgpos [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long b = long(tgpos.z), jb = long(tgpos.y);
  const long blocks = divide_blocks(p);
  const bool last = p.level == p.levels;
  const int width = int(p.width);
  const int m = divide_bound(jb + 1, p.level, p) - divide_bound(jb, p.level, p);
  const int q = int(tgpos.x * nsg + sg);
  if (q >= m) {
    return;
  }
  device float* row_base = mix + (b * blocks + jb) * long(width) * width;
  if (flags[b * 2] != 0) {
    if (last) {
      for (int col = int(lane); col < width; col += kSimdWidth) {
        row_base[long(q) * width + col] = NAN;
      }
      if (lane == 0) {
        w[b * p.n + q] = NAN;
        if (q == 0) {
          status[b * kEighStatusInts] = int(p.n);
          status[b * kEighStatusInts + 1] = 0;
        }
      }
    }
    return;
  }
  const DivideMerge mg = divide_merge(work, iwork, p, b, jb);
  const int K = mg.counts[0];
  const float value = divide_value(mg, K, q);
  int rank = 0;
  for (int k = int(lane); k < m; k += kSimdWidth) {
    rank += k == q ? 0 : eigh_rank(value, q, divide_value(mg, K, k), k);
  }
  rank = metal::simd_sum(rank);
  device float* row = row_base + long(rank) * width;
  if (q < K) {
    const float origin = mg.Dk[mg.pole[q]], t = mg.tau[q];
    float norm2 = 0.0f;
    for (int k = int(lane); k < K; k += kSimdWidth) {
      const float u = mg.zhat[k] / ((mg.Dk[k] - origin) - t);
      norm2 += u * u;
    }
    const float scale = 1.0f / metal::precise::sqrt(simd_sum(norm2));
    for (int col = int(lane); col < width; col += kSimdWidth) {
      const int s = col < m ? mg.slot[col] : -1;
      row[col] = s >= 0 ? scale * mg.zhat[s] / ((mg.Dk[s] - origin) - t) : 0.0f;
    }
  } else {
    const int source = mg.deflated[q - K];
    for (int col = int(lane); col < width; col += kSimdWidth) {
      row[col] = col == source ? 1.0f : 0.0f;
    }
  }
  if (lane == 0) {
    if (last) {
      w[b * p.n + rank] = metal::ldexp(value, flags[b * 2 + 1]);
      if (q == 0) {
        status[b * kEighStatusInts] = 0;
        status[b * kEighStatusInts + 1] = 0;
      }
    } else {
      lam_out[(b * blocks + jb) * width + rank] = value;
    }
  }
}
