"""Linear systems: ``solve`` and ``solve_ex`` with torch.linalg semantics (DESIGN.md 5).

``B`` is a batch of vectors when ``B.ndim == 1`` or ``B.shape == A.shape[:-1]`` (torch's rule),
otherwise a batch of matrices; batch dimensions broadcast, and ``info`` has ``A``'s batch shape
(A is factored once, before broadcasting). Backends: ``"torch"`` delegates to torch.linalg after
the same validation; ``"metal"`` factors with the LU kernels and solves with their triangular
solves; n <= 4 takes the single-launch small path on both backends. The metal and small paths
run through the custom op ``mpslinalg::solve_ex``, whose derivative rule is below.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks
from ._errors import check_errors as _check_errors
from ._results import SolveExResult
from .lu import (
    _small,
    first_of_broadcast,
    fresh,
    lu_factor_metal,
    lu_solve_metal,
    prepare,
    small_call,
    sum_to,
    to_dtype,
    use_small,
)

__all__ = ["solve", "solve_ex"]


def _solve_small(A: Tensor, B: Tensor, left: bool, backend: str) -> tuple[Tensor, Tensor]:
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    Ab = fresh(A.expand(*batch, *A.shape[-2:]))
    if left:
        X, info = small_call(backend, _small().small_solve_ex, Ab,
                             fresh(B.expand(*batch, *B.shape[-2:])))
    else:
        # X A = B: multiply by the inverse so that info describes A itself, as on the general
        # path (solving A^T X^T = B^T would report the pivots of A^T).
        Ainv, info = small_call(backend, _small().small_inv_ex, Ab)
        X = B @ Ainv
    return fresh(X), first_of_broadcast(info, A.shape[:-2])


@torch.library.custom_op("mpslinalg::solve_ex", mutates_args=())
def _solve_ex_op(A: Tensor, B: Tensor, left: bool, backend: str, small: bool
                 ) -> tuple[Tensor, Tensor]:
    """(X, info) for A X = B (left) or X A = B; B is a batch of matrices; batches broadcast;
    info has A's batch shape."""
    if small:
        return _solve_small(A, B, left, backend)
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    B = B.expand(*batch, *B.shape[-2:])
    if backend == "metal":
        LU, pivots, info = lu_factor_metal(A, "solve")
        return lu_solve_metal(LU, pivots, B, left, False, "solve"), info
    LU, pivots, info = torch.linalg.lu_factor_ex(A)
    X = torch.linalg.lu_solve(LU.expand(*batch, *LU.shape[-2:]),
                              pivots.expand(*batch, pivots.shape[-1]), B, left=left)
    return fresh(X), info


@_solve_ex_op.register_fake
def _(A, B, left, backend, small):
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    return (B.new_empty((*batch, *B.shape[-2:])),
            A.new_empty(A.shape[:-2], dtype=torch.int32))


def solve_backward(gX: Tensor, A: Tensor, X: Tensor, left: bool, backend: str, small: bool
                   ) -> tuple[Tensor, Tensor]:
    """A X = B: dX = A^-1 (dB - dA X), so gB = A^-H gX and gA = -gB X^H; for X A = B,
    gB = gX A^-H and gA = -X^H gB (Giles 2008, "An extended collection of matrix derivative
    results for forward and reverse mode AD", sec. 2.3.1; conjugate Wirtinger for complex).
    The adjoint system is solved through the op itself, so the rule is differentiable again."""
    gB, _ = _solve_ex_op(A.mH, gX, left, backend, small)
    gA = -(gB @ X.mH) if left else -(X.mH @ gB)
    return gA, gB


def _solve_ex_setup(ctx, inputs, output) -> None:
    A, B, left, backend, small = inputs
    ctx.save_for_backward(A, output[0])
    ctx.flags = (left, backend, small)
    ctx.shapes = (A.shape, B.shape)


def _solve_ex_bwd(ctx, gX, ginfo):
    A, X = ctx.saved_tensors
    gA, gB = solve_backward(gX, A, X, *ctx.flags)
    shape_A, shape_B = ctx.shapes
    return sum_to(gA, shape_A), sum_to(gB, shape_B), None, None, None


_solve_ex_op.register_autograd(_solve_ex_bwd, setup_context=_solve_ex_setup)


def _solve_ex(fn: str, A: Tensor, B: Tensor, left: bool) -> tuple[Tensor, Tensor]:
    A, Ac, backend = prepare(fn, A)
    B = _checks.check_tensor(fn, "B", B)
    _checks.check_same_device(fn, A=A, B=B)
    _checks.check_same_dtype(fn, A=A, B=B)
    if B.dim() == 0:
        raise RuntimeError(f"mpslinalg.{fn}: B must have at least 1 dimension, got a scalar")
    # torch's rule (linalg_solve_is_vector_rhs): a vector, or a batch of vectors with A's
    # batch shape exactly.
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    Bm = B.unsqueeze(-1) if vector else B
    n = A.shape[-1]
    if (Bm.shape[-2] if left else Bm.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"mpslinalg.{fn}: incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {Bm.shape[-2]}x{Bm.shape[-1]})")
    _checks.broadcast_batch(fn, ("A", A.shape[:-2]), ("B", Bm.shape[:-2]))
    Bc = to_dtype(Bm, Ac.dtype)
    small = use_small(Ac, "solve", backend)
    if backend == "torch" and not small:
        X, info = torch.linalg.solve_ex(Ac, to_dtype(B, Ac.dtype), left=left)
    else:
        X, info = _solve_ex_op(Ac, Bc, left, backend, small)
        if vector:
            X = X.squeeze(-1)
    return to_dtype(X, B.dtype), info


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False
             ) -> SolveExResult:
    r"""Solution of ``A X = B`` (or ``X A = B`` when ``left=False``) and ``info``; like
    :func:`torch.linalg.solve_ex`.

    Args:
        A: ``(*, n, n)`` square matrices.
        B: ``(*, n, k)`` matrices, or ``(*, n)`` vectors when ``B.ndim == 1`` or
            ``B.shape == A.shape[:-1]``; batch dimensions broadcast with ``A``'s.

    Keyword args:
        left: solve ``A X = B`` (True) or ``X A = B``.
        check_errors: raise :class:`mpslinalg.LinAlgError` for singular ``A`` (one device
            read); by default nothing synchronises with the device.

    Returns:
        ``(result, info)``; ``info`` (A's batch shape) int32 is 0, or the 1-based index of the
        first exactly zero pivot of ``A``'s LU factorisation (``result`` is then unspecified).
    """
    X, info = _solve_ex("solve_ex", A, B, left)
    if check_errors:
        _check_errors(info, "mpslinalg.solve_ex")
    return SolveExResult(X, info)


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    r"""Solution of ``A X = B`` (or ``X A = B`` when ``left=False``); like
    :func:`torch.linalg.solve`. Raises :class:`mpslinalg.LinAlgError` ("The solver failed
    because the input matrix is singular.", "(Batch element i)" for batches) for singular ``A``,
    reading ``info`` from the device once. Differentiable with respect to ``A`` and ``B``.
    See :func:`solve_ex` for the arguments.
    """
    X, info = _solve_ex("solve", A, B, left)
    _check_errors(info, "mpslinalg.solve")
    return X
