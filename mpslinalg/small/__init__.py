"""The n <= 4 path: batched inverse, solve and determinants of 1x1 .. 4x4 matrices, and QR, SVD
and symmetric eigendecomposition of m x n matrices with m, n <= 4, in one pass over the batch
(one Metal launch per op on the metal backend; generated SIMD C++ on CPU, fused Triton kernels
on CUDA or whole-batch tensor ops on the torch backend where they beat torch.linalg).

- `.paths`: the path table of every op (which implementation serves a call, from which batch)
  and its one chooser;
- `.dispatch`: the entry points the LU-based families call, and the Metal host code;
- `.orthogonal`: the same for QR (the qr family's "small" forward), SVD and eigh;
- `.matrix_exp`: the same for the matrix exponential (scaling and squaring);
- `.cholesky`: the same for cholesky_ex, solve_triangular and cholesky_solve (the Cholesky
  family's "small" forwards);
- `.eig`: the same for eig and eigvals of real matrices (the eig family's "small" forwards);
- `.codegen`: the one elimination algorithm, Householder QR, the Jacobi SVD / eigh and the
  Francis QR of eig, emitted per target dialect;
- `.cpu_simd`, `.triton_kernels`: the generated CPU and CUDA kernels;
- `.tensor_lu`: the same LU as whole-batch tensor ops, where no generated kernel serves;
- ``metal/linalg/small_inverse.{h,metal}``: the Metal kernels.
"""

from .codegen import MAX_N
from .dispatch import (
    may_use_small_path,
    small_det,
    small_inv_ex,
    small_slogdet,
    small_solve_ex,
    use_small_path,
)
from .orthogonal import (
    may_use_small_eigh,
    may_use_small_qr,
    may_use_small_svd,
    small_eigh,
    small_qr,
    small_svd,
    use_small_eigh,
    use_small_qr,
    use_small_svd,
)

__all__ = ["MAX_N", "may_use_small_eigh", "may_use_small_path", "may_use_small_qr",
           "may_use_small_svd", "small_det", "small_eigh",
           "small_inv_ex", "small_qr", "small_slogdet", "small_solve_ex", "small_svd",
           "use_small_eigh", "use_small_path", "use_small_qr", "use_small_svd"]
