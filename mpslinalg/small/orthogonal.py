"""Householder QR, the SVD and the symmetric eigendecomposition of batches of m x n matrices,
m, n <= 4, in one pass over the batch: the choice of path and the entry points. The qr family
(`mpslinalg.linalg.qr`) calls `small_qr` as its ``"small"`` forward;
`small_svd` and `small_eigh` are plain functions for the svd and eigh families to
call likewise (with `use_small_svd` / `use_small_eigh` deciding).

Camera code factors millions of 3x3 and 3x4 matrices at once (RQ/QR of projection matrices,
Kabsch/Procrustes alignment, projecting onto rotations, essential matrices), where
torch.linalg pays LAPACK's per-matrix overhead on CPU or cuSOLVER's batched-Jacobi costs on
CUDA. Here:

- torch backend on CPU, float32/float64: generated SIMD C++ (`mpslinalg.small.cpu_simd`,
  blocks of 8 float32 / 4 float64 matrices per AVX2 instruction) on torch's intra-op threads,
  once the library (built in the background from import) is loaded;
- torch backend on CUDA, float32/float64, when ``triton`` imports: one fused Triton kernel per
  call (`mpslinalg.small.triton_kernels`, a matrix per lane in registers), no host
  synchronisation;
- everything else (complex dtypes, no compiler or no triton): torch.linalg.

Both kernels come from the generators of `mpslinalg.small.codegen`:

- QR: the operations of ``qr_small`` in ``metal/linalg/qr.h`` in the same order: LAPACK geqr2
  with larfg's reflectors (beta = -sign(alpha) * norm, so R's diagonal has LAPACK's signs and
  Q, R match torch.linalg.qr up to rounding), column norms by nrm2's scaled sum of squares
  (entries near 1e+-30 in float32 neither overflow nor underflow), orgqr by backward
  accumulation; for finite input float32 results are bit-identical to the Metal kernel
  compiled for the CPU by `mpslinalg.emulator`, for input holding NaN or Inf Q and R are
  torch.linalg.qr's on the CPU (LAPACK's NaN-ignoring lapy2 and larf's scan of zeros, see
  `mpslinalg.small.codegen`; tests/small/test_small_qr.py). The metal backend keeps
  ``qr_small`` itself (`mpslinalg.linalg.qr_metal`).
- SVD: one-sided Jacobi on the columns (wide matrices through their transpose), at most
  `mpslinalg.small.codegen.JACOBI_MAX_SWEEPS` sweeps with a per-pair convergence test;
  S descending; U's columns orthogonalised against those of larger singular values, and
  where that leaves less than half of a column (a zero singular value, or the rounding residue
  of rank-deficient input that the sweeps never make orthogonal), and past n with
  full_matrices, completed to an orthonormal basis: U^T U = I to working precision for zero
  rows, rank-deficient and graded input too.
- eigh: cyclic two-sided Jacobi on the named triangle; eigenvalues ascending (torch's order).

Both Jacobi methods divide the matrix by its largest |entry| first (scaled back after), and a
matrix with a non-finite entry gets NaN in every output after a bounded amount of work. torch
does otherwise (LAPACK raises for NaN and leaves some outputs finite for Inf; cuSOLVER has its
own ways), so `small_svd` and `small_eigh` hand a batch holding such a matrix to torch.linalg
(`_as_torch_where_nonfinite`): the torch backend then behaves like torch at every batch size.
Singular vectors and eigenvectors are unique up to sign (up to a rotation for repeated values),
and those signs need not match torch's.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .._core.backend import resolve_backend
from .._core.errors import read_device
from . import cpu_simd
from .codegen import MAX_N
from .dispatch import _TRITON_DTYPES, _TRITON_INSTALLED, _import_triton_kernels

log = logging.getLogger("mpslinalg.small")

#: Smallest batch for which the small QR path beats torch.linalg.qr through the public
#: mpslinalg.qr, per kernel and max(m, n):
#: "cpu-simd": measured with benchmarks/bench_small_qr.py on the 2-core CI machine (results in
#: benchmarks/results/small_qr.md): the kernel alone beats torch.linalg.qr from ~16-32 matrices,
#: but the public call's custom op costs ~15-20 us more than the direct torch.linalg.qr call
#: (~4 us + ~0.1 / 0.2 / 0.25 us per 2x2 / 3x3 / 4x4 matrix), which is recovered from batch
#: ~200 (2x2: 0.7x at 128; 3x3: 0.8-0.9x at 128, 5x at 1000) and ~100 (3x4, 4x3, 4x4: 1.2-1.3x
#: at 128, 0.6-0.9x at 64).
#: "cuda": the fused Triton kernel, measured on an H200 (benchmarks/results/small_qr_h200.md):
#: torch.linalg.qr costs ~0.2 ms + ~60 us per 3x3 matrix (0.26 ms for one, 61 ms for 1000), the
#: public call through the small path ~0.43-0.58 ms up to 1e5 matrices (the kernel ~0.25-0.38
#: ms, the op's dispatch ~0.2 ms): from 8 matrices on (torch ~0.7 ms) it is faster than torch,
#: at 2-4 it would be up to ~1.4x slower (estimated from those two measured points).
_TORCH_MIN_BATCH = {"cpu-simd": {1: 256, 2: 256, 3: 256, 4: 128},
                    "cuda": {n: 8 for n in range(1, MAX_N + 1)}}


def _simd_available() -> bool:
    """Whether the orthogonal-factorisation library is loaded (never waits for its build)."""
    return cpu_simd.ORTH_LIBRARY.loaded is not None


def _kind(A: torch.Tensor) -> str | None:
    """Which small-path kernel serves ``A`` on the torch backend ("cpu-simd", "cuda"), or
    None (torch.linalg)."""
    if A.dtype not in cpu_simd.ORTH_DTYPES:
        return None
    if A.device.type == "cpu":
        return "cpu-simd" if _simd_available() else None
    if A.device.type == "cuda" and A.dtype in _TRITON_DTYPES and _TRITON_INSTALLED:
        return "cuda"
    return None


def _small_shape(shape) -> bool:
    return len(shape) >= 2 and 1 <= shape[-2] <= MAX_N and 1 <= shape[-1] <= MAX_N


#: The shapes of the QR kernels: every m x n up to 4 x 4.
_QR_SHAPES = tuple((m, n) for m in range(1, MAX_N + 1) for n in range(1, MAX_N + 1))


def may_use_small_qr(A: torch.Tensor) -> bool:
    """A cheap necessary condition of `use_small_qr` on the torch backend (shapes only:
    the public ``qr``'s fast path asks it on every call; a single matrix, the common case that
    must stay cheapest, is answered first), from the crossover of the batch's own order."""
    return _may_use(A, _TORCH_MIN_BATCH, _QR_SHAPES)


def use_small_qr(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute ``torch.linalg.qr(A)`` on ``backend`` (default:
    the one in force): m, n <= 4, float32/float64, on the torch backend only where a kernel is
    available and measured (or estimated, see `_TORCH_MIN_BATCH`) to beat torch.linalg.
    The metal backend keeps its own ``qr_small`` kernel."""
    if not _small_shape(A.shape):
        return False
    if backend is None:
        backend = resolve_backend(A.device, "qr")
    if backend != "torch":
        return False
    kind = _kind(A)
    batch = math.prod(A.shape[:-2])
    return kind is not None and batch >= _TORCH_MIN_BATCH[kind][max(A.shape[-2:])]


#: Smallest batch for which the public svd / svdvals / eigh / eigvalsh through small_svd /
#: small_eigh beat the matching torch.linalg call, per kernel and max(m, n); an order a table
#: does not list is torch.linalg's at every batch. The values-only calls have their own
#: tables: torch.linalg.svdvals / eigvalsh cost about half of svd / eigh, while the registered
#: op's dispatch (~15 us on a quiet CPU) and the kernels' fixed cost stay.
#: "cpu-simd": measured 2026-12-01 on the 2-core CI machine, shared (load average 29-35),
#: torch 2.13.0+cpu, 2 threads, after `_as_torch_where_nonfinite`'s check was added: the
#: public call (`benchmarks/bench_overhead.py`'s ``run`` on n x n randn batches, float32 and
#: float64, 7 interleaved rounds of 100 calls, each sweep twice) with the small path forced
#: at batches 8 ... 65536, then with these tables at each crossover and the batch below it.
#: Each crossover is the smallest power of two from which the ratio of medians stayed below 1
#: in both runs and both dtypes: there 0.38-0.87 (svd), 0.37-0.74 (svdvals), 0.41-1.00 (eigh),
#: 0.46-0.92 (eigvalsh), and 1.03-1.08 at the batch below (torch.linalg's fast path, its
#: medians up to 1.22 in noisy rounds). The 2026-11-30 tables (svd 32 / 32 / 16 / 8 and eigh
#: 64 / 64 / 32 / 16 for n = 1 ... 4, shared by svdvals / eigvalsh) lost there after the check:
#: svd 2.4-4.8x (1 x 1 at 32), 1.3-3.0x (2 x 2 at 32), 1.1-3.0x (4 x 4 at 8); eigh 6x (1 x 1
#: at 64), 1.2-3.4x (2 x 2 at 64); svdvals 1.4-4.8x (3 x 3 at 16), eigvalsh 1.9-3.7x (3 x 3 at
#: 32). The 1 x 1 eigh / eigvalsh won only from 65536 matrices (1.0-2.3x at 1024-16384). 3 x 4
#: and 4 x 3 take the 4 x 4 crossover: svd at 16 1.01-1.09x (torch's 3 x 4 is cheaper than
#: its 4 x 4; 0.41-0.78x at 32), svdvals at 64 0.38-0.65x.
#: "cuda": measured on an H200 (benchmarks/results/small_svd_h200.md) at 1000 3x3 matrices:
#: svd 0.39 ms in torch vs 0.24 ms for the kernel, svdvals 0.34 vs 0.18, eigh 0.22 vs 0.14;
#: with the op's ~0.2 ms of dispatch the public call is then ~1.1x torch for svd and ~1.5x for
#: eigh, so the small path starts at 1024 matrices for the SVD and at 4096 for eigh (torch's
#: eigh grows ~linearly; cuSOLVER's batched eigh fails outright from some batch below 1e5,
#: which this path serves); not re-measured (no GPU here): the values-only calls keep them.
_SVD_TORCH_MIN_BATCH = {"cpu-simd": {1: 256, 2: 64, 3: 32, 4: 16},
                        "cuda": {n: 1024 for n in range(1, MAX_N + 1)}}
_SVDVALS_TORCH_MIN_BATCH = {"cpu-simd": {1: 1024, 2: 256, 3: 64, 4: 64},
                            "cuda": _SVD_TORCH_MIN_BATCH["cuda"]}
_EIGH_TORCH_MIN_BATCH = {"cpu-simd": {2: 256, 3: 64, 4: 32},
                         "cuda": {n: 4096 for n in range(1, MAX_N + 1)}}
_EIGVALSH_TORCH_MIN_BATCH = {"cpu-simd": {2: 512, 3: 128, 4: 64},
                             "cuda": _EIGH_TORCH_MIN_BATCH["cuda"]}


def _may_use(A: torch.Tensor, limits: dict, shapes) -> bool:
    """The shapes-only part of `_use_jacobi` and `use_small_qr`: m x n in ``shapes`` and the
    batch at least the crossover of max(m, n) for A's device type (a batch of another order
    between crossovers would take the op without the small path, and pay its dispatch for
    nothing)."""
    # one matrix or a dtype without kernels (complex): never the small path, answered first
    if A.dim() < 3 or A.dtype not in cpu_simd.ORTH_DTYPES:
        return False
    m, n = A.shape[-2:]
    if (m, n) not in shapes:
        return False
    table = limits.get("cpu-simd" if A.device.type == "cpu" else A.device.type)
    limit = table.get(max(m, n)) if table is not None else None
    return limit is not None and A.numel() >= limit * m * n


#: The shapes of the symmetric eigendecomposition's kernels.
_EIGH_SHAPES = tuple((n, n) for n in range(1, MAX_N + 1))


def _svd_limits(compute_uv: bool) -> dict:
    return _SVD_TORCH_MIN_BATCH if compute_uv else _SVDVALS_TORCH_MIN_BATCH


def _eigh_limits(compute_v: bool) -> dict:
    return _EIGH_TORCH_MIN_BATCH if compute_v else _EIGVALSH_TORCH_MIN_BATCH


def may_use_small_svd(A: torch.Tensor, compute_uv: bool = True) -> bool:
    """A cheap necessary condition of `use_small_svd` with the same ``compute_uv`` (shapes
    only: the public ``svd`` / ``svdvals``' fast paths ask it on every call)."""
    return _may_use(A, _svd_limits(compute_uv), cpu_simd.SVD_SHAPES)


def may_use_small_eigh(A: torch.Tensor, compute_v: bool = True) -> bool:
    """A cheap necessary condition of `use_small_eigh` with the same ``compute_v`` (shapes
    only)."""
    return _may_use(A, _eigh_limits(compute_v), _EIGH_SHAPES)


def use_small_svd(A: torch.Tensor, backend: str | None = None,
                  compute_uv: bool = True) -> bool:
    """True when `small_svd` should compute the SVD of ``A`` (singular values only without
    ``compute_uv``) on ``backend`` (default: the one in force): (m, n) in
    `mpslinalg.small.cpu_simd.SVD_SHAPES` (square n <= 4, 3 x 4, 4 x 3), float32/float64,
    torch backend, a kernel available and the batch at least the crossover of
    `_SVD_TORCH_MIN_BATCH` (`_SVDVALS_TORCH_MIN_BATCH` without ``compute_uv``). The metal
    backend has its own SVD kernels."""
    return _use_jacobi(A, backend, "svd", _svd_limits(compute_uv),
                       tuple(A.shape[-2:]) in cpu_simd.SVD_SHAPES)


def use_small_eigh(A: torch.Tensor, backend: str | None = None,
                   compute_v: bool = True) -> bool:
    """True when `small_eigh` should compute the eigendecomposition of the symmetric
    ``A`` (eigenvalues only without ``compute_v``, `_EIGVALSH_TORCH_MIN_BATCH`) on
    ``backend`` (as `use_small_svd`; square n <= 4)."""
    square = A.dim() >= 2 and A.shape[-1] == A.shape[-2]
    return _use_jacobi(A, backend, "eigh", _eigh_limits(compute_v), square)


def _use_jacobi(A: torch.Tensor, backend: str | None, fn: str, limits: dict,
                shape_ok: bool) -> bool:
    if not (shape_ok and _small_shape(A.shape)):
        return False
    if backend is None:
        backend = resolve_backend(A.device, fn)
    if backend != "torch":
        return False
    kind = _kind(A)
    limit = limits[kind].get(max(A.shape[-2:])) if kind is not None else None
    return limit is not None and math.prod(A.shape[:-2]) >= limit


# ------------------------------------------------------------------------------ path table


@dataclass(frozen=True)
class Path:
    """One implementation of the small orthogonal factorisations."""

    name: str
    qr: Callable[[torch.Tensor, str], tuple[torch.Tensor, torch.Tensor]]
    svd: Callable[[torch.Tensor, bool, bool], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    eigh: Callable[[torch.Tensor, bool, bool], tuple[torch.Tensor, torch.Tensor]]


#: The generated SIMD kernels on torch's intra-op threads (read per call).
_SIMD = Path("simd kernel on CPU",
             lambda A, mode: cpu_simd.small_qr(A, mode, torch.get_num_threads()),
             lambda A, full, uv: cpu_simd.small_svd(A, full, uv, torch.get_num_threads()),
             lambda A, upper, v: cpu_simd.small_eigh(A, upper, v, torch.get_num_threads()))


@functools.cache
def _triton_path() -> Path:
    """The fused Triton kernels (made once, when a call first needs them)."""
    tri = _import_triton_kernels()
    return Path("triton", tri.small_qr, tri.small_svd, tri.small_eigh)


def _torch_svd(A: torch.Tensor, full_matrices: bool, compute_uv: bool):
    if compute_uv:
        return tuple(torch.linalg.svd(A, full_matrices=full_matrices))
    empty = A.new_empty(0)
    return empty, torch.linalg.svdvals(A), empty


def _torch_eigh(A: torch.Tensor, upper: bool, compute_v: bool):
    uplo = "U" if upper else "L"
    if compute_v:
        return tuple(torch.linalg.eigh(A, uplo))
    return torch.linalg.eigvalsh(A, uplo), A.new_empty(0)


_TORCH = Path("torch.linalg", lambda A, mode: tuple(torch.linalg.qr(A, mode)), _torch_svd,
              _torch_eigh)

#: The choice, first match wins: (path, whether it serves A). The thresholds of
#: `_TORCH_MIN_BATCH` decide separately whether the public functions take the small path.
_TABLE: list[tuple[Callable[[], Path], Callable[[torch.Tensor], bool]]] = [
    (lambda: _SIMD, lambda A: A.device.type == "cpu" and A.dtype in cpu_simd.ORTH_DTYPES
     and _simd_available()),
    (_triton_path, lambda A: A.device.type == "cuda" and A.dtype in _TRITON_DTYPES
     and _import_triton_kernels() is not None),
    (lambda: _TORCH, lambda A: True),
]


def choose_path(A: torch.Tensor) -> Path:
    """The implementation that serves ``A`` (see `_TABLE`)."""
    for make, serves in _TABLE:
        if serves(A):
            path = make()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("small orthogonal path for %s %s: %s", tuple(A.shape), A.dtype,
                          path.name)
            return path
    raise AssertionError("the last row of the table serves every input")


def torch_path(A: torch.Tensor) -> str:
    """Which implementation the small_* functions of this module run for ``A``."""
    return choose_path(A).name


# ------------------------------------------------------------------------------ non-finite input


def _first_holds_nan(values: torch.Tensor) -> bool:
    """Whether ``values[..., 0]`` holds a NaN: one device read (on the CPU through NumPy, no
    torch kernel; elsewhere a single flag moved)."""
    if values.device.type == "cpu":
        return bool(np.isnan(read_device(values, "non-finite input")[..., :1]).any())
    return bool(read_device(torch.isnan(values[..., :1]).any(), "non-finite input"))


def _as_torch_where_nonfinite(result: tuple, values: torch.Tensor,
                              torch_call: Callable[[], tuple]) -> tuple:
    """A kernel's ``result``, or where the batch holds a matrix with a non-finite entry
    (``values``, the singular values or eigenvalues, then hold NaN, the first of each matrix
    too: the kernels give NaN in every output of such a matrix) ``torch_call()``:
    torch.linalg's results or torch's error for the whole batch, on whichever device. LAPACK
    raises for NaN input (svd: gesdd's info -4; eigh: no convergence) and leaves some outputs
    finite for Inf, and what cuSOLVER does is torch's to decide; so the torch backend behaves
    like torch at every batch size by construction, not by imitating each library. The read
    costs what torch's own calls pay: torch.linalg.svd and eigh read their ``info`` on every
    device (``_linalg_check_errors``). The metal backend has its own kernels and never comes
    here."""
    return torch_call() if _first_holds_nan(values) else result


# ------------------------------------------------------------------------------ entry points


def small_qr(A: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of ``torch.linalg.qr(A, mode)`` for A (*, m, n), m, n <= 4 (mode 'r': Q is an
    empty tensor; complex dtypes go to torch.linalg). Forward only, no host synchronisation, A
    never modified.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.small import small_qr
    >>> Q, R = small_qr(torch.tensor([[[3., 1.], [4., 2.]]]))
    >>> R
    tensor([[[-5.0000, -2.2000],
             [ 0.0000,  0.4000]]])
    """
    return choose_path(A).qr(A, mode)


def small_svd(A: torch.Tensor, full_matrices: bool = True,
              compute_uv: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, Vh) of ``torch.linalg.svd(A, full_matrices)`` for A (*, m, n) (square n <= 4,
    3 x 4 or 4 x 3 on the generated kernels; other shapes and complex dtypes go to
    torch.linalg). S descending; without ``compute_uv`` U and Vh are empty tensors. One-sided
    Jacobi on the columns (never A^T A); a batch holding a matrix with a non-finite entry is
    torch.linalg's (its results or its error, see `_as_torch_where_nonfinite`). Forward only,
    one device read on the kernels' paths (as torch.linalg.svd's), A never modified.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.small import small_svd
    >>> U, S, Vh = small_svd(torch.tensor([[[3., 0.], [4., 5.]]]), full_matrices=True,
    ...                      compute_uv=True)
    >>> S
    tensor([[6.7082, 2.2361]])
    """
    path = choose_path(A)
    if path is _TORCH or tuple(A.shape[-2:]) not in cpu_simd.SVD_SHAPES:
        return _TORCH.svd(A, full_matrices, compute_uv)
    result = path.svd(A, full_matrices, compute_uv)
    return _as_torch_where_nonfinite(result, result[1],
                                     lambda: _TORCH.svd(A, full_matrices, compute_uv))


def small_eigh(A: torch.Tensor, upper: bool = False,
               compute_v: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, V) of ``torch.linalg.eigh(A, 'U' if upper else 'L')`` for symmetric A (*, n, n),
    n <= 4 (complex dtypes go to torch.linalg): eigenvalues ascending, eigenvectors in the
    columns of V; only the named triangle is read; without ``compute_v`` V is an empty tensor.
    Cyclic Jacobi; a batch holding a non-finite entry in a triangle read is torch.linalg's (its
    results or its error, see `_as_torch_where_nonfinite`). Forward only, one device read on
    the kernels' paths (as torch.linalg.eigh's), A never modified.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.small import small_eigh
    >>> L, V = small_eigh(torch.tensor([[[2., 1.], [1., 2.]]]), upper=False, compute_v=True)
    >>> L
    tensor([[1., 3.]])
    """
    path = choose_path(A)
    if path is _TORCH:
        return path.eigh(A, upper, compute_v)
    result = path.eigh(A, upper, compute_v)
    return _as_torch_where_nonfinite(result, result[0],
                                     lambda: _TORCH.eigh(A, upper, compute_v))
