// Row interchanges recorded as LAPACK pivots (1-based: row i was swapped with row piv[i] - 1).
#pragma once

#include "defines.h"

namespace mpsl {

// A pivot row kept inside [lo, hi], so corrupt pivots never index out of bounds.
inline long clamp_row(long p, long lo, long hi) {
  return p < lo ? lo : (p > hi ? hi : p);
}

// Apply the interchanges of rows i = 0 .. n-1 to the column x (entries stride apart): in order
// (forward, P^T x as getrs does) or in reverse order (P x).
// P: a device or threadgroup pointer to the column, I: to the pivots.
template <typename P, typename I>
inline void apply_row_swaps(P x, long stride, I piv, long n, bool forward) {
  for (long s = 0; s < n; ++s) {
    const long i = forward ? s : n - 1 - s;
    const long p = clamp_row(long(piv[i]) - 1, i, n - 1);
    const auto t = x[p * stride];
    x[p * stride] = x[i * stride];
    x[i * stride] = t;
  }
}

}  // namespace mpsl
