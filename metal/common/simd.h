// SIMD-group collectives for real (float) and complex (float2) values alike.
#pragma once

#include "defines.h"

namespace mpsl {

inline float simd_sum(float v) { return metal::simd_sum(v); }
inline float2 simd_sum(float2 v) { return float2(metal::simd_sum(v.x), metal::simd_sum(v.y)); }

inline float simd_broadcast(float v, ushort lane) { return metal::simd_broadcast(v, lane); }
inline float2 simd_broadcast(float2 v, ushort lane) {
  return float2(metal::simd_broadcast(v.x, lane), metal::simd_broadcast(v.y, lane));
}

}  // namespace mpsl
