// Blocked right-looking LU factorization with partial pivoting (LAPACK getrf semantics).
//
// Matrices are contiguous row-major (batch, m, n); the batch index is the last grid dimension of
// every kernel, so one launch sequence covers the whole batch. The host (mpslinalg/linalg/lu_metal.py)
// runs, for each panel of kLuPanelWidth columns starting at column k0:
//   lu_panel      getf2 on rows [k0, m) x columns [k0, k0 + w): pivot search, row interchanges,
//                 scaling, rank-1 updates; writes 1-based pivots and the first zero pivot (info);
//   lu_swap_trsm  applies the panel's interchanges to every column outside the panel (LAPACK
//                 laswp) and solves U12 = L11^-1 A12 for the columns right of it (trsm);
//   lu_update     the trailing update A22 -= L21 U12 in threadgroup tiles (gemm).
// A matrix of at most kLuPanelMaxCols columns is factored by a single lu_panel launch whose panel
// spans the whole rows.
//
// Pivots are chosen by abs1 (|re| + |im| for complex, LAPACK icamax), ties to the lowest row, so
// they match LAPACK. A NaN entry is never preferred over a number; a column of NaNs pivots on its
// diagonal. Like getf2, a zero pivot skips the scaling and the factorization goes on. Every
// result element is computed by one thread in a fixed order, so results do not depend on the
// order in which lanes run.
#pragma once

#include "../common/defines.h"
#include "../common/pivots.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Columns per panel of the blocked factorization (the K of the trailing update).
constant constexpr int kLuPanelWidth = 32;
// Widest panel one lu_panel launch handles; matrices with at most this many columns are
// factored by that single launch. Sizes the pivot-row stash in threadgroup memory.
constant constexpr int kLuPanelMaxCols = 64;
// Simdgroups a threadgroup can hold: sizes the cross-simdgroup reduction scratch.
constant constexpr int kLuMaxSimdgroups = kMaxThreadsPerGroup / kSimdWidth;
// Trailing update: a kLuTile x kLuTile output tile per threadgroup of kLuTileThreads threads,
// each owning a kLuMicro x kLuMicro register tile (rows and columns strided by kLuTileLanes);
// L21 and U12 are staged kLuTileK columns / rows at a time.
constant constexpr int kLuTile = 64;
constant constexpr int kLuTileLanes = 16;
constant constexpr int kLuMicro = kLuTile / kLuTileLanes;
constant constexpr int kLuTileThreads = kLuTileLanes * kLuTileLanes;
constant constexpr int kLuTileK = 16;
// Sentinel row index larger than every row (loses every tie in the pivot search).
constant constexpr int kLuNoRow = 0x7fffffff;
// Pivot search key of a thread that owns no candidate row (below NaN's key -1 and every |x|).
constant constexpr float kLuNoKey = -2.0f;

// Scalars of lu_panel, lu_swap_trsm and lu_update (the last two do not read ncols).
struct LuParams {
  long m;      // rows of each matrix
  long n;      // columns (row stride)
  long k0;     // first column of the panel
  long w;      // columns of the panel
  long ncols;  // lu_panel: columns [k0, k0 + ncols) that interchanges and updates extend over
};

// Scalars of lu_pivots_to_perm.
struct LuPermParams {
  long m;      // rows: length of each permutation
  long k;      // pivots per matrix
  long batch;  // matrices
};

// Pivot search key: abs1, with NaN ranked below every number (never chosen over one).
template <typename T>
inline float lu_pivot_key(T x) {
  float v = abs1(x);
  return metal::isnan(v) ? -1.0f : v;
}

// x / pivot as getf2 computes it: multiply by the reciprocal unless |pivot| is subnormal.
template <typename T>
inline T lu_scale(T x, T pivot, T inv_pivot, bool use_recip) {
  return use_recip ? mul(x, inv_pivot) : div(x, pivot);
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// Unblocked getf2 on the panel rows [k0, m) x columns [k0, k0 + w) of one matrix; interchanges
// and rank-1 updates extend over the columns [k0, k0 + ncols) (ncols >= w). Rows are dealt to
// threads cyclically: row k0 + t + s * nthreads belongs to thread t.
// Grid: (nthreads, batch), one threadgroup per matrix; nthreads a multiple of kSimdWidth.
template <typename T>
[[kernel]] void lu_panel(
    device T* a [[buffer(0)]],
    device int* pivots [[buffer(1)]],
    device int* info [[buffer(2)]],
    constant mpsl::LuParams& p_ [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long m = p_.m, n = p_.n, k0 = p_.k0, w = p_.w, ncols = p_.ncols;
  threadgroup KeyIndex part[kLuMaxSimdgroups];
  threadgroup T prow[kLuPanelMaxCols];

  const long batch = long(group.y);
  const long kmax = (m < n ? m : n);
  const long nthreads = long(tpg.x);
  device T* A = a + batch * m * n;
  device int* piv = pivots + batch * kmax;

  for (long j = 0; j < w; ++j) {
    const long r = k0 + j;  // the pivot row and column of this step

    // Pivot search: per thread over its rows >= r (ascending, strict > keeps the lowest row of
    // a tie), then within the simdgroup, then across simdgroups.
    float key = kLuNoKey;
    int row = kLuNoRow;
    for (long i = k0 + long(tid); i < m; i += nthreads) {
      if (i >= r) {
        float v = lu_pivot_key(A[i * n + r]);
        if (v > key) {
          key = v;
          row = int(i);
        }
      }
    }
    // Its barrier also orders the previous step's row updates before this step's interchange.
    const KeyIndex pivot_at =
        group_argmax(KeyIndex{key, row}, KeyIndex{kLuNoKey, kLuNoRow}, part, lane, sg, nsg,
                     metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);
    const float best = pivot_at.key;
    const long p = long(pivot_at.index);

    if (tid == 0) {
      piv[r] = int(p + 1);
      if (best == 0.0f && info[batch] == 0) {
        info[batch] = int(r + 1);
      }
    }
    // Interchange rows r and p over the panel columns and stash the pivot row.
    for (long c = long(tid); c < ncols; c += nthreads) {
      T x = A[p * n + k0 + c];
      if (p != r) {
        A[p * n + k0 + c] = A[r * n + k0 + c];
        A[r * n + k0 + c] = x;
      }
      prow[c] = x;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device);

    // Scale the column below the pivot and update the rest of the panel rows.
    const T pivot = prow[j];
    const bool nonzero = best != 0.0f;
    const bool use_recip = modulus(pivot) >= kSafeMin;
    const T inv_pivot = recip(pivot);
    for (long i = k0 + long(tid); i < m; i += nthreads) {
      if (i > r) {
        device T* Ai = A + i * n + k0;
        T l = Ai[j];
        if (nonzero) {
          l = lu_scale(l, pivot, inv_pivot, use_recip);
          Ai[j] = l;
        }
        for (long c = j + 1; c < ncols; ++c) {
          Ai[c] = sub_mul(Ai[c], l, prow[c]);
        }
      }
    }
  }
}

// For each column outside the panel [k0, k0 + w): the panel's row interchanges, in order
// (laswp); for the columns right of the panel also the unit-lower solve with L11 (trsm).
// One thread per column; grid: (n - w, batch).
template <typename T>
[[kernel]] void lu_swap_trsm(
    device T* a [[buffer(0)]],
    device const int* pivots [[buffer(1)]],
    constant mpsl::LuParams& p_ [[buffer(2)]],
    uint2 gid [[thread_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long m = p_.m, n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T l11[kLuPanelWidth * kLuPanelWidth];

  const long batch = long(group.y);
  const long kmax = (m < n ? m : n);
  device T* A = a + batch * m * n;
  device const int* piv = pivots + batch * kmax;

  // Stage L11 (strictly lower part used; rows and columns past w never read).
  for (long e = long(tid); e < w * w; e += long(tpg.x)) {
    long i = e / w, j = e - (e / w) * w;
    l11[i * kLuPanelWidth + j] = A[(k0 + i) * n + k0 + j];
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);

  const long t = long(gid.x);
  if (t >= n - w) {
    return;
  }
  const long c = t < k0 ? t : t + w;
  for (long j = 0; j < w; ++j) {
    const long r = k0 + j;
    const long p = clamp_row(long(piv[r]) - 1, r, m - 1);
    if (p != r) {
      T x = A[p * n + c];
      A[p * n + c] = A[r * n + c];
      A[r * n + c] = x;
    }
  }
  if (c < k0 + w) {
    return;
  }
  T x[kLuPanelWidth];
  for (int i = 0; i < kLuPanelWidth; ++i) {
    x[i] = i < w ? A[(k0 + i) * n + c] : zero<T>();
  }
  for (int i = 1; i < kLuPanelWidth; ++i) {
    if (i < w) {
      T s = x[i];
      for (int j = 0; j < i; ++j) {
        s = sub_mul(s, l11[i * kLuPanelWidth + j], x[j]);
      }
      x[i] = s;
    }
  }
  for (int i = 1; i < kLuPanelWidth; ++i) {
    if (i < w) {
      A[(k0 + i) * n + c] = x[i];
    }
  }
}

// Trailing update A22 -= L21 U12 with A22 = rows/columns [k0 + w, m) x [k0 + w, n),
// L21 = rows [k0 + w, m) x columns [k0, k0 + w), U12 = rows [k0, k0 + w) x columns [k0 + w, n).
// Grid: (column tiles * kLuTileThreads, row tiles, batch), threadgroups of kLuTileThreads.
template <typename T>
[[kernel]] void lu_update(
    device T* a [[buffer(0)]],
    constant mpsl::LuParams& p_ [[buffer(1)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long m = p_.m, n = p_.n, k0 = p_.k0, w = p_.w;
  threadgroup T ls[kLuTile * kLuTileK];  // L21 block, [row][k]
  threadgroup T us[kLuTileK * kLuTile];  // U12 block, [k][col]

  const long batch = long(group.z);
  device T* A = a + batch * m * n;
  const long s = k0 + w;  // first trailing row and column
  const long row0 = s + long(group.y) * kLuTile;
  const long col0 = s + long(group.x) * kLuTile;
  const int tx = int(tid) % kLuTileLanes;
  const int ty = int(tid) / kLuTileLanes;

  T acc[kLuMicro][kLuMicro];
  for (int i = 0; i < kLuMicro; ++i) {
    for (int j = 0; j < kLuMicro; ++j) {
      acc[i][j] = zero<T>();
    }
  }
  for (long kb = 0; kb < w; kb += kLuTileK) {
    for (int e = int(tid); e < kLuTile * kLuTileK; e += kLuTileThreads) {
      const int i = e / kLuTileK, k = e % kLuTileK;
      const long gr = row0 + i, gk = kb + k;
      ls[e] = (gr < m && gk < w) ? A[gr * n + k0 + gk] : zero<T>();
    }
    for (int e = int(tid); e < kLuTileK * kLuTile; e += kLuTileThreads) {
      const int k = e / kLuTile, j = e % kLuTile;
      const long gk = kb + k, gc = col0 + j;
      us[e] = (gk < w && gc < n) ? A[(k0 + gk) * n + gc] : zero<T>();
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int k = 0; k < kLuTileK; ++k) {
      T lv[kLuMicro], uv[kLuMicro];
      for (int i = 0; i < kLuMicro; ++i) {
        lv[i] = ls[(ty + i * kLuTileLanes) * kLuTileK + k];
        uv[i] = us[k * kLuTile + tx + i * kLuTileLanes];
      }
      for (int i = 0; i < kLuMicro; ++i) {
        for (int j = 0; j < kLuMicro; ++j) {
          acc[i][j] += mul(lv[i], uv[j]);
        }
      }
    }
    // The next block overwrites ls/us.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  for (int i = 0; i < kLuMicro; ++i) {
    const long gr = row0 + ty + i * kLuTileLanes;
    for (int j = 0; j < kLuMicro; ++j) {
      const long gc = col0 + tx + j * kLuTileLanes;
      if (gr < m && gc < n) {
        A[gr * n + gc] -= acc[i][j];
      }
    }
  }
}

// LAPACK pivots -> permutation: perm[i] is the row of A that lands in row i of L U, i.e.
// A[perm] = L U. One thread per matrix; pivots (batch, k), perm (batch, m).
template <typename I>
[[kernel]] void lu_pivots_to_perm(
    device const I* pivots [[buffer(0)]],
    device long* perm [[buffer(1)]],
    constant mpsl::LuPermParams& p_ [[buffer(2)]],
    uint gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long m = p_.m, k = p_.k, batch = p_.batch;
  const long b = long(gid);
  if (b >= batch) {
    return;
  }
  device const I* piv = pivots + b * k;
  device long* p = perm + b * m;
  for (long i = 0; i < m; ++i) {
    p[i] = i;
  }
  for (long i = 0; i < k; ++i) {
    const long q = clamp_row(long(piv[i]) - 1, i, m - 1);
    const long x = p[q];
    p[q] = p[i];
    p[i] = x;
  }
}
