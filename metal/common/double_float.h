// Double-float arithmetic: a value carried as the unevaluated sum hi + lo of two floats
// (|lo| <= ulp(hi) / 2), about 49 significant bits with float32's exponent range, built from
// error-free transformations (EFTs), for GPUs without float64.
//
// The EFTs and their bounds (u = 2^-24, the unit roundoff of float32):
//   two_sum       s + e == a + b exactly (Knuth, TAOCP vol. 2, 4.2.2, Theorem B; 6 flops).
//   fast_two_sum  the same when |a| >= |b| or a == 0 (Dekker 1971, "A floating-point technique
//                 for extending the available precision", Numer. Math. 18; 3 flops).
//   two_prod      p + e == a * b exactly, e = fma(a, b, -p) (exact unless the product
//                 underflows).
// The double-float operations are those of Joldes, Muller & Popescu 2017 ("Tight and rigorous
// error bounds for basic building blocks of double-word arithmetic", ACM TOMS 44(2)), with their
// relative error bounds: df_add_f (Alg. 4) 2u^2, df_add (Alg. 6, AccurateDWPlusDW) 3u^2,
// df_mul_f (Alg. 9) 2u^2, df_mul (Alg. 12) 5u^2, df_div (Alg. 15) 15u^2. df_fma is df_mul then
// df_add (at most 5u^2 + 3u^2 plus second-order terms; not a fused rounding). df_sqrt is one
// Newton step on the float square root (Karp & Markstein 1997, "High-precision division and
// square root", ACM TOMS 23(4)); tests/linalg/test_refine.py measures it within 4u^2.
//
// What protects the error terms from the compiler. An EFT's error term is algebraically zero:
// e = (a - (s - bb)) + (b - bb) is 0 under real-number rules, so a compiler allowed to
// reassociate (Metal's fast math, MTLMathModeFast and MTLMathModeRelaxed, the latter Apple
// silicon's default; -ffast-math elsewhere) may fold it away and every result silently drops
// to float32 accuracy. Three defences, and a test of the outcome:
//   1. `#pragma METAL fp math_mode(safe)` (MSL 3.2, macOS 15+): the translation unit is compiled
//      under MTLMathModeSafe, "no transformation that could affect the results", whatever the
//      library's compile options say; `#pragma METAL fp contract(off)` keeps a * b + c from being
//      fused, which Dekker-style splits (not used here) would need and which would change the
//      bits of df_mul's low terms. torch.mps.compile_shader also compiles in the safe mode on
//      macOS 15+ unless PYTORCH_MPS_FAST_MATH is set; the pragma makes that independent of the
//      environment.
//   2. Products are exact through fma (two_prod), which no math mode may rewrite: fma is
//      fused by definition. metal::precise:: is not needed for +, -, * and fma (it selects
//      the correctly rounded versions of library functions); df_div and df_sqrt use
//      metal::precise::divide / metal::precise::sqrt, so a fast-math build cannot replace
//      the float quotient and root their correction steps start from by approximations.
//   3. No volatile (Metal has no volatile thread variables worth relying on) and no bit-cast
//      "barriers" (a compiler sees through as_type).
// The outcome is tested, not assumed: refine_selftest (metal/linalg/refine.metal, compiled in
// the same translation unit as the refinement kernels) computes known error terms from values
// the host passes at run time; `python -m mpslinalg check` and the test suite fail loudly when
// one is lost (tests build the self-test with -ffast-math to show that it notices).
//
// Splitting float64: Metal has no double, so a float64 arrives as its 64 bits (two uints,
// little-endian) and df_split3 cuts its 53-bit significand into three floats of 24 + 24 + 5
// bits whose sum is the float64 exactly, scaled by 2^-shift so that neither piece under- nor
// overflows (the host picks shift per matrix from the largest exponent).
#pragma once

#include <metal_stdlib>

#if __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
#endif

namespace mpsl {

// A double-float: value = hi + lo, |lo| <= ulp(hi) / 2.
struct dfloat {
  float hi;
  float lo;
};

// ---- error-free transformations ----

// s = fl(a + b), e = (a + b) - s exactly (Knuth).
inline float two_sum(float a, float b, thread float& e) {
  const float s = a + b;
  const float bb = s - a;
  e = (a - (s - bb)) + (b - bb);
  return s;
}

// The same for |a| >= |b| (Dekker).
inline float fast_two_sum(float a, float b, thread float& e) {
  const float s = a + b;
  e = b - (s - a);
  return s;
}

// p = fl(a * b), e = a * b - p exactly (fma).
inline float two_prod(float a, float b, thread float& e) {
  const float p = a * b;
  e = metal::fma(a, b, -p);
  return p;
}

// ---- double-float operations (Joldes, Muller & Popescu 2017) ----

inline dfloat df_make(float hi, float lo) {
  float e;
  const float s = fast_two_sum(hi, lo, e);
  return dfloat{s, e};
}

inline dfloat df_neg(dfloat x) { return dfloat{-x.hi, -x.lo}; }

// x + b, b a float (Alg. 4).
inline dfloat df_add_f(dfloat x, float b) {
  float sl;
  const float sh = two_sum(x.hi, b, sl);
  return df_make(sh, x.lo + sl);
}

// x + y (Alg. 6, AccurateDWPlusDW).
inline dfloat df_add(dfloat x, dfloat y) {
  float sl, tl, vl;
  const float sh = two_sum(x.hi, y.hi, sl);
  const float th = two_sum(x.lo, y.lo, tl);
  const float vh = fast_two_sum(sh, sl + th, vl);
  return df_make(vh, tl + vl);
}

inline dfloat df_sub(dfloat x, dfloat y) { return df_add(x, df_neg(y)); }

// x * b, b a float (Alg. 9).
inline dfloat df_mul_f(dfloat x, float b) {
  float cl1;
  const float ch = two_prod(x.hi, b, cl1);
  return df_make(ch, metal::fma(x.lo, b, cl1));
}

// x * y (Alg. 12).
inline dfloat df_mul(dfloat x, dfloat y) {
  float cl1;
  const float ch = two_prod(x.hi, y.hi, cl1);
  const float tl0 = x.lo * y.lo;
  const float tl1 = metal::fma(x.hi, y.lo, tl0);
  const float cl2 = metal::fma(x.lo, y.hi, tl1);
  return df_make(ch, cl1 + cl2);
}

// x * y + z.
inline dfloat df_fma(dfloat x, dfloat y, dfloat z) { return df_add(df_mul(x, y), z); }

// x / y (Alg. 15, DWDivDW2).
inline dfloat df_div(dfloat x, dfloat y) {
  const float th = metal::precise::divide(x.hi, y.hi);
  const dfloat r = df_mul_f(y, th);
  const float pih = x.hi - r.hi;  // exact (Sterbenz)
  const float dl = x.lo - r.lo;
  const float d = pih + dl;
  return df_make(th, metal::precise::divide(d, y.hi));
}

// sqrt(x), x >= 0: s = sqrt(hi) corrected by (x - s^2) / (2 s), the residual exact through fma.
inline dfloat df_sqrt(dfloat x) {
  if (x.hi <= 0.0f || metal::isinf(x.hi) || metal::isnan(x.hi)) {
    return dfloat{metal::precise::sqrt(x.hi), 0.0f};  // 0, -0, NaN for x < 0, inf, NaN
  }
  const float s = metal::precise::sqrt(x.hi);
  const float r = metal::fma(-s, s, x.hi) + x.lo;
  return df_make(s, metal::precise::divide(r, 2.0f * s));
}

// ---- a three-float accumulator ----
//
// s0 + s1 + s2, each addition's rounding error passed down exactly by two_sum (the cascade of
// Ogita, Rump & Oishi 2005, "Accurate sum and dot product", SIAM J. Sci. Comput. 26(6)); only
// s2's own roundings are lost, about u^3 of the partial sums, so a sum of exact products
// (two_prod pairs) that cancels to a tiny residual keeps its leading bits.
struct tfloat {
  float s0;
  float s1;
  float s2;
};

inline tfloat tf_zero() { return tfloat{0.0f, 0.0f, 0.0f}; }

inline tfloat tf_add_f(tfloat t, float b) {
  float e0, e1;
  t.s0 = two_sum(t.s0, b, e0);
  t.s1 = two_sum(t.s1, e0, e1);
  t.s2 += e1;
  return t;
}

// Renormalise so that s1 and s2 stay below ulp(s0) and ulp(s1) roughly (keeps the lost
// roundings of s2 small however many terms were added).
inline tfloat tf_renormalize(tfloat t) {
  float e;
  const float a = two_sum(t.s1, t.s2, e);
  float f;
  const float s0 = two_sum(t.s0, a, f);
  float g;
  const float s1 = two_sum(f, e, g);
  return tfloat{s0, s1, g};
}

// The accumulator's value rounded to a float (s1 + s2 first: they are the smaller ones).
inline float tf_value(tfloat t) { return t.s0 + (t.s1 + t.s2); }

// ---- float64 bits to float pieces ----

// Bits of a float64's fields.
constant constexpr int kF64MantBits = 52;
constant constexpr int kF64ExpMask = 0x7ff;
constant constexpr int kF64ExpBias = 1023;
// The 53-bit significand cut as 24 + 24 + 5 bits: the low edges of the three pieces.
constant constexpr int kSplitHiShift = 29;
constant constexpr int kSplitMidShift = 5;
constant constexpr uint kSplitPieceMask = 0xffffffu;
constant constexpr uint kSplitLowMask = 0x1fu;

// The float64 with bits (lo_word, hi_word), times 2^-shift, as p0 + p1 + p2 exactly (each piece
// rounded only where it falls below float32's normal range). NaN and infinities give p0 =
// NaN / +-inf and p1 = p2 = 0.
inline void df_split3(uint lo_word, uint hi_word, int shift, thread float& p0, thread float& p1,
                      thread float& p2) {
  const ulong w = (ulong(hi_word) << 32) | ulong(lo_word);
  const bool negative = (w >> 63) != 0;
  const int biased = int((w >> kF64MantBits) & ulong(kF64ExpMask));
  ulong m = w & ((ulong(1) << kF64MantBits) - 1);
  if (biased == kF64ExpMask) {
    p0 = m != 0 ? NAN : (negative ? -INFINITY : INFINITY);
    p1 = 0.0f;
    p2 = 0.0f;
    return;
  }
  int e = biased;
  if (biased == 0) {
    e = 1;  // subnormal float64: no hidden bit
  } else {
    m |= ulong(1) << kF64MantBits;
  }
  // value = m * 2^(e - bias - 52)
  const int base = e - kF64ExpBias - kF64MantBits - shift;
  const float sign = negative ? -1.0f : 1.0f;
  p0 = sign * metal::ldexp(float(uint(m >> kSplitHiShift)), base + kSplitHiShift);
  p1 = sign * metal::ldexp(float(uint(m >> kSplitMidShift) & kSplitPieceMask),
                           base + kSplitMidShift);
  p2 = sign * metal::ldexp(float(uint(m) & kSplitLowMask), base);
}

// The same float64 as a double-float (rounded once, at about 2^-49 relative).
inline dfloat df_split(uint lo_word, uint hi_word, int shift) {
  float p0, p1, p2;
  df_split3(lo_word, hi_word, shift, p0, p1, p2);
  return df_make(p0, p1 + p2);
}

}  // namespace mpsl
