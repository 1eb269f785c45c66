// Triangular solves M X = B in place (LAPACK trsm / trsv) with one triangle M of a packed square
// matrix, e.g. the L or U of lu_factor for lu_solve (getrs), or a triangular factor of QR.
//
// trsm solves for one triangle M of the packed matrix (row-major, n x n), flags in TriSolveParams:
//   lower = 1: M lower triangular, forward substitution; lower = 0: upper, backward;
//   unit  = 1: the diagonal of M is taken as 1 (L is unit lower);
//   trans = 1: M is the conjugate transpose of the stored triangle (M[i][j] = conj(LU[j][i])),
//              which gives U^H (lower) and L^H (upper) for the adjoint solve;
//   swaps = 1: apply the row interchanges of the pivots to B first, in order (P^T B);
//   swaps = 2: apply them to the solution last, in reverse order (P X).
// One thread per right-hand-side column (B is row-major n x k, so neighbouring threads read
// neighbouring addresses). Blocks of kTriBlock rows are solved left-looking: the block's rows
// are first reduced by every solved block (a small matrix-vector product with the off-diagonal
// tile of M staged in threadgroup memory), then solved against the staged diagonal tile.
// Grid: (columns rounded up to the group width, batch).
#pragma once

#include "../common/defines.h"
#include "../common/gemm.h"
#include "../common/pivots.h"
#include "../common/scalar.h"
#include "../common/simd.h"

namespace mpsl {

// Arguments of trsm / trsv, passed by the host as one list of int64 (the layout is checked by
// tests/linalg/test_lu_metal.py against mpslinalg.linalg.triangular_metal.TRI_SOLVE_PARAMS).
struct TriSolveParams {
  long n;       // order of the matrix
  long k;       // right-hand sides (columns of B)
  long lower;   // 1: the lower triangle (forward substitution), 0: upper (backward)
  long unit;    // 1: unit diagonal, not read
  long trans;   // 1: the conjugate transpose of the stored triangle
  long swaps;   // 1: P^T B before the solve; 2: P X after it; 0: no interchanges
  long gate_stride;  // trsv: the gate of TriBlockParams (0: none); trsm: not read
};

// Arguments of the blocked solve (trsm_diag / trsm_update): the flags of TriSolveParams (lower
// and trans describe M, the matrix solved with, in both sides), the first row i0 and the order
// bs of the diagonal blocks (a multiple of kTriBlock chosen by the host; every block but the
// last starts at a multiple of bs), the side, and where X lies in b (X may be a block of a
// larger matrix, e.g. the panel of Cholesky's factor, solved in place):
//   right = 0: M X = B, X n x k, right-hand side c the column X[:, c];
//   right = 1: X M = B, X k x n, right-hand side c the row X[c, :] (x M = b is M^T x^T = b^T:
//              forward substitution when M is upper); swaps must be 0.
// X[i][j] is b[batch * x_batch + x_offset + i * ldx + j].
// The gate: with gate_stride > 0, batch element b is left untouched when gate[b * gate_stride]
// != 0 (the iterative refinement's per-matrix status, non-zero once that matrix stopped: its
// later correction solves cost a launch and no work); gate_stride = 0: no gate, the buffer is
// not read.
struct TriBlockParams {
  long n, k, lower, unit, trans, swaps;
  long i0, bs;
  long right;
  long ldx, x_offset, x_batch;
  long gate_stride;
};

// Rows per block of trsm / trsv, and per sub-block of the blocked solve's diagonal blocks (whose
// order bs, a multiple of it, the host chooses); a block of the triangle is staged as a square
// tile. The blocked solve's update is a product of depth bs: a whole number of gemm stages.
constant constexpr int kTriBlock = 32;
static_assert(kTriBlock % kGemmTileK == 0, "the update's depth (a multiple) is whole gemm stages");
static_assert(kTriBlock == kSimdWidth, "trsm_diag gives each row of a sub-block one lane");
// trsm_diag: padded row stride of its staged tile, right-hand sides (simdgroups) per group, its
// threads, and the entries of a staged tile each thread loads.
constant constexpr int kTriPadded = kTriBlock + 1;
constant constexpr int kTriDiagSimdgroups = 4;
constant constexpr int kTriDiagThreads = kTriDiagSimdgroups * kSimdWidth;
constant constexpr int kTriDiagLoads = kTriBlock * kTriBlock / kTriDiagThreads;
static_assert(kTriDiagLoads * kTriDiagThreads == kTriBlock * kTriBlock,
              "trsm_diag's threads load a tile in equal shares");
// trsv: the most rows whose right-hand side (and pivots) it stages in threadgroup memory for
// the whole solve. The interchanges are one thread's serial chain: in device memory each waits
// on the last one's stores (a round trip to the cache each), in threadgroup memory it is a few
// cycles a step; the blocks' reads of the solved entries come from there too. Larger orders
// take the blocked solve anyway (BLOCKED_MIN_N, 256, on the host).
constant constexpr int kTriStageRows = 1024;
// trsm_diag: the largest diagonal block (TriBlockParams.bs); each simdgroup keeps the values
// solved in the block in threadgroup memory, for the later sub-blocks of the block.
constant constexpr int kTriMaxBlock = 512;
static_assert(kTriMaxBlock % kTriBlock == 0, "a diagonal block is whole sub-blocks");
static_assert((kTriBlock * kTriPadded + kTriDiagSimdgroups * kTriMaxBlock) * sizeof(float2) <=
                  kMaxThreadgroupMemoryBytes,
              "trsm_diag's tile and solved values must fit in threadgroup memory");

// Entry S[r0 + ii][c0 + jj] of the tile of the triangle solved with: S[i][j] = M[i][j], or
// M[j][i] when swap_ij, with M the stored triangle, conjugated when conj_t (trans). Entries past
// n are padding: the identity on a diagonal tile (r0 == c0), zero elsewhere, so padded rows
// solve to zero and reduce nothing.
template <typename T>
inline T tri_entry(device const T* lu, long n, long r0, long c0, int ii, int jj, bool swap_ij,
                   bool conj_t) {
  const long i = r0 + ii, j = c0 + jj;
  if (i >= n || j >= n) {
    return (r0 == c0 && ii == jj) ? one<T>() : zero<T>();
  }
  const T v = swap_ij ? lu[j * n + i] : lu[i * n + j];
  return conj_t ? conj(v) : v;
}

// Stage the tile S[r0 : r0 + kTriBlock, c0 : c0 + kTriBlock] (tri_entry) into ms, row stride ld.
template <typename T>
inline void tri_stage(threadgroup T* ms, int ld, device const T* lu, long n, long r0, long c0,
                      bool swap_ij, bool conj_t, uint tid, uint nthreads) {
  for (int e = int(tid); e < kTriBlock * kTriBlock; e += int(nthreads)) {
    ms[(e / kTriBlock) * ld + e % kTriBlock] =
        tri_entry(lu, n, r0, c0, e / kTriBlock, e % kTriBlock, swap_ij, conj_t);
  }
}

// Solve the staged diagonal tile ms against one column xb in place (forward when lower).
template <typename T>
inline void tri_solve_tile(threadgroup const T* ms, thread T* xb, bool lower, bool unit) {
  if (lower) {
    for (int ii = 0; ii < kTriBlock; ++ii) {
      T acc = xb[ii];
      for (int jj = 0; jj < ii; ++jj) {
        acc = sub_mul(acc, ms[ii * kTriBlock + jj], xb[jj]);
      }
      xb[ii] = unit ? acc : div(acc, ms[ii * kTriBlock + ii]);
    }
  } else {
    for (int ii = kTriBlock - 1; ii >= 0; --ii) {
      T acc = xb[ii];
      for (int jj = ii + 1; jj < kTriBlock; ++jj) {
        acc = sub_mul(acc, ms[ii * kTriBlock + jj], xb[jj]);
      }
      xb[ii] = unit ? acc : div(acc, ms[ii * kTriBlock + ii]);
    }
  }
}

}  // namespace mpsl

// Kernels live at global scope (the MPSL_KERNEL instantiation names them unqualified).

template <typename T>
[[kernel]] void trsm(
    device const T* lu [[buffer(0)]],
    device const int* pivots [[buffer(1)]],
    device T* b [[buffer(2)]],
    constant mpsl::TriSolveParams& params [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = params.n, k = params.k, lower = params.lower, unit = params.unit;
  const long trans = params.trans, swaps = params.swaps;
  threadgroup T ms[kTriBlock * kTriBlock];

  const long batch = long(group.y);
  device const T* L = lu + batch * n * n;
  device const int* piv = pivots + batch * n;
  const bool active = long(gid.x) < k;
  // Threads past the last column only help staging; they never touch B.
  device T* x = b + batch * n * k + (active ? long(gid.x) : 0);

  if (swaps == 1 && active) {
    apply_row_swaps(x, k, piv, n, true);
  }

  const long nblk = (n + kTriBlock - 1) / kTriBlock;
  for (long s = 0; s < nblk; ++s) {
    const long i0 = (lower != 0 ? s : nblk - 1 - s) * kTriBlock;
    T xb[kTriBlock];
    for (int ii = 0; ii < kTriBlock; ++ii) {
      xb[ii] = (active && i0 + ii < n) ? x[(i0 + ii) * k] : zero<T>();
    }
    // Reduce by the blocks solved before this one.
    for (long t = 0; t < s; ++t) {
      const long j0 = (lower != 0 ? t : nblk - 1 - t) * kTriBlock;
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);  // ms still read by the last step
      tri_stage(ms, kTriBlock, L, n, i0, j0, trans != 0, trans != 0, tid, tpg.x);
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      T y[kTriBlock];
      for (int jj = 0; jj < kTriBlock; ++jj) {
        y[jj] = (active && j0 + jj < n) ? x[(j0 + jj) * k] : zero<T>();
      }
      for (int ii = 0; ii < kTriBlock; ++ii) {
        T acc = xb[ii];
        for (int jj = 0; jj < kTriBlock; ++jj) {
          acc = sub_mul(acc, ms[ii * kTriBlock + jj], y[jj]);
        }
        xb[ii] = acc;
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);  // ms still read by the last step
    tri_stage(ms, kTriBlock, L, n, i0, i0, trans != 0, trans != 0, tid, tpg.x);
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    tri_solve_tile(ms, xb, lower != 0, unit != 0);
    if (active) {
      for (int ii = 0; ii < kTriBlock; ++ii) {
        if (i0 + ii < n) {
          x[(i0 + ii) * k] = xb[ii];
        }
      }
    }
  }

  if (swaps == 2 && active) {
    apply_row_swaps(x, k, piv, n, false);
  }
}

namespace mpsl {

// Element M[i][j] of the triangle trsm/trsv solve with (see the flags above).
template <typename T>
inline T tri_elem(device const T* lu, long n, long i, long j, bool trans) {
  return trans ? conj(lu[j * n + i]) : lu[i * n + j];
}

// trsv's blocks on the column x (entries stride apart; device memory, or its stage in
// threadgroup memory): see trsv.
template <typename T, typename P>
inline void trsv_blocks(P x, long stride, device const T* L, long n, long lower, long unit,
                        bool tr, threadgroup T* partial, ushort lane, ushort sg, ushort nsg) {
  const long nblk = (n + kTriBlock - 1) / kTriBlock;
  for (long s = 0; s < nblk; ++s) {
    const long i0 = (lower != 0 ? s : nblk - 1 - s) * kTriBlock;
    const long rows = n - i0 < kTriBlock ? n - i0 : long(kTriBlock);
    // The solved entries: [0, i0) below a lower block, [i0 + rows, n) for an upper one.
    const long j_begin = lower != 0 ? 0 : i0 + rows;
    const long j_end = lower != 0 ? i0 : n;
    T acc[kTriBlock];
    for (int ii = 0; ii < kTriBlock; ++ii) {
      acc[ii] = zero<T>();
    }
    for (long j = j_begin + long(sg) * kSimdWidth + lane; j < j_end; j += long(nsg) * kSimdWidth) {
      const T y = x[j * stride];
      for (int ii = 0; ii < kTriBlock; ++ii) {
        if (ii < rows) {
          acc[ii] += mul(tri_elem(L, n, i0 + ii, j, tr), y);
        }
      }
    }
    for (int ii = 0; ii < kTriBlock; ++ii) {
      const T total = simd_sum(acc[ii]);
      if (lane == 0) {
        partial[sg * kTriBlock + ii] = total;
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (sg == 0) {
      const long i = i0 + lane;
      // The lane's row of the diagonal block, loaded at once in step order (mrow[step] is
      // column jj(step)), so the serial steps below wait on no device load.
      T mrow[kTriBlock];
      T v = zero<T>(), diag = one<T>();
      if (lane < rows) {
        for (int step = 0; step < kTriBlock; ++step) {
          const int jj = lower != 0 ? step : kTriBlock - 1 - step;
          mrow[step] = jj < rows ? tri_elem(L, n, i, i0 + jj, tr) : zero<T>();
        }
        if (unit == 0) {
          diag = tri_elem(L, n, i, i, tr);
        }
        v = x[i * stride];
        for (int g = 0; g < nsg; ++g) {
          v -= partial[g * kTriBlock + lane];
        }
      }
      for (int step = 0; step < kTriBlock; ++step) {
        const int jj = lower != 0 ? step : kTriBlock - 1 - step;
        if (jj < rows) {
          if (lane == jj && unit == 0) {
            v = div(v, diag);
          }
          const T xj = simd_broadcast(v, ushort(jj));
          const bool below = lower != 0 ? int(lane) > jj : int(lane) < jj;
          if (below && lane < rows) {
            v = sub_mul(v, mrow[step], xj);
          }
        }
      }
      if (lane < rows) {
        x[i * stride] = v;
      }
    }
    // The block's solution is read by every simdgroup for the next block; partial is reused.
    threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
  }
}

}  // namespace mpsl

// The same solve as trsm (same flags) for few right-hand sides: one threadgroup per column,
// so a single right-hand side still uses the whole group. Per block of kTriBlock rows, every
// simdgroup reduces the block's rows by a share of the solved entries (lanes along the solved
// entries, a simd_sum per row, partial sums across simdgroups in threadgroup memory); then
// simdgroup 0 solves the diagonal block with one row per lane and simd_broadcast. A column of
// at most kTriStageRows entries and its pivots are staged in threadgroup memory for the whole
// solve (the same arithmetic, so the same bits). Grid: (group width, k, batch), group width a
// multiple of kSimdWidth, at most kTriBlock simdgroups.
template <typename T>
[[kernel]] void trsv(
    device const T* lu [[buffer(0)]],
    device const int* pivots [[buffer(1)]],
    device T* b [[buffer(2)]],
    constant mpsl::TriSolveParams& params [[buffer(3)]],
    device const int* gate [[buffer(4)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]],
    ushort sg [[simdgroup_index_in_threadgroup]],
    ushort nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long n = params.n, k = params.k, lower = params.lower, unit = params.unit;
  const long trans = params.trans, swaps = params.swaps;
  threadgroup T partial[kTriBlock * kTriBlock];  // [simdgroup][row of the block]
  threadgroup T xs[kTriStageRows];               // the staged column
  threadgroup int ps[kTriStageRows];             // the staged pivots

  const long batch = long(group.z);
  if (params.gate_stride != 0 && gate[batch * params.gate_stride] != 0) {
    return;  // the whole group (one batch element per group)
  }
  device const T* L = lu + batch * n * n;
  device const int* piv = pivots + batch * n;
  device T* x = b + batch * n * k + long(group.y);
  const bool tr = trans != 0;

  if (n > kTriStageRows) {
    if (swaps == 1 && tid == 0) {
      apply_row_swaps(x, k, piv, n, true);
    }
    threadgroup_barrier(metal::mem_flags::mem_device);
    trsv_blocks<T>(x, k, L, n, lower, unit, tr, partial, lane, sg, nsg);
    if (swaps == 2 && tid == 0) {
      apply_row_swaps(x, k, piv, n, false);
    }
    return;
  }
  for (long j = long(tid); j < n; j += long(tpg.x)) {
    xs[j] = x[j * k];
    if (swaps != 0) {
      ps[j] = piv[j];
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (swaps == 1 && tid == 0) {
    apply_row_swaps(xs, 1, ps, n, true);
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  trsv_blocks<T>(xs, 1, L, n, lower, unit, tr, partial, lane, sg, nsg);
  if (swaps == 2 && tid == 0) {
    apply_row_swaps(xs, 1, ps, n, false);
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (long j = long(tid); j < n; j += long(tpg.x)) {
    x[j * k] = xs[j];
  }
}

// ---- the blocked solve for large matrices: one step per diagonal block of bs rows (bs a
// multiple of kTriBlock, TriBlockParams.bs), two launches a step, each spread over many
// threadgroups:
//   trsm_diag    solves the block's rows, one simdgroup per right-hand side (and applies the
//                interchanges before the first step / after the last one, swaps = 1 / 2);
//   trsm_update  subtracts the block's contribution from every row still to be solved,
//                X[rest] -= M[rest, block] X[block] (right = 1: X[:, rest] -= X[:, block]
//                M[block, rest]), on the shared simdgroup_matrix product, of depth bs.
// Forward substitution (M lower on the left, upper on the right) runs the blocks top down,
// backward bottom up. A larger bs means fewer launches (2 ceil(n / bs) - 1 per solve) and moves
// a share bs / n of the work from the product into trsm_diag.

namespace mpsl {

// trsm_diag's tile loads, split so that a tile's device reads are in flight while earlier tiles
// are used: tri_fetch loads this thread's kTriDiagLoads entries of the tile S[r0 :, c0 :]
// (tri_entry's values) into registers, tri_commit stores them into the staged tile ms (row
// stride kTriPadded) in solve order: ms[a][b] = S[r0 + (a ^ flip)][c0 + (b ^ flip)], flip = 0
// for a forward solve, kTriBlock - 1 for a backward one (x ^ 31 = 31 - x on [0, 32)), so that
// step `step` of every loop over a tile reads column `step` for either direction: addresses a
// fixed offset from the lane's row, where a direction-dependent column would cost a select and
// an address computation per step. Threadgroups of kTriDiagThreads threads.
// Each thread loads, of the tile as it lies in memory (M's rows, or its columns when swap_ij),
// the entries of lane `lane` in rows sg, sg + kTriDiagSimdgroups, ...: a simdgroup's load is
// kSimdWidth neighbouring addresses for either layout (a column of the tile read lane by lane
// would touch a row of memory, a cache line, per lane), and its addresses step by a constant.
template <typename T>
inline void tri_fetch(thread T* pre, device const T* lu, long n, long r0, long c0, bool swap_ij,
                      bool conj_t, uint sg, uint lane) {
  // Entry (row mr + q kTriDiagSimdgroups, column mc) of the stored matrix, at index `at`: one
  // 64-bit address step per entry, the bounds as 32-bit compares against the rows left.
  const long mr = (swap_ij ? c0 : r0) + long(sg), mc = (swap_ij ? r0 : c0) + long(lane);
  const long left = mc < n ? n - mr : 0;
  const int rows_in = left <= 0 ? 0 : (left < kTriBlock ? int(left) : kTriBlock);
  const long step = long(kTriDiagSimdgroups) * n;
  long at = mr * n + mc;
  if (rows_in == kTriBlock) {
    // The thread's entries all lie in the matrix (every tile but those crossing row n): the
    // loads alone, no padding to select.
#pragma unroll
    for (int q = 0; q < kTriDiagLoads; ++q, at += step) {
      const T v = lu[at];
      pre[q] = conj_t ? conj(v) : v;
    }
    return;
  }
#pragma unroll
  for (int q = 0; q < kTriDiagLoads; ++q, at += step) {
    const int dq = q * kTriDiagSimdgroups;
    // Past n: the padding of tri_entry, the identity on a diagonal tile (row == column there
    // for either layout), not conjugated (conj of 0 would be -0 in the imaginary part).
    if (dq < rows_in) {
      const T v = lu[at];
      pre[q] = conj_t ? conj(v) : v;
    } else {
      pre[q] = r0 == c0 && int(sg) + dq == int(lane) ? one<T>() : zero<T>();
    }
  }
}

template <typename T>
inline void tri_commit(threadgroup T* ms, thread const T* pre, bool swap_ij, int flip, uint sg,
                       uint lane) {
#pragma unroll
  for (int q = 0; q < kTriDiagLoads; ++q) {
    // S's row and column of the entry, in solve order; either way a simdgroup's stores are 32
    // different banks (a row of ms, or a column at the padded stride).
    const int outer = (int(sg) + q * kTriDiagSimdgroups) ^ flip, inner = int(lane) ^ flip;
    ms[swap_ij ? inner * kTriPadded + outer : outer * kTriPadded + inner] = pre[q];
  }
}

// The substitution of a staged diagonal tile (solve order) by one simdgroup, lane l holding row
// l of the sub-block in v: step `step` broadcasts row step's value before its division, and
// every lane divides that same value by the same diagonal entry (the same bits as the row's own
// lane dividing, as LAPACK's trsm divides), so no lane waits on a branch of its own: the step's
// dependent chain is the broadcast, the division, the product and the subtraction of the next
// row. Unit diagonals (a template argument: a select between the quotient and the value would
// still wait on the division) take the value as it is.
template <bool Unit, typename T>
inline T tri_substitute(threadgroup const T* ms, T v, ushort lane) {
  // The entries a step uses (the lane's and the diagonal one) are loaded one step ahead: a load
  // inside its own step would be issued after the previous step's division, in the chain
  // (NVIDIA's division ends in a branch to its slow path, past which ptxas moves no load),
  // where one step ahead it is in flight during that step; the whole row in registers would
  // hold 32 entries a lane for the same effect.
  threadgroup const T* mrow = ms + int(lane) * kTriPadded;
  T m_next = mrow[0], d_next = Unit ? zero<T>() : ms[0];
#pragma unroll
  for (int step = 0; step < kTriBlock; ++step) {
    const T m = m_next, d = d_next;
    if (step + 1 < kTriBlock) {
      m_next = mrow[step + 1];
      if (!Unit) {
        d_next = ms[(step + 1) * kTriPadded + step + 1];
      }
    }
    const T xs = simd_broadcast(v, ushort(step));
    const T xj = Unit ? xs : div(xs, d);
    const T updated = sub_mul(v, m, xj);
    v = int(lane) > step ? updated : (int(lane) == step ? xj : v);
  }
  return v;
}

}  // namespace mpsl

// One simdgroup per right-hand side. The diagonal block is solved as bs / kTriBlock sub-blocks
// of kTriBlock rows in solve order, lane l holding row l ^ flip of the sub-block (tri_commit),
// left-looking: the sub-block's rows are first reduced by the values solved in each earlier
// sub-block of the block (a lane per row, 32 products against the staged off-diagonal tile; the
// values solved are kept per simdgroup in threadgroup memory, in solve order), then solved
// against the staged diagonal tile (tri_substitute), so the sub-block's 32 dependent steps cost
// a shuffle and an update each instead of one thread's 528 serial updates. That is forward /
// backward substitution in its own order of operations (no inverse of the block is formed, so
// the accuracy is substitution's). The (bs / 32) (bs / 32 + 1) / 2 tiles are staged one after
// the other, each shared by the group's simdgroups (right-hand sides). A tile's device reads
// are issued two tiles ahead, into one of two register sets by the parity of the phase (a
// uniform branch, so each set keeps fixed registers), so their latency overlaps the work of two
// tiles, not one; the next sub-block's rows of X are read during the substitution, the first
// sub-block's before the first tile is staged. Grid: (column groups * kTriDiagThreads, batch),
// threadgroups of exactly kTriDiagThreads.
template <typename T>
[[kernel]] void trsm_diag(
    device const T* lu [[buffer(0)]],
    device const int* pivots [[buffer(1)]],
    device T* b [[buffer(2)]],
    constant mpsl::TriBlockParams& params [[buffer(3)]],
    device const int* gate [[buffer(4)]],
    uint2 group [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]],
    ushort sg [[simdgroup_index_in_threadgroup]],
    ushort nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  // Every parameter read once: the steps below must not reload one from the constant buffer.
  const long n = params.n, k = params.k, i0 = params.i0, bs = params.bs;
  const bool tr = params.trans != 0, right = params.right != 0, unit = params.unit != 0;
  const long swaps = params.swaps;
  // The tile solved is S = M (left) or M^T (right), lower when forward.
  const bool forward = (params.lower != 0) != right;
  // Rows padded by one element: lane l reads ms[l][step], so a stride of kTriBlock + 1 puts
  // the 32 lanes' reads in 32 different banks.
  threadgroup T ms[kTriBlock * kTriPadded];
  // solved[sg][q * kTriBlock + l]: the q-th sub-block solved, its row l ^ flip, for the
  // right-hand side of simdgroup sg.
  threadgroup T solved[kTriDiagSimdgroups * kTriMaxBlock];

  const long batch = long(group.y);
  if (params.gate_stride != 0 && gate[batch * params.gate_stride] != 0) {
    return;  // the same for the whole group (one batch element per group)
  }
  device const T* L = lu + batch * n * n;
  device const int* piv = pivots + batch * n;
  const long col = long(group.x) * long(nsg) + long(sg);
  // Simdgroups past the last right-hand side only help staging (every barrier is the group's).
  const bool active = col < k;
  // Entries of one right-hand side lie `stride` apart, right-hand sides `next` apart.
  const long stride = right ? 1 : params.ldx;
  const long next = right ? params.ldx : 1;
  device T* x = b + batch * params.x_batch + params.x_offset + (active ? col : 0) * next;
  threadgroup T* mine = solved + long(sg) * kTriMaxBlock;
  const bool first = forward ? i0 == 0 : i0 + bs >= n;
  const bool last = forward ? i0 + bs >= n : i0 == 0;
  // Sub-blocks holding rows of the matrix (the last diagonal block may be short); the q-th in
  // solve order starts at row i0 + kTriBlock * (forward ? q : nsub - 1 - q).
  const long rows = n - i0 < bs ? n - i0 : bs;
  const int nsub = int((rows + kTriBlock - 1) / kTriBlock);
  const int top = forward ? 0 : nsub - 1, dir = forward ? 1 : -1;
  const int flip = forward ? 0 : kTriBlock - 1;
  // The lane's row of a sub-block starting at row w0 is w0 + row.
  const long row = long(int(lane) ^ flip);

  if (swaps == 1 && first && active) {
    if (lane == 0) {
      apply_row_swaps(x, stride, piv, n, true);
    }
    simdgroup_barrier(metal::mem_flags::mem_device);  // the other lanes read X below
  }
  // S[i][j] = M[i][j] (left) or M[j][i] (right), M[i][j] = L[i][j] or conj(L[j][i]) (trans).
  const bool swap_ij = tr != right;
  const int nphase = nsub * (nsub + 1) / 2;
  // Phase (s, t), t <= s: sub-block s's rows against sub-block t's columns, the reduction by
  // the values solved in t (t < s) or the substitution (t == s). (sf, tf): the phase whose
  // tile is fetched next, two ahead of (s, t) once the first two are in flight.
  T pre_even[kTriDiagLoads], pre_odd[kTriDiagLoads];
  const long top0 = i0 + long(top) * kTriBlock;
  tri_fetch(pre_even, L, n, top0, top0, swap_ij, tr, sg, lane);  // phase 0: (0, 0)
  if (nphase > 1) {
    tri_fetch(pre_odd, L, n, top0 + long(dir) * kTriBlock, top0, swap_ij, tr, sg, lane);  // (1, 0)
  }
  int s = 0, t = 0;
  int sf = 1, tf = nphase > 1 ? 1 : 0;  // phase 2, (1, 1); past the last (nsub = 1): (1, 0)
  T v = zero<T>(), v_next = zero<T>();
  if (active) {
    const long i = top0 + row;
    v = i < n ? x[i * stride] : zero<T>();
  }
  for (int phase = 0; phase < nphase; ++phase) {
    if (phase > 0) {  // ms still read by the last phase (the same for the whole group)
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    const bool more = sf < nsub;
    const long fr0 = i0 + long(top + dir * sf) * kTriBlock;
    const long fc0 = i0 + long(top + dir * tf) * kTriBlock;
    if ((phase & 1) == 0) {
      tri_commit(ms, pre_even, swap_ij, flip, sg, lane);
      if (more) {
        tri_fetch(pre_even, L, n, fr0, fc0, swap_ij, tr, sg, lane);
      }
    } else {
      tri_commit(ms, pre_odd, swap_ij, flip, sg, lane);
      if (more) {
        tri_fetch(pre_odd, L, n, fr0, fc0, swap_ij, tr, sg, lane);
      }
    }
    if (tf == sf) {  // the phase after (sf, tf): (sf, tf + 1), or (sf + 1, 0) after sf's last
      ++sf;
      tf = 0;
    } else {
      ++tf;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (active && t == 0 && s > 0) {
      v = v_next;
    }
    if (active && t < s) {
      threadgroup const T* mrow = ms + int(lane) * kTriPadded;
      threadgroup const T* yt = mine + t * kTriBlock;
#pragma unroll
      for (int step = 0; step < kTriBlock; ++step) {
        v = sub_mul(v, mrow[step], yt[step]);
      }
    } else if (active) {
      // The next sub-block's rows of X, in flight during the substitution.
      if (s + 1 < nsub) {
        const long i_next = i0 + long(top + dir * (s + 1)) * kTriBlock + row;
        v_next = i_next < n ? x[i_next * stride] : zero<T>();
      }
      v = unit ? tri_substitute<true>(ms, v, lane) : tri_substitute<false>(ms, v, lane);
      mine[s * kTriBlock + int(lane)] = v;  // read after the next phase's barriers
      const long i = i0 + long(top + dir * s) * kTriBlock + row;
      if (i < n) {
        x[i * stride] = v;
      }
    }
    if (t == s) {
      ++s;
      t = 0;
    } else {
      ++t;
    }
  }
  if (swaps == 2 && last && active) {
    simdgroup_barrier(metal::mem_flags::mem_device);
    if (lane == 0) {
      apply_row_swaps(x, stride, piv, n, false);
    }
  }
}

// Grid: (column blocks * kGemmThreads, row blocks, batch) of the block of X updated: the rows
// still to solve x k (left), or k x the columns still to solve (right).
template <typename T>
[[kernel]] void trsm_update(
    device const T* lu [[buffer(0)]],
    device T* b [[buffer(1)]],
    constant mpsl::TriBlockParams& params [[buffer(2)]],
    device const int* gate [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long n = params.n, k = params.k, i0 = params.i0, ldx = params.ldx;
  if (params.gate_stride != 0 && gate[long(group.z) * params.gate_stride] != 0) {
    return;  // the whole group: gemm_tile's barriers are never reached
  }
  threadgroup float scratch[kGemmScratchFloats];
  const bool right = params.right != 0;
  // The order of this diagonal block (the last one may be short): the product's depth.
  const long bs = n - i0 < params.bs ? n - i0 : params.bs;
  // The entries still to solve: after the block (forward) or before it (backward).
  const bool forward = (params.lower != 0) != right;
  const long r0 = forward ? i0 + bs : 0;
  const long rows = forward ? n - r0 : i0;
  device const T* L = lu + long(group.z) * n * n;
  device T* X = b + long(group.z) * params.x_batch + params.x_offset;
  const long row0 = long(group.y) * kGemmTileM, col0 = long(group.x) * kGemmTileN;
  // M[p0 : p0 + pm, q0 : q0 + qn] is L's block at (p0, q0) as stored, or the conjugate transpose
  // of the block at (q0, p0).
  const bool tr = params.trans != 0;
  const int op_m = tr ? kGemmConjTrans : kGemmNoTrans;
  if (!right) {
    // X[r0 : r0 + rows, :] -= M[r0 : r0 + rows, i0 : i0 + bs] X[i0 : i0 + bs, :]
    device const T* mblk = tr ? L + i0 * n + r0 : L + r0 * n + i0;
    gemm_tile(mblk, n, op_m, X + i0 * ldx, ldx, kGemmNoTrans, X + r0 * ldx, ldx, rows, k, bs,
              row0, col0, -1.0f, 1.0f, kGemmFull, scratch, tid, sg);
  } else {
    // X[:, r0 : r0 + rows] -= X[:, i0 : i0 + bs] M[i0 : i0 + bs, r0 : r0 + rows]
    device const T* mblk = tr ? L + r0 * n + i0 : L + i0 * n + r0;
    gemm_tile(X + i0, ldx, kGemmNoTrans, mblk, n, op_m, X + r0, ldx, k, rows, bs, row0, col0,
              -1.0f, 1.0f, kGemmFull, scratch, tid, sg);
  }
}
