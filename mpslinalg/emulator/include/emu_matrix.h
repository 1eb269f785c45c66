// Column-major matrix types floatCxR / halfCxR (C columns of R-component vectors), as in MSL.
#pragma once
#include "emu_math.h"

namespace metal {
template <class T, int C, int R> struct matrix {
  vec<T, R> columns[C];
  matrix() = default;
  explicit matrix(T d) { for (int c = 0; c < C; ++c) { columns[c] = vec<T, R>(T(0)); if (c < R) columns[c][c] = d; } }
  template <class... V, std::enable_if_t<sizeof...(V) == C && (sizeof...(V) > 1), int> = 0>
  matrix(const V&... cols) : columns{vec<T, R>(cols)...} {}
  template <class... S, std::enable_if_t<sizeof...(S) == C * R && (C * R > C), int> = 0>
  matrix(S... s) { T v[] = {T(s)...}; for (int c = 0; c < C; ++c) for (int r = 0; r < R; ++r) columns[c][r] = v[c * R + r]; }
  template <class U> explicit matrix(const matrix<U, C, R>& o) { for (int c = 0; c < C; ++c) columns[c] = vec<T, R>(o.columns[c]); }
  vec<T, R>& operator[](int c) { return columns[c]; }
  const vec<T, R>& operator[](int c) const { return columns[c]; }
};
template <class T, int C, int R> matrix<T, C, R> operator+(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m; for (int c = 0; c < C; ++c) m[c] = a[c] + b[c]; return m; }
template <class T, int C, int R> matrix<T, C, R> operator-(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m; for (int c = 0; c < C; ++c) m[c] = a[c] - b[c]; return m; }
template <class T, int C, int R, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>
matrix<T, C, R> operator*(const matrix<T, C, R>& a, S s) { matrix<T, C, R> m; for (int c = 0; c < C; ++c) m[c] = a[c] * T(s); return m; }
template <class T, int C, int R, class S, std::enable_if_t<is_emu_scalar<S>::value, int> = 0>
matrix<T, C, R> operator*(S s, const matrix<T, C, R>& a) { return a * s; }
template <class T, int C, int R> vec<T, R> operator*(const matrix<T, C, R>& m, const vec<T, C>& v) {
  vec<T, R> r = m[0] * v[0]; for (int c = 1; c < C; ++c) r += m[c] * v[c]; return r; }
template <class T, int C, int R> vec<T, C> operator*(const vec<T, R>& v, const matrix<T, C, R>& m) {
  vec<T, C> r; for (int c = 0; c < C; ++c) r[c] = dot(v, m[c]); return r; }
template <class T, int K, int C, int R> matrix<T, C, R> operator*(const matrix<T, K, R>& a, const matrix<T, C, K>& b) {
  matrix<T, C, R> m; for (int c = 0; c < C; ++c) m[c] = a * b[c]; return m; }
template <class T, int C, int R> matrix<T, R, C> transpose(const matrix<T, C, R>& a) {
  matrix<T, R, C> m; for (int c = 0; c < C; ++c) for (int r = 0; r < R; ++r) m[r][c] = a[c][r]; return m; }
template <class T> T determinant(const matrix<T, 2, 2>& m) { return m[0][0] * m[1][1] - m[1][0] * m[0][1]; }
template <class T> T determinant(const matrix<T, 3, 3>& m) {
  return m[0][0] * (m[1][1] * m[2][2] - m[2][1] * m[1][2]) - m[1][0] * (m[0][1] * m[2][2] - m[2][1] * m[0][2]) +
         m[2][0] * (m[0][1] * m[1][2] - m[1][1] * m[0][2]); }
template <class T> T determinant(const matrix<T, 4, 4>& m) {
  T d = T(0);
  for (int c = 0; c < 4; ++c) {
    matrix<T, 3, 3> s;
    for (int cc = 0, k = 0; cc < 4; ++cc) { if (cc == c) continue; for (int r = 1; r < 4; ++r) s[k][r - 1] = m[cc][r]; ++k; }
    T t = m[c][0] * determinant(s); d = (c & 1) ? d - t : d + t;
  }
  return d;
}
}  // namespace metal
#define EMU_MAT_TYPES(T, name)                                                                                   \
  typedef metal::matrix<T, 2, 2> name##2x2; typedef metal::matrix<T, 2, 3> name##2x3; typedef metal::matrix<T, 2, 4> name##2x4; \
  typedef metal::matrix<T, 3, 2> name##3x2; typedef metal::matrix<T, 3, 3> name##3x3; typedef metal::matrix<T, 3, 4> name##3x4; \
  typedef metal::matrix<T, 4, 2> name##4x2; typedef metal::matrix<T, 4, 3> name##4x3; typedef metal::matrix<T, 4, 4> name##4x4;
EMU_MAT_TYPES(float, float) EMU_MAT_TYPES(half, half)
#undef EMU_MAT_TYPES
