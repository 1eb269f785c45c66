"""Cholesky factorisation and triangular solves: ``cholesky``, ``cholesky_ex``,
``solve_triangular``, and torch's top-level ``cholesky_solve`` and ``cholesky_inverse``, with
torch's signatures, semantics and result types.

Ops: ``mpslinalg::cholesky_ex`` (LAPACK potrf), ``mpslinalg::solve_triangular`` (trsm),
``mpslinalg::cholesky_solve`` (potrs) and ``mpslinalg::cholesky_inverse`` (potri). On the metal
backend potrf runs the kernels of `mpslinalg.linalg.cholesky_metal` (metal/linalg/cholesky.h);
the solves run the triangular kernels (metal/linalg/triangular.h): potrs is two of them,
potri the same two against the identity. Each op reads one triangle of its triangular or
Hermitian argument and never the other, as LAPACK does.

The derivative rules are written with the ops themselves (the call's backend), so they run on
the Apple GPU and can be differentiated again.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core import checks
from .._core.declare import Call, Declaration, Matrix, Operand, Param, Result, info
from .._core.op import SAFE_CAST, OutCasting
from ..small import cholesky as small_cholesky
from . import cholesky_metal

__all__ = ["cholesky", "cholesky_ex", "cholesky_inverse", "cholesky_solve", "solve_triangular"]

# ---------------------------------------------------------------- n <= 4
#
# Batches of n <= 4 matrices take `mpslinalg.small.cholesky` (one kernel over the batch: Metal,
# CPU SIMD or Triton, chosen by its path tables) through each declaration's "small" forward,
# ``small_when=`` (whether the call takes it) and ``through_op=`` (which torch-backend calls go
# through the op to reach it), as `mpslinalg.linalg.matrix_exp` does.


def _small_cholesky_ex(A: Tensor, upper: bool, backend: str) -> tuple[Tensor, Tensor]:
    """The n <= 4 kernels keep potf2's partial result after a non-positive minor, as torch's
    CPU cholesky_ex does (the torch backend's contract); on the metal backend the factor is NaN
    from the failing minor on at every n, as `cholesky_metal` leaves it."""
    L, info = small_cholesky.small_cholesky_ex(A, upper, backend=backend)
    if backend != "metal":
        return L, info
    n = A.shape[-1]
    k = torch.arange(n, device=A.device)
    row, col = k[:, None], k[None, :]
    first = (info - 1).where(info > 0, n)[..., None, None]  # 0-based failing column, n: none
    lost = (col >= first) & (row >= col) if not upper else (row >= first) & (col >= row)
    return L.masked_fill(lost, float("nan")), info


# ---------------------------------------------------------------- mpslinalg::solve_triangular


def _solve_triangular_backward(ctx, gX: Tensor):
    """A X = B: gB = A^-H gX, gA = -gB X^H; X A = B: gB = gX A^-H, gA = -X^H gB (Giles 2008,
    "An extended collection of matrix derivative results for forward and reverse mode AD",
    sec. 2.3.1), gA restricted to the triangle read (without the diagonal when
    ``unitriangular``), as torch's linalg_solve_triangular_backward. Conjugate Wirtinger."""
    A, X = ctx.saved_tensors
    upper, left, unit = ctx.upper, ctx.left, ctx.unitriangular
    gB = solve_triangular_op(A.mH, gX, not upper, left, unit, ctx.backend, False, "")
    gA = None
    if ctx.needs_input_grad[0]:
        gA = -(gB @ X.mH) if left else -(X.mH @ gB)
        gA = gA.triu(int(unit)) if upper else gA.tril(-int(unit))
    return gA, gB if ctx.needs_input_grad[1] else None, None, None, None


def _prepare_solve_triangular(call: Call, A: Tensor, B: Tensor, upper: bool, left: bool,
                              unitriangular: bool) -> tuple:
    fn = call.fn
    if B.dim() < 2:
        raise RuntimeError(f"mpslinalg.{fn}: The input tensor B must have at least 2 "
                           f"dimensions, got shape {checks.shape_str(B)}")
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"mpslinalg.{fn}: Incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    batch = checks.broadcast_batch(fn, ("A", A.shape[:-2]), ("B", B.shape[:-2]))
    return A, B.expand(*batch, *B.shape[-2:]), bool(upper), bool(left), bool(unitriangular)


#: X with A X = B (left) or X A = B, A triangular; batches broadcast (B is expanded to the
#: common batch by prepare, A inside the forward; the factory sums gA back).
solve_triangular_decl = Declaration(
    "solve_triangular", [Matrix("A"), Operand("B", 2), Param("upper", "bool"),
                         Param("left", "bool"), Param("unitriangular", "bool")],
    [Result("X", "B")],
    forward={"metal": lambda A, B, upper, left, unitriangular:
             cholesky_metal.solve_triangular_metal(A, B, upper=upper, left=left,
                                                   unitriangular=unitriangular),
             "torch": lambda A, B, upper, left, unitriangular: torch.linalg.solve_triangular(
                 A, B, upper=upper, left=left, unitriangular=unitriangular),
             "small": small_cholesky.small_solve_triangular},
    small_when=lambda backend, A, B, upper, left, unitriangular:
        small_cholesky.use_small_solve_triangular(A, B, left, backend),
    through_op=small_cholesky.may_use_small_solve_triangular,
    prepare=_prepare_solve_triangular, backward=_solve_triangular_backward, saves=["A", "X"])
solve_triangular_op = solve_triangular_decl.op


# ---------------------------------------------------------------- mpslinalg::cholesky_ex


def _cholesky_backward(ctx, gL: Tensor, ginfo):
    """gA = L^-H Phi(L^H gL) L^-1 with Phi(X) = tril(X) with its diagonal halved, made
    Hermitian (Murray 2016, "Differentiation of the Cholesky decomposition", arXiv:1602.07527,
    eq. 10, as torch's cholesky_backward: the perturbation of A is Hermitian); for upper=True
    the same with L = U^H. Conjugate Wirtinger."""
    (L,) = ctx.saved_tensors
    if ctx.upper:
        L, gL = L.mH, gL.mH
    P = (L.mH @ gL).tril()
    P = 0.5 * (P + P.tril(-1).mH)
    X = solve_triangular_op(L.mH, P, True, True, False, ctx.backend, False, "")
    return solve_triangular_op(L, X, False, False, False, ctx.backend, False, ""), None


#: (L, info) of LAPACK's potrf; ``upper``: (U, info) with A = U^H U, reading A's upper triangle.
cholesky_ex_decl = Declaration(
    "cholesky_ex", [Matrix("A"), Param("upper", "bool")], [Result("L", "A"), info()],
    forward={"metal": lambda A, upper: cholesky_metal.cholesky_metal(A, upper),
             "torch": lambda A, upper: tuple(torch.linalg.cholesky_ex(A, upper=upper)),
             "small": _small_cholesky_ex},
    small_when=lambda backend, A, upper: small_cholesky.use_small_cholesky(A, backend),
    through_op=small_cholesky.may_use_small_cholesky,
    backward=_cholesky_backward, saves=["L"])
cholesky_ex_op = cholesky_ex_decl.op


# ---------------------------------------------------------------- mpslinalg::cholesky_solve


def _cholesky_solve_backward(ctx, gX: Tensor):
    """A X = B with A = L L^H: gB = A^-1 gX (A is Hermitian) and gA = -gB X^H (Giles 2008,
    sec. 2.3.1), chained through A = L L^H: gL = (gA + gA^H) L (U (gA + gA^H) for A = U^H U),
    as torch's cholesky_solve_backward (which keeps both triangles). Conjugate Wirtinger."""
    L, X = ctx.saved_tensors
    gB = cholesky_solve_op(gX, L, ctx.upper, ctx.backend, False, "")
    gL = None
    if ctx.needs_input_grad[1]:
        common = gB @ X.mH
        common = common + common.mH
        gL = -(L @ common) if ctx.upper else -(common @ L)
    return gB if ctx.needs_input_grad[0] else None, gL, None


def _cholesky_solve_torch(B: Tensor, L: Tensor, upper: bool) -> Tensor:
    return torch.cholesky_solve(B, L, upper)


def _prepare_cholesky_solve(call: Call, B: Tensor, L: Tensor, upper: bool) -> tuple:
    fn = call.fn
    if B.dim() < 2:
        raise RuntimeError(f"mpslinalg.{fn}: b should have at least 2 dimensions, but has "
                           f"{B.dim()} dimensions instead")
    n = L.shape[-1]
    if B.shape[-2] != n:
        raise RuntimeError(f"mpslinalg.{fn}: Incompatible matrix sizes for cholesky_solve: "
                           f"each A matrix is {n} by {n} but each b matrix is {B.shape[-2]} by "
                           f"{B.shape[-1]}")
    batch = checks.broadcast_batch(fn, ("B", B.shape[:-2]), ("L", L.shape[:-2]))
    return B.expand(*batch, *B.shape[-2:]), L, bool(upper)


#: X with A X = B, A = L L^H given L (A = U^H U given U when ``upper``); batches broadcast.
cholesky_solve_decl = Declaration(
    "cholesky_solve", [Operand("B", 2), Matrix("L"), Param("upper", "bool")],
    [Result("X", "B")],
    forward={"metal": lambda B, L, upper: cholesky_metal.cholesky_solve_metal(B, L, upper),
             "torch": _cholesky_solve_torch, "small": small_cholesky.small_cholesky_solve},
    small_when=lambda backend, B, L, upper: small_cholesky.use_small_cholesky_solve(B, L,
                                                                                 backend),
    through_op=small_cholesky.may_use_small_cholesky_solve,
    prepare=_prepare_cholesky_solve, backward=_cholesky_solve_backward, saves=["L", "X"])
cholesky_solve_op = cholesky_solve_decl.op


# ---------------------------------------------------------------- mpslinalg::cholesky_inverse


def _cholesky_inverse_backward(ctx, gX: Tensor):
    """X = A^-1 with A = L L^H: gA = -X gX X (X Hermitian; Giles 2008, sec. 2.2.3), chained
    through A = L L^H: gL = (gA + gA^H) L (U (gA + gA^H) for A = U^H U), as torch's
    cholesky_inverse_backward. Conjugate Wirtinger."""
    L, X = ctx.saved_tensors
    common = X @ (gX + gX.mH) @ X
    return (-(L @ common) if ctx.upper else -(common @ L)), None


#: (L L^H)^-1 given L ((U^H U)^-1 given U when ``upper``).
cholesky_inverse_decl = Declaration(
    "cholesky_inverse", [Matrix("L"), Param("upper", "bool")], [Result("inverse", "L")],
    forward={"metal": lambda L, upper: cholesky_metal.cholesky_inverse_metal(L, upper),
             "torch": lambda L, upper: torch.cholesky_inverse(L, upper)},
    backward=_cholesky_inverse_backward, saves=["L", "inverse"])
cholesky_inverse_op = cholesky_inverse_decl.op


# ---------------------------------------------------------------- public API


@cholesky_ex_decl.public(torch.linalg.cholesky_ex)
def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False,
                out: tuple[Tensor, Tensor] | None = None):
    r"""Cholesky factorisation ``A = L L^H`` of Hermitian positive-definite matrices, plus
    ``info``; like `torch.linalg.cholesky_ex`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``; only its lower triangle is read (its upper one when ``upper``), the
        imaginary part of its diagonal neither. float32 / complex64 (metal) or also float64 /
        complex128 (torch backend); float16 / bfloat16 are computed in float32 and cast back.
    upper : bool, optional
        Return ``U`` with ``A = U^H U`` (reading A's upper triangle) instead of ``L``.
    check_errors : bool, optional
        Raise `mpslinalg.LinAlgError` if a matrix is not positive definite (one device read);
        by default nothing synchronises with the device.
    out : tuple of Tensor, optional
        ``(L, info)`` to write the results into.

    Returns
    -------
    L : Tensor
        ``(*, n, n)`` lower (upper) triangular with a real positive diagonal, zero in the
        other triangle.
    info : Tensor
        ``(*)`` int32: 0, or the order of the first leading minor that is not positive
        definite (a pivot ``<= 0`` or NaN).

    Notes
    -----
    Where ``info = k > 0``, columns (rows, for ``upper``) ``1 .. k - 1`` of the factor are
    those of the factorisation of the leading minor of order ``k - 1``, on both backends. The
    rest is unspecified in torch (LAPACK leaves the failing pivot and unfactored entries
    there); the metal backend makes it NaN, so that a failed factor never looks finite.
    Differentiable (Murray 2016).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[4., 2.], [2., 5.]])
    >>> mpslinalg.cholesky_ex(A)
    torch.return_types.linalg_cholesky_ex(
    L=tensor([[2., 0.],
            [1., 2.]]),
    info=tensor(0, dtype=torch.int32))
    >>> mpslinalg.cholesky_ex(-A).info
    tensor(1, dtype=torch.int32)
    """


@cholesky_ex_decl.public(torch.linalg.cholesky)
def cholesky(A: Tensor, *, upper: bool = False, out: Tensor | None = None) -> Tensor:
    r"""Cholesky factorisation ``A = L L^H`` of Hermitian positive-definite matrices; like
    `torch.linalg.cholesky`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``; see `cholesky_ex` (one triangle is read).
    upper : bool, optional
        Return ``U`` with ``A = U^H U`` instead of ``L``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        L (or U). Differentiable (Murray 2016, "Differentiation of the Cholesky
        decomposition").

    Raises
    ------
    mpslinalg.LinAlgError
        "The factorization could not be completed because the input is not positive-definite
        (the leading minor of order k is not positive-definite)." ("(Batch element i)" for
        batches), reading ``info`` from the device once.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.cholesky(torch.tensor([[4., 2.], [2., 5.]]), upper=True)
    tensor([[2., 1.],
            [0., 2.]])
    """


def _torch_solve_triangular(A: Tensor, B: Tensor, upper: bool, *, left: bool = True,
                            unitriangular: bool = False, out: Tensor | None = None) -> Tensor:
    """The fast path: torch takes ``upper`` by keyword only, the generated call passes it by
    position when every optional argument is at its default."""
    if left is True and unitriangular is False and out is None:
        return torch.linalg.solve_triangular(A, B, upper=upper)
    return torch.linalg.solve_triangular(A, B, upper=upper, left=left,
                                         unitriangular=unitriangular, out=out)


#: torch's out= rule for solve_triangular: the result's dtype exactly, in its own words.
_SOLVE_TRIANGULAR_OUT = OutCasting(lambda result, out: False,
                                   "expected scalar type {want_type} but found {got_type}")


@solve_triangular_decl.public(_torch_solve_triangular, torch_name="linalg.solve_triangular",
                              casting=_SOLVE_TRIANGULAR_OUT)
def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False, out: Tensor | None = None) -> Tensor:
    r"""Solve ``A X = B`` (or ``X A = B``) with triangular ``A``; like
    `torch.linalg.solve_triangular`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``; only its upper (``upper=True``) or lower triangle is read, and not its
        diagonal when ``unitriangular``.
    B : Tensor
        ``(*, n, k)`` (``(*, k, n)`` when ``left=False``); batch dimensions broadcast with
        ``A``'s.
    upper : bool
        Whether ``A`` is upper or lower triangular (keyword only, required, as in torch).
    left : bool, optional
        Solve ``A X = B`` (True) or ``X A = B``.
    unitriangular : bool, optional
        Take the diagonal of ``A`` as ones.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        X, with the broadcast batch shape. Differentiable with respect to ``A`` (its triangle)
        and ``B``.

    Notes
    -----
    A zero on the diagonal gives infinities and NaN, never an error, as in torch. On the metal
    backend both arguments must have the same dtype (torch promotes mixed ones).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[2., 1.], [0., 4.]])
    >>> mpslinalg.solve_triangular(A, torch.tensor([[3.], [4.]]), upper=True)
    tensor([[1.],
            [1.]])
    """


@cholesky_solve_decl.public(torch.cholesky_solve, torch_name="cholesky_solve",
                            casting=SAFE_CAST)
def cholesky_solve(B: Tensor, L: Tensor, upper: bool = False, *,
                   out: Tensor | None = None) -> Tensor:
    r"""Solve ``A X = B`` given the Cholesky factor of ``A``; like `torch.cholesky_solve`.

    Parameters
    ----------
    B : Tensor
        ``(*, n, k)``; batch dimensions broadcast with ``L``'s.
    L : Tensor
        ``(*, n, n)``: ``A = L L^H`` with ``L`` lower triangular, or ``A = U^H U`` with ``U``
        upper triangular when ``upper``; only that triangle is read.
    upper : bool, optional
        Whether the factor is upper triangular.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        X, with the broadcast batch shape. Differentiable with respect to ``B`` and ``L``.

    Notes
    -----
    Two triangular solves (LAPACK potrs); on the metal backend the triangular kernels.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> L = mpslinalg.cholesky(torch.tensor([[4., 2.], [2., 5.]]))
    >>> mpslinalg.cholesky_solve(torch.tensor([[6.], [7.]]), L)
    tensor([[1.],
            [1.]])
    """


@cholesky_inverse_decl.public(torch.cholesky_inverse, torch_name="cholesky_inverse",
                              casting=SAFE_CAST)
def cholesky_inverse(L: Tensor, upper: bool = False, *, out: Tensor | None = None) -> Tensor:
    r"""Inverse of ``A`` given its Cholesky factor; like `torch.cholesky_inverse`.

    Parameters
    ----------
    L : Tensor
        ``(*, n, n)``: ``A = L L^H`` (``A = U^H U`` when ``upper``); only that triangle is
        read.
    upper : bool, optional
        Whether the factor is upper triangular.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``A^-1``, Hermitian. Differentiable.

    Notes
    -----
    On the metal backend the two triangular solves of `cholesky_solve` against the identity,
    then the Hermitian part of the result (LAPACK potri forms one triangle of it).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> L = torch.tensor([[2., 0.], [1., 2.]])
    >>> mpslinalg.cholesky_inverse(L)
    tensor([[ 0.3125, -0.1250],
            [-0.1250,  0.2500]])
    """
