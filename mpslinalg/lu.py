"""LU factorisation and solves with LU factors: ``lu_factor``, ``lu_factor_ex``, ``lu``,
``lu_solve``, with torch.linalg's signatures, semantics and named results (DESIGN.md 5).

Backends: ``"torch"`` delegates to torch.linalg after the same validation; ``"metal"`` runs the LU
kernels (``mpslinalg._lu_metal``: blocked getrf and triangular solves, float32 / complex64, on the
Apple GPU or in the CPU emulator) through the custom ops ``mpslinalg::lu_factor_ex`` and
``mpslinalg::lu_solve``, whose derivative rules are defined here beside them.

float16 / bfloat16 inputs are computed in float32 and the results cast back, on both backends
(torch's own CPU kernels reject them: ``"lu_cpu" not implemented for 'Half'``).

This module also holds what the other LU-family modules (solve, det, inverse) share: input
preparation, the small-matrix switch, triangular solves through the LU kernels, and the
reduction of gradients over broadcast batch dimensions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks
from ._backend import resolve_backend, use_backend
from ._copy import contiguous
from ._errors import check_errors as _check_errors
from ._results import LUFactorExResult, LUFactorResult, LUResult

__all__ = ["lu", "lu_factor", "lu_factor_ex", "lu_solve"]

# ---------------------------------------------------------------- shared by the LU family


def _lu_metal():
    """The LU kernel helper; imported on first use so that only the metal backend needs it."""
    from . import _lu_metal

    return _lu_metal


def _small():
    """The n <= 4 helper module (one launch per call on metal, vectorised torch otherwise)."""
    from . import small_inverse

    return small_inverse


def use_small(A: Tensor, fn: str, backend: str) -> bool:
    """Whether ``A`` (already in its compute dtype) takes the small-matrix path for ``fn``."""
    with use_backend(backend):
        return bool(_small().use_small_path(A, fn))


def to_dtype(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x if x.dtype == dtype else x.to(dtype)


def prepare(fn: str, A: object, *, square: bool = True) -> tuple[Tensor, Tensor, str]:
    """Validate ``A`` for ``fn``: returns (A, A in its compute dtype, backend)."""
    A = _checks.check_matrix(fn, "A", A, square=square)
    backend = resolve_backend(A.device, fn)
    dtype = _checks.compute_dtype(fn, A.dtype, backend)
    return A, to_dtype(A, dtype), backend


def sum_to(g: Tensor | None, shape: torch.Size) -> Tensor | None:
    """Reduce a gradient over the batch dimensions its input was broadcast along."""
    if g is None or g.shape == shape:
        return g
    return g.sum_to_size(shape)


def first_of_broadcast(t: Tensor, shape: torch.Size) -> Tensor:
    """The entries of ``t`` (shape broadcast from ``shape``) at index 0 of every broadcast
    dimension, i.e. ``t`` brought back to ``shape`` where all broadcast copies are equal."""
    while t.dim() > len(shape):
        t = t[0]
    for dim, size in enumerate(shape):
        if size == 1 and t.shape[dim] != 1:
            t = t.narrow(dim, 0, 1)
    return t.contiguous()


def metal_contiguous(x: Tensor, fn: str) -> Tensor:
    """``x`` as a contiguous tensor for a kernel: lazy conjugate / negative views (``A.mH`` of
    complex input) are materialised first, since kernels read storage, not view flags."""
    return contiguous(x.resolve_conj().resolve_neg(), fn)


def fresh(x: Tensor) -> Tensor:
    """A custom op's output: contiguous from offset 0, with no lazy conjugate / negative bit."""
    x = x.resolve_conj().resolve_neg()
    if x.storage_offset() != 0:
        return x.clone(memory_format=torch.contiguous_format)
    return x.contiguous()


def identity_pivots(shape: torch.Size, device: torch.device) -> Tensor:
    """Pivots of the identity permutation (1-based, int32) for LU factors of ``shape``."""
    k = min(shape[-2], shape[-1])
    return torch.arange(1, k + 1, dtype=torch.int32, device=device).expand(*shape[:-2], k)


def lu_factor_metal(A: Tensor, fn: str) -> tuple[Tensor, Tensor, Tensor]:
    """(LU, pivots, info) of ``A`` by the Metal kernels; empty inputs need no launch."""
    batch, (m, n) = A.shape[:-2], A.shape[-2:]
    if A.numel() == 0:
        return (torch.zeros_like(A, memory_format=torch.contiguous_format),
                A.new_zeros((*batch, min(m, n)), dtype=torch.int32),
                A.new_zeros(batch, dtype=torch.int32))
    return _lu_metal().lu_factor_metal(metal_contiguous(A, fn), fn=fn)


def lu_solve_metal(LU: Tensor, pivots: Tensor, B: Tensor, left: bool, adjoint: bool,
                   fn: str) -> Tensor:
    """The Metal LU solve; ``LU``/``pivots`` are broadcast to ``B``'s batch shape here."""
    batch = B.shape[:-2]
    if B.numel() == 0:
        return torch.zeros_like(B, memory_format=torch.contiguous_format)
    LU = LU.expand(*batch, *LU.shape[-2:])
    pivots = pivots.expand(*batch, pivots.shape[-1])
    return _lu_metal().lu_solve_metal(
        metal_contiguous(LU, fn), metal_contiguous(pivots, fn), metal_contiguous(B, fn),
        left=left, adjoint=adjoint, fn=fn)


def tri_solve(T: Tensor, B: Tensor, *, unit_lower: bool, left: bool, adjoint: bool,
              backend: str) -> Tensor:
    """``op(T)^-1 B`` (left) or ``B op(T)^-1`` (right), ``op(T) = T^H`` when ``adjoint``.

    ``T`` is unit lower triangular when ``unit_lower`` (its diagonal and upper part are not
    read), else upper triangular (its strict lower part is not read). On the metal backend the
    solve runs through the differentiable ``mpslinalg::lu_solve`` op with ``T`` packed as LU
    factors whose other factor is the identity (identity pivots), so derivative rules built on it
    run on the Apple GPU and can themselves be differentiated.
    """
    batch = torch.broadcast_shapes(T.shape[:-2], B.shape[:-2])
    T = T.expand(*batch, *T.shape[-2:])
    B = B.expand(*batch, *B.shape[-2:])
    if backend == "torch":
        return torch.linalg.solve_triangular(T.mH if adjoint else T, B,
                                             upper=unit_lower == adjoint, left=left,
                                             unitriangular=unit_lower)
    n = T.shape[-1]
    if unit_lower:
        packed = torch.tril(T, -1) + torch.eye(n, dtype=T.dtype, device=T.device)
    else:
        packed = torch.triu(T)
    return _lu_solve_op(packed, identity_pivots(packed.shape, T.device), B, left, adjoint,
                        backend)


def _no_pivot_error(fn: str, A: Tensor, backend: str) -> None:
    # torch implements pivot=False only for CUDA tensors (MAGMA/cuSOLVER); CPU raises
    # "linalg.lu_factor: LU without pivoting is not implemented on the CPU".
    if backend == "torch" and A.device.type == "cuda":
        return
    where = "the CPU" if A.device.type == "cpu" else A.device.type.upper()
    if backend == "metal":
        where += " (metal backend)"
    raise RuntimeError(f"mpslinalg.{fn}: LU without pivoting is not implemented on {where}")


# ---------------------------------------------------------------- mpslinalg::lu_factor_ex


@torch.library.custom_op("mpslinalg::lu_factor_ex", mutates_args=())
def _lu_factor_ex_op(A: Tensor, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """(LU, pivots, info) of ``A`` ``(*, m, n)`` in its compute dtype, LAPACK getrf semantics."""
    if backend == "metal":
        return lu_factor_metal(A, "lu_factor")
    LU, pivots, info = torch.linalg.lu_factor_ex(A)
    return fresh(LU), pivots, info


@_lu_factor_ex_op.register_fake
def _(A: Tensor, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    batch, k = A.shape[:-2], min(A.shape[-2], A.shape[-1])
    return (torch.empty_like(A, memory_format=torch.contiguous_format),
            A.new_empty((*batch, k), dtype=torch.int32), A.new_empty(batch, dtype=torch.int32))


def lu_factor_backward(gLU: Tensor, LU: Tensor, pivots: Tensor, backend: str) -> Tensor:
    """Gradient of the packed LU factors pulled back to A (square, wide and tall).

    A = P L U gives L^-1 P^T dA U^-1 = L^-1 dL + dU U^-1 (strictly lower + upper), hence for
    square A: gA = P L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H; a wide (tall) A carries the
    extra block of U (L) through. Walter & Lehmann 2018, "Algorithmic differentiation of linear
    algebra functions with application in optimum experimental design", arXiv:1710.08717, sec.
    3.2; rectangular blocks as in torch's linalg_lu_backward. Complex: conjugate Wirtinger.
    """
    m, n = LU.shape[-2:]
    k = min(m, n)
    P, L, U = torch.lu_unpack(LU, pivots)
    gL = torch.tril(gLU[..., :, :k], -1)
    gU = torch.triu(gLU[..., :k, :])
    if m == n:
        X = torch.tril(L.mH @ gL, -1) + torch.triu(gU @ U.mH)
        X = tri_solve(U, X, unit_lower=False, left=False, adjoint=True, backend=backend)
        X = tri_solve(L, X, unit_lower=True, left=True, adjoint=True, backend=backend)
    elif m < n:
        X = torch.tril(L.mH @ gL - gU @ U.mH, -1)
        X = tri_solve(U[..., :, :k], X, unit_lower=False, left=False, adjoint=True,
                      backend=backend)
        X = torch.cat([X + gU[..., :, :k], gU[..., :, k:]], dim=-1)
        X = tri_solve(L, X, unit_lower=True, left=True, adjoint=True, backend=backend)
    else:
        X = torch.triu(gU @ U.mH - L.mH @ gL)
        X = tri_solve(L[..., :k, :], X, unit_lower=True, left=True, adjoint=True,
                      backend=backend)
        X = torch.cat([X + gL[..., :k, :], gL[..., k:, :]], dim=-2)
        X = tri_solve(U, X, unit_lower=False, left=False, adjoint=True, backend=backend)
    return P @ X


def _lu_factor_ex_setup(ctx, inputs, output) -> None:
    LU, pivots, _ = output
    ctx.save_for_backward(LU, pivots)
    ctx.backend = inputs[1]


def _lu_factor_ex_bwd(ctx, gLU, gpivots, ginfo):
    LU, pivots = ctx.saved_tensors
    return lu_factor_backward(gLU, LU, pivots, ctx.backend), None


_lu_factor_ex_op.register_autograd(_lu_factor_ex_bwd, setup_context=_lu_factor_ex_setup)


# ---------------------------------------------------------------- mpslinalg::lu_solve


@torch.library.custom_op("mpslinalg::lu_solve", mutates_args=())
def _lu_solve_op(LU: Tensor, pivots: Tensor, B: Tensor, left: bool, adjoint: bool,
                 backend: str) -> Tensor:
    """X with op(A) X = B (left) or X op(A) = B, A = P L U given packed; identical batch shapes."""
    if backend == "metal":
        return lu_solve_metal(LU, pivots, B, left, adjoint, "lu_solve")
    return fresh(torch.linalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint))


@_lu_solve_op.register_fake
def _(LU, pivots, B, left, adjoint, backend):
    return torch.empty_like(B, memory_format=torch.contiguous_format)


def lu_solve_backward_LU(gX: Tensor, LU: Tensor, pivots: Tensor, X: Tensor, left: bool,
                         adjoint: bool, backend: str) -> Tensor:
    """Gradient of ``lu_solve`` with respect to the packed factors.

    For A X = B with A = P L U: dX = -U^-1 dU X - U^-1 L^-1 dL U X, so with
    gR = -U^-H gX X^H: gU = triu(gR), gL = tril(L^-H gR U^H, -1); the systems X A = B and
    A^H X = B are the mirror images (gR = -P^T X^H gX P L^-H, gU = triu(L^H gR U^-H)).
    Giles 2008, "An extended collection of matrix derivative results for forward and reverse
    mode AD", sec. 2.3.1 (inverse/solve), chained through A = P L U as in torch's
    linalg_lu_solve_LU. Complex: conjugate Wirtinger.
    """
    P, L, U = torch.lu_unpack(LU, pivots)
    if left != adjoint:
        rhs = -(gX @ X.mH) if left else -(gX.mH @ X)
        gR = tri_solve(U, rhs, unit_lower=False, left=True, adjoint=True, backend=backend)
        gL = tri_solve(L, gR @ U.mH, unit_lower=True, left=True, adjoint=True, backend=backend)
        return torch.tril(gL, -1) + torch.triu(gR)
    gR = -(P.mT @ (X @ gX.mH if left else X.mH @ gX) @ P)
    gR = tri_solve(L, gR, unit_lower=True, left=False, adjoint=True, backend=backend)
    gU = tri_solve(U, L.mH @ gR, unit_lower=False, left=False, adjoint=True, backend=backend)
    return torch.tril(gR, -1) + torch.triu(gU)


def _lu_solve_setup(ctx, inputs, output) -> None:
    LU, pivots, _, left, adjoint, backend = inputs
    ctx.save_for_backward(LU, pivots, output)
    ctx.flags = (left, adjoint, backend)


def _lu_solve_bwd(ctx, gX):
    LU, pivots, X = ctx.saved_tensors
    left, adjoint, backend = ctx.flags
    gLU = gB = None
    if ctx.needs_input_grad[2]:  # the same solve with the adjoint system
        gB = _lu_solve_op(LU, pivots, gX, left, not adjoint, backend)
    if ctx.needs_input_grad[0]:
        gLU = lu_solve_backward_LU(gX, LU, pivots, X, left, adjoint, backend)
    return gLU, None, gB, None, None, None


_lu_solve_op.register_autograd(_lu_solve_bwd, setup_context=_lu_solve_setup)


def lu_solve_any(LU: Tensor, pivots: Tensor, B: Tensor, left: bool, adjoint: bool,
                 backend: str) -> Tensor:
    """Broadcast the batch shapes of (LU, pivots) and B, then solve (differentiably)."""
    batch = torch.broadcast_shapes(LU.shape[:-2], B.shape[:-2])
    LU = LU.expand(*batch, *LU.shape[-2:])
    pivots = pivots.expand(*batch, pivots.shape[-1])
    B = B.expand(*batch, *B.shape[-2:])
    return _lu_solve_op(LU, pivots, B, left, adjoint, backend)


# ---------------------------------------------------------------- public API


def _lu_factor(fn: str, A: Tensor, pivot: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(LU in A's dtype, pivots, info) on the chosen backend; shared by lu_factor(_ex)."""
    A, Ac, backend = prepare(fn, A, square=False)
    if not pivot:
        _no_pivot_error(fn, A, backend)
    if backend == "torch":
        LU, pivots, info = torch.linalg.lu_factor_ex(Ac, pivot=pivot)
    else:
        LU, pivots, info = _lu_factor_ex_op(Ac, backend)
    return to_dtype(LU, A.dtype), pivots, info


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False
                 ) -> LUFactorExResult:
    r"""LU factorisation with partial pivoting, ``A = P L U``, in LAPACK's packed form, plus
    ``info``; like :func:`torch.linalg.lu_factor_ex`.

    Args:
        A: tensor of shape ``(*, m, n)``, float32 / complex64 (metal) or also float64 / complex128
            (torch backend); float16 / bfloat16 are computed in float32 and cast back.

    Keyword args:
        pivot: must be True except for CUDA tensors on the torch backend (as torch).
        check_errors: raise :class:`mpslinalg.LinAlgError` if a ``U`` diagonal is exactly zero
            (one device read); by default nothing synchronises with the device.

    Returns:
        ``(LU, pivots, info)``: ``LU`` ``(*, m, n)`` holds L (unit diagonal, strictly below)
        and U; ``pivots`` ``(*, min(m, n))`` int32, 1-based row interchanges; ``info`` ``(*)``
        int32, 0 or the 1-based index of the first zero pivot.
    """
    LU, pivots, info = _lu_factor("lu_factor_ex", A, pivot)
    if check_errors:
        _check_errors(info, "mpslinalg.lu_factor_ex")
    return LUFactorExResult(LU, pivots, info)


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactorResult:
    r"""LU factorisation with partial pivoting in packed form, ``(LU, pivots)``; like
    :func:`torch.linalg.lu_factor`. Raises :class:`mpslinalg.LinAlgError` ("U[k,k] is zero ...",
    with "(Batch element i)" for batches) when a pivot is exactly zero; this reads ``info`` from
    the device once. See :func:`lu_factor_ex` for the arguments.
    """
    LU, pivots, info = _lu_factor("lu_factor", A, pivot)
    _check_errors(info, "mpslinalg.lu_factor")
    return LUFactorResult(LU, pivots)


def lu(A: Tensor, *, pivot: bool = True) -> LUResult:
    r"""LU factorisation with partial pivoting, ``A = P L U``; like :func:`torch.linalg.lu`.

    ``P`` ``(*, m, m)`` is a permutation matrix, ``L`` ``(*, m, k)`` unit lower triangular, ``U``
    ``(*, k, n)`` upper triangular, k = min(m, n). Never raises for singular input and never
    synchronises with the device. Differentiable (also for complex input) through the LU factor.
    """
    fn = "lu"
    A, Ac, backend = prepare(fn, A, square=False)
    if not pivot:
        _no_pivot_error(fn, A, backend)
    if backend == "torch":
        P, L, U = torch.linalg.lu(Ac, pivot=pivot)
    else:
        LU, pivots, _ = _lu_factor_ex_op(Ac, backend)
        P, L, U = torch.lu_unpack(LU, pivots)
    return LUResult(*(to_dtype(t, A.dtype) for t in (P, L, U)))


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
             adjoint: bool = False) -> Tensor:
    r"""Solve ``A X = B`` given the LU factorisation of ``A`` from :func:`lu_factor`; like
    :func:`torch.linalg.lu_solve`.

    ``left=False`` solves ``X A = B``; ``adjoint=True`` uses ``A^H`` instead of ``A``. ``LU``
    ``(*, n, n)`` and ``B`` ``(*, n, k)`` (or ``(*, k, n)`` when ``left=False``) broadcast over
    their batch dimensions; ``pivots`` has shape ``LU.shape[:-1]``. Never synchronises with the
    device. Differentiable with respect to ``LU`` and ``B``.
    """
    fn = "lu_solve"
    LU = _checks.check_matrix(fn, "LU", LU)
    pivots = _checks.check_tensor(fn, "pivots", pivots)
    B = _checks.check_tensor(fn, "B", B)
    if B.dim() < 2:
        raise RuntimeError(f"mpslinalg.{fn}: the input tensor B must have at least 2 dimensions, "
                           f"got shape {_checks.shape_str(B)}")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"mpslinalg.{fn}: pivots should be a Tensor of scalar type "
                           f"torch.int32, got {pivots.dtype}")
    if pivots.shape != LU.shape[:-1]:
        raise RuntimeError(f"mpslinalg.{fn}: expected LU.shape[:-1] and pivots.shape to be the "
                           f"same, but got LU with shape {_checks.shape_str(LU)} and pivots with "
                           f"shape {_checks.shape_str(pivots)}")
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"mpslinalg.{fn}: incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    _checks.check_same_device(fn, LU=LU, pivots=pivots, B=B)
    _checks.check_same_dtype(fn, LU=LU, B=B)
    _checks.broadcast_batch(fn, ("LU", LU.shape[:-2]), ("B", B.shape[:-2]))
    backend = resolve_backend(LU.device, fn)
    dtype = _checks.compute_dtype(fn, LU.dtype, backend)
    LUc, Bc = to_dtype(LU, dtype), to_dtype(B, dtype)
    if backend == "torch":
        X = torch.linalg.lu_solve(LUc, pivots, Bc, left=left, adjoint=adjoint)
    else:
        X = lu_solve_any(LUc, pivots, Bc, left, adjoint, backend)
    return to_dtype(X, B.dtype)


def small_call(backend: str, fn, *args):
    """Run a small-path helper under ``backend`` (backward passes may run on another thread,
    where the caller's ``use_backend`` is not in force)."""
    with use_backend(backend):
        return fn(*args)
