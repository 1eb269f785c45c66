"""Norms and condition numbers: ``vector_norm``, ``matrix_norm``, ``norm`` and ``cond`` with
torch.linalg semantics.

All four are composites (`mpslinalg._core.declare`, ``composite=True``): no op of their own,
so their derivatives, meta shapes and torch.compile graphs are those of the ops they are made
of, and torch's own function checks their arguments (on meta tensors) before they compute.
The orders that need singular values (``matrix_norm`` / ``norm`` with ``ord`` 2, -2 or
``'nuc'``, ``cond`` with ``p`` None, 2 or -2) take `mpslinalg.svdvals`, so on the metal backend
they run its Jacobi kernels (and the n <= 4 path for batches of small matrices); ``cond``'s
other orders take `mpslinalg.inv_ex` for the inverse's norm, as torch does (an infinite
condition number where the inverse does not exist). Every other order is a reduction of
torch's (``abs``, ``sum``, ``amax``), which torch runs on MPS with its own kernels, and
``vector_norm`` is torch's function on every backend.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import small
from .._core import torch_bugs
from .._core.backend import EVERY_DTYPE
from .._core.declare import AS_GIVEN, Declaration, Operand, Param, Result, real_dtype
from .._core.op import EXACT, SAFE_CAST, OutCasting
from .inverse import inv_ex
from .svd import svdvals

__all__ = ["cond", "matrix_norm", "norm", "vector_norm"]

#: Orders computed from singular values.
_SPECTRAL = (2, -2, "nuc")


def _is_spectral(ord: object) -> bool:
    return isinstance(ord, str) and ord == "nuc" or (
        not isinstance(ord, (str, bool)) and ord in (2, -2))


def _reduced(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    """``shape`` reduced over ``dims`` (a norm's result shape)."""
    axes = {d % len(shape) for d in dims} if shape else set()
    return tuple(1 if i in axes else s for i, s in enumerate(shape)
                 if keepdim or i not in axes)


def _norm_dtype(x: Tensor, dtype: torch.dtype | None) -> torch.dtype:
    return real_dtype(dtype if dtype is not None else x.dtype)


#: linalg.matrix_norm's and linalg.norm's out= rule: the result's dtype exactly, in their words.
_NORM_OUT = OutCasting(lambda result, out: False,
                       "expected out tensor dtype {want_type} but got: {got_type}")


# ---------------------------------------------------------------- vector_norm


def _vector_norm_shape(x, ord, dim, keepdim, dtype):
    dims = tuple(range(len(x))) if dim is None else (dim,) if isinstance(dim, int) else dim
    return _reduced(x, tuple(dims), keepdim)


def _vector_norm(x: Tensor, ord, dim, keepdim: bool, dtype) -> Tensor:
    return torch.linalg.vector_norm(x, ord, dim, keepdim, dtype=dtype)


vector_norm_decl = Declaration(
    "vector_norm",
    [Operand("x", None, same_dtype=False), Param("ord", "Scalar"), Param("dim", "int[]?"),
     Param("keepdim", "bool"), Param("dtype", "ScalarType?")],
    [Result("norm", _vector_norm_shape,
            lambda x, ord, dim, keepdim, dtype: _norm_dtype(x, dtype))],
    forward={"torch": _vector_norm, "metal": _vector_norm}, dtypes=AS_GIVEN, composite=True,
    torch_everywhere=True)


@vector_norm_decl.public(torch.linalg.vector_norm, casting=EXACT, fast_dtypes=frozenset((
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
    torch.complex128)))
def vector_norm(x: Tensor, ord: float = 2, dim: int | tuple[int, ...] | None = None,
                keepdim: bool = False, *, dtype: torch.dtype | None = None,
                out: Tensor | None = None) -> Tensor:
    r"""Vector norm of ``x`` over ``dim`` (all elements when None); like
    `torch.linalg.vector_norm`, and torch's function on every backend (torch runs it on MPS
    with its own kernels).

    Parameters
    ----------
    x : Tensor
        Any shape; floating or complex, float16 and bfloat16 included.
    ord : float, optional
        ``sum(|x|^ord)^(1/ord)``; ``inf`` / ``-inf``: max / min of ``|x|``; 0: the number of
        non-zero elements.
    dim : int or tuple of int, optional
        The dimensions reduced.
    keepdim : bool, optional
        Keep the reduced dimensions with size one.
    dtype : torch.dtype, optional
        ``x`` is cast to it before the norm is computed.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Real. Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.vector_norm(torch.tensor([3., -4.]))
    tensor(5.)
    """


# ---------------------------------------------------------------- matrix_norm


def _matrix_norm_shape(A, ord, dim, keepdim, dtype):
    return _reduced(A, tuple(dim), keepdim)


def _spectral_norm(A: Tensor, ord, dim: tuple[int, int], keepdim: bool) -> Tensor:
    """ord 2, -2 or 'nuc' of the matrices in dimensions ``dim``: from `svdvals`."""
    S = svdvals(A.movedim(tuple(dim), (-2, -1)))
    if ord == "nuc":
        value = S.sum(-1)
    elif ord == 2:
        value = S.amax(-1)
    else:
        value = S.amin(-1)
    if keepdim:
        for d in sorted(d % A.dim() for d in dim):
            value = value.unsqueeze(d)
    return value


def _matrix_norm_composed(A: Tensor, ord, dim, keepdim: bool, dtype) -> Tensor:
    if _is_spectral(ord):
        return _spectral_norm(A if dtype is None else A.to(dtype), ord, dim, keepdim)
    return torch.linalg.matrix_norm(A, ord, dim, keepdim, dtype=dtype)


def _small_spectral(A, ord, dim) -> bool:
    """A torch-backend call the n <= 4 singular values serve: a spectral order of a batch of
    small matrices in the last two dimensions, at least svdvals' crossover (shapes only: it
    runs on every call; every argument it admits is valid)."""
    return (_is_spectral(ord) and isinstance(A, Tensor) and A.dim() >= 3
            and tuple(dim) in ((-2, -1), (A.dim() - 2, A.dim() - 1))
            and small.may_use_small_svd(A, compute_uv=False))


def _matrix_norm_through_op(A, ord, dim, keepdim, dtype, out) -> bool:
    # the cheap tests first: every call of the fast path asks
    return (A.dim() >= 3 and (ord == 2 or ord == -2 or ord == "nuc") and dtype is None
            and type(keepdim) is bool and _small_spectral(A, ord, dim))


_MATRIX_INPUTS = [Operand("A", None, same_dtype=False), Param("ord", "Scalar"),
                  Param("dim", "int[]"), Param("keepdim", "bool"), Param("dtype", "ScalarType?")]

matrix_norm_decl = Declaration(
    "matrix_norm", _MATRIX_INPUTS,
    [Result("norm", _matrix_norm_shape,
            lambda A, ord, dim, keepdim, dtype: _norm_dtype(A, dtype))],
    forward={"torch": _matrix_norm_composed, "metal": _matrix_norm_composed},
    through_op=_matrix_norm_through_op, dtypes=AS_GIVEN, composite=True)


@matrix_norm_decl.public(torch.linalg.matrix_norm, casting=_NORM_OUT, fast_dtypes=EVERY_DTYPE)
def matrix_norm(A: Tensor, ord: float | str = "fro", dim: tuple[int, int] = (-2, -1),
                keepdim: bool = False, *, dtype: torch.dtype | None = None,
                out: Tensor | None = None) -> Tensor:
    r"""Matrix norm of the matrices in dimensions ``dim``; like `torch.linalg.matrix_norm`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)`` (the matrix dimensions are ``dim``); float32 / float64 / complex.
    ord : {'fro', 'nuc', inf, -inf, 1, -1, 2, -2}, optional
        Frobenius, nuclear (sum of the singular values), max / min row sum, max / min column
        sum, largest / smallest singular value.
    dim : tuple of two int, optional
        The two dimensions holding the matrices.
    keepdim : bool, optional
        Keep them with size one.
    dtype : torch.dtype, optional
        ``A`` is cast to it before the norm is computed.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Real. Differentiable (the spectral orders through `svdvals`' rule).

    Notes
    -----
    ``ord`` 2, -2 and ``'nuc'`` take `svdvals` (on the metal backend, its kernels); the other
    orders are torch's reductions.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[3., 0.], [0., -4.]])
    >>> mpslinalg.matrix_norm(A), mpslinalg.matrix_norm(A, 2), mpslinalg.matrix_norm(A, "nuc")
    (tensor(5.), tensor(4.), tensor(7.))
    """


# ---------------------------------------------------------------- norm


def _norm_is_matrix(A_ndim: int, ord, dim) -> bool:
    """torch.linalg.norm's rule: a matrix norm for a 2-tuple ``dim``, or for ``dim`` None with
    an ``ord`` given and a 2-D input."""
    if dim is not None:
        return not isinstance(dim, int) and len(dim) == 2
    return ord is not None and A_ndim == 2


def _norm_shape(A, ord, dim, keepdim, dtype):
    if _norm_is_matrix(len(A), ord, dim):
        return _reduced(A, tuple(dim) if dim is not None else (-2, -1), keepdim)
    dims = tuple(range(len(A))) if dim is None else (dim,) if isinstance(dim, int) else dim
    return _reduced(A, tuple(dims), keepdim)


def _norm(matrix_norm_forward):
    def forward(A: Tensor, ord, dim, keepdim: bool, dtype) -> Tensor:
        if _norm_is_matrix(A.dim(), ord, dim):
            return matrix_norm_forward(A, "fro" if ord is None else ord,
                                       (-2, -1) if dim is None else tuple(dim), keepdim, dtype)
        return torch.linalg.vector_norm(A, 2 if ord is None else ord, dim, keepdim,
                                        dtype=dtype)
    return forward


def _norm_through_op(input, ord, dim, keepdim, out, dtype) -> bool:
    return (dim is not None and (ord == 2 or ord == -2 or ord == "nuc") and dtype is None
            and type(keepdim) is bool and not isinstance(dim, int) and len(dim) == 2
            and _small_spectral(input, ord, dim))


norm_decl = Declaration(
    "norm",
    [Operand("input", None, same_dtype=False), Param("ord", "Scalar?"), Param("dim", "int[]?"),
     Param("keepdim", "bool"), Param("dtype", "ScalarType?")],
    [Result("norm", _norm_shape,
            lambda input, ord, dim, keepdim, dtype: _norm_dtype(input, dtype))],
    forward={"torch": _norm(_matrix_norm_composed), "metal": _norm(_matrix_norm_composed)},
    through_op=_norm_through_op, dtypes=AS_GIVEN, composite=True)


@norm_decl.public(torch.linalg.norm, casting=_NORM_OUT, fast_dtypes=EVERY_DTYPE)
def norm(input: Tensor, ord: float | str | None = None,
         dim: int | tuple[int, ...] | None = None, keepdim: bool = False, *,
         out: Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
    r"""Vector or matrix norm; like `torch.linalg.norm`: a matrix norm (`matrix_norm`) when
    ``dim`` is a 2-tuple, or when ``dim`` is None, ``ord`` is given and ``input`` is 2-D; else
    the vector norm (`vector_norm`) of ``dim`` (all of ``input`` when None; the 2-norm when
    ``ord`` is None).

    Parameters
    ----------
    input : Tensor
        Any shape (1-D or 2-D when ``ord`` is given without ``dim``).
    ord : float or str, optional
        As in `vector_norm` / `matrix_norm`.
    dim : int or tuple of int, optional
        The dimensions reduced.
    keepdim : bool, optional
        Keep them with size one.
    out : Tensor, optional
        Tensor to write the result into.
    dtype : torch.dtype, optional
        ``input`` is cast to it before the norm is computed.

    Returns
    -------
    Tensor
        Real. Differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.norm(torch.tensor([[1., 2.], [2., 4.]])), mpslinalg.norm(torch.eye(2), 2)
    (tensor(5.), tensor(1.))
    """


# ---------------------------------------------------------------- cond


def _cond_empty(A: Tensor) -> Tensor:
    """torch's answer for 0 x 0 matrices (NumPy does not define one): zeros."""
    return torch.zeros(A.shape[:-2], dtype=real_dtype(A.dtype), device=A.device)


def _cond_forward(spectral_norm, inverse, matrix_norm_forward):
    def forward(A: Tensor, p) -> Tensor:
        if A.numel() == 0:
            return _cond_empty(A)
        if p is None or (not isinstance(p, str) and abs(p) == 2):
            S = spectral_norm(A)
            largest, smallest = S[..., 0], S[..., -1]
            return smallest / largest if p == -2 else largest / smallest
        inv, info = inverse(A)
        # torch: the inverse's norm is infinite where the inverse does not exist
        inv = inv.masked_fill((info > 0)[..., None, None], math.inf)
        return matrix_norm_forward(A, p, (-2, -1), False, None) * matrix_norm_forward(
            inv, p, (-2, -1), False, None)
    return forward


def _cond_through_op(A, p, out) -> bool:
    """A torch-backend call goes through the composite where the n <= 4 singular values serve
    it, and where torch's own cond could not be differentiated (`mpslinalg._core.torch_bugs`;
    square matrices: torch words the refusal of the others)."""
    if not isinstance(A, Tensor):
        return False
    if p is None or (not isinstance(p, (str, bool)) and p in (2, -2)):
        return _small_spectral(A, 2, (-2, -1))
    return (torch_bugs.cond_gradient_affected(A, p) and A.dim() >= 2
            and A.shape[-1] == A.shape[-2])


cond_decl = Declaration(
    "cond", [Operand("A", None, same_dtype=False), Param("p", "Scalar?")],
    [Result("cond", lambda A, p: A[:-2], lambda A, p: real_dtype(A.dtype))],
    forward={"torch": _cond_forward(svdvals, torch.linalg.inv_ex, _matrix_norm_composed),
             "metal": _cond_forward(svdvals, inv_ex, _matrix_norm_composed)},
    through_op=_cond_through_op, dtypes=AS_GIVEN, composite=True)


@cond_decl.public(torch.linalg.cond, casting=SAFE_CAST, fast_dtypes=EVERY_DTYPE)
def cond(A: Tensor, p: float | str | None = None, *, out: Tensor | None = None) -> Tensor:
    r"""Condition number ``norm(A, p) * norm(inv(A), p)``; like `torch.linalg.cond`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``; square for the orders other than None / 2 / -2.
    p : {None, 2, -2, 'fro', 'nuc', inf, -inf, 1, -1}, optional
        None and 2: ``s_max / s_min``; -2: ``s_min / s_max`` (from `svdvals`); the others from
        `inv_ex` and `matrix_norm` (inf where A is singular).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        Real, A's batch shape; 0 for 0 x 0 matrices (as torch). Differentiable for every
        ``p`` (torch's own cond is not for 1, -1, inf, -inf and 'fro': its in-place fill of
        the inverse breaks its backward; differentiated calls of those orders are computed
        here out of place on the torch backend too).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.cond(torch.tensor([[4., 0.], [0., 0.5]]))
    tensor(8.)
    >>> mpslinalg.cond(torch.tensor([[1., 1.], [1., 1.]]), 1)
    tensor(inf)
    """

