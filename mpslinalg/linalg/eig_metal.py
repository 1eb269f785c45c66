"""Host side of metal/linalg/eig.metal: the nonsymmetric eigensolver (balance, Hessenberg
reduction, Francis QR, back-substitution; see the eig page of the docs).

It takes float32 / complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator), any
layout, whose validation and dtype policy the caller has done, and never reads device values on
the host: one launch for any batch (plus a gather copy for a non-contiguous input), one
threadgroup per matrix.

Paths:
  group    H (and Z when vectors are wanted) in threadgroup memory: n <= `group_max_n`
           (63 real with or without vectors, 44 complex with vectors, 63 without);
  device   H and Z in a device workspace, any n (one threadgroup per matrix still: the whole
           GPU for one large matrix is not done); real input takes multishift sweeps on
           large active windows, each after a deflation window (AGGRESSIVE_EARLY_DEFLATION).
"""

from __future__ import annotations

import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import SIMD_WIDTH, launch

_SOURCE = "linalg/eig.metal"

# Mirrors of the named constants of metal/linalg/eig.h (tests/linalg/test_eig.py checks them).
STAGE_BYTES = 32256  # kEigStageBytes
MAX_THREADS = 1024  # kEigMaxThreads
ITMAX_PER_ORDER = 30  # kEigItmaxPerOrder
ITMAX_MIN_ORDER = 10  # kEigItmaxMinOrder

#: The kernels index a matrix with 32-bit integers: n^2 < 2^31.
MAX_N = 46340


def group_max_n(dtype: torch.dtype, vectors: bool) -> int:
    """The largest order eig_group stages (H, and Z with vectors, n^2 elements each)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return math.isqrt(STAGE_BYTES // ((2 if vectors else 1) * itemsize))


def path(n: int, dtype: torch.dtype, vectors: bool) -> str:
    """Which kernel serves order n: 'group' or 'device'.

    Real input leaves the stage at eig's bound with or without vectors: eig_device's multishift
    sweeps give other bits than eig_group's double-shift ones, and eigvals keeps eig's
    eigenvalues bit for bit."""
    return "group" if n <= group_max_n(dtype, vectors or not dtype.is_complex) else "device"


#: eig_device's multishift path runs aggressive early deflation (xLAQR3) on a window of
#: AED_WINDOW rows before each sweep (the tests turn it off to compare).
AGGRESSIVE_EARLY_DEFLATION = True
AED_WINDOW = 30  # kEigAedWindow

#: eig_device's threads per group at least: more than a row each hides the latency of device
#: memory (H200 through the executor, 256^2: 83 ms with 256 threads, 68 with 512, 78 with 1024;
#: 512^2: 525, 353, 371 ms; 1024^2: 4829 with 256, 2196 with 1024).
DEVICE_MIN_THREADS = 512


def threads(n: int, where: str = "group") -> int:
    """Threads of one threadgroup: one per row or column, whole simdgroups, at most
    MAX_THREADS; eig_device at least DEVICE_MIN_THREADS."""
    rows = max(1, _metal.ceil_div(n, SIMD_WIDTH)) * SIMD_WIDTH
    return min(MAX_THREADS, max(rows, DEVICE_MIN_THREADS) if where == "device" else rows)


def complex_of(dtype: torch.dtype) -> torch.dtype:
    return torch.complex64 if dtype in (torch.float32, torch.complex64) else torch.complex128


def eig_metal(A: torch.Tensor, *, vectors: bool, fn: str = "eig"
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eigenvalues, eigenvectors and info of the (*, n, n) float32 / complex64 tensor ``A``
    (not modified).

    Returns ``(w, V, info)``: w (*, n) complex64; V (*, n, n) complex64 with unit 2-norm
    eigenvectors as columns (an empty tensor when not ``vectors``); info (*) int32, 0 or the
    1-based index of the eigenvalue whose QR iteration did not converge (that matrix's results
    are NaN; non-finite input gives NaN results and info 0). One launch, no device read.
    """
    *batch_shape, n, _ = A.shape
    if n > MAX_N:
        raise ValueError(f"mpslinalg.{fn}: the metal backend supports matrices of order at most "
                         f"{MAX_N} (n^2 < 2^31), got n = {n}; use the torch backend")
    A = contiguous(A, fn)
    batch = math.prod(batch_shape)
    out = torch.complex64
    w = torch.empty((*batch_shape, n), dtype=out, device=A.device)
    V = (torch.empty((*batch_shape, n, n), dtype=out, device=A.device) if vectors
         else torch.empty(0, dtype=out, device=A.device))
    info = torch.zeros(batch_shape, dtype=torch.int32, device=A.device)
    if batch == 0 or n == 0:
        return w, V, info
    dev = A.device
    v_arg = V if vectors else torch.empty(1, dtype=out, device=dev)
    tau = torch.empty((batch, 2 * n), dtype=A.dtype, device=dev)  # tau, then the reflector
    scale = torch.empty((batch, n), dtype=torch.float32, device=dev)
    perm = torch.empty((batch, n), dtype=torch.int32, device=dev)
    x = (torch.empty((batch, n, n), dtype=out, device=dev) if vectors
         else torch.empty(1, dtype=out, device=dev))
    params = metal_params.pack("linalg/eig.h", "EigParams", n=n, batch=batch, vectors=vectors,
                               aed=AGGRESSIVE_EARLY_DEFLATION)
    where = path(n, A.dtype, vectors)
    args = [A, w, v_arg, info, params, tau, scale, perm, x]
    if where == "group":
        kernel = _metal.kernel(_SOURCE, "eig_group", A.dtype, dev, fn=fn)
    else:
        kernel = _metal.kernel(_SOURCE, "eig_device", A.dtype, dev, fn=fn)
        args.append(torch.empty((batch, 2, n, n), dtype=A.dtype, device=dev))
    width = _metal.group_width(kernel, threads(n, where))  # the results do not depend on it
    launch(kernel, *args, threads=[width, batch], group_size=[width, 1])
    return w, V, info
