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
// [cb, ce) (the host chooses; mpslinalg/linalg/lu_metal.py). The same window nests one level up:
// a large matrix is factored by outer blocks of kLuOuterWidth columns, each by its panels with
// their interchanges and updates windowed to the block, then one lu_swap_trsm and one lu_update
// of depth kLuOuterWidth for the rest of the matrix. A matrix of at most
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
// Columns of an outer block: large matrices are factored by outer blocks of this many columns,
// each by panels of kLuPanelWidth inside it, so that the trailing update over the whole matrix
// is a product of depth kLuOuterWidth (a quarter of the passes over A22, each with four times
// the flops per load) and the interchanges cross the whole matrix once per outer block.
// lu_swap_trsm solves an outer block's U12 by tiles of kLuPanelWidth rows.
constant constexpr int kLuOuterWidth = 128;
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
// lu_swap_trsm: interchanges applied per round trip to memory (their rows and pivot rows, 16
// entries a thread, are loaded at once): a 32-column panel's in four trips.
constant constexpr int kLuSwapGroup = 8;
// lu_panel: buffers of its per-step threadgroup words (the simdgroups' pivot candidates and row
// r's leaf entries), alternating by step parity so that one barrier a step orders both the
// reads of a step and the writes for the next (see lu_panel).
constant constexpr int kLuStepBuffers = 2;
// lu_panel: register slots that can hold a row of a panel's first kLuPanelMaxCols rows (the rows
// of its leaves): row k0 + j, j < w <= kLuPanelMaxCols, is slot j / nthreads of its thread, and
// nthreads >= kSimdWidth. Slots from kLuLeafSlots on hold rows below every leaf.
constant constexpr int kLuLeafSlots = 2;
static_assert(kLuPanelMaxCols <= kLuLeafSlots * kSimdWidth, "a leaf's rows lie in the first slots");
static_assert(kLuStepBuffers * kLuMaxSimdgroups * (sizeof(KeyIndex) + kLuLeaf * sizeof(float2)) +
                      kLuStepBuffers * kLuLeaf * sizeof(float2) + kLuLeaf * sizeof(int) +
                      kLuLeaf * kLuPanelMaxCols * sizeof(float2) <=
                  kMaxThreadgroupMemoryBytes,
              "lu_panel's threadgroup memory (complex): the steps' words, leaf_piv and ublk");

// Scalars of lu_panel, lu_swap_trsm and lu_update (the last two do not read ncols).
struct LuParams {
  long m;      // rows of each matrix
  long n;      // columns (row stride)
  long k0;     // first column of the panel
  long w;      // columns of the panel
  long ncols;  // lu_panel: columns [k0, k0 + ncols) that interchanges and updates extend over
  long cb;     // lu_swap_trsm, lu_update: the window of columns [cb, ce) they cover: the whole
  long ce;     // matrix for a panel, the panel's own columns for a leaf inside it
  long rows16; // lu_panel: 1 when every row of every matrix starts on a 16-byte boundary (the
               // host's word: the buffer's alignment and n * sizeof(T) % 16 == 0), so that a
               // leaf's entries of a row load and store as whole 16-byte vectors
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

// lu_pivots_to_perm_staged: the longest permutation it holds in threadgroup memory (16-bit
// entries: 16 KiB), and the pivots the group stages per round for its thread 0.
constant constexpr int kLuPermStageRows = 8192;
constant constexpr int kLuPermChunk = 1024;

// Scalars of lu_pivots_to_perm and lu_pivots_to_perm_staged.
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

// A pivot candidate of lu_panel: its search key, its row, and `from`, the threadgroup slot
// holding its leaf entries (carried along by the cross-simdgroup search only).
struct LuPivotAt {
  float key;
  int row;
  int from;
};

// The best candidate of a simdgroup's lanes, in every lane: the largest key, the lowest row of a
// tie, as a butterfly of shuffles (log2 kSimdWidth rounds, each a pair of independent shuffles
// and one comparison; `from` rides along when kCarry, as a third independent shuffle). The order
// is total over distinct rows, so every lane ends with the same candidate whatever the order in
// which pairs meet. simd_max then simd_min over the ties (group_argmax) would be two such chains
// one after the other, the second waiting on the first's result.
template <bool kCarry>
inline LuPivotAt lu_simd_argmax(LuPivotAt a) {
#pragma unroll
  for (ushort d = 1; d < ushort(kSimdWidth); d <<= 1) {
    const float key = metal::simd_shuffle_xor(a.key, d);
    const int row = metal::simd_shuffle_xor(a.row, d);
    const int from = kCarry ? metal::simd_shuffle_xor(a.from, d) : a.from;
    const bool better = key > a.key || (key == a.key && row < a.row);
    a.key = better ? key : a.key;
    a.row = better ? row : a.row;
    a.from = better ? from : a.from;
  }
  return a;
}

// x / pivot as getf2 computes it: multiply by the reciprocal unless |pivot| is subnormal.
template <typename T>
inline T lu_scale(T x, T pivot, T inv_pivot, bool use_recip) {
  return use_recip ? mul(x, inv_pivot) : div(x, pivot);
}

// The interchanges rows[q] <-> rows[G + q], q < count <= G, in order, of one column whose
// entries in those rows are held in vals (slot t holds row rows[t]; a row may fill two slots):
// every copy of a row is kept equal, so the caller stores each slot back.
template <int G, typename T>
inline void lu_swap_slots(thread const long* rows, thread T* vals, long count) {
  for (int q = 0; q < G; ++q) {
    const long r = rows[q], pr = rows[G + q];
    if (q < count && pr != r) {
      const T vr = vals[q], vp = vals[G + q];
      for (int t = 0; t < 2 * G; ++t) {
        if (rows[t] == r) {
          vals[t] = vp;
        } else if (rows[t] == pr) {
          vals[t] = vr;
        }
      }
    }
  }
}

// A row's kLuLeaf leaf entries at p (16-byte aligned where `whole`, which also says that lw =
// kLuLeaf) into out[], zeros past lw: as kLuLeaf * sizeof(T) / 16 vector loads where whole, an
// entry at a time otherwise. In lu_panel's passes every lane loads the multipliers of the rows
// it updates: entry by entry they were most of its global-memory instructions, and the pass
// waited on their issue queue (NVIDIA's profiler, through the CUDA executor: lg_throttle and
// long_scoreboard stalls, round 11).
inline void lu_split16(float4 v, thread float* out) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
inline void lu_split16(float4 v, thread float2* out) {
  out[0] = v.xy;
  out[1] = v.zw;
}
inline float4 lu_join16(thread const float* in) { return float4(in[0], in[1], in[2], in[3]); }
inline float4 lu_join16(thread const float2* in) { return float4(in[0], in[1]); }

template <typename T>
inline void lu_load_leaf_row(device const T* p, thread T* out, long lw, bool whole) {
  constexpr int kPer16 = 16 / int(sizeof(T));  // entries a 16-byte vector holds
  static_assert(kLuLeaf % kPer16 == 0, "a leaf row is whole vectors");
  if (whole) {
    for (int v = 0; v < kLuLeaf / kPer16; ++v) {
      lu_split16(reinterpret_cast<device const float4*>(p)[v], out + v * kPer16);
    }
  } else {
    for (int q = 0; q < kLuLeaf; ++q) {
      out[q] = q < lw ? p[q] : zero<T>();
    }
  }
}

// The store of lu_load_leaf_row's entries (lw of them).
template <typename T>
inline void lu_store_leaf_row(device T* p, thread const T* in, long lw, bool whole) {
  constexpr int kPer16 = 16 / int(sizeof(T));
  if (whole) {
    for (int v = 0; v < kLuLeaf / kPer16; ++v) {
      reinterpret_cast<device float4*>(p)[v] = lu_join16(in + v * kPer16);
    }
  } else {
    for (int q = 0; q < kLuLeaf; ++q) {
      if (q < lw) {
        p[q] = in[q];
      }
    }
  }
}

// x - sum_q l[q] u[q] over the leaf's lw columns, in column order (getf2's order for one entry).
template <typename T>
inline T lu_leaf_update(T x, thread const T* l, thread const T* u, long lw) {
#pragma unroll
  for (int q = 0; q < kLuLeaf; ++q) {
    if (q < lw) {
      x = sub_mul(x, l[q], u[q]);
    }
  }
  return x;
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

// lu_panel's work on one leaf, the columns [r0, r0 + lw) (lw <= kLuLeaf) of the panel that starts
// at row and column k0, with S rows per thread (S <= kLuRowsPerThread: thread t's rows k0 + t +
// s * nthreads, s < S, are all it holds of rows [k0, m)): load the leaf's entries of the rows at
// or below r0 into registers, run its lw column steps, store it back. Returns first_zero, info as
// thread 0 knows it.
//
// A column step r costs one barrier. Before it, each thread finds its best candidate row
// (r <= i < m) and keeps that row's leaf entries, and the thread holding row r keeps row r's;
// each simdgroup reduces its lanes' candidates (lu_simd_argmax), the lane holding the winner
// publishes its key, row and leaf entries, and row r's holder publishes row r's. After the
// barrier every thread reduces the simdgroups' candidates (lane g reads simdgroup g's) to the
// pivot row p and reads p's leaf entries and row r's from threadgroup memory: the interchange,
// the scaling and the rank-1 update are then in registers, with no second barrier. The step's
// words alternate between kLuStepBuffers buffers by step parity: a thread writes the next
// step's buffer only after passing this step's barrier, which every thread reached only after
// its reads of that buffer in the step before (a leaf's first step follows the barriers of the
// previous leaf's passes).
//
// The steps and every loop over a thread's rows or the leaf's columns have compile-time bounds
// and are unrolled, so the leaf x[s][c] is indexed by constants and stays in registers. With the
// step's column a runtime loop variable (the form this replaced) the compiler kept the whole
// leaf in local memory, every use of it in a step a load or a store: ptxas gave
// lu_panel_float32 a 304-byte stack frame through the CUDA executor, the leaf's 128 bytes, 160
// of the executor's simd_max / simd_min (group_argmax), whose path for a partial simdgroup holds
// 32-entry arrays (lu_simd_argmax's shuffles have none), and spills. The row masks are selects,
// not branches, so a step's work over the rows is one block the compiler can schedule, and S,
// chosen by the caller from the panel's height, keeps that block to the rows a thread holds
// (with 256 threads, a 1024-row panel fills 4 of the 8 slots, the later panels of a square
// matrix fewer). Rows in slots kLuLeafSlots and up lie below every row of the leaf, so they
// need no test against r. Rows outside [r0, m) ("dead") hold zeros that the search skips and
// nothing stores: the update may leave garbage in those below m instead of testing them. The
// arithmetic of every entry and the choice of every pivot are getf2's, as before.
template <typename T, int S>
inline int lu_panel_leaf(device T* A, device int* piv, device int* info, long m, long n, long k0,
                         long r0, long lw, long batch, long nthreads, uint tid, uint lane,
                         uint sg, uint nsg, int first_zero, bool whole,
                         threadgroup KeyIndex* cand_at, threadgroup T* cand_row,
                         threadgroup T* rrow, threadgroup int* leaf_piv) {
  static_assert(S >= 1 && S <= kLuRowsPerThread, "the rows a thread holds");
  // This thread's rows (int like the pivot rows: a row index fits one), which of them are rows
  // of the matrix at or below r0, and the leaf's columns of those rows.
  int rows[S];
  bool live[S];
  T x[S][kLuLeaf];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const long i = k0 + long(tid) + s * nthreads;
    rows[s] = int(i);
    live[s] = i >= r0 && i < m;
    if (live[s]) {
      lu_load_leaf_row(A + i * n + r0, x[s], lw, whole);
    } else {
#pragma unroll
      for (int q = 0; q < kLuLeaf; ++q) {
        x[s][q] = zero<T>();
      }
    }
  }

#pragma unroll
  for (int q = 0; q < kLuLeaf; ++q) {
    if (q < lw) {  // uniform over the threadgroup: every thread keeps the step's barrier
      const int r = int(r0) + q;  // the pivot row and column of this step
      const int buf = q % kLuStepBuffers;
      // Pivot search over this thread's rows >= r (ascending, strict > keeps the lowest row of
      // a tie), the candidate's leaf entries kept alongside; row r's entries if held here.
      float key = kLuNoKey;
      int row = kLuNoRow;
      bool holds_r = false;
      T cand[kLuLeaf], rv[kLuLeaf];
#pragma unroll
      for (int c = 0; c < kLuLeaf; ++c) {
        cand[c] = zero<T>();
        rv[c] = zero<T>();
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float v = lu_pivot_key(x[s][q]);
        const bool take = live[s] && (s >= kLuLeafSlots || rows[s] >= r) && v > key;
        key = take ? v : key;
        row = take ? rows[s] : row;
#pragma unroll
        for (int c = 0; c < kLuLeaf; ++c) {
          cand[c] = take ? x[s][c] : cand[c];
        }
        if (s < kLuLeafSlots) {
          const bool is_r = rows[s] == r;  // r0 <= r < m: a live row
          holds_r = holds_r || is_r;
#pragma unroll
          for (int c = 0; c < kLuLeaf; ++c) {
            rv[c] = is_r ? x[s][c] : rv[c];
          }
        }
      }
      const int mine = row;
      const LuPivotAt at_sg = lu_simd_argmax<false>(LuPivotAt{key, row, 0});
      // The lane holding the simdgroup's winner publishes it (lane 0 for a simdgroup without
      // candidates, whose lanes all hold kLuNoRow).
      if (mine == at_sg.row && (at_sg.row != kLuNoRow || lane == 0)) {
        const int slot = buf * kLuMaxSimdgroups + int(sg);
        cand_at[slot] = KeyIndex{at_sg.key, at_sg.row};
#pragma unroll
        for (int c = 0; c < kLuLeaf; ++c) {
          cand_row[slot * kLuLeaf + c] = cand[c];
        }
      }
      if (holds_r) {
#pragma unroll
        for (int c = 0; c < kLuLeaf; ++c) {
          rrow[buf * kLuLeaf + c] = rv[c];
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      // The pivot: the best of the simdgroups' candidates (nsg <= kSimdWidth), the same in
      // every thread; `from` is the simdgroup whose slot holds its leaf entries.
      const KeyIndex own = lane < nsg ? cand_at[buf * kLuMaxSimdgroups + lane]
                                      : KeyIndex{kLuNoKey, kLuNoRow};
      const LuPivotAt pivot_at = lu_simd_argmax<true>(LuPivotAt{own.key, own.index, int(lane)});
      const float best = pivot_at.key;
      const int p = pivot_at.row;
      const int from = buf * kLuMaxSimdgroups + pivot_at.from;
      T prow[kLuLeaf], rrow_r[kLuLeaf];  // the leaf entries of rows p and r
#pragma unroll
      for (int c = 0; c < kLuLeaf; ++c) {
        prow[c] = cand_row[from * kLuLeaf + c];
        rrow_r[c] = rrow[buf * kLuLeaf + c];
      }
      if (tid == 0) {
        piv[r] = p + 1;
        leaf_piv[q] = p;
        if (best == 0.0f && first_zero == 0) {
          first_zero = r + 1;
          info[batch] = first_zero;
        }
      }
      // Interchange rows r and p (row r in a slot below kLuLeafSlots).
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const bool is_r = s < kLuLeafSlots && rows[s] == r;
        const bool is_p = rows[s] == p;
#pragma unroll
        for (int c = 0; c < kLuLeaf; ++c) {
          x[s][c] = is_r ? prow[c] : (is_p ? rrow_r[c] : x[s][c]);
        }
      }
      // The multipliers below the pivot (getf2's scaling, none for a zero pivot) and the rank-1
      // update of the leaf's later columns: rows r0 .. r keep theirs (U), every row below takes
      // it (dead rows too: nothing reads them). A pivot of subnormal modulus (or NaN) divides,
      // in a branch of its own, the same in every thread, so the rows' loop below has none: a
      // correctly rounded division is a long sequence with a slow path, and lu_scale on each
      // row compiled to a branch per row around its division (NVRTC's PTX for sm_90).
      const T pivot = prow[q];
      const bool nonzero = best != 0.0f;
      const bool use_recip = nonzero && modulus(pivot) >= kSafeMin;
      const T inv_pivot = recip(pivot);
      if (nonzero && !use_recip) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const bool below = s >= kLuLeafSlots || rows[s] > r;
          x[s][q] = below ? div(x[s][q], pivot) : x[s][q];
        }
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const bool below = s >= kLuLeafSlots || rows[s] > r;
        const T l = use_recip ? mul(x[s][q], inv_pivot) : x[s][q];
        x[s][q] = below ? l : x[s][q];
#pragma unroll
        for (int c = q + 1; c < kLuLeaf; ++c) {
          x[s][c] = below ? sub_mul(x[s][c], l, prow[c]) : x[s][c];
        }
      }
    }
  }
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (live[s]) {
      lu_store_leaf_row(A + long(rows[s]) * n + r0, x[s], lw, whole);
    }
  }
  return first_zero;
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
// registers kLuLeaf columns at a time (see the top of this file; a leaf's column steps:
// lu_panel_leaf); interchanges, U rows and updates extend over the columns [k0, k0 + ncols)
// (ncols >= w). Row k0 + t + s * nthreads belongs to thread t (s < kLuRowsPerThread: at most
// kLuRowsPerThread * nthreads rows). Grid: (nthreads, batch), one threadgroup per matrix;
// nthreads a multiple of kSimdWidth.
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
  // A column step's words, by step parity: each simdgroup's candidate (key and row) and its
  // leaf entries; row r's leaf entries.
  threadgroup KeyIndex cand_at[kLuStepBuffers * kLuMaxSimdgroups];
  threadgroup T cand_row[kLuStepBuffers * kLuMaxSimdgroups * kLuLeaf];
  threadgroup T rrow[kLuStepBuffers * kLuLeaf];
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
  // Rows a thread holds (its register slots in use), the same in every thread.
  const long held = (m - k0 + nthreads - 1) / nthreads;

  for (long leaf0 = 0; leaf0 < w; leaf0 += kLuLeaf) {
    const long lw = (w - leaf0 < kLuLeaf) ? w - leaf0 : long(kLuLeaf);
    const long r0 = k0 + leaf0;  // first row and column of the leaf
    // a row's leaf entries are whole aligned vectors
    const bool whole = p_.rows16 != 0 && lw == kLuLeaf && r0 % kLuLeaf == 0;
    // The leaf's steps for the fewest slots that hold this thread's rows (a uniform branch: the
    // barriers inside stay matched).
    if (held <= 1) {
      first_zero = lu_panel_leaf<T, 1>(
          A, piv, info, m, n, k0, r0, lw, batch, nthreads, tid, lane, sg, nsg, first_zero,
          whole, cand_at, cand_row, rrow, leaf_piv);
    } else if (held <= 2) {
      first_zero = lu_panel_leaf<T, 2>(
          A, piv, info, m, n, k0, r0, lw, batch, nthreads, tid, lane, sg, nsg, first_zero,
          whole, cand_at, cand_row, rrow, leaf_piv);
    } else if (held <= kLuRowsPerThread / 2) {
      first_zero = lu_panel_leaf<T, kLuRowsPerThread / 2>(
          A, piv, info, m, n, k0, r0, lw, batch, nthreads, tid, lane, sg, nsg, first_zero,
          whole, cand_at, cand_row, rrow, leaf_piv);
    } else {
      first_zero = lu_panel_leaf<T, kLuRowsPerThread>(
          A, piv, info, m, n, k0, r0, lw, batch, nthreads, tid, lane, sg, nsg, first_zero,
          whole, cand_at, cand_row, rrow, leaf_piv);
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
          if (c >= right0 && q < lw) {  // L11's row q: its entries left of the diagonal
            lu_load_leaf_row(A + (r0 + q) * n + r0, lmat[q], q, whole);
          } else {
            for (int j = 0; j < kLuLeaf; ++j) {
              lmat[q][j] = zero<T>();
            }
          }
        }
        for (int t = 0; t < 2 * kLuLeaf; ++t) {
          vals[t] = rows[t] >= 0 ? col[rows[t] * n] : zero<T>();
        }
        lu_swap_slots<kLuLeaf>(rows, vals, lw);
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
    // The rows are walked by pointer: a batch's rows lie nsg rows apart, batches nsg *
    // kLuUpdateBatch rows apart; the batches whose rows all exist (all but the last) take no
    // row test. (Each row's address as i * n + c, with a test per row, was most of the pass's
    // instructions: about 214 a batch of 4 rows in ptxas's code for sm_90, 20 of them loads.)
    const long row_stride = long(nsg) * n;
    // a batch from row i0 < full_end is whole
    const long full_end = m - (kLuUpdateBatch - 1) * long(nsg);
    for (long cc = long(lane); cc < cols_right; cc += kSimdWidth) {
      const long c = right0 + cc;
      T u[kLuLeaf];
      for (int q = 0; q < kLuLeaf; ++q) {
        u[q] = q < lw ? ublk[q * kLuPanelMaxCols + c] : zero<T>();
      }
      long i0 = first_row + long(sg);
      device T* row = A + i0 * n;  // row i0
      for (; i0 < full_end; i0 += long(nsg) * kLuUpdateBatch, row += kLuUpdateBatch * row_stride) {
        T v[kLuUpdateBatch];
        T l[kLuUpdateBatch][kLuLeaf];
#pragma unroll
        for (int b = 0; b < kLuUpdateBatch; ++b) {
          device const T* rb = row + b * row_stride;
          v[b] = rb[k0 + c];
          lu_load_leaf_row(rb + r0, l[b], lw, whole);
        }
#pragma unroll
        for (int b = 0; b < kLuUpdateBatch; ++b) {
          row[b * row_stride + k0 + c] = lu_leaf_update(v[b], l[b], u, lw);
        }
      }
      // the last batch: rows i0 + b * nsg below m only
      for (int b = 0; b < kLuUpdateBatch; ++b) {
        const long i = i0 + b * long(nsg);
        if (i < m) {
          device T* ri = A + i * n;
          T l[kLuLeaf];
          lu_load_leaf_row(ri + r0, l, lw, whole);
          ri[k0 + c] = lu_leaf_update(ri[k0 + c], l, u, lw);
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
// with L11 (trsm). One thread per column; grid: (ce - cb - w, batch). A panel wider than
// kLuPanelWidth (an outer block, w <= kLuOuterWidth) is solved kLuPanelWidth rows at a time:
// the rows above a block enter as a product with L11's tiles left of its diagonal tile, then the
// diagonal tile's forward substitution. Every tile passes through threadgroup memory, so every
// thread of the group reaches every barrier; threads without a column only stage.
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

  const long t = long(gid.x);
  const bool owns = t < ce - cb - w;
  const long c = cb + t < k0 ? cb + t : cb + t + w;
  if (owns) {
    // The interchanges kLuSwapGroup at a time in registers (lu_swap_slots): a round trip to
    // memory per kLuSwapGroup interchanges rather than per interchange.
    for (long j0 = 0; j0 < w; j0 += kLuSwapGroup) {
      const long count = w - j0 < kLuSwapGroup ? w - j0 : long(kLuSwapGroup);
      long rows[2 * kLuSwapGroup];
      T vals[2 * kLuSwapGroup];
      for (int q = 0; q < kLuSwapGroup; ++q) {
        const long r = k0 + j0 + q;
        rows[q] = q < count ? r : -1;
        rows[kLuSwapGroup + q] = q < count ? clamp_row(long(piv[r]) - 1, r, m - 1) : -1;
      }
      for (int q = 0; q < 2 * kLuSwapGroup; ++q) {
        vals[q] = rows[q] >= 0 ? A[rows[q] * n + c] : zero<T>();
      }
      lu_swap_slots<kLuSwapGroup>(rows, vals, count);
      for (int q = 0; q < 2 * kLuSwapGroup; ++q) {
        if (rows[q] >= 0) {
          A[rows[q] * n + c] = vals[q];
        }
      }
    }
  }
  const bool solves = owns && c >= k0 + w;
  // The index of a staged entry splits by shifts: a 64-bit division by w per entry cost more
  // than its load.
  static_assert((kLuPanelWidth & (kLuPanelWidth - 1)) == 0, "L11's entries split by shifts");
  for (long b0 = 0; b0 < w; b0 += kLuPanelWidth) {
    const long bw = w - b0 < kLuPanelWidth ? w - b0 : long(kLuPanelWidth);
    T x[kLuPanelWidth];
#pragma unroll
    for (int i = 0; i < kLuPanelWidth; ++i) {
      x[i] = solves && i < bw ? A[(k0 + b0 + i) * n + c] : zero<T>();
    }
    // The rows above the block: x -= L(block, a0 tile) u(a0 tile), u read back from this
    // column (this thread solved and stored it), terms in column order as a row solve takes them.
    for (long a0 = 0; a0 < b0; a0 += kLuPanelWidth) {
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      for (int e = int(tid); e < kLuPanelWidth * kLuPanelWidth; e += int(tpg.x)) {
        const int i = e / kLuPanelWidth, j = e % kLuPanelWidth;
        l11[e] = i < bw ? A[(k0 + b0 + i) * n + k0 + a0 + j] : zero<T>();
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      if (solves) {
        for (int j = 0; j < kLuPanelWidth; ++j) {
          const T u = A[(k0 + a0 + j) * n + c];
#pragma unroll
          for (int i = 0; i < kLuPanelWidth; ++i) {
            x[i] = sub_mul(x[i], l11[i * kLuPanelWidth + j], u);
          }
        }
      }
    }
    // The diagonal tile (strictly lower part used; entries past bw are zeros, never used).
    if (b0 > 0) {
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    for (int e = int(tid); e < kLuPanelWidth * kLuPanelWidth; e += int(tpg.x)) {
      const int i = e / kLuPanelWidth, j = e % kLuPanelWidth;
      l11[e] = (i < bw && j < i) ? A[(k0 + b0 + i) * n + k0 + b0 + j] : zero<T>();
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (!solves) {
      continue;
    }
    // U12's column: forward substitution by columns of the tile (x_i -= l_ij x_j for every
    // i > j, j in order), each x_i taking its terms in the order of a row-by-row solve, so the
    // same bits; the rows past bw hold zeros whose updates are discarded. A row-by-row solve
    // chains every term through one sum behind a branch per row; by columns a step's updates
    // are independent.
#pragma unroll
    for (int j = 0; j < kLuPanelWidth - 1; ++j) {
#pragma unroll
      for (int i = j + 1; i < kLuPanelWidth; ++i) {
        x[i] = sub_mul(x[i], l11[i * kLuPanelWidth + j], x[j]);
      }
    }
    // The block's first row changed only when rows above it entered.
    for (int i = b0 > 0 ? 0 : 1; i < kLuPanelWidth; ++i) {
      if (i < bw) {
        A[(k0 + b0 + i) * n + c] = x[i];
      }
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

// lu_pivots_to_perm for one long permutation a threadgroup (m <= kLuPermStageRows): the
// permutation lives in threadgroup memory while thread 0 applies the interchanges. They are a
// chain (each reads what an earlier one may have written), a few cycles a step there against a
// round trip to the cache in device memory. The group stages the pivots kLuPermChunk at a time
// and writes the result. Grid: (group width, batch).
template <typename I>
[[kernel]] void lu_pivots_to_perm_staged(
    device const I* pivots [[buffer(0)]],
    device long* perm [[buffer(1)]],
    constant mpsl::LuPermParams& p_ [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup ushort p[kLuPermStageRows];
  threadgroup ushort to[kLuPermChunk];  // a round's pivot rows, 0-based
  const long m = p_.m, k = p_.k;
  const long b = long(group.y);
  const long nt = long(tpg.x);
  device const I* piv = pivots + b * k;
  for (long i = long(tid); i < m; i += nt) {
    p[i] = ushort(i);
  }
  for (long c0 = 0; c0 < k; c0 += kLuPermChunk) {
    const long count = k - c0 < kLuPermChunk ? k - c0 : long(kLuPermChunk);
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);  // the last round's reads are done
    for (long i = long(tid); i < count; i += nt) {
      to[i] = ushort(clamp_row(long(piv[c0 + i]) - 1, c0 + i, m - 1));
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (tid == 0) {
      for (long i = 0; i < count; ++i) {
        const int r = int(c0 + i), q = int(to[i]);
        const ushort x = p[q];
        p[q] = p[r];
        p[r] = x;
      }
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (long i = long(tid); i < m; i += nt) {
    perm[b * m + i] = long(p[i]);
  }
}
