"""Linear systems: ``solve`` and ``solve_ex`` with torch.linalg semantics.

``B`` is a batch of vectors when ``B.ndim == 1`` or ``B.shape == A.shape[:-1]`` (torch's rule),
otherwise a batch of matrices; batch dimensions broadcast, and ``info`` has ``A``'s batch shape
(A is factored once, before broadcasting). Op ``mpslinalg::solve_ex``: on the metal backend LU
factors by the LU kernels and their triangular solves; n <= 4 takes the small path. float64 /
complex128 on the metal backend are solved by iterative refinement on float32 kernels
(`mpslinalg.linalg.refine_metal`, docs/float64.rst).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core import checks
from .._core.declare import (
    LINALG_REFINED,
    Call,
    Declaration,
    Matrix,
    Operand,
    Param,
    Prepared,
    Result,
    info,
)
from .._core.torch_bugs import per_matrix
from . import lu_metal, refine_metal
from .lu import small_lu_when, through_lu_op

__all__ = ["solve", "solve_ex"]


def _first_of_broadcast(t: Tensor, shape: torch.Size) -> Tensor:
    """The entries of ``t`` (shape broadcast from ``shape``) at index 0 of every broadcast
    dimension, i.e. ``t`` brought back to ``shape`` where all broadcast copies are equal."""
    while t.dim() > len(shape):
        t = t[0]
    for dim, size in enumerate(shape):
        if size == 1 and t.shape[dim] != 1:
            t = t.narrow(dim, 0, 1)
    return t


def _rhs(A: Tensor, B: Tensor) -> Tensor:
    """B broadcast to the batch shape it shares with A."""
    batch = checks.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    return B.expand(*batch, *B.shape[-2:])


def _solve_small(A: Tensor, B: Tensor, left: bool, *, backend: str) -> tuple[Tensor, Tensor]:
    B = _rhs(A, B)
    if B.numel() == 0:  # nothing to solve, but info still describes A
        return torch.empty_like(B), small.small_inv_ex(A.contiguous(), backend=backend)[1]
    Ab = A.expand(*B.shape[:-2], *A.shape[-2:]).contiguous()
    if left:
        X, info = small.small_solve_ex(Ab, B.contiguous(), backend=backend)
    else:
        # X A = B: multiply by the inverse so that info describes A itself, as on the general
        # path (solving A^T X^T = B^T would report the pivots of A^T).
        Ainv, info = small.small_inv_ex(Ab, backend=backend)
        X = B @ Ainv
    return X, _first_of_broadcast(info, A.shape[:-2])


def _solve_metal(A: Tensor, B: Tensor, left: bool) -> tuple[Tensor, Tensor]:
    if refine_metal.refined(A.dtype):
        return tuple(refine_metal.solve_refined(A, B, left=left, fn="solve")[:2])
    LU, pivots, info = lu_metal.lu_factor_metal(A, fn="solve")
    return lu_metal.lu_solve_metal(LU, pivots, _rhs(A, B), left=left, fn="solve"), info


def _solve_torch(A: Tensor, B: Tensor, left: bool) -> tuple[Tensor, Tensor]:
    LU, pivots, info = per_matrix(torch.linalg.lu_factor_ex, A)
    B = _rhs(A, B)
    batch = B.shape[:-2]
    X = torch.linalg.lu_solve(LU.expand(*batch, *LU.shape[-2:]),
                              pivots.expand(*batch, pivots.shape[-1]), B, left=left)
    return X, info


def _solve_backward(ctx, gX: Tensor, ginfo):
    """A X = B: dX = A^-1 (dB - dA X), so gB = A^-H gX and gA = -gB X^H; for X A = B,
    gB = gX A^-H and gA = -X^H gB (Giles 2008, "An extended collection of matrix derivative
    results for forward and reverse mode AD", sec. 2.3.1; conjugate Wirtinger for complex).
    The adjoint system is solved through the op itself, so the rule is differentiable again."""
    A, X = ctx.saved_tensors
    gB, _ = solve_ex_op(A.mH, gX, ctx.left, ctx.backend, ctx.small, "")
    gA = -(gB @ X.mH) if ctx.left else -(X.mH @ gB)
    return gA, gB, None


def _prepare_solve(call: Call, A: Tensor, B: Tensor, left: bool) -> Prepared:
    fn = call.fn
    if B.dim() == 0:
        raise RuntimeError(f"mpslinalg.{fn}: B must have at least 1 dimension, got a scalar")
    # torch's rule (linalg_solve_is_vector_rhs): a vector, or a batch of vectors with A's
    # batch shape exactly.
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    Bm = B.unsqueeze(-1) if vector else B
    n = A.shape[-1]
    if (Bm.shape[-2] if left else Bm.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"mpslinalg.{fn}: Incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {Bm.shape[-2]}x{Bm.shape[-1]})")
    checks.broadcast_batch(fn, ("A", A.shape[:-2]), ("B", Bm.shape[:-2]))
    if vector:
        return Prepared((A, Bm, bool(left)), lambda X, info: (X.squeeze(-1), info))
    return Prepared((A, Bm, bool(left)), lambda X, info: (X, info))


#: (X, info) for A X = B (left) or X A = B; B a batch of matrices; batches broadcast, info has
#: A's batch shape (the factory sums gA and gB back to their inputs' shapes).
solve_ex_decl = Declaration(
    "solve_ex", [Matrix("A"), Operand("B", 2), Param("left", "bool")],
    [Result("result", "B"), info(batch="A")],
    forward={"metal": _solve_metal, "torch": _solve_torch, "small": _solve_small},
    small_when=refine_metal.unrefined(small_lu_when), through_op=through_lu_op,
    prepare=_prepare_solve, backward=_solve_backward, saves=["A", "result"],
    dtypes=LINALG_REFINED)
solve_ex_op = solve_ex_decl.op


@solve_ex_decl.public(torch.linalg.solve_ex)
def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False,
             out: tuple[Tensor, Tensor] | None = None):
    r"""Solution of ``A X = B`` (or ``X A = B`` when ``left=False``) and ``info``; like
    `torch.linalg.solve_ex`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)`` square matrices.
    B : Tensor
        ``(*, n, k)`` matrices, or ``(*, n)`` vectors when ``B.ndim == 1`` or
        ``B.shape == A.shape[:-1]``; batch dimensions broadcast with ``A``'s.
    left : bool, optional
        Solve ``A X = B`` (True) or ``X A = B``.
    check_errors : bool, optional
        Raise `mpslinalg.LinAlgError` for singular ``A`` (one device read); by default
        nothing synchronises with the device.
    out : tuple of Tensor, optional
        ``(result, info)`` to write the results into.

    Returns
    -------
    result : Tensor
        X, with the broadcast batch shape.
    info : Tensor
        ``A``'s batch shape, int32: 0, or the 1-based index of the first exactly zero pivot of
        ``A``'s LU factorisation (``result`` is then unspecified); for float64 / complex128 on
        the metal backend also ``-5``: the iterative refinement did not reach float64
        accuracy (``A`` too ill-conditioned for float32 factors).

    Notes
    -----
    On the metal backend float64 and complex128 are computed by float32 kernels with
    mixed-precision iterative refinement, to float64-class accuracy (a CPU tensor is worked
    on the Apple GPU, the result returned to the CPU); see the documentation's page "Float64
    on a GPU without float64".

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[2., 0.], [0., 4.]])
    >>> mpslinalg.solve_ex(A, torch.tensor([2., 2.]))
    torch.return_types.linalg_solve_ex(
    result=tensor([1.0000, 0.5000]),
    info=tensor(0, dtype=torch.int32))
    """


@solve_ex_decl.public(torch.linalg.solve)
def solve(A: Tensor, B: Tensor, *, left: bool = True, out: Tensor | None = None) -> Tensor:
    r"""Solution of ``A X = B`` (or ``X A = B`` when ``left=False``); like
    `torch.linalg.solve`.

    Parameters
    ----------
    A, B : Tensor
        As `solve_ex`.
    left : bool, optional
        Solve ``A X = B`` (True) or ``X A = B``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        X. Differentiable with respect to ``A`` and ``B``.

    Raises
    ------
    mpslinalg.LinAlgError
        "The solver failed because the input matrix is singular." ("(Batch element i)" for
        batches), reading ``info`` from the device once.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[2., 0.], [0., 4.]])
    >>> mpslinalg.solve(A, torch.tensor([[2.], [2.]]))
    tensor([[1.0000],
            [0.5000]])
    """
