// Blocked right-looking LU factorization with partial pivoting (LAPACK getrf semantics).
//
// Matrices are contiguous row-major (batch, m, n); the batch index is the last grid dimension of
// every kernel, so one launch sequence covers the whole batch. The host (mpslinalg/linalg/lu_metal.py)
// runs, for each panel of kLuPanelWidth columns starting at column k0:
//   lu_panel      getf2 on rows [k0, m) x columns [k0, k0 + w): pivot search, row interchanges,
//                 scaling, rank-1 updates; writes 1-based pivots and the first zero pivot (info);
//                 lu_panel_tall does the same for panels taller than lu_panel's registers hold;
//   lu_swap_trsm  applies the panel's interchanges to every column outside the panel (LAPACK
//                 laswp) and solves U12 = L11^-1 A12 for the columns right of it (trsm);
//   lu_update     the trailing update A22 -= L21 U12 on the shared simdgroup_matrix product
//                 (metal/common/gemm.h), one threadgroup per 32 x 32 block of A22.
// A panel of many rows may itself be factored by leaves of a few columns: lu_panel on the leaf
// alone, then lu_swap_trsm and lu_update restricted to the panel's columns by the window
// [cb, ce) (the host chooses; mpslinalg/linalg/lu_metal.py). A matrix of at most
// kLuPanelMaxCols columns is factored by a single launch: lu_small when the whole matrix fits
// one threadgroup's registers, else lu_panel with a panel spanning the whole rows.
//
// lu_panel keeps the panel's rows in registers kLuLeaf columns at a time (a "leaf"): each column
// step of the leaf (pivot search, interchange, scaling, rank-1 update) touches registers and a few
// threadgroup words only, then the leaf's rank-kLuLeaf update of the panel's remaining columns is
// one coalesced pass over device memory. A panel column step needs the whole column's pivot, so
// it stays inside one threadgroup: Metal has no barrier across threadgroups, and splitting a step
// over threadgroups would cost one launch per column. What one threadgroup can do is make each
// step cheap and the panel's device traffic small (kLuLeaf times less than column-by-column
// updates); the bulk of the flops is the trailing update, spread over many threadgroups.
// Every element still receives its updates one column at a time in column order, as in getf2.
//
// Pivots are chosen by abs1 (|re| + |im| for complex, LAPACK icamax), ties to the lowest row, so
// they match LAPACK. A NaN entry is never preferred over a number; a column of NaNs pivots on its
// diagonal. Like getf2, a zero pivot skips the scaling and the factorization goes on. Every
// result element is computed by one thread in a fixed order, so results do not depend on the
// order in which lanes run.
#pragma once

#include "../common/defines.h"
#include "../common/gemm.h"
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
// lu_panel: columns of a leaf held in registers. 4 keeps a thread's registers at
// kLuRowsPerThread x 4 elements (32 floats, 64 for complex), which an Apple GPU thread holds
// without spilling at full occupancy; each leaf divides the panel's device traffic by 4.
constant constexpr int kLuLeaf = 4;
// lu_panel: rows per thread; with kMaxThreadsPerGroup threads a panel of up to
// kLuRowsPerThread * 1024 rows is held (taller ones go to lu_panel_tall).
constant constexpr int kLuRowsPerThread = 8;
// lu_panel: elements of the leaf's rank update a thread loads before it stores any.
constant constexpr int kLuUpdateBatch = 4;
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
  long cb;     // lu_swap_trsm, lu_update: the window of columns [cb, ce) they cover: the whole
  long ce;     // matrix for a panel, the panel's own columns for a leaf inside it
};

// lu_small: rows of one column a thread holds in registers (a "chunk"); a matrix of m rows
// takes chunks = ceil(m / 16) rounded up to a power of two threads per column, adjacent lanes
// of one simdgroup, so n * chunks <= 1024 threads hold an m x n matrix whole (128 x 128 float:
// 16 floats per thread, 64 x 64 complex: 32). 16 keeps a thread's matrix share and the
// multipliers it reads within the registers an Apple GPU thread has at full occupancy.
constant constexpr int kLuSmallRows = 16;
// lu_small: the most rows (a column's chunks are lanes of one simdgroup).
constant constexpr int kLuSmallMaxRows = kLuSmallRows * kSimdWidth;

// Scalars of lu_small.
struct LuSmallParams {
  long m;       // rows of each matrix
  long n;       // columns
  long chunks;  // threads per column: a power of two, at most kSimdWidth
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

// The interchanges rows[q] <-> rows[kLuLeaf + q], q < count, in order, of one column whose
// entries in those rows are held in vals (slot t holds row rows[t]; a row may fill two slots):
// every copy of a row is kept equal, so the caller stores each slot back.
template <typename T>
inline void lu_swap_slots(thread const long* rows, thread T* vals, long count) {
  for (int q = 0; q < kLuLeaf; ++q) {
    const long r = rows[q], pr = rows[kLuLeaf + q];
    if (q < count && pr != r) {
      const T vr = vals[q], vp = vals[kLuLeaf + q];
      for (int t = 0; t < 2 * kLuLeaf; ++t) {
        if (rows[t] == r) {
          vals[t] = vp;
        } else if (rows[t] == pr) {
          vals[t] = vr;
        }
      }
    }
  }
}

// x[slot] of a thread's register chunk for a runtime slot, and its store, through bit masks:
// a select chain (if (s == slot) v = x[s]) is turned by the compiler into x[slot], a dynamic
// index that moves the whole chunk to memory (ptxas through the CUDA executor: a 64-byte stack
// frame for lu_small_float32, 208 bytes and spills for complex64; none with the masks).
inline uint lu_bits(float x) { return as_type<uint>(x); }
inline uint2 lu_bits(float2 x) { return as_type<uint2>(x); }
inline float lu_from_bits(uint b) { return as_type<float>(b); }
inline float2 lu_from_bits(uint2 b) { return as_type<float2>(b); }
inline uint lu_lane_mask(bool on) { return on ? 0xffffffffu : 0u; }

template <typename T>
inline T lu_small_pick(thread const T* x, int slot) {
  auto acc = lu_bits(x[0]) & lu_lane_mask(slot == 0);
  for (int s = 1; s < kLuSmallRows; ++s) {
    acc |= lu_bits(x[s]) & lu_lane_mask(s == slot);
  }
  return lu_from_bits(acc);
}

template <typename T>
inline void lu_small_put(thread T* x, int slot, T v) {
  for (int s = 0; s < kLuSmallRows; ++s) {
    const uint keep = lu_lane_mask(s != slot);
    x[s] = lu_from_bits((lu_bits(x[s]) & keep) | (lu_bits(v) & ~keep));
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

// getf2 on a whole m x n matrix held in registers, one threadgroup per matrix: thread t holds
// rows [r * kLuSmallRows, (r + 1) * kLuSmallRows) of column t / chunks, r = t % chunks, so a
// column's chunks are adjacent lanes of one simdgroup. A column step costs one barrier: the
// threads of the pivot column find the pivot (a butterfly over the column's lanes: the largest
// abs1, the lowest row of a tie), interchange and scale their column and publish the pivot row
// and the multipliers in threadgroup memory; after the barrier every other column interchanges
// its two rows (shuffles within its lanes) and takes the rank-1 update. Only the pivot
// column's lanes search: the others' step is the interchange and the update alone. The multipliers are
// double-buffered by step parity: a step's writes cannot meet the previous step's reads,
// which every thread finished before it passed the previous barrier. No device memory is
// touched between the load and the store of the matrix. Grid: (threads, batch) with threads =
// n * chunks rounded up to kSimdWidth (at most 1024); chunks a power of two, chunks *
// kLuSmallRows >= m.
template <typename T>
[[kernel]] void lu_small(
    device T* a [[buffer(0)]],
    device int* pivots [[buffer(1)]],
    device int* info [[buffer(2)]],
    constant mpsl::LuSmallParams& p_ [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  const long m = p_.m, n = p_.n;
  const int chunks = int(p_.chunks);
  threadgroup T lbuf[2 * kLuSmallMaxRows];  // the multipliers of a step, by step parity
  threadgroup int pbuf[2];                  // the pivot row of a step, by step parity
  threadgroup int first_zero;               // info as the steps so far found it

  const long batch = long(group.y);
  const long kmax = m < n ? m : n;
  device T* A = a + batch * m * n;
  device int* piv = pivots + batch * kmax;
  const int chunk = int(tid) % chunks;
  const long c = long(tid) / chunks;  // this thread's column
  const ushort base = ushort(lane - chunk);  // the column's first lane
  const long row0 = long(chunk) * kLuSmallRows;
  const bool col_ok = c < n;

  T x[kLuSmallRows];
  for (int s = 0; s < kLuSmallRows; ++s) {
    const long i = row0 + s;
    x[s] = (col_ok && i < m) ? A[i * n + c] : zero<T>();
  }
  if (tid == 0) {
    first_zero = info[batch];
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);

  for (long j = 0; j < kmax; ++j) {
    const int par = int(j & 1);
    const int jc = int(j / kLuSmallRows), js = int(j % kLuSmallRows);  // where row j lives
    // The pivot column's lanes (all active together: the shuffles read only lanes of the
    // column) search their rows >= j, then interchange, scale and publish.
    if (c == j) {
      float key = kLuNoKey;
      int row = kLuNoRow;
      for (int s = 0; s < kLuSmallRows; ++s) {
        const long i = row0 + s;
        if (i >= j && i < m) {
          const float v = lu_pivot_key(x[s]);
          if (v > key) {
            key = v;
            row = int(i);
          }
        }
      }
      for (int d = 1; d < chunks; d <<= 1) {
        const float other_key = metal::simd_shuffle_xor(key, ushort(d));
        const int other_row = metal::simd_shuffle_xor(row, ushort(d));
        if (other_key > key || (other_key == key && other_row < row)) {
          key = other_key;
          row = other_row;
        }
      }
      // Rows j .. m - 1 exist (j < kmax), so some lane of the column holds a candidate.
      const long p = long(row);
      const int ps = int(p % kLuSmallRows);
      const T vj = simd_shuffle(lu_small_pick(x, js), ushort(base + jc));
      const T vp = simd_shuffle(lu_small_pick(x, ps), ushort(base + p / kLuSmallRows));
      if (chunk == jc) {
        lu_small_put(x, js, vp);
      }
      if (p != j && chunk == int(p / kLuSmallRows)) {
        lu_small_put(x, ps, vj);
      }
      const T pivot = vp;
      const bool nonzero = key != 0.0f;
      const bool use_recip = modulus(pivot) >= kSafeMin;
      const T inv_pivot = recip(pivot);
      for (int s = 0; s < kLuSmallRows; ++s) {
        const long i = row0 + s;
        if (i > j && i < m) {
          if (nonzero) {
            x[s] = lu_scale(x[s], pivot, inv_pivot, use_recip);
          }
          lbuf[par * kLuSmallMaxRows + i] = x[s];
        }
      }
      if (chunk == 0) {
        pbuf[par] = int(p);
        piv[j] = int(p + 1);
        if (key == 0.0f && first_zero == 0) {
          first_zero = int(j + 1);
          info[batch] = first_zero;
        }
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    // The other columns: interchange rows j and p, then the rank-1 update below row j.
    const long p = long(pbuf[par]);
    const T wj = simd_shuffle(lu_small_pick(x, js), ushort(base + jc));
    const T wp = simd_shuffle(lu_small_pick(x, int(p % kLuSmallRows)),
                              ushort(base + p / kLuSmallRows));
    if (c != j && col_ok) {
      if (chunk == jc) {
        lu_small_put(x, js, wp);
      }
      if (p != j && chunk == int(p / kLuSmallRows)) {
        lu_small_put(x, int(p % kLuSmallRows), wj);
      }
      if (c > j) {
        for (int s = 0; s < kLuSmallRows; ++s) {
          const long i = row0 + s;
          if (i > j && i < m) {
            x[s] = sub_mul(x[s], lbuf[par * kLuSmallMaxRows + i], wp);
          }
        }
      }
    }
  }
  for (int s = 0; s < kLuSmallRows; ++s) {
    const long i = row0 + s;
    if (col_ok && i < m) {
      A[i * n + c] = x[s];
    }
  }
}

// getf2 on the panel rows [k0, m) x columns [k0, k0 + w) of one matrix, the rows held in
// registers kLuLeaf columns at a time (see the top of this file); interchanges, U rows and
// updates extend over the columns [k0, k0 + ncols) (ncols >= w). Row k0 + t + s * nthreads
// belongs to thread t (s < kLuRowsPerThread: at most kLuRowsPerThread * nthreads rows).
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
  threadgroup T prow[kLuLeaf];  // the pivot row's leaf entries, moving to row r
  threadgroup T rrow[kLuLeaf];  // row r's leaf entries, moving to the pivot row
  threadgroup int leaf_piv[kLuLeaf];  // the leaf's pivot rows (0-based)
  threadgroup T ublk[kLuLeaf * kLuPanelMaxCols];  // the leaf's U rows right of the leaf

  const long batch = long(group.y);
  const long kmax = (m < n ? m : n);
  const long nthreads = long(tpg.x);
  device T* A = a + batch * m * n;
  device int* piv = pivots + batch * kmax;
  const metal::mem_flags both = metal::mem_flags::mem_threadgroup | metal::mem_flags::mem_device;
  // info as thread 0 knows it: read once, so no pivot step waits on a device load.
  int first_zero = tid == 0 ? info[batch] : 0;

  for (long leaf0 = 0; leaf0 < w; leaf0 += kLuLeaf) {
    const long lw = (w - leaf0 < kLuLeaf) ? w - leaf0 : long(kLuLeaf);
    const long r0 = k0 + leaf0;  // first row and column of the leaf
    // The leaf's columns of this thread's rows at or below r0 (rows above hold finished U).
    T x[kLuRowsPerThread][kLuLeaf];
    for (int s = 0; s < kLuRowsPerThread; ++s) {
      const long i = k0 + long(tid) + s * nthreads;
      for (int q = 0; q < kLuLeaf; ++q) {
        x[s][q] = (i >= r0 && i < m && q < lw) ? A[i * n + r0 + q] : zero<T>();
      }
    }

    for (int q = 0; q < kLuLeaf; ++q) {
      if (q < lw) {
        const long r = r0 + q;  // the pivot row and column of this step
        // Pivot search over the rows >= r (ascending, strict > keeps the lowest row of a tie).
        float key = kLuNoKey;
        int row = kLuNoRow;
        for (int s = 0; s < kLuRowsPerThread; ++s) {
          const long i = k0 + long(tid) + s * nthreads;
          if (i >= r && i < m) {
            const float v = lu_pivot_key(x[s][q]);
            if (v > key) {
              key = v;
              row = int(i);
            }
          }
        }
        // Its first barrier also orders the last step's reads of prow / rrow before the writes
        // below.
        const KeyIndex pivot_at = group_argmax(KeyIndex{key, row}, KeyIndex{kLuNoKey, kLuNoRow},
                                               part, lane, sg, nsg);
        const float best = pivot_at.key;
        const long p = long(pivot_at.index);
        if (tid == 0) {
          piv[r] = int(p + 1);
          leaf_piv[q] = int(p);
          if (best == 0.0f && first_zero == 0) {
            first_zero = int(r + 1);
            info[batch] = first_zero;
          }
        }
        // Interchange the leaf entries of rows r and p through threadgroup memory.
        for (int s = 0; s < kLuRowsPerThread; ++s) {
          const long i = k0 + long(tid) + s * nthreads;
          for (int c = 0; c < kLuLeaf; ++c) {
            if (i == p) {
              prow[c] = x[s][c];
            }
            if (i == r) {
              rrow[c] = x[s][c];
            }
          }
        }
        threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s = 0; s < kLuRowsPerThread; ++s) {
          const long i = k0 + long(tid) + s * nthreads;
          for (int c = 0; c < kLuLeaf; ++c) {
            if (i == p) {
              x[s][c] = rrow[c];
            }
            if (i == r) {
              x[s][c] = prow[c];
            }
          }
        }
        // Scale the column below the pivot and update the leaf's later columns.
        const T pivot = prow[q];
        const bool nonzero = best != 0.0f;
        const bool use_recip = modulus(pivot) >= kSafeMin;
        const T inv_pivot = recip(pivot);
        for (int s = 0; s < kLuRowsPerThread; ++s) {
          const long i = k0 + long(tid) + s * nthreads;
          if (i > r && i < m) {
            T l = x[s][q];
            if (nonzero) {
              l = lu_scale(l, pivot, inv_pivot, use_recip);
              x[s][q] = l;
            }
            for (int c = 0; c < kLuLeaf; ++c) {
              if (c > q) {
                x[s][c] = sub_mul(x[s][c], l, prow[c]);
              }
            }
          }
        }
      }
    }
    for (int s = 0; s < kLuRowsPerThread; ++s) {
      const long i = k0 + long(tid) + s * nthreads;
      if (i >= r0 && i < m) {
        for (int q = 0; q < kLuLeaf; ++q) {
          if (q < lw) {
            A[i * n + r0 + q] = x[s][q];
          }
        }
      }
    }
    threadgroup_barrier(both);

    // The leaf's interchanges, in order, on the other columns of [k0, k0 + ncols); then its U
    // rows right of it: forward substitution with the leaf's unit-lower block, in column order.
    // The rows involved (the leaf's rows and their pivot rows, a row possibly named twice) are
    // loaded at once and interchanged in registers, every copy of a row kept equal, so a
    // column costs one round trip to memory instead of one per interchange.
    const long right0 = leaf0 + lw;  // first column (from k0) right of the leaf
    for (long c = long(tid); c < ncols; c += nthreads) {
      if (c < leaf0 || c >= right0) {
        device T* col = A + k0 + c;
        long rows[2 * kLuLeaf];
        T vals[2 * kLuLeaf];
        T lmat[kLuLeaf][kLuLeaf];
        for (int q = 0; q < kLuLeaf; ++q) {
          rows[q] = q < lw ? r0 + q : -1;
          rows[kLuLeaf + q] = q < lw ? long(leaf_piv[q]) : -1;
          for (int j = 0; j < kLuLeaf; ++j) {
            lmat[q][j] = (c >= right0 && j < q && q < lw) ? A[(r0 + q) * n + r0 + j] : zero<T>();
          }
        }
        for (int t = 0; t < 2 * kLuLeaf; ++t) {
          vals[t] = rows[t] >= 0 ? col[rows[t] * n] : zero<T>();
        }
        lu_swap_slots(rows, vals, lw);
        if (c >= right0) {
          for (int q = 0; q < kLuLeaf; ++q) {
            if (q < lw) {
              T v = vals[q];
              for (int j = 0; j < kLuLeaf; ++j) {
                if (j < q) {
                  v = sub_mul(v, lmat[q][j], vals[j]);
                }
              }
              for (int t = 0; t < 2 * kLuLeaf; ++t) {
                if (rows[t] == r0 + q) {
                  vals[t] = v;
                }
              }
              ublk[q * kLuPanelMaxCols + c] = v;
            }
          }
        }
        for (int t = 0; t < 2 * kLuLeaf; ++t) {
          if (rows[t] >= 0) {
            col[rows[t] * n] = vals[t];
          }
        }
      }
    }
    threadgroup_barrier(both);

    // Rank-lw update of the rows below the leaf over the columns right of it: lanes take the
    // columns of a row (coalesced), simdgroups take rows. kLuUpdateBatch rows per thread are
    // loaded before any is stored, so their loads overlap (a store may alias a later load as far
    // as the compiler knows, which would otherwise serialise every element); no division per
    // element (a 64-bit one costs more instructions than the update itself).
    const long first_row = r0 + lw, cols_right = ncols - right0;
    const long row_step = long(nsg) * kLuUpdateBatch;
    for (long cc = long(lane); cc < cols_right; cc += kSimdWidth) {
      const long c = right0 + cc;
      T u[kLuLeaf];
      for (int q = 0; q < kLuLeaf; ++q) {
        u[q] = q < lw ? ublk[q * kLuPanelMaxCols + c] : zero<T>();
      }
      for (long i0 = first_row + long(sg); i0 < m; i0 += row_step) {
        T v[kLuUpdateBatch];
        T l[kLuUpdateBatch][kLuLeaf];
        for (int b = 0; b < kLuUpdateBatch; ++b) {
          const long i = i0 + b * long(nsg);
          v[b] = i < m ? A[i * n + k0 + c] : zero<T>();
          for (int q = 0; q < kLuLeaf; ++q) {
            l[b][q] = (i < m && q < lw) ? A[i * n + r0 + q] : zero<T>();
          }
        }
        for (int b = 0; b < kLuUpdateBatch; ++b) {
          const long i = i0 + b * long(nsg);
          if (i < m) {
            T x = v[b];
            for (int q = 0; q < kLuLeaf; ++q) {
              if (q < lw) {
                x = sub_mul(x, l[b][q], u[q]);
              }
            }
            A[i * n + k0 + c] = x;
          }
        }
      }
    }
    // The next leaf reads these updates from other threads' rows; ublk and leaf_piv are reused.
    threadgroup_barrier(both);
  }
}

// Unblocked getf2 on the panel rows [k0, m) x columns [k0, k0 + w) of one matrix, in device
// memory (any number of rows); interchanges and rank-1 updates extend over the columns
// [k0, k0 + ncols) (ncols >= w). Rows are dealt to threads cyclically: row k0 + t + s * nthreads
// belongs to thread t. Grid: (nthreads, batch), one threadgroup per matrix; nthreads a multiple
// of kSimdWidth.
template <typename T>
[[kernel]] void lu_panel_tall(
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

// For each column of the window [cb, ce) outside the panel [k0, k0 + w): the panel's row
// interchanges, in order (laswp); for the columns right of the panel also the unit-lower solve
// with L11 (trsm). One thread per column; grid: (ce - cb - w, batch).
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
  const long m = p_.m, n = p_.n, k0 = p_.k0, w = p_.w, cb = p_.cb, ce = p_.ce;
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
  if (t >= ce - cb - w) {
    return;
  }
  const long c = cb + t < k0 ? cb + t : cb + t + w;
  // The interchanges kLuLeaf at a time in registers (lu_swap_slots): a round trip to memory per
  // kLuLeaf interchanges rather than per interchange.
  for (long j0 = 0; j0 < w; j0 += kLuLeaf) {
    const long count = w - j0 < kLuLeaf ? w - j0 : long(kLuLeaf);
    long rows[2 * kLuLeaf];
    T vals[2 * kLuLeaf];
    for (int q = 0; q < kLuLeaf; ++q) {
      const long r = k0 + j0 + q;
      rows[q] = q < count ? r : -1;
      rows[kLuLeaf + q] = q < count ? clamp_row(long(piv[r]) - 1, r, m - 1) : -1;
    }
    for (int q = 0; q < 2 * kLuLeaf; ++q) {
      vals[q] = rows[q] >= 0 ? A[rows[q] * n + c] : zero<T>();
    }
    lu_swap_slots(rows, vals, count);
    for (int q = 0; q < 2 * kLuLeaf; ++q) {
      if (rows[q] >= 0) {
        A[rows[q] * n + c] = vals[q];
      }
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

// Trailing update A22 -= L21 U12 with A22 = rows/columns [k0 + w, m) x [k0 + w, ce),
// L21 = rows [k0 + w, m) x columns [k0, k0 + w), U12 = rows [k0, k0 + w) x columns [k0 + w, ce):
// one kGemmTileM x kGemmTileN block of A22 per threadgroup of kGemmThreads.
// Grid: (column blocks * kGemmThreads, row blocks, batch).
template <typename T>
[[kernel]] void lu_update(
    device T* a [[buffer(0)]],
    constant mpsl::LuParams& p_ [[buffer(1)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long m = p_.m, n = p_.n, k0 = p_.k0, w = p_.w, ce = p_.ce;
  threadgroup float scratch[kGemmScratchFloats];
  device T* A = a + long(group.z) * m * n;
  const long s = k0 + w;  // first trailing row and column
  gemm_tile(A + s * n + k0, n, kGemmNoTrans, A + k0 * n + s, n, kGemmNoTrans, A + s * n + s, n,
            m - s, ce - s, w, long(group.y) * kGemmTileM, long(group.x) * kGemmTileN, -1.0f, 1.0f,
            kGemmFull, scratch, tid, sg);
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
