"""Matrix inverse: ``inv`` and ``inv_ex`` with torch.linalg semantics (DESIGN.md 5).

Backends: ``"torch"`` delegates to torch.linalg after the same validation; ``"metal"`` factors
with the LU kernels and solves against the identity. Matrices with n <= 4 take the single-launch
small path (``mpslinalg.small_inverse``) on both backends, with the same ``info`` and errors.
The metal and small paths run through the custom op ``mpslinalg::inv_ex``, whose derivative rule
is below.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._errors import check_errors as _check_errors
from ._results import InvExResult
from .lu import (
    _small,
    fresh,
    lu_factor_metal,
    lu_solve_metal,
    prepare,
    small_call,
    to_dtype,
    use_small,
)

__all__ = ["inv", "inv_ex"]


@torch.library.custom_op("mpslinalg::inv_ex", mutates_args=())
def _inv_ex_op(A: Tensor, backend: str, small: bool) -> tuple[Tensor, Tensor]:
    """(inverse, info) of square ``A`` in its compute dtype."""
    if small:
        X, info = small_call(backend, _small().small_inv_ex, fresh(A))
        return fresh(X), fresh(info)
    if backend == "metal":
        LU, pivots, info = lu_factor_metal(A, "inv")
        # A dense identity per batch element: the solve overwrites a contiguous right-hand side.
        eye = torch.zeros_like(A, memory_format=torch.contiguous_format)
        eye.diagonal(dim1=-2, dim2=-1).fill_(1)
        return lu_solve_metal(LU, pivots, eye, True, False, "inv"), info
    X, info = torch.linalg.inv_ex(A)
    return fresh(X), info


@_inv_ex_op.register_fake
def _(A, backend, small):
    return (torch.empty_like(A, memory_format=torch.contiguous_format),
            A.new_empty(A.shape[:-2], dtype=torch.int32))


def inv_backward(gX: Tensor, X: Tensor) -> Tensor:
    """d(A^-1) = -A^-1 dA A^-1, so gA = -X^H gX X^H (Giles 2008, "An extended collection of
    matrix derivative results for forward and reverse mode AD", sec. 2.2.3; conjugate
    Wirtinger for complex)."""
    XH = X.mH
    return -(XH @ gX @ XH)


def _inv_ex_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(output[0])


def _inv_ex_bwd(ctx, gX, ginfo):
    (X,) = ctx.saved_tensors
    return inv_backward(gX, X), None, None


_inv_ex_op.register_autograd(_inv_ex_bwd, setup_context=_inv_ex_setup)


def inv_any(A: Tensor, backend: str) -> tuple[Tensor, Tensor]:
    """(inverse, info) of ``A`` (compute dtype) on ``backend``, always through the op (so that
    derivative rules of other ops can use it on any backend)."""
    return _inv_ex_op(A, backend, use_small(A, "inv", backend))


def _inv_ex(fn: str, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    A, Ac, backend = prepare(fn, A)
    small = use_small(Ac, fn, backend)
    if backend == "torch" and not small:
        X, info = torch.linalg.inv_ex(Ac)
    else:
        X, info = _inv_ex_op(Ac, backend, small)
    return A, to_dtype(X, A.dtype), info


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvExResult:
    r"""Inverse of a square matrix and ``info``; like :func:`torch.linalg.inv_ex`.

    Args:
        A: tensor of shape ``(*, n, n)``.

    Keyword args:
        check_errors: raise :class:`mpslinalg.LinAlgError` for singular input (one device read).

    Returns:
        ``(inverse, info)``: ``info`` ``(*)`` int32 is 0, or the 1-based index of the first exactly
        zero pivot of the LU factorisation (the inverse is then unspecified). Never synchronises
        with the device unless ``check_errors``.
    """
    _, X, info = _inv_ex("inv_ex", A)
    if check_errors:
        _check_errors(info, "mpslinalg.inv_ex")
    return InvExResult(X, info)


def inv(A: Tensor) -> Tensor:
    r"""Inverse of a square matrix; like :func:`torch.linalg.inv`. Raises
    :class:`mpslinalg.LinAlgError` ("The diagonal element k is zero ...", "(Batch element i)" for
    batches) for singular input, reading ``info`` from the device once."""
    _, X, info = _inv_ex("inv", A)
    _check_errors(info, "mpslinalg.inv")
    return X
