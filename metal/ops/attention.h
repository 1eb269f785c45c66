// Scaled dot-product attention, softmax(Q K^T * scale + mask) V, fused: the score matrix is
// never stored. Keys are visited once per query row with the online softmax (a running
// maximum m, normaliser l and output o rescaled as m grows: M. Milakov, N. Gimelshein, "Online
// normalizer calculation for softmax", 2018; T. Dao et al., "FlashAttention", NeurIPS 2022).
//
// Two kernels share the per-key update:
// - attention_rows: one thread per query row, kRowsPerGroup rows per threadgroup; key and
//   value rows are staged a tile at a time in threadgroup memory, read by every row.
// - attention_decode: one SIMD group per query row (decode, L = 1, and other short queries):
//   lanes take every 32nd key with their own (m, l, o), merged by SIMD reductions at the end.
// Both are instantiated per head-dimension bucket DIM (64, 128, 256): a row's query and
// output live in DIM-sized thread arrays, so small heads do not pay a 256-wide register file.
//
// Every (batch, head) pair gets the same `scale` and its own rows of Q, K, V and mask: the
// batch index is decomposed over the broadcast batch dimensions with each operand's strides,
// and grouped-query heads read key / value head h / group. Rows whose keys are all masked give
// 0 (torch's safe softmax); NaN in a score gives NaN, never a hang: trip counts are fixed.
//
// Attention dropout multiplies each weight's contribution to the output (not to the softmax
// normaliser) by 0 or 1 / (1 - p); whether key j is kept for query row i of pair bh is word
// j % 4 of Philox4x32-10 at counter (i, bh, j / 4), so it depends on the seed and (bh, i, j)
// only, and attention_dropout_mask can rebuild the same decisions for the backward.
#pragma once

#include "../common/elementwise.h"
#include "../common/philox.h"

namespace mpsl {

// Largest head dimension (of queries / keys and of values) the kernels hold per row.
constant constexpr int kMaxHeadDim = 256;
// Floats of one staged key (or value) tile: kTileFloats / DIM rows of DIM.
constant constexpr int kTileFloats = 2048;
// Query rows per threadgroup of attention_rows (one per thread).
constant constexpr int kRowsPerGroup = 32;
static_assert(2 * kTileFloats * sizeof(float) <= kMaxThreadgroupMemoryBytes,
              "the staged key and value tiles must fit in threadgroup memory");
static_assert(kTileFloats % kMaxHeadDim == 0, "a tile holds whole rows of every bucket");
// Mask kinds (template parameter MASK); mirror mpslinalg.ops.attention._MASKS.
constant constexpr int kMaskNone = 0;
constant constexpr int kMaskBool = 1;
constant constexpr int kMaskAdditive = 2;

// Scalar arguments, passed from Python as one list of int64 (ATTENTION_PARAMS mirrors it).
// Strides are in elements; "batch" strides are per broadcast batch dimension (arrays).
struct AttentionParams {
  long batch_ndim;  // batch dimensions before the head dimension
  long batch;       // product of the batch dimensions
  long heads;       // query heads
  long group;       // query heads per key / value head (grouped-query attention)
  long L;           // query rows
  long S;           // key rows
  long E;           // query / key head dimension
  long Ev;          // value head dimension
  long causal;      // 1: key j is seen by query i only if j <= i (top-left aligned)
  long q_head, q_row, q_col;
  long k_head, k_row, k_col;
  long v_head, v_row, v_col;
  long m_head, m_row, m_col;
  long dropout;     // 1: attention dropout with the probability in factors[kFactorDropout]
  long seed;        // its 64-bit Philox key
};

// Entries of the kernels' float arguments (a list of float32 from Python).
constant constexpr int kFactorScale = 0;    // multiplies every score
constant constexpr int kFactorDropout = 1;  // dropout probability p
constant constexpr int kFactorKeep = 2;     // 1 / (1 - p), the multiplier of kept weights
// Dropout decisions drawn from one Philox call (consecutive keys of one row).
constant constexpr long kDecisionsPerDraw = 4;

// 0 (dropped) or 1 / (1 - p) (kept) for key j of query row i of the (batch, head) pair bh.
inline float dropout_multiplier(constant AttentionParams& p, constant float* factors, long bh,
                                long i, long j) {
  if (!p.dropout) {
    return 1.0f;
  }
  const ulong key64 = ulong(p.seed);
  const ulong block = ulong(j / kDecisionsPerDraw);
  const uint4 bits = philox4x32(uint4(uint(i), uint(bh), uint(block), uint(block >> 32)),
                                uint2(uint(key64), uint(key64 >> 32)));
  const float u = uniform_open(bits[j % kDecisionsPerDraw]);
  return u >= factors[kFactorDropout] ? factors[kFactorKeep] : 0.0f;
}

// Storage offsets of the (batch, head) pair `bh` in each operand.
struct HeadOffsets {
  long q, k, v, m;
};

inline HeadOffsets head_offsets(long bh, constant AttentionParams& p, constant long* batch_sizes,
                                constant long* q_batch, constant long* k_batch,
                                constant long* v_batch, constant long* m_batch) {
  const long b = bh / p.heads;
  const long h = bh % p.heads;
  const long kv_head = h / p.group;
  HeadOffsets o;
  o.q = strided_offset(b, batch_sizes, q_batch, p.batch_ndim) + h * p.q_head;
  o.k = strided_offset(b, batch_sizes, k_batch, p.batch_ndim) + kv_head * p.k_head;
  o.v = strided_offset(b, batch_sizes, v_batch, p.batch_ndim) + kv_head * p.v_head;
  o.m = strided_offset(b, batch_sizes, m_batch, p.batch_ndim) + h * p.m_head;
  return o;
}

// The running state of one query row (or one lane's share of it).
struct OnlineSoftmax {
  float m;  // largest score seen (-inf: none yet)
  float l;  // sum of exp(score - m)
};

// Score of key j for query i after the causal rule and the mask; -inf when the key is
// excluded (a NaN score stays NaN and poisons the row, as in torch).
template <typename T, int MASK>
inline float masked_score(float dot, long i, long j, constant AttentionParams& p,
                          device const bool* bool_mask, device const T* add_mask, long m_off) {
  if (p.causal && j > i) {
    return -INFINITY;
  }
  if (MASK == kMaskBool) {
    return bool_mask[m_off + i * p.m_row + j * p.m_col] ? dot : -INFINITY;
  }
  if (MASK == kMaskAdditive) {
    return dot + float(add_mask[m_off + i * p.m_row + j * p.m_col]);
  }
  return dot;
}

// Fold score s with value row `value` (Ev entries, stride `vstride`) into (state, o); the
// value's weight is multiplied by `keep` (dropout), the normaliser's is not.
template <typename V>
inline void online_update(thread OnlineSoftmax& st, thread float* o, float s, float keep,
                          V value, long vstride, long ev) {
  if (s == -INFINITY) {
    return;
  }
  const float m_new = metal::max(st.m, s);  // ignores a NaN s, whose weight below is NaN
  const float correction = metal::exp(st.m - m_new);
  const float weight = metal::exp(s - m_new);
  st.l = st.l * correction + weight;
  const float value_weight = weight * keep;
  for (long d = 0; d < ev; ++d) {
    o[d] = o[d] * correction + value_weight * float(value[d * vstride]);
  }
  st.m = m_new;
}

}  // namespace mpsl

// Grid: (query rows rounded up to kRowsPerGroup, batch * heads); group (kRowsPerGroup, 1).
// E, Ev <= DIM.
template <typename T, int MASK, int DIM>
[[kernel]] void attention_rows(
    device const T* q [[buffer(0)]],
    device const T* k [[buffer(1)]],
    device const T* v [[buffer(2)]],
    device const bool* bool_mask [[buffer(3)]],
    device const T* add_mask [[buffer(4)]],
    device T* out [[buffer(5)]],
    constant mpsl::AttentionParams& p [[buffer(6)]],
    constant float* factors [[buffer(7)]],
    constant long* batch_sizes [[buffer(8)]],
    constant long* q_batch [[buffer(9)]],
    constant long* k_batch [[buffer(10)]],
    constant long* v_batch [[buffer(11)]],
    constant long* m_batch [[buffer(12)]],
    uint2 gid [[thread_position_in_grid]],
    uint2 lid [[thread_position_in_threadgroup]]) {
  using namespace mpsl;
  // Key / value rows staged per step.
  constexpr int key_tile = kTileFloats / DIM;
  threadgroup float k_tile[kTileFloats];
  threadgroup float v_tile[kTileFloats];
  const long i = long(gid.x);
  const long bh = long(gid.y);
  const bool active = i < p.L;
  const HeadOffsets off = head_offsets(bh, p, batch_sizes, q_batch, k_batch, v_batch, m_batch);

  float q_row[DIM];
  float o[DIM];
  for (long d = 0; d < p.E; ++d) {
    q_row[d] = active ? float(q[off.q + i * p.q_row + d * p.q_col]) * factors[kFactorScale]
                      : 0.0f;
  }
  for (long d = 0; d < p.Ev; ++d) {
    o[d] = 0.0f;
  }
  OnlineSoftmax st = {-INFINITY, 0.0f};
  // Under the causal rule no row of this group sees keys past its last row.
  const long last_row = metal::min(p.L, long(gid.x - lid.x) + kRowsPerGroup) - 1;
  const long keys = p.causal ? metal::min(p.S, last_row + 1) : p.S;
  for (long j0 = 0; j0 < keys; j0 += key_tile) {
    const long tile = metal::min(long(key_tile), keys - j0);
    for (long t = long(lid.x); t < tile * p.E; t += kRowsPerGroup) {
      const long jj = t / p.E, d = t % p.E;
      k_tile[jj * DIM + d] = float(k[off.k + (j0 + jj) * p.k_row + d * p.k_col]);
    }
    for (long t = long(lid.x); t < tile * p.Ev; t += kRowsPerGroup) {
      const long jj = t / p.Ev, d = t % p.Ev;
      v_tile[jj * DIM + d] = float(v[off.v + (j0 + jj) * p.v_row + d * p.v_col]);
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (active) {
      for (long jj = 0; jj < tile; ++jj) {
        float dot = 0.0f;
        for (long d = 0; d < p.E; ++d) {
          dot += q_row[d] * k_tile[jj * DIM + d];
        }
        const long j = j0 + jj;
        const float s = masked_score<T, MASK>(dot, i, j, p, bool_mask, add_mask, off.m);
        const float keep = dropout_multiplier(p, factors, bh, i, j);
        online_update(st, o, s, keep, &v_tile[jj * DIM], 1, p.Ev);
      }
    }
    // the next tile overwrites what slower rows may still be reading
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  if (active) {
    // l == 0: no key attended (0, torch's safe softmax); a NaN l stays NaN
    const long o_off = (bh * p.L + i) * p.Ev;
    for (long d = 0; d < p.Ev; ++d) {
      out[o_off + d] = T(st.l == 0.0f ? 0.0f : o[d] / st.l);
    }
  }
}

// Grid: (32 * query rows, batch * heads); group (32, 1): one SIMD group per query row.
// E, Ev <= DIM.
template <typename T, int MASK, int DIM>
[[kernel]] void attention_decode(
    device const T* q [[buffer(0)]],
    device const T* k [[buffer(1)]],
    device const T* v [[buffer(2)]],
    device const bool* bool_mask [[buffer(3)]],
    device const T* add_mask [[buffer(4)]],
    device T* out [[buffer(5)]],
    constant mpsl::AttentionParams& p [[buffer(6)]],
    constant float* factors [[buffer(7)]],
    constant long* batch_sizes [[buffer(8)]],
    constant long* q_batch [[buffer(9)]],
    constant long* k_batch [[buffer(10)]],
    constant long* v_batch [[buffer(11)]],
    constant long* m_batch [[buffer(12)]],
    uint2 gid [[thread_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  const long i = long(gid.x) / kSimdWidth;
  const long bh = long(gid.y);
  const HeadOffsets off = head_offsets(bh, p, batch_sizes, q_batch, k_batch, v_batch, m_batch);

  float q_row[DIM];
  float o[DIM];
  for (long d = 0; d < p.E; ++d) {
    q_row[d] = float(q[off.q + i * p.q_row + d * p.q_col]) * factors[kFactorScale];
  }
  for (long d = 0; d < p.Ev; ++d) {
    o[d] = 0.0f;
  }
  OnlineSoftmax st = {-INFINITY, 0.0f};
  const long keys = p.causal ? metal::min(p.S, i + 1) : p.S;
  for (long j = long(lane); j < keys; j += kSimdWidth) {
    float dot = 0.0f;
    for (long d = 0; d < p.E; ++d) {
      dot += q_row[d] * float(k[off.k + j * p.k_row + d * p.k_col]);
    }
    const float s = masked_score<T, MASK>(dot, i, j, p, bool_mask, add_mask, off.m);
    const float keep = dropout_multiplier(p, factors, bh, i, j);
    online_update(st, o, s, keep, v + off.v + j * p.v_row, p.v_col, p.Ev);
  }
  // Merge the lanes' states onto the row's largest score.
  const float m_all = metal::simd_max(st.m);
  const float factor = st.m == -INFINITY ? 0.0f : metal::exp(st.m - m_all);
  const float l_all = metal::simd_sum(st.l * factor);
  const long o_off = (bh * p.L + i) * p.Ev;
  for (long d = 0; d < p.Ev; ++d) {
    const float od = metal::simd_sum(o[d] * factor);
    if (long(lane) == d % kSimdWidth) {
      out[o_off + d] = T(l_all == 0.0f ? 0.0f : od / l_all);
    }
  }
}

// The dropout multipliers the kernels above use, as a (batch * heads, L, S) tensor, for the
// backward's recompute. T: the multipliers' dtype.
template <typename T>
[[kernel]] void attention_dropout_mask(
    device T* out [[buffer(0)]],
    constant mpsl::AttentionParams& p [[buffer(1)]],
    constant float* factors [[buffer(2)]],
    constant long& numel [[buffer(3)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long e = long(gid); e < numel; e += long(grid_size)) {
    const long j = e % p.S;
    const long i = (e / p.S) % p.L;
    const long bh = e / (p.S * p.L);
    out[e] = T(mpsl::dropout_multiplier(p, factors, bh, i, j));
  }
}
