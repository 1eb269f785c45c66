// A tiled matrix product on simdgroup_matrix 8x8 tiles, shared by the Metal families:
//
//   C = beta C + alpha op(A) op(B),  op(X) = X, X^T or X^H,
//
// for float (T = float) and complex (T = float2) elements; LU's trailing update and the blocked
// triangular solves call it with alpha = -1, beta = 1 (C -= A B), Cholesky's trailing update
// (HERK: C -= A A^H) writing only the lower triangle of C.
//
// `gemm_tile` computes one TM x TN block of C (32 x 32, or 64 x 64 for real elements where the
// host takes the wide block) with the kGemmThreads threads of a threadgroup (kGemmSimdgroupsM x
// kGemmSimdgroupsN simdgroups, each owning a grid of 8x8 accumulators). op(A) and op(B) are
// staged kGemmTileK columns / rows at a time in threadgroup memory, as separate real and
// imaginary planes of float, because simdgroup_matrix exists for real types only. Entries past
// the edges of A and B are staged as zero, so any m, n, k work; C is written only inside its
// bounds.
//
// Complex products are formed from four real products (the 4M method):
//   re = Ar Br - Ai Bi,  im = Ar Bi + Ai Br,
// with Ar Br and Ai Bi kept in separate accumulators and subtracted once at the end. The 3M
// method (three products: Ar Br, Ai Bi, (Ar + Ai)(Br + Bi)) saves a quarter of the multiplies but
// takes the imaginary part as a difference of sums whose error is bounded by
// (|Ar| + |Ai|)(|Br| + |Bi|) rather than by |A||B| componentwise: it loses accuracy in im when
// re dominates (Higham, "Stability of a method for multiplying complex matrices with three real
// matrix multiplications", SIMAX 13(3), 1992) and can overflow in (Ar + Ai)(Br + Bi) near the
// float limit, where the scaled LAPACK tests (1e+-30 entries) live. 4M keeps every component's
// error within the standard componentwise bound of a complex dot product.
//
// Every element of C is summed in one fixed order (k tiles ascending, 8 at a time, as the
// simdgroup multiply does), so results never depend on how lanes or threadgroups are scheduled.
#pragma once

#include "defines.h"
#include "scalar.h"
#include "simd.h"

namespace mpsl {

// The only simdgroup_matrix shape Metal offers for float.
constant constexpr int kGemmFrag = 8;
// Output block of one threadgroup, by default (gemm_tile's TM x TN): 32 x 32 keeps a complex
// threadgroup's accumulators at 12 tiles per simdgroup (2 x 2 outputs x 3 real products, 24
// floats per lane on Apple's layout), well within the registers one Apple GPU thread has
// without spilling, and keeps enough threadgroups for LU's trailing updates near the end of a
// factorization.
constant constexpr int kGemmTileM = 32;
constant constexpr int kGemmTileN = 32;
// The wide output block, for real elements only: 64 x 64, 4 x 4 accumulators a simdgroup (32
// floats a lane), the block MLX's float GEMM takes for large products on Apple GPUs. Each staged
// entry of op(A) and op(B) then serves twice as many products, and each tile a simdgroup loads
// four products instead of two, which halves the staging and the tile loads per multiply-add. A
// complex one would need two 64 x 64 planes of the output block (36 KiB with the pads), past the
// 32 KiB of threadgroup memory. A quarter as many threadgroups, so the host takes it for large,
// deep products only (mpslinalg/linalg/gemm_metal.py, `tile_for`): the standalone gemm and
// Cholesky's deep updates (its outer blocks' and lauum's); LU's and the triangular solves'
// updates keep 32 x 32 (measured: no gain for lu_factor, trsm with 64 right-hand sides slower).
constant constexpr int kGemmWideTile = 64;
// Depth staged per step: 16 fills two multiply steps per staging barrier while the staging
// buffers (A and B, real and imaginary planes) take 8 KiB of the 32 KiB, leaving room for the
// caller's own threadgroup memory.
constant constexpr int kGemmTileK = 16;
// Simdgroups per threadgroup along the rows and columns of the output block.
constant constexpr int kGemmSimdgroupsM = 2;
constant constexpr int kGemmSimdgroupsN = 2;
constant constexpr int kGemmThreads = kGemmSimdgroupsM * kGemmSimdgroupsN * kSimdWidth;
// Row pitches (floats) of the staged blocks in threadgroup memory, padded past their widths.
// Threadgroup memory is banked (32 banks of 4 bytes on NVIDIA GPUs; Apple GPUs' is banked too,
// and padding a tile's rows by a multiple of 16 bytes is the usual remedy there as well): lanes
// of one simdgroup access that hit different words of one bank are served one after another.
// simdgroup_load / simdgroup_store of an 8x8 tile have lane l take row 4 bit4(l) + bits1..2(l),
// columns c, c + 1 with c = 4 bit3(l) + 2 bit0(l); with unpadded rows (16, 32 or 64 floats) a
// tile's 8 rows start on only 2 banks (pitch 16) or 1 (pitch 32 or 64), a 4- or 8-way conflict
// for each access. A pitch of 8 mod 16 floats (a 32-byte pad) starts the 4 rows of each half
// simdgroup on 4 different groups of 8 banks, so the aligned pairs (c, c + 1), moved as one
// 8-byte access (served a half simdgroup at a time), all land on different banks: no conflict.
// An odd pitch would also spread the staging stores of a transposed operand (gemm_commit:
// neighbouring threads walk down a column, one pitch apart) over every bank, where 8 mod 16
// leaves them 8-way (A) / 4-way (B) instead of 16-way unpadded; but it misaligns every other
// row's pairs and leaves each tile load 2-way conflicted, and a step loads tiles twice as often
// as it stages, for every op (LU's and Cholesky's updates stage op(A) untransposed).
constant constexpr int kGemmPad = 8;
// op(A)'s stage, TM x kGemmTileK: 32 bytes past its 64-byte rows.
constant constexpr int kGemmPitchA = kGemmTileK + kGemmPad;
// op(B)'s stage, kGemmTileK x TN, and the output block, TM x TN (written by simdgroup_store,
// the same tile pattern, and read back a row per simdgroup, conflict-free at any pitch): 32
// bytes past their rows.
constexpr int gemm_pitch(int cols) { return cols + kGemmPad; }
static_assert(kGemmPitchA % 16 == 8 && gemm_pitch(kGemmTileN) % 16 == 8 &&
                  gemm_pitch(kGemmWideTile) % 16 == 8,
              "pitches of 8 mod 16 floats keep a tile's 8-byte accesses on distinct banks");
// Floats of threadgroup memory gemm_tile<T, TM, TN> needs (the caller provides them): the A and
// B stages, one plane each for real T and two (real and imaginary) for complex, reused for the
// planes of the output block at the end. 11 KiB with the pads for complex 32 x 32, 18 KiB for
// float 64 x 64.
template <typename T, int TM, int TN>
constexpr int gemm_scratch_floats() {
  const int planes = int(sizeof(T) / sizeof(float));
  const int stage = planes * (TM * kGemmPitchA + kGemmTileK * gemm_pitch(TN));
  const int out = planes * TM * gemm_pitch(TN);
  return stage > out ? stage : out;
}
// That of the default block for either element type (callers that declare one array for both).
constant constexpr int kGemmScratchFloats = gemm_scratch_floats<float2, kGemmTileM, kGemmTileN>();
static_assert(kGemmScratchFloats * sizeof(float) <= kMaxThreadgroupMemoryBytes &&
                  gemm_scratch_floats<float, kGemmWideTile, kGemmWideTile>() * sizeof(float) <=
                      kMaxThreadgroupMemoryBytes,
              "gemm_tile's scratch (the default block, and float's wide one) must fit in "
              "threadgroup memory");
static_assert(kGemmThreads <= kMaxThreadsPerGroup, "gemm_tile's threadgroup is too large");
static_assert(kGemmTileK % kGemmFrag == 0, "the staged depth is a whole number of 8x8 steps");

// op() codes of the operands.
constant constexpr int kGemmNoTrans = 0;
constant constexpr int kGemmTrans = 1;
constant constexpr int kGemmConjTrans = 2;
// The part of C written: all of it, or its lower triangle with the diagonal (C[i][j], j <= i, in
// C's own indices), which is what a Hermitian rank-k update (HERK / SYRK) needs.
constant constexpr int kGemmFull = 0;
constant constexpr int kGemmLower = 1;

inline float gemm_re(float x) { return x; }
inline float gemm_re(float2 x) { return x.x; }
inline float gemm_im(float) { return 0.0f; }
inline float gemm_im(float2 x) { return x.y; }
inline bool gemm_is_complex(float) { return false; }
inline bool gemm_is_complex(float2) { return true; }
inline float gemm_make(float re, float, float) { return re; }
inline float2 gemm_make(float re, float im, float2) { return float2(re, im); }

// Element (i, j) of op(X), X row-major with leading dimension ld; zero outside rows x cols of
// op(X).
template <typename T>
inline T gemm_op_elem(device const T* x, long ld, int op, long i, long j, long rows, long cols) {
  if (i >= rows || j >= cols) {
    return zero<T>();
  }
  if (op == kGemmNoTrans) {
    return x[i * ld + j];
  }
  const T v = x[j * ld + i];
  return op == kGemmConjTrans ? conj(v) : v;
}

// Entry e of a TN-column output block (row-major, as the threads own C's entries) in its padded
// plane.
template <int TN>
inline int gemm_out_at(int e) {
  return e / TN * gemm_pitch(TN) + e % TN;
}

// Whether gemm_tile reads and writes entry (i, j) of C: inside its m x n bounds and in the part
// uplo names.
inline bool gemm_writes(long i, long j, long m, long n, int uplo) {
  return i < m && j < n && (uplo == kGemmFull || j <= i);
}

// Where a thread's entries of a staged rows_t x cols_t block of op(X) lie. The threads walk X's
// own rows, so neighbouring threads read neighbouring addresses whether op transposes or not:
// the e-th entry (e = tid + q kGemmThreads) is at (e / cols_t, e % cols_t) of the block for
// op = N and (e % rows_t, e / rows_t) otherwise. The threadgroup being a whole number of the
// block's rows of X, a thread's entries lie one under the other in X: entry q at block position
// (i0 + q di, j0 + q dj), one of di, dj zero. Formed once per gemm_tile, so that a step forms
// one address per operand, not one per entry with a division by a runtime choice of extent:
// the staging is most of a step's instructions besides the products, and where the issue slots
// are the limit (through the CUDA executor; see docs/lu.rst) they set the time.
struct GemmStageMap {
  int i0, j0;  // block position of the thread's first entry
  int di, dj;  // from one of its entries to the next
};

inline GemmStageMap gemm_stage_map(int op, int rows_t, int cols_t, uint tid) {
  const int t = int(tid);
  GemmStageMap s;
  if (op == kGemmNoTrans) {
    s.i0 = t / cols_t;
    s.j0 = t % cols_t;
    s.di = kGemmThreads / cols_t;
    s.dj = 0;
  } else {
    s.i0 = t % rows_t;
    s.j0 = t / rows_t;
    s.di = 0;
    s.dj = kGemmThreads / rows_t;
  }
  return s;
}

// A step's staging is split in two: gemm_fetch reads this thread's L entries of
// op(X)[r0 : r0 + rows_t, c0 : c0 + cols_t] (rows x cols the size of op(X)) into registers,
// gemm_commit stores them into the planes re / im (row-major, pitch floats per row). gemm_tile
// fetches a step's entries before the products of the step before it, across the barrier
// between them (where no compiler moves a read by itself), so their latency passes during those
// products; and a step's reads are in flight together whatever a compiler can prove about the
// stores between them (through the CUDA executor, whose pointers carry no address space, a
// loop of a read then a threadgroup store waited for each read in turn). Entries past the edges
// of op(X) are zero; the bounds are tested per entry only in a block that crosses an edge.
template <typename T, int L>
inline void gemm_fetch(thread T* v, device const T* x, long ld, int op, GemmStageMap s, long r0,
                       long c0, long rows, long cols, int rows_t, int cols_t) {
  const long i = r0 + s.i0, j = c0 + s.j0;
  device const T* p = x + (op == kGemmNoTrans ? i * ld + j : j * ld + i);
  const long q_stride = long(s.di + s.dj) * ld;
  const bool inside = r0 + rows_t <= rows && c0 + cols_t <= cols;
#pragma unroll
  for (int q = 0; q < L; ++q) {
    const bool in_bounds = inside || (i + q * s.di < rows && j + q * s.dj < cols);
    const T e = in_bounds ? *p : zero<T>();
    v[q] = op == kGemmConjTrans ? conj(e) : e;
    p += q_stride;
  }
}

template <typename T, int L>
inline void gemm_commit(threadgroup float* re, threadgroup float* im, thread const T* v,
                        GemmStageMap s, int pitch) {
  const int at = s.i0 * pitch + s.j0, q_stride = s.di * pitch + s.dj;
#pragma unroll
  for (int q = 0; q < L; ++q) {
    re[at + q * q_stride] = gemm_re(v[q]);
    if (gemm_is_complex(v[q])) {
      im[at + q * q_stride] = gemm_im(v[q]);
    }
  }
}

// C[row0 : row0 + TM, col0 : col0 + TN] = beta C + alpha op(A) op(B) within the m x n bounds of
// C, op(A) m x k, op(B) k x n; lda, ldb, ldc the row strides of the stored A, B, C; uplo
// (kGemmFull / kGemmLower) the part of C written, the rest neither read nor written. C must not
// overlap the parts of A and B read. beta = 0 never reads C (NaN there does not leak). Called by
// every thread of a threadgroup of exactly kGemmThreads threads (it holds barriers); scratch
// holds gemm_scratch_floats<T, TM, TN>() floats of threadgroup memory, free on return. The
// block's shape changes which threadgroup sums an entry, never the order of its sum: the same
// bits for every TM x TN.
template <typename T, int TM = kGemmTileM, int TN = kGemmTileN>
inline void gemm_tile(device const T* a, long lda, int op_a, device const T* b, long ldb, int op_b,
                      device T* c, long ldc, long m, long n, long k, long row0, long col0,
                      float alpha, float beta, int uplo, threadgroup float* scratch, uint tid,
                      uint sg) {
  // 8x8 accumulator tiles per simdgroup along each dimension; entries of a staged block of
  // op(A) (TM x kGemmTileK) and of op(B) (kGemmTileK x TN) each thread loads per step, and of
  // the output block it writes.
  constexpr int kFragsM = TM / (kGemmSimdgroupsM * kGemmFrag);
  constexpr int kFragsN = TN / (kGemmSimdgroupsN * kGemmFrag);
  constexpr int kLoadsA = TM * kGemmTileK / kGemmThreads;
  constexpr int kLoadsB = kGemmTileK * TN / kGemmThreads;
  constexpr int kOutPerThread = TM * TN / kGemmThreads;
  constexpr int kPitchB = gemm_pitch(TN);
  constexpr int kPitchC = gemm_pitch(TN);
  static_assert(kFragsM * kGemmSimdgroupsM * kGemmFrag == TM &&
                    kFragsN * kGemmSimdgroupsN * kGemmFrag == TN,
                "the block is whole 8x8 tiles of each simdgroup");
  static_assert(kLoadsA * kGemmThreads == TM * kGemmTileK &&
                    kLoadsB * kGemmThreads == kGemmTileK * TN &&
                    kOutPerThread * kGemmThreads == TM * TN,
                "whole loads and outputs a thread");
  static_assert(kGemmThreads % TM == 0 && kGemmThreads % TN == 0 &&
                    kGemmThreads % kGemmTileK == 0,
                "a staged block's rows divide the threadgroup (gemm_fetch's entry stride)");
  static_assert(gemm_scratch_floats<T, TM, TN>() * sizeof(float) <= kMaxThreadgroupMemoryBytes,
                "the block's scratch fits in threadgroup memory");
  const bool cplx = gemm_is_complex(zero<T>());
  // The planes: a_re, b_re, then (complex only) a_im, b_im; the output block's reuse them.
  threadgroup float* a_re = scratch;
  threadgroup float* b_re = a_re + TM * kGemmPitchA;
  threadgroup float* a_im = b_re + kGemmTileK * kPitchB;
  threadgroup float* b_im = a_im + TM * kGemmPitchA;
  const int sm = int(sg) / kGemmSimdgroupsN;  // this simdgroup's block row and column
  const int sn = int(sg) % kGemmSimdgroupsN;
  const int fr0 = sm * kFragsM * kGemmFrag;  // first row / column of its accumulators
  const int fc0 = sn * kFragsN * kGemmFrag;

  // acc = Re A Re B (all of C for real T); acc_ii = Im A Im B; acc_im = the imaginary part.
  metal::simdgroup_float8x8 acc[kFragsM][kFragsN];
  metal::simdgroup_float8x8 acc_ii[kFragsM][kFragsN];
  metal::simdgroup_float8x8 acc_im[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) {
      acc[i][j] = metal::make_filled_simdgroup_matrix<float, kGemmFrag, kGemmFrag>(0.0f);
      acc_ii[i][j] = acc[i][j];
      acc_im[i][j] = acc[i][j];
    }
  }

  // Double buffering through registers: the next step's entries are fetched before this step's
  // products, so one device latency per step overlaps them.
  const GemmStageMap map_a = gemm_stage_map(op_a, TM, kGemmTileK, tid);
  const GemmStageMap map_b = gemm_stage_map(op_b, kGemmTileK, TN, tid);
  T next_a[kLoadsA], next_b[kLoadsB];
  if (k > 0) {
    gemm_fetch<T, kLoadsA>(next_a, a, lda, op_a, map_a, row0, 0, m, k, TM, kGemmTileK);
    gemm_fetch<T, kLoadsB>(next_b, b, ldb, op_b, map_b, 0, col0, k, n, kGemmTileK, TN);
  }
  for (long kb = 0; kb < k; kb += kGemmTileK) {
    gemm_commit<T, kLoadsA>(a_re, a_im, next_a, map_a, kGemmPitchA);
    gemm_commit<T, kLoadsB>(b_re, b_im, next_b, map_b, kPitchB);
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (kb + kGemmTileK < k) {
      gemm_fetch<T, kLoadsA>(next_a, a, lda, op_a, map_a, row0, kb + kGemmTileK, m, k, TM,
                             kGemmTileK);
      gemm_fetch<T, kLoadsB>(next_b, b, ldb, op_b, map_b, kb + kGemmTileK, col0, k, n,
                             kGemmTileK, TN);
    }
#pragma unroll
    for (int kk = 0; kk < kGemmTileK; kk += kGemmFrag) {
      metal::simdgroup_float8x8 ar[kFragsM], br[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        metal::simdgroup_load(ar[i], a_re + (fr0 + i * kGemmFrag) * kGemmPitchA + kk, kGemmPitchA);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        metal::simdgroup_load(br[j], b_re + kk * kPitchB + fc0 + j * kGemmFrag, kPitchB);
      }
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) {
          metal::simdgroup_multiply_accumulate(acc[i][j], ar[i], br[j], acc[i][j]);
        }
      }
      if (cplx) {
        metal::simdgroup_float8x8 ai[kFragsM], bi[kFragsN];
#pragma unroll
        for (int i = 0; i < kFragsM; ++i) {
          metal::simdgroup_load(ai[i], a_im + (fr0 + i * kGemmFrag) * kGemmPitchA + kk,
                                kGemmPitchA);
        }
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) {
          metal::simdgroup_load(bi[j], b_im + kk * kPitchB + fc0 + j * kGemmFrag, kPitchB);
        }
#pragma unroll
        for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
          for (int j = 0; j < kFragsN; ++j) {
            metal::simdgroup_multiply_accumulate(acc_ii[i][j], ai[i], bi[j], acc_ii[i][j]);
            metal::simdgroup_multiply_accumulate(acc_im[i][j], ar[i], bi[j], acc_im[i][j]);
            metal::simdgroup_multiply_accumulate(acc_im[i][j], ai[i], br[j], acc_im[i][j]);
          }
        }
      }
    }
    // The next step restages the planes.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }

  // This thread's entries of C (beta != 0), all read before any is written, so the reads are
  // in flight together (a loop of read-modify-writes waits for each read in turn where the
  // compiler cannot tell the entries apart). Every entry of C a threadgroup reads it owns.
  T c_old[kOutPerThread];
#pragma unroll
  for (int q = 0; q < kOutPerThread; ++q) {
    const int e = int(tid) + q * kGemmThreads;
    const long i = row0 + e / TN, j = col0 + e % TN;
    c_old[q] = beta != 0.0f && gemm_writes(i, j, m, n, uplo) ? c[i * ldc + j] : zero<T>();
  }
  // The output block through threadgroup memory (the stages are free now): c_re[i][j] = Re,
  // c_ii = Im A Im B, c_im = Im, each TM x TN (pitch kPitchC).
  threadgroup float* c_re = scratch;
  threadgroup float* c_ii = scratch + TM * kPitchC;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) {
      metal::simdgroup_store(acc[i][j], c_re + (fr0 + i * kGemmFrag) * kPitchC + fc0 +
                                            j * kGemmFrag, kPitchC);
      if (cplx) {
        metal::simdgroup_store(acc_ii[i][j], c_ii + (fr0 + i * kGemmFrag) * kPitchC + fc0 +
                                                 j * kGemmFrag, kPitchC);
      }
    }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  float re_v[kOutPerThread];
  for (int q = 0; q < kOutPerThread; ++q) {
    const int at = gemm_out_at<TN>(int(tid) + q * kGemmThreads);
    re_v[q] = cplx ? c_re[at] - c_ii[at] : c_re[at];
  }
  float im_v[kOutPerThread];
  if (cplx) {
    // c_ii is free once re_v holds the differences: it takes the imaginary part.
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        metal::simdgroup_store(acc_im[i][j], c_ii + (fr0 + i * kGemmFrag) * kPitchC + fc0 +
                                                 j * kGemmFrag, kPitchC);
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int q = 0; q < kOutPerThread; ++q) {
      im_v[q] = c_ii[gemm_out_at<TN>(int(tid) + q * kGemmThreads)];
    }
  } else {
    for (int q = 0; q < kOutPerThread; ++q) {
      im_v[q] = 0.0f;
    }
  }
  for (int q = 0; q < kOutPerThread; ++q) {
    const int e = int(tid) + q * kGemmThreads;
    const long i = row0 + e / TN, j = col0 + e % TN;
    if (gemm_writes(i, j, m, n, uplo)) {
      const T prod = gemm_make(re_v[q], im_v[q], zero<T>());
      c[i * ldc + j] = beta == 0.0f ? alpha * prod : beta * c_old[q] + alpha * prod;
    }
  }
  // The caller may reuse scratch at once.
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
}

// gemm_narrow: columns of op(B) per pass (accumulators per lane), and rows of C (simdgroups) per
// threadgroup.
constant constexpr int kGemmNarrowCols = 4;
constant constexpr int kGemmNarrowRows = 8;

// Arguments of the standalone gemm and gemm_narrow kernels.
struct GemmParams {
  long m, n, k;          // C is m x n, op(A) m x k, op(B) k x n
  long lda, ldb, ldc;    // row strides of the stored matrices
  long op_a, op_b;       // kGemmNoTrans, kGemmTrans or kGemmConjTrans
  long uplo;             // kGemmFull or kGemmLower: the part of C written
  long stride_a, stride_b, stride_c;  // between batch elements (0 broadcasts)
  float alpha, beta;
};

}  // namespace mpsl

// C = beta C + alpha op(A) op(B) for a batch of matrices: one threadgroup of kGemmThreads per
// Tile x Tile block of C. Grid: (column blocks * kGemmThreads, row blocks, batch).
template <typename T, int Tile>
[[kernel]] void gemm(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device T* c [[buffer(2)]],
    constant mpsl::GemmParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup float scratch[gemm_scratch_floats<T, Tile, Tile>()];
  const long batch = long(group.z);
  gemm_tile<T, Tile, Tile>(a + batch * p.stride_a, p.lda, int(p.op_a), b + batch * p.stride_b,
                           p.ldb, int(p.op_b), c + batch * p.stride_c, p.ldc, p.m, p.n, p.k,
                           long(group.y) * Tile, long(group.x) * Tile, p.alpha, p.beta,
                           int(p.uplo), scratch, tid, sg);
}

// The same product for C of few columns (the float64-class solve's corrections: one right-hand
// side), uplo = kGemmFull. The tile kernel would compute kGemmTileN columns for one, over
// k / kGemmTileK dependent staging steps in m / kGemmTileM threadgroups; here a simdgroup owns one
// row of C and its lanes walk that row of op(A) (A's own row for op = N: coalesced reads, the
// matrix streamed once per kGemmNarrowCols columns), each lane summing every 32nd term, added
// across the lanes by simd_sum: one fixed order, whatever the scheduling.
// Grid: (kGemmNarrowRows * kSimdWidth, ceil(m / kGemmNarrowRows), batch).
template <typename T>
[[kernel]] void gemm_narrow(
    device const T* a [[buffer(0)]],
    device const T* b [[buffer(1)]],
    device T* c [[buffer(2)]],
    constant mpsl::GemmParams& p [[buffer(3)]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long row = long(group.y) * kGemmNarrowRows + long(sg);
  if (row >= p.m) {
    return;  // the whole simdgroup: no barrier below
  }
  const long batch = long(group.z);
  device const T* A = a + batch * p.stride_a;
  device const T* B = b + batch * p.stride_b;
  device T* C = c + batch * p.stride_c;
  const int op_a = int(p.op_a), op_b = int(p.op_b);
  for (long c0 = 0; c0 < p.n; c0 += kGemmNarrowCols) {
    T acc[kGemmNarrowCols];
    for (int j = 0; j < kGemmNarrowCols; ++j) {
      acc[j] = zero<T>();
    }
    for (long kk = long(lane); kk < p.k; kk += kSimdWidth) {
      const T av = gemm_op_elem(A, p.lda, op_a, row, kk, p.m, p.k);
      for (int j = 0; j < kGemmNarrowCols; ++j) {
        acc[j] += mul(av, gemm_op_elem(B, p.ldb, op_b, kk, c0 + j, p.k, p.n));
      }
    }
    for (int j = 0; j < kGemmNarrowCols; ++j) {
      const T sum = simd_sum(acc[j]);
      if (lane == 0 && c0 + j < p.n) {
        device T* cij = C + row * p.ldc + c0 + j;
        *cij = p.beta == 0.0f ? p.alpha * sum : p.beta * *cij + p.alpha * sum;
      }
    }
  }
}
