// One-sided block Jacobi SVD spread over threadgroups, for square matrices too large for
// svd_jacobi's single threadgroup (svd.h) to be quick: the same method, with the columns taken
// kSvdBlockWidth at a time (the block one-sided Jacobi of Hari and Singer; the Gram-matrix
// form used here is that of Novakovic 2015, "A hierarchically blocked Jacobi SVD algorithm for
// single and multiple graphics processing units", SIAM J. Sci. Comput. 37(1)).
//
// The columns of W (A scaled by a power of two, as svd_jacobi scales it) form `blocks` blocks
// (an even count; a last block past n is empty). A sweep is blocks - 1 rounds of the
// round-robin order on blocks (jacobi_round_robin, which svd_jacobi uses on columns), so that
// every pair of blocks meets once a sweep and a round's pairs are disjoint. For a pair of
// blocks, X = its 2 kSvdBlockWidth columns:
// - svd_block_gram forms G = X^H X, its rows split among threadgroups of kSvdBlockSplitRows
//   rows (partial Gram matrices, summed in a fixed order by the next kernel);
// - svd_block_rotate sums them, and if some pair of columns is not yet orthogonal to the
//   tolerance of svd_jacobi (|g_pq| > sqrt(n) eps sqrt(g_pp g_qq), xGESVJ's) runs p.inner
//   Hermitian Jacobi sweeps of eigh.h on G, accumulating Q from I (the rotations' product, not
//   a sorted eigenbasis), restores Q's orthogonality by a Newton-Schulz step, orders its
//   columns by decreasing norm of X Q (de Rijk), and rotates X <- X Q, V <- V Q. Every
//   threadgroup of the pair forms the same Q (the same sums in the same order) and rotates its
//   own rows, so a round is two launches whatever n.
// One inner sweep rotates each pair of the 2 kSvdBlockWidth columns once, as one-sided Jacobi
// would, with one pass over X and V instead of one per pair. A sweep that leaves every pair of
// blocks alone ends the iteration. The host launches kSvdMaxSweeps sweeps whatever the data (no
// host reads); the rounds after the converged sweep return at once, so they cost the launch.
//
// Accuracy: the test reads G, the columns' inner products as svd_jacobi forms them, so the
// final orthogonality is svd_jacobi's. What the block method gives up is the relative accuracy
// of tiny singular values on graded input: G's entries are absolute-accurate, and a column of
// norm below kSvdBlockTinyNorm (of the scaled matrix) may stay unrotated (its inner products
// fall under eigh.h's negligible size), so its U column is completed (svd_complete_columns)
// rather than normalised. Singular values and vectors are accurate to eps |A|, as LAPACK's
// xGESVD's are; svd_jacobi keeps serving the sizes below the host's BLOCK_MIN_N.
//
// Kernels (grid: threads, then the pieces of a matrix, then the batch):
//   svd_block_scan     max |a_ij| and non-finite entries of kSvdBlockSplitRows rows.
//   svd_block_scale    one threadgroup a matrix: the scan's parts reduced; non-finite input
//                      gets NaN outputs and info kSvdNonFinite; the state words below.
//   svd_block_load     W = A 2^-e column-major, V = I.
//   svd_block_gram     partial Gram matrices of a round's pairs of blocks.
//   svd_block_rotate   the test, Q, and the rotation of the pairs' rows.
//   svd_block_norms    the column norms of W, a simdgroup a column.
//   svd_block_output   S, U and Vh (columns sorted by decreasing norm), info.
//   svd_block_complete one threadgroup a matrix: U's columns of tiny norm completed.
#pragma once

#include "eigh.h"
#include "svd.h"

namespace mpsl {

// Arguments of the svd_block kernels (field order: mpslinalg.linalg.svd_metal packs them from
// this declaration).
struct SvdBlockParams {
  long n;        // order of the matrices
  long batch;    // number of matrices
  long vectors;  // 1: V is accumulated and U, Vh written
  long blocks;   // column blocks of kSvdBlockWidth, even (a last one past n is empty)
  long sweep;    // svd_block_gram / _rotate: the sweep, from 0
  long round;    // svd_block_gram / _rotate: the round of the sweep, from 0 to blocks - 2
  long inner;    // svd_block_rotate: Jacobi sweeps on a pair's Gram matrix at most
  long rotate_rows;  // svd_block_rotate: rows of a pair per threadgroup
};

// Columns of a block: svd_block_rotate's Gram matrix, rotations and their product for two
// blocks (3 x 32 x 32 complex64 elements, 24 KiB) fit Apple's 32 KiB of threadgroup memory.
constant constexpr int kSvdBlockWidth = 16;
constant constexpr int kSvdBlockCols = 2 * kSvdBlockWidth;
// Rows of a matrix per threadgroup of svd_block_scan, svd_block_gram and svd_block_rotate: a
// round of an order-1024 matrix is 32 pairs x 16 threadgroups, enough to fill a GPU, where a
// threadgroup a pair kept 32 busy with 1024 rows each.
constant constexpr int kSvdBlockSplitRows = 64;
// Rows of the pair's columns staged at once to form the Gram matrix (the stride padded by one
// element so that the lanes reading one row of different columns hit different banks).
constant constexpr int kSvdBlockChunk = 32;
constant constexpr int kSvdBlockChunkStride = kSvdBlockChunk + 1;
// Entries of a row svd_block_rotate loads before it multiplies them (device loads in flight
// together instead of one at a time; the values do not depend on it).
constant constexpr int kSvdBlockLoadBatch = 8;
// Threads of an svd_block_gram / svd_block_rotate threadgroup: one per entry of the 16 x 16
// pair blocks of the Jacobi update (eigh_jacobi_sweeps), four Gram entries each.
constant constexpr int kSvdBlockThreads = 256;
// Columns of W (scaled to max|a_ij| in [0.5, 1)) below this norm have their U column completed:
// two such columns may have an inner product below eigh.h's kEighNegligible once G is scaled to
// O(1) (g <= n), so they may stay unrotated. 2^-28: for larger columns every pair above the
// tolerance is rotated while n <= 2^17 (2^-56 sqrt(n) eps > 1e-30 * 2n).
constant constexpr float kSvdBlockTinyNorm = 3.7252903e-9f;
static_assert(3 * kSvdBlockCols * kSvdBlockCols * 8 + kSvdBlockCols * 4 +
                      kEighGroupMaxPairs * kEighRotFloats * 4 +
                      (kMaxThreadsPerGroup / kSimdWidth) * 4 <=
                  kMaxThreadgroupMemoryBytes,
              "svd_block_rotate's threadgroup memory must fit");
static_assert(kSvdBlockCols * kSvdBlockChunkStride * 8 <= kMaxThreadgroupMemoryBytes,
              "svd_block_gram's threadgroup memory must fit");

// Threadgroups of kSvdBlockSplitRows rows of an order-n matrix.
inline int svd_block_splits(long n) {
  return int((n + kSvdBlockSplitRows - 1) / kSvdBlockSplitRows);
}

// State words per matrix (svd_block_state_ints): [0] 1 for non-finite input, [1] the scale
// exponent, then a word per sweep and pair slot of a round, 1 when that slot rotated its pair in
// some round of the sweep (each slot's first threadgroup writes it: no two write one word in a
// launch).
inline long svd_block_state_ints(constant SvdBlockParams& p) {
  return 2 + kSvdMaxSweeps * (p.blocks / 2);
}

// Whether some pair of blocks was rotated in sweep s of the matrix whose state is st.
inline bool svd_block_swept(device const int* st, constant SvdBlockParams& p, long s) {
  const long slots = p.blocks / 2;
  int any = 0;
  for (long k = 0; k < slots; ++k) {
    any |= st[2 + s * slots + k];
  }
  return any != 0;
}

// Whether the rounds of sweep p.sweep have nothing to do: non-finite input, or converged.
inline bool svd_block_idle(device const int* st, constant SvdBlockParams& p) {
  return st[0] != 0 || (p.sweep > 0 && !svd_block_swept(st, p, p.sweep - 1));
}

// Matrix b's W (column-major n x n) in the workspace, V after it when p.vectors.
template <typename P>
inline P svd_block_work(P work, long b, constant SvdBlockParams& p) {
  return work + b * (p.vectors != 0 ? 2 : 1) * p.n * p.n;
}

// Columns of block bi of an order-n matrix (0 for a block past n).
inline int svd_block_width(int bi, int n) {
  return metal::clamp(n - bi * kSvdBlockWidth, 0, kSvdBlockWidth);
}

// The pair of blocks of a round's slot: blocks bi, bj, their widths wi, wj.
struct SvdBlockPair {
  int bi, bj, wi, wj;
  int count() const { return wi + wj; }
  // Column k (0 <= k < count()) of the pair.
  int column(int k) const {
    return k < wi ? bi * kSvdBlockWidth + k : bj * kSvdBlockWidth + (k - wi);
  }
};

inline SvdBlockPair svd_block_pair(constant SvdBlockParams& p, int slot) {
  SvdBlockPair pair;
  jacobi_round_robin(int(p.blocks), int(p.round), slot, pair.bi, pair.bj);
  pair.wi = svd_block_width(pair.bi, int(p.n));
  pair.wj = svd_block_width(pair.bj, int(p.n));
  return pair;
}

}  // namespace mpsl

// Grid: (group width, splits, batch): max |a_ij| and whether some entry is not finite, of
// kSvdBlockSplitRows rows a threadgroup, into parts (batch, splits, 2).
template <typename T>
[[kernel]] void svd_block_scan(
    device const T* a [[buffer(0)]],    // (batch, n, n) row-major, not modified
    device float* parts [[buffer(1)]],  // (batch, splits, 2)
    constant mpsl::SvdBlockParams& p [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 tpg [[threads_per_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kMaxThreadsPerGroup / kSimdWidth];
  const long b = long(group.z), n = p.n, split = long(group.y);
  const long row0 = split * kSvdBlockSplitRows;
  const long rows = metal::min(long(kSvdBlockSplitRows), n - row0);
  bool bad;
  const float anrm = svd_scan(a + b * n * n + row0 * n, rows * n, bad, part, tid, tpg.x, lane,
                              sg, nsg);
  if (tid == 0) {
    device float* out = parts + (b * svd_block_splits(n) + split) * 2;
    out[0] = anrm;
    out[1] = bad ? 1.0f : 0.0f;
  }
}

// Grid: (group width, batch), one threadgroup per matrix: the scan's parts reduced into the
// state words (svd_block_state_ints), and the NaN outputs of a matrix with a NaN or Inf.
template <typename T>
[[kernel]] void svd_block_scale(
    device const float* parts [[buffer(0)]],
    device float* s [[buffer(1)]],      // (batch, n)
    device T* u [[buffer(2)]],          // (batch, n, n) when vectors
    device T* vh [[buffer(3)]],         // (batch, n, n) when vectors
    device int* info [[buffer(4)]],     // (batch,)
    device int* state [[buffer(5)]],    // (batch, svd_block_state_ints)
    constant mpsl::SvdBlockParams& p [[buffer(6)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kMaxThreadsPerGroup / kSimdWidth];
  const long b = long(group.y), n = p.n, nn = n * n;
  const bool vectors = p.vectors != 0;
  const int splits = svd_block_splits(n);
  float anrm = 0.0f, nonfinite = 0.0f;
  for (int k = int(tid); k < splits; k += int(tpg.x)) {
    anrm = metal::max(anrm, parts[(b * splits + k) * 2]);
    nonfinite = metal::max(nonfinite, parts[(b * splits + k) * 2 + 1]);
  }
  anrm = group_max(anrm, part, lane, sg, nsg);
  const bool bad = group_max(nonfinite, part, lane, sg, nsg) != 0.0f;
  if (bad) {
    svd_write_nonfinite(s + b * n, u + (vectors ? b * nn : 0), vh + (vectors ? b * nn : 0),
                        info + b, n, vectors, tid, tpg.x);
  }
  device int* st = state + b * svd_block_state_ints(p);
  for (long k = tid; k < svd_block_state_ints(p); k += tpg.x) {
    st[k] = k == 0 ? int(bad) : (k == 1 && !bad ? svd_scale_exponent(anrm) : 0);
  }
}

// Grid: (n rounded up to the group width, n, batch): thread (i, j) sets W[i, j] and V[i, j].
template <typename T>
[[kernel]] void svd_block_load(
    device const T* a [[buffer(0)]],          // (batch, n, n) row-major
    device T* work [[buffer(1)]],             // (batch, 1 or 2, n, n): W, V (svd_block_work)
    device const int* state [[buffer(2)]],
    constant mpsl::SvdBlockParams& p [[buffer(3)]],
    uint3 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long i = long(gid.x), j = long(gid.y), b = long(gid.z), n = p.n, nn = n * n;
  device const int* st = state + b * svd_block_state_ints(p);
  if (i >= n || st[0] != 0) {
    return;
  }
  device T* w = svd_block_work(work, b, p);
  w[j * n + i] = svd_ldexp(a[b * nn + i * n + j], -st[1]);
  if (p.vectors != 0) {
    w[nn + j * n + i] = i == j ? one<T>() : zero<T>();
  }
}

// Grid: (kSvdBlockThreads, blocks / 2 * splits, batch): the Gram matrix of rows [row0, row0 +
// kSvdBlockSplitRows) of the columns of pair `slot` of round p.round, into its slot of grams
// (batch, blocks / 2, splits, kSvdBlockCols^2; c x c row-major, c the pair's columns).
template <typename T>
[[kernel]] void svd_block_gram(
    device const T* work [[buffer(0)]],
    device T* grams [[buffer(1)]],
    device const int* state [[buffer(2)]],
    constant mpsl::SvdBlockParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 tpg [[threads_per_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  threadgroup T chunk[kSvdBlockCols * kSvdBlockChunkStride];
  const long b = long(group.z);
  if (svd_block_idle(state + b * svd_block_state_ints(p), p)) {
    return;
  }
  const int n = int(p.n), splits = svd_block_splits(n);
  const int slot = int(group.y) / splits, split = int(group.y) % splits;
  const SvdBlockPair pair = svd_block_pair(p, slot);
  const int c = pair.count();
  const int row0 = split * kSvdBlockSplitRows;
  const int row1 = metal::min(n, row0 + kSvdBlockSplitRows);
  device const T* w = svd_block_work(work, b, p);
  device T* g = grams + ((b * (p.blocks / 2) + slot) * splits + split) * long(kSvdBlockCols) *
                            kSvdBlockCols;
  const uint nthreads = tpg.x;
  // kEntries entries a thread a pass: one pass with kSvdBlockThreads threads, more if a
  // pipeline allows fewer
  constexpr int kEntries = kSvdBlockCols * kSvdBlockCols / kSvdBlockThreads;
  for (int first = 0; first < c * kSvdBlockCols; first += kEntries * int(nthreads)) {
    T acc[kEntries];
    for (int e = 0; e < kEntries; ++e) {
      acc[e] = zero<T>();
    }
    for (int r0 = row0; r0 < row1; r0 += kSvdBlockChunk) {
      for (int e = int(tid); e < c * kSvdBlockChunk; e += int(nthreads)) {
        const int k = e / kSvdBlockChunk, rr = e % kSvdBlockChunk;
        const int row = r0 + rr;
        chunk[k * kSvdBlockChunkStride + rr] =
            row < row1 ? w[long(pair.column(k)) * n + row] : zero<T>();
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      for (int e = 0; e < kEntries; ++e) {
        const int entry = first + int(tid) + e * int(nthreads);
        const int i = entry / kSvdBlockCols, j = entry % kSvdBlockCols;
        if (i < c && j < c) {
          T sum = acc[e];
          for (int rr = 0; rr < kSvdBlockChunk; ++rr) {
            sum += mul(conj(chunk[i * kSvdBlockChunkStride + rr]),
                       chunk[j * kSvdBlockChunkStride + rr]);
          }
          acc[e] = sum;
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    for (int e = 0; e < kEntries; ++e) {
      const int entry = first + int(tid) + e * int(nthreads);
      const int i = entry / kSvdBlockCols, j = entry % kSvdBlockCols;
      if (i < c && j < c) {
        g[i * c + j] = acc[e];
      }
    }
  }
}

// Grid: (kSvdBlockThreads, blocks / 2 * ceil(n / p.rotate_rows), batch): the pair's Gram
// matrix (svd_block_gram's parts summed in split order), the test, Q, and rows [row0, row0 +
// p.rotate_rows) of X <- X Q and V <- V Q.
template <typename T>
[[kernel]] void svd_block_rotate(
    device T* work [[buffer(0)]],       // (batch, 1 or 2, n, n): W, V (svd_block_work)
    device const T* grams [[buffer(1)]],
    device int* state [[buffer(2)]],    // (batch, svd_block_state_ints)
    constant mpsl::SvdBlockParams& p [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 tpg [[threads_per_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup T gram[kSvdBlockCols * kSvdBlockCols];
  threadgroup T rotations[kSvdBlockCols * kSvdBlockCols];
  threadgroup T product[kSvdBlockCols * kSvdBlockCols];
  threadgroup int order[kSvdBlockCols];
  threadgroup float rot[kEighGroupMaxPairs * kEighRotFloats];
  threadgroup float part[kMaxThreadsPerGroup / kSimdWidth];

  const long b = long(group.z);
  device int* st = state + b * svd_block_state_ints(p);
  if (svd_block_idle(st, p)) {
    return;
  }
  const int n = int(p.n), splits = svd_block_splits(n);
  const int pieces = int((p.n + p.rotate_rows - 1) / p.rotate_rows);
  const int slot = int(group.y) / pieces, piece = int(group.y) % pieces;
  const SvdBlockPair pair = svd_block_pair(p, slot);
  const int c = pair.count();
  const uint nthreads = tpg.x;
  device const T* g = grams + (b * (p.blocks / 2) + slot) * splits * long(kSvdBlockCols) *
                                  kSvdBlockCols;
  for (int e = int(tid); e < c * c; e += int(nthreads)) {
    T sum = zero<T>();
    for (int k = 0; k < splits; ++k) {
      sum += g[k * kSvdBlockCols * kSvdBlockCols + e];
    }
    gram[e] = sum;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);

  // ---- the test: is some pair above the tolerance? (on G scaled to O(1), as the sweeps see
  // it, so that a pair it flags is one they rotate) ----
  float gmax = 0.0f;
  for (int i = int(tid); i < c; i += int(nthreads)) {
    gmax = metal::max(gmax, svd_real(gram[i * c + i]));
  }
  gmax = group_max(gmax, part, lane, sg, nsg);
  int ex = 0;
  if (gmax > 0.0f) {
    metal::frexp(gmax, ex);
  }
  const float tol = svd_tolerance(n);
  float need = 0.0f;
  for (int e = int(tid); e < c * c; e += int(nthreads)) {
    const int i = e / c, j = e % c;
    if (i < j) {
      const float off = metal::ldexp(modulus(gram[e]), -ex);
      const float gii = metal::ldexp(svd_real(gram[i * c + i]), -ex);
      const float gjj = metal::ldexp(svd_real(gram[j * c + j]), -ex);
      need = eigh_needs_rotation(off, gii, gjj, tol) ? 1.0f : need;
    }
  }
  if (group_max(need, part, lane, sg, nsg) == 0.0f) {
    return;
  }
  if (piece == 0 && tid == 0) {
    st[2 + p.sweep * (p.blocks / 2) + slot] = 1;
  }

  // ---- G = Q D Q^H by Hermitian Jacobi sweeps, Q accumulated from I ----
  for (int e = int(tid); e < c * c; e += int(nthreads)) {
    const int i = e / c, j = e % c;
    gram[e] = eigh_ldexp(gram[e], -ex);
    rotations[e] = i == j ? one<T>() : zero<T>();
  }
  float swept;
  eigh_jacobi_sweeps<T, 1>(&gram[0], &rotations[0], &rot[0], &part[0], c, true, int(p.inner),
                           tid, nthreads, swept);

  // ---- the rotated columns ordered by decreasing norm (the diagonal of Q^H G Q), the largest
  // to the lower block: de Rijk's ordering (SIAM J. Sci. Stat. Comput. 10(2), 1989), which cut
  // the sweeps of graded matrices by a quarter on the emulator (128: 20 -> 15) ----
  for (int j = int(tid); j < c; j += int(nthreads)) {
    const float dj = svd_real(gram[j * c + j]);
    int r = 0;
    for (int k = 0; k < c; ++k) {
      r += svd_before(svd_real(gram[k * c + k]), k, dj, j) ? 1 : 0;
    }
    order[j] = r;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  // ---- Q's orthogonality restored: one Newton-Schulz step Q <- Q (3 I - Q^H Q) / 2, its
  // columns permuted into that order ----
  // (the rotations leave Q^H Q - I at some eps, and X <- X Q moves the singular values of X
  // by as much, in every round; the step squares the defect: Higham, "Functions of
  // Matrices", SIAM 2008, section 8.3)
  for (int e = int(tid); e < c * c; e += int(nthreads)) {
    const int i = e / c, j = e % c;
    T sum = zero<T>();
    for (int k = 0; k < c; ++k) {
      sum += mul(conj(rotations[k * c + i]), rotations[k * c + j]);
    }
    gram[e] = (i == j ? 1.5f * one<T>() : zero<T>()) - 0.5f * sum;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (int e = int(tid); e < c * c; e += int(nthreads)) {
    const int i = e / c, j = e % c;
    T sum = zero<T>();
    for (int k = 0; k < c; ++k) {
      sum += mul(rotations[i * c + k], gram[k * c + j]);
    }
    product[i * c + order[j]] = sum;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);

  // ---- rows [row0, row0 + rows) of X <- X Q and V <- V Q: an item is a row and a quarter of
  // its output columns; the row's entries are read kSvdBlockLoadBatch at a time (loads in
  // flight together) and every item of a pass has read its row before any stores ----
  constexpr int kQuarter = kSvdBlockCols / 4;
  const int row0 = piece * int(p.rotate_rows);
  const int rows = metal::min(n, row0 + int(p.rotate_rows)) - row0;
  device T* w = svd_block_work(work, b, p);
  const int sets = p.vectors != 0 ? 2 : 1;
  for (int set = 0; set < sets; ++set) {
    device T* x = w + set * long(n) * n;
    for (int first = 0; first < 4 * rows; first += int(nthreads)) {
      const int item = first + int(tid);
      const bool mine = item < 4 * rows;
      const long row = row0 + item / 4;
      const int j0 = (item % 4) * kQuarter;
      T acc[kQuarter];
      for (int q = 0; q < kQuarter; ++q) {
        acc[q] = zero<T>();
      }
      for (int k0 = 0; mine && k0 < c; k0 += kSvdBlockLoadBatch) {
        T xk[kSvdBlockLoadBatch];
        for (int u = 0; u < kSvdBlockLoadBatch; ++u) {
          xk[u] = k0 + u < c ? x[long(pair.column(k0 + u)) * n + row] : zero<T>();
        }
        for (int u = 0; u < kSvdBlockLoadBatch && k0 + u < c; ++u) {
          threadgroup const T* qrow = &product[(k0 + u) * c + j0];
          for (int q = 0; q < kQuarter; ++q) {
            acc[q] += j0 + q < c ? mul(xk[u], qrow[q]) : zero<T>();
          }
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_device);
      for (int q = 0; q < kQuarter; ++q) {
        if (mine && j0 + q < c) {
          x[long(pair.column(j0 + q)) * n + row] = acc[q];
        }
      }
      threadgroup_barrier(metal::mem_flags::mem_device);
    }
  }
}

// Grid: (simdgroups * 32, ceil(n / simdgroups), batch): a simdgroup a column.
template <typename T>
[[kernel]] void svd_block_norms(
    device const T* work [[buffer(0)]],
    device float* norms [[buffer(1)]],   // (batch, n)
    device const int* state [[buffer(2)]],
    constant mpsl::SvdBlockParams& p [[buffer(3)]],
    uint3 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long b = long(group.z), n = p.n, j = long(group.y) * nsg + sg;
  if (j >= n || state[b * svd_block_state_ints(p)] != 0) {
    return;
  }
  const float nj = svd_column_norm<T>(svd_block_work(work, b, p) + j * n, n, lane);
  if (lane == 0) {
    norms[b * n + j] = nj;
  }
}

// Grid: (simdgroups * 32, ceil(n / simdgroups), batch): a simdgroup a column of W, written as
// its rank's singular value, U column and Vh row; the first thread of the grid writes info.
template <typename T>
[[kernel]] void svd_block_output(
    device const T* work [[buffer(0)]],
    device const float* norms [[buffer(1)]],
    device T* u [[buffer(2)]],
    device float* s [[buffer(3)]],
    device T* vh [[buffer(4)]],
    device int* info [[buffer(5)]],
    device const int* state [[buffer(6)]],
    constant mpsl::SvdBlockParams& p [[buffer(7)]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  const long b = long(group.z), n = p.n, nn = n * n, j = long(group.y) * nsg + sg;
  device const int* st = state + b * svd_block_state_ints(p);
  if (st[0] != 0) {
    return;  // svd_block_scale wrote the NaN outputs
  }
  if (group.y == 0 && tid == 0) {
    int sweeps = kSvdNotConverged;
    for (int k = kSvdMaxSweeps - 1; k >= 0; --k) {
      sweeps = svd_block_swept(st, p, k) ? sweeps : k + 1;
    }
    info[b] = sweeps;
  }
  if (j >= n) {
    return;
  }
  device const float* nb = norms + b * n;
  const float nj = nb[j];
  const int rank = metal::simd_sum(int(svd_rank(nb, n, j, lane, kSimdWidth)));
  const bool vectors = p.vectors != 0;
  device const T* w = svd_block_work(work, b, p);
  svd_output_column<T>(w + j * n, w + nn + j * n, u + (vectors ? b * nn : 0), s + b * n,
                       vh + (vectors ? b * nn : 0), n, rank, nj, st[1], vectors,
                       kSvdBlockTinyNorm, lane, kSimdWidth);
}

// Grid: (group width, batch), one threadgroup per matrix: the columns of U whose norm was below
// kSvdBlockTinyNorm (the last ones by rank) completed to an orthonormal set.
template <typename T>
[[kernel]] void svd_block_complete(
    device T* work [[buffer(0)]],             // the workspace: the completion's scratch
    device const float* norms [[buffer(1)]],
    device T* u [[buffer(2)]],
    device const int* state [[buffer(3)]],
    constant mpsl::SvdBlockParams& p [[buffer(4)]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 tpg [[threads_per_threadgroup]],
    uint2 group [[threadgroup_position_in_grid]]) {
  using namespace mpsl;
  const long b = long(group.y), n = p.n, nn = n * n;
  if (p.vectors == 0 || state[b * svd_block_state_ints(p)] != 0) {
    return;
  }
  const long kept = svd_kept(norms + b * n, n, kSvdBlockTinyNorm);
  if (kept < n) {
    svd_complete_columns(u + b * nn, svd_block_work(work, b, p), n, kept, tid, tpg.x);
  }
}
