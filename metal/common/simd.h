// SIMD-group collectives for real (float) and complex (float2) values alike, and the
// threadgroup reductions built on them.
#pragma once

#include "defines.h"

namespace mpsl {

inline float simd_sum(float v) { return metal::simd_sum(v); }
inline float2 simd_sum(float2 v) { return float2(metal::simd_sum(v.x), metal::simd_sum(v.y)); }

inline float simd_broadcast(float v, ushort lane) { return metal::simd_broadcast(v, lane); }
inline float2 simd_broadcast(float2 v, ushort lane) {
  return float2(metal::simd_broadcast(v.x, lane), metal::simd_broadcast(v.y, lane));
}

inline float simd_shuffle(float v, ushort lane) { return metal::simd_shuffle(v, lane); }
inline float2 simd_shuffle(float2 v, ushort lane) {
  return float2(metal::simd_shuffle(v.x, lane), metal::simd_shuffle(v.y, lane));
}

inline float simd_shuffle_xor(float v, ushort mask) { return metal::simd_shuffle_xor(v, mask); }
inline float2 simd_shuffle_xor(float2 v, ushort mask) {
  return float2(metal::simd_shuffle_xor(v.x, mask), metal::simd_shuffle_xor(v.y, mask));
}

// a where mask is 0, b where it is all ones (a lane's choice between two of its registers), by
// the bits: the same value as a select, but one a compiler cannot turn into a select of the
// two addresses, which would index the array holding them at run time (local memory; NVRTC
// did that to simd_sum_scatter's values for float).
inline float simd_pick(float a, float b, uint mask) {
  return as_type<float>((as_type<uint>(a) & ~mask) | (as_type<uint>(b) & mask));
}
inline float2 simd_pick(float2 a, float2 b, uint mask) {
  return float2(simd_pick(a.x, b.x, mask), simd_pick(a.y, b.y, mask));
}

// The simdgroup's sums of N values a lane (N a power of two, at most kSimdWidth), scattered:
// lane l gets the sum of value l % N over the lanes. A butterfly that halves the values each
// lane carries at every step (lane l keeps the half its bit h selects and adds its partner
// l ^ h's other half: N - 1 shuffles), then log2(kSimdWidth / N) shuffles add the lanes that
// share l % N; N simd_sums would take N log2(kSimdWidth). Every sum's order is fixed by the
// lanes' indices, not by their schedule. v is overwritten.
template <typename T, int N>
inline T simd_sum_scatter(thread T* v, uint lane) {
  static_assert(N >= 1 && N <= kSimdWidth && (N & (N - 1)) == 0, "N a power of two");
  static_assert(kSimdWidth == 32, "the steps below count a simdgroup's 5 lane bits");
  // log2(N) halving steps (counted, so that every loop has a constant trip count)
  constexpr int kHalvings = N >= 32 ? 5 : N >= 16 ? 4 : N >= 8 ? 3 : N >= 4 ? 2 : N >= 2 ? 1 : 0;
#pragma unroll
  for (int step = 0; step < kHalvings; ++step) {
    const int h = (N / 2) >> step;
    const uint upper = (lane & uint(h)) != 0 ? ~0u : 0u;
    // A constant bound and a test (i < h), not the bound h: every index of v stays a constant
    // after unrolling, so v stays in registers.
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      if (i < h) {
        const T keep = simd_pick(v[i], v[i + h], upper);
        const T give = simd_pick(v[i + h], v[i], upper);
        v[i] = keep + simd_shuffle_xor(give, ushort(h));
      }
    }
  }
  T total = v[0];
#pragma unroll
  for (int step = kHalvings; step < 5; ++step) {
    total += simd_shuffle_xor(total, ushort(1 << step));
  }
  return total;
}

// ---- across a threadgroup ----
//
// Every thread of the group calls them (they hold barriers) and gets the result. Each
// simdgroup reduces its lanes, lane 0 stores the simdgroup's value in part[sg] (part holds at
// least nsg entries), then every thread folds part[0 .. nsg) in index order, so all threads
// get the same bits whatever order the lanes run in. The first barrier also orders the memory
// in `flags` (a caller may need device writes ordered there too); the last one lets the caller
// reuse part at once. A caller whose next write to part comes after a barrier of its own anyway
// passes release = false and saves that last barrier (group_sum, group_max,
// group_sum_each_whole).

// Sum of v (float or float2).
template <typename T>
inline T group_sum(T v, threadgroup T* part, uint lane, uint sg, uint nsg,
                   metal::mem_flags flags = metal::mem_flags::mem_threadgroup,
                   bool release = true) {
  v = simd_sum(v);
  if (lane == 0) {
    part[sg] = v;
  }
  threadgroup_barrier(flags);
  T total = part[0];
  for (uint i = 1; i < nsg; ++i) {
    total += part[i];
  }
  if (release) {
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  return total;
}

// The sums of N values per thread at once (one pair of barriers for all), in place; part holds
// N entries per simdgroup.
template <typename T, int N>
inline void group_sum_each(thread T* v, threadgroup T* part, uint lane, uint sg, uint nsg,
                           metal::mem_flags flags = metal::mem_flags::mem_threadgroup) {
  for (int c = 0; c < N; ++c) {
    const T total = simd_sum(v[c]);
    if (lane == 0) {
      part[sg * N + c] = total;
    }
  }
  threadgroup_barrier(flags);
  for (int c = 0; c < N; ++c) {
    T total = part[c];
    for (uint i = 1; i < nsg; ++i) {
      total += part[i * N + c];
    }
    v[c] = total;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
}

// group_sum_each for a threadgroup of whole simdgroups (the shuffles read every lane) and N a
// power of two: each simdgroup's sums scattered over its lanes by simd_sum_scatter (sum c at
// lane c: N - 1 shuffles and a few more, where a simd_sum a value takes 5 N) and stored by lane
// c; simdgroup 0 then folds the simdgroups' in index order into part[0 : N), which every thread
// reads (N reads a thread, where every thread folding every simdgroup's takes nsg N). Two
// barriers, a third with `release`.
template <typename T, int N>
inline void group_sum_each_whole(thread T* v, threadgroup T* part, uint lane, uint sg, uint nsg,
                                 metal::mem_flags flags, bool release) {
  const T mine = simd_sum_scatter<T, N>(v, lane);
  if (lane < uint(N)) {
    part[sg * N + lane] = mine;
  }
  threadgroup_barrier(flags);
  if (sg == 0 && lane < uint(N)) {
    T total = part[lane];
    for (uint i = 1; i < nsg; ++i) {
      total += part[i * N + lane];
    }
    part[lane] = total;
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (int c = 0; c < N; ++c) {
    v[c] = part[c];
  }
  if (release) {
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
}

// Largest v (NaN loses to any number, as with metal::max).
inline float group_max(float v, threadgroup float* part, uint lane, uint sg, uint nsg,
                       metal::mem_flags flags = metal::mem_flags::mem_threadgroup,
                       bool release = true) {
  v = metal::simd_max(v);
  if (lane == 0) {
    part[sg] = v;
  }
  threadgroup_barrier(flags);
  float r = part[0];
  for (uint i = 1; i < nsg; ++i) {
    r = metal::max(r, part[i]);
  }
  if (release) {
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  return r;
}

// A candidate of an argmax: its key and its index.
struct KeyIndex {
  float key;
  int index;
};

// The largest key and the smallest index among the candidates holding it. A thread without a
// candidate passes `none`: a key below every real one, an index above every real one. The
// simdgroups' candidates are then reduced across the lanes of each simdgroup (nsg <=
// kSimdWidth).
inline KeyIndex group_argmax(KeyIndex mine, KeyIndex none, threadgroup KeyIndex* part,
                             uint lane, uint sg, uint nsg,
                             metal::mem_flags flags = metal::mem_flags::mem_threadgroup) {
  float best = metal::simd_max(mine.key);
  int index = metal::simd_min(mine.key == best ? mine.index : none.index);
  if (lane == 0) {
    part[sg] = KeyIndex{best, index};
  }
  threadgroup_barrier(flags);
  const KeyIndex own = lane < nsg ? part[lane] : none;
  best = metal::simd_max(own.key);
  index = metal::simd_min(own.key == best ? own.index : none.index);
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  return KeyIndex{best, index};
}

}  // namespace mpsl
