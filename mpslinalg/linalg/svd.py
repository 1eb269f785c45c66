"""The SVD family: ``svd``, ``svdvals``, ``pinv`` and ``matrix_rank`` with torch semantics.

Ops ``mpslinalg::svd``, ``mpslinalg::svdvals`` and ``mpslinalg::pinv``: on the metal backend the
one-sided Jacobi kernels of `mpslinalg.linalg.svd_metal` (the input scaled by a power of
two, tall and wide matrices reduced to their QR factor R first, U completed to an orthonormal
set for rank-deficient input, matrices up to 4 x 4 in one launch for any batch); ``matrix_rank``
composes ``svdvals`` with torch's tolerance rule. ``hermitian=True`` is computed through the SVD
of the Hermitian matrix built from the lower triangle (its singular values are the moduli of its
eigenvalues, which is what torch's eigh-based path thresholds).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core import checks
from .._core.declare import (
    REAL,
    Call,
    Declaration,
    Matrix,
    Operand,
    Param,
    Result,
    info,
    real_dtype,
)
from .._core.errors import NONFINITE_INFO
from .._core.op import SAFE_CAST, values_unavailable
from . import svd_metal

__all__ = ["matrix_rank", "pinv", "svd", "svdvals"]

_DRIVER_ERROR = ("keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER "
                 "backend.")
_GAUGE_ERROR = ("svd_backward: The singular vectors in the complex case are specified up to "
                "multiplication by e^{i phi}. The specified loss function depends on this phase "
                "term, making it ill-defined.")


def _check_driver(call: Call, A: Tensor, driver: str | None, **rest) -> None:
    """torch's rule: ``driver`` for CUDA tensors on cuSOLVER only."""
    if driver is not None and (call.backend == "metal" or A.device.type != "cuda"):
        raise RuntimeError(f"mpslinalg.{call.fn}: {_DRIVER_ERROR}")


def _through_the_op(A) -> bool:
    """Calls that take the op on the torch backend too: meta tensors (torch.linalg.pinv /
    matrix_rank fail on them in torch 2.13, a CPU tensor meets the meta input; the op's fake
    gives the shapes) and traced calls (torch's compiled complex pinv is wrong on the first
    call of the graph, and its complex svd backward calls allclose, which does not trace)."""
    return isinstance(A, Tensor) and (A.is_meta or torch.compiler.is_compiling())


def _svd_general(A) -> bool:
    """svd's calls of the op on the torch backend: `_through_the_op`, and batches of matrices
    up to 4 x 4 that the small path may serve."""
    return _through_the_op(A) or (isinstance(A, Tensor) and small.may_use_small_svd(A))


def _svdvals_general(A) -> bool:
    """svdvals' (as `_svd_general`, at its own crossovers)."""
    return _through_the_op(A) or (isinstance(A, Tensor)
                                  and small.may_use_small_svd(A, compute_uv=False))


def _small_svd_when(backend: str, A: Tensor, full: bool, driver: str | None) -> bool:
    """The small path serves torch-backend calls without a cuSOLVER driver choice."""
    return driver is None and small.use_small_svd(A, backend, True)


def _small_svdvals_when(backend: str, A: Tensor, driver: str | None) -> bool:
    return driver is None and small.use_small_svd(A, backend, False)


# ---------------------------------------------------------------- svd


def _sv_backward(U: Tensor, gS: Tensor, Vh: Tensor) -> Tensor:
    """gA = U diag(gS) V^H: the derivative through the singular values alone."""
    return U @ (gS.unsqueeze(-1).to(U.dtype) * Vh)


def svd_backward(gU: Tensor | None, gS: Tensor | None, gVh: Tensor | None, U: Tensor,
                 S: Tensor, Vh: Tensor) -> Tensor:
    """Reverse-mode derivative of the reduced SVD A = U diag(S) V^H (distinct non-zero singular
    values), as torch's ``svd_backward`` (torch/csrc/autograd/FunctionsManual.cpp):
    gA = U [(skew(U^H gU) S + S skew(V^H gV)) / E + diag(gS) + i Im diag(U^H gU) / (2S)] V^H
    with E_ij = S_j^2 - S_i^2, plus (I - U U^H) gU S^-1 V^H for m > n and
    U S^-1 gV^H (I - V V^H) for m < n (Townsend 2016, "Differentiating the singular value
    decomposition"; conjugate Wirtinger for complex). The complex case requires a loss
    invariant to the phase of each singular pair, which torch checks and so do we (one device
    read, in eager mode only: traced graphs cannot read values)."""
    m, n = U.shape[-2], Vh.shape[-1]
    if gU is None and gVh is None:
        return _sv_backward(U, gS, Vh)
    complex_ = U.is_complex()
    V = Vh.mH
    gV = gVh.mH if gVh is not None else None
    UhgU = U.mH @ gU if gU is not None else None
    VhgV = Vh @ gV if gV is not None else None
    UhgU = UhgU - UhgU.mH if UhgU is not None else None
    VhgV = VhgV - VhgV.mH if VhgV is not None else None
    if complex_ and not values_unavailable(U):
        im_u = UhgU.diagonal(dim1=-2, dim2=-1).imag if UhgU is not None else torch.zeros_like(S)
        im_v = VhgV.diagonal(dim1=-2, dim2=-1).imag if VhgV is not None else torch.zeros_like(S)
        if not torch.allclose(im_u, -im_v, rtol=1e-2, atol=1e-2):
            raise RuntimeError(f"mpslinalg.svd: {_GAUGE_ERROR}")
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1)
    E.diagonal(dim1=-2, dim2=-1).fill_(1)
    Sc = S.to(U.dtype)
    if UhgU is not None and VhgV is not None:
        gA = (UhgU * Sc.unsqueeze(-2) + Sc.unsqueeze(-1) * VhgV) / E
    elif UhgU is not None:
        gA = (UhgU / E) * Sc.unsqueeze(-2)
    else:
        gA = Sc.unsqueeze(-1) * (VhgV / E)
    if gS is not None:
        gA = gA + torch.diag_embed(gS.to(U.dtype))
    if complex_ and UhgU is not None and VhgV is not None:
        gA = gA + torch.diag_embed(UhgU.diagonal(dim1=-2, dim2=-1) / (2.0 * Sc))
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / Sc.unsqueeze(-2)
        gA = (gA + gUSinv - U @ (U.mH @ gUSinv)) @ Vh
    elif m < n and gV is not None:
        gA = gA @ Vh
        SinvgVh = gV.mH / Sc.unsqueeze(-1)
        gA = U @ (gA + SinvgVh - (SinvgVh @ V) @ Vh)
    else:
        gA = U @ (gA @ Vh)
    return gA


def _svd_backward(ctx, gU, gS, gVh):
    """torch's rule (`svd_backward`); with full_matrices the columns of U and rows of Vh
    beyond min(m, n) do not take part, as in torch."""
    U, S, Vh = ctx.saved_tensors
    k = S.shape[-1]
    if ctx.full_matrices:
        U, Vh = U[..., :k], Vh[..., :k, :]
        gU = gU[..., :k] if gU is not None else None
        gVh = gVh[..., :k, :] if gVh is not None else None
    return svd_backward(gU, gS, gVh, U, S, Vh), None, None


def _svd_torch(A: Tensor, full: bool, driver: str | None):
    return tuple(torch.linalg.svd(A, full_matrices=full, driver=driver))


#: (U, S, Vh) of torch.linalg.svd.
svd_decl = Declaration(
    "svd", [Matrix("A", square=False), Param("full_matrices", "bool"), Param("driver", "str?")],
    [Result("U", lambda A, full, driver: (A[0], A[0] if full else min(A))),
     Result("S", lambda A, full, driver: (min(A),), REAL),
     Result("Vh", lambda A, full, driver: (A[1] if full else min(A), A[1]))],
    forward={"metal": lambda A, full, driver: svd_metal.svd_metal(A, full, fn="svd")[:3],
             "torch": _svd_torch,
             "small": lambda A, full, driver, backend: small.small_svd(A, full, True)},
    small_when=_small_svd_when, through_op=_svd_general, prepare=_check_driver,
    backward=_svd_backward, saves=["U", "S", "Vh"])
svd_op = svd_decl.op


@svd_decl.public(torch.linalg.svd)
def svd(A: Tensor, full_matrices: bool = True, *, driver: str | None = None,
        out: tuple[Tensor, Tensor, Tensor] | None = None):
    r"""Singular value decomposition ``A = U diag(S) Vh``; like `torch.linalg.svd`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``, any m and n.
    full_matrices : bool, optional
        True (default): U ``(*, m, m)`` and Vh ``(*, n, n)``; False: U ``(*, m, k)`` and Vh
        ``(*, k, n)``, k = min(m, n).
    driver : str, optional
        cuSOLVER's driver, for CUDA tensors on the torch backend only (as in torch).
    out : tuple of Tensor, optional
        ``(U, S, Vh)`` to write the results into.

    Returns
    -------
    U : Tensor
        Orthonormal (unitary) columns, also for rank-deficient input.
    S : Tensor
        ``(*, k)``, real, in descending order.
    Vh : Tensor
        Orthonormal rows. Differentiable as in torch (distinct singular values; in the complex
        case a loss that does not depend on the phase of the singular vectors).

    Notes
    -----
    On the metal backend: one-sided Jacobi (docs: SVD page), accurate to a few ulps relative to
    ``|A|`` at any scale float32 can hold; matrices up to 4 x 4 in one launch for any batch.
    Singular vectors are unique only up to a phase per singular pair (and a rotation within
    repeated singular values), so they may differ from LAPACK's by such factors.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[3., 0.], [4., 5.]])
    >>> U, S, Vh = mpslinalg.svd(A)
    >>> S
    tensor([6.7082, 2.2361])
    >>> torch.allclose(U @ torch.diag(S) @ Vh, A, atol=1e-5)
    True
    """


# ---------------------------------------------------------------- svdvals


def _svdvals_backward(ctx, gS: Tensor):
    """gA = U diag(gS) V^H (the singular-value part of `svd_backward`), with U and V
    recomputed as torch's svdvals computes them when a gradient is required."""
    (A,) = ctx.saved_tensors
    U, _, Vh = svd_op(A, False, ctx.driver, ctx.backend, False, "")
    return _sv_backward(U, gS, Vh), None


#: S of torch.linalg.svdvals (no singular vectors formed on the metal backend).
svdvals_decl = Declaration(
    "svdvals", [Matrix("A", square=False), Param("driver", "str?")],
    [Result("S", lambda A, driver: (min(A),), REAL)],
    forward={"metal": lambda A, driver: svd_metal.svd_metal(A, vectors=False,
                                                            fn="svdvals")[1],
             "torch": lambda A, driver: torch.linalg.svdvals(A, driver=driver),
             "small": lambda A, driver, backend: small.small_svd(A, False, False)[1]},
    small_when=_small_svdvals_when, through_op=_svdvals_general, prepare=_check_driver,
    backward=_svdvals_backward, saves=["A"])
svdvals_op = svdvals_decl.op


@svdvals_decl.public(torch.linalg.svdvals)
def svdvals(A: Tensor, *, driver: str | None = None, out: Tensor | None = None) -> Tensor:
    r"""Singular values in descending order; like `torch.linalg.svdvals`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    driver : str, optional
        cuSOLVER's driver, for CUDA tensors on the torch backend only (as in torch).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*, min(m, n))``, real. Differentiable (``U diag(gS) Vh``; always well defined).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.svdvals(torch.tensor([[0., 2.], [-3., 0.]]))
    tensor([3., 2.])
    """


# ---------------------------------------------------------------- tolerances (pinv, matrix_rank)


def _tolerance(fn: str, name: str, tol: object, real: torch.dtype,
               device: torch.device) -> Tensor:
    if isinstance(tol, Tensor):
        if tol.is_complex():
            dtype = {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(
                tol.dtype, str(tol.dtype))
            raise RuntimeError(f"mpslinalg.{fn}: {name} tensor of complex type is not "
                               f"supported. Got {dtype}")
        return tol.to(device=device, dtype=real)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)):
        raise TypeError(f"mpslinalg.{fn}: {name} must be a float or a real tensor, got "
                        f"{type(tol).__name__}")
    return torch.tensor(float(tol), dtype=real, device=device)


def tolerances(fn: str, A: Tensor, atol: object, rtol: object) -> tuple[Tensor, Tensor]:
    """torch's (atol, rtol) for pinv and matrix_rank (ATen's get_atol_rtol): atol defaults to
    0; rtol to eps * max(m, n) when neither is given, and where atol is given, to 0 where
    atol > 0 and to that default elsewhere. eps is that of A's compute dtype."""
    real = real_dtype(A.dtype)
    atol_t = (torch.zeros((), dtype=real, device=A.device) if atol is None
              else _tolerance(fn, "atol", atol, real, A.device))
    if rtol is not None:
        return atol_t, _tolerance(fn, "rtol", rtol, real, A.device)
    default = torch.full((), torch.finfo(real).eps * max(A.shape[-2:]), dtype=real,
                         device=A.device)
    if atol is None:
        return atol_t, default
    return atol_t, torch.where(atol_t > 0, torch.zeros((), dtype=real, device=A.device),
                               default)


def _hermitian_from_lower(A: Tensor) -> Tensor:
    """The Hermitian matrix whose lower triangle is A's (the real part of its diagonal): what
    torch's eigh-based ``hermitian=True`` paths read."""
    low = A.tril(-1)
    diag = A.diagonal(dim1=-2, dim2=-1)
    return low + low.mH + torch.diag_embed(diag.real.to(A.dtype) if A.is_complex() else diag)


def _check_hermitian(fn: str, A: Tensor, hermitian: bool) -> None:
    if hermitian and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"mpslinalg.{fn}: A must be batches of square matrices when "
                           f"hermitian=True, got shape {checks.shape_str(A)}")


def _tol_batch(fn: str, A: Tensor, atol: Tensor, rtol: Tensor) -> torch.Size:
    return checks.broadcast_batch(fn, ("A", A.shape[:-2]), ("atol", atol.shape),
                                  ("rtol", rtol.shape))


# ---------------------------------------------------------------- pinv


def _pinv_from_svd(A: Tensor, atol: Tensor, rtol: Tensor, hermitian: bool, backend: str
                   ) -> Tensor:
    """V diag(S^+) U^H, S^+ the reciprocals of the singular values above
    max(atol, rtol * S_max) and 0 elsewhere (torch's rule)."""
    batch = checks.broadcast_shapes(A.shape[:-2], atol.shape, rtol.shape)
    m, n = A.shape[-2:]
    if A.numel() == 0:
        return A.new_zeros((*batch, n, m))
    H = _hermitian_from_lower(A) if hermitian else A
    if backend == "metal":
        U, S, Vh, _ = svd_metal.svd_metal(H, False, fn="pinv")
    else:
        U, S, Vh = torch.linalg.svd(H, full_matrices=False)
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * S[..., :1])
    Sinv = torch.where(S > tol, S.reciprocal(), torch.zeros((), dtype=S.dtype,
                                                            device=S.device))
    # conj_physical, not the lazy conjugate of .mH: the first call of a compiled graph runs this
    # under a mode in which matmul of conjugate views gives wrong values (torch 2.13; torch's
    # own compiled complex pinv shows the same on its first call)
    V = Vh.conj_physical().transpose(-2, -1)
    Uh = U.conj_physical().transpose(-2, -1)
    X = V @ (Sinv.to(A.dtype).unsqueeze(-1) * Uh)
    return X.expand(*batch, n, m)


def _pinv_backward(ctx, gX: Tensor):
    """The derivative of the pseudo-inverse at constant rank (Golub and Pereyra 1973, "The
    differentiation of pseudo-inverses and nonlinear least squares problems whose variables
    separate", SIAM J. Numer. Anal. 10(2), eq. 4.12), as torch's ``pinv_backward``, arranged
    to form the smaller of the two Gram matrices."""
    A, X = ctx.saved_tensors
    m, n = A.shape[-2:]
    Xh, gXh = X.mH, gX.mH
    if m <= n:
        K = gXh @ X
        KXh = K @ Xh
        gA = -(X @ K).mH + KXh - (A @ X) @ KXh + (Xh @ X) @ (gXh - K @ A)
    else:
        K = X @ gXh
        XhK = Xh @ K
        gA = -(K @ X).mH + (gXh - A @ K) @ X @ Xh + XhK - XhK @ X @ A
    return gA, None, None, None


def _tolerance_args(call: Call, A: Tensor, atol: object, rtol: object, hermitian: bool
                    ) -> tuple:
    """(A, atol, rtol, hermitian) of the op: the tolerances as tensors (`tolerances`)."""
    fn = call.fn
    _check_hermitian(fn, A, hermitian)
    atol_t, rtol_t = tolerances(fn, A, atol, rtol)
    _tol_batch(fn, A, atol_t, rtol_t)
    return A, atol_t, rtol_t, bool(hermitian)


_TOLERANCES = [Matrix("A", square=False), Operand("atol", 0, built=True),
               Operand("rtol", 0, built=True), Param("hermitian", "bool")]

#: The pseudo-inverse of torch.linalg.pinv with tolerance tensors (atol, rtol).
pinv_decl = Declaration(
    "pinv", _TOLERANCES, [Result("pinv", lambda A, atol, rtol, hermitian: A[::-1])],
    forward={"metal": lambda A, atol, rtol, hermitian: _pinv_from_svd(A, atol, rtol, hermitian,
                                                                     "metal"),
             "torch": lambda A, atol, rtol, hermitian: _pinv_from_svd(A, atol, rtol, hermitian,
                                                                     "torch")},
    through_op=_through_the_op, prepare=_tolerance_args, backward=_pinv_backward,
    saves=["A", "pinv"])
pinv_op = pinv_decl.op


@pinv_decl.public(torch.linalg.pinv, casting=SAFE_CAST, name="pinv")
def _pinv(A: Tensor, *, atol: float | Tensor | None = None, rtol: float | Tensor | None = None,
          hermitian: bool = False, out: Tensor | None = None) -> Tensor:
    """pinv's keyword form (torch.linalg.pinv's first overload), with torch's fast path."""


def _legacy(fn: str, name: str, value: object, atol: object, rtol: object) -> None:
    if value is not None and (atol is not None or rtol is not None):
        raise TypeError(f"mpslinalg.{fn}: {name} cannot be combined with atol or rtol (torch's "
                        f"legacy form is {fn}(A, {name}, hermitian=False))")


def pinv(A: Tensor, rcond: float | Tensor | None = None, hermitian: bool = False, *,
         atol: float | Tensor | None = None, rtol: float | Tensor | None = None,
         out: Tensor | None = None) -> Tensor:
    r"""Moore-Penrose pseudo-inverse; like `torch.linalg.pinv`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    rcond : float or Tensor, optional
        torch's legacy form ``pinv(A, rcond, hermitian)``: the same as ``atol=0, rtol=rcond``.
    hermitian : bool, optional
        A is Hermitian (only its lower triangle is read, as in torch).
    atol, rtol : float or Tensor, optional
        Singular values at most ``max(atol, rtol * S_max)`` are treated as zero. Tensors
        broadcast against A's batch shape. Defaults as in torch: ``atol = 0``;
        ``rtol = eps * max(m, n)`` when neither is given, and where ``atol`` is given, 0 where
        ``atol > 0``. eps is that of the compute dtype (float32 for float16 / bfloat16).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*, n, m)``. Differentiable at constant rank (Golub and Pereyra's formula, as torch).

    Notes
    -----
    On the metal backend through `svd` (``hermitian=True`` too: the singular values of a
    Hermitian matrix are the moduli of its eigenvalues), so it inherits the SVD's accuracy at
    extreme scales: ``pinv(c * A) = pinv(A) / c`` to rounding for any float32 c.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.pinv(torch.tensor([[1., 0.], [0., 0.]]))
    tensor([[1., 0.],
            [0., 0.]])
    >>> mpslinalg.pinv(torch.tensor([[2., 0.], [0., 1e-9]]), rtol=1e-6)
    tensor([[0.5000, 0.0000],
            [0.0000, 0.0000]])
    """
    _legacy("pinv", "rcond", rcond, atol, rtol)
    if rcond is not None:
        atol, rtol = 0.0, rcond
    return _pinv(A, atol=atol, rtol=rtol, hermitian=hermitian, out=out)


# ---------------------------------------------------------------- matrix_rank


def _rank(S: Tensor, atol: Tensor, rtol: Tensor) -> Tensor:
    """The number of singular values above max(atol, rtol * S_max) (torch's rule)."""
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * S[..., :1])
    return (S > tol).sum(-1)


def _rank_metal(A: Tensor, atol: Tensor, rtol: Tensor) -> tuple[Tensor, Tensor]:
    """(rank, info), ``info`` `NONFINITE_INFO` where A holds a NaN, 0 elsewhere. An integer
    cannot carry NaN, so such input raises, as torch's does (LAPACK's gesdd reports NaN input,
    and torch raises for it); Inf gives NaN singular values, which no tolerance exceeds:
    rank 0, torch's rule applied to them as torch applies it to LAPACK's."""
    S = svd_metal.svd_metal(A, vectors=False, fn="matrix_rank")[1]
    info = A.isnan().flatten(-2).any(-1).to(torch.int32) * NONFINITE_INFO
    return _rank(S, atol, rtol), info


def _rank_torch(A: Tensor, atol: Tensor, rtol: Tensor) -> tuple[Tensor, Tensor]:
    """(rank, zeros): torch.linalg.svdvals raises for NaN input itself."""
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return _rank(torch.linalg.svdvals(A), atol, rtol), info


def _eigh_nan_info(n: int) -> int:
    """LAPACK's ``info`` for the eigenvalues of an n x n Hermitian matrix holding NaN, which
    torch's eigvalsh (syevd) reports as no convergence: n - 2 from order 3 on (measured with
    torch 2.13's CPU LAPACK: n = 3 ... 8 with the NaN at every place of the lower triangle and
    n up to 300, float32, float64, complex64, complex128); orders 1 and 2 take no iteration
    (the 2 x 2 formula) and return values, 0."""
    return n - 2 if n >= 3 else 0


def _rank_hermitian_metal(A: Tensor, atol: Tensor, rtol: Tensor) -> tuple[Tensor, Tensor]:
    """(rank, info) of the Hermitian A through its singular values (the moduli of its
    eigenvalues); ``info`` eigh's for input holding NaN (`_eigh_nan_info`), as torch computes
    this rank with eigvalsh. Of orders 1 and 2 NaN input gives NaN singular values, rank 0
    (torch's too, but for a 2 x 2 NaN diagonal, of which LAPACK's formula makes finite
    eigenvalues)."""
    S = svd_metal.svd_metal(A, vectors=False, fn="matrix_rank")[1]
    info = A.isnan().flatten(-2).any(-1).to(torch.int32) * _eigh_nan_info(A.shape[-1])
    return _rank(S, atol, rtol), info


def _rank_hermitian_torch(A: Tensor, atol: Tensor, rtol: Tensor) -> tuple[Tensor, Tensor]:
    """(rank, zeros) from the moduli of torch.linalg.eigvalsh's eigenvalues, as torch's
    matrix_rank(hermitian=True) (which raises eigh's error for NaN input)."""
    S = torch.linalg.eigvalsh(A).abs().sort(dim=-1, descending=True).values
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return _rank(S, atol, rtol), info


def _rank_args(call: Call, A: Tensor, atol: object, rtol: object, hermitian: bool) -> tuple:
    """`_tolerance_args`, with hermitian=True's A the Hermitian matrix of its lower triangle."""
    A, atol_t, rtol_t, hermitian = _tolerance_args(call, A, atol, rtol, hermitian)
    return _hermitian_from_lower(A) if hermitian else A, atol_t, rtol_t, hermitian


#: (rank, info) of torch.linalg.matrix_rank with tolerance tensors (atol, rtol); the metal
#: backend raises through ``info`` (`_rank_metal`). torch computes hermitian=True's with
#: eigvalsh, so its failures are eigh's (`_rank_hermitian_metal`).
matrix_rank_decl = Declaration(
    "matrix_rank", _TOLERANCES,
    [Result("rank", dtype=torch.int64), info(batch="A")],
    forward={"metal": lambda A, atol, rtol, hermitian: (
                 _rank_hermitian_metal if hermitian else _rank_metal)(A, atol, rtol),
             "torch": lambda A, atol, rtol, hermitian: (
                 _rank_hermitian_torch if hermitian else _rank_torch)(A, atol, rtol)},
    through_op=_through_the_op, prepare=_rank_args,
    info_routine=lambda A, atol, rtol, hermitian: "eigh" if hermitian else None)
matrix_rank_op = matrix_rank_decl.op


@matrix_rank_decl.public(torch.linalg.matrix_rank, casting=SAFE_CAST, name="matrix_rank")
def _matrix_rank(A: Tensor, *, atol: float | Tensor | None = None,
                 rtol: float | Tensor | None = None, hermitian: bool = False,
                 out: Tensor | None = None) -> Tensor:
    """matrix_rank's keyword form, with torch's fast path."""


def matrix_rank(A: Tensor, tol: float | Tensor | None = None, hermitian: bool = False, *,
                atol: float | Tensor | None = None, rtol: float | Tensor | None = None,
                out: Tensor | None = None) -> Tensor:
    r"""Numerical rank: the number of singular values above ``max(atol, rtol * S_max)``; like
    `torch.linalg.matrix_rank`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    tol : float or Tensor, optional
        torch's legacy form ``matrix_rank(A, tol, hermitian)``: the same as
        ``atol=tol, rtol=0``.
    hermitian : bool, optional
        A is Hermitian (only its lower triangle is read, as in torch).
    atol, rtol : float or Tensor, optional
        As in `pinv` (the same defaults).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        int64, A's batch shape (broadcast with the tolerances'). Not differentiable.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> x = torch.tensor([[1.], [2.], [3.]])
    >>> mpslinalg.matrix_rank(x @ x.T)
    tensor(1)
    """
    _legacy("matrix_rank", "tol", tol, atol, rtol)
    if tol is not None:
        atol, rtol = tol, 0.0
    return _matrix_rank(A, atol=atol, rtol=rtol, hermitian=hermitian, out=out)


# The positional legacy forms call the declared keyword forms.
pinv.declaration = pinv_decl
matrix_rank.declaration = matrix_rank_decl
