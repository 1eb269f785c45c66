"""Cholesky factorisation, triangular solves and Cholesky solves of n <= 4 matrices in one pass
over the batch: the entry points, their queries of the path tables (``paths.TABLES["cholesky"]``,
``["solve_triangular"]``, ``["cholesky_solve"]``) and the Metal host code.

The algorithms are `mpslinalg.small.codegen.emit_cholesky` (LAPACK's potf2: info = the order of
the first leading minor that is not positive, and from there potf2's partial result, as
torch.linalg.cholesky_ex on the CPU leaves it), `emit_triangular_solve` (trsm's substitution)
and `emit_cholesky_solve` (potrs), generated for three targets:
``metal/linalg/small_cholesky.{h,metal}`` (metal backend, float32 and complex64, one launch per
call, one thread per matrix), `mpslinalg.small.cpu_simd` (torch backend on CPU, float32 and
complex64, column-major batches such as torch's own factors read in place) and
`mpslinalg.small.triton_kernels` (torch backend on CUDA, float32). Where no row of a table
serves a call (float64; complex64 on CUDA), torch's own function runs.

The interface the family module (``mpslinalg/linalg/cholesky.py``) wires into its declarations
(``small=`` / ``small_when=``); the arguments are validated, of one dtype, and square where they
must be; the functions only compute (forward only, no host synchronisation, inputs never
modified, results in torch's layout and dtype):

- ``small_cholesky_ex(A, upper=False, backend=None) -> (factor, info)``: A (*, n, n), only the
  triangle ``upper`` names read; the factor (the other triangle zero; row-major, where torch's
  is column-major: the same values) and info (*,) int32, as torch.linalg.cholesky_ex;
  ``use_small_cholesky(A, backend)`` / ``may_use_small_cholesky(A)``.
- ``small_solve_triangular(A, B, upper, left=True, unitriangular=False, backend=None) -> X``: A
  (*, n, n) triangular, B (*, n, k) (left) or (*, k, n), batch dimensions broadcast, as
  torch.linalg.solve_triangular; ``use_small_solve_triangular(A, B, left, backend)`` (also asks
  k <= 4: the table's crossovers were measured with few right-hand sides, and a wide B is
  torch's blocked trsm's strength) / ``may_use_small_solve_triangular(A)``.
- ``small_cholesky_solve(B, L, upper=False, backend=None) -> X``: L (*, n, n) the factor (its
  triangle read), B (*, n, k), broadcast, as torch.cholesky_solve;
  ``use_small_cholesky_solve(B, L, backend)`` (k <= 4 likewise) /
  ``may_use_small_cholesky_solve(B, L)``.

``backend`` None means the backend in force (``resolve_backend``). In a declaration (see
``mpslinalg/linalg/matrix_exp.py``): ``forward={..., "small": small_cholesky_ex}`` (the
declaration passes the op's arguments and ``backend=``), ``small_when=lambda backend, A, upper:
use_small_cholesky(A, backend)``, ``through_op=may_use_small_cholesky`` (the ``may_use_*``
predicates ignore arguments after the ones they read, so they take the public arguments by
position); for solve_triangular ``small_when=lambda backend, A, B, upper, left, unitriangular:
use_small_solve_triangular(A, B, left, backend)``, for cholesky_solve ``small_when=lambda
backend, B, L, upper: use_small_cholesky_solve(B, L, backend)``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .._core import metal as _metal
from . import paths
from .codegen import MAX_N

#: Metal source of the kernels.
_SOURCE = "linalg/small_cholesky.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256

#: Most right-hand sides for which solve_triangular and cholesky_solve take the small path.
MAX_RHS = MAX_N


def _metal_cholesky_ex(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from .._core.copy import contiguous

    L = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    batch = math.prod(A.shape[:-2])
    if batch:
        kern = _metal.kernel(_SOURCE, "small_cholesky", A.dtype, A.device, fn="cholesky_ex",
                             n=A.shape[-1], upper=upper)
        _metal.launch(kern, contiguous(A, "cholesky_ex"), L, info, batch, threads=batch,
                      group_size=min(_GROUP, batch))
    return L, info


def _metal_rhs(op: str, fn: str, A: torch.Tensor, B: torch.Tensor, **params: int) -> torch.Tensor:
    """One launch of a kernel with right-hand sides: A, B, X, batch, nrhs."""
    from .._core.copy import contiguous

    X = torch.empty(B.shape, dtype=B.dtype, device=B.device)
    batch = math.prod(A.shape[:-2])
    if batch and B.numel():
        n = A.shape[-1]
        nrhs = B.shape[-1] if params.get("left", True) else B.shape[-2]
        kern = _metal.kernel(_SOURCE, op, A.dtype, A.device, fn=fn, n=n, **params)
        _metal.launch(kern, contiguous(A, fn), contiguous(B, fn), X, batch, nrhs,
                      threads=batch, group_size=min(_GROUP, batch))
    return X


def _metal_solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool,
                            unitriangular: bool) -> torch.Tensor:
    return _metal_rhs("small_solve_triangular", "solve_triangular", A, B, left=left,
                      upper=upper, unit=unitriangular)


def _metal_cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool) -> torch.Tensor:
    return _metal_rhs("small_cholesky_solve", "cholesky_solve", L, B, upper=upper)


def _torch_cholesky_ex(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.linalg.cholesky_ex(A, upper=upper))


def _torch_solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool,
                            unitriangular: bool) -> torch.Tensor:
    return torch.linalg.solve_triangular(A, B, upper=upper, left=left,
                                         unitriangular=unitriangular)


#: The functions of the paths this family binds itself (`paths.functions` has the generated
#: kernels').
_OWN = {
    paths.METAL: SimpleNamespace(small_cholesky_ex=_metal_cholesky_ex,
                                 small_solve_triangular=_metal_solve_triangular,
                                 small_cholesky_solve=_metal_cholesky_solve),
    paths.TORCH_LINALG: SimpleNamespace(small_cholesky_ex=_torch_cholesky_ex,
                                        small_solve_triangular=_torch_solve_triangular,
                                        small_cholesky_solve=torch.cholesky_solve),
}


def _broadcast(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A and B with their batch dimensions broadcast to one shape (as they are when they
    agree: torch.broadcast_shapes costs more than the kernel of a few hundred matrices)."""
    if A.shape[:-2] == B.shape[:-2]:
        return A, B
    shape = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    return A.expand(*shape, *A.shape[-2:]), B.expand(*shape, *B.shape[-2:])


# ------------------------------------------------------------------------------ queries

def may_use_small_cholesky(A: torch.Tensor, *_: object) -> bool:
    """A cheap necessary condition of `use_small_cholesky` on the torch backend (shapes only:
    `mpslinalg.small.paths.may_take_small_path`; further arguments, the public call's, are
    ignored)."""
    return paths.may_take_small_path("cholesky", A)


def use_small_cholesky(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should factor ``A`` on ``backend`` (default: the one in force):
    n <= 4, every batch on the metal backend, on the torch backend from the table's
    crossover."""
    return paths.takes_small_path("cholesky", A, backend)


def may_use_small_solve_triangular(A: torch.Tensor, *_: object) -> bool:
    """A cheap necessary condition of `use_small_solve_triangular` on the torch backend (A's
    shape only; further arguments ignored)."""
    return paths.may_take_small_path("solve_triangular", A)


def _few_rhs(B: torch.Tensor, left: bool) -> bool:
    return B.dim() >= 2 and B.shape[-1 if left else -2] <= MAX_RHS


def use_small_solve_triangular(A: torch.Tensor, B: torch.Tensor, left: bool = True,
                               backend: str | None = None) -> bool:
    """True when the small path should solve with the triangular ``A`` on ``backend``: the
    table's decision for A's shape, batch and dtype, and at most `MAX_RHS` right-hand sides."""
    return _few_rhs(B, left) and paths.takes_small_path("solve_triangular", A, backend)


def may_use_small_cholesky_solve(B: torch.Tensor, L: torch.Tensor, *_: object) -> bool:
    """A cheap necessary condition of `use_small_cholesky_solve` on the torch backend (L's
    shape only; further arguments ignored)."""
    return paths.may_take_small_path("cholesky_solve", L)


def use_small_cholesky_solve(B: torch.Tensor, L: torch.Tensor,
                             backend: str | None = None) -> bool:
    """True when the small path should solve with the Cholesky factor ``L`` on ``backend``:
    the table's decision for L, and at most `MAX_RHS` right-hand sides."""
    return _few_rhs(B, True) and paths.takes_small_path("cholesky_solve", L, backend)


# ------------------------------------------------------------------------------ entry points

def small_cholesky_ex(A: torch.Tensor, upper: bool = False,
                      backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, info) of torch.linalg.cholesky_ex(A, upper=upper) for A (*, n, n), n <= 4, by
    the path the table chooses for ``backend``."""
    path = paths.choose("cholesky", A, backend)
    return paths.functions(path, _OWN).small_cholesky_ex(A, bool(upper))


def small_solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool = True,
                           unitriangular: bool = False,
                           backend: str | None = None) -> torch.Tensor:
    """torch.linalg.solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)
    for A (*, n, n), n <= 4, by the path the table chooses for ``backend``."""
    path = paths.choose("solve_triangular", A, backend)
    A, B = _broadcast(A, B)
    return paths.functions(path, _OWN).small_solve_triangular(
        A, B, bool(upper), bool(left), bool(unitriangular))


def small_cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool = False,
                         backend: str | None = None) -> torch.Tensor:
    """torch.cholesky_solve(B, L, upper) for L (*, n, n), n <= 4, by the path the table chooses
    for ``backend``."""
    path = paths.choose("cholesky_solve", L, backend)
    L, B = _broadcast(L, B)
    return paths.functions(path, _OWN).small_cholesky_solve(B, L, bool(upper))
