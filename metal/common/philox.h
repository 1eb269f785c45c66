// Philox4x32-10, a counter-based random number generator (J. K. Salmon, M. A. Moraes,
// R. O. Dror, D. E. Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011): four
// 32-bit words from a 128-bit counter and a 64-bit key, with no state. A kernel that derives
// the counter from an element's logical index gives the same numbers for a seed whatever its
// grid, group size or the tensor's strides.
#pragma once

#include "defines.h"

namespace mpsl {

// The round multipliers and key increments (Weyl sequence) of Philox4x32 (Salmon et al.,
// table 2 and section 4.1).
constant constexpr uint kPhiloxM0 = 0xD2511F53u;
constant constexpr uint kPhiloxM1 = 0xCD9E8D57u;
constant constexpr uint kPhiloxW0 = 0x9E3779B9u;
constant constexpr uint kPhiloxW1 = 0xBB67AE85u;
constant constexpr int kPhiloxRounds = 10;
// 2^-24: a 24-bit integer times this is a float in [0, 1) without rounding.
constant constexpr float kTwoPowMinus24 = 5.9604644775390625e-8f;

inline uint4 philox4x32(uint4 counter, uint2 key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const uint hi0 = metal::mulhi(kPhiloxM0, counter.x);
    const uint lo0 = kPhiloxM0 * counter.x;
    const uint hi1 = metal::mulhi(kPhiloxM1, counter.z);
    const uint lo1 = kPhiloxM1 * counter.z;
    counter = uint4(hi1 ^ counter.y ^ key.x, lo1, hi0 ^ counter.w ^ key.y, lo0);
    key += uint2(kPhiloxW0, kPhiloxW1);
  }
  return counter;
}

// A uniform float in (0, 1), never 0 (so that log() of it is finite): the top 24 bits,
// centred in their interval.
inline float uniform_open(uint bits) {
  return (float(bits >> 8) + 0.5f) * kTwoPowMinus24;
}

}  // namespace mpsl
