"""Determinants: ``det``, ``slogdet``, ``logdet`` with torch's semantics.

Ops ``mpslinalg::det`` and ``mpslinalg::slogdet``: on the metal backend from the LU
factorisation, det = sign(P) prod(diag U), with tensor ops on the device (no host
synchronisation); n <= 4 takes the small path. A differentiated ``det`` takes the op on the
torch backend too (torch's own rule returns 0 at exactly singular matrices in torch 2.13; ours
is the adjugate).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core.declare import REAL, Call, Declaration, Matrix, Result
from .._core.torch_bugs import per_matrix
from . import lu_metal
from .inverse import inv_ex_op
from .lu import small_lu_when, through_lu_op

__all__ = ["det", "logdet", "slogdet"]


def _pivot_sign(pivots: Tensor, dtype: torch.dtype) -> Tensor:
    """det(P) = (-1)^(number of actual row interchanges), from 1-based pivots."""
    k = pivots.shape[-1]
    rows = torch.arange(1, k + 1, dtype=pivots.dtype, device=pivots.device)
    swaps = (pivots != rows).sum(-1)
    return (1 - 2 * (swaps % 2)).to(dtype)


#: Factors multiplied at once by _scaled_prod: each has modulus in [1/2, 1), so a product of
#: this many stays above float32's smallest normal number (2^-126).
_PROD_CHUNK = 64


def _ldexp(x: Tensor, e: Tensor) -> Tensor:
    """x 2^e in two steps, so that 2^e itself never overflows when x 2^e does not."""
    half = torch.div(e, 2, rounding_mode="floor")
    two = torch.tensor(2.0, dtype=x.real.dtype if x.is_complex() else x.dtype, device=x.device)
    return x * two.pow(half) * two.pow(e - half)


def _scaled_prod(x: Tensor) -> Tensor:
    """prod(x, -1) without intermediate overflow or underflow: every factor is split into a
    mantissa of modulus in [1/2, 1) and a power of two (exact), the mantissas are multiplied in
    chunks and renormalised, and the exponents are summed; only a product that is itself out of
    range overflows. (prod(diag U) of a matrix with rows scaled 1e-20 .. 1e20 overflows in
    float32 although the determinant is ~1e4.)"""
    exponent = torch.zeros(x.shape[:-1], dtype=torch.int64, device=x.device)
    if x.numel() == 0:  # 0x0 matrices (det 1) or an empty batch
        return x.prod(-1)
    while True:
        _, e = torch.frexp(x.abs())
        x = _ldexp(x, -e.to(torch.int64))
        exponent = exponent + e.to(torch.int64).sum(-1)
        n = x.shape[-1]
        if n == 1:
            return _ldexp(x[..., 0], exponent)
        pad = -n % _PROD_CHUNK
        if pad:
            x = torch.cat([x, torch.ones_like(x[..., :1]).expand(*x.shape[:-1], pad)], -1)
        x = x.reshape(*x.shape[:-1], -1, _PROD_CHUNK).prod(-1)


def _det_metal(A: Tensor) -> Tensor:
    LU, pivots, _ = lu_metal.lu_factor_metal(A, fn="det")
    return _scaled_prod(torch.diagonal(LU, dim1=-2, dim2=-1)) * _pivot_sign(pivots, LU.dtype)


def _slogdet_metal(A: Tensor) -> tuple[Tensor, Tensor]:
    """(sign, log|det|) from the U diagonal: a zero pivot gives (0, -inf), NaN gives NaN."""
    LU, pivots, _ = lu_metal.lu_factor_metal(A, fn="slogdet")
    diag = torch.diagonal(LU, dim1=-2, dim2=-1)
    modulus = diag.abs()
    phase = torch.where(modulus == 0, torch.zeros_like(diag), diag / modulus)
    sign = phase.prod(-1) * _pivot_sign(pivots, LU.dtype)
    return sign, modulus.log().sum(-1)


# ---------------------------------------------------------------- mpslinalg::det


def _prod_others(S: Tensor) -> Tensor:
    """prod_{j != i} S_j along the last dimension, without division (exact with zeros)."""
    ones = torch.ones_like(S[..., :1])
    before = torch.cumprod(torch.cat([ones, S[..., :-1]], -1), -1)
    after = torch.cumprod(torch.cat([ones, S.flip(-1)[..., :-1]], -1), -1).flip(-1)
    return before * after


def _det_backward(ctx, g: Tensor):
    """gA = g conj(det) A^-H = g adj(A)^H (Jacobi's formula; Giles 2008, "An extended
    collection of matrix derivative results for forward and reverse mode AD", sec. 2.2.4).

    A (numerically) singular A has no inverse but a well-defined adjugate: there, as torch
    does, det A = det(U) det(V^H) prod(S) from the SVD gives adj(A)^H = conj(det U det V^H)
    U diag(prod_{j != i} S_j) V^H, exact when singular values are zero. The switch
    |det| < 100 eps reads one flag from the device in the backward pass (as torch does); the
    forward pass never synchronises. Matrices of the other kind are replaced by harmless
    stand-ins in each formula so that neither produces NaN for the other's elements.
    """
    A, det = ctx.saved_tensors
    backend, use_small = ctx.backend, ctx.small
    if A.numel() == 0:
        return (torch.zeros_like(A),)
    n = A.shape[-1]
    coef = (g * det.conj())[..., None, None]

    def nonsingular(M: Tensor) -> Tensor:
        return coef * inv_ex_op(M, backend, use_small, "")[0].mH

    def singular(M: Tensor) -> Tensor:
        U, S, Vh = torch.linalg.svd(M)
        alpha = (det_op(U, backend, use_small, "") * det_op(Vh, backend, use_small, "")
                 ).conj() * g
        return (U * (alpha[..., None] * _prod_others(S).to(M.dtype))[..., None, :]) @ Vh

    eps = torch.finfo(det.real.dtype if det.is_complex() else det.dtype).eps
    is_singular = det.abs() < 100 * eps
    # Under tracing (torch.compile, opcheck) the flag cannot be read: take both formulas.
    if torch._guards.detect_fake_mode((A,)) is None:
        any_singular, all_singular = torch.stack(  # the one device read of this backward
            [is_singular.any(), is_singular.all()]).tolist()
        if not any_singular:
            return (nonsingular(A),)
        if all_singular:
            return (singular(A),)
    mask = is_singular[..., None, None]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    distinct = torch.diag_embed(torch.arange(1, n + 1, device=A.device).to(A.dtype))
    return (torch.where(mask, singular(torch.where(mask, A, distinct)),
                        nonsingular(torch.where(mask, eye, A))),)


def _through_det_op(A) -> bool:
    """det's torch-backend calls through the op: the LU families' (`through_lu_op`), and
    differentiated ones (torch's rule is 0 at exactly singular matrices, ours the adjugate)."""
    return through_lu_op(A) or (A.requires_grad and torch.is_grad_enabled())


det_decl = Declaration(
    "det", [Matrix("A")], [Result("det")],
    forward={"metal": _det_metal, "torch": lambda A: per_matrix(torch.linalg.det, A),
             "small": small.small_det},
    small_when=small_lu_when, through_op=_through_det_op, backward=_det_backward,
    saves=["A", "det"])
det_op = det_decl.op


# ---------------------------------------------------------------- mpslinalg::slogdet


def _slogdet_backward(ctx, gsign: Tensor | None, glogabsdet: Tensor | None):
    """d log|det A| = Re tr(A^-1 dA) and, for complex A, d sign = i sign Im tr(A^-1 dA), so
    gA = c A^-H with c = g_logabsdet - i Im(conj(g_sign) sign) (real A: c = g_logabsdet; the
    sign is locally constant). Giles 2008, sec. 2.2.4, with the complex sign term as in
    pytorch/pytorch#79743 (conjugate Wirtinger)."""
    A, sign = ctx.saved_tensors
    if A.is_complex():
        real = glogabsdet if glogabsdet is not None else torch.zeros_like(sign.real)
        imag = (-(gsign.conj() * sign).imag if gsign is not None
                else torch.zeros_like(sign.real))
        c = torch.complex(real, imag)
    elif glogabsdet is None:
        return (None,)
    else:
        c = glogabsdet
    if A.numel() == 0:
        return (torch.zeros_like(A),)
    return (c[..., None, None] * inv_ex_op(A, ctx.backend, ctx.small, "")[0].mH,)


slogdet_decl = Declaration(
    "slogdet", [Matrix("A")], [Result("sign"), Result("logabsdet", dtype=REAL)],
    forward={"metal": _slogdet_metal,
             "torch": lambda A: tuple(per_matrix(torch.linalg.slogdet, A)),
             "small": small.small_slogdet},
    small_when=small_lu_when, through_op=through_lu_op, backward=_slogdet_backward,
    saves=["A", "sign"])
slogdet_op = slogdet_decl.op


# ---------------------------------------------------------------- public API


@det_decl.public(torch.linalg.det)
def det(A: Tensor, *, out: Tensor | None = None) -> Tensor:
    r"""Determinant of a square matrix; like `torch.linalg.det`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*)``. Singular input gives 0 (no error).

    Notes
    -----
    Never synchronises with the device. Differentiable, also at singular matrices (through the
    adjugate; torch's own rule returns 0 at exactly singular ones) and for complex input.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.det(torch.tensor([[1., 2.], [3., 4.]]))
    tensor(-2.)
    """


@slogdet_decl.public(torch.linalg.slogdet)
def slogdet(A: Tensor, *, out: tuple[Tensor, Tensor] | None = None):
    r"""Sign (or complex phase) and natural log of the absolute value of the determinant; like
    `torch.linalg.slogdet`: ``det(A) = sign * exp(logabsdet)``.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.
    out : tuple of Tensor, optional
        ``(sign, logabsdet)`` to write the results into.

    Returns
    -------
    sign : Tensor
        ``(*)``, A's dtype; 0 for singular input.
    logabsdet : Tensor
        ``(*)``, real; ``-inf`` for singular input.

    Notes
    -----
    Never synchronises with the device. Differentiable through ``logabsdet`` and, for complex
    input, through ``sign``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.slogdet(torch.tensor([[1., 2.], [3., 4.]]))
    torch.return_types.linalg_slogdet(
    sign=tensor(-1.),
    logabsdet=tensor(0.6931))
    """


def _logdet(call: Call, sign: Tensor, logabsdet: Tensor) -> Tensor:
    if sign.is_complex():
        return call.cast(torch.complex(logabsdet, torch.angle(sign)))
    return call.cast(torch.where(sign < 0, torch.full_like(logabsdet, float("nan")), logabsdet))


@slogdet_decl.public(torch.logdet, torch_name="logdet", finish=_logdet)
def logdet(A: Tensor) -> Tensor:
    r"""Natural log of the determinant; like `torch.logdet`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.

    Returns
    -------
    Tensor
        ``(*)``. Real input: ``nan`` for a negative determinant, ``-inf`` for a singular
        matrix. Complex input: ``log|det| + i arg(det)``. Never synchronises with the device.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.logdet(torch.tensor([[2., 0.], [0., 3.]]))
    tensor(1.7918)
    """
