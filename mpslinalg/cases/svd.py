"""Check and benchmark cases of the SVD family (svd, svdvals, pinv, matrix_rank).

Checks compute with the mpslinalg API on fixed hard cases and return the largest of LAPACK-style
ratios: ``||A - U S Vh|| / (max(m, n) ||A|| eps)``, ``||U^H U - I|| / (m eps)``,
``||V^H V - I|| / (n eps)`` and ``max |S - S_ref| / (max(m, n) S_max eps)`` against torch's
float64 SVD on the host (1-norms); for pinv the four Penrose conditions (see
`mpslinalg.testing.penrose_ratios`) or, for the camera case, the error against the exact
inverse in units of ``n eps``. Benchmarks time mpslinalg against torch.linalg on the device and
SciPy on the host.
"""

from __future__ import annotations

import math

import torch

import mpslinalg

from .._core.registry import bench_case, check_case, median_time
from ..testing import (
    eps,
    matrix_with_spread,
    orthogonality_ratio,
    penrose_ratios,
    random_matrix,
    singular_values_ratio,
    svd_ratio,
    wide,
)
from . import scipy_per_matrix


def _svd_ratios(A: torch.Tensor, full_matrices: bool = False) -> float:
    U, S, Vh = mpslinalg.svd(A, full_matrices=full_matrices)
    if not (torch.isfinite(U).all() and torch.isfinite(S).all() and torch.isfinite(Vh).all()):
        raise AssertionError("non-finite U, S or Vh for finite input")
    m, n = A.shape[-2:]
    S_ref = torch.linalg.svdvals(wide(A))
    return max(svd_ratio(A, U, S, Vh), orthogonality_ratio(U), orthogonality_ratio(Vh.mH),
               singular_values_ratio(S, S_ref, m, n))


def _rank_deficient(device) -> torch.Tensor:
    """pytorch#196112's case: a batch of rank-25 32 x 32 matrices (U lost orthogonality)."""
    A = matrix_with_spread(32, 10.0, torch.float32, (3,), seed=1, rank=25)
    A[2, :, 7] = 0  # and a zero column
    return A.to(device)


_SVD_CASES = {
    "rank-deficient batch, 32x32 rank 25 (pytorch#196112)": _rank_deficient,
    "complex64 24x24, cond 1e6": lambda d: matrix_with_spread(
        24, 1e6, torch.complex64, (), seed=2).to(d),
    "entries 1e30 (float32 overflow)": lambda d: (
        matrix_with_spread(12, 1e3, torch.float32, (2,), seed=3) * 1e30).to(d),
    "entries 1e-30 (float32 underflow)": lambda d: (
        matrix_with_spread(12, 1e3, torch.complex64, (2,), seed=4) * 1e-30).to(d),
    "tall 100x10 complete (QR first)": lambda d: random_matrix(
        10, torch.float32, (), 5, m=100).to(d),
    "wide 10x60 complex64": lambda d: random_matrix(60, torch.complex64, (), 6, m=10).to(d),
    "camera: batch of 10000 3x3 (one launch)": lambda d: random_matrix(
        3, torch.float32, (10000,), 7).to(d),
    "block Jacobi (columns over threadgroups): 72x72 rank 50 and a zero column, 2 of them":
        lambda d: _block_case(d),
    "block Jacobi: complex64 64x64, cond 1e4": lambda d: matrix_with_spread(
        64, 1e4, torch.complex64, (), seed=17).to(d),
}


def _block_case(device) -> torch.Tensor:
    """Order 72 (>= svd_metal.BLOCK_MIN_N): six column blocks, rows in two threadgroups;
    rank-deficient with an exactly zero column, so U's completion runs too."""
    A = matrix_with_spread(72, 10.0, torch.float32, (2,), seed=16, rank=50)
    A[1, :, 3] = 0
    return A.to(device)


def _register_svd(name: str, make) -> None:
    @check_case("svd", name)
    def run(device):
        return _svd_ratios(make(device), full_matrices="complete" in name)


for _name, _make in _SVD_CASES.items():
    _register_svd(_name, _make)


@check_case("svd", "Inf and NaN input: NaN out, no hang")
def _nonfinite(device) -> float:
    A = random_matrix(3, torch.float32, (4,), seed=8)
    A[1, 1, 1], A[2, 0, 2] = math.inf, math.nan
    A6 = random_matrix(6, torch.float32, (2,), seed=9)
    A6[0, 5, 0] = -math.inf
    for x in (A, A6):
        S = mpslinalg.svdvals(x.to(device)).cpu()
        poisoned = ~torch.isfinite(x).flatten(1).all(-1)
        if not (S[poisoned].isnan().all() and S[~poisoned].isfinite().all()):
            raise AssertionError("poisoned matrices must give NaN, the others finite values")
    return 0.0


@check_case("svdvals", "graded 16x16 (columns 1 .. 1e-12)")
def _graded(device) -> float:
    A = random_matrix(16, torch.float32, (), seed=10) * torch.logspace(0, -12, 16)
    S = mpslinalg.svdvals(A.to(device))
    return singular_values_ratio(S, torch.linalg.svdvals(wide(A)), 16, 16)


@check_case("matrix_rank", "rank-k products, k = 0 .. 6, 6x8 (0 when exact)")
def _rank(device) -> float:
    for k in range(7):
        x = random_matrix(k, torch.complex64, (2,), seed=11, m=6)
        y = random_matrix(8, torch.complex64, (2,), seed=12, m=k)
        got = mpslinalg.matrix_rank((x @ y).to(device)).cpu().tolist()
        if got != [k, k]:
            raise AssertionError(f"rank {got} for rank-{k} products")
    return 0.0


@check_case("pinv", "Penrose conditions, 9x6 rank 4, cond 1e3")
def _penrose(device) -> float:
    A = matrix_with_spread(9, 1e3, torch.float32, (2,), seed=13, rank=4)[..., :6].to(device)
    return max(penrose_ratios(A, mpslinalg.pinv(A, rtol=1e-4)).values())


@check_case("pinv", "camera [A b; 0 1], |b| / |A| = 1e4, 1000 4x4 (error / (n eps))")
def _camera(device) -> float:
    """pytorch#75494: the affine inverse through pinv; rtol=0 since the smallest singular value
    is below float32's default tolerance at this offset."""
    n = 4
    R = matrix_with_spread(3, 10.0, torch.float32, (1000,), seed=14)
    b = random_matrix(1, torch.float32, (1000,), seed=15, m=3) * 1e4
    M = torch.zeros(1000, n, n)
    M[:, :3, :3], M[:, :3, 3:], M[:, 3, 3] = R, b, 1
    exact = torch.linalg.inv(wide(M))
    X = wide(mpslinalg.pinv(M.to(device), rtol=0.0))
    err = (X - exact).abs().amax((-2, -1)) / exact.abs().amax((-2, -1))
    return float(err.max()) / (n * eps(torch.float32))


# ---------------------------------------------------------------- benchmarks

#: (case, batch, (m, n) on the CPU, (m, n) on a GPU): modest on the CPU, where the metal backend
#: is the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("square", (), (24, 24), (256, 256)),
    ("tall", (), (200, 16), (4096, 64)),
    ("batched 8x8", (64,), (8, 8), (8, 8)),
    ("batched 3x3 (camera)", (100000,), (3, 3), (3, 3)),
]


def _register_bench(label, batch, cpu_shape, gpu_shape) -> None:
    @bench_case("svd", f"{label} {cpu_shape} on cpu, {gpu_shape} on gpu, batch {batch} float32")
    def run(device, repeats):
        m, n = cpu_shape if device.type == "cpu" else gpu_shape
        A = random_matrix(n, torch.float32, batch, seed=16, m=m).to(device)
        times = {
            "mpslinalg": median_time(lambda: mpslinalg.svd(A, full_matrices=False), device,
                                     repeats),
            "torch": median_time(lambda: torch.linalg.svd(A, full_matrices=False), device,
                                 repeats),
        }
        scipy_svd = scipy_per_matrix("svd", full_matrices=False)
        if scipy_svd is not None and math.prod(batch) <= 64:  # a loop over 1e5 is no baseline
            An = A.cpu().numpy()
            times["scipy"] = median_time(lambda: scipy_svd(An), torch.device("cpu"), repeats)
        return times


for _shape in _BENCH_SHAPES:
    _register_bench(*_shape)
