// The orthogonal polynomials of torch.special, for tensors x and n: Chebyshev T, U, V, W and
// their shifted forms (argument 2x - 1), physicists' and probabilists' Hermite H and He,
// Laguerre L and Legendre P.
//
// Each is evaluated by its three-term recurrence (DLMF 18.9.1 Chebyshev, 18.9.2 Legendre,
// 18.9.13 Laguerre, 18.9.20 / 18.9.21 Hermite), which is forward-stable for these families on
// their orthogonality intervals, with torch's rules where the recurrence is not used
// (aten/src/ATen/native/Math.h): n < 0 gives 0; n is truncated to an integer, a NaN / infinite
// n counts as negative; at |y| = 1 the Chebyshev and Legendre values are the closed forms;
// above a small degree and inside (-1, 1) Chebyshev uses its trigonometric closed form; Hermite
// degrees above 128 give NaN (float32). Computed in float; half / bfloat are read and written
// in their own type.
#pragma once

#include "../common/elementwise.h"

namespace mpsl {

// Polynomial codes; mirror mpslinalg.ops.special.POLYNOMIALS.
constant constexpr int kChebyshevT = 0;
constant constexpr int kChebyshevU = 1;
constant constexpr int kChebyshevV = 2;
constant constexpr int kChebyshevW = 3;
constant constexpr int kShiftedChebyshevT = 4;
constant constexpr int kShiftedChebyshevU = 5;
constant constexpr int kShiftedChebyshevV = 6;
constant constexpr int kShiftedChebyshevW = 7;
constant constexpr int kHermiteH = 8;
constant constexpr int kHermiteHe = 9;
constant constexpr int kLaguerreL = 10;
constant constexpr int kLegendreP = 11;

// Degrees above which torch switches Chebyshev to its trigonometric form inside (-1, 1).
constant constexpr long kTrigDegreeT = 6;
constant constexpr long kTrigDegreeUVW = 8;
constant constexpr long kTrigDegreeShiftedUVT = 6;
constant constexpr long kTrigDegreeShiftedW = 4;
// torch's float32 limit for Hermite degrees (NaN above; the values overflow soon after).
constant constexpr long kMaxHermiteDegree = 128;
// Bound on recurrence steps, so that no input makes a kernel run unboundedly; above it the
// value is NaN (documented in mpslinalg.ops.special).
constant constexpr long kMaxRecurrenceDegree = 65536;
// Larger n are clamped before the float -> long conversion (undefined beyond 2^63).
constant constexpr float kDegreeClamp = 4611686018427387904.0f;  // 2^62

// torch's static_cast<int64_t>(n), with the non-finite and out-of-range cases defined.
inline long polynomial_degree(float n) {
  if (metal::isnan(n) || metal::isinf(n)) {
    return -1;
  }
  return long(metal::clamp(n, -kDegreeClamp, kDegreeClamp));
}

// Chebyshev polynomials of the four kinds at y, degree n >= 0. `kind` 0..3 = T, U, V, W;
// `trig_degree` the degree above which the closed form is used inside (-1, 1).
inline float chebyshev(float y, long n, int kind, long trig_degree) {
  const bool even = n % 2 == 0;
  const float nf = float(n);
  if (metal::fabs(y) == 1.0f) {
    const bool positive = y > 0.0f;
    switch (kind) {
      case kChebyshevT: return positive || even ? 1.0f : -1.0f;
      case kChebyshevU: return positive || even ? nf + 1.0f : -(nf + 1.0f);
      case kChebyshevV: return positive ? 1.0f : (even ? 2.0f * nf + 1.0f : -(2.0f * nf + 1.0f));
      default: return positive ? 2.0f * nf + 1.0f : (even ? 1.0f : -1.0f);
    }
  }
  if (n > trig_degree && metal::fabs(y) < 1.0f) {
    const float theta = metal::acos(y);
    switch (kind) {
      case kChebyshevT:
        return metal::cos(nf * theta);
      case kChebyshevU:
        if (metal::sin(theta) != 0.0f) {
          return metal::sin((nf + 1.0f) * theta) / metal::sin(theta);
        }
        return (nf + 1.0f) * metal::cos((nf + 1.0f) * theta) / y;
      case kChebyshevV:
        if (metal::sin(theta / 2.0f) != 1.0f) {
          return metal::cos((nf + 0.5f) * theta) / metal::cos(theta / 2.0f);
        }
        return even ? 2.0f * nf + 1.0f : -(2.0f * nf + 1.0f);
      default:
        if (metal::cos(theta / 2.0f) != 1.0f) {
          return metal::sin((nf + 0.5f) * theta) / metal::sin(theta / 2.0f);
        }
        return y > 0.0f ? 2.0f * nf + 1.0f : (even ? 1.0f : -1.0f);
    }
  }
  // Degree 1 of each kind: T = y, U = 2y, V = 2y - 1, W = 2y + 1.
  float first = y;
  switch (kind) {
    case kChebyshevT: first = y; break;
    case kChebyshevU: first = y + y; break;
    case kChebyshevV: first = y + y - 1.0f; break;
    default: first = y + y + 1.0f; break;
  }
  if (n == 0) {
    return 1.0f;
  }
  if (n > kMaxRecurrenceDegree) {
    return NAN;
  }
  float p = 1.0f;
  float q = first;
  for (long k = 2; k <= n && !metal::isnan(q); ++k) {
    const float r = (y + y) * q - p;
    p = q;
    q = r;
  }
  return q;
}

inline float hermite(float x, long n, bool physicists) {
  if (n < 0) {
    return 0.0f;
  }
  if (n == 0) {
    return 1.0f;
  }
  const float scale = physicists ? 2.0f : 1.0f;  // H_1 = 2x, He_1 = x
  if (n == 1) {
    return scale * x;
  }
  if (n > kMaxHermiteDegree) {
    return NAN;
  }
  // H_{k+1} = 2x H_k - 2k H_{k-1};  He_{k+1} = x He_k - k He_{k-1}.
  float p = 1.0f;
  float q = scale * x;
  for (long k = 1; k < n; ++k) {
    const float r = scale * x * q - scale * float(k) * p;
    p = q;
    q = r;
  }
  return q;
}

inline float laguerre(float x, long n) {
  if (n < 0) {
    return 0.0f;
  }
  if (x == 0.0f || n == 0) {
    return 1.0f;
  }
  if (n == 1) {
    return 1.0f - x;
  }
  if (n > kMaxRecurrenceDegree) {
    return NAN;
  }
  // (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}.
  float p = 1.0f;
  float q = 1.0f - x;
  for (long k = 1; k < n && !metal::isnan(q); ++k) {
    const float kf = float(k);
    const float r = ((kf + kf + (1.0f - x)) * q - kf * p) / (kf + 1.0f);
    p = q;
    q = r;
  }
  return q;
}

inline float legendre(float x, long n) {
  if (n < 0) {
    return 0.0f;
  }
  if (metal::fabs(x) == 1.0f) {
    return x > 0.0f || n % 2 == 0 ? 1.0f : -1.0f;
  }
  if (n == 0) {
    return 1.0f;
  }
  if (n == 1) {
    return x;
  }
  if (n > kMaxRecurrenceDegree) {
    return NAN;
  }
  // (k + 1) P_{k+1} = (2k + 1) x P_k - k P_{k-1}.
  float p = 1.0f;
  float q = x;
  for (long k = 1; k < n && !metal::isnan(q); ++k) {
    const float kf = float(k);
    const float r = ((kf + kf + 1.0f) * x * q - kf * p) / (kf + 1.0f);
    p = q;
    q = r;
  }
  return q;
}

inline float special_polynomial_value(float x, float n_value, int kind) {
  const long n = polynomial_degree(n_value);
  switch (kind) {
    case kHermiteH: return hermite(x, n, true);
    case kHermiteHe: return hermite(x, n, false);
    case kLaguerreL: return laguerre(x, n);
    case kLegendreP: return legendre(x, n);
    default: break;
  }
  if (n < 0) {
    return 0.0f;
  }
  if (kind >= kShiftedChebyshevT) {
    const long trig = kind == kShiftedChebyshevW ? kTrigDegreeShiftedW : kTrigDegreeShiftedUVT;
    return chebyshev(x + x - 1.0f, n, kind - kShiftedChebyshevT, trig);
  }
  return chebyshev(x, n, kind, kind == kChebyshevT ? kTrigDegreeT : kTrigDegreeUVW);
}

}  // namespace mpsl

// out[i] = polynomial KIND of degree n[i] at x[i] (x, n at their broadcast strides).
template <typename T, int KIND>
[[kernel]] void special_polynomial(
    device const T* x [[buffer(0)]],
    device const T* n [[buffer(1)]],
    device T* out [[buffer(2)]],
    constant long* sizes [[buffer(3)]],
    constant long* x_strides [[buffer(4)]],
    constant long* n_strides [[buffer(5)]],
    constant long& ndim [[buffer(6)]],
    constant long& numel [[buffer(7)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  for (long i = long(gid); i < numel; i += long(grid_size)) {
    const float xi = float(x[mpsl::strided_offset(i, sizes, x_strides, ndim)]);
    const float ni = float(n[mpsl::strided_offset(i, sizes, n_strides, ndim)]);
    out[i] = T(mpsl::special_polynomial_value(xi, ni, KIND));
  }
}
