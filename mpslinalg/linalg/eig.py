"""The nonsymmetric eigenproblem: ``eig`` and ``eigvals`` with torch.linalg semantics.

Op ``mpslinalg::eig``: on the metal backend the kernels of ``metal/linalg/eig.metal`` (balance,
Hessenberg reduction, Francis QR, back-substitution: `mpslinalg.linalg.eig_metal` and the eig
page of the docs), one launch for any batch, one threadgroup per matrix; on the torch backend
`torch.linalg.eig` / `torch.linalg.eigvals` themselves.

Results are complex whatever the input: complex64 for float32 / complex64 (and float16 /
bfloat16, computed in float32), complex128 for float64 / complex128 (torch backend). Eigenvectors
are the columns of V, of unit 2-norm with their largest component real (LAPACK's xGEEV).

Errors: ``eig`` and ``eigvals`` are checking forms, as torch's are: a matrix whose QR iteration
does not converge within LAPACK's bound raises `mpslinalg.LinAlgError` in torch's wording (the
metal backend reads the op's ``info`` once per call for it, and gives that matrix NaN results).
Non-finite input on the metal backend gives NaN eigenvalues and vectors in that batch element
and raises nothing. On the torch backend ``eig`` raises torch's RuntimeError for it, as torch
does; ``eigvals`` gives NaN for that matrix (torch's CPU eigvals crashes the process on it in
float32, complex64 and complex128, and returns meaningless values in float64: such calls take
the op, `mpslinalg._core.torch_bugs`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._core.declare import NOT_COMPUTED, Call, Declaration, Matrix, Param, Result, info
from .._core.op import SAFE_CAST, call_torch, values_unavailable
from .._core.torch_bugs import eigvals_nonfinite_affected
from ..small import eig as small_eig
from .eig_metal import complex_of, eig_metal

__all__ = ["eig", "eigvals"]

# ---------------------------------------------------------------- mpslinalg::eig


def _eig_metal(A: Tensor, vectors: bool) -> tuple[Tensor, Tensor, Tensor]:
    return eig_metal(A, vectors=vectors)


def _eig_torch(A: Tensor, vectors: bool) -> tuple[Tensor, Tensor, Tensor]:
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    if vectors:
        w, V = call_torch("eig", torch.linalg.eig, A)
        return w, V, info
    # torch's CPU eigvals crashes on non-finite input (`mpslinalg._core.torch_bugs`): those
    # matrices go to torch as zeros, and come back as NaN
    finite = torch.isfinite(A).all(-1).all(-1)
    w = call_torch("eigvals", torch.linalg.eigvals, torch.where(finite[..., None, None], A, 0))
    w = torch.where(finite[..., None], w, torch.full_like(w, complex(math.nan, math.nan)))
    return w, torch.empty(0, dtype=w.dtype, device=A.device), info


def _eig_small(A: Tensor, vectors: bool, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """The n <= 4 kernels (`mpslinalg.small.eig`: one pass over the batch). A non-finite matrix
    gives NaN there; on the torch backend such a batch goes to `_eig_torch` instead, whose
    eig raises as torch's does (one host read, as torch's own finiteness check makes)."""
    if backend != "metal" and not bool(torch.isfinite(A).all()):
        return _eig_torch(A, vectors)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    if vectors:
        w, V = small_eig.small_eig(A, backend=backend)
        return w, V, info
    w = small_eig.small_eigvals(A, backend=backend)
    return w, torch.empty(0, dtype=w.dtype, device=A.device), info


def _eig_small_when(backend: str, A: Tensor, vectors: bool) -> bool:
    return (small_eig.use_small_eig(A, backend) if vectors
            else small_eig.use_small_eigvals(A, backend))


def _eigvals_through_op(A: Tensor, *rest) -> bool:
    """A batch the n <= 4 path may serve, or one torch's CPU eigvals would crash on."""
    return small_eig.may_use_small_eigvals(A) or eigvals_nonfinite_affected(A)


def _eig_save(ctx, inputs, outputs) -> None:
    # An unused V (eigvals, or a loss of L alone) must reach the backward as None, torch's
    # undefined gradient, not zeros.
    ctx.set_materialize_grads(False)
    ctx.vectors = inputs[1]
    ctx.real_input = not inputs[0].is_complex()
    ctx.save_for_backward(outputs[0], outputs[1])


def eig_backward(L: Tensor, V: Tensor, gL: Tensor | None, gV: Tensor | None,
                 fn: str = "eig") -> Tensor:
    """The gradient of A = V diag(L) V^-1 (complex, unit-norm columns):
    gA = V^-H (diag(gL) + (V^H gV - V^H V diag(Re diag(V^H gV))) / conj(E)) V^H with E_ij =
    L_j - L_i (E_ii = 1), as torch's linalg_eig_backward (torch/csrc/autograd/
    FunctionsManual.cpp; Giles 2008, "An extended collection of matrix derivative results for
    forward and reverse mode AD", sec. 3.1, for the eigenvalues and vectors; the projection
    removes the part of gV along V that the unit-norm gauge makes meaningless, and the
    conjugates follow the conjugate-Wirtinger convention of Boeddeker et al. 2017, "On the
    computation of complex-valued gradients with application to statistically optimum
    beamforming"). A loss that depends on the phase of the eigenvectors (Im diag(V^H gV) not
    about 0) raises, as torch's: one device read in the backward pass."""
    Vh = V.mH
    if gV is None:
        inner = torch.diag_embed(gL.to(V.dtype))
    else:
        VhgV = Vh @ gV
        diag = VhgV.diagonal(dim1=-2, dim2=-1)
        if not values_unavailable(V):
            phase = diag.imag
            if not torch.allclose(phase, torch.zeros_like(phase), rtol=1e-2, atol=1e-2):
                raise RuntimeError(
                    f"mpslinalg.{fn}: The eigenvectors in the complex case are specified up to "
                    "multiplication by e^{i phi}. The specified loss function depends on this "
                    "quantity, so it is ill-defined.")
        VhgV = VhgV - Vh @ (V * diag.real.unsqueeze(-2))
        Econj = L.conj().unsqueeze(-2) - L.conj().unsqueeze(-1)
        Econj.diagonal(dim1=-2, dim2=-1).fill_(1)
        inner = VhgV / Econj
        if gL is not None:
            inner = inner + torch.diag_embed(gL.to(V.dtype))
    return torch.linalg.solve(Vh, inner @ Vh)


def _eig_backward(ctx, gL: Tensor | None, gV: Tensor | None, ginfo):
    L, V = ctx.saved_tensors
    if gL is None and gV is None:
        return None, None
    if not ctx.vectors:
        raise RuntimeError("mpslinalg.eigvals: internal error: the eigenvectors needed by the "
                           "derivative were not computed")
    gA = eig_backward(L, V, gL, gV)
    return (gA.real if ctx.real_input else gA), None


def _complex_result(A: Tensor, vectors: bool) -> torch.dtype:
    return complex_of(A.dtype)


#: (eigenvalues, eigenvectors or an empty tensor, info) of the square ``A``.
eig_decl = Declaration(
    "eig", [Matrix("A"), Param("vectors", "bool")],
    [Result("eigenvalues", lambda A, vectors: A[-1:], _complex_result),
     Result("eigenvectors", lambda A, vectors: A if vectors else NOT_COMPUTED, _complex_result),
     info()],
    forward={"metal": _eig_metal, "torch": _eig_torch, "small": _eig_small},
    small_when=_eig_small_when, through_op=small_eig.may_use_small_eig,
    backward=_eig_backward, saves=_eig_save)
eig_op = eig_decl.op


# ---------------------------------------------------------------- public API


def _eig_args(call: Call, A: Tensor) -> tuple:
    return A, True


@eig_decl.public(torch.linalg.eig, prepare=_eig_args,
                 casting=SAFE_CAST.named("eigenvalues", "eigenvectors"))
def eig(A: Tensor, *, out: tuple[Tensor, Tensor] | None = None):
    r"""Eigenvalues and eigenvectors of a square matrix; like `torch.linalg.eig`:
    ``A = V diag(L) V^-1``.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``, real or complex.
    out : tuple of Tensor, optional
        ``(eigenvalues, eigenvectors)`` to write the results into (complex, torch's rule).

    Returns
    -------
    eigenvalues : Tensor
        ``(*, n)``, complex (complex64 for float32 / complex64 input, complex128 for float64 /
        complex128), in the order the Schur form gives them (unsorted, as LAPACK's); for real
        input the complex ones come in conjugate pairs, positive imaginary part first.
    eigenvectors : Tensor
        ``(*, n, n)``, complex: the columns, of unit 2-norm, each defined up to a complex
        phase (here: its largest component real, as LAPACK's xGEEV). For real input the
        vectors of a conjugate pair are exact conjugates on the metal backend. Differentiable
        (torch's rule; a loss that depends on the phase raises).

    Raises
    ------
    mpslinalg.LinAlgError
        If the QR iteration of a matrix does not converge (LAPACK's bound, 30 iterations per
        eigenvalue and at least 300), in torch's wording; on the metal backend this reads the
        device once per call.

    Notes
    -----
    On the metal backend: balancing, Householder Hessenberg reduction, the Francis double-shift
    QR iteration (real input) or the single-shift complex QR iteration (complex input), and
    back-substitution, one threadgroup per matrix (docs: eig page). Non-finite input gives NaN
    results there (torch raises on the CPU).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[0., -1.], [1., 0.]])
    >>> L, V = mpslinalg.eig(A)
    >>> L
    tensor([0.+1.j, 0.-1.j])
    >>> torch.allclose(A.to(V.dtype) @ V, V @ torch.diag(L))
    True
    """


def _eigvals_args(call: Call, A: Tensor) -> tuple:
    # the eigenvectors only where the derivative needs them
    return A, A.requires_grad and torch.is_grad_enabled()


@eig_decl.public(torch.linalg.eigvals, prepare=_eigvals_args, checking=True,
                 through_op=_eigvals_through_op,
                 finish=lambda call, L, V, info: L, casting=SAFE_CAST.named("eigenvalues"))
def eigvals(A: Tensor, *, out: Tensor | None = None) -> Tensor:
    r"""Eigenvalues of a square matrix; like `torch.linalg.eigvals`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``, real or complex.
    out : Tensor, optional
        Tensor to write the result into (complex, torch's rule).

    Returns
    -------
    Tensor
        ``(*, n)``, complex, in the order `eig` gives them. Differentiable (``V^-H diag(gL)
        V^H``; the eigenvectors are then computed too).

    Raises
    ------
    mpslinalg.LinAlgError
        As `eig`.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.eigvals(torch.tensor([[2., 1.], [0., 3.]]))
    tensor([2.+0.j, 3.+0.j])
    """
