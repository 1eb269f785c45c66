"""LU factorisation and solves with LU factors: ``lu_factor``, ``lu_factor_ex``, ``lu``,
``lu_solve``, with torch.linalg's signatures, semantics and result types.

Ops: ``mpslinalg::lu_factor_ex`` (LAPACK getrf) and ``mpslinalg::lu_solve`` (getrs); on the
metal backend they run the kernels of `mpslinalg.linalg.lu_metal`. `tri_solve` is the
differentiable triangular solve that the derivative rules of the LU-based families are written
with, so that they run on the Apple GPU too.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core import checks
from .._core.backend import resolve_backend
from .._core.errors import read_device
from .._core.op import Op, cast_back, public, to_dtype, write_out
from .._core.torch_bugs import mkl_batched_getrf_affected, per_matrix
from . import lu_metal

__all__ = ["lu", "lu_factor", "lu_factor_ex", "lu_solve"]

_RESULTS = torch.return_types


def identity_pivots(shape: torch.Size, device: torch.device) -> Tensor:
    """Pivots of the identity permutation (1-based, int32) for LU factors of ``shape``."""
    k = min(shape[-2], shape[-1])
    return torch.arange(1, k + 1, dtype=torch.int32, device=device).expand(*shape[:-2], k)


def tri_solve(T: Tensor, B: Tensor, *, unit_lower: bool, left: bool, adjoint: bool,
              backend: str) -> Tensor:
    """``op(T)^-1 B`` (left) or ``B op(T)^-1`` (right), ``op(T) = T^H`` when ``adjoint``.

    ``T`` is unit lower triangular when ``unit_lower`` (its diagonal and upper part are not
    read), else upper triangular (its strict lower part is not read). On the metal backend the
    solve runs through the differentiable ``mpslinalg::lu_solve`` op with ``T`` packed as LU
    factors whose other factor is the identity (identity pivots), so derivative rules built on
    it run on the Apple GPU and can themselves be differentiated.
    """
    batch = checks.broadcast_shapes(T.shape[:-2], B.shape[:-2])
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
    return lu_solve_op(packed, identity_pivots(packed.shape, T.device), B, left, adjoint,
                       backend, False, "")


# ---------------------------------------------------------------- mpslinalg::lu_factor_ex


def _lu_factor_fake(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    batch, k = A.shape[:-2], min(A.shape[-2], A.shape[-1])
    return (torch.empty_like(A, memory_format=torch.contiguous_format),
            A.new_empty((*batch, k), dtype=torch.int32), A.new_empty(batch, dtype=torch.int32))


def _lu_factor_save(ctx, inputs, outputs) -> None:
    LU, pivots, _ = outputs
    ctx.save_for_backward(LU, pivots)


def _lu_factor_backward(ctx, gLU: Tensor, gpivots, ginfo) -> tuple[Tensor]:
    """Gradient of the packed LU factors pulled back to A (square, wide and tall).

    A = P L U gives L^-1 P^T dA U^-1 = L^-1 dL + dU U^-1 (strictly lower + upper), hence for
    square A: gA = P L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H; a wide (tall) A carries the
    extra block of U (L) through. Walter & Lehmann 2018, "Algorithmic differentiation of linear
    algebra functions with application in optimum experimental design", arXiv:1710.08717, sec.
    3.2; rectangular blocks as in torch's linalg_lu_backward. Complex: conjugate Wirtinger.
    """
    LU, pivots = ctx.saved_tensors
    backend = ctx.backend
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
    return (P @ X,)


lu_factor_ex_op = Op(
    "lu_factor_ex", "(Tensor A) -> (Tensor, Tensor, Tensor)",
    forward={"metal": lambda A: lu_metal.lu_factor_metal(A, fn="lu_factor"),
             "torch": lambda A: tuple(per_matrix(torch.linalg.lu_factor_ex, A))},
    fake=_lu_factor_fake, info=2, save=_lu_factor_save, backward=_lu_factor_backward)


# ---------------------------------------------------------------- mpslinalg::lu_solve


def _lu_solve_save(ctx, inputs, X) -> None:
    LU, pivots, _, left, adjoint = inputs
    ctx.save_for_backward(LU, pivots, X)
    ctx.flags = (left, adjoint)


def _lu_solve_backward(ctx, gX: Tensor):
    """Gradient of ``lu_solve`` with respect to the packed factors and B.

    gB is the same solve with the adjoint system. For A X = B with A = P L U:
    dX = -U^-1 dU X - U^-1 L^-1 dL U X, so with gR = -U^-H gX X^H: gU = triu(gR),
    gL = tril(L^-H gR U^H, -1); the systems X A = B and A^H X = B are the mirror images
    (gR = -P^T X^H gX P L^-H, gU = triu(L^H gR U^-H)). Giles 2008, "An extended collection of
    matrix derivative results for forward and reverse mode AD", sec. 2.3.1 (inverse/solve),
    chained through A = P L U as in torch's linalg_lu_solve_LU. Complex: conjugate Wirtinger.
    """
    LU, pivots, X = ctx.saved_tensors
    left, adjoint = ctx.flags
    backend = ctx.backend
    gLU = gB = None
    if ctx.needs_input_grad[2]:
        gB = lu_solve_op(LU, pivots, gX, left, not adjoint, backend, False, "")
    if ctx.needs_input_grad[0]:
        P, L, U = torch.lu_unpack(LU, pivots)
        if left != adjoint:
            rhs = -(gX @ X.mH) if left else -(gX.mH @ X)
            gR = tri_solve(U, rhs, unit_lower=False, left=True, adjoint=True, backend=backend)
            gL = tri_solve(L, gR @ U.mH, unit_lower=True, left=True, adjoint=True,
                           backend=backend)
            gLU = torch.tril(gL, -1) + torch.triu(gR)
        else:
            gR = -(P.mT @ (X @ gX.mH if left else X.mH @ gX) @ P)
            gR = tri_solve(L, gR, unit_lower=True, left=False, adjoint=True, backend=backend)
            gU = tri_solve(U, L.mH @ gR, unit_lower=False, left=False, adjoint=True,
                           backend=backend)
            gLU = torch.tril(gR, -1) + torch.triu(gU)
    return gLU, None, gB, None, None


def memory_safe_pivots(LU: Tensor, pivots: Tensor) -> Tensor:
    """``pivots`` of CUDA tensors clamped into 1..n on the device (no host synchronisation);
    others as they are.

    torch.linalg.lu_solve validates pivots on the CPU only. On CUDA it reads them unchecked, and
    a pivot far out of range (-2**31, measured on an H200 with torch 2.11) reads outside the
    matrix: an illegal memory access, after which the process's CUDA context is unusable.
    Clamping leaves valid pivots unchanged and costs one elementwise launch; invalid ones give a
    wrong solution without an error, as in torch. Reporting them would need a device read, which
    makes a 3x3 solve cost four times torch's (benchmarks/results/overhead_cuda.md).
    """
    if pivots.is_cuda and LU.dim() >= 2:
        return pivots.clamp(1, max(LU.shape[-2], 1))
    return pivots


def _lu_solve_torch(LU, pivots, B, left, adjoint):
    batch = B.shape[:-2]
    return torch.linalg.lu_solve(LU.expand(*batch, *LU.shape[-2:]),
                                 memory_safe_pivots(LU, pivots).expand(*batch, pivots.shape[-1]),
                                 B, left=left, adjoint=adjoint)


def _check_pivots(LU: Tensor, pivots: Tensor, B: Tensor, left: bool, adjoint: bool, *,
                  api: str) -> None:
    """Pivots outside 1..n raise RuntimeError in torch's words (one device read); torch checks
    its own inputs, the Metal kernels would only clamp them."""
    if pivots.numel() == 0 or pivots.device.type == "meta":
        return
    low, high = read_device(torch.stack(torch.aminmax(pivots)), "lu_solve pivots").tolist()
    if low < 1:
        raise RuntimeError(f"{api}: Pivots given to lu_solve must all be greater or equal to 1. "
                           "Did you properly pass the result of lu_factor?")
    if high > LU.shape[-2]:
        raise RuntimeError(f"{api}: Pivots given to lu_solve must all be smaller or equal to "
                           "LU.size(-2). Did you properly pass the result of lu_factor?")


#: X with op(A) X = B (left) or X op(A) = B, A = P L U given packed; LU and pivots broadcast
#: to B's batch shape inside (the factory sums their gradients back). With ``check`` set, the
#: pivots are validated first (the documented device read of the metal lu_solve).
lu_solve_op = Op(
    "lu_solve", "(Tensor LU, Tensor pivots, Tensor B, bool left, bool adjoint) -> Tensor",
    forward={"metal": lambda LU, pivots, B, left, adjoint: lu_metal.lu_solve_metal(
                 LU, pivots, B, left=left, adjoint=adjoint),
             "torch": _lu_solve_torch},
    fake=lambda LU, pivots, B, left, adjoint: torch.empty_like(
        B, memory_format=torch.contiguous_format),
    save=_lu_solve_save, backward=_lu_solve_backward, check_inputs=_check_pivots)


# ---------------------------------------------------------------- public API


def _no_pivot_error(fn: str, A: Tensor, backend: str) -> None:
    # torch implements pivot=False only for CUDA tensors (MAGMA/cuSOLVER); CPU raises
    # "linalg.lu_factor: LU without pivoting is not implemented on the CPU".
    if backend == "torch" and A.device.type == "cuda":
        return
    where = "the CPU" if A.device.type == "cpu" else A.device.type.upper()
    if backend == "metal":
        where += " (metal backend)"
    raise RuntimeError(f"mpslinalg.{fn}: LU without pivoting is not implemented on {where}")


def _lu_factor(fn: str, A: Tensor, pivot: bool, check: str) -> tuple[Tensor, Tensor, Tensor]:
    """(LU in A's dtype, pivots, info) on the chosen backend, raising when ``check`` names the
    API."""
    A, Ac, backend = checks.prepare(fn, A, square=False)
    if not pivot:
        _no_pivot_error(fn, A, backend)
    if backend == "torch" and not pivot:
        LU, pivots, info = torch.linalg.lu_factor_ex(Ac, pivot=False, check_errors=bool(check))
    else:
        LU, pivots, info = lu_factor_ex_op(Ac, backend, False, check)
    return cast_back(LU, A.dtype), pivots, info


@public(torch.linalg.lu_factor_ex, checks="check_errors", general_when=mkl_batched_getrf_affected)
def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False,
                 out: tuple[Tensor, Tensor, Tensor] | None = None):
    r"""LU factorisation with partial pivoting, ``A = P L U``, in LAPACK's packed form, plus
    ``info``; like `torch.linalg.lu_factor_ex`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``, float32 / complex64 (metal) or also float64 / complex128 (torch
        backend); float16 / bfloat16 are computed in float32 and cast back.
    pivot : bool, optional
        Must be True except for CUDA tensors on the torch backend (as torch).
    check_errors : bool, optional
        Raise `mpslinalg.LinAlgError` if a ``U`` diagonal entry is exactly zero (one
        device read); by default nothing synchronises with the device.
    out : tuple of Tensor, optional
        ``(LU, pivots, info)`` to write the results into.

    Returns
    -------
    LU : Tensor
        ``(*, m, n)``: L (unit diagonal, strictly below) and U.
    pivots : Tensor
        ``(*, min(m, n))`` int32, 1-based row interchanges.
    info : Tensor
        ``(*)`` int32: 0, or the 1-based index of the first zero pivot.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[1., 2.], [3., 4.]])
    >>> LU, pivots, info = mpslinalg.lu_factor_ex(A)
    >>> pivots, info
    (tensor([2, 2], dtype=torch.int32), tensor(0, dtype=torch.int32))
    """
    api = "mpslinalg.lu_factor_ex" if check_errors else ""
    result = _RESULTS.linalg_lu_factor_ex(_lu_factor("lu_factor_ex", A, pivot, api))
    return write_out("lu_factor_ex", out, result)


@public(torch.linalg.lu_factor, checks=True, general_when=mkl_batched_getrf_affected)
def lu_factor(A: Tensor, *, pivot: bool = True, out: tuple[Tensor, Tensor] | None = None):
    r"""LU factorisation with partial pivoting in packed form; like
    `torch.linalg.lu_factor`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``; see `lu_factor_ex`.
    pivot : bool, optional
        Must be True except for CUDA tensors on the torch backend (as torch).
    out : tuple of Tensor, optional
        ``(LU, pivots)`` to write the results into.

    Returns
    -------
    LU, pivots : Tensor
        As `lu_factor_ex`.

    Raises
    ------
    mpslinalg.LinAlgError
        "U[k,k] is zero ..." (with "(Batch element i)" for batches) when a pivot is exactly
        zero; this reads ``info`` from the device once.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> LU, pivots = mpslinalg.lu_factor(torch.tensor([[1., 2.], [3., 4.]]))
    >>> LU
    tensor([[3.0000, 4.0000],
            [0.3333, 0.6667]])
    """
    LU, pivots, _ = _lu_factor("lu_factor", A, pivot, "mpslinalg.lu_factor")
    return write_out("lu_factor", out, _RESULTS.linalg_lu_factor((LU, pivots)))


@public(torch.linalg.lu, general_when=mkl_batched_getrf_affected)
def lu(A: Tensor, *, pivot: bool = True, out: tuple[Tensor, Tensor, Tensor] | None = None):
    r"""LU factorisation with partial pivoting, ``A = P L U``; like `torch.linalg.lu`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``; see `lu_factor_ex`.
    pivot : bool, optional
        Must be True except for CUDA tensors on the torch backend (as torch).
    out : tuple of Tensor, optional
        ``(P, L, U)`` to write the results into.

    Returns
    -------
    P : Tensor
        ``(*, m, m)`` permutation matrices.
    L : Tensor
        ``(*, m, k)`` unit lower triangular, k = min(m, n).
    U : Tensor
        ``(*, k, n)`` upper triangular.

    Notes
    -----
    Never raises for singular input and never synchronises with the device. Differentiable
    (also for complex input) through the LU factor.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[1., 2.], [3., 4.]])
    >>> P, L, U = mpslinalg.lu(A)
    >>> torch.allclose(P @ L @ U, A)
    True
    """
    fn = "lu"
    A, Ac, backend = checks.prepare(fn, A, square=False)
    if not pivot:
        _no_pivot_error(fn, A, backend)
    if backend == "torch" and not pivot:
        P, L, U = torch.linalg.lu(Ac, pivot=False)
    else:
        LU, pivots, _ = lu_factor_ex_op(Ac, backend, False, "")
        P, L, U = torch.lu_unpack(LU, pivots)
    result = _RESULTS.linalg_lu(tuple(cast_back(t, A.dtype) for t in (P, L, U)))
    return write_out(fn, out, result)


def _check_lu_solve(fn: str, LU: object, pivots: object, B: object, left: bool) -> None:
    LU = checks.check_matrix(fn, "LU", LU)
    pivots = checks.check_tensor(fn, "pivots", pivots)
    B = checks.check_tensor(fn, "B", B)
    if B.dim() < 2:
        raise RuntimeError(f"mpslinalg.{fn}: the input tensor B must have at least 2 dimensions, "
                           f"got shape {checks.shape_str(B)}")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"mpslinalg.{fn}: pivots should be a Tensor of scalar type "
                           f"torch.int32, got {pivots.dtype}")
    if pivots.shape != LU.shape[:-1]:
        raise RuntimeError(f"mpslinalg.{fn}: expected LU.shape[:-1] and pivots.shape to be the "
                           f"same, but got LU with shape {checks.shape_str(LU)} and pivots with "
                           f"shape {checks.shape_str(pivots)}")
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"mpslinalg.{fn}: Incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    checks.check_same_device(fn, LU=LU, pivots=pivots, B=B)
    checks.check_same_dtype(fn, LU=LU, B=B)


def _torch_lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
                    adjoint: bool = False, out: Tensor | None = None) -> Tensor:
    """The fast path: torch.linalg.lu_solve, with pivots made memory-safe on CUDA."""
    pivots = memory_safe_pivots(LU, pivots)
    if left is True and adjoint is False and out is None:  # torch parses keywords slowly
        return torch.linalg.lu_solve(LU, pivots, B)
    return torch.linalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint, out=out)


@public(_torch_lu_solve, torch_name="linalg.lu_solve")
def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
             adjoint: bool = False, out: Tensor | None = None) -> Tensor:
    r"""Solve ``A X = B`` given the LU factorisation of ``A`` from `lu_factor`; like
    `torch.linalg.lu_solve`.

    Parameters
    ----------
    LU : Tensor
        ``(*, n, n)`` packed factors.
    pivots : Tensor
        ``(*, n)`` int32, 1-based, as `lu_factor` returns them.
    B : Tensor
        ``(*, n, k)`` (or ``(*, k, n)`` when ``left=False``); batch dimensions broadcast with
        those of ``LU``.
    left : bool, optional
        Solve ``A X = B`` (True) or ``X A = B``.
    adjoint : bool, optional
        Use ``A^H`` instead of ``A``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        X, shaped like the broadcast ``B``.

    Notes
    -----
    On the metal backend the pivots are validated as torch does on the CPU (RuntimeError for a
    pivot outside 1..n), which reads them from the device once: the one host synchronisation of
    the metal path outside the checking forms. For CUDA tensors torch does not validate them,
    and a check would cost a device read on every call; mpslinalg clamps them into 1..n on the
    device instead, so that an invalid pivot gives a wrong solution (as in torch) but never an
    out-of-bounds memory access (torch's can end the process's CUDA context).
    Differentiable with respect to ``LU`` and ``B``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[1., 2.], [3., 4.]])
    >>> LU, pivots = mpslinalg.lu_factor(A)
    >>> mpslinalg.lu_solve(LU, pivots, torch.tensor([[5.], [6.]]))
    tensor([[-4.0000],
            [ 4.5000]])
    """
    fn = "lu_solve"
    _check_lu_solve(fn, LU, pivots, B, left)
    batch = checks.broadcast_batch(fn, ("LU", LU.shape[:-2]), ("B", B.shape[:-2]))
    backend = resolve_backend(LU.device, fn)
    dtype = checks.compute_dtype(fn, LU.dtype, backend)
    Bc = to_dtype(B, dtype).expand(*batch, *B.shape[-2:])
    check = "mpslinalg.lu_solve" if backend == "metal" else ""
    X = lu_solve_op(to_dtype(LU, dtype), pivots, Bc, left, adjoint, backend, False, check)
    return write_out(fn, out, cast_back(X, B.dtype))
