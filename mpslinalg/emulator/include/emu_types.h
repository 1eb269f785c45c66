// Scalar and vector types of MSL: half (_Float16), bfloat (bit-exact struct), vec<T,N>, packed_vec<T,N>.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

typedef _Float16 half;
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

// bfloat: stored as the upper 16 bits of a float; every operation rounds back (round-to-nearest-even),
// which is what makes it bit-exact against torch's CPU bfloat16.
struct bfloat {
  uint16_t bits;
  bfloat() = default;
  static uint16_t round(float f) {
    uint32_t u; __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  template <class S, class = std::enable_if_t<std::is_arithmetic<S>::value || std::is_same<S, half>::value>>
  bfloat(S v) : bits(round(float(v))) {}
  operator float() const { uint32_t u = uint32_t(bits) << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
  static bfloat from_bits(uint16_t b) { bfloat r; r.bits = b; return r; }
  bfloat operator-() const { return from_bits(uint16_t(bits ^ 0x8000u)); }
  bfloat operator+() const { return *this; }
};
#define EMU_BF_OP(op)                                                                                   \
  inline bfloat operator op(bfloat a, bfloat b) { return bfloat(float(a) op float(b)); }                \
  template <class S, std::enable_if_t<std::is_integral<S>::value, int> = 0>                             \
  inline bfloat operator op(bfloat a, S b) { return bfloat(float(a) op float(b)); }                     \
  template <class S, std::enable_if_t<std::is_integral<S>::value, int> = 0>                             \
  inline bfloat operator op(S a, bfloat b) { return bfloat(float(a) op float(b)); }                     \
  inline float operator op(bfloat a, float b) { return float(a) op b; }                                 \
  inline float operator op(float a, bfloat b) { return a op float(b); }                                 \
  inline float operator op(bfloat a, half b) { return float(a) op float(b); }                           \
  inline float operator op(half a, bfloat b) { return float(a) op float(b); }                           \
  inline bfloat& operator op##=(bfloat& a, bfloat b) { return a = bfloat(float(a) op float(b)); }       \
  template <class S, std::enable_if_t<std::is_arithmetic<S>::value, int> = 0>                           \
  inline bfloat& operator op##=(bfloat& a, S b) { return a = bfloat(float(a) op float(b)); }
EMU_BF_OP(+) EMU_BF_OP(-) EMU_BF_OP(*) EMU_BF_OP(/)
#undef EMU_BF_OP
#define EMU_BF_CMP(op)                                                                          \
  inline bool operator op(bfloat a, bfloat b) { return float(a) op float(b); }                  \
  template <class S, std::enable_if_t<std::is_arithmetic<S>::value, int> = 0>                   \
  inline bool operator op(bfloat a, S b) { return float(a) op float(b); }                       \
  template <class S, std::enable_if_t<std::is_arithmetic<S>::value, int> = 0>                   \
  inline bool operator op(S a, bfloat b) { return float(a) op float(b); }
EMU_BF_CMP(<) EMU_BF_CMP(>) EMU_BF_CMP(<=) EMU_BF_CMP(>=) EMU_BF_CMP(==) EMU_BF_CMP(!=)
#undef EMU_BF_CMP
inline bfloat& operator++(bfloat& a) { return a = a + bfloat(1.0f); }
inline bfloat& operator--(bfloat& a) { return a = a - bfloat(1.0f); }

namespace metal {
template <class T> struct is_emu_scalar : std::integral_constant<bool, std::is_arithmetic<T>::value> {};
template <> struct is_emu_scalar<half> : std::true_type {};
template <> struct is_emu_scalar<bfloat> : std::true_type {};

template <class T, int N> struct vec;
template <class T, int N> struct packed_vec;

template <class T> struct is_vec : std::false_type {};
template <class T, int N> struct is_vec<vec<T, N>> : std::true_type {};

// Components and a flat array share storage (GCC documents union punning as supported).
#define EMU_VEC_COMMON(N)                                                                              \
  using value_type = T;                                                                                \
  static constexpr int size = N;                                                                       \
  vec() = default;                                                                                     \
  template <class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>                               \
  constexpr vec(S s) { for (int i = 0; i < N; ++i) v[i] = T(s); }                                      \
  template <class U, std::enable_if_t<!std::is_same<U, T>::value, int> = 0>                            \
  explicit constexpr vec(const vec<U, N>& o) { for (int i = 0; i < N; ++i) v[i] = T(o.v[i]); }         \
  constexpr vec(const packed_vec<T, N>& o) { for (int i = 0; i < N; ++i) v[i] = o.v[i]; }              \
  constexpr T& operator[](int i) { return v[i]; }                                                      \
  constexpr const T& operator[](int i) const { return v[i]; }                                          \
  template <int... I> constexpr vec<T, sizeof...(I)> swz() const { return vec<T, sizeof...(I)>(v[I]...); } \
  template <int... I> struct wproxy {                                                                  \
    vec& p;                                                                                            \
    using R = vec<T, sizeof...(I)>;                                                                    \
    operator R() const { return R(p.v[I]...); }                                                        \
    wproxy& operator=(const R& r) { int k = 0; int idx[] = {I...}; R c = r; for (int j : idx) p.v[j] = c.v[k++]; return *this; } \
    wproxy& operator+=(const R& r) { return *this = R(*this) + r; }                                    \
    wproxy& operator-=(const R& r) { return *this = R(*this) - r; }                                    \
    wproxy& operator*=(const R& r) { return *this = R(*this) * r; }                                    \
    wproxy& operator/=(const R& r) { return *this = R(*this) / r; }                                    \
  };                                                                                                   \
  template <int... I> wproxy<I...> swzw() { return wproxy<I...>{*this}; }

template <class T> struct alignas(2 * sizeof(T)) vec<T, 2> {
  union { struct { T x, y; }; T v[2]; };
  EMU_VEC_COMMON(2)
  constexpr vec(T a, T b) : v{a, b} {}
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 3> {
  union { struct { T x, y, z; }; T v[3]; };
  EMU_VEC_COMMON(3)
  constexpr vec(T a, T b, T c) : v{a, b, c} {}
  constexpr vec(const vec<T, 2>& a, T c) : v{a.v[0], a.v[1], c} {}
  constexpr vec(T a, const vec<T, 2>& b) : v{a, b.v[0], b.v[1]} {}
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 4> {
  union { struct { T x, y, z, w; }; T v[4]; };
  EMU_VEC_COMMON(4)
  constexpr vec(T a, T b, T c, T d) : v{a, b, c, d} {}
  constexpr vec(const vec<T, 2>& a, const vec<T, 2>& b) : v{a.v[0], a.v[1], b.v[0], b.v[1]} {}
  constexpr vec(const vec<T, 2>& a, T c, T d) : v{a.v[0], a.v[1], c, d} {}
  constexpr vec(T a, const vec<T, 2>& b, T d) : v{a, b.v[0], b.v[1], d} {}
  constexpr vec(T a, T b, const vec<T, 2>& c) : v{a, b, c.v[0], c.v[1]} {}
  constexpr vec(const vec<T, 3>& a, T d) : v{a.v[0], a.v[1], a.v[2], d} {}
  constexpr vec(T a, const vec<T, 3>& b) : v{a, b.v[0], b.v[1], b.v[2]} {}
};
#undef EMU_VEC_COMMON

// packed_* types: no padding, no over-alignment; they convert to and from the aligned vectors.
template <class T, int N> struct packed_vec {
  T v[N];
  packed_vec() = default;
  constexpr packed_vec(const vec<T, N>& o) { for (int i = 0; i < N; ++i) v[i] = o.v[i]; }
  template <class... A, std::enable_if_t<(sizeof...(A) > 1), int> = 0>
  constexpr packed_vec(A... a) : packed_vec(vec<T, N>(a...)) {}
  template <class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>
  constexpr packed_vec(S s) { for (int i = 0; i < N; ++i) v[i] = T(s); }
  T& operator[](int i) { return v[i]; }
  const T& operator[](int i) const { return v[i]; }
};


// ---- operators ----
#define EMU_VBIN(op)                                                                                   \
  template <class T, int N> constexpr vec<T, N> operator op(const vec<T, N>& a, const vec<T, N>& b) {  \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(a.v[i] op b.v[i]); return r; }                 \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>               \
  constexpr vec<T, N> operator op(const vec<T, N>& a, S b) {                                           \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(a.v[i] op T(b)); return r; }                   \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>               \
  constexpr vec<T, N> operator op(S a, const vec<T, N>& b) {                                           \
    vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(T(a) op b.v[i]); return r; }                   \
  template <class T, int N, class B> constexpr vec<T, N>& operator op##=(vec<T, N>& a, const B& b) {   \
    return a = a op b; }                                                                               \
  template <class T, int N> vec<T, N> operator op(const packed_vec<T, N>& a, const packed_vec<T, N>& b) { \
    return vec<T, N>(a) op vec<T, N>(b); }                                                             \
  template <class T, int N> vec<T, N> operator op(const packed_vec<T, N>& a, const vec<T, N>& b) {     \
    return vec<T, N>(a) op b; }                                                                        \
  template <class T, int N> vec<T, N> operator op(const vec<T, N>& a, const packed_vec<T, N>& b) {     \
    return a op vec<T, N>(b); }
EMU_VBIN(+) EMU_VBIN(-) EMU_VBIN(*) EMU_VBIN(/) EMU_VBIN(%) EMU_VBIN(&) EMU_VBIN(|) EMU_VBIN(^)
EMU_VBIN(<<) EMU_VBIN(>>)
#undef EMU_VBIN
#define EMU_VCMP(op)                                                                                      \
  template <class T, int N> constexpr vec<bool, N> operator op(const vec<T, N>& a, const vec<T, N>& b) {  \
    vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = a.v[i] op b.v[i]; return r; }                    \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>                  \
  constexpr vec<bool, N> operator op(const vec<T, N>& a, S b) {                                           \
    vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = a.v[i] op T(b); return r; }                      \
  template <class T, int N, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>                  \
  constexpr vec<bool, N> operator op(S a, const vec<T, N>& b) {                                           \
    vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = T(a) op b.v[i]; return r; }
EMU_VCMP(==) EMU_VCMP(!=) EMU_VCMP(<) EMU_VCMP(>) EMU_VCMP(<=) EMU_VCMP(>=) EMU_VCMP(&&) EMU_VCMP(||)
#undef EMU_VCMP
template <class T, int N> constexpr vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = -a.v[i]; return r; }
template <class T, int N> constexpr vec<T, N> operator+(const vec<T, N>& a) { return a; }
template <class T, int N> constexpr vec<T, N> operator~(const vec<T, N>& a) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r.v[i] = ~a.v[i]; return r; }
template <class T, int N> constexpr vec<bool, N> operator!(const vec<T, N>& a) {
  vec<bool, N> r; for (int i = 0; i < N; ++i) r.v[i] = !a.v[i]; return r; }
template <class T, int N> vec<T, N>& operator++(vec<T, N>& a) { return a += T(1); }
template <class T, int N> vec<T, N>& operator--(vec<T, N>& a) { return a -= T(1); }
template <class T, int N> vec<T, N> operator++(vec<T, N>& a, int) { vec<T, N> o = a; a += T(1); return o; }
template <class T, int N> vec<T, N> operator--(vec<T, N>& a, int) { vec<T, N> o = a; a -= T(1); return o; }
}  // namespace metal

#define EMU_VEC_TYPES(T, name)                                                                    \
  typedef metal::vec<T, 2> name##2; typedef metal::vec<T, 3> name##3; typedef metal::vec<T, 4> name##4; \
  typedef metal::packed_vec<T, 2> packed_##name##2; typedef metal::packed_vec<T, 3> packed_##name##3;    \
  typedef metal::packed_vec<T, 4> packed_##name##4;
EMU_VEC_TYPES(float, float) EMU_VEC_TYPES(half, half) EMU_VEC_TYPES(bfloat, bfloat)
EMU_VEC_TYPES(int, int) EMU_VEC_TYPES(uint, uint) EMU_VEC_TYPES(short, short) EMU_VEC_TYPES(ushort, ushort)
EMU_VEC_TYPES(char, char) EMU_VEC_TYPES(uchar, uchar) EMU_VEC_TYPES(long, long) EMU_VEC_TYPES(ulong, ulong)
EMU_VEC_TYPES(bool, bool)
#undef EMU_VEC_TYPES

namespace metal {
using ::half; using ::bfloat; using ::uint; using ::ushort; using ::uchar; using ::ulong;
using ::float2; using ::float3; using ::float4; using ::half2; using ::half3; using ::half4;
using ::bfloat2; using ::bfloat3; using ::bfloat4; using ::int2; using ::int3; using ::int4;
using ::uint2; using ::uint3; using ::uint4; using ::short2; using ::short3; using ::short4;
using ::ushort2; using ::ushort3; using ::ushort4; using ::char2; using ::char3; using ::char4;
using ::uchar2; using ::uchar3; using ::uchar4; using ::long2; using ::long3; using ::long4;
using ::ulong2; using ::ulong3; using ::ulong4; using ::bool2; using ::bool3; using ::bool4;
using ::packed_float2; using ::packed_float3; using ::packed_float4;
using ::packed_half2; using ::packed_half3; using ::packed_half4;
}  // namespace metal
