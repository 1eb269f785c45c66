"""More than one device: DTensors (``torch.distributed.tensor``) in every public function.

Batch-sharded DTensors are computed shard by shard with no communication; a DTensor sharded on
a matrix dimension is redistributed with a `RedistributionWarning`
(`mpslinalg._core.distributed` holds the mechanism, generic over the op declarations). This
module holds the one distributed algorithm: TSQR (Demmel, Grigori, Hoemmen, Langou,
"Communication-optimal parallel and sequential QR and LU factorizations", SIAM J. Sci. Comput.
34(1), 2012) for a tall-skinny matrix sharded by rows, behind ``qr`` (modes 'reduced' and 'r')
and ``lstsq``:

1. every rank factors its block of rows, ``A_i = Q_i R_i`` (n x n ``R_i``);
2. the ``R_i`` are all-gathered and every rank factors their stack, ``[R_0; ...; R_p-1] = Q' R``
   (a flat tree of one level: p n x n rows, a few hundred kilobytes for n <= 256, where one
   all-gather costs one latency while a binary tree costs log p of them; every rank ends with
   ``R``, which a tree would have to broadcast);
3. each rank applies its block of ``Q'`` locally: ``Q_i Q'_i`` are its rows of ``Q``.

``R``'s diagonal is made real and non-negative (the factorisation is then unique for a matrix of
full column rank): LAPACK's Householder QR chooses signs from the data, so the single-process
``qr`` may differ from TSQR's by a diagonal of signs, ``Q D`` and ``D R`` (``|D| = I``).
``lstsq`` solves the n x n problem ``R x = Q^H B`` with the call's driver (``Q^H B`` is one
all-reduce of the local ``Q_i^H B_i``); its residuals are one more all-reduce.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._core.distributed import RedistributionWarning, redistribute

__all__ = ["RedistributionWarning"]


def _row_split(A: Tensor) -> int | None:
    """The mesh dimension when ``A`` is split by rows on one mesh dimension and
    replicated on the others, with at least n rows on every rank; else None."""
    from torch.distributed.tensor import Replicate, Shard

    if A.dim() < 2:
        return None
    rows = A.dim() - 2
    split = [m for m, p in enumerate(A.placements)
             if isinstance(p, Shard) and p.dim % A.dim() == rows]
    if len(split) != 1 or not all(isinstance(p, Replicate) for m, p in enumerate(A.placements)
                                  if m != split[0]):
        return None
    mesh = A.device_mesh
    parts = mesh.size(split[0])
    m, n = A.shape[-2:]
    chunk = -(-m // parts)
    if n == 0 or m - chunk * (parts - 1) < n:  # a rank with fewer rows than columns
        return None
    return split[0]


def _tsqr(A: Tensor, mesh: Any, dim: int, want_q: bool) -> tuple[Tensor | None, Tensor]:
    """This rank's rows of Q (None unless ``want_q``) and the whole R of the rows ``A`` of
    every rank of ``mesh``'s dimension ``dim``. The R factors travel as a row-sharded DTensor
    made replicated (an all-gather whose derivative is DTensor's: each rank's own slice)."""
    from .linalg.qr import qr

    n = A.shape[-1]
    Q1, R1 = qr(A)
    stack = _gathered(R1, mesh, dim)
    Q2, R = qr(stack)
    d = R.diagonal(dim1=-2, dim2=-1)
    phase = torch.where(d == 0, torch.ones_like(d), d.sgn()).detach()
    R = R * phase.conj().unsqueeze(-1)
    if not want_q:
        return None, R
    me = mesh.get_local_rank(dim)
    Q = (Q1 @ Q2[..., me * n:(me + 1) * n, :]) * phase.unsqueeze(-2)
    return Q, R


def _placements(mesh: Any, dim: int, placement: Any) -> list:
    from torch.distributed.tensor import Replicate

    return [placement if m == dim else Replicate() for m in range(mesh.ndim)]


def _gathered(x: Tensor, mesh: Any, dim: int) -> Tensor:
    """Every rank's ``x`` stacked along the rows (one all-gather)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    rows = DTensor.from_local(x.contiguous(), mesh, _placements(mesh, dim, Shard(x.dim() - 2)),
                              run_check=False)
    return rows.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()


def _summed(x: Tensor, mesh: Any, dim: int) -> Tensor:
    """The sum of every rank's ``x`` (one all-reduce)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    parts = DTensor.from_local(x, mesh, _placements(mesh, dim, Partial()), run_check=False)
    return parts.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()


def _replicated(x: Tensor, mesh) -> Tensor:
    from torch.distributed.tensor import DTensor, Replicate

    return DTensor.from_local(x, mesh, [Replicate()] * mesh.ndim, run_check=False)


def row_sharded_qr(function, values: dict[str, Any], dtensors: dict[str, Tensor]) -> Any:
    """``qr`` of a row-sharded tall-skinny DTensor by TSQR: Q sharded as A, R replicated
    (NotImplemented for any other layout, and for mode 'complete', whose m x m Q the generic
    path redistributes)."""
    from torch.distributed.tensor import DTensor

    A = values["A"]
    mode = values["mode"]
    split = _row_split(A) if mode in ("reduced", "r") and set(dtensors) == {"A"} else None
    if split is None:
        return NotImplemented
    mesh = A.device_mesh
    Q, R = _tsqr(A.to_local(), mesh, split, mode == "reduced")
    if Q is None:
        Q = _replicated(R.new_empty(0), mesh)
    else:
        Q = DTensor.from_local(Q, mesh, A.placements, run_check=False, shape=A.shape,
                               stride=A.stride())
    return torch.return_types.linalg_qr((Q, _replicated(R, mesh)))


def row_sharded_lstsq(function, values: dict[str, Any], dtensors: dict[str, Tensor]) -> Any:
    """``lstsq`` of a row-sharded tall-skinny DTensor A (B sharded or replicated by rows) by
    TSQR; the results are replicated."""
    A, B = values["A"], values["B"]
    split = _row_split(A)
    if split is None or B.dim() != A.dim() or B.shape[-2] != A.shape[-2]:
        return NotImplemented
    B = redistribute(function.__name__, "B", B, list(A.placements),
                     "TSQR needs B's rows split as A's")
    mesh = A.device_mesh
    A_local, B_local = A.to_local(), B.to_local()
    Q, R = _tsqr(A_local, mesh, split, True)
    c = _summed(Q.mH @ B_local, mesh, split)
    # the reduced problem, one zero row taller: the call's driver gives residuals (or not) by
    # the rank of R, which is A's, exactly as it would for A itself
    reduced = function(torch.cat([R, torch.zeros_like(R[..., :1, :])], dim=-2),
                       torch.cat([c, torch.zeros_like(c[..., :1, :])], dim=-2),
                       values["rcond"], driver=values["driver"])
    solution, residuals, rank, singular_values = reduced
    if residuals.numel():
        residuals = _summed((A_local @ solution - B_local).abs().square().sum(-2), mesh, split)
    mesh = A.device_mesh
    return type(reduced)(tuple(_replicated(x, mesh) for x in
                               (solution, residuals, rank, singular_values)))
