"""The QR family: ``qr``, ``geqrf``, ``householder_product`` and ``lstsq`` with torch semantics.

Ops ``mpslinalg::qr``, ``mpslinalg::geqrf``, ``mpslinalg::householder_product`` and
``mpslinalg::lstsq``: on the metal backend the blocked Householder kernels of
`mpslinalg.linalg.qr_metal` (LAPACK's reflectors, so results match LAPACK's up to rounding;
the tall-skinny tree restores LAPACK's signs), matrices up to 4 x 4 in one launch; on the
torch backend, batches of m, n <= 4 take the small path of `mpslinalg.small.orthogonal` (``qr``
only); ``lstsq`` solves full-rank problems through QR
(m >= n) or LQ (m < n), as LAPACK's gels, and rank-deficient ones by QR with column pivoting
(gelsy, one kernel) or the Metal SVD (gelsd, gelss). float64 / complex128 ``lstsq`` on the
metal backend (gels) refines the augmented system on float32 kernels
(`mpslinalg.linalg.refine_metal.lstsq_refined`).
"""

from __future__ import annotations

import math
import re

import torch
from torch import Tensor

from .. import small
from .._core import checks
from .._core.declare import (
    LINALG_REFINED,
    NOT_COMPUTED,
    REAL,
    Call,
    Declaration,
    Matrix,
    Operand,
    Param,
    Prepared,
    Result,
)
from .._core.errors import read_device
from .._core.op import SAFE_CAST, call_torch, to_dtype
from ..small.codegen import QR_MODES
from . import qr_metal, refine_metal, svd_metal

__all__ = ["geqrf", "householder_product", "lstsq", "qr"]

_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _solve_r_torch(R: Tensor, B: Tensor, left: bool, adjoint: bool) -> Tensor:
    M = R.mH if adjoint else R
    return torch.linalg.solve_triangular(M, B, upper=not adjoint, left=left)


#: X with op(R) X = B (``left``) or X op(R) = B, R upper triangular (*, n, n) with B's batch
#: shape, op(R) = R^H when ``adjoint``: the solves of the derivative rules, as an op so that
#: traced backward graphs do not trace into the kernels.
solve_r_op = Declaration(
    "qr_solve_r", [Matrix("R"), Operand("B", 2), Param("left", "bool"), Param("adjoint", "bool")],
    [Result("X", "B")],
    forward={"metal": lambda R, B, left, adjoint: qr_metal.solve_r_metal(
        R, B, left=left, adjoint=adjoint, fn="qr"), "torch": _solve_r_torch}).op


# ---------------------------------------------------------------- qr


def _copyltu(M: Tensor) -> Tensor:
    """tril(M, -1) + tril(M, -1)^H + Re diag(M): the Hermitian matrix with M's lower triangle."""
    low = M.tril(-1)
    return low + low.mH + torch.diag_embed(M.diagonal(dim1=-2, dim2=-1).real.to(M.dtype))


def _qr_backward_tall(Q: Tensor, R: Tensor, gQ: Tensor, gR: Tensor, backend: str) -> Tensor:
    """m >= n: gA = (gQ + Q copyltu(M)) R^-H with M = R gR^H - gQ^H Q, for R with a real
    diagonal (Walter and Lehmann 2010, "Algorithmic differentiation of linear algebra functions
    with application in optimum experimental design (extended version)", arXiv:1001.1654, the QR
    decomposition; conjugate Wirtinger for complex)."""
    M = R @ gR.mH - gQ.mH @ Q
    return solve_r_op(R, gQ + Q @ _copyltu(M), False, True, backend, False, "")


def _qr_backward(ctx, gQ: Tensor | None, gR: Tensor | None):
    """The QR derivative where torch has one (mode 'reduced', or 'complete' with m <= n); for
    m < n, A = [X | Y] and R = [U | V] with X = Q U square, Y = Q V: gY = Q gV and X's rule with
    gQ + Y gV^H (the chain rule through V = Q^H Y; Walter and Lehmann 2010 for X)."""
    Q, R = ctx.saved_tensors
    if ctx.mode == "r":
        raise RuntimeError(
            "mpslinalg.qr: The derivative of linalg.qr depends on Q, which is not computed when "
            "mode='r'. Please use linalg.qr(A, mode='reduced') if you are going to differentiate "
            "through linalg.qr.")
    m, n = Q.shape[-2], R.shape[-1]
    if ctx.mode == "complete" and m > n:
        raise RuntimeError("mpslinalg.qr: The QR decomposition is not differentiable when "
                           "mode='complete' and nrows > ncols.")
    gQ = torch.zeros_like(Q) if gQ is None else gQ
    gR = torch.zeros_like(R) if gR is None else gR
    if m >= n:
        return _qr_backward_tall(Q, R, gQ, gR, ctx.backend), None
    U, V = R[..., :m], R[..., m:]
    gU, gV = gR[..., :m], gR[..., m:]
    gX = _qr_backward_tall(Q, U, gQ + (Q @ V) @ gV.mH, gU, ctx.backend)
    return torch.cat([gX, Q @ gV], dim=-1), None


def _q_core(A, mode: str):
    m, n = A
    return NOT_COMPUTED if mode == "r" else (m, m if mode == "complete" else min(m, n))


def _r_core(A, mode: str):
    m, n = A
    return (m if mode == "complete" else min(m, n), n)


def _check_mode(call: Call, A: Tensor, mode: str) -> tuple:
    if mode not in QR_MODES:
        raise RuntimeError(f"mpslinalg.qr: qr received unrecognized mode '{mode}' but expected "
                           "one of 'reduced' (default), 'r', or 'complete'")
    return A, mode


#: (Q, R) of torch.linalg.qr for ``mode``.
qr_decl = Declaration(
    "qr", [Matrix("A", square=False), Param("mode", "str")],
    [Result("Q", _q_core), Result("R", _r_core)],
    forward={"metal": qr_metal.qr_metal, "torch": lambda A, mode: tuple(torch.linalg.qr(A, mode)),
             "small": lambda A, mode, backend: small.small_qr(A, mode)},
    small_when=lambda backend, A, mode: small.use_small_qr(A, backend),
    through_op=small.may_use_small_qr, prepare=_check_mode, backward=_qr_backward,
    saves=["Q", "R"])
qr_op = qr_decl.op


@qr_decl.public(torch.linalg.qr)
def qr(A: Tensor, mode: str = "reduced", *, out: tuple[Tensor, Tensor] | None = None):
    r"""QR decomposition ``A = Q R``; like `torch.linalg.qr`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``, any m and n.
    mode : {'reduced', 'complete', 'r'}, optional
        'reduced': Q ``(*, m, k)`` and R ``(*, k, n)``, k = min(m, n); 'complete': Q
        ``(*, m, m)`` and R ``(*, m, n)``; 'r': R only (Q is an empty tensor).
    out : tuple of Tensor, optional
        ``(Q, R)`` to write the results into.

    Returns
    -------
    Q : Tensor
        Orthonormal (unitary) columns.
    R : Tensor
        Upper triangular (trapezoidal), with a real diagonal. Differentiable where torch's is
        (mode 'reduced', or 'complete' with m <= n).

    Notes
    -----
    On the metal backend: blocked Householder QR with LAPACK's reflectors (the documentation's
    QR page), so Q and R match LAPACK's up to rounding; on the tall-skinny path (m much larger
    than n, mode 'reduced' or 'r': the TSQR tree) too, signs included, for A of full rank.
    Matrices up to 4 x 4 take one launch for any batch.
    On the torch backend, batches of m, n <= 4 float32/float64 matrices take the small path
    (generated SIMD code on CPU, one fused Triton kernel on CUDA) where it is faster than
    torch.linalg.qr, with the same reflectors (results equal torch's up to rounding, signs
    included).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[3., 1.], [4., 2.]])
    >>> Q, R = mpslinalg.qr(A)
    >>> R
    tensor([[-5.0000, -2.2000],
            [ 0.0000,  0.4000]])
    >>> torch.allclose(Q @ R, A)
    True
    """


# ---------------------------------------------------------------- geqrf


def _through_the_op(A, *args, **kwargs) -> bool:
    """torch.geqrf has no meta kernel and torch.linalg.lstsq's output shapes depend on values
    (so neither traces under torch.compile): meta tensors and traced calls take the op, whose
    fake gives the shapes."""
    return A.is_meta or torch.compiler.is_compiling()



def _geqrf_backward(ctx, ga, gtau):
    raise NotImplementedError("mpslinalg.geqrf: the derivative for 'geqrf' is not implemented.")


#: (a, tau) of LAPACK geqrf, as torch.geqrf.
geqrf_decl = Declaration(
    "geqrf", [Matrix("A", square=False)], [Result("a", "A"), Result("tau", lambda A: (min(A),))],
    forward={"metal": lambda A: qr_metal.geqrf_metal(A)[:2],
             "torch": lambda A: tuple(torch.geqrf(A))},
    through_op=_through_the_op, backward=_geqrf_backward)
geqrf_op = geqrf_decl.op


@geqrf_decl.public(torch.geqrf, torch_name="geqrf", casting=SAFE_CAST.named("a", "tau"))
def geqrf(A: Tensor, *, out: tuple[Tensor, Tensor] | None = None):
    r"""Householder QR in LAPACK's packed form; like `torch.geqrf`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    out : tuple of Tensor, optional
        ``(a, tau)`` to write the results into.

    Returns
    -------
    a : Tensor
        ``(*, m, n)``: R on and above the diagonal, the Householder vectors below it (their
        leading 1 implicit).
    tau : Tensor
        ``(*, min(m, n))``: the reflectors' scalars, ``H_i = I - tau_i v_i v_i^H`` and
        ``Q = H_1 ... H_k`` (`householder_product` forms it). Not differentiable, as in
        torch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> a, tau = mpslinalg.geqrf(torch.tensor([[3., 1.], [4., 2.]]))
    >>> a
    tensor([[-5.0000, -2.2000],
            [ 0.5000,  0.4000]])
    >>> tau
    tensor([1.6000, 0.0000])
    """


# ---------------------------------------------------------------- householder_product


def _householder_product_metal(A: Tensor, tau: Tensor) -> Tensor:
    from .._core.copy import contiguous

    a = contiguous(A, "householder_product")
    tau = contiguous(tau, "householder_product")
    tmat = qr_metal.larft_metal(a, tau)
    return qr_metal.orgqr_metal(a, tmat, k=tau.shape[-1], cols=A.shape[-1],
                                fn="householder_product")


def _householder_product_backward(ctx, gQ: Tensor):
    """Reverse mode through Q_{i-1} = (I - tau_i v_i v_i^H) Q_i, Q_k = I[:, :n], Q = Q_0:
    gQ_i = gQ_{i-1} - conj(tau_i) v_i (v_i^H gQ_{i-1}), g tau_i = -(v_i^H gQ_{i-1}) w_i^H and
    g v_i = -conj(tau_i) gQ_{i-1} w_i^H - tau_i Q_i gQ_{i-1}^H v_i with w_i = v_i^H Q_i (the
    chain rule for a product of rank-1 updates, with the matrix-product rule of Giles 2008, "An
    extended collection of matrix derivative results for forward and reverse mode AD";
    conjugate Wirtinger for complex). g v_i lands below the diagonal of column i of gA, the
    only entries Q depends on."""
    A, tau = ctx.saved_tensors
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    V = A.tril(-1)[..., :k] + torch.eye(m, k, dtype=A.dtype, device=A.device)
    Qs = [torch.eye(m, n, dtype=A.dtype, device=A.device).expand_as(A)]
    for i in reversed(range(k)):  # forward pass, keeping Q_i
        v = V[..., i:i + 1]
        Qs.append(Qs[-1] - tau[..., i, None, None] * v @ (v.mH @ Qs[-1]))
    Qs = Qs[::-1]  # Qs[i] = Q_i
    gA = torch.zeros_like(A)
    gtau = torch.zeros_like(tau)
    G = gQ
    for i in range(k):
        v = V[..., i:i + 1]
        t = tau[..., i, None, None]
        Qi = Qs[i + 1]
        w = v.mH @ Qi
        vG = v.mH @ G
        gtau[..., i] = -(vG @ w.mH)[..., 0, 0]
        gv = -t.conj() * G @ w.mH - t * Qi @ (G.mH @ v)
        gA[..., i + 1:, i] = gv[..., i + 1:, 0]
        G = G - t.conj() * v @ vG
    return gA, gtau


def _check_reflectors(call: Call, A: Tensor, tau: Tensor) -> tuple:
    fn = call.fn
    if tau.dim() != A.dim() - 1:
        raise RuntimeError(f"mpslinalg.{fn}: Expected tau to have one dimension less than input, "
                           f"but got tau.ndim equal to {tau.dim()} and input.ndim is equal to "
                           f"{A.dim()}")
    if tau.dtype != call.dtype:
        raise RuntimeError(f"mpslinalg.{fn}: tau dtype {tau.dtype} does not match input dtype "
                           f"{call.dtype}")
    m, n = A.shape[-2:]
    if m < n:
        raise RuntimeError(f"mpslinalg.{fn}: input.shape[-2] must be greater than or equal to "
                           f"input.shape[-1], got shape {checks.shape_str(A)}")
    if tau.shape[-1] > n:
        raise RuntimeError(f"mpslinalg.{fn}: input.shape[-1] must be greater than or equal to "
                           f"tau.shape[-1], got shapes {checks.shape_str(A)} and "
                           f"{checks.shape_str(tau)}")
    if tau.shape[:-1] != A.shape[:-2]:
        raise RuntimeError(f"mpslinalg.{fn}: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got tau of shape {checks.shape_str(tau)} for "
                           f"input of shape {checks.shape_str(A)}")
    return A, to_dtype(tau, A.dtype)


#: Q = H_1 ... H_k (first n columns), as torch.linalg.householder_product.
householder_product_decl = Declaration(
    "householder_product",
    [Matrix("A", square=False), Operand("tau", 1, same_dtype=False)], [Result("Q", "A")],
    forward={"metal": _householder_product_metal, "torch": torch.linalg.householder_product},
    prepare=_check_reflectors, backward=_householder_product_backward, saves=["A", "tau"])
householder_product_op = householder_product_decl.op


@householder_product_decl.public(torch.linalg.householder_product, casting=SAFE_CAST)
def householder_product(A: Tensor, tau: Tensor, *, out: Tensor | None = None) -> Tensor:
    r"""The first n columns of the product of Householder reflectors (LAPACK orgqr / ungqr);
    like `torch.linalg.householder_product`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``, m >= n: the vectors ``v_i`` below the diagonal of column i (the entries
        on and above it are not read), as `geqrf` returns them.
    tau : Tensor
        ``(*, k)``, k <= n, A's batch shape.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*, m, n)``: ``(H_1 ... H_k)[:, :n]`` with ``H_i = I - tau_i v_i v_i^H``.
        Differentiable with respect to ``A`` and ``tau``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[3., 1.], [4., 2.]])
    >>> Q = mpslinalg.householder_product(*mpslinalg.geqrf(A))
    >>> Q
    tensor([[-0.6000, -0.8000],
            [-0.8000,  0.6000]])
    """


# ---------------------------------------------------------------- lstsq


def _lstsq_metal(A: Tensor, B: Tensor, rcond: float | None, driver: str):
    if refine_metal.refined(A.dtype):  # float64 / complex128: refined, gels only
        if driver != "gels":
            raise TypeError(f"mpslinalg.lstsq: on the metal backend float64 / complex128 take "
                            f"driver 'gels' only (iterative refinement), got {driver!r}")
        return (*refine_metal.lstsq_refined(A, B), A.new_empty(0, dtype=torch.int64),
                A.new_empty(0, dtype=A.real.dtype if A.is_complex() else A.dtype))
    if driver == "gels":
        return _gels_metal(A, B)
    return _rank_revealing_metal(A, B, rcond, driver)


def _of_a(t: Tensor, a_batch: torch.Size, batch: torch.Size) -> Tensor:
    """The entries of ``t`` (*batch, ...), computed for A broadcast to ``batch``, that belong to
    A's own batch shape ``a_batch`` (torch returns rank per matrix of A)."""
    lead = len(batch) - len(a_batch)
    index = (0,) * lead + tuple(slice(None) if a == b else slice(0, 1)
                                for a, b in zip(a_batch, batch[lead:], strict=True))
    return t[index]


def _rank_revealing_metal(A: Tensor, B: Tensor, rcond: float | None, driver: str):
    """gelsy: `qr_metal.gelsy_metal` (LAPACK xGELSY: QR with column pivoting, incremental
    condition estimation). gelsd / gelss: the Metal SVD A = U S V^H, x = V S^+ U^H b with the
    singular values s <= rcond * s_max dropped (the rank is the number kept). Default rcond:
    torch's, eps * max(m, n)."""
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    m, n = A.shape[-2:]
    k = B.shape[-1]
    real = A.real.dtype if A.is_complex() else A.dtype
    if rcond is None:
        rcond = torch.finfo(real).eps * max(m, n)
    svd_driver = driver in ("gelsd", "gelss")
    no_residuals = A.new_empty(0, dtype=real)
    if math.prod(batch) == 0 or min(m, n) == 0 or (k == 0 and not svd_driver):
        # LAPACK's quick returns: rank 0 (gelsy also for B without columns)
        X = A.new_zeros((*batch, n, k))
        rank = torch.zeros(A.shape[:-2], dtype=torch.int64, device=A.device)
        svals = (A.new_zeros((*A.shape[:-2], min(m, n)), dtype=real) if svd_driver
                 else A.new_empty(0, dtype=real))
        # full column rank when n = 0 (or no matrices), so gelsd / gelss give residuals
        residuals = (B.abs().square().sum(-2).expand(*batch, k) if svd_driver and m > n
                     else no_residuals)
        return X, residuals, rank, svals
    if not svd_driver:
        X, rank = qr_metal.gelsy_metal(A.expand(*batch, m, n).reshape(-1, m, n),
                                       B.expand(*batch, m, k).reshape(-1, m, k), rcond)
        rank = _of_a(rank.view(batch).to(torch.int64), A.shape[:-2], batch)
        return X.view(*batch, n, k), no_residuals, rank, A.new_empty(0, dtype=real)
    if rcond < 0:  # LAPACK's gelsd / gelss: machine precision instead
        rcond = torch.finfo(real).eps / 2
    U, S, Vh, _ = svd_metal.svd_metal(A, False, fn="lstsq")
    kept = S > rcond * S[..., :1]
    rank = kept.sum(-1)
    inverse = torch.where(kept | S.isnan(), S.reciprocal(), 0)  # NaN stays NaN
    X = Vh.mH @ (inverse.unsqueeze(-1).to(A.dtype) * (U.mH @ B))
    residuals = no_residuals
    # torch's rule: residuals only when every matrix has full column rank (a host read)
    if m > n and bool(read_device((rank == n).all(), "lstsq: whether gelsd / gelss give "
                                  "residuals (every matrix of full column rank)")):
        residuals = (A @ X - B).abs().square().sum(-2)
    return X, residuals, rank, S


def _gels_metal(A: Tensor, B: Tensor):
    """LAPACK gels: x = R^-1 (Q^H b)[:n] for m >= n; for m < n, with A^H = Q R (A = R^H Q^H,
    an LQ factorisation), the minimum-norm x = Q [R^-H b; 0]. Tall-skinny A goes through the
    TSQR tree and its explicit Q."""
    batch = checks.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    m, n = A.shape[-2:]
    k = B.shape[-1]
    A = A.expand(*batch, m, n)
    B = B.expand(*batch, m, k)
    real = A.real.dtype if A.is_complex() else A.dtype
    residuals = (torch.empty((*batch, k), dtype=real, device=A.device) if m > n
                 else A.new_empty(0, dtype=real))
    rank = A.new_empty(0, dtype=torch.int64)
    svals = A.new_empty(0, dtype=real)
    if min(m, n, k) == 0 or A.numel() == 0:
        X = A.new_zeros((*batch, n, k))
        if m > n:
            residuals = B.abs().square().sum(-2)
        return X, residuals, rank, svals
    if qr_metal.use_tsqr(m, n, "reduced", A.dtype):  # m > n
        Q, R = qr_metal.qr_metal(A, "reduced", fn="lstsq")
        C = Q.mH @ B
        X = qr_metal.solve_r_metal(R, C, left=True, adjoint=False)
        return X, (B - Q @ C).abs().square().sum(-2), rank, svals
    if m >= n:
        a, _, tmat = qr_metal.geqrf_metal(A, fn="lstsq")
        C = qr_metal.apply_q_metal(a, tmat, B, k=n, adjoint=True, fn="lstsq")
        R = a[..., :n, :n]
        X = qr_metal.solve_r_metal(R, C[..., :n, :], left=True, adjoint=False)
        if m > n:
            residuals = C[..., n:, :].abs().square().sum(-2)
        return X, residuals, rank, svals
    a, _, tmat = qr_metal.geqrf_metal(A.mH, fn="lstsq")
    Y = qr_metal.solve_r_metal(a[..., :m, :m], B, left=True, adjoint=True)
    Z = torch.cat([Y, Y.new_zeros((*batch, n - m, k))], dim=-2)
    X = qr_metal.apply_q_metal(a, tmat, Z, k=m, adjoint=False, fn="lstsq")
    return X, residuals, rank, svals


def _torch_lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *,
                 driver: str | None = None):
    """torch.linalg.lstsq, with LAPACK's refusal of an argument said as such: torch reports it
    as a failed internal assert that asks for a bug report to PyTorch. NaN in A or B is the
    common cause (LAPACK's drivers check for it; gelsd also Inf in A); MKL's gelsd also refuses
    B without columns. That B is given one zero column on the CPU for gelsd and gelss, whose
    results are then cut back: LAPACK's gelss crashes the process on it (torch 2.13, MKL)."""
    if driver in ("gelsd", "gelss") and B.shape[-1] == 0 and B.dim() == A.dim() \
            and A.device.type == "cpu":
        X, residuals, rank, svals = _torch_lstsq(A, B.new_zeros((*B.shape[:-1], 1)), rcond,
                                                 driver=driver)
        return torch.return_types.linalg_lstsq((X[..., :0], residuals[..., :0], rank, svals))
    try:
        return torch.linalg.lstsq(A, B, rcond, driver=driver)
    except RuntimeError as error:
        found = re.search(r"Argument (\d+) has illegal value", str(error))
        if found is None:
            raise
        name = driver or ("gelsy" if A.device.type == "cpu" else "gels")
        raise RuntimeError(
            f"torch.linalg.lstsq: LAPACK's {name} refused its argument {found.group(1)}, as "
            "it refuses NaN entries of A or B (gelsd also Inf in A); "
            "the metal backend returns NaN for the batch elements with NaN instead") from None


def _lstsq_torch(A: Tensor, B: Tensor, rcond: float | None, driver: str):
    X, residuals, rank, svals = call_torch("lstsq", _torch_lstsq, A, B, rcond, driver=driver)
    if residuals.numel():
        # Recomputed: torch 2.13's complex residuals come out wrong when the op runs inside
        # a graph traced by AOTAutograd (torch.compile), though right in eager mode.
        residuals = (A @ X - B).abs().square().sum(-2)
    return X, residuals, rank, svals


def _lstsq_backward(ctx, gX: Tensor | None, gres: Tensor | None, *unused):
    """Solution of full-rank least squares, X = A^+ B: gB = A^+H gX and
    gA = -gB X^H + (B - A X) Z^H + Y (gX - A^H gB)^H with Z = (A^H A)^-1 gX (m >= n; the last
    term vanishes) and Y = (A A^H)^-1 B (m < n; the residual term vanishes), the pseudo-inverse
    derivative of Golub and Pereyra 1973, "The differentiation of pseudo-inverses and nonlinear
    least squares problems whose variables separate"; conjugate Wirtinger for complex.
    Each inverse is itself a least-squares solution through the op.
    The residuals r_j = ||A x_j - b_j||^2 (m > n) are stationary in x_j at the solution, so
    their derivative is the explicit one: gA = 2 (A X - B) diag(g_r) X^H, gB = -2 (A X - B)
    diag(g_r)."""
    A, B, X = ctx.saved_tensors
    has_gX = gX is not None
    has_gres = gres is not None and gres.numel() > 0
    if not (has_gX or has_gres):
        return None, None, None, None
    m, n = A.shape[-2:]
    gA = gB = None
    if has_gX:
        def solve(M, C):
            return lstsq_op(M, C, None, "gels", ctx.backend, False, "")[0]

        gB = solve(A.mH, gX)
        gA = -(gB @ X.mH)
        if m >= n:
            gA = gA + (B - A @ X) @ solve(A, gB).mH
        else:
            gA = gA + solve(A.mH, X) @ (gX - A.mH @ gB).mH
    if has_gres:
        weighted = (A @ X - B) * (2 * gres).unsqueeze(-2)
        gA = weighted @ X.mH if gA is None else gA + weighted @ X.mH
        gB = -weighted if gB is None else gB - weighted
    return gA, gB, None, None


def _prepare_lstsq(call: Call, A: Tensor, B: Tensor, rcond: float | None,
                   driver: str | None) -> Prepared:
    fn = call.fn
    if B.dtype != call.dtype:
        raise RuntimeError(f"mpslinalg.{fn}: Expected input and other to have the same dtype, "
                           f"but got input's dtype {call.dtype} and other's dtype {B.dtype}")
    if driver is not None and driver not in _DRIVERS:
        raise RuntimeError(f"mpslinalg.{fn}: parameter `driver` should be one of "
                           f"({', '.join(_DRIVERS)}), got {driver!r}")
    vector = B.dim() == A.dim() - 1
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.dim() != A.dim():
        raise RuntimeError(f"mpslinalg.{fn}: input.dim() must be greater or equal to other.dim() "
                           f"and (input.dim() - other.dim()) <= 1, got shapes "
                           f"{checks.shape_str(A)} and {checks.shape_str(B)}")
    if Bm.shape[-2] != A.shape[-2]:
        raise RuntimeError(f"mpslinalg.{fn}: input.size(-2) should match other.size(-2), got "
                           f"shapes {checks.shape_str(A)} and {checks.shape_str(B)}")
    checks.broadcast_batch(fn, ("A", A.shape[:-2]), ("B", Bm.shape[:-2]))
    if driver is None:
        # torch's default on the torch backend: gelsy on the CPU, gels elsewhere; gels on the
        # metal backend.
        on_cpu = A.device.type in ("cpu", "meta")
        driver = "gelsy" if call.backend == "torch" and on_cpu else "gels"
    args = (A, to_dtype(Bm, A.dtype), rcond, driver)
    if vector:
        return Prepared(args, lambda X, *rest: (X.squeeze(-1), *rest))
    return Prepared(args, lambda *results: results)


def _residuals_core(A, B, rcond, driver: str):
    return (B[-1],) if driver != "gelsy" and A[0] > A[1] else NOT_COMPUTED


#: (solution, residuals, rank, singular_values) of torch.linalg.lstsq for ``driver`` (the
#: factory sums gA and gB back to their shapes).
lstsq_decl = Declaration(
    "lstsq", [Matrix("A", square=False), Operand("B", 2, same_dtype=False),
              Param("rcond", "float?"), Param("driver", "str")],
    [Result("solution", lambda A, B, rcond, driver: (A[1], B[1])),
     Result("residuals", _residuals_core, REAL),
     Result("rank", lambda A, B, rcond, driver: NOT_COMPUTED if driver == "gels" else (),
            torch.int64, batch="A", differentiable=False),
     Result("singular_values", lambda A, B, rcond, driver: (
         (min(A),) if driver in ("gelsd", "gelss") else NOT_COMPUTED), REAL, batch="A",
         differentiable=False)],
    forward={"metal": _lstsq_metal, "torch": _lstsq_torch},
    through_op=_through_the_op, prepare=_prepare_lstsq, backward=_lstsq_backward,
    saves=["A", "B", "solution"], dtypes=LINALG_REFINED)
lstsq_op = lstsq_decl.op


@lstsq_decl.public(_torch_lstsq, torch_name="linalg.lstsq")
def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None):
    r"""Least-squares solution of ``A X = B``; like `torch.linalg.lstsq`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    B : Tensor
        ``(*, m, k)``, or ``(*, m)`` when ``B.ndim == A.ndim - 1``; batch dimensions broadcast
        with ``A``'s.
    rcond : float, optional
        As torch: the relative threshold of the rank-revealing drivers (default
        ``eps * max(m, n)`` of A's dtype); 'gels' ignores it.
    driver : {None, 'gels', 'gelsy', 'gelsd', 'gelss'}, optional
        LAPACK's driver, on both backends: 'gels' QR (LQ for m < n) for full-rank ``A``;
        'gelsy' QR with column pivoting; 'gelsd' / 'gelss' the SVD (the metal backend has
        one SVD for both). None: 'gels' on the metal backend, torch's default on the torch
        backend ('gelsy' on the CPU, 'gels' elsewhere).

    Returns
    -------
    solution : Tensor
        ``(*, n, k)``: the least-squares solution of minimum norm. Differentiable with
        respect to ``A`` and ``B`` (full-rank ``A``).
    residuals : Tensor
        ``(*, k)`` squared residuals ``||A x - b||^2`` when m > n and the driver computes
        them: 'gels', and 'gelsd' / 'gelss' when every matrix has rank n; otherwise empty.
        Differentiable as the solution.
    rank : Tensor
        int64, ``A.shape[:-2]``; empty for 'gels'.
    singular_values : Tensor
        ``(*A.shape[:-2], min(m, n))`` for 'gelsd' and 'gelss'; otherwise empty.

    Raises
    ------
    mpslinalg.LinAlgError
        float64 / complex128 on the metal backend only, when the iterative refinement does not
        reach float64 accuracy (rank-deficient or too ill-conditioned ``A``; one device read).

    Notes
    -----
    On the metal backend float64 and complex128 take driver 'gels' and are computed by
    float32 kernels, refining the augmented system (the documentation's page "Float64 on a
    GPU without float64").

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[1., 0.], [0., 1.], [1., 1.]])
    >>> B = torch.tensor([[1.], [1.], [0.]])
    >>> mpslinalg.lstsq(A, B, driver="gels").solution
    tensor([[0.3333],
            [0.3333]])
    >>> D = torch.tensor([[1., 1.], [1., 1.], [0., 0.]])  # rank 1
    >>> res = mpslinalg.lstsq(D, B, driver="gelsd")
    >>> res.solution, res.rank
    (tensor([[0.5000],
            [0.5000]]), tensor(1))
    """
