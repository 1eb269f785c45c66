"""Host side of metal/linalg/ldl.metal: Bunch-Kaufman LDL^T (LAPACK sytrf / hetrf, UPLO='L')
and the solve with its factors (sytrs / hetrs).

They take float32 / complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator), any
layout (gathered into contiguous buffers by one copy kernel when needed), whose validation and
dtype policy the caller has done; they never read device values on the host, and the batch is a
grid dimension of every kernel (no loop over batch elements).

Launches per call:
  ldl_factor_metal  1: ldl_factor_group (n up to `group_max_n`: the matrix staged in
                    threadgroup memory) or ldl_factor_device (larger n, in place in the result),
                    one threadgroup per matrix; plus a gather for a non-contiguous input.
  ldl_solve_metal   1: ldl_solve, one thread per right-hand side column; plus the gathers of
                    the inputs broadcast or non-contiguous, and B's copy that becomes X.
"""

from __future__ import annotations

import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import SIMD_WIDTH, launch

_SOURCE = "linalg/ldl.metal"
_HEADER = "linalg/ldl.h"

# Mirrors of the named constants of metal/linalg/ldl.h (tests/linalg/test_ldl.py checks them).
STAGE_BYTES = 31744  # kLdlStageBytes: the staged matrix of ldl_factor_group
ALPHA = 0.640388203  # kLdlAlpha = (1 + sqrt(17)) / 8

# Host-side launch geometry (not seen by the kernels, which read their group size).
MAX_THREADS = 1024  # threads of a factorization threadgroup at most
SOLVE_GROUP = 64  # ldl_solve: one thread per right-hand side column


def group_max_n(dtype: torch.dtype) -> int:
    """The largest order ldl_factor_group stages (n^2 elements in STAGE_BYTES): 89 in
    float32, 62 in complex64."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return math.isqrt(STAGE_BYTES // itemsize)


def factor_threads(n: int) -> int:
    """Threads of a factorization threadgroup: one per row, in whole simdgroups, at most
    MAX_THREADS (the trailing update spreads columns over the lanes, rows over simdgroups)."""
    return min(MAX_THREADS, max(1, _metal.ceil_div(n, SIMD_WIDTH)) * SIMD_WIDTH)


def ldl_factor_metal(A: torch.Tensor, *, hermitian: bool, fn: str = "ldl_factor"
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sytrf (hetrf when ``hermitian`` and complex) of each matrix of the (*, n, n) tensor ``A``,
    of which only the lower triangle is read.

    Returns ``(LD, pivots, info)`` as torch.linalg.ldl_factor_ex: LD (*, n, n) new, D's blocks
    and L's multipliers in the lower triangle, zeros above; pivots (*, n) int32 in LAPACK's
    convention; info (*) int32, the first (1-based) column whose D(k, k) is exactly zero, or 0.
    """
    A = contiguous(A, fn)
    *batch_shape, n, _ = A.shape
    LD = torch.empty_like(A)
    pivots = torch.empty((*batch_shape, n), dtype=torch.int32, device=A.device)
    info = torch.zeros(batch_shape, dtype=torch.int32, device=A.device)
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0:
        return LD, pivots, info
    where = "group" if n <= group_max_n(A.dtype) else "device"
    kernel = _metal.kernel(_SOURCE, f"ldl_factor_{where}", A.dtype, A.device, fn=fn)
    params = metal_params.pack(_HEADER, "LdlParams", n=n,
                               hermitian=int(bool(hermitian) and A.is_complex()))
    threads = _metal.group_width(kernel, factor_threads(n))  # the results do not depend on it
    launch(kernel, A, LD, pivots, info.view(batch), params,
           threads=[threads, batch], group_size=[threads, 1])
    return LD, pivots, info


def ldl_solve_metal(LD: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *,
                    hermitian: bool, fn: str = "ldl_solve") -> torch.Tensor:
    """Solve A X = B with the factors of `ldl_factor_metal` (sytrs / hetrs).

    LD (*, n, n) and pivots (*, n) (any integer dtype) are broadcast to the batch shape of B,
    (*, n, k). Returns a new contiguous X shaped like B; no input is modified.
    """
    *batch_shape, n, nrhs = B.shape
    LD = contiguous(LD.expand(*batch_shape, n, n), fn)
    pivots = contiguous(pivots.to(torch.int32).expand(*batch_shape, n), fn)
    X = contiguous(B, fn)
    if X.data_ptr() == B.data_ptr():  # B itself: X is written in place
        X = X.clone()
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0 or nrhs == 0:
        return X
    kernel = _metal.kernel(_SOURCE, "ldl_solve", X.dtype, X.device, fn=fn)
    params = metal_params.pack(_HEADER, "LdlSolveParams", n=n, nrhs=nrhs,
                               hermitian=int(bool(hermitian) and X.is_complex()))
    launch(kernel, LD, pivots, X, params,
           threads=[nrhs, batch], group_size=[min(nrhs, SOLVE_GROUP), 1])
    return X
