"""Matrix inverse: ``inv`` and ``inv_ex`` with torch.linalg semantics.

Op ``mpslinalg::inv_ex``: on the metal backend LU factors by the LU kernels, solved against the
identity; n <= 4 takes the small path, with the same ``info`` and errors. float64 / complex128
on the metal backend: each column refined as a solve (`mpslinalg.linalg.refine_metal`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core.declare import LINALG_REFINED, Declaration, Matrix, Result, info
from .._core.torch_bugs import per_matrix
from . import lu_metal, refine_metal
from .lu import small_lu_when, through_lu_op

__all__ = ["inv", "inv_ex"]


def _inv_metal(A: Tensor) -> tuple[Tensor, Tensor]:
    # A dense identity per batch element: the solve overwrites a contiguous right-hand side.
    eye = torch.zeros_like(A, memory_format=torch.contiguous_format)
    eye.diagonal(dim1=-2, dim2=-1).fill_(1)
    if refine_metal.refined(A.dtype):  # each column refined as a solve
        return tuple(refine_metal.solve_refined(A, eye, fn="inv")[:2])
    LU, pivots, info = lu_metal.lu_factor_metal(A, fn="inv")
    return lu_metal.lu_solve_metal(LU, pivots, eye, fn="inv"), info


def _inv_backward(ctx, gX: Tensor, ginfo):
    """d(A^-1) = -A^-1 dA A^-1, so gA = -X^H gX X^H (Giles 2008, "An extended collection of
    matrix derivative results for forward and reverse mode AD", sec. 2.2.3; conjugate
    Wirtinger for complex)."""
    (X,) = ctx.saved_tensors
    XH = X.mH
    return (-(XH @ gX @ XH),)


#: (inverse, info) of square ``A``.
inv_ex_decl = Declaration(
    "inv_ex", [Matrix("A")], [Result("inverse", "A"), info()],
    forward={"metal": _inv_metal, "torch": lambda A: tuple(per_matrix(torch.linalg.inv_ex, A)),
             "small": small.small_inv_ex},
    small_when=refine_metal.unrefined(small_lu_when), through_op=through_lu_op,
    backward=_inv_backward, saves=["inverse"], dtypes=LINALG_REFINED)
inv_ex_op = inv_ex_decl.op


@inv_ex_decl.public(torch.linalg.inv_ex)
def inv_ex(A: Tensor, *, check_errors: bool = False, out: tuple[Tensor, Tensor] | None = None):
    r"""Inverse of a square matrix and ``info``; like `torch.linalg.inv_ex`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.
    check_errors : bool, optional
        Raise `mpslinalg.LinAlgError` for singular input (one device read).
    out : tuple of Tensor, optional
        ``(inverse, info)`` to write the results into.

    Returns
    -------
    inverse : Tensor
        ``(*, n, n)``.
    info : Tensor
        ``(*)`` int32: 0, or the 1-based index of the first exactly zero pivot of the LU
        factorisation (the inverse is then unspecified); for float64 / complex128 on the metal
        backend also ``-5``: the iterative refinement did not reach float64 accuracy. Never
        synchronises with the device unless ``check_errors``.

    Notes
    -----
    On the metal backend float64 and complex128 are computed by float32 kernels, each column
    of the inverse refined as a solve (the documentation's page "Float64 on a GPU without
    float64").

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.inv_ex(torch.tensor([[2., 0.], [0., 4.]])).inverse
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """


@inv_ex_decl.public(torch.linalg.inv)
def inv(A: Tensor, *, out: Tensor | None = None) -> Tensor:
    r"""Inverse of a square matrix; like `torch.linalg.inv`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        The inverse. Differentiable.

    Raises
    ------
    mpslinalg.LinAlgError
        "The diagonal element k is zero ..." ("(Batch element i)" for batches) for singular
        input, reading ``info`` from the device once.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.inv(torch.tensor([[2., 0.], [0., 4.]]))
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """
