"""The n <= 4 path: batched inverse, solve and determinants of 1x1 .. 4x4 matrices in one pass
over the batch (one Metal launch per op on the metal backend; generated SIMD C++ on CPU, fused
Triton kernels on CUDA or whole-batch tensor ops on the torch backend where they beat
torch.linalg).

- `.dispatch`: which path serves a call, and the entry points the LU-based families call;
- `.codegen`: the one elimination algorithm, emitted per target dialect;
- `.cpu_simd`, `.triton_kernels`: the generated CPU and CUDA kernels;
- ``metal/linalg/small_inverse.{h,metal}``: the Metal kernels.
"""

from .dispatch import (
    MAX_N,
    may_use_small_path,
    small_det,
    small_inv_ex,
    small_slogdet,
    small_solve_ex,
    use_small_path,
)

__all__ = ["MAX_N", "may_use_small_path", "small_det", "small_inv_ex", "small_slogdet",
           "small_solve_ex", "use_small_path"]
