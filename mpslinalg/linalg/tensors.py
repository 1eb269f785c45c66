"""Tensor equations: ``tensorinv`` and ``tensorsolve`` with torch.linalg semantics.

Composites (`mpslinalg._core.declare`, ``composite=True``): the tensor is reshaped to a square
matrix as torch reshapes it and handed to `mpslinalg.inv` / `mpslinalg.solve`, so on the metal
backend they run its LU kernels (the n <= 4 path for tensors of up to 4 elements a side).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._core.declare import AS_GIVEN, Declaration, Operand, Param, Result
from .._core.op import SAFE_CAST
from .inverse import inv
from .solve import solve

__all__ = ["tensorinv", "tensorsolve"]


# ---------------------------------------------------------------- tensorinv


def _tensorinv_metal(A: Tensor, ind: int) -> Tensor:
    rows, cols = A.shape[:ind], A.shape[ind:]
    X = inv(A.reshape(math.prod(rows), math.prod(cols)))
    return X.reshape(*cols, *rows)


tensorinv_decl = Declaration(
    "tensorinv", [Operand("A", None, same_dtype=False), Param("ind", "int")],
    [Result("inverse", lambda A, ind: (*A[ind:], *A[:ind]))],
    forward={"torch": lambda A, ind: torch.linalg.tensorinv(A, ind),
             "metal": _tensorinv_metal},
    dtypes=AS_GIVEN, composite=True)


@tensorinv_decl.public(torch.linalg.tensorinv, casting=SAFE_CAST)
def tensorinv(A: Tensor, ind: int = 2, *, out: Tensor | None = None) -> Tensor:
    r"""The inverse of ``A`` for `torch.tensordot` over ``ind`` dimensions; like
    `torch.linalg.tensorinv`.

    Parameters
    ----------
    A : Tensor
        With ``prod(A.shape[:ind]) == prod(A.shape[ind:])``.
    ind : int, optional
        The number of leading dimensions that form the rows (positive).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Shape ``A.shape[ind:] + A.shape[:ind]``. Differentiable.

    Raises
    ------
    mpslinalg.LinAlgError
        If the reshaped matrix is singular (`inv`'s message).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.eye(4).reshape(4, 2, 2) * 2
    >>> mpslinalg.tensorinv(A, ind=1).shape
    torch.Size([2, 2, 4])
    """


# ---------------------------------------------------------------- tensorsolve


def _tensorsolve_shape(A, B, dims):
    if dims is not None:
        n = len(A)
        moved = [d % n for d in dims]
        A = [s for i, s in enumerate(A) if i not in moved] + [A[d] for d in moved]
    return tuple(A[len(B):])


def _tensorsolve_metal(A: Tensor, B: Tensor, dims) -> Tensor:
    if dims is not None:
        A = A.movedim(tuple(dims), tuple(range(A.dim() - len(dims), A.dim())))
    shape = A.shape[B.dim():]
    size = math.prod(shape)
    return solve(A.reshape(size, size), B.flatten()).reshape(shape)


tensorsolve_decl = Declaration(
    "tensorsolve",
    [Operand("A", None, same_dtype=False), Operand("B", None, same_dtype=False),
     Param("dims", "int[]?")],
    [Result("X", _tensorsolve_shape)],
    forward={"torch": lambda A, B, dims: torch.linalg.tensorsolve(A, B, dims),
             "metal": _tensorsolve_metal},
    dtypes=AS_GIVEN, composite=True)


@tensorsolve_decl.public(torch.linalg.tensorsolve, casting=SAFE_CAST)
def tensorsolve(A: Tensor, B: Tensor, dims: tuple[int, ...] | None = None, *,
                out: Tensor | None = None) -> Tensor:
    r"""The solution ``X`` of ``tensordot(A, X, X.ndim) = B``; like `torch.linalg.tensorsolve`.

    Parameters
    ----------
    A : Tensor
        With ``prod(A.shape[B.ndim:]) == prod(B.shape)`` (after ``dims`` are moved last).
    B : Tensor
        The right-hand side, of the shape of ``A``'s leading dimensions.
    dims : tuple of int, optional
        Dimensions of ``A`` moved to the end first.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Shape ``A.shape[B.ndim:]``. Differentiable.

    Raises
    ------
    mpslinalg.LinAlgError
        If the reshaped matrix is singular (`solve`'s message).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.eye(6).reshape(2, 3, 6) * 2
    >>> mpslinalg.tensorsolve(A, torch.ones(2, 3))
    tensor([0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000])
    """
