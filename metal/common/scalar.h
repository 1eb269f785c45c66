// Arithmetic written once for real (float) and complex (float2 = re, im) elements.
//
// Kernels are templated on the element type T and call these overloads, so a single body serves
// float32 and complex64. Complex division uses Smith's algorithm (R. L. Smith, "Algorithm 116:
// Complex division", CACM 5(8), 1962) to avoid overflow of |b|^2.
#pragma once

#include <metal_stdlib>

namespace mpsl {

// Smallest normal float (LAPACK's sfmin): below it, dividing by x through its reciprocal would
// overflow, so scalings divide instead (getf2, larfg).
constant constexpr float kSafeMin = 1.17549435e-38f;

// ---- construction and parts ----
template <typename T> inline T zero();
template <> inline float zero<float>() { return 0.0f; }
template <> inline float2 zero<float2>() { return float2(0.0f, 0.0f); }

template <typename T> inline T one();
template <> inline float one<float>() { return 1.0f; }
template <> inline float2 one<float2>() { return float2(1.0f, 0.0f); }

// ---- arithmetic ----
inline float mul(float a, float b) { return a * b; }
inline float2 mul(float2 a, float2 b) {
  return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

inline float div(float a, float b) { return a / b; }
inline float2 div(float2 a, float2 b) {
  // An infinite divisor gives NaN, as the textbook formula a conj(b) / |b|^2 does (and so
  // LAPACK through torch): Smith's scaling alone would return a finite 0 and hide the Inf.
  if (metal::isinf(b.x) || metal::isinf(b.y)) {
    return float2(NAN, NAN);
  }
  if (metal::fabs(b.x) >= metal::fabs(b.y)) {
    float r = b.y / b.x;
    float d = b.x + b.y * r;
    return float2((a.x + a.y * r) / d, (a.y - a.x * r) / d);
  }
  float r = b.x / b.y;
  float d = b.y + b.x * r;
  return float2((a.x * r + a.y) / d, (a.y * r - a.x) / d);
}

inline float recip(float a) { return 1.0f / a; }
inline float2 recip(float2 a) { return div(float2(1.0f, 0.0f), a); }

inline float conj(float a) { return a; }
inline float2 conj(float2 a) { return float2(a.x, -a.y); }

// a - b * c, the update at the heart of every elimination step.
inline float sub_mul(float a, float b, float c) { return a - b * c; }
inline float2 sub_mul(float2 a, float2 b, float2 c) { return a - mul(b, c); }

// ---- magnitudes ----
// |re| + |im|: LAPACK's pivot measure for complex (icamax), so pivots match LAPACK.
inline float abs1(float a) { return metal::fabs(a); }
inline float abs1(float2 a) { return metal::fabs(a.x) + metal::fabs(a.y); }

// The true modulus, without intermediate overflow.
inline float modulus(float a) { return metal::fabs(a); }
inline float modulus(float2 a) {
  float x = metal::fabs(a.x), y = metal::fabs(a.y);
  if (metal::isnan(x) || metal::isnan(y)) {
    return x + y;  // metal::max would drop a NaN operand
  }
  float hi = metal::max(x, y), lo = metal::min(x, y);
  if (hi == 0.0f || metal::isinf(hi)) {
    return hi + lo;  // 0 or inf
  }
  float r = lo / hi;
  return hi * metal::sqrt(1.0f + r * r);
}

inline bool is_zero(float a) { return a == 0.0f; }
inline bool is_zero(float2 a) { return a.x == 0.0f && a.y == 0.0f; }

}  // namespace mpsl
