// metal:: math, relational, geometric and integer functions, as_type, type traits, numeric_limits.
#pragma once
#include <limits>
#include "emu_types.h"

#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_LN10_F 2.30258509299404568401799145468436421f
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_PI_2_F 1.57079632679489661923132169163975144f
#define M_PI_4_F 0.785398163397448309615660845819875721f
#define M_1_PI_F 0.318309886183790671537767526745028724f
#define M_2_PI_F 0.636619772367581343075535053490057448f
#define M_2_SQRTPI_F 1.12837916709551257389615890312154517f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f
#define MAXFLOAT 3.402823466e+38f
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define FLT_EPSILON 1.1920928955078125e-07f
#define FLT_MANT_DIG 24
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)6.103515625e-05f)
#define HALF_EPSILON ((half)0.0009765625f)
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-9223372036854775807L - 1)
#define ULONG_MAX 18446744073709551615UL

namespace metal {
// ---- type traits (Metal's <metal_type_traits> mirrors the std ones, plus half/bfloat/vectors) ----
using std::enable_if; using std::enable_if_t; using std::conditional; using std::conditional_t;
using std::is_same; using std::integral_constant; using std::true_type; using std::false_type;
using std::remove_cv; using std::remove_cv_t; using std::remove_const; using std::remove_const_t;
using std::remove_reference; using std::remove_reference_t; using std::decay; using std::decay_t;
using std::is_signed; using std::is_unsigned; using std::make_signed; using std::make_unsigned;
using std::is_pointer; using std::is_class; using std::is_enum; using std::is_convertible;
using std::is_trivially_copyable; using std::is_base_of; using std::declval; using std::is_const;
using std::is_reference; using std::underlying_type; using std::void_t; using std::bool_constant;
template <class T, class U> constexpr bool is_same_v = std::is_same<T, U>::value;
template <class T> struct is_floating_point : std::is_floating_point<T> {};
template <> struct is_floating_point<half> : std::true_type {};
template <> struct is_floating_point<bfloat> : std::true_type {};
template <class T> struct is_floating_point<const T> : is_floating_point<T> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> struct is_integral : std::is_integral<T> {};
template <class T> constexpr bool is_integral_v = is_integral<T>::value;
template <class T> struct is_arithmetic : std::integral_constant<bool, is_integral<T>::value || is_floating_point<T>::value> {};
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T> struct is_scalar : is_arithmetic<T> {};
template <class T> constexpr bool is_scalar_v = is_scalar<T>::value;
template <class T> constexpr bool is_signed_v = std::is_signed<T>::value || is_floating_point<T>::value;
template <class T> constexpr bool is_unsigned_v = std::is_unsigned<T>::value;
template <class T> constexpr bool is_vector_v = is_vec<T>::value;
template <class T> struct is_vector : is_vec<T> {};
template <class T, class U> constexpr bool is_convertible_v = std::is_convertible<T, U>::value;
template <class T> struct vec_elements { static constexpr int value = 1; };
template <class T, int N> struct vec_elements<vec<T, N>> { static constexpr int value = N; };
template <class T> struct make_scalar { using type = T; };
template <class T, int N> struct make_scalar<vec<T, N>> { using type = T; };
template <class T> using make_scalar_t = typename make_scalar<T>::type;

template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, has_infinity = true;
  static constexpr int digits = 11;
  static half min() { return (half)6.103515625e-05f; }
  static half max() { return (half)65504.0f; }
  static half lowest() { return (half)-65504.0f; }
  static half epsilon() { return (half)0.0009765625f; }
  static half infinity() { return (half)__builtin_inff(); }
  static half quiet_NaN() { return (half)__builtin_nanf(""); }
  static half denorm_min() { return (half)5.9604644775390625e-08f; }
};
template <> struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, has_infinity = true;
  static constexpr int digits = 8;
  static bfloat min() { return bfloat::from_bits(0x0080); }
  static bfloat max() { return bfloat::from_bits(0x7f7f); }
  static bfloat lowest() { return bfloat::from_bits(0xff7f); }
  static bfloat epsilon() { return bfloat::from_bits(0x3c00); }
  static bfloat infinity() { return bfloat::from_bits(0x7f80); }
  static bfloat quiet_NaN() { return bfloat::from_bits(0x7fc0); }
  static bfloat denorm_min() { return bfloat::from_bits(0x0001); }
};

template <class To, class From> inline To as_type(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination sizes differ");
  To t; __builtin_memcpy(&t, &f, sizeof(To)); return t;
}

// metal::array<T, N> (<metal_array>)
template <class T, size_t N> struct array {
  T elems[N];
  T& operator[](size_t i) { return elems[i]; }
  constexpr const T& operator[](size_t i) const { return elems[i]; }
  static constexpr size_t size() { return N; }
  T* data() { return elems; }
  const T* data() const { return elems; }
  T* begin() { return elems; }
  T* end() { return elems + N; }
  const T* begin() const { return elems; }
  const T* end() const { return elems + N; }
};

// ---- elementwise lifting of scalar functions to vectors ----
#define EMU_LIFT1(name)                                                                 \
  template <class T, int N> inline vec<T, N> name(const vec<T, N>& a) {                 \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i]); return r; }
#define EMU_LIFT2(name)                                                                 \
  template <class T, int N> inline vec<T, N> name(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i], b.v[i]); return r; } \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>  \
  inline vec<T, N> name(const vec<T, N>& a, S b) { return name(a, vec<T, N>(T(b))); }    \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>  \
  inline vec<T, N> name(S a, const vec<T, N>& b) { return name(vec<T, N>(T(a)), b); }
#define EMU_LIFT3(name)                                                                 \
  template <class T, int N> inline vec<T, N> name(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c) { \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i], b.v[i], c.v[i]); return r; } \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>  \
  inline vec<T, N> name(const vec<T, N>& a, S b, S c) { return name(a, vec<T, N>(T(b)), vec<T, N>(T(c))); } \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>  \
  inline vec<T, N> name(const vec<T, N>& a, const vec<T, N>& b, S c) { return name(a, b, vec<T, N>(T(c))); }

// float functions; half/bfloat compute in float and round once, as Metal's precise half math does.
#define EMU_F1(name, expr)                                                      \
  inline float name(float x) { return expr; }                                   \
  inline half name(half x) { return (half)name(float(x)); }                     \
  inline bfloat name(bfloat x) { return bfloat(name(float(x))); }               \
  EMU_LIFT1(name)
#define EMU_F2(name, expr)                                                      \
  inline float name(float x, float y) { return expr; }                          \
  inline half name(half x, half y) { return (half)name(float(x), float(y)); }   \
  inline bfloat name(bfloat x, bfloat y) { return bfloat(name(float(x), float(y))); } \
  EMU_LIFT2(name)
#define EMU_F3(name, expr)                                                      \
  inline float name(float x, float y, float z) { return expr; }                 \
  inline half name(half x, half y, half z) { return (half)name(float(x), float(y), float(z)); } \
  inline bfloat name(bfloat x, bfloat y, bfloat z) { return bfloat(name(float(x), float(y), float(z))); } \
  EMU_LIFT3(name)

EMU_F1(sqrt, __builtin_sqrtf(x)) EMU_F1(rsqrt, 1.0f / __builtin_sqrtf(x)) EMU_F1(cbrt, __builtin_cbrtf(x))
EMU_F1(fabs, __builtin_fabsf(x)) EMU_F1(floor, __builtin_floorf(x)) EMU_F1(ceil, __builtin_ceilf(x))
EMU_F1(round, __builtin_roundf(x)) EMU_F1(rint, __builtin_rintf(x)) EMU_F1(trunc, __builtin_truncf(x))
EMU_F1(exp, __builtin_expf(x)) EMU_F1(exp2, __builtin_exp2f(x)) EMU_F1(exp10, __builtin_powf(10.0f, x))
EMU_F1(log, __builtin_logf(x)) EMU_F1(log2, __builtin_log2f(x)) EMU_F1(log10, __builtin_log10f(x))
EMU_F1(sin, __builtin_sinf(x)) EMU_F1(cos, __builtin_cosf(x)) EMU_F1(tan, __builtin_tanf(x))
EMU_F1(asin, __builtin_asinf(x)) EMU_F1(acos, __builtin_acosf(x)) EMU_F1(atan, __builtin_atanf(x))
EMU_F1(sinh, __builtin_sinhf(x)) EMU_F1(cosh, __builtin_coshf(x)) EMU_F1(tanh, __builtin_tanhf(x))
EMU_F1(asinh, __builtin_asinhf(x)) EMU_F1(acosh, __builtin_acoshf(x)) EMU_F1(atanh, __builtin_atanhf(x))
EMU_F1(sinpi, __builtin_sinf(M_PI_F * x)) EMU_F1(cospi, __builtin_cosf(M_PI_F * x)) EMU_F1(tanpi, __builtin_tanf(M_PI_F * x))
EMU_F1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
EMU_F1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
EMU_F1(sign, (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x))))
EMU_F1(erf, __builtin_erff(x)) EMU_F1(erfc, __builtin_erfcf(x)) EMU_F1(expm1, __builtin_expm1f(x))
EMU_F1(log1p, __builtin_log1pf(x)) EMU_F1(lgamma, __builtin_lgammaf(x)) EMU_F1(tgamma, __builtin_tgammaf(x))
EMU_F2(pow, __builtin_powf(x, y)) EMU_F2(powr, __builtin_powf(x, y)) EMU_F2(atan2, __builtin_atan2f(x, y))
EMU_F2(fmod, __builtin_fmodf(x, y)) EMU_F2(copysign, __builtin_copysignf(x, y)) EMU_F2(fdim, __builtin_fdimf(x, y))
EMU_F2(fmin, __builtin_fminf(x, y)) EMU_F2(fmax, __builtin_fmaxf(x, y)) EMU_F2(nextafter, __builtin_nextafterf(x, y))
EMU_F2(hypot, __builtin_hypotf(x, y)) EMU_F2(divide, x / y) EMU_F2(step, (y < x ? 0.0f : 1.0f))
EMU_F2(remainder, __builtin_remainderf(x, y))
EMU_F3(fma, __builtin_fmaf(x, y, z)) EMU_F3(mad, x * y + z) EMU_F3(fmin3, __builtin_fminf(__builtin_fminf(x, y), z))
EMU_F3(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
EMU_F3(mix, x + (y - x) * z)
EMU_F3(smoothstep, ([](float e0, float e1, float v) { float t = __builtin_fminf(__builtin_fmaxf((v - e0) / (e1 - e0), 0.0f), 1.0f); return t * t * (3.0f - 2.0f * t); })(x, y, z))

// min/max/clamp/abs: float versions ignore a NaN operand (Metal's fmin/fmax semantics), integers are plain.
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> constexpr T min(T a, T b) { return b < a ? b : a; }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> constexpr T max(T a, T b) { return a < b ? b : a; }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> constexpr T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T, std::enable_if_t<std::is_integral<T>::value && std::is_signed<T>::value, int> = 0>
constexpr std::make_unsigned_t<T> abs(T a) { return a < 0 ? std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a) : std::make_unsigned_t<T>(a); }
template <class T, std::enable_if_t<std::is_integral<T>::value && std::is_unsigned<T>::value, int> = 0> constexpr T abs(T a) { return a; }
EMU_F2(min, __builtin_fminf(x, y)) EMU_F2(max, __builtin_fmaxf(x, y)) EMU_F1(abs, __builtin_fabsf(x))
EMU_F3(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z))
template <class T, class U, std::enable_if_t<std::is_integral<T>::value && std::is_integral<U>::value && !std::is_same<T, U>::value, int> = 0>
constexpr std::common_type_t<T, U> min(T a, U b) { using C = std::common_type_t<T, U>; return min(C(a), C(b)); }
template <class T, class U, std::enable_if_t<std::is_integral<T>::value && std::is_integral<U>::value && !std::is_same<T, U>::value, int> = 0>
constexpr std::common_type_t<T, U> max(T a, U b) { using C = std::common_type_t<T, U>; return max(C(a), C(b)); }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> constexpr T min3(T a, T b, T c) { return min(min(a, b), c); }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> constexpr T max3(T a, T b, T c) { return max(max(a, b), c); }
EMU_F3(min3, __builtin_fminf(__builtin_fminf(x, y), z)) EMU_F3(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
EMU_F3(median3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)))

inline float sincos(float x, float& c) { c = __builtin_cosf(x); return __builtin_sinf(x); }
inline half sincos(half x, half& c) { c = (half)__builtin_cosf(float(x)); return (half)__builtin_sinf(float(x)); }
inline float frexp(float x, int& e) { return __builtin_frexpf(x, &e); }
inline float ldexp(float x, int e) { return __builtin_ldexpf(x, e); }
inline half ldexp(half x, int e) { return (half)__builtin_ldexpf(float(x), e); }
inline float modf(float x, float& ip) { return __builtin_modff(x, &ip); }
inline int ilogb(float x) { return __builtin_ilogbf(x); }

// ---- relational ----
inline bool isunordered(float a, float b) { return __builtin_isunordered(a, b); }
inline bool isordered(float a, float b) { return !__builtin_isunordered(a, b); }
inline bool isunordered(half a, half b) { return __builtin_isunordered(float(a), float(b)); }
inline bool isordered(half a, half b) { return !__builtin_isunordered(float(a), float(b)); }
inline bool isunordered(bfloat a, bfloat b) { return __builtin_isunordered(float(a), float(b)); }
inline bool isordered(bfloat a, bfloat b) { return !__builtin_isunordered(float(a), float(b)); }
inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isnan(half x) { return __builtin_isnan(float(x)); }
inline bool isnan(bfloat x) { return __builtin_isnan(float(x)); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isinf(half x) { return __builtin_isinf(float(x)); }
inline bool isinf(bfloat x) { return __builtin_isinf(float(x)); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool isfinite(half x) { return __builtin_isfinite(float(x)); }
inline bool isfinite(bfloat x) { return __builtin_isfinite(float(x)); }
inline bool isnormal(float x) { return __builtin_isnormal(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool signbit(half x) { return __builtin_signbit(float(x)); }
#define EMU_REL(name)                                                                   \
  template <class T, int N> inline vec<bool, N> name(const vec<T, N>& a) {              \
    vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i]); return r; }
EMU_REL(isnan) EMU_REL(isinf) EMU_REL(isfinite) EMU_REL(signbit) EMU_REL(isnormal)
#undef EMU_REL
constexpr bool all(bool b) { return b; }
constexpr bool any(bool b) { return b; }
template <int N> constexpr bool all(const vec<bool, N>& b) { for (int i = 0; i < N; ++i) if (!b.v[i]) return false; return true; }
template <int N> constexpr bool any(const vec<bool, N>& b) { for (int i = 0; i < N; ++i) if (b.v[i]) return true; return false; }
template <class T, int N, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0> constexpr bool all(const vec<T, N>& b) { return all(b != T(0)); }
template <class T, int N, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0> constexpr bool any(const vec<T, N>& b) { return any(b != T(0)); }
template <class T, std::enable_if_t<is_emu_scalar<T>::value, int> = 0> constexpr T select(T a, T b, bool c) { return c ? b : a; }
template <class T, int N> constexpr vec<T, N> select(const vec<T, N>& a, const vec<T, N>& b, const vec<bool, N>& c) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = c.v[i] ? b.v[i] : a.v[i]; return r; }
template <class T, int N> constexpr vec<T, N> select(const vec<T, N>& a, const vec<T, N>& b, bool c) { return c ? b : a; }

// ---- geometric ----
template <class T, int N> inline T dot(const vec<T, N>& a, const vec<T, N>& b) { T s = a.v[0] * b.v[0]; for (int i = 1; i < N; ++i) s += a.v[i] * b.v[i]; return s; }
template <class T, int N> inline T length_squared(const vec<T, N>& a) { return dot(a, a); }
template <class T, int N> inline T length(const vec<T, N>& a) { return sqrt(dot(a, a)); }
template <class T, int N> inline T distance(const vec<T, N>& a, const vec<T, N>& b) { return length(a - b); }
template <class T, int N> inline T distance_squared(const vec<T, N>& a, const vec<T, N>& b) { return length_squared(a - b); }
template <class T, int N> inline vec<T, N> normalize(const vec<T, N>& a) { return a * rsqrt(dot(a, a)); }
template <class T> inline vec<T, 3> cross(const vec<T, 3>& a, const vec<T, 3>& b) {
  return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x); }

// ---- integer ----
template <class T> constexpr T popcount(T x) { return T(__builtin_popcountll((unsigned long long)std::make_unsigned_t<T>(x))); }
template <class T> constexpr T clz(T x) { return x == 0 ? T(sizeof(T) * 8) : T(__builtin_clzll((unsigned long long)std::make_unsigned_t<T>(x)) - (64 - 8 * sizeof(T))); }
template <class T> constexpr T ctz(T x) { return x == 0 ? T(sizeof(T) * 8) : T(__builtin_ctzll((unsigned long long)std::make_unsigned_t<T>(x))); }
template <class T> constexpr T mulhi(T a, T b) { return T((__int128(a) * __int128(b)) >> (8 * sizeof(T))); }
template <class T> constexpr T mul24(T a, T b) { return a * b; }
template <class T> constexpr T mad24(T a, T b, T c) { return a * b + c; }
template <class T> constexpr T absdiff(T a, T b) { return a > b ? a - b : b - a; }
template <class T> constexpr T hadd(T a, T b) { return T((__int128(a) + __int128(b)) >> 1); }
template <class T> constexpr T rhadd(T a, T b) { return T((__int128(a) + __int128(b) + 1) >> 1); }
template <class T> constexpr T rotate(T v, T i) { using U = std::make_unsigned_t<T>; unsigned n = 8 * sizeof(T); unsigned s = unsigned(i) % n; return s ? T((U(v) << s) | (U(v) >> (n - s))) : v; }
template <class T> constexpr T extract_bits(T x, uint off, uint bits) {
  using U = std::make_unsigned_t<T>; if (bits == 0) return 0; U u = U(U(x) >> off); uint n = 8 * sizeof(T);
  if (bits >= n) return T(u); U m = U((U(1) << bits) - 1); u &= m;
  if (std::is_signed<T>::value && (u >> (bits - 1)) & 1) u |= U(~m); return T(u); }
template <class T> constexpr T insert_bits(T base, T ins, uint off, uint bits) {
  using U = std::make_unsigned_t<T>; if (bits == 0) return base; uint n = 8 * sizeof(T);
  U m = bits >= n ? U(~U(0)) : U((U(1) << bits) - 1); m = U(m << off);
  return T((U(base) & U(~m)) | (U(U(ins) << off) & m)); }
template <class T> constexpr T reverse_bits(T x) { using U = std::make_unsigned_t<T>; U u = U(x), r = 0;
  for (unsigned i = 0; i < 8 * sizeof(T); ++i) { r = U((r << 1) | (u & 1)); u >>= 1; } return T(r); }
EMU_LIFT1(popcount) EMU_LIFT1(clz) EMU_LIFT1(ctz) EMU_LIFT2(mulhi) EMU_LIFT2(absdiff)

namespace precise {
using metal::sqrt; using metal::rsqrt; using metal::exp; using metal::exp2; using metal::exp10; using metal::log;
using metal::log2; using metal::log10; using metal::sin; using metal::cos; using metal::tan; using metal::asin;
using metal::acos; using metal::atan; using metal::atan2; using metal::sinh; using metal::cosh; using metal::tanh;
using metal::pow; using metal::powr; using metal::divide; using metal::fma; using metal::sinpi; using metal::cospi;
using metal::tanpi; using metal::sincos; using metal::fmin; using metal::fmax; using metal::min; using metal::max;
using metal::clamp; using metal::abs; using metal::fabs; using metal::floor; using metal::ceil; using metal::round;
using metal::trunc; using metal::fract; using metal::fmod; using metal::normalize; using metal::length;
using metal::distance; using metal::hypot; using metal::saturate; using metal::cbrt; using metal::asinh;
using metal::acosh; using metal::atanh; using metal::ldexp; using metal::frexp; using metal::copysign;
}  // namespace precise
namespace fast { using namespace precise; }
}  // namespace metal
// as_type<T>(x) is an operator of the language, usable without metal::
using metal::as_type;
