"""Determinants: ``det``, ``slogdet``, ``logdet`` with torch's semantics (DESIGN.md 5).

On the metal backend they come from the LU factorisation: det = sign(P) prod(diag U), computed
with tensor ops on the device (no host synchronisation). Matrices with n <= 4 take the
single-launch small path on both backends. The metal and small paths run through the custom ops
``mpslinalg::det`` and ``mpslinalg::slogdet``, whose derivative rules are below; the torch
backend otherwise delegates to torch.linalg (and its autograd).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._results import SlogdetResult
from .inverse import _inv_ex_op
from .lu import _small, fresh, lu_factor_metal, prepare, small_call, to_dtype, use_small

__all__ = ["det", "logdet", "slogdet"]


def _pivot_sign(pivots: Tensor, dtype: torch.dtype) -> Tensor:
    """det(P) = (-1)^(number of actual row interchanges), from 1-based pivots."""
    k = pivots.shape[-1]
    rows = torch.arange(1, k + 1, dtype=pivots.dtype, device=pivots.device)
    swaps = (pivots != rows).sum(-1)
    return (1 - 2 * (swaps % 2)).to(dtype)


def det_from_lu(LU: Tensor, pivots: Tensor) -> Tensor:
    return torch.diagonal(LU, dim1=-2, dim2=-1).prod(-1) * _pivot_sign(pivots, LU.dtype)


def slogdet_from_lu(LU: Tensor, pivots: Tensor) -> tuple[Tensor, Tensor]:
    """(sign, log|det|) from the U diagonal: a zero pivot gives (0, -inf), NaN gives NaN."""
    diag = torch.diagonal(LU, dim1=-2, dim2=-1)
    modulus = diag.abs()
    phase = torch.where(modulus == 0, torch.zeros_like(diag), diag / modulus)
    sign = phase.prod(-1) * _pivot_sign(pivots, LU.dtype)
    return sign, modulus.log().sum(-1)


# ---------------------------------------------------------------- mpslinalg::det


@torch.library.custom_op("mpslinalg::det", mutates_args=())
def _det_op(A: Tensor, backend: str, small: bool) -> Tensor:
    if small:
        return fresh(small_call(backend, _small().small_det, fresh(A)))
    if backend == "metal":
        LU, pivots, _ = lu_factor_metal(A, "det")
        return det_from_lu(LU, pivots)
    return torch.linalg.det(A)


@_det_op.register_fake
def _(A, backend, small):
    return A.new_empty(A.shape[:-2])


def _prod_others(S: Tensor) -> Tensor:
    """prod_{j != i} S_j along the last dimension, without division (exact with zeros)."""
    ones = torch.ones_like(S[..., :1])
    before = torch.cumprod(torch.cat([ones, S[..., :-1]], -1), -1)
    after = torch.cumprod(torch.cat([ones, S.flip(-1)[..., :-1]], -1), -1).flip(-1)
    return before * after


def det_backward(g: Tensor, det: Tensor, A: Tensor, backend: str, small: bool) -> Tensor:
    """gA = g conj(det) A^-H = g adj(A)^H (Jacobi's formula; Giles 2008, "An extended
    collection of matrix derivative results for forward and reverse mode AD", sec. 2.2.4).

    A (numerically) singular A has no inverse but a well-defined adjugate: there, as torch
    does, det A = det(U) det(V^H) prod(S) from the SVD gives adj(A)^H = conj(det U det V^H)
    U diag(prod_{j != i} S_j) V^H, exact when singular values are zero. The switch
    |det| < 100 eps reads one flag from the device in the backward pass (as torch does); the
    forward pass never synchronises. Matrices of the other kind are replaced by harmless
    stand-ins in each formula so that neither produces NaN for the other's elements.
    """
    if A.numel() == 0:
        return torch.zeros_like(A)
    n = A.shape[-1]
    coef = (g * det.conj())[..., None, None]

    def nonsingular(M: Tensor) -> Tensor:
        return coef * _inv_ex_op(M, backend, small)[0].mH

    def singular(M: Tensor) -> Tensor:
        U, S, Vh = torch.linalg.svd(M)
        alpha = (_det_op(U, backend, small) * _det_op(Vh, backend, small)).conj() * g
        return (U * (alpha[..., None] * _prod_others(S).to(M.dtype))[..., None, :]) @ Vh

    eps = torch.finfo(det.real.dtype if det.is_complex() else det.dtype).eps
    is_singular = det.abs() < 100 * eps
    # Under tracing (torch.compile, opcheck) the flag cannot be read: take both formulas.
    if torch._guards.detect_fake_mode((A,)) is None:
        any_singular, all_singular = torch.stack(  # the one device read of this backward
            [is_singular.any(), is_singular.all()]).tolist()
        if not any_singular:
            return nonsingular(A)
        if all_singular:
            return singular(A)
    mask = is_singular[..., None, None]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    distinct = torch.diag_embed(torch.arange(1, n + 1, device=A.device).to(A.dtype))
    return torch.where(mask, singular(torch.where(mask, A, distinct)),
                       nonsingular(torch.where(mask, eye, A)))


def _det_setup(ctx, inputs, output) -> None:
    A, backend, small = inputs
    ctx.save_for_backward(A, output)
    ctx.flags = (backend, small)


def _det_bwd(ctx, g):
    A, d = ctx.saved_tensors
    return det_backward(g, d, A, *ctx.flags), None, None


_det_op.register_autograd(_det_bwd, setup_context=_det_setup)


# ---------------------------------------------------------------- mpslinalg::slogdet


@torch.library.custom_op("mpslinalg::slogdet", mutates_args=())
def _slogdet_op(A: Tensor, backend: str, small: bool) -> tuple[Tensor, Tensor]:
    if small:
        sign, logabsdet = small_call(backend, _small().small_slogdet, fresh(A))
        return fresh(sign), fresh(logabsdet)
    if backend == "metal":
        LU, pivots, _ = lu_factor_metal(A, "slogdet")
        return slogdet_from_lu(LU, pivots)
    sign, logabsdet = torch.linalg.slogdet(A)
    return sign, logabsdet


@_slogdet_op.register_fake
def _(A, backend, small):
    real = A.real.dtype if A.is_complex() else A.dtype
    return A.new_empty(A.shape[:-2]), A.new_empty(A.shape[:-2], dtype=real)


def slogdet_backward(gsign: Tensor | None, glogabsdet: Tensor | None, A: Tensor, sign: Tensor,
                     backend: str, small: bool) -> Tensor | None:
    """d log|det A| = Re tr(A^-1 dA) and, for complex A, d sign = i sign Im tr(A^-1 dA), so
    gA = c A^-H with c = g_logabsdet - i Im(conj(g_sign) sign) (real A: c = g_logabsdet; the
    sign is locally constant). Giles 2008, sec. 2.2.4, with the complex sign term as in
    pytorch/pytorch#79743 (conjugate Wirtinger)."""
    if A.is_complex():
        real = glogabsdet if glogabsdet is not None else torch.zeros_like(sign.real)
        imag = (-(gsign.conj() * sign).imag if gsign is not None
                else torch.zeros_like(sign.real))
        c = torch.complex(real, imag)
    elif glogabsdet is None:
        return None
    else:
        c = glogabsdet
    if A.numel() == 0:
        return torch.zeros_like(A)
    return c[..., None, None] * _inv_ex_op(A, backend, small)[0].mH


def _slogdet_setup(ctx, inputs, output) -> None:
    A, backend, small = inputs
    ctx.save_for_backward(A, output[0])
    ctx.flags = (backend, small)


def _slogdet_bwd(ctx, gsign, glogabsdet):
    A, sign = ctx.saved_tensors
    return slogdet_backward(gsign, glogabsdet, A, sign, *ctx.flags), None, None


_slogdet_op.register_autograd(_slogdet_bwd, setup_context=_slogdet_setup)


# ---------------------------------------------------------------- public API


def det(A: Tensor) -> Tensor:
    r"""Determinant of a square matrix; like :func:`torch.linalg.det`.

    ``A`` ``(*, n, n)``; the result has shape ``(*)``. Singular input gives 0 (no error). Never
    synchronises with the device. Differentiable, also at singular matrices (through the
    adjugate; torch's own rule returns 0 at exactly singular ones) and for complex input.
    """
    A, Ac, backend = prepare("det", A)
    small = use_small(Ac, "det", backend)
    # torch's own det backward returns 0 at exactly singular matrices (torch 2.13); a
    # differentiated call takes our rule (the adjugate) on the torch backend too.
    differentiated = torch.is_grad_enabled() and Ac.requires_grad
    if backend == "torch" and not small and not differentiated:
        d = torch.linalg.det(Ac)
    else:
        d = _det_op(Ac, backend, small)
    return to_dtype(d, A.dtype)


def _slogdet(fn: str, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    A, Ac, backend = prepare(fn, A)
    small = use_small(Ac, "slogdet", backend)
    if backend == "torch" and not small:
        sign, logabsdet = torch.linalg.slogdet(Ac)
    else:
        sign, logabsdet = _slogdet_op(Ac, backend, small)
    return A, sign, logabsdet


def slogdet(A: Tensor) -> SlogdetResult:
    r"""Sign (or complex phase) and natural log of the absolute value of the determinant; like
    :func:`torch.linalg.slogdet`: ``det(A) = sign * exp(logabsdet)``.

    Singular input gives ``(0, -inf)``. ``logabsdet`` is real. Never synchronises with the
    device. Differentiable through ``logabsdet`` and, for complex input, through ``sign``.
    """
    A, sign, logabsdet = _slogdet("slogdet", A)
    real = A.real.dtype if A.is_complex() else A.dtype
    return SlogdetResult(to_dtype(sign, A.dtype), to_dtype(logabsdet, real))


def logdet(A: Tensor) -> Tensor:
    r"""Natural log of the determinant; like :func:`torch.logdet`.

    Real input: ``nan`` for a negative determinant, ``-inf`` for a singular matrix. Complex
    input: ``log|det| + i arg(det)``. Never synchronises with the device.
    """
    A, sign, logabsdet = _slogdet("logdet", A)
    if sign.is_complex():
        out = torch.complex(logabsdet, torch.angle(sign))
    else:
        out = torch.where(sign < 0, torch.full_like(logabsdet, float("nan")), logabsdet)
    return to_dtype(out, A.dtype)
