"""Householder QR, the SVD and the symmetric eigendecomposition of batches of m x n matrices,
m, n <= 4, in one pass over the batch: the entry points and their queries of the path table
(`mpslinalg.small.paths`). The qr family
(`mpslinalg.linalg.qr`) calls `small_qr` as its ``"small"`` forward;
`small_svd` and `small_eigh` are plain functions for the svd and eigh families to
call likewise (with `use_small_svd` / `use_small_eigh` deciding).

Camera code factors millions of 3x3 and 3x4 matrices at once (RQ/QR of projection matrices,
Kabsch/Procrustes alignment, projecting onto rotations, essential matrices), where
torch.linalg pays LAPACK's per-matrix overhead on CPU or cuSOLVER's batched-Jacobi costs on
CUDA. Here:

- torch backend on CPU, float32/float64: generated SIMD C++ (`mpslinalg.small.cpu_simd`,
  blocks of 8 float32 / 4 float64 matrices per AVX2 instruction) on torch's intra-op threads,
  where the installed package holds the library (compiled at install, `.native`);
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

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import torch

from .._core.errors import read_device
from . import cpu_simd, paths


def may_use_small_qr(A: torch.Tensor) -> bool:
    """A cheap necessary condition of `use_small_qr` on the torch backend (shapes only:
    the public ``qr``'s fast path asks it on every call), from the crossover of the batch's own
    order (`mpslinalg.small.paths.may_take_small_path`)."""
    return paths.may_take_small_path("qr", A)


def use_small_qr(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute ``torch.linalg.qr(A)`` on ``backend`` (default:
    the one in force): m, n <= 4, float32/float64, on the torch backend only where a kernel is
    available and measured (or estimated) to beat torch.linalg (``paths.TABLES["qr"]``).
    The metal backend keeps its own ``qr_small`` kernel."""
    return paths.takes_small_path("qr", A, backend)


def _svd_op(compute_uv: bool) -> str:
    return "svd" if compute_uv else "svdvals"


def _eigh_op(compute_v: bool) -> str:
    return "eigh" if compute_v else "eigvalsh"


def may_use_small_svd(A: torch.Tensor, compute_uv: bool = True) -> bool:
    """A cheap necessary condition of `use_small_svd` with the same ``compute_uv`` (shapes
    only: the public ``svd`` / ``svdvals``' fast paths ask it on every call)."""
    return paths.may_take_small_path(_svd_op(compute_uv), A)


def may_use_small_eigh(A: torch.Tensor, compute_v: bool = True) -> bool:
    """A cheap necessary condition of `use_small_eigh` with the same ``compute_v`` (shapes
    only)."""
    return paths.may_take_small_path(_eigh_op(compute_v), A)


def use_small_svd(A: torch.Tensor, backend: str | None = None,
                  compute_uv: bool = True) -> bool:
    """True when `small_svd` should compute the SVD of ``A`` (singular values only without
    ``compute_uv``) on ``backend`` (default: the one in force): (m, n) in
    `mpslinalg.small.cpu_simd.SVD_SHAPES` (square n <= 4, 3 x 4, 4 x 3), float32/float64,
    torch backend, a kernel available and the batch at least the crossover of
    ``paths.TABLES["svd"]`` (``["svdvals"]`` without ``compute_uv``). The metal backend has
    its own SVD kernels."""
    return paths.takes_small_path(_svd_op(compute_uv), A, backend)


def use_small_eigh(A: torch.Tensor, backend: str | None = None,
                   compute_v: bool = True) -> bool:
    """True when `small_eigh` should compute the eigendecomposition of the symmetric
    ``A`` (eigenvalues only without ``compute_v``: ``paths.TABLES["eigvalsh"]``) on
    ``backend`` (as `use_small_svd`; square n <= 4)."""
    return paths.takes_small_path(_eigh_op(compute_v), A, backend)


# ------------------------------------------------------------------------------ path table


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


_TORCH = SimpleNamespace(small_qr=lambda A, mode: tuple(torch.linalg.qr(A, mode)),
                         small_svd=_torch_svd, small_eigh=_torch_eigh)

#: The functions of the paths this family binds itself (`paths.functions` has the generated
#: kernels').
_OWN = {paths.TORCH_LINALG: _TORCH}


def choose_path(A: torch.Tensor, op: str = "qr") -> str:
    """The path that serves ``op`` ("qr", "svd", "eigh") of ``A`` on the torch backend
    (`mpslinalg.small.paths.choose`; the three tables choose alike)."""
    return paths.choose(op, A, "torch")


def torch_path(A: torch.Tensor) -> str:
    """Which implementation the small_* functions of this module run for ``A``."""
    return choose_path(A)


def _functions(path: str):
    return paths.functions(path, _OWN)


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
    return _functions(choose_path(A, "qr")).small_qr(A, mode)


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
    path = choose_path(A, "svd")
    if path == paths.TORCH_LINALG or tuple(A.shape[-2:]) not in cpu_simd.SVD_SHAPES:
        return _torch_svd(A, full_matrices, compute_uv)
    result = _functions(path).small_svd(A, full_matrices, compute_uv)
    return _as_torch_where_nonfinite(result, result[1],
                                     lambda: _torch_svd(A, full_matrices, compute_uv))


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
    path = choose_path(A, "eigh")
    if path == paths.TORCH_LINALG:
        return _torch_eigh(A, upper, compute_v)
    result = _functions(path).small_eigh(A, upper, compute_v)
    return _as_torch_where_nonfinite(result, result[0],
                                     lambda: _torch_eigh(A, upper, compute_v))
