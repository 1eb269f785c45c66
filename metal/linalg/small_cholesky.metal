// The n <= 4 Cholesky-family kernels (small_cholesky_*, small_solve_triangular_*,
// small_cholesky_solve_*), generated: see small_cholesky.h.
#include "small_cholesky.h"
