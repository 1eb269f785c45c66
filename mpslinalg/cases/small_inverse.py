"""Check and bench cases of the n <= 4 small path (mpslinalg/small).

Checks call the small-path functions directly (the public API picks them for n <= 4), so the
kernels themselves are validated on whichever backend ``check`` runs (benchmarks time the public
``mpslinalg.inv``); ratios are LAPACK's xGET03
``||A X - I|| / (n ||A|| ||X|| eps)`` (inv) and xGET02 (solve) in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..small import dispatch as si
from ..testing import eps, inv_ratio, solve_ratio, wide


def _require_ok(info: torch.Tensor) -> None:
    bad = int((info != 0).sum())
    if bad:
        raise AssertionError(f"info != 0 for {bad} non-singular matrices")


# ------------------------------------------------------------------------- camera matrices

def _rigid(batch: int, seed: int = 0) -> torch.Tensor:
    """[R t; 0 1] with uniformly random rotations (float64)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((batch, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    q[np.linalg.det(q) < 0, :, 0] *= -1
    T = np.zeros((batch, 4, 4))
    T[:, :3, :3], T[:, :3, 3], T[:, 3, 3] = q, rng.uniform(-10, 10, (batch, 3)), 1
    return torch.from_numpy(T)


def _intrinsics(batch: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    K = np.zeros((batch, 3, 3))
    K[:, 0, 0], K[:, 1, 1] = rng.uniform(200, 2000, batch), rng.uniform(200, 2000, batch)
    K[:, 0, 1] = rng.uniform(-1, 1, batch)
    K[:, 0, 2], K[:, 1, 2], K[:, 2, 2] = rng.uniform(100, 1000, (2, batch)).tolist() + [1.0]
    return torch.from_numpy(K)


def _homographies(batch: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    H = np.eye(3) + 0.2 * rng.standard_normal((batch, 3, 3))
    H[:, 2, :2] *= 1e-3
    H[:, :2, 2] *= 300
    return torch.from_numpy(H)


def _spread(n: int, cond: float, batch: int, seed: int = 0) -> torch.Tensor:
    """U diag(1 .. 1/cond) V^T with Haar U, V (LAPACK xLATMS mode 3), float64."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((batch, n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((batch, n, n)))
    s = cond ** (-np.arange(n) / (n - 1))
    return torch.from_numpy((u * s[None, None, :]) @ np.swapaxes(v, 1, 2))


@check_case("inv (n<=4)", "rigid transforms [R t; 0 1], 1000 x 4x4, vs [R^T -R^T t; 0 1]")
def _check_rigid(device: torch.device) -> float:
    T = _rigid(1000)
    X, info = si.small_inv_ex(T.float().to(device))
    _require_ok(info)
    R, t = T[:, :3, :3], T[:, :3, 3:]
    known = torch.zeros_like(T)
    known[:, :3, :3], known[:, :3, 3:], known[:, 3, 3] = R.mT, -R.mT @ t, 1
    err = float((wide(X) - known).abs().max() / known.abs().max())
    if err > 1e-5:
        raise AssertionError(f"relative error {err:.3g} against the known inverse")
    return inv_ratio(T.float(), X)


@check_case("inv (n<=4)", "camera intrinsics K, 1000 x 3x3")
def _check_intrinsics(device: torch.device) -> float:
    K = _intrinsics(1000).float()
    X, info = si.small_inv_ex(K.to(device))
    _require_ok(info)
    return inv_ratio(K, X)


@check_case("inv (n<=4)", "homographies, 1000 x 3x3")
def _check_homographies(device: torch.device) -> float:
    H = _homographies(1000).float()
    X, info = si.small_inv_ex(H.to(device))
    _require_ok(info)
    return inv_ratio(H, X)


@check_case("inv (n<=4)", "ill-conditioned 4x4, cond 1e6, float32")
def _check_ill4(device: torch.device) -> float:
    A = _spread(4, 1e6, 512).float()
    X, info = si.small_inv_ex(A.to(device))
    _require_ok(info)
    return inv_ratio(A, X)


@check_case("inv (n<=4)", "ill-conditioned 3x3, cond 1e6, complex64")
def _check_ill3_complex(device: torch.device) -> float:
    A = (_spread(3, 1e6, 256) * (1 + 1j) / math.sqrt(2)).to(torch.complex64)
    X, info = si.small_inv_ex(A.to(device))
    _require_ok(info)
    return inv_ratio(A, X)


@check_case("solve (n<=4)", "ill-conditioned 4x4, cond 1e6, 2 right-hand sides")
def _check_solve(device: torch.device) -> float:
    A = _spread(4, 1e6, 512, seed=1).float()
    B = torch.randn(512, 4, 2, generator=torch.Generator().manual_seed(0))
    X, info = si.small_solve_ex(A.to(device), B.to(device))
    _require_ok(info)
    return solve_ratio(A, X, B)


@check_case("det (n<=4)", "singular: info and det = 0 like getrf, first zero pivot 1..4")
def _check_singular(device: torch.device) -> float:
    g = torch.Generator().manual_seed(3)
    mats = [torch.randn(4, 4, generator=g)]
    for rank in range(4):
        a = torch.randn(4, 4, generator=g)
        a[:, rank:] = 0
        mats.append(a)
    # Column 1 = 2 * column 0 with power-of-two multipliers: singular in exact arithmetic.
    mats.append(torch.tensor([[4.0, 8, 1, 3], [2, 4, 5, 7], [1, 2, 3, 2], [-2, -4, 0, 1]]))
    A = torch.stack(mats)
    expected = torch.linalg.lu_factor_ex(A).info
    _, info = si.small_inv_ex(A.to(device))
    if not torch.equal(info.cpu(), expected):
        raise AssertionError(f"info {info.tolist()} != getrf's {expected.tolist()}")
    det = si.small_det(A.to(device)).cpu()
    sign, logabs = si.small_slogdet(A.to(device))
    singular = expected > 0
    if not (det[singular] == 0).all() or not (sign.cpu()[singular] == 0).all():
        raise AssertionError("det / slogdet sign of a singular matrix is not 0")
    if not (logabs.cpu()[singular] == -math.inf).all():
        raise AssertionError("logabsdet of a singular matrix is not -inf")
    ref = torch.linalg.det(A[~singular].double())
    return float(((wide(det[~singular]) - ref).abs() / (ref.abs() * 4 * eps(torch.float32))).max())


# ------------------------------------------------------------------------- benchmarks

def _bench_inv(n: int, batch: int):
    """The public ``mpslinalg.inv`` (which picks the small path or torch.linalg by batch size),
    not the small path alone: what a user's call costs."""
    def run(device: torch.device, repeats: int) -> dict[str, Callable[[], object]]:
        g = torch.Generator().manual_seed(0)
        # Diagonally shifted: no numerically singular matrix, on which both would raise.
        A = (torch.randn(batch, n, n, generator=g) + n * torch.eye(n)).to(device)
        contenders = {"mpslinalg": lambda: mpslinalg.inv(A), "torch": lambda: torch.linalg.inv(A)}
        if device.type == "cpu":
            a = A.numpy()
            contenders["numpy"] = lambda: np.linalg.inv(a)
        return contenders

    return run


for _n in (2, 3, 4):
    for _batch in (100, 10000, 100000):
        bench_case("small inverse", f"inv ({_batch}, {_n}, {_n}) float32")(_bench_inv(_n, _batch))
