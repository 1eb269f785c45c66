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

from .. import small
from .._core import checks
from .._core.declare import Call, Declaration, Matrix, Operand, Param, Result, info
from .._core.errors import read_device
from .._core.torch_bugs import mkl_batched_getrf_affected, per_matrix
from . import lu_metal

__all__ = ["lu", "lu_factor", "lu_factor_ex", "lu_solve"]

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
    return P @ X, None


def _lu_factor_torch(A: Tensor, pivot: bool) -> tuple[Tensor, Tensor, Tensor]:
    if not pivot:  # CUDA only (prepare refuses it elsewhere); MKL's bug is a pivoting one
        return tuple(torch.linalg.lu_factor_ex(A, pivot=False))
    return tuple(per_matrix(torch.linalg.lu_factor_ex, A))


def _refuse_no_pivot(call: Call, A: Tensor, pivot: bool) -> tuple[Tensor, bool]:
    # torch implements pivot=False only for CUDA tensors (MAGMA/cuSOLVER); CPU raises
    # "linalg.lu_factor: LU without pivoting is not implemented on the CPU".
    if pivot or (call.backend == "torch" and A.device.type == "cuda"):
        return A, bool(pivot)
    where = "the CPU" if A.device.type == "cpu" else A.device.type.upper()
    if call.backend == "metal":
        where += " (metal backend)"
    raise RuntimeError(f"mpslinalg.{call.fn}: LU without pivoting is not implemented on {where}")


def through_lu_op(A) -> bool:
    """The LU-based families' (inv, solve, det, slogdet) torch-backend calls that go through
    their op: batches the small path may serve, and those MKL's batched getrf gets wrong."""
    return small.may_use_small_path(A) or mkl_batched_getrf_affected(A)


def small_lu_when(backend: str, A: Tensor, *rest) -> bool:
    """Whether the LU-based families' call of square ``A`` takes the small path."""
    return small.use_small_path(A, backend)


#: (LU, pivots, info) of LAPACK's getrf (pivot=False: CUDA on the torch backend only).
lu_factor_ex_decl = Declaration(
    "lu_factor_ex", [Matrix("A", square=False), Param("pivot", "bool")],
    [Result("LU", "A"), Result("pivots", lambda A, pivot: (min(A),), torch.int32), info()],
    forward={"metal": lambda A, pivot: lu_metal.lu_factor_metal(A, fn="lu_factor"),
             "torch": _lu_factor_torch},
    through_op=mkl_batched_getrf_affected, prepare=_refuse_no_pivot,
    backward=_lu_factor_backward, saves=["LU", "pivots"])
lu_factor_ex_op = lu_factor_ex_decl.op


# ---------------------------------------------------------------- mpslinalg::lu_solve


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
    left, adjoint = ctx.left, ctx.adjoint
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
#: to B's batch shape inside (the factory sums their gradients back). On the metal backend the
#: pivots are validated first (the documented device read of the metal lu_solve).
lu_solve_decl = Declaration(
    "lu_solve", [Matrix("LU"), Operand("pivots", 1, same_dtype=False), Operand("B", 2),
                 Param("left", "bool"), Param("adjoint", "bool")],
    [Result("X", "B")],
    forward={"metal": lambda LU, pivots, B, left, adjoint: lu_metal.lu_solve_metal(
                 LU, pivots, B, left=left, adjoint=adjoint),
             "torch": _lu_solve_torch},
    prepare=lambda call, LU, pivots, B, left, adjoint: _prepare_lu_solve(
        call.fn, LU, pivots, B, left, adjoint),
    backward=_lu_solve_backward, saves=["LU", "pivots", "X"], check_inputs=_check_pivots)
lu_solve_op = lu_solve_decl.op


# ---------------------------------------------------------------- public API


@lu_factor_ex_decl.public(torch.linalg.lu_factor_ex)
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


@lu_factor_ex_decl.public(torch.linalg.lu_factor)
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


def _unpack(call: Call, LU: Tensor, pivots: Tensor, info: Tensor):
    return torch.return_types.linalg_lu(tuple(map(call.cast, torch.lu_unpack(LU, pivots))))


@lu_factor_ex_decl.public(torch.linalg.lu, finish=_unpack)
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


def _prepare_lu_solve(fn: str, LU: Tensor, pivots: Tensor, B: Tensor, left: bool,
                      adjoint: bool) -> tuple:
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
    batch = checks.broadcast_batch(fn, ("LU", LU.shape[:-2]), ("B", B.shape[:-2]))
    return LU, pivots, B.expand(*batch, *B.shape[-2:]), bool(left), bool(adjoint)


def _torch_lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
                    adjoint: bool = False, out: Tensor | None = None) -> Tensor:
    """The fast path: torch.linalg.lu_solve, with pivots made memory-safe on CUDA."""
    pivots = memory_safe_pivots(LU, pivots)
    if left is True and adjoint is False and out is None:  # torch parses keywords slowly
        return torch.linalg.lu_solve(LU, pivots, B)
    return torch.linalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint, out=out)


@lu_solve_decl.public(_torch_lu_solve, torch_name="linalg.lu_solve")
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
