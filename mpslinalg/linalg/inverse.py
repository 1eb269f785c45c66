"""Matrix inverse: ``inv`` and ``inv_ex`` with torch.linalg semantics.

Op ``mpslinalg::inv_ex``: on the metal backend LU factors by the LU kernels, solved against the
identity; n <= 4 takes the small path, with the same ``info`` and errors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core import checks
from .._core.op import Op, cast_back, public, write_out
from .._core.torch_bugs import mkl_batched_getrf_affected, per_matrix
from . import lu_metal

__all__ = ["inv", "inv_ex"]


def _inv_metal(A: Tensor) -> tuple[Tensor, Tensor]:
    LU, pivots, info = lu_metal.lu_factor_metal(A, fn="inv")
    # A dense identity per batch element: the solve overwrites a contiguous right-hand side.
    eye = torch.zeros_like(A, memory_format=torch.contiguous_format)
    eye.diagonal(dim1=-2, dim2=-1).fill_(1)
    return lu_metal.lu_solve_metal(LU, pivots, eye, fn="inv"), info


def _inv_save(ctx, inputs, outputs) -> None:
    ctx.save_for_backward(outputs[0])


def _inv_backward(ctx, gX: Tensor, ginfo):
    """d(A^-1) = -A^-1 dA A^-1, so gA = -X^H gX X^H (Giles 2008, "An extended collection of
    matrix derivative results for forward and reverse mode AD", sec. 2.2.3; conjugate
    Wirtinger for complex)."""
    (X,) = ctx.saved_tensors
    XH = X.mH
    return (-(XH @ gX @ XH),)


#: (inverse, info) of square ``A`` in its compute dtype.
inv_ex_op = Op(
    "inv_ex", "(Tensor A) -> (Tensor, Tensor)",
    forward={"metal": _inv_metal, "torch": lambda A: tuple(per_matrix(torch.linalg.inv_ex, A)),
             "small": small.small_inv_ex},
    fake=lambda A: (torch.empty_like(A, memory_format=torch.contiguous_format),
                    A.new_empty(A.shape[:-2], dtype=torch.int32)),
    info=1, save=_inv_save, backward=_inv_backward)


def _takes_general_path(A) -> bool:
    return small.may_use_small_path(A) or mkl_batched_getrf_affected(A)


def _inv_ex(fn: str, A: Tensor, check: str) -> tuple[Tensor, Tensor]:
    A, Ac, backend = checks.prepare(fn, A)
    use_small = small.use_small_path(Ac, backend)
    X, info = inv_ex_op(Ac, backend, use_small, check)
    return cast_back(X, A.dtype), info


@public(torch.linalg.inv_ex, general_when=_takes_general_path, checks="check_errors")
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
        factorisation (the inverse is then unspecified). Never synchronises with the device
        unless ``check_errors``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.inv_ex(torch.tensor([[2., 0.], [0., 4.]])).inverse
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """
    api = "mpslinalg.inv_ex" if check_errors else ""
    result = torch.return_types.linalg_inv_ex(_inv_ex("inv_ex", A, api))
    return write_out("inv_ex", out, result)


@public(torch.linalg.inv, general_when=_takes_general_path, checks=True)
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
    X, _ = _inv_ex("inv", A, "mpslinalg.inv")
    return write_out("inv", out, X)
