// fp8 (float8_e4m3fn, float8_e5m2) decoding, encoding and the scaled matrix product
//   out (M, N) = (A * scale_a) (B * scale_b) + bias,   A (M, K), B (K, N) stored as fp8 bytes.
//
// fp8 values travel as their raw bytes (uchar buffers): MPS tensors cannot hold float8 dtypes.
// Decoding happens in registers, products accumulate in float32, and the output is rounded once.
//
// scaled_mm reuses the simdgroup-per-column structure of gemv (gemv.h): one simdgroup owns an
// output column j and R rows, its lanes stream column j of B (K bytes) once for all R rows; M > 8
// runs over blocks of 8 rows. Every recipe is one indexing rule for the scale of element (i, k)
// of A and (k, j) of B, with K split into 128-wide blocks (kGemvStep):
//   scale_a[(i / a_div) * a_s0 + kblock * a_s1], scale_b[kblock * b_s0 + (j / b_div) * b_s1]
// TensorWise: all strides 0; RowWise: the K-block stride 0; BlockWise1x128: div 1;
// BlockWise128x128: div 128. The host fills these from the scale tensors' strides.
//
// Encoding (fp8_encode) rounds x / scale to nearest-even with torch's rules for each format
// (c10 fp8e4m3fn_from_fp32_value / fp8e5m2_from_fp32_value): e5m2 maps overflow to +-inf and NaN
// to 0x7f; e4m3fn maps NaN to 0x7f and finite overflow and infinities to +-448 (torch 2.13) or to
// NaN (torch 2.11): the host passes the installed torch's rule.
// It works on the float's bits with integer arithmetic only, so fast-math settings (subnormal
// flushing) cannot change a result.
#pragma once

#include "../common/defines.h"
#include "gemv.h"

namespace mpsl {

// Format codes shared with the host (mpslinalg.ops.fp8.FP8_FORMATS).
constant constexpr int kFp8E4M3FN = 0;
constant constexpr int kFp8E5M2 = 1;

// Magnitude bits of NaN in both formats (S.1111.111 e4m3fn, S.11111.11 e5m2).
constant constexpr uint kFp8NanBits = 0x7fu;
// e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits, no infinities.
constant constexpr uint kE4M3MaxBits = 0x7eu;         // 448
constant constexpr uint kE4M3OverflowBits = 0x43f00000u;  // 480.0f: rounds past 448
constant constexpr float kE4M3SubnormalUnit = 1.0f / 512.0f;  // 2^-9
// e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE infinities and NaNs.
constant constexpr uint kE5M2InfBits = 0x7cu;
constant constexpr uint kE5M2OverflowBits = 0x47800000u;  // 65536.0f: rounds past 57344
constant constexpr float kE5M2SubnormalUnit = 1.0f / 65536.0f;  // 2^-16
// Float32 layout.
constant constexpr uint kF32SignBit = 0x80000000u;
constant constexpr uint kF32InfBits = 0x7f800000u;
constant constexpr int kF32MantBits = 23;
constant constexpr int kF32Bias = 127;
constant constexpr uint kF32MantMask = 0x7fffffu;
constant constexpr uint kF32ImplicitBit = 0x800000u;

// Decode one fp8 byte into float from its fields with integer arithmetic: normal numbers are
// rebuilt as float32 bits, subnormals as an exact small integer times the format's subnormal
// unit, so no half or float subnormal (which fast-math may flush) is ever formed.
inline float fp8_to_float(uint byte, int format) {
  const bool e5m2 = format == kFp8E5M2;
  const uint mant_bits = e5m2 ? 2u : 3u;
  const uint exp_all_ones = e5m2 ? 0x1fu : 0xfu;
  const uint bias = e5m2 ? 15u : 7u;
  const uint magnitude = byte & 0x7fu;
  const uint e = magnitude >> mant_bits;
  const uint m = magnitude & ((1u << mant_bits) - 1u);
  float v;
  if (e5m2 && e == exp_all_ones) {
    v = m == 0u ? INFINITY : NAN;
  } else if (!e5m2 && magnitude == kFp8NanBits) {
    v = NAN;
  } else if (e == 0u) {
    v = float(m) * (e5m2 ? kE5M2SubnormalUnit : kE4M3SubnormalUnit);
  } else {
    v = as_type<float>(((e + uint(kF32Bias) - bias) << kF32MantBits) |
                       (m << (uint(kF32MantBits) - mant_bits)));
  }
  return (byte & 0x80u) ? -v : v;
}

// Round the magnitude bits `mag` of a float (positive, finite, below the format's smallest
// normal) to nearest-even in units of the format's smallest subnormal, 2^-unit_exponent:
// the float is m * 2^(e - 150), with the implicit bit in m for e > 0.
inline uint fp8_round_subnormal(uint mag, int unit_exponent) {
  const int e = int(mag >> kF32MantBits);
  const uint m = (mag & kF32MantMask) | (e > 0 ? kF32ImplicitBit : 0u);
  const int eff_e = e > 0 ? e : 1;
  // value / 2^-unit = m * 2^(eff_e - 150 + unit): a right shift by s.
  const int s = (kF32Bias + kF32MantBits) - unit_exponent - eff_e;
  if (s > kF32MantBits + 1) {
    return 0u;  // m < 2^24 <= 2^(s - 1): below half of the smallest subnormal
  }
  const uint q = m >> uint(s);
  const uint rem = m & ((1u << uint(s)) - 1u);
  const uint half_unit = 1u << uint(s - 1);
  return q + ((rem > half_unit || (rem == half_unit && (q & 1u))) ? 1u : 0u);
}

inline uint float_to_fp8(float value, int format, bool e4m3_overflow_nan) {
  const bool e5m2 = format == kFp8E5M2;
  const uint mant_bits = e5m2 ? 2u : 3u;
  const uint bias = e5m2 ? 15u : 7u;
  const uint drop = uint(kF32MantBits) - mant_bits;  // float mantissa bits rounded away
  const uint bits = as_type<uint>(value);
  const uint sign = (bits & kF32SignBit) >> 24;
  const uint mag = bits & ~kF32SignBit;
  const uint min_normal = (uint(kF32Bias) - bias + 1u) << kF32MantBits;  // 2^(1 - bias)
  uint out;
  if (mag >= (e5m2 ? kE5M2OverflowBits : kE4M3OverflowBits)) {  // past the format, inf, NaN
    const uint e4m3_overflow = e4m3_overflow_nan ? kFp8NanBits : kE4M3MaxBits;
    out = mag > kF32InfBits ? kFp8NanBits : (e5m2 ? kE5M2InfBits : e4m3_overflow);
  } else if (mag < min_normal) {
    out = fp8_round_subnormal(mag, int(bias - 1u + mant_bits));
  } else {
    // rebias the exponent (wrapping unsigned arithmetic, as c10), round half to even, shift
    const uint odd = (mag >> drop) & 1u;
    const uint rebias = (bias - uint(kF32Bias)) << kF32MantBits;
    out = ((mag + rebias + ((1u << (drop - 1u)) - 1u) + odd) >> drop) & 0xffu;
    if (!e5m2 && out == kFp8NanBits) {
      out = kE4M3MaxBits;  // rounding carried into e4m3fn's NaN pattern: saturate
    }
  }
  return out | sign;
}

// Arguments of scaled_mm (field order: mpslinalg.ops.fp8.SCALED_MM_PARAMS).
struct ScaledMmParams {
  long m, n, k;
  long a_row, a_col;  // A (M, K) strides in elements (bytes)
  long b_row, b_col;  // B (K, N)
  long a_div, a_s0, a_s1;
  long b_div, b_s0, b_s1;
  long a_format, b_format;
  long bias_step, has_bias;
  long b_vec4;  // 1: b_row == 1 and columns start 4-byte aligned: one uchar4 load per lane step
};

// gemv_rows source: rows of A against column j of B, decoded from bytes, with block scales.
struct Fp8Source {
  device const uchar* a;
  device const uchar* b;
  device const float* scale_a;
  device const float* scale_b;
  ScaledMmParams p;
  float lhs(long r, long kk) const {
    return fp8_to_float(a[r * p.a_row + kk * p.a_col], int(p.a_format));
  }
  float rhs(long col, long kk) const {
    return fp8_to_float(b[kk * p.b_row + col * p.b_col], int(p.b_format));
  }
  float4 rhs4(long col, long k0, long K) const {
    if (p.b_vec4 && k0 + kGemvLaneElems <= K) {
      const uchar4 bytes = *reinterpret_cast<device const uchar4*>(b + col * p.b_col + k0);
      const int f = int(p.b_format);
      return float4(fp8_to_float(bytes.x, f), fp8_to_float(bytes.y, f), fp8_to_float(bytes.z, f),
                    fp8_to_float(bytes.w, f));
    }
    return rhs4_scalar(*this, col, k0, K);
  }
  float lhs_scale(long r, long kblock) const {
    return scale_a[(r / p.a_div) * p.a_s0 + kblock * p.a_s1];
  }
  float rhs_scale(long col, long kblock) const {
    return scale_b[kblock * p.b_s0 + (col / p.b_div) * p.b_s1];
  }
};

// Arguments of fp8_encode and fp8_decode (field order: mpslinalg.ops.fp8.CONVERT_PARAMS): the
// input viewed as (rows, cols) with strides; the scale of element (i, j) is
// scale[(i / row_div) * s0 + (j / col_div) * s1].
struct Fp8ConvertParams {
  long rows, cols;
  long x_row, x_col;
  long row_div, col_div, s0, s1;
  long format;
  long e4m3_overflow_nan;  // 1: e4m3fn overflow and infinities encode as NaN, 0: as +-448
};

}  // namespace mpsl

// Grid as gemv: kGemvColsPerGroup simdgroups (output columns) per threadgroup along x, row
// blocks of R along y.
template <typename OutT, int R>
[[kernel]] void scaled_mm(
    device const uchar* a [[buffer(0)]],
    device const uchar* b [[buffer(1)]],
    device const float* scale_a [[buffer(2)]],
    device const float* scale_b [[buffer(3)]],
    device const OutT* bias [[buffer(4)]],
    device OutT* out [[buffer(5)]],
    constant mpsl::ScaledMmParams& params [[buffer(6)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  const long col = long(group.x) * kGemvColsPerGroup + long(sg);
  const long row0 = long(group.y) * R;
  if (col >= params.n || row0 >= params.m) {
    return;  // whole simdgroups leave together
  }
  const long rows = (params.m - row0 < long(R)) ? params.m - row0 : long(R);
  Fp8Source src = {a, b, scale_a, scale_b, params};
  float acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.0f;
  }
  gemv_rows<R>(acc, src, row0, rows, col, params.k, lane);
  const float bias_value = params.has_bias ? float(bias[col * params.bias_step]) : 0.0f;
  for (int r = 0; r < R; ++r) {
    const float total = simd_sum(acc[r]);
    if (r < rows && lane == 0) {
      out[(row0 + r) * params.n + col] = OutT(total + bias_value);
    }
  }
}

namespace mpsl {

// The scale of element (i, j) of an fp8 conversion: one per block of row_div x col_div elements.
inline float convert_scale(device const float* scale, constant Fp8ConvertParams& params, long i,
                           long j) {
  return scale[(i / params.row_div) * params.s0 + (j / params.col_div) * params.s1];
}

}  // namespace mpsl

// One thread per element: bytes[i * cols + j] = fp8(x[i, j] / scale(i, j)).
template <typename T>
[[kernel]] void fp8_encode(
    device const T* x [[buffer(0)]],
    device const float* scale [[buffer(1)]],
    device uchar* bytes [[buffer(2)]],
    constant mpsl::Fp8ConvertParams& params [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long i = long(gid.y), j = long(gid.x);
  if (i >= params.rows || j >= params.cols) {
    return;
  }
  const float s = convert_scale(scale, params, i, j);
  // precise: the quotient must be the correctly rounded one torch's CPU division gives.
  const float q = metal::precise::divide(float(x[i * params.x_row + j * params.x_col]), s);
  bytes[i * params.cols + j] = uchar(float_to_fp8(q, int(params.format), params.e4m3_overflow_nan != 0));
}

// One thread per element: out[i, j] = decode(bytes[i, j]) * scale(i, j), bytes read through
// strides (x_row, x_col), the scale as in fp8_encode (the inverse of it, up to rounding).
template <typename T>
[[kernel]] void fp8_decode(
    device const uchar* bytes [[buffer(0)]],
    device const float* scale [[buffer(1)]],
    device T* out [[buffer(2)]],
    constant mpsl::Fp8ConvertParams& params [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]]) {
  using namespace mpsl;
  const long i = long(gid.y), j = long(gid.x);
  if (i >= params.rows || j >= params.cols) {
    return;
  }
  const float s = convert_scale(scale, params, i, j);
  const float v = fp8_to_float(bytes[i * params.x_row + j * params.x_col], int(params.format));
  out[i * params.cols + j] = T(v * s);
}
