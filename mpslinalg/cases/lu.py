"""Check and benchmark cases of the LU family (lu_factor, solve, det, slogdet, inv).

Checks compute with the mpslinalg API on fixed hard cases and return LAPACK's test ratios
against the exact input (xGET01 / xGET02 / xGET03, 1-norms in float64); a wrong singular
handling raises. Benchmarks time the public functions against torch.linalg on the device and
SciPy on the host, interleaved.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import eps, inv_ratio, lu_ratio, matrix_with_spread, solve_ratio, wide


def _matrix(n: int, cond: float, dtype: torch.dtype, batch=(), seed: int = 0) -> torch.Tensor:
    return matrix_with_spread(n, cond, dtype, batch, seed)


_HARD = {
    "ill-conditioned 1e6": dict(n=64, cond=1e6, dtype=torch.float32, batch=()),
    "129x129 (Apple LU boundary)": dict(n=129, cond=10.0, dtype=torch.float32, batch=()),
    "complex64 batched": dict(n=33, cond=100.0, dtype=torch.complex64, batch=(4,)),
}


def _register_accuracy(name: str, spec: dict) -> None:
    def inputs(device):
        A = _matrix(spec["n"], spec["cond"], spec["dtype"], spec["batch"], seed=1).to(device)
        B = _matrix(spec["n"], 10.0, spec["dtype"], spec["batch"], seed=2)[..., :3].to(device)
        return A, B

    @check_case("lu_factor", name)
    def _lu(device):
        A, _ = inputs(device)
        return lu_ratio(A, *torch.lu_unpack(*mpslinalg.lu_factor(A)))

    @check_case("solve", name)
    def _solve(device):
        A, B = inputs(device)
        return solve_ratio(A, mpslinalg.solve(A, B), B)

    @check_case("inv", name)
    def _inv(device):
        A, _ = inputs(device)
        return inv_ratio(A, mpslinalg.inv(A))

    @check_case("slogdet", name)
    def _slogdet(device):
        # |log|det| error| / (n cond eps): the first-order bound, as a ratio.
        A, _ = inputs(device)
        sign, logabsdet = mpslinalg.slogdet(A)
        ref_sign, ref_log = np.linalg.slogdet(wide(A).numpy())
        n, cond = spec["n"], spec["cond"]
        err = (wide(logabsdet) - torch.as_tensor(ref_log)).abs().max()
        err = max(float(err), float((wide(sign) - torch.as_tensor(ref_sign)).abs().max()))
        return err / (n * cond * eps(A.dtype))


for _name, _spec in _HARD.items():
    _register_accuracy(_name, _spec)


@check_case("det", "singular batch (exact zero pivots)")
def _det_singular(device) -> float:
    A = _matrix(40, 10.0, torch.float32, (3,), seed=3)
    A[1, :, 30:] = 0  # exactly singular: columns 30.. zero
    A = A.to(device)
    d = mpslinalg.det(A)
    sign, logabsdet = mpslinalg.slogdet(A)
    _, _, info = mpslinalg.lu_factor_ex(A)
    if d[1] != 0 or sign[1] != 0 or logabsdet[1] != -math.inf or info.cpu().tolist() != [0, 31, 0]:
        raise AssertionError(f"singular element mishandled: det={d[1]}, sign={sign[1]}, "
                             f"logabsdet={logabsdet[1]}, info={info.tolist()}")
    try:
        mpslinalg.solve(A, A[..., :1])
    except mpslinalg.LinAlgError as err:
        if "(Batch element 1)" not in str(err):
            raise
    else:
        raise AssertionError("solve did not raise for a singular matrix")
    ref = torch.as_tensor(np.linalg.det(wide(A).numpy()))
    keep = [0, 2]
    return float(((wide(d)[keep] - ref[keep]).abs() / ref[keep].abs()).max()
                 / (40 * 10.0 * eps(A.dtype)))


# ---------------------------------------------------------------- benchmarks


#: (case name, batch, n on the CPU, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("one matrix", (), 64, 1024),
    ("batch of 64", (64,), 16, 64),
]


def _scipy_loop(name: str):
    """``scipy.linalg.<name>`` over the batch (None when SciPy is not installed)."""
    try:
        import scipy.linalg
    except ImportError:
        return None
    fn = getattr(scipy.linalg, name)
    takes_b = name == "solve"

    def run(A, B):
        A2, B2 = A.reshape(-1, *A.shape[-2:]), B.reshape(-1, *B.shape[-2:])
        return [fn(a, b) if takes_b else fn(a) for a, b in zip(A2, B2, strict=True)]

    return run


def _register_bench(op: str, call, ref) -> None:
    for label, batch, n_cpu, n_gpu in _BENCH_SHAPES:
        _register_one(op, label, batch, n_cpu, n_gpu, call, ref)


def _register_one(op, label, batch, n_cpu, n_gpu, call, ref) -> None:
    @bench_case(op, f"{label} ({n_cpu}x{n_cpu} on cpu, {n_gpu}x{n_gpu} on gpu) float32")
    def run(device, repeats):
        n = n_cpu if device.type == "cpu" else n_gpu
        A = _matrix(n, 10.0, torch.float32, batch, seed=4).to(device)
        B = torch.randn(*batch, n, 4, device=device)
        contenders = {"mpslinalg": lambda: call(A, B), "torch": lambda: ref(A, B)}
        scipy_call = _scipy_loop(op)
        if scipy_call is not None:
            An, Bn = A.cpu().numpy(), B.cpu().numpy()
            contenders["scipy"] = lambda: scipy_call(An, Bn)
        return contenders


_register_bench("solve", mpslinalg.solve, torch.linalg.solve)
_register_bench("lu_factor", lambda A, B: mpslinalg.lu_factor(A),
                lambda A, B: torch.linalg.lu_factor(A))
_register_bench("det", lambda A, B: mpslinalg.det(A), lambda A, B: torch.linalg.det(A))
_register_bench("inv", lambda A, B: mpslinalg.inv(A), lambda A, B: torch.linalg.inv(A))
