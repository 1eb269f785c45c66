// Batched inverse, determinant, log-determinant and solve for n <= 4: one thread per matrix.
//
// Camera geometry inverts millions of 2x2 / 3x3 / 4x4 matrices at once. Each op is exactly one
// launch over the whole batch: thread t loads matrix t into registers (a thread array with
// compile-time extent N, every loop fully unrolled, row interchanges done with selects so
// nothing is indexed dynamically), factors it and writes its result. No threadgroup memory and
// no barriers: consecutive threads read consecutive matrices, so each warp's loads of one entry
// touch N*N*sizeof(T)-strided addresses whose cache lines the following unrolled loads reuse.
//
// The arithmetic is LAPACK's, so results, info and error semantics match the general LU path:
//   getf2: partial pivoting, pivot = first row of largest abs1 (|re| + |im| for complex, like
//          icamax; NaN never wins a comparison, like idamax), elimination continued past a zero
//          pivot, info = 1-based index of the first zero pivot (0 = ok);
//   getrs: row interchanges, unit-lower forward substitution, column-oriented back substitution
//          (trsm); inv = the solution of A X = I, like torch.linalg.inv.
#pragma once

#include "../common/defines.h"
#include "../common/scalar.h"

namespace mpsl {

// Largest matrix order served by these kernels (instantiated for n = 1..kSmallMaxN).
constant constexpr int kSmallMaxN = 4;

// The LU factors of one matrix, in registers: L (unit, below the diagonal) and U overwrite a,
// ipiv[k] is the row interchanged with row k at step k (0-based), info as getrf's.
template <typename T, int N>
struct SmallLU {
  T a[N][N];
  int ipiv[N];
  int info;
};

// One right-hand side (a column), in registers.
template <typename T, int N>
struct SmallVec {
  T v[N];
};

// Load matrix `index` of a contiguous (batch, N, N) buffer.
template <typename T, int N>
inline SmallLU<T, N> small_load(device const T* A, long index) {
  SmallLU<T, N> lu;
  device const T* src = A + index * long(N * N);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) {
      lu.a[i][j] = src[i * N + j];
    }
  }
  return lu;
}

// getf2 on the registers of one thread.
template <typename T, int N>
inline void small_factor(thread SmallLU<T, N>& lu) {
  lu.info = 0;
  for (int k = 0; k < N; ++k) {
    // Pivot search: strict '>' keeps the lowest row on ties and never selects a NaN.
    int p = k;
    float best = abs1(lu.a[k][k]);
    for (int i = k + 1; i < N; ++i) {
      float v = abs1(lu.a[i][k]);
      if (v > best) {
        best = v;
        p = i;
      }
    }
    lu.ipiv[k] = p;
    // Interchange rows k and p of the whole row (L part included), with compile-time indices
    // only so the matrix stays in registers.
    for (int i = k + 1; i < N; ++i) {
      bool swap = (p == i);
      for (int j = 0; j < N; ++j) {
        T upper = lu.a[k][j];
        T lower = lu.a[i][j];
        lu.a[k][j] = swap ? lower : upper;
        lu.a[i][j] = swap ? upper : lower;
      }
    }
    T piv = lu.a[k][k];
    if (is_zero(piv)) {
      // The whole column below is zero too: no scaling (the multipliers stay 0), record the
      // first zero pivot and carry on like getf2.
      if (lu.info == 0) {
        lu.info = k + 1;
      }
    } else {
      for (int i = k + 1; i < N; ++i) {
        lu.a[i][k] = div(lu.a[i][k], piv);
      }
    }
    for (int i = k + 1; i < N; ++i) {
      for (int j = k + 1; j < N; ++j) {
        lu.a[i][j] = sub_mul(lu.a[i][j], lu.a[i][k], lu.a[k][j]);
      }
    }
  }
}

// getrs for one right-hand side x (in place): P, L^-1, then U^-1 column by column like trsm.
template <typename T, int N>
inline void small_solve_vector(thread const SmallLU<T, N>& lu, thread SmallVec<T, N>& rhs) {
  thread T* x = rhs.v;
  for (int k = 0; k < N - 1; ++k) {
    for (int i = k + 1; i < N; ++i) {
      bool swap = (lu.ipiv[k] == i);
      T upper = x[k];
      T lower = x[i];
      x[k] = swap ? lower : upper;
      x[i] = swap ? upper : lower;
    }
  }
  for (int k = 0; k < N; ++k) {
    for (int i = k + 1; i < N; ++i) {
      x[i] = sub_mul(x[i], lu.a[i][k], x[k]);
    }
  }
  for (int k = N - 1; k >= 0; --k) {
    x[k] = div(x[k], lu.a[k][k]);
    for (int i = 0; i < k; ++i) {
      x[i] = sub_mul(x[i], lu.a[i][k], x[k]);
    }
  }
}

// (-1)^(number of row interchanges).
template <typename T, int N>
inline float small_perm_sign(thread const SmallLU<T, N>& lu) {
  float sign = 1.0f;
  for (int k = 0; k < N; ++k) {
    sign = (lu.ipiv[k] != k) ? -sign : sign;
  }
  return sign;
}

inline float scale(float a, float s) { return a * s; }
inline float2 scale(float2 a, float s) { return a * s; }

// a / |a| for a != 0 (the unit "sign" of a real or complex number).
inline float unit(float a) { return a > 0.0f ? 1.0f : -1.0f; }
inline float2 unit(float2 a) { return a / modulus(a); }

}  // namespace mpsl

// inv_ex: X = A^-1 (batch, N, N), info (batch) int32.
template <typename T, int N>
[[kernel]] void small_inv(
    device const T* A [[buffer(0)]],
    device T* X [[buffer(1)]],
    device int* info [[buffer(2)]],
    constant long& batch [[buffer(3)]],
    uint gid [[thread_position_in_grid]]) {
  long index = long(gid);
  if (index >= batch) {
    return;
  }
  mpsl::SmallLU<T, N> lu = mpsl::small_load<T, N>(A, index);
  mpsl::small_factor<T, N>(lu);
  device T* dst = X + index * long(N * N);
  for (int j = 0; j < N; ++j) {
    mpsl::SmallVec<T, N> x;
    for (int i = 0; i < N; ++i) {
      x.v[i] = (i == j) ? mpsl::one<T>() : mpsl::zero<T>();
    }
    mpsl::small_solve_vector<T, N>(lu, x);
    for (int i = 0; i < N; ++i) {
      dst[i * N + j] = x.v[i];
    }
  }
  info[index] = lu.info;
}

// solve_ex: X = A^-1 B for B, X (batch, N, k), info (batch) int32.
template <typename T, int N>
[[kernel]] void small_solve(
    device const T* A [[buffer(0)]],
    device const T* B [[buffer(1)]],
    device T* X [[buffer(2)]],
    device int* info [[buffer(3)]],
    constant long& batch [[buffer(4)]],
    constant long& nrhs [[buffer(5)]],
    uint gid [[thread_position_in_grid]]) {
  long index = long(gid);
  if (index >= batch) {
    return;
  }
  mpsl::SmallLU<T, N> lu = mpsl::small_load<T, N>(A, index);
  mpsl::small_factor<T, N>(lu);
  long base = index * long(N) * nrhs;
  for (long j = 0; j < nrhs; ++j) {
    mpsl::SmallVec<T, N> x;
    for (int i = 0; i < N; ++i) {
      x.v[i] = B[base + long(i) * nrhs + j];
    }
    mpsl::small_solve_vector<T, N>(lu, x);
    for (int i = 0; i < N; ++i) {
      X[base + long(i) * nrhs + j] = x.v[i];
    }
  }
  info[index] = lu.info;
}

// det: product of U's diagonal times the permutation sign (0 for a zero pivot).
template <typename T, int N>
[[kernel]] void small_det(
    device const T* A [[buffer(0)]],
    device T* det [[buffer(1)]],
    constant long& batch [[buffer(2)]],
    uint gid [[thread_position_in_grid]]) {
  long index = long(gid);
  if (index >= batch) {
    return;
  }
  mpsl::SmallLU<T, N> lu = mpsl::small_load<T, N>(A, index);
  mpsl::small_factor<T, N>(lu);
  T d = lu.a[0][0];
  for (int k = 1; k < N; ++k) {
    d = mpsl::mul(d, lu.a[k][k]);
  }
  det[index] = mpsl::scale(d, mpsl::small_perm_sign<T, N>(lu));
}

// slogdet: sign (T, 0 when singular) and log|det| (float, -inf when singular).
template <typename T, int N>
[[kernel]] void small_slogdet(
    device const T* A [[buffer(0)]],
    device T* sign [[buffer(1)]],
    device float* logabsdet [[buffer(2)]],
    constant long& batch [[buffer(3)]],
    uint gid [[thread_position_in_grid]]) {
  long index = long(gid);
  if (index >= batch) {
    return;
  }
  mpsl::SmallLU<T, N> lu = mpsl::small_load<T, N>(A, index);
  mpsl::small_factor<T, N>(lu);
  T s = mpsl::scale(mpsl::one<T>(), mpsl::small_perm_sign<T, N>(lu));
  float logabs = 0.0f;
  for (int k = 0; k < N; ++k) {
    T d = lu.a[k][k];
    logabs += metal::log(mpsl::modulus(d));
    s = mpsl::is_zero(d) ? mpsl::zero<T>() : mpsl::mul(s, mpsl::unit(d));
  }
  sign[index] = s;
  logabsdet[index] = logabs;
}
