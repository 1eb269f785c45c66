"""Check and benchmark cases of the QR family (qr, geqrf, householder_product, lstsq).

Checks compute with the mpslinalg API on fixed hard cases and return LAPACK's test ratios
(xQRT01: ``||A - Q R|| / (max(m, n) ||A|| eps)`` and ``||Q^H Q - I|| / (m eps)``, the larger of
the two; for least squares xQRT17's ``||A^H (A X - B)|| / (max(m, n, k) ||A|| ||B|| eps)`` for
tall problems and xGET02's for wide ones, 1-norms in float64). Benchmarks time mpslinalg against
torch.linalg on the device and SciPy on the host: tall-skinny, square and batched 3 x 3.
"""

from __future__ import annotations

import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import (
    eps,
    matrix_with_spread,
    norm1,
    orthogonality_ratio,
    qr_ratio,
    random_matrix,
    solve_ratio,
    wide,
)
from . import scipy_per_matrix


def _qr_ratios(A: torch.Tensor, mode: str = "reduced") -> float:
    Q, R = mpslinalg.qr(A, mode=mode)
    if not (torch.isfinite(Q).all() and torch.isfinite(R).all()):
        raise AssertionError("non-finite Q or R for finite input")
    if not torch.equal(R.cpu(), R.cpu().triu()):
        raise AssertionError("R is not upper triangular")
    return max(qr_ratio(A, Q, R), orthogonality_ratio(Q))


def _rank_deficient(device) -> torch.Tensor:
    A = matrix_with_spread(40, 10.0, torch.complex64, (2,), seed=3, rank=25)
    A[1, :, 7] = 0  # and a zero column
    return A.to(device)


_QR_CASES = {
    "tall-skinny 4000x36 (TSQR)": lambda d: random_matrix(36, torch.float32, (), 1, m=4000).to(d),
    "square 65x65 complex64, cond 1e6": lambda d: matrix_with_spread(
        65, 1e6, torch.complex64, (), seed=2).to(d),
    "rank-deficient and zero column": _rank_deficient,
    "entries 1e30 (float32 overflow)": lambda d: (
        random_matrix(20, torch.float32, (2,), 4, m=30) * 1e30).to(d),
    "entries 1e-30 (float32 underflow)": lambda d: (
        random_matrix(20, torch.complex64, (2,), 5, m=30) * 1e-30).to(d),
    "batch of 10000 3x4 (one launch)": lambda d: random_matrix(
        4, torch.float32, (10000,), 6, m=3).to(d),
    "wide 20x50 complete": lambda d: random_matrix(50, torch.complex64, (), 7, m=20).to(d),
    # Q's block reflectors over more than one chunk of rows (qr_apply_sum), mode 'complete' so
    # that the blocked path serves it
    "tall 300x24 complex64 complete": lambda d: random_matrix(
        24, torch.complex64, (), 8, m=300).to(d),
}


def _register_qr(name: str, make) -> None:
    @check_case("qr", name)
    def run(device):
        return _qr_ratios(make(device), "complete" if "complete" in name else "reduced")


for _name, _make in _QR_CASES.items():
    _register_qr(_name, _make)


@check_case("householder_product", "geqrf then householder_product, 70x40 complex64")
def _householder(device) -> float:
    A = random_matrix(40, torch.complex64, (2,), seed=8, m=70).to(device)
    a, tau = mpslinalg.geqrf(A)
    Q = mpslinalg.householder_product(a, tau)
    return max(qr_ratio(A, Q, a.triu()[..., :40, :]), orthogonality_ratio(Q))


def _lstsq_tall_ratio(A, X, B, dtype) -> float:
    A, X, B = map(wide, (A, X, B))
    m, n = A.shape[-2:]
    num = norm1(A.mH @ (A @ X - B))
    den = max(m, n, B.shape[-1]) * norm1(A) * norm1(B) * eps(dtype)
    return float((num / den).max())


@check_case("lstsq", "tall 300x20, cond 1e3, 4 right-hand sides")
def _lstsq_tall(device) -> float:
    A = matrix_with_spread(300, 1e3, torch.float32, (), seed=9)[:, :20].to(device)
    B = random_matrix(4, torch.float32, (), seed=10, m=300).to(device)
    X = mpslinalg.lstsq(A, B, driver="gels").solution
    return _lstsq_tall_ratio(A, X, B, torch.float32)


@check_case("lstsq", "wide 20x90 complex64 (minimum norm)")
def _lstsq_wide(device) -> float:
    A = random_matrix(90, torch.complex64, (2,), seed=11, m=20).to(device)
    B = random_matrix(3, torch.complex64, (2,), seed=12, m=20).to(device)
    X = mpslinalg.lstsq(A, B, driver="gels").solution
    # The minimum-norm solution lies in the row space of A: X = A^H Y.
    Y = torch.linalg.lstsq(wide(A).mH, wide(X)).solution
    if (wide(A).mH @ Y - wide(X)).abs().max() > 1e-4 * wide(X).abs().max():
        raise AssertionError("the solution is not the minimum-norm one")
    return solve_ratio(A, X, B)


# ---------------------------------------------------------------- benchmarks

#: (case, batch, m, n on the CPU, m, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("tall-skinny", (), (4000, 36), (100000, 36)),
    ("square", (), (64, 64), (1024, 1024)),
    ("batched 3x3", (100000,), (3, 3), (3, 3)),
]


def _register_bench(label, batch, cpu_shape, gpu_shape) -> None:
    @bench_case("qr", f"{label} {cpu_shape} on cpu, {gpu_shape} on gpu, batch {batch} float32")
    def run(device, repeats):
        m, n = cpu_shape if device.type == "cpu" else gpu_shape
        A = random_matrix(n, torch.float32, batch, seed=13, m=m).to(device)
        contenders = {"mpslinalg": lambda: mpslinalg.qr(A), "torch": lambda: torch.linalg.qr(A)}
        scipy_qr = scipy_per_matrix("qr", mode="economic")
        if scipy_qr is not None and len(batch) == 0:  # a Python loop over 1e5 is not a baseline
            An = A.cpu().numpy()
            contenders["scipy"] = lambda: scipy_qr(An)
        return contenders


for _shape in _BENCH_SHAPES:
    _register_bench(*_shape)
