"""Check and bench cases of the small QR / SVD / eigh path (mpslinalg/small/orthogonal.py).

Checks call the small-path functions directly on the device ``check`` runs on (generated SIMD
code on CPU, Triton on CUDA, torch.linalg elsewhere); ratios as LAPACK's tests, in float64:
``||A - Q R|| / (max(m, n) ||A|| eps)`` and ``||Q^T Q - I|| / (m eps)`` (xQRT01), the same for
``U S Vh`` with U and V, ``|S - S_numpy| / (max(m, n) eps S_max)`` and
``||A V - V L|| / (n ||A|| eps)``; a case's figure is the worst of its ratios.
"""

from __future__ import annotations

import numpy as np
import torch

from .._core.registry import bench_case, check_case, median_time
from ..small import cpu_simd
from ..small import orthogonal as so
from ..testing import eps, matrix_with_spread, orthogonality_ratio, qr_ratio, wide


def _ready(device: torch.device) -> None:
    """On CPU, the installed native kernels (without them the small functions fall back to
    torch.linalg, which is not what these cases check)."""
    if device.type == "cpu" and cpu_simd.ORTH_LIBRARY.loaded is None:
        raise RuntimeError(f"the native kernels are not available: {cpu_simd.ORTH_LIBRARY.status}")


def _norm1(x: torch.Tensor) -> torch.Tensor:
    return x.abs().sum(-2).amax(-1)


def _projections(batch: int, seed: int = 0) -> torch.Tensor:
    """Camera projection matrices P = K [R | t] (3x4, float64)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((batch, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    K = np.zeros((batch, 3, 3))
    K[:, 0, 0], K[:, 1, 1] = rng.uniform(200, 2000, batch), rng.uniform(200, 2000, batch)
    K[:, 0, 2], K[:, 1, 2], K[:, 2, 2] = rng.uniform(100, 1000, batch), rng.uniform(
        100, 1000, batch), 1
    Rt = np.concatenate([q, rng.uniform(-10, 10, (batch, 3, 1))], axis=2)
    return torch.from_numpy(K @ Rt)


def _svd_ratio(A: torch.Tensor, U, S, Vh) -> float:
    m, n = A.shape[-2:]
    k = min(m, n)
    e = eps(A.dtype)
    A64, U64, S64, V64 = map(wide, (A, U, S, Vh))
    ref = torch.from_numpy(np.linalg.svd(A64.cpu().numpy(), compute_uv=False))
    rec = A64 - U64[..., :k] @ torch.diag_embed(S64) @ V64[..., :k, :]
    return max(
        float((_norm1(rec) / (max(m, n) * _norm1(A64).clamp_min(1e-300) * e)).max()),
        float(_norm1(U64.mT @ U64 - torch.eye(U.shape[-1], dtype=torch.float64)).max() / (m * e)),
        float(_norm1(V64 @ V64.mT - torch.eye(Vh.shape[-2], dtype=torch.float64)).max() / (n * e)),
        float(((S64.cpu() - ref).abs().amax(-1) / (max(m, n) * e * ref[..., 0].clamp_min(1e-300)))
              .max()))


@check_case("qr (m,n<=4)", "camera projections K [R | t], 1000 x 3x4 float32")
def _check_qr_projections(device: torch.device) -> float:
    _ready(device)
    P = _projections(1000).float().to(device)
    Q, R = so.small_qr(P, "reduced")
    return max(qr_ratio(P, Q, R), orthogonality_ratio(Q))


@check_case("qr (m,n<=4)", "4x3, entries 1e+30 and 1e-30, float32 (no overflow/underflow)")
def _check_qr_scales(device: torch.device) -> float:
    _ready(device)
    A = torch.from_numpy(np.random.default_rng(1).standard_normal((200, 4, 3)))
    worst = 0.0
    for scale in (1e30, 1e-30):
        As = (A * scale).float().to(device)
        Q, R = so.small_qr(As, "complete")
        worst = max(worst, qr_ratio(As, Q, R), orthogonality_ratio(Q))
    return worst


@check_case("svd (n<=4)", "rank-deficient 3x3 (rank 0, 1, 2), 3000 float32: U, V orthogonal")
def _check_svd_rank_deficient(device: torch.device) -> float:
    _ready(device)
    A = torch.cat([matrix_with_spread(3, 10.0, torch.float32, (1000,), seed=r, rank=r)
                   for r in range(3)]).to(device)
    return _svd_ratio(A, *so.small_svd(A, True, True))


@check_case("svd (n<=4)", "ill-conditioned 3x3 cond 1e6 and 3x4 / 4x3, float32")
def _check_svd_ill(device: torch.device) -> float:
    _ready(device)
    worst = 0.0
    for m, n in ((3, 3), (3, 4), (4, 3)):
        A = matrix_with_spread(max(m, n), 1e6, torch.float32, (500,), seed=m * 10 + n)
        A = A[..., :m, :n].contiguous().to(device)
        worst = max(worst, _svd_ratio(A, *so.small_svd(A, True, True)))
    return worst


@check_case("eigh (n<=4)", "covariance matrices X^T X (rank 1..3), 3000 x 3x3 float32")
def _check_eigh_covariance(device: torch.device) -> float:
    _ready(device)
    rng = np.random.default_rng(2)
    C = np.concatenate([np.swapaxes(X, 1, 2) @ X
                        for X in (rng.standard_normal((1000, r, 3)) for r in (1, 2, 3))])
    C = torch.from_numpy(C).float().to(device)
    L, V = so.small_eigh(C, False, True)
    C64, L64, V64 = map(wide, (C, L, V))
    e = eps(torch.float32)
    res = _norm1(C64 @ V64 - V64 * L64[..., None, :]) / (3 * _norm1(C64) * e)
    return max(float(res.max()), orthogonality_ratio(V))


def _bench(op: str, batch: int):
    def run(device: torch.device, repeats: int) -> dict[str, float]:
        _ready(device)
        A = torch.randn(batch, 3, 3, generator=torch.Generator().manual_seed(0)).to(device)
        S = A + A.mT
        ours, ref = {
            "qr": (lambda: so.small_qr(A), lambda: torch.linalg.qr(A)),
            "svd": (lambda: so.small_svd(A, True, True), lambda: torch.linalg.svd(A)),
            "eigh": (lambda: so.small_eigh(S, False, True), lambda: torch.linalg.eigh(S)),
        }[op]
        return {"mpslinalg": median_time(ours, device, repeats),
                "torch": median_time(ref, device, repeats)}

    return run


for _op in ("qr", "svd", "eigh"):
    bench_case("small orthogonal", f"{_op} (100000, 3, 3) float32")(_bench(_op, 100_000))
