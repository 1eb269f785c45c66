"""Randomized low-rank decompositions: ``svd_lowrank`` and ``pca_lowrank`` with the semantics
of torch's top-level functions.

Composites (`mpslinalg._core.declare`): on the metal backend the randomized range finder of
Halko, Martinsson and Tropp (2011, "Finding structure with randomness", SIAM Review 53(2),
algorithm 4.4: subspace iteration with a QR factorisation after each product) builds the basis
with `mpslinalg.qr` and the small projected problem is solved by `mpslinalg.svd` (algorithm 5.1),
so both run the Metal kernels; the products are torch's. The random test matrix is drawn as
torch draws it (one ``torch.randn(n, q)`` from the global generator), so a seeded call gives
torch's factors up to rounding and the signs of singular vectors. On the torch backend they are
torch's own functions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.declare import AS_GIVEN, Declaration, Operand, Param, Result
from .qr import qr
from .svd import svd

__all__ = ["pca_lowrank", "svd_lowrank"]


def _basis(A: Tensor, q: int, niter: int, M: Tensor | None) -> Tensor:
    """Q with q orthonormal columns such that Q Q^H (A - M) approximates A - M (algorithm 4.4),
    without forming A - M."""
    dtype = A.dtype if A.is_complex() or A.is_floating_point() else torch.float32
    R = torch.randn(A.shape[-1], q, dtype=dtype, device=A.device)

    def times(X: Tensor, adjoint: bool = False) -> Tensor:
        Y = (A.mH if adjoint else A) @ X
        return Y if M is None else Y - (M.mH if adjoint else M) @ X

    Q = qr(times(R)).Q
    for _ in range(niter):
        Q = qr(times(Q, adjoint=True)).Q
        Q = qr(times(Q)).Q
    return Q


def _svd_lowrank(A: Tensor, q: int | None, niter: int | None,
                 M: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, V with A - M ~ U diag(S) V^H (algorithm 5.1 on the basis of `_basis`)."""
    q = 6 if q is None else q
    niter = 2 if niter is None else niter
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(A.shape)
    wide = m < n
    if wide:  # the range finder works on the taller side
        A = A.mH
        M = None if M is None else M.mH
    Q = _basis(A, q, niter, M)
    B = Q.mH @ A
    if M is not None:
        B = B - Q.mH @ M
    U, S, Vh = svd(B, full_matrices=False)
    U, V = Q @ U, Vh.mH
    return (V, S, U) if wide else (U, S, V)


_LOWRANK_RESULTS = [Result("U", lambda A, q, *rest: (A[-2], 6 if q is None else q)),
                    Result("S", lambda A, q, *rest: (6 if q is None else q,), "real"),
                    Result("V", lambda A, q, *rest: (A[-1], 6 if q is None else q))]

svd_lowrank_decl = Declaration(
    "svd_lowrank",
    [Operand("A", 2, same_dtype=False), Param("q", "int?"), Param("niter", "int?"),
     Operand("M", 2, same_dtype=False, optional=True)],
    _LOWRANK_RESULTS,
    forward={"torch": lambda A, q, niter, M: tuple(torch.svd_lowrank(A, q, niter, M)),
             "metal": _svd_lowrank},
    dtypes=AS_GIVEN, composite=True)


@svd_lowrank_decl.public(torch.svd_lowrank, torch_name="svd_lowrank", result_type=tuple)
def svd_lowrank(A: Tensor, q: int | None = 6, niter: int | None = 2,
                M: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""Approximate truncated SVD ``A - M ~ U diag(S) V^H`` of rank ``q`` by randomized
    subspace iteration; like `torch.svd_lowrank`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``.
    q : int, optional
        The rank of the approximation (slightly more than the rank sought).
    niter : int, optional
        Subspace iterations (2 is enough for most spectra).
    M : Tensor, optional
        Subtracted from ``A`` without forming the difference (broadcast to A's shape).

    Returns
    -------
    U : Tensor
        ``(*, m, q)``, orthonormal columns.
    S : Tensor
        ``(*, q)``, real, descending.
    V : Tensor
        ``(*, n, q)``, orthonormal columns (V itself, not its adjoint).

    Notes
    -----
    The test matrix is torch's ``torch.randn(n, q)`` draw: seed torch's generator for
    repeatable results.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> _ = torch.manual_seed(0)
    >>> A = torch.randn(100, 3) @ torch.randn(3, 40)
    >>> U, S, V = mpslinalg.svd_lowrank(A, q=5)
    >>> bool(torch.dist(U[:, :3] @ torch.diag(S[:3]) @ V[:, :3].mT, A) < 1e-3 * A.norm())
    True
    """


def _pca_args(A: Tensor, q: int | None, center: bool, niter: int) -> tuple[int, int]:
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not (0 <= q <= min(m, n)):
        raise ValueError(f"mpslinalg.pca_lowrank: q(={q}) must be non-negative integer and not "
                         f"greater than min(m, n)={min(m, n)}")
    if not niter >= 0:
        raise ValueError(f"mpslinalg.pca_lowrank: niter(={niter}) must be non-negative integer")
    return q, niter


def _pca_lowrank(A: Tensor, q: int | None, center: bool,
                 niter: int) -> tuple[Tensor, Tensor, Tensor]:
    q, niter = _pca_args(A, q, center, niter)
    if center:
        A = A - A.mean(dim=-2, keepdim=True)
    return _svd_lowrank(A, q, niter, None)


pca_lowrank_decl = Declaration(
    "pca_lowrank",
    [Operand("A", 2, same_dtype=False), Param("q", "int?"), Param("center", "bool"),
     Param("niter", "int")],
    [Result("U", lambda A, q, center, niter: (A[-2], min(6, *A) if q is None else q)),
     Result("S", lambda A, q, center, niter: (min(6, *A) if q is None else q,), "real"),
     Result("V", lambda A, q, center, niter: (A[-1], min(6, *A) if q is None else q))],
    forward={"torch": lambda A, q, center, niter: tuple(torch.pca_lowrank(A, q, center, niter)),
             "metal": _pca_lowrank},
    dtypes=AS_GIVEN, composite=True)


@pca_lowrank_decl.public(torch.pca_lowrank, torch_name="pca_lowrank", result_type=tuple)
def pca_lowrank(A: Tensor, q: int | None = None, center: bool = True,
                niter: int = 2) -> tuple[Tensor, Tensor, Tensor]:
    r"""Principal component analysis of the rows of ``A`` (an approximate SVD of the centred
    matrix); like `torch.pca_lowrank`.

    Parameters
    ----------
    A : Tensor
        ``(*, m, n)``: m samples of n features.
    q : int, optional
        Number of components (default ``min(6, m, n)``).
    center : bool, optional
        Subtract the column means first.
    niter : int, optional
        Subspace iterations.

    Returns
    -------
    U : Tensor
        ``(*, m, q)``.
    S : Tensor
        ``(*, q)``, real, descending.
    V : Tensor
        ``(*, n, q)``: the principal directions.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> _ = torch.manual_seed(0)
    >>> X = torch.randn(200, 2) @ torch.tensor([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> U, S, V = mpslinalg.pca_lowrank(X, q=2)
    >>> bool(V[:, 0].abs().argmax() == 0)
    True
    """
