// What a Metal source translated for the CUDA executor (mpslinalg/emulator/cuda.py) sees.
//
// The translation is the emulator's (same preprocessor and token rewriter), so the names it
// emits (::emu::dptr, ::emu::tg_alloc, swz<...>(), ...) are defined here for the GPU; then every
// MSL vector/matrix/16-bit type name is renamed to mtl_<name> by the CUDA back end, because
// NVRTC predefines CUDA's own float2, int4, ... (plain structs without operators or swizzles).
//
// Compiled with -default-device (every unannotated function is __device__), -fmad=false (no
// contraction, like the emulator's -ffp-contract=off) and without fast math (Metal's precise
// math). No CUDA header is needed: NVRTC ships none of cuda_fp16.h/cuda_bf16.h, so half and
// bfloat are 16-bit structs converted with the PTX cvt instructions (round to nearest even).
#pragma once

// ---- the few type traits MSL's <metal_type_traits> offers (NVRTC has no C++ library) ----
namespace std {
template <class T, T v> struct integral_constant { static constexpr T value = v; };
typedef integral_constant<bool, true> true_type;
typedef integral_constant<bool, false> false_type;
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> struct is_integral_ : false_type {};
#define EMU_INTEGRAL(T) template <> struct is_integral_<T> : true_type {};
EMU_INTEGRAL(bool) EMU_INTEGRAL(char) EMU_INTEGRAL(signed char) EMU_INTEGRAL(unsigned char)
EMU_INTEGRAL(short) EMU_INTEGRAL(unsigned short) EMU_INTEGRAL(int) EMU_INTEGRAL(unsigned int)
EMU_INTEGRAL(long) EMU_INTEGRAL(unsigned long) EMU_INTEGRAL(long long) EMU_INTEGRAL(unsigned long long)
#undef EMU_INTEGRAL
template <class T> struct is_integral : is_integral_<typename remove_cv<T>::type> {};
template <class T> struct is_floating_point : is_same<typename remove_cv<T>::type, float> {};
template <class T> struct is_signed : integral_constant<bool, (T(-1) < T(0))> {};
template <class T> struct is_unsigned : integral_constant<bool, is_integral<T>::value && !(T(-1) < T(0))> {};
template <class T> struct is_arithmetic
    : integral_constant<bool, is_integral<T>::value || is_floating_point<T>::value> {};
}  // namespace std

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

// ---- half and bfloat ----
struct mtl_half {
  unsigned short bits;
  mtl_half() = default;
  static __device__ unsigned short round(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  template <class S, std::enable_if_t<std::is_arithmetic<S>::value, int> = 0>
  mtl_half(S v) : bits(round(float(v))) {}
  operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  static mtl_half from_bits(unsigned short b) { mtl_half r; r.bits = b; return r; }
};
struct mtl_bfloat {
  unsigned short bits;
  mtl_bfloat() = default;
  static __device__ unsigned short round(float f) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  template <class S, std::enable_if_t<std::is_arithmetic<S>::value, int> = 0>
  mtl_bfloat(S v) : bits(round(float(v))) {}
  mtl_bfloat(mtl_half v) : bits(round(float(v))) {}
  operator float() const { return __uint_as_float((unsigned)bits << 16); }
  static mtl_bfloat from_bits(unsigned short b) { mtl_bfloat r; r.bits = b; return r; }
};
// Arithmetic rounds once per operation (float has enough bits that float-then-round equals the
// correctly rounded 16-bit result for + - * /).
#define EMU_H16_OPS(H)                                                                         \
  inline H operator-(H a) { return H::from_bits((unsigned short)(a.bits ^ 0x8000u)); }          \
  inline H operator+(H a) { return a; }                                                        \
  inline H operator+(H a, H b) { return H(float(a) + float(b)); }                              \
  inline H operator-(H a, H b) { return H(float(a) - float(b)); }                              \
  inline H operator*(H a, H b) { return H(float(a) * float(b)); }                              \
  inline H operator/(H a, H b) { return H(float(a) / float(b)); }                              \
  inline H& operator+=(H& a, H b) { return a = a + b; }                                        \
  inline H& operator-=(H& a, H b) { return a = a - b; }                                        \
  inline H& operator*=(H& a, H b) { return a = a * b; }                                        \
  inline H& operator/=(H& a, H b) { return a = a / b; }                                        \
  inline bool operator<(H a, H b) { return float(a) < float(b); }                              \
  inline bool operator>(H a, H b) { return float(a) > float(b); }                              \
  inline bool operator<=(H a, H b) { return float(a) <= float(b); }                            \
  inline bool operator>=(H a, H b) { return float(a) >= float(b); }                            \
  inline bool operator==(H a, H b) { return float(a) == float(b); }                            \
  inline bool operator!=(H a, H b) { return float(a) != float(b); }
EMU_H16_OPS(mtl_half) EMU_H16_OPS(mtl_bfloat)
#undef EMU_H16_OPS

namespace metal {
template <class T> struct is_scalar_ : std::is_arithmetic<T> {};
template <> struct is_scalar_<mtl_half> : std::true_type {};
template <> struct is_scalar_<mtl_bfloat> : std::true_type {};

template <class T, int N> struct vec;
template <class T> struct is_vec : std::false_type {};
template <class T, int N> struct is_vec<vec<T, N>> : std::true_type {};

// Metal's vectors: components x/y/z/w and an array view sharing storage; float3 is 16 bytes.
// Swizzles arrive rewritten by the emulator's front end as swz<I...>() (read) and swzw<I...>()
// (write through a proxy).
#define EMU_VEC_COMMON(N)                                                                     \
  typedef T value_type;                                                                       \
  vec() = default;                                                                            \
  template <class S, std::enable_if_t<is_scalar_<S>::value, int> = 0>                         \
  vec(S s) { for (int i = 0; i < N; ++i) v[i] = T(s); }                                       \
  template <class U, std::enable_if_t<!std::is_same<U, T>::value, int> = 0>                   \
  explicit vec(const vec<U, N>& o) { for (int i = 0; i < N; ++i) v[i] = T(o.v[i]); }          \
  T& operator[](int i) { return v[i]; }                                                       \
  const T& operator[](int i) const { return v[i]; }                                           \
  template <int... I> vec<T, sizeof...(I)> swz() const { return vec<T, sizeof...(I)>(v[I]...); } \
  template <int... I> struct wproxy {                                                         \
    vec& p;                                                                                   \
    typedef vec<T, sizeof...(I)> R;                                                           \
    operator R() const { return R(p.v[I]...); }                                               \
    wproxy& operator=(const R& r) { int k = 0; int idx[] = {I...};                            \
      for (int j : idx) p.v[j] = r.v[k++]; return *this; }                                    \
    wproxy& operator+=(const R& r) { return *this = R(*this) + r; }                           \
    wproxy& operator-=(const R& r) { return *this = R(*this) - r; }                           \
    wproxy& operator*=(const R& r) { return *this = R(*this) * r; }                           \
    wproxy& operator/=(const R& r) { return *this = R(*this) / r; }                           \
  };                                                                                          \
  template <int... I> wproxy<I...> swzw() { return wproxy<I...>{*this}; }

template <class T> struct alignas(2 * sizeof(T)) vec<T, 2> {
  union { struct { T x, y; }; T v[2]; };
  EMU_VEC_COMMON(2)
  vec(T a, T b) { v[0] = a; v[1] = b; }
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 3> {
  union { struct { T x, y, z; }; T v[3]; };
  EMU_VEC_COMMON(3)
  vec(T a, T b, T c) { v[0] = a; v[1] = b; v[2] = c; }
  vec(const vec<T, 2>& a, T c) { v[0] = a.v[0]; v[1] = a.v[1]; v[2] = c; }
  vec(T a, const vec<T, 2>& b) { v[0] = a; v[1] = b.v[0]; v[2] = b.v[1]; }
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 4> {
  union { struct { T x, y, z, w; }; T v[4]; };
  EMU_VEC_COMMON(4)
  vec(T a, T b, T c, T d) { v[0] = a; v[1] = b; v[2] = c; v[3] = d; }
  vec(const vec<T, 2>& a, const vec<T, 2>& b) { v[0] = a.v[0]; v[1] = a.v[1]; v[2] = b.v[0]; v[3] = b.v[1]; }
  vec(const vec<T, 3>& a, T d) { v[0] = a.v[0]; v[1] = a.v[1]; v[2] = a.v[2]; v[3] = d; }
  vec(T a, const vec<T, 3>& b) { v[0] = a; v[1] = b.v[0]; v[2] = b.v[1]; v[3] = b.v[2]; }
};
#undef EMU_VEC_COMMON

// packed_ vectors: no padding or over-alignment.
template <class T, int N> struct packed_vec {
  T v[N];
  packed_vec() = default;
  packed_vec(const vec<T, N>& o) { for (int i = 0; i < N; ++i) v[i] = o.v[i]; }
  operator vec<T, N>() const { vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = v[i]; return r; }
  T& operator[](int i) { return v[i]; }
  const T& operator[](int i) const { return v[i]; }
};

#define EMU_VBIN(op)                                                                          \
  template <class T, int N> vec<T, N> operator op(const vec<T, N>& a, const vec<T, N>& b) {   \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(a.v[i] op b.v[i]); return r; }        \
  template <class T, int N, class S, std::enable_if_t<is_scalar_<S>::value, int> = 0>         \
  vec<T, N> operator op(const vec<T, N>& a, S b) {                                            \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(a.v[i] op T(b)); return r; }          \
  template <class T, int N, class S, std::enable_if_t<is_scalar_<S>::value, int> = 0>         \
  vec<T, N> operator op(S a, const vec<T, N>& b) {                                            \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(T(a) op b.v[i]); return r; }          \
  template <class T, int N, class B> vec<T, N>& operator op##=(vec<T, N>& a, const B& b) {    \
    return a = a op b; }
EMU_VBIN(+) EMU_VBIN(-) EMU_VBIN(*) EMU_VBIN(/) EMU_VBIN(%) EMU_VBIN(&) EMU_VBIN(|) EMU_VBIN(^)
EMU_VBIN(<<) EMU_VBIN(>>)
#undef EMU_VBIN
#define EMU_VCMP(op)                                                                          \
  template <class T, int N> vec<bool, N> operator op(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = a.v[i] op b.v[i]; return r; }
EMU_VCMP(==) EMU_VCMP(!=) EMU_VCMP(<) EMU_VCMP(>) EMU_VCMP(<=) EMU_VCMP(>=)
#undef EMU_VCMP
template <class T, int N> vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = -a.v[i]; return r; }
template <class T, int N> vec<T, N> operator+(const vec<T, N>& a) { return a; }
template <class T, int N> vec<bool, N> operator!(const vec<T, N>& a) {
  vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = !a.v[i]; return r; }

// ---- type traits and conversions of <metal_stdlib> ----
template <class T, class U> constexpr bool is_same_v = std::is_same<T, U>::value;
template <class T> struct is_floating_point
    : std::integral_constant<bool, std::is_floating_point<T>::value ||
                                       std::is_same<std::remove_cv_t<T>, mtl_half>::value ||
                                       std::is_same<std::remove_cv_t<T>, mtl_bfloat>::value> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> constexpr bool is_integral_v = std::is_integral<T>::value;
template <class T> constexpr bool is_vector_v = is_vec<T>::value;
using std::enable_if_t;
using std::enable_if;
using std::is_same;
using std::conditional_t;
template <class To, class From> inline To as_type(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination sizes differ");
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}
template <class T, unsigned long N> struct array {
  T elems[N];
  T& operator[](unsigned long i) { return elems[i]; }
  const T& operator[](unsigned long i) const { return elems[i]; }
  static constexpr unsigned long size() { return N; }
};

// ---- math: CUDA's precise single-precision functions (no fast math) ----
// Templates, so that where a call is unqualified after `using namespace metal;` an exact CUDA
// overload of the same name (e.g. ::fabs(float)) is not ambiguous with these; both are precise.
#define EMU_F1(name, expr)                                                                    \
  template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>                \
  inline float name(T x) { return expr; }                                                     \
  inline mtl_half name(mtl_half x) { return mtl_half(name<float>(float(x))); }                \
  inline mtl_bfloat name(mtl_bfloat x) { return mtl_bfloat(name<float>(float(x))); }          \
  template <class T, int N> inline vec<T, N> name(const vec<T, N>& a) {                       \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i]); return r; }
#define EMU_F2(name, expr)                                                                    \
  template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>                \
  inline float name(T x, T y) { return expr; }                                                \
  inline mtl_half name(mtl_half x, mtl_half y) { return mtl_half(name<float>(float(x), float(y))); } \
  template <class T, int N> inline vec<T, N> name(const vec<T, N>& a, const vec<T, N>& b) {   \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = name(a.v[i], b.v[i]); return r; }
EMU_F1(sqrt, ::sqrtf(x)) EMU_F1(rsqrt, 1.0f / ::sqrtf(x)) EMU_F1(cbrt, ::cbrtf(x))
EMU_F1(fabs, ::fabsf(x)) EMU_F1(abs, ::fabsf(x)) EMU_F1(floor, ::floorf(x)) EMU_F1(ceil, ::ceilf(x))
EMU_F1(round, ::roundf(x)) EMU_F1(rint, ::rintf(x)) EMU_F1(trunc, ::truncf(x))
EMU_F1(exp, ::expf(x)) EMU_F1(exp2, ::exp2f(x)) EMU_F1(exp10, ::exp10f(x))
EMU_F1(log, ::logf(x)) EMU_F1(log2, ::log2f(x)) EMU_F1(log10, ::log10f(x))
EMU_F1(sin, ::sinf(x)) EMU_F1(cos, ::cosf(x)) EMU_F1(tan, ::tanf(x))
EMU_F1(asin, ::asinf(x)) EMU_F1(acos, ::acosf(x)) EMU_F1(atan, ::atanf(x))
EMU_F1(sinh, ::sinhf(x)) EMU_F1(cosh, ::coshf(x)) EMU_F1(tanh, ::tanhf(x))
EMU_F1(erf, ::erff(x)) EMU_F1(expm1, ::expm1f(x)) EMU_F1(log1p, ::log1pf(x))
EMU_F1(saturate, ::fminf(::fmaxf(x, 0.0f), 1.0f))
EMU_F1(sign, (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x))))
EMU_F2(pow, ::powf(x, y)) EMU_F2(powr, ::powf(x, y)) EMU_F2(atan2, ::atan2f(x, y))
EMU_F2(fmod, ::fmodf(x, y)) EMU_F2(copysign, ::copysignf(x, y)) EMU_F2(hypot, ::hypotf(x, y))
EMU_F2(fmin, ::fminf(x, y)) EMU_F2(fmax, ::fmaxf(x, y)) EMU_F2(divide, x / y)
// min/max ignore a NaN operand on floats (Metal's fmin/fmax), plain on integers.
EMU_F2(min, ::fminf(x, y)) EMU_F2(max, ::fmaxf(x, y))
#undef EMU_F1
#undef EMU_F2
template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
inline float fma(T x, T y, T z) { return ::fmaf(x, y, z); }
template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
inline float clamp(T x, T lo, T hi) { return ::fminf(::fmaxf(x, lo), hi); }
template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
inline float mix(T x, T y, T a) { return x + (y - x) * a; }
// x 2^e and the mantissa / exponent split (exact, as Metal's).
template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
inline float ldexp(T x, int e) { return ::ldexpf(x, e); }
template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
inline float frexp(T x, int& e) { return ::frexpf(x, &e); }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> inline T min(T a, T b) { return b < a ? b : a; }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> inline T max(T a, T b) { return a < b ? b : a; }
template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T, std::enable_if_t<std::is_integral<T>::value && std::is_signed<T>::value, int> = 0>
inline T abs(T a) { return a < 0 ? T(0) - a : a; }
inline bool isnan(float x) { return ::isnan(x); }
inline bool isinf(float x) { return ::isinf(x); }
inline bool isfinite(float x) { return ::isfinite(x); }
inline bool signbit(float x) { return ::signbit(x); }
inline bool isnan(mtl_half x) { return ::isnan(float(x)); }
inline bool isinf(mtl_half x) { return ::isinf(float(x)); }
inline bool isnan(mtl_bfloat x) { return ::isnan(float(x)); }
inline bool isinf(mtl_bfloat x) { return ::isinf(float(x)); }
template <class T, int N> inline vec<bool, N> isnan(const vec<T, N>& a) {
  vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = isnan(a.v[i]); return r; }
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <int N> inline bool all(const vec<bool, N>& b) { for (int i = 0; i < N; ++i) if (!b.v[i]) return false; return true; }
template <int N> inline bool any(const vec<bool, N>& b) { for (int i = 0; i < N; ++i) if (b.v[i]) return true; return false; }
template <class T, std::enable_if_t<is_scalar_<T>::value, int> = 0> inline T select(T a, T b, bool c) { return c ? b : a; }
template <class T, int N> inline T dot(const vec<T, N>& a, const vec<T, N>& b) {
  T s = a.v[0] * b.v[0]; for (int i = 1; i < N; ++i) s += a.v[i] * b.v[i]; return s; }
template <class T, int N> inline T length(const vec<T, N>& a) { return sqrt(dot(a, a)); }
template <class T> inline T popcount(T x) { return T(__popcll((unsigned long long)x)); }
// High half of the full product (Philox and other counter-based generators use it).
inline uint mulhi(uint a, uint b) { return __umulhi(a, b); }
inline int mulhi(int a, int b) { return __mulhi(a, b); }
inline ulong mulhi(ulong a, ulong b) { return __umul64hi(a, b); }
inline long mulhi(long a, long b) { return __mul64hi(a, b); }
namespace precise { using metal::sqrt; using metal::exp; using metal::log; using metal::fabs;
  using metal::pow; using metal::sin; using metal::cos; using metal::divide; using metal::fma; }
namespace fast { using namespace precise; }

// ---- barriers: threadgroup -> CUDA block ----
enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
enum class thread_scope : int { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
// __syncthreads also orders global memory among the block's threads, which mem_device asks for.
// Threads outside a partial edge group have exited, and exited threads never hold a barrier up.
inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) { __syncthreads(); }
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) { __syncwarp(__activemask()); }
inline void atomic_thread_fence(mem_flags = mem_flags::mem_none, memory_order = memory_order_relaxed,
                                thread_scope = thread_scope::thread_scope_device) { __threadfence(); }

// ---- SIMD-group functions: simdgroup -> warp, over the lanes active at the call ----
struct simd_vote {
  typedef unsigned long vote_t;
  vote_t v;
  simd_vote() = default;
  explicit simd_vote(vote_t x) : v(x) {}
  explicit operator vote_t() const { return v; }
  bool all() const { return v == 0xffffffffu; }
  bool any() const { return v != 0; }
};
namespace detail {
inline unsigned lane_id() { return threadIdx.x & 31u; }
// Any trivially copyable value crosses lanes as 32-bit words.
template <class T> inline T shfl(unsigned mask, const T& x, int src) {
  constexpr int W = (sizeof(T) + 3) / 4;
  unsigned w[W] = {};
  memcpy(w, &x, sizeof(T));
  for (int i = 0; i < W; ++i) w[i] = __shfl_sync(mask, w[i], src);
  T r;
  memcpy(&r, w, sizeof(T));
  return r;
}
template <class T> inline T sum_(T a, T b) { return a + b; }
template <class T> inline T prod_(T a, T b) { return a * b; }
template <class T> inline T max_(T a, T b) { return max(a, b); }
template <class T> inline T min_(T a, T b) { return min(a, b); }
template <class T> inline T and_(T a, T b) { return a & b; }
template <class T> inline T or_(T a, T b) { return a | b; }
template <class T> inline T xor_(T a, T b) { return a ^ b; }
inline bool and_(bool a, bool b) { return a && b; }
inline bool or_(bool a, bool b) { return a || b; }
inline bool xor_(bool a, bool b) { return a != b; }
// The emulator's reduction: a butterfly over offsets 16..1 where slot i (bit `off` clear) takes
// F(v[i], v[i|off]), an empty slot takes its partner's value, and lane 0's slot is the result.
// Every lane computes it with one shuffle per offset and nothing indexed at run time (an array of
// slots would live in local memory: a stack frame in every kernel that reduces), about what
// Apple's hardware reduction costs. Lane me holds slot me mod 2 off before offset `off` and slot
// me mod off after it, so slot 0 at the end. A full warp is the plain butterfly; the operands
// stay in lane order, as F may be neither commutative in its bits (NaNs, signed zeros) nor
// associative.
//
// A partial warp follows from the emulator's loop: by induction over the offsets, before offset
// `off`
//   - slot s holds a value iff an active lane is congruent to s modulo 2 off (a slot is filled
//     once it or its partner was), and
//   - every such lane holds that value, bit for bit (each computed it from the same operands in
//     the same order).
// Lane me's own slot m = me mod 2 off is filled. If its partner p = m ^ off is filled too, the
// lowest active lane congruent to p holds p's value (lane me ^ off may be inactive, and a
// shuffle from an inactive lane reads nothing) and the lower slot becomes F(lower, upper); if p
// is empty, the lower slot ends with m's value either way (kept, or taken from its partner).
// The mask is the same in every lane, and every lane runs every shuffle (__shfl_sync needs all
// of the mask). tests/emulator/test_emu_simd.py checks a model of this, lane by lane, against
// the emulator's loop and its bits.
template <class T, T (*F)(T, T)> inline T reduce(T x) {
  const unsigned mask = __activemask(), me = lane_id();
  if (mask == 0xffffffffu) {
#pragma unroll
    for (unsigned off = 16u; off; off >>= 1) {
      const T y = shfl(mask, x, int(me ^ off));
      x = (me & off) ? F(y, x) : F(x, y);
    }
    return x;
  }
  // one bit for each lane congruent to 0 modulo 2 off: 0x00000001 for off = 16, then
  // 0x00010001, ... 0x55555555 for off = 1
  unsigned congruent = 1u;
#pragma unroll
  for (unsigned off = 16u; off; off >>= 1) {
    const unsigned p = (me & (2u * off - 1u)) ^ off;
    const unsigned holders = mask & (congruent << p);
    const T y = shfl(mask, x, holders ? __ffs(int(holders)) - 1 : int(me));
    if (holders) x = (me & off) ? F(y, x) : F(x, y);
    congruent |= congruent << off;
  }
  return x;
}
// Prefix operations in lane order over the active lanes (the emulator's order). Every lane runs
// every shuffle: a lane leaving the loop early would desert the others' __shfl_sync.
template <class T, T (*F)(T, T)> inline T prefix(T x, bool exclusive, T ident) {
  const unsigned mask = __activemask(), me = lane_id();
  T acc = ident, mine = ident;
  bool first = true;
  for (unsigned l = 0; l < 32u; ++l) {
    if (!(mask & (1u << l))) continue;
    const T y = shfl(mask, x, int(l));
    const T next = first ? y : F(acc, y);
    if (l == me) mine = exclusive ? acc : next;
    acc = next;
    first = false;
  }
  return mine;
}
}  // namespace detail
#define EMU_SIMD_RED(name, F) \
  template <class T> inline T name(T x) { return detail::reduce<T, &detail::F<T>>(x); }
EMU_SIMD_RED(simd_sum, sum_) EMU_SIMD_RED(simd_product, prod_) EMU_SIMD_RED(simd_max, max_)
EMU_SIMD_RED(simd_min, min_) EMU_SIMD_RED(simd_and, and_) EMU_SIMD_RED(simd_or, or_)
EMU_SIMD_RED(simd_xor, xor_)
#undef EMU_SIMD_RED
template <class T> inline T simd_prefix_inclusive_sum(T x) { return detail::prefix<T, &detail::sum_<T>>(x, false, T(0)); }
template <class T> inline T simd_prefix_exclusive_sum(T x) { return detail::prefix<T, &detail::sum_<T>>(x, true, T(0)); }
template <class T> inline T simd_prefix_inclusive_product(T x) { return detail::prefix<T, &detail::prod_<T>>(x, false, T(1)); }
template <class T> inline T simd_prefix_exclusive_product(T x) { return detail::prefix<T, &detail::prod_<T>>(x, true, T(1)); }
template <class T, class I> inline T simd_shuffle(T x, I lane) { return detail::shfl(__activemask(), x, int(lane)); }
template <class T, class I> inline T simd_broadcast(T x, I lane) { return detail::shfl(__activemask(), x, int(lane)); }
template <class T> inline T simd_broadcast_first(T x) {
  const unsigned m = __activemask();
  return detail::shfl(m, x, __ffs(m) - 1);
}
// Out-of-range sources keep the lane's own value, as Metal and the emulator define it.
template <class T, class I> inline T simd_shuffle_up(T x, I d) {
  const int me = int(detail::lane_id()), s = me - int(d);
  return detail::shfl(__activemask(), x, s < 0 ? me : s);
}
template <class T, class I> inline T simd_shuffle_down(T x, I d) {
  const int me = int(detail::lane_id()), s = me + int(d);
  return detail::shfl(__activemask(), x, s > 31 ? me : s);
}
template <class T, class I> inline T simd_shuffle_xor(T x, I m) {
  return detail::shfl(__activemask(), x, int(detail::lane_id() ^ (unsigned(m) & 31u)));
}
template <class T, class I> inline T simd_shuffle_rotate_up(T x, I d) {
  return detail::shfl(__activemask(), x, int((detail::lane_id() + 32u - (unsigned(d) & 31u)) & 31u));
}
template <class T, class I> inline T simd_shuffle_rotate_down(T x, I d) {
  return detail::shfl(__activemask(), x, int((detail::lane_id() + (unsigned(d) & 31u)) & 31u));
}
inline simd_vote simd_ballot(bool b) { return simd_vote(__ballot_sync(__activemask(), b)); }
inline simd_vote simd_active_threads_mask() { return simd_vote(__activemask()); }
inline bool simd_all(bool b) { return __all_sync(__activemask(), b); }
inline bool simd_any(bool b) { return __any_sync(__activemask(), b); }
inline bool simd_is_first() { return detail::lane_id() == unsigned(__ffs(__activemask()) - 1); }

// ---- atomics (device and threadgroup memory alike: CUDA's atomics are generic) ----
template <class T> struct _atomic { T v; };
typedef _atomic<int> atomic_int;
typedef _atomic<unsigned int> atomic_uint;
typedef _atomic<float> atomic_float;
template <class T> using atomic = _atomic<T>;
template <class T> inline void atomic_store_explicit(_atomic<T>* a, T x, memory_order) { atomicExch(&a->v, x); }
template <class T> inline T atomic_load_explicit(_atomic<T>* a, memory_order) { return *(volatile T*)&a->v; }
template <class T> inline T atomic_exchange_explicit(_atomic<T>* a, T x, memory_order) { return atomicExch(&a->v, x); }
template <class T> inline T atomic_fetch_add_explicit(_atomic<T>* a, T x, memory_order) { return atomicAdd(&a->v, x); }
template <class T> inline T atomic_fetch_sub_explicit(_atomic<T>* a, T x, memory_order) { return atomicAdd(&a->v, T(0) - x); }
template <class T> inline T atomic_fetch_max_explicit(_atomic<T>* a, T x, memory_order) { return atomicMax(&a->v, x); }
template <class T> inline T atomic_fetch_min_explicit(_atomic<T>* a, T x, memory_order) { return atomicMin(&a->v, x); }
template <class T> inline T atomic_fetch_and_explicit(_atomic<T>* a, T x, memory_order) { return atomicAnd(&a->v, x); }
template <class T> inline T atomic_fetch_or_explicit(_atomic<T>* a, T x, memory_order) { return atomicOr(&a->v, x); }
template <class T> inline T atomic_fetch_xor_explicit(_atomic<T>* a, T x, memory_order) { return atomicXor(&a->v, x); }
template <class T> inline bool atomic_compare_exchange_weak_explicit(_atomic<T>* a, T* expected, T desired,
                                                                     memory_order, memory_order) {
  const T old = atomicCAS(&a->v, *expected, desired);
  if (old == *expected) return true;
  *expected = old;
  return false;
}

// ---- simdgroup_matrix 8x8, distributed over the warp as over an Apple simdgroup ----
// Each lane owns two elements of the tile: row r, columns c and c+1, with
//   r = 4 * bit4(lane) + bits1..2(lane),   c = 4 * bit3(lane) + 2 * bit0(lane)
// (the layout Apple GPUs are observed to use, which MLX's BaseMMAFrag::get_coord relies on, and
// the CPU emulator's detail::owned). Metal exposes the elements only through simdgroup_load,
// simdgroup_store and thread_elements(), so any bijection would give the same results; this one
// makes thread_elements() agree with the CPU emulator and with Apple's hardware as observed.
// The operations are simdgroup-wide, as on Apple GPUs: all 32 lanes take part (a partial
// simdgroup has no owner for some elements; the CPU emulator refuses it).
namespace detail {
inline int mat_row(unsigned l) { return int(((l >> 4) & 1u) * 4u + ((l >> 1) & 3u)); }
inline int mat_col(unsigned l) { return int(((l >> 3) & 1u) * 4u + (l & 1u) * 2u); }
// The lane owning element (r, c) (and its neighbour c ^ 1).
inline int mat_lane(int r, int c) { return ((r >> 2) & 1) << 4 | (r & 3) << 1 | ((c >> 2) & 1) << 3 | ((c >> 1) & 1); }
}  // namespace detail
// A tile that simdgroup_load read from memory also keeps the lane's operands of a product (see
// simdgroup_multiply_accumulate): row r, as the left factor, and columns c, c + 1, as the right
// one, in float. The lane reads them with the tile, so a product of loaded tiles needs no
// exchange between lanes. They are a copy, not a second state: `loaded` says whether they
// hold the tile's values (a product's result, a filled tile or one changed through
// thread_elements() has none), and kernels see only `el`. After inlining `loaded` is a constant
// at each product, so the copy a kernel never multiplies by (a tile only stored, the right
// operands of a left factor) is never read and its loads are dropped by the compiler.
template <class T, int R, int C> struct simdgroup_matrix {
  static_assert(R == 8 && C == 8, "only 8x8 simdgroup matrices exist");
  vec<T, 2> el;  // this lane's elements (r, c) and (r, c + 1)
  float row[8];      // (r, 0 .. 7), when loaded
  float cols[2][8];  // (0 .. 7, c) and (0 .. 7, c + 1), when loaded
  bool loaded = false;
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T d) {
    const unsigned l = detail::lane_id();
    const int r = detail::mat_row(l), c = detail::mat_col(l);
    el = vec<T, 2>(r == c ? d : T(0), r == c + 1 ? d : T(0));
  }
  vec<T, 2>& thread_elements() { loaded = false; return el; }
  vec<T, 2> thread_elements() const { return el; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<mtl_half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<mtl_bfloat, 8, 8> simdgroup_bfloat8x8;
template <class T, int R, int C> inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, R, C> m; m.el = vec<T, 2>(v, v); return m; }
namespace detail {
// Element (r, c) of the tile at `p` (row stride epr, origin (x, y) = (column, row)), read
// transposed where asked: the CPU emulator's index arithmetic (unsigned long, then signed).
inline long long mat_index(int r, int c, unsigned long epr, const vec<unsigned long, 2>& o, bool tr) {
  return tr ? (long long)((o.v[1] + (unsigned long)c) * epr + o.v[0] + (unsigned long)r)
            : (long long)((o.v[1] + (unsigned long)r) * epr + o.v[0] + (unsigned long)c);
}
// Whether simdgroup_load may read a tile of floats at `p` as one 8-byte access a lane:
// untransposed, the pair (r, c), (r, c + 1) is adjacent, and with an even row stride and an
// 8-byte aligned element (0, 0) every lane's pair is aligned. The test is uniform across the warp
// (p, epr and the origin are), so no lane diverges; for a threadgroup tile it reads the shared
// offset, whose alignment the compiler sees (tg_alloc aligns threadgroup arrays to 16 bytes, as
// Metal does), and folds away. One access instead of two halves the loads, and 8-byte shared
// accesses are served a half warp at a time, so rows 8 mod 16 floats apart (gemm.h's staging)
// load without bank conflicts; the values are those of the two scalar reads. (Stores need no
// such path: ptxas pairs them itself where it can prove the alignment.)
template <class P> struct is_float_ptr : std::false_type {};
template <> struct is_float_ptr<float*> : std::true_type {};
template <> struct is_float_ptr<const float*> : std::true_type {};
inline bool mat_pairs(const float* p, unsigned long epr, const vec<unsigned long, 2>& o, bool tr) {
  const float* q = p + mat_index(0, 0, epr, o, false);
  const unsigned long long a = __isShared(q) ? (unsigned long long)__cvta_generic_to_shared(q)
                                             : reinterpret_cast<unsigned long long>(q);
  return !tr && epr % 2 == 0 && (a & 7) == 0;
}
}  // namespace detail
// Loads and stores are simdgroup collectives in the CPU emulator (a rendezvous): the warp
// synchronises around them so that the lanes' earlier writes are seen and later ones come after.
template <class T, class P> inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, P src, unsigned long elements_per_row = 8,
                                                       vec<unsigned long, 2> origin = vec<unsigned long, 2>(0ul), bool transpose = false) {
  __syncwarp(__activemask());
  const unsigned l = detail::lane_id();
  const int r = detail::mat_row(l), c = detail::mat_col(l);
  d.loaded = true;
  if constexpr (detail::is_float_ptr<P>::value && std::is_same<T, float>::value) {
    if (detail::mat_pairs(src, elements_per_row, origin, transpose)) {
      const ::float2 v = *reinterpret_cast<const ::float2*>(src + detail::mat_index(r, c, elements_per_row, origin, false));
      d.el = vec<T, 2>(v.x, v.y);
      // row r as two float4s where it is 16-byte aligned (gemm.h's stages are), else four float2s
      const float* rp = src + detail::mat_index(r, 0, elements_per_row, origin, false);
      const unsigned long long ra = __isShared(rp) ? (unsigned long long)__cvta_generic_to_shared(rp)
                                                    : reinterpret_cast<unsigned long long>(rp);
      if (elements_per_row % 4 == 0 && (ra & 15) == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const ::float4 q = reinterpret_cast<const ::float4*>(rp)[h];
          d.row[4 * h] = q.x; d.row[4 * h + 1] = q.y; d.row[4 * h + 2] = q.z; d.row[4 * h + 3] = q.w;
        }
      } else {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const ::float2 q = reinterpret_cast<const ::float2*>(rp)[h];
          d.row[2 * h] = q.x; d.row[2 * h + 1] = q.y;
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const ::float2 q = *reinterpret_cast<const ::float2*>(src + detail::mat_index(k, c, elements_per_row, origin, false));
        d.cols[0][k] = q.x; d.cols[1][k] = q.y;
      }
      return;
    }
  }
  d.el = vec<T, 2>(T(src[detail::mat_index(r, c, elements_per_row, origin, transpose)]),
                   T(src[detail::mat_index(r, c + 1, elements_per_row, origin, transpose)]));
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    d.row[k] = float(T(src[detail::mat_index(r, k, elements_per_row, origin, transpose)]));
    d.cols[0][k] = float(T(src[detail::mat_index(k, c, elements_per_row, origin, transpose)]));
    d.cols[1][k] = float(T(src[detail::mat_index(k, c + 1, elements_per_row, origin, transpose)]));
  }
}
template <class T, class P> inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& s, P dst, unsigned long elements_per_row = 8,
                                                        vec<unsigned long, 2> origin = vec<unsigned long, 2>(0ul), bool transpose = false) {
  __syncwarp(__activemask());
  const unsigned l = detail::lane_id();
  const int r = detail::mat_row(l), c = detail::mat_col(l);
  dst[detail::mat_index(r, c, elements_per_row, origin, transpose)] = s.el.v[0];
  dst[detail::mat_index(r, c + 1, elements_per_row, origin, transpose)] = s.el.v[1];
  __syncwarp(__activemask());
}
// D = A B + C. Lane (r, c) needs row r of A and columns c, c + 1 of B; it computes
//   d[r][j] = fma(a[r][7], b[7][j], ... fma(a[r][0], b[0][j], c[r][j]) ...),  j = c, c + 1,
// in float, k ascending, rounded once to T: the CPU emulator's arithmetic, bit for bit.
// Where both tiles were loaded from memory the lane has its operands already (the copies
// simdgroup_load keeps): 16 fmas, no exchange. On an Apple GPU the product is one hardware
// operation; here the exchange below, with its warp barriers and lane-dependent addressing,
// was the larger part of gemm.h's instructions (see docs/lu.rst), where the loaded copies cost
// the tile loads alone (a left factor's row: 2 float4 reads, a right factor's columns: 8
// float2 reads). Otherwise (a product's result as a factor) the operands travel through a
// per-warp scratch of 128 floats in dynamic shared memory (cuda.py passes kMmaScratchBytes per
// warp to the kernels that reach a product): each lane stores its
// elements of A and of B transposed (3 stores), then reads its row of A and its two rows of B^T
// as float4s (6 loads). The four lanes of a row of A (the eight of a column of B) read the same
// addresses, which shared memory serves at once, so a product moves about 10 wavefronts through
// shared memory where 24 warp shuffles move 24. Without the scratch (a launch that did not
// provide it) the operands come by shuffles: 8 for the row of A, 16 for the columns of B.
namespace detail {
constexpr unsigned kMmaScratchFloats = 128;  // A, then B^T, 64 floats each
constexpr unsigned kMmaScratchBytes = kMmaScratchFloats * sizeof(float);
extern __shared__ __align__(16) float mma_scratch[];
inline unsigned dynamic_smem_bytes() {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}
// Float k of row i of an 8x8 tile in its 64 floats: each row is two float4 blocks, block
// (i, h = k / 4) at position 8 h + ((i + skew h) mod 8). With skew 4 for A and 1 for B^T, the
// words or blocks one instruction touches fall on different banks: A's float2 stores (rows 0-3
// or 4-7 per half-warp), the stores of B^T (rows c, or c + 1, for the four even c, as scalars)
// and the float4 loads of either.
constexpr int kMmaSkewA = 4;
constexpr int kMmaSkewBt = 1;
inline int mma_slot(int i, int k, int skew) {
  const int h = k >> 2;
  return ((h << 3) + ((i + skew * h) & 7)) * 4 + (k & 3);
}
// By value: the float4s are loaded whole (a reference into shared memory would let the
// compiler read it a float at a time).
inline float mma_dot8(float acc, ::float4 a0, ::float4 a1, ::float4 b0, ::float4 b1) {
  acc = __fmaf_rn(a0.x, b0.x, acc); acc = __fmaf_rn(a0.y, b0.y, acc);
  acc = __fmaf_rn(a0.z, b0.z, acc); acc = __fmaf_rn(a0.w, b0.w, acc);
  acc = __fmaf_rn(a1.x, b1.x, acc); acc = __fmaf_rn(a1.y, b1.y, acc);
  acc = __fmaf_rn(a1.z, b1.z, acc); acc = __fmaf_rn(a1.w, b1.w, acc);
  return acc;
}
}  // namespace detail
template <class T, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  const unsigned mask = __activemask(), l = detail::lane_id(), warp = threadIdx.x >> 5;
  const int r = detail::mat_row(l), col = detail::mat_col(l);
  const float a0 = float(a.el.v[0]), a1 = float(a.el.v[1]), b0 = float(b.el.v[0]), b1 = float(b.el.v[1]);
  float acc0 = float(c.el.v[0]), acc1 = float(c.el.v[1]);
  if (a.loaded && b.loaded) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      acc0 = __fmaf_rn(a.row[k], b.cols[0][k], acc0);
      acc1 = __fmaf_rn(a.row[k], b.cols[1][k], acc1);
    }
  } else if (detail::dynamic_smem_bytes() >= (warp + 1u) * detail::kMmaScratchBytes) {
    float* sa = detail::mma_scratch + warp * detail::kMmaScratchFloats;
    float* sbt = sa + 64;
    __syncwarp(mask);  // the lanes' reads of the previous product are done
    const int sk_a = detail::kMmaSkewA, sk_b = detail::kMmaSkewBt;
    reinterpret_cast<::float2*>(sa)[detail::mma_slot(r, col, sk_a) >> 1] = ::make_float2(a0, a1);
    sbt[detail::mma_slot(col, r, sk_b)] = b0;
    sbt[detail::mma_slot(col + 1, r, sk_b)] = b1;
    __syncwarp(mask);
    const ::float4* ra = reinterpret_cast<const ::float4*>(sa);
    const ::float4* rb = reinterpret_cast<const ::float4*>(sbt);
    const ::float4 x0 = ra[detail::mma_slot(r, 0, sk_a) >> 2], x1 = ra[detail::mma_slot(r, 4, sk_a) >> 2];
    const ::float4 y0 = rb[detail::mma_slot(col, 0, sk_b) >> 2], y1 = rb[detail::mma_slot(col, 4, sk_b) >> 2];
    const ::float4 z0 = rb[detail::mma_slot(col + 1, 0, sk_b) >> 2];
    const ::float4 z1 = rb[detail::mma_slot(col + 1, 4, sk_b) >> 2];
    acc0 = detail::mma_dot8(acc0, x0, x1, y0, y1);
    acc1 = detail::mma_dot8(acc1, x0, x1, z0, z1);
  } else {
#pragma unroll
    for (int k = 0; k < 8; k += 2) {
      const int la = detail::mat_lane(r, k);
      const float ak0 = __shfl_sync(mask, a0, la), ak1 = __shfl_sync(mask, a1, la);
      const int lb0 = detail::mat_lane(k, col), lb1 = detail::mat_lane(k + 1, col);
      const float bk00 = __shfl_sync(mask, b0, lb0), bk01 = __shfl_sync(mask, b1, lb0);
      const float bk10 = __shfl_sync(mask, b0, lb1), bk11 = __shfl_sync(mask, b1, lb1);
      acc0 = __fmaf_rn(ak0, bk00, acc0);
      acc1 = __fmaf_rn(ak0, bk01, acc1);
      acc0 = __fmaf_rn(ak1, bk10, acc0);
      acc1 = __fmaf_rn(ak1, bk11, acc1);
    }
  }
  d.el = vec<T, 2>(T(acc0), T(acc1));
  d.loaded = false;
}
template <class T, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, 8, 8>(T(0)));
}
}  // namespace metal
using metal::as_type;

#define EMU_VEC_TYPES(T, name)                                                                 \
  typedef metal::vec<T, 2> mtl_##name##2; typedef metal::vec<T, 3> mtl_##name##3;              \
  typedef metal::vec<T, 4> mtl_##name##4; typedef metal::packed_vec<T, 2> mtl_packed_##name##2; \
  typedef metal::packed_vec<T, 3> mtl_packed_##name##3; typedef metal::packed_vec<T, 4> mtl_packed_##name##4;
EMU_VEC_TYPES(float, float) EMU_VEC_TYPES(mtl_half, half) EMU_VEC_TYPES(mtl_bfloat, bfloat)
EMU_VEC_TYPES(int, int) EMU_VEC_TYPES(uint, uint) EMU_VEC_TYPES(short, short) EMU_VEC_TYPES(ushort, ushort)
EMU_VEC_TYPES(char, char) EMU_VEC_TYPES(uchar, uchar) EMU_VEC_TYPES(long, long) EMU_VEC_TYPES(ulong, ulong)
EMU_VEC_TYPES(bool, bool)
#undef EMU_VEC_TYPES

// The launch bound of every kernel wrapper: the kernel's own thread limit (Metal's 1024, or its
// max_total_threads_per_threadgroup), or EMU_GROUP_BOUND where cuda.py compiles the kernel again
// for the group size it is launched with (ptxas may then give each thread more registers).
#ifdef EMU_GROUP_BOUND
#define EMU_LAUNCH_BOUND(maxt) ((EMU_GROUP_BOUND) < (maxt) ? (EMU_GROUP_BOUND) : (maxt))
#else
#define EMU_LAUNCH_BOUND(maxt) (maxt)
#endif

#define METAL_FUNC inline
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define FLT_EPSILON 1.1920928955078125e-07f
#define MAXFLOAT 3.402823466e+38f
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define INT_MAX 2147483647
#define UINT_MAX 4294967295u
#define M_PI_F 3.14159265358979323846264338327950288f

// ---- what the emulator's front end emits, for the GPU ----
namespace emu {
// device/constant pointers are plain pointers (no bounds checks on the GPU).
template <class T> using dptr = T*;
template <class T> using cptr = const T*;
template <int... I> struct iseq {};
// `threadgroup T a[N];` -> `auto& a = tg_alloc<site, T[N]>();`: one __shared__ object per site,
// 16-byte aligned like Metal's threadgroup allocations (so vector accesses can be proven aligned).
template <int Site, class T> inline T& tg_alloc() {
  __shared__ __align__(16) T storage;
  return storage;
}
template <class P> inline bool in_threadgroup(const P& p) { return __isShared((const void*)&*p); }
template <class To, class F> inline To reinterpret_cast_(F&& f) { return reinterpret_cast<To>(f); }

// The launch: buffer i is a device address (tensor) or an offset into `blob` (the bytes Metal's
// setBytes would bind: Python scalars and lists), which lives in the kernel's parameter space
// (__grid_constant__, so taking its address copies nothing).
constexpr int kMaxBuffers = 31;
constexpr int kBlobBytes = 2048;
struct Args {
  unsigned long long addr[kMaxBuffers];
  unsigned int in_blob;  // bit i: buffer i lies in blob at offset addr[i]
  unsigned int grid[3];
  unsigned int group[3];
  unsigned int ngroups[3];
  alignas(16) char blob[kBlobBytes];
};
// The Python side (cuda.py, _Args) packs this layout (in_blob at 248, blob at 288); both sides
// check the size.
static_assert(sizeof(Args) == 2336 && sizeof(unsigned long long) * kMaxBuffers == 248,
              "emu::Args layout changed: update cuda.py");
struct u3 { unsigned int v[3]; };
inline u3 U(unsigned int a) { u3 r = {{a, 0u, 0u}}; return r; }
struct Ctx { u3 tid, lid, tgid, tpg, dtpg, grid, ngroups; unsigned int lidx, nlanes, nsg, dnsg; };

// Metal's dispatchThreads geometry on a 1-D CUDA block of group[0]*group[1]*group[2] threads:
// a partial edge group is clipped, its threads numbered densely by the clipped size (so warps
// are Metal's simdgroups), and the threads past it return at once.
inline bool setup(const Args& A, Ctx& C) {
  unsigned long long b = blockIdx.x;
  for (int i = 0; i < 3; ++i) {
    C.tgid.v[i] = (unsigned int)(b % A.ngroups[i]);
    b /= A.ngroups[i];
    const unsigned int rem = A.grid[i] - C.tgid.v[i] * A.group[i];
    C.tpg.v[i] = rem < A.group[i] ? rem : A.group[i];
    C.dtpg.v[i] = A.group[i];
    C.grid.v[i] = A.grid[i];
    C.ngroups.v[i] = A.ngroups[i];
  }
  C.nlanes = C.tpg.v[0] * C.tpg.v[1] * C.tpg.v[2];
  C.lidx = threadIdx.x;
  if (C.lidx >= C.nlanes) return false;
  C.lid.v[0] = C.lidx % C.tpg.v[0];
  C.lid.v[1] = (C.lidx / C.tpg.v[0]) % C.tpg.v[1];
  C.lid.v[2] = C.lidx / (C.tpg.v[0] * C.tpg.v[1]);
  for (int i = 0; i < 3; ++i) C.tid.v[i] = C.tgid.v[i] * A.group[i] + C.lid.v[i];
  C.nsg = (C.nlanes + 31u) / 32u;
  C.dnsg = (A.group[0] * A.group[1] * A.group[2] + 31u) / 32u;
  return true;
}
inline const char* addr(const Args& A, int i) {
  return (A.in_blob >> i) & 1u ? A.blob + A.addr[i] : (const char*)A.addr[i];
}
// Kernel parameters: pointers, `constant T&` references and by-value structs read their buffer.
template <class P> struct binder { static P get(const Args& A, int b) { return *(const P*)addr(A, b); } };
template <class T> struct binder<T*> { static T* get(const Args& A, int b) { return (T*)addr(A, b); } };
template <class T> struct binder<T&> { static T& get(const Args& A, int b) { return *(T*)addr(A, b); } };
template <class P> inline P bind(const Args& A, int b) { return binder<P>::get(A, b); }
// A `device` pointer or reference parameter: the host binds a tensor there, a global address,
// and says so to the compiler. A generic pointer could address threadgroup (shared) memory, so
// a load through it may not pass an earlier threadgroup store: a loop `stage[e] = a[e]` would
// wait for each load in turn, where Metal's compiler, which sees the address spaces, issues them
// together. Bytes bound to a `device` parameter (a Python scalar or list, in the parameter
// block) take the kernel compiled with EMU_GENERIC_DEVICE, where every parameter is generic.
template <class P> struct device_binder { static P get(const Args& A, int b) { return bind<P>(A, b); } };
template <class T> struct device_binder<T*> {
  static T* get(const Args& A, int b) {
    T* p = (T*)A.addr[b];
    __builtin_assume(__isGlobal(p));
    return p;
  }
};
template <class T> struct device_binder<T&> {
  static T& get(const Args& A, int b) { return *device_binder<T*>::get(A, b); }
};
template <class P> inline P bind_device(const Args& A, int b) {
#ifdef EMU_GENERIC_DEVICE
  return bind<P>(A, b);
#else
  return device_binder<P>::get(A, b);
#endif
}
// Builtin attributes: uint/ushort scalars and 2-/3-component vectors.
template <class P> struct bconv { static P get(const u3& u) { return P(u.v[0]); } };
template <class T> struct bconv<metal::vec<T, 2>> { static metal::vec<T, 2> get(const u3& u) { return metal::vec<T, 2>(T(u.v[0]), T(u.v[1])); } };
template <class T> struct bconv<metal::vec<T, 3>> { static metal::vec<T, 3> get(const u3& u) { return metal::vec<T, 3>(T(u.v[0]), T(u.v[1]), T(u.v[2])); } };
template <class P> inline std::remove_cv_t<std::remove_reference_t<P>> builtin(const u3& u) {
  return bconv<std::remove_cv_t<std::remove_reference_t<P>>>::get(u);
}
template <class F> struct fn_args;
template <class R_, class... A_> struct fn_args<R_ (*)(A_...)> {
  template <int I, class... B> struct at;
  template <class H, class... Tl> struct at<0, H, Tl...> { typedef H type; };
  template <int I, class H, class... Tl> struct at<I, H, Tl...> { typedef typename at<I - 1, Tl...>::type type; };
  template <int I> using arg = typename at<I, A_...>::type;
};
template <class F, int I> using arg_t = typename fn_args<F>::template arg<I>;
}  // namespace emu
