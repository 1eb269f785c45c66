"""Check and benchmark cases of the LDL family (ldl_factor, ldl_solve).

Each returns the larger of LAPACK's ratios ``||A - P L D L^T P^T|| / (n ||A|| eps)`` (xSYT01,
the factors multiplied out in float64) and ``||A X - B|| / (||A|| ||X|| n eps)`` (xGET02), and
fails when the pivots or ``info`` differ from LAPACK's (torch's ldl_factor on the CPU, in the
same dtype). Benchmarks time ldl_factor_ex and ldl_solve against torch.linalg's on the device,
interleaved.
"""

from __future__ import annotations

import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import ldl_ratio, random_matrix, solve_ratio


def _indefinite(n: int, dtype: torch.dtype, batch: tuple, seed: int, hermitian: bool,
                kind: str) -> torch.Tensor:
    """X + X^T (^H): random indefinite; a saddle point [[H, C^T], [C, 0]] (2 x 2 pivots and
    interchanges); or with a zero diagonal (no 1 x 1 pivot passes the first test)."""
    X = random_matrix(n, dtype, batch, seed)
    A = X + (X.mH if hermitian else X.mT)
    if kind == "saddle point":
        A[..., (n + 1) // 2:, (n + 1) // 2:] = 0
    elif kind == "zero diagonal":
        A = A - torch.diag_embed(A.diagonal(dim1=-2, dim2=-1))
    return A


def _full(A: torch.Tensor, hermitian: bool) -> torch.Tensor:
    lower = A.tril(-1)
    return lower + (lower.mH if hermitian else lower.mT) + torch.diag_embed(
        A.diagonal(dim1=-2, dim2=-1))


_CASES = {
    "indefinite 64, float32": dict(n=64, dtype=torch.float32, batch=(), hermitian=False,
                                   kind="random", scale=1.0),
    "saddle point 120 (device memory)": dict(n=120, dtype=torch.float32, batch=(),
                                             hermitian=False, kind="saddle point", scale=1.0),
    "Hermitian saddle point, batched": dict(n=40, dtype=torch.complex64, batch=(3,),
                                            hermitian=True, kind="saddle point", scale=1.0),
    "complex symmetric, scaled 1e30": dict(n=33, dtype=torch.complex64, batch=(2,),
                                           hermitian=False, kind="random", scale=1e30),
    "zero diagonal, scaled 1e-30": dict(n=25, dtype=torch.float32, batch=(2,),
                                        hermitian=False, kind="zero diagonal", scale=1e-30),
}


def _register(name: str, spec: dict) -> None:
    @check_case("ldl_factor", name)
    def _run(device) -> float:
        hermitian, scale = spec["hermitian"], spec["scale"]
        A = _indefinite(spec["n"], spec["dtype"], spec["batch"], 1, hermitian,
                        spec["kind"]) * scale
        LD, pivots, info = mpslinalg.ldl_factor_ex(A.to(device), hermitian=hermitian)
        _, ref_pivots, ref_info = torch.linalg.ldl_factor_ex(A, hermitian=hermitian)
        if not torch.equal(pivots.cpu(), ref_pivots) or not torch.equal(info.cpu(), ref_info):
            raise AssertionError(f"pivots or info differ from LAPACK's: {pivots.tolist()} "
                                 f"{info.tolist()} != {ref_pivots.tolist()} {ref_info.tolist()}")
        B = (random_matrix(spec["n"], spec["dtype"], spec["batch"], 2)[..., :3] * scale)
        X = mpslinalg.ldl_solve(LD, pivots, B.to(device), hermitian=hermitian)
        return max(ldl_ratio(A, LD, pivots, hermitian),
                   solve_ratio(_full(A, hermitian), X, B))


for _name, _spec in _CASES.items():
    _register(_name, _spec)


# ---------------------------------------------------------------- benchmarks

#: (case name, batch, n on the CPU, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("one matrix", (), 48, 512),
    ("batch of 64", (64,), 16, 64),
]


def _register_bench(label: str, batch: tuple, n_cpu: int, n_gpu: int) -> None:
    @bench_case("ldl_factor", f"{label} ({n_cpu}x{n_cpu} on cpu, {n_gpu}x{n_gpu} on gpu) "
                "float32")
    def _factor(device, repeats):
        n = n_cpu if device.type == "cpu" else n_gpu
        A = _indefinite(n, torch.float32, batch, 3, False, "random").to(device)
        return {"mpslinalg": lambda: mpslinalg.ldl_factor_ex(A),
                "torch": lambda: torch.linalg.ldl_factor_ex(A)}

    @bench_case("ldl_solve", f"{label} ({n_cpu}x{n_cpu} on cpu, {n_gpu}x{n_gpu} on gpu), "
                "4 rhs float32")
    def _solve(device, repeats):
        n = n_cpu if device.type == "cpu" else n_gpu
        A = _indefinite(n, torch.float32, batch, 4, False, "random").to(device)
        LD, pivots = torch.linalg.ldl_factor(A)
        B = torch.randn(*batch, n, 4, device=device)
        return {"mpslinalg": lambda: mpslinalg.ldl_solve(LD, pivots, B),
                "torch": lambda: torch.linalg.ldl_solve(LD, pivots, B)}


for _shape in _BENCH_SHAPES:
    _register_bench(*_shape)
