"""Check and benchmark cases of the Cholesky family (cholesky, cholesky_ex, solve_triangular,
cholesky_solve, cholesky_inverse).

Checks compute with the mpslinalg API on fixed hard cases and return LAPACK's test ratios
against the exact input (xPOT01: ||L L^H - A|| / (n ||A|| eps); xTRT02 / xPOT02: ||A X - B|| /
(||A|| ||X|| n eps); 1-norms in float64); a wrong failure report raises. Benchmarks time the
public functions against torch on the device, interleaved.
"""

from __future__ import annotations

import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import batch_ratio, eps, inv_ratio, matrix_with_spread, norm1, solve_ratio, wide


def _hpd(n: int, cond: float, dtype: torch.dtype, batch=(), seed: int = 0,
         scale: float = 1.0) -> torch.Tensor:
    """Q diag(s) Q^H, s from ``scale`` down to ``scale / cond``, built in float64."""
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    Q = matrix_with_spread(n, 1.0, wide_dtype, batch, seed)
    s = scale * cond ** (-torch.arange(n, dtype=torch.float64) / max(n - 1, 1))
    A = (Q * s.to(wide_dtype)) @ Q.mH
    return (0.5 * (A + A.mH)).to(dtype)


def _potrf_ratio(A: torch.Tensor, L: torch.Tensor) -> float:
    A, Lw = wide(A), wide(L)
    n = max(A.shape[-1], 1)
    return batch_ratio(norm1(Lw @ Lw.mH - A), n * norm1(A) * eps(L.dtype))


_HARD = {
    "condition 1e7, float32": dict(n=64, cond=1e7, dtype=torch.float32, batch=(), scale=1.0),
    "129x129 (block boundary)": dict(n=129, cond=100.0, dtype=torch.float32, batch=(),
                                     scale=1.0),
    "complex64 batched, blocked": dict(n=70, cond=1e3, dtype=torch.complex64, batch=(3,),
                                       scale=1.0),
    "entries near 1e-30": dict(n=40, cond=100.0, dtype=torch.float32, batch=(2,), scale=1e-30),
    "entries near 1e+30": dict(n=40, cond=100.0, dtype=torch.complex64, batch=(2,),
                               scale=1e30),
}


def _register_accuracy(name: str, spec: dict) -> None:
    def inputs(device):
        A = _hpd(spec["n"], spec["cond"], spec["dtype"], spec["batch"], seed=1,
                 scale=spec["scale"])
        B = torch.randn(*spec["batch"], spec["n"], 3,
                        generator=torch.Generator().manual_seed(2)).to(spec["dtype"])
        return A.to(device), B.to(device)

    @check_case("cholesky", name)
    def _cholesky(device):
        A, _ = inputs(device)
        return _potrf_ratio(A, mpslinalg.cholesky(A))

    @check_case("cholesky_solve", name)
    def _cholesky_solve(device):
        A, B = inputs(device)
        return solve_ratio(A, mpslinalg.cholesky_solve(B, mpslinalg.cholesky(A)), B)

    @check_case("solve_triangular", name)
    def _solve_triangular(device):
        A, B = inputs(device)
        U = mpslinalg.cholesky(A, upper=True)
        X = mpslinalg.solve_triangular(U, B, upper=True)
        return solve_ratio(U, X, B)


for _name, _spec in _HARD.items():
    _register_accuracy(_name, _spec)


@check_case("cholesky_ex", "indefinite batch element (info, NaN, the others intact)")
def _cholesky_ex_failure(device) -> float:
    A = _hpd(70, 10.0, torch.float32, (3,), seed=3)
    A[1, 40, 40] = -1.0e3  # the leading minor of order 41 is indefinite
    L, info = mpslinalg.cholesky_ex(A.to(device))
    if info.cpu().tolist() != [0, 41, 0]:
        raise AssertionError(f"info {info.tolist()}, expected [0, 41, 0]")
    if torch.isfinite(L[1, 40:, 40:].diagonal()).any():
        raise AssertionError("the failed factor is finite past its failing minor")
    try:
        mpslinalg.cholesky(A.to(device))
    except mpslinalg.LinAlgError as err:
        if "(Batch element 1)" not in str(err) or "order 41" not in str(err):
            raise
    else:
        raise AssertionError("cholesky did not raise for an indefinite matrix")
    return _potrf_ratio(A[0::2], L[0::2])


@check_case("cholesky_inverse", "complex64 batched 70x70")
def _cholesky_inverse_small(device) -> float:
    A = _hpd(70, 1e3, torch.complex64, (2,), seed=5)
    return inv_ratio(A, mpslinalg.cholesky_inverse(mpslinalg.cholesky(A.to(device))))


@check_case("cholesky_inverse", "1024x1024 float32 (blocked inverse, the wide product block)")
def _cholesky_inverse_wide(device) -> float:
    # 1024 x 1024: the triangular inverse by blocks and, in float32, lauum on gemm.h's 64 x 64
    # block (gemm_metal.tile_for), which no smaller case reaches. The factor is torch's, so the
    # case times only the inverse (about 4 s on the emulator).
    A = _hpd(1024, 100.0, torch.float32, seed=6)
    L = torch.linalg.cholesky(wide(A)).to(torch.float32)
    return inv_ratio(A, mpslinalg.cholesky_inverse(L.to(device)))


# ---------------------------------------------------------------- benchmarks


#: (case name, batch, n on the CPU, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("one matrix", (), 64, 1024),
    ("batch of 64", (64,), 16, 64),
]


def _register_bench(op: str, call, ref) -> None:
    for label, batch, n_cpu, n_gpu in _BENCH_SHAPES:
        _register_one(op, label, batch, n_cpu, n_gpu, call, ref)


def _register_one(op, label, batch, n_cpu, n_gpu, call, ref) -> None:
    @bench_case(op, f"{label} ({n_cpu}x{n_cpu} on cpu, {n_gpu}x{n_gpu} on gpu) float32")
    def run(device, repeats):
        n = n_cpu if device.type == "cpu" else n_gpu
        A = _hpd(n, 100.0, torch.float32, batch, seed=4).to(device)
        B = torch.randn(*batch, n, 4, device=device)
        L = torch.linalg.cholesky(A)
        return {"mpslinalg": lambda: call(A, L, B), "torch": lambda: ref(A, L, B)}


_register_bench("cholesky", lambda A, L, B: mpslinalg.cholesky(A),
                lambda A, L, B: torch.linalg.cholesky(A))
_register_bench("cholesky_solve", lambda A, L, B: mpslinalg.cholesky_solve(B, L),
                lambda A, L, B: torch.cholesky_solve(B, L))
_register_bench("solve_triangular",
                lambda A, L, B: mpslinalg.solve_triangular(L, B, upper=False),
                lambda A, L, B: torch.linalg.solve_triangular(L, B, upper=False))
