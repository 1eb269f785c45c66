"""Products: ``matmul``, ``multi_dot``, ``vecdot``, ``cross``, ``diagonal``, ``vander`` and
``matrix_power`` with torch.linalg semantics.

Composites (`mpslinalg._core.declare`, ``composite=True``). The first six are torch's own
functions on every backend: torch runs them on MPS with its own kernels (matrix products through
MPSGraph), so mpslinalg adds its name, its errors and its declaration (the shape rule a sharded
call reads) and nothing else. ``matrix_power`` is torch's binary powering by ``matmul``, with a
negative power through `mpslinalg.inv` (on the metal backend, its LU kernels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from .._core import checks
from .._core.backend import EVERY_DTYPE
from .._core.declare import AS_GIVEN, Declaration, Operand, Param, Result
from .._core.op import EXACT, SAFE_CAST, OutCasting
from .inverse import inv

__all__ = ["cross", "diagonal", "matmul", "matrix_power", "multi_dot", "vander", "vecdot"]

#: torch's function on the torch backend whatever the dtype (integers included).
_EVERY_DTYPE = EVERY_DTYPE


def _torch_everywhere(fn):
    return {"torch": fn, "metal": fn}


#: The declaration of a function that is torch's own on every backend.
_TORCHS_OWN = {"dtypes": AS_GIVEN, "composite": True, "torch_everywhere": True}


def _tensor(name: str) -> Operand:
    return Operand(name, None, same_dtype=False)


def _matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """torch.matmul's result shape (1-D operands promoted and their dimension removed)."""
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return tuple(a[:-1])
    if len(a) == 1:
        return (*b[:-2], b[-1])
    batch = checks.broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


#: linalg.vecdot's out= rule, in its words.
_VECDOT_OUT = OutCasting(lambda result, out: False,
                         "Expected out of dtype{want_type} but found {got_type}")
#: matrix_power's out= rule where its last step is a product written into ``out``: a dtype the
#: result cannot be cast to is refused first (as by the linalg functions that cast), any other
#: but the result's own then as by structured kernels; where the last step is a copy (powers
#: 0, 1 and 2^k, k >= 2, of torch's binary powering), the cast of the copy.
_POWER_PRODUCT_OUT = replace(EXACT, uncastable=SAFE_CAST.wrong_dtype, names=("result",))


def _power_out(A, n, **_) -> OutCasting:
    k = abs(n) if isinstance(n, int) else 0
    copied = k <= 1 or (k >= 4 and k & (k - 1) == 0)
    return SAFE_CAST if copied else _POWER_PRODUCT_OUT


# ---------------------------------------------------------------- matmul

matmul_decl = Declaration(
    "matmul", [_tensor("input"), _tensor("other")],
    [Result("result", _matmul_shape)],
    forward=_torch_everywhere(torch.linalg.matmul), **_TORCHS_OWN)


@matmul_decl.public(torch.linalg.matmul, casting=EXACT, fast_dtypes=_EVERY_DTYPE)
def matmul(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:
    r"""Matrix product with broadcasting; `torch.linalg.matmul` (an alias of `torch.matmul`) on
    every backend.

    Parameters
    ----------
    input, other : Tensor
        1-D or more; batch dimensions broadcast.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.matmul(torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([1., 1.]))
    tensor([3., 7.])
    """


# ---------------------------------------------------------------- multi_dot


def _multi_dot_shape(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    first, last = shapes[0], shapes[-1]
    return (*first[:-1], *last[1:]) if len(shapes) > 1 else tuple(first)


multi_dot_decl = Declaration(
    "multi_dot", [Operand("tensors", None, same_dtype=False, built=True)],
    [Result("result", lambda tensors: _multi_dot_shape(tensors))],
    forward=_torch_everywhere(torch.linalg.multi_dot), **_TORCHS_OWN)


@multi_dot_decl.public(torch.linalg.multi_dot)
def multi_dot(tensors: Sequence[Tensor], *, out: Tensor | None = None) -> Tensor:
    r"""Product of two or more matrices in the cheapest order; `torch.linalg.multi_dot` on
    every backend.

    Parameters
    ----------
    tensors : sequence of Tensor
        The first may be 1-D (a row vector), the last 1-D (a column vector), the others 2-D.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.multi_dot([torch.ones(2), torch.eye(2), torch.tensor([1., 2.])])
    tensor(3.)
    """


# ---------------------------------------------------------------- vecdot


def _without(shape: Sequence[int], dim: int) -> tuple[int, ...]:
    return tuple(s for i, s in enumerate(shape) if i != dim % len(shape))


vecdot_decl = Declaration(
    "vecdot", [_tensor("x"), _tensor("y"), Param("dim", "int")],
    [Result("result", lambda x, y, dim: _without(checks.broadcast_shapes(x, y), dim))],
    forward=_torch_everywhere(lambda x, y, dim: torch.linalg.vecdot(x, y, dim=dim)), **_TORCHS_OWN)


@vecdot_decl.public(torch.linalg.vecdot, casting=_VECDOT_OUT, fast_dtypes=_EVERY_DTYPE)
def vecdot(x: Tensor, y: Tensor, *, dim: int = -1, out: Tensor | None = None) -> Tensor:
    r"""Dot product ``sum(conj(x) * y)`` over ``dim``, broadcasting the others;
    `torch.linalg.vecdot` on every backend.

    Parameters
    ----------
    x, y : Tensor
        Broadcastable; ``x`` is conjugated when complex.
    dim : int, optional
        The dimension reduced.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.vecdot(torch.tensor([1., 2.]), torch.tensor([3., 4.]))
    tensor(11.)
    """


# ---------------------------------------------------------------- cross

cross_decl = Declaration(
    "cross", [_tensor("input"), _tensor("other"), Param("dim", "int")],
    [Result("result", lambda input, other, dim: tuple(checks.broadcast_shapes(input, other)))],
    forward=_torch_everywhere(lambda input, other, dim: torch.linalg.cross(input, other,
                                                                         dim=dim)), **_TORCHS_OWN)


@cross_decl.public(torch.linalg.cross, casting=EXACT, fast_dtypes=_EVERY_DTYPE)
def cross(input: Tensor, other: Tensor, *, dim: int = -1, out: Tensor | None = None) -> Tensor:
    r"""Cross product of 3-vectors along ``dim``, broadcasting the others;
    `torch.linalg.cross` on every backend.

    Parameters
    ----------
    input, other : Tensor
        Size 3 in ``dim``; broadcastable.
    dim : int, optional
        The dimension holding the vectors.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.cross(torch.tensor([1., 0., 0.]), torch.tensor([0., 1., 0.]))
    tensor([0., 0., 1.])
    """


# ---------------------------------------------------------------- diagonal


def _diagonal_shape(A, offset, dim1, dim2):
    n = len(A)
    d1, d2 = dim1 % n, dim2 % n
    rest = [s for i, s in enumerate(A) if i not in (d1, d2)]
    length = max(0, min(A[d1] - max(0, -offset), A[d2] - max(0, offset)))
    return (*rest, length)


diagonal_decl = Declaration(
    "diagonal", [_tensor("A"), Param("offset", "int"), Param("dim1", "int"),
                 Param("dim2", "int")],
    [Result("diagonal", _diagonal_shape)],
    forward=_torch_everywhere(lambda A, offset, dim1, dim2: torch.linalg.diagonal(
        A, offset=offset, dim1=dim1, dim2=dim2)), **_TORCHS_OWN)


@diagonal_decl.public(torch.linalg.diagonal, fast_dtypes=_EVERY_DTYPE)
def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    r"""The diagonals of the matrices in dimensions ``dim1``, ``dim2``, as a view (appended as
    the last dimension); `torch.linalg.diagonal` on every backend.

    Parameters
    ----------
    A : Tensor
        At least 2-D.
    offset : int, optional
        0: the main diagonal; positive: above it; negative: below it.
    dim1, dim2 : int, optional
        The matrix dimensions.

    Returns
    -------
    Tensor
        A view of ``A``. Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.diagonal(torch.tensor([[1., 2.], [3., 4.]]))
    tensor([1., 4.])
    """


# ---------------------------------------------------------------- vander


def _vander_shape(x, N):
    return (*x, x[-1] if N is None else N)


vander_decl = Declaration(
    "vander", [_tensor("x"), Param("N", "int?")],
    [Result("vander", _vander_shape)],
    forward=_torch_everywhere(lambda x, N: torch.linalg.vander(x, N=N)), **_TORCHS_OWN)


@vander_decl.public(torch.linalg.vander, fast_dtypes=_EVERY_DTYPE)
def vander(x: Tensor, *, N: int | None = None) -> Tensor:
    r"""Vandermonde matrix ``[1, x, x^2, ..., x^(N-1)]`` of the last dimension of ``x`` (powers
    increasing, unlike `numpy.vander`); `torch.linalg.vander` on every backend.

    Parameters
    ----------
    x : Tensor
        ``(*, n)``.
    N : int, optional
        Number of columns (default ``n``).

    Returns
    -------
    Tensor
        ``(*, n, N)``. Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.vander(torch.tensor([1., 2., 3.]))
    tensor([[1., 1., 1.],
            [1., 2., 4.],
            [1., 3., 9.]])
    """


# ---------------------------------------------------------------- matrix_power


def _identity_like(A: Tensor) -> Tensor:
    """Identities of A's shape, as torch makes A^0: written over a copy of A, so that the result
    is connected to A in the graph with a zero gradient (whatever A holds, Inf and NaN too)."""
    eye = torch.zeros(A.shape, dtype=A.dtype, device=A.device)
    eye.diagonal(dim1=-2, dim2=-1).fill_(1)
    return A.clone(memory_format=torch.contiguous_format).copy_(eye)


def _matrix_power_metal(A: Tensor, n: int) -> Tensor:
    """torch's sequence of products (so both backends round alike): A^0 = I, A^-k = inv(A)^k,
    then 1, 2 and 3 directly and binary powering above."""
    if n == 0:
        return _identity_like(A)
    if n < 0:
        A, n = inv(A), -n
    if n == 1:
        return A.clone(memory_format=torch.contiguous_format)
    if n == 2:
        return A @ A
    if n == 3:
        return (A @ A) @ A
    z = result = None
    while n > 0:
        bit, n = n % 2, n // 2
        z = A if z is None else z @ z
        if bit:
            result = z if result is None else result @ z
    return result


matrix_power_decl = Declaration(
    "matrix_power", [Operand("A", 2, same_dtype=False), Param("n", "int")],
    [Result("power", "A")],
    forward={"torch": lambda A, n: torch.linalg.matrix_power(A, n),
             "metal": _matrix_power_metal},
    dtypes=AS_GIVEN, composite=True)


@matrix_power_decl.public(torch.linalg.matrix_power, casting=_power_out,
                          fast_dtypes=_EVERY_DTYPE)
def matrix_power(A: Tensor, n: int, *, out: Tensor | None = None) -> Tensor:
    r"""The integer power ``A^n`` of square matrices; like `torch.linalg.matrix_power`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, m)``; integer dtypes too for ``n >= 0``.
    n : int
        0 gives the identity; negative powers invert ``A`` first (`inv`, raising
        `mpslinalg.LinAlgError` for singular ``A``).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*, m, m)``. Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[1., 1.], [0., 1.]])
    >>> mpslinalg.matrix_power(A, 3)
    tensor([[1., 3.],
            [0., 1.]])
    >>> mpslinalg.matrix_power(A, -1)
    tensor([[ 1., -1.],
            [ 0.,  1.]])
    """
