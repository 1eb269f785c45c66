// The Jacobi plane rotation shared by the one-sided Jacobi SVD and the Hermitian Jacobi
// eigensolver.
//
// For the Hermitian 2x2 H = [[a_pp, a_pq], [conj(a_pq), a_qq]] (a_pp, a_qq real), the rotation
// J = [[c, s], [-conj(s), c]] (c real, |c|^2 + |s|^2 = 1) makes J^H H J diagonal. Write
// a_pq = |a_pq| e^{i phi}: H = D R D^H with D = diag(1, e^{-i phi}) and R real symmetric, so the
// real rotation of R (Rutishauser's formulas, Golub & Van Loan, "Matrix Computations", 4th ed.,
// Alg. 8.5.1) with its sine multiplied by e^{i phi} diagonalises H. Of the two rotations the one
// with |t| <= 1 (angle <= pi/4) is chosen, which is what makes the sweeps converge.
//
// One-sided Jacobi (SVD): H is the Gram matrix of columns x = A[:, p], y = A[:, q]
// (a_pp = |x|^2, a_qq = |y|^2, a_pq = x^H y); rotate_columns makes x^H y = 0 without forming A^H A.
#pragma once

#include "scalar.h"

namespace mpsl {

// Above this |tau|, 1 + tau^2 would overflow; t = 1 / (2 tau) is then exact to rounding.
constant constexpr float kJacobiTauHuge = 1.0e18f;

// a / |a|, and 1 for a == 0 (any phase serves when the coupling is zero).
inline float unit_phase(float a) { return a < 0.0f ? -1.0f : 1.0f; }
inline float2 unit_phase(float2 a) {
  float m = modulus(a);
  return m == 0.0f ? float2(1.0f, 0.0f) : float2(a.x / m, a.y / m);
}

template <typename T>
struct JacobiRotation {
  float c;  // cosine, real
  T s;      // sine carrying the phase of a_pq
  float t;  // tangent: the diagonal becomes a_pp - t |a_pq| and a_qq + t |a_pq|
};

template <typename T>
inline JacobiRotation<T> jacobi_rotation(float a_pp, float a_qq, T a_pq) {
  JacobiRotation<T> rot;
  float off = modulus(a_pq);
  if (off == 0.0f) {
    rot.c = 1.0f;
    rot.s = zero<T>();
    rot.t = 0.0f;
    return rot;
  }
  float tau = (a_qq - a_pp) / (2.0f * off);
  float t;
  if (metal::fabs(tau) > kJacobiTauHuge) {
    t = 0.5f / tau;
  } else {
    float sign = tau < 0.0f ? -1.0f : 1.0f;
    t = sign / (metal::fabs(tau) + metal::sqrt(1.0f + tau * tau));
  }
  float c = metal::rsqrt(1.0f + t * t);
  rot.c = c;
  rot.s = (t * c) * unit_phase(a_pq);
  rot.t = t;
  return rot;
}

// [x, y] <- [x, y] J: x' = c x - conj(s) y, y' = s x + c y.
template <typename T>
inline void rotate_pair(thread T& x, thread T& y, JacobiRotation<T> rot) {
  T xp = rot.c * x - mul(conj(rot.s), y);
  T yp = mul(rot.s, x) + rot.c * y;
  x = xp;
  y = yp;
}

// The pair (p, q), p < q, of step r (0 <= r < m - 1) and slot k (0 <= k < m / 2) of the
// round-robin ("circle") order on m (even) indices (Brent and Luk 1985): index m - 1 stays, the
// others turn; every pair meets once in the m - 1 steps of a sweep, no index twice in a step.
// For odd n (m = n + 1) index n is a dummy (q == n: the pair is skipped). The sums r + k and
// r - k + m - 1 lie in [0, 2 (m - 1)), so the reduction modulo m - 1 is one conditional
// subtraction (the same indices as %, without an integer division on the step's path).
inline void jacobi_round_robin(int m, int r, int k, thread int& p, thread int& q) {
  const int turn = m - 1;
  int x, y;
  if (k == 0) {
    x = turn;
    y = r;
  } else {
    x = r + k;
    x = x >= turn ? x - turn : x;
    y = r - k + turn;
    y = y >= turn ? y - turn : y;
  }
  p = metal::min(x, y);
  q = metal::max(x, y);
}

}  // namespace mpsl
