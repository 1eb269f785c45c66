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

// ---- across a threadgroup ----
//
// Every thread of the group calls them (they hold barriers) and gets the result. Each
// simdgroup reduces its lanes, lane 0 stores the simdgroup's value in part[sg] (part holds at
// least nsg entries), then every thread folds part[0 .. nsg) in index order, so all threads
// get the same bits whatever order the lanes run in. The first barrier also orders the memory
// in `flags` (a caller may need device writes ordered there too); the last one lets the caller
// reuse part at once. A caller whose next write to part comes after a barrier of its own anyway
// passes release = false and saves that last barrier (group_sum, group_max).

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
