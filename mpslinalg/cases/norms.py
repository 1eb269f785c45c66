"""Check and bench cases of the norms, condition numbers and the matrix exponential
(mpslinalg/linalg/norms.py, matrix_exp.py).

Checks: ``|norm - norm_ref| / (n eps ||A||_2)`` for every order of `matrix_norm` and
``|cond_p - cond_p_ref| / (n eps cond_2 cond_p)`` for `cond` (a singular value's error is about
eps s_max, so a condition number's relative error is about eps cond_2), and
``||e^A - e^A_ref|| / (eps (1 + ||A||) ||e^A||)`` for `matrix_exp` (Higham 2005, sec. 3:
squaring amplifies the approximant's error by up to ||A||), references in float64 by NumPy /
SciPy.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import eps, matrix_with_spread, random_matrix, wide

_ORDERS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


@check_case("matrix_norm", "every order, 4x4, condition number 1e3, 200 float32")
def _check_matrix_norm(device: torch.device) -> float:
    A = matrix_with_spread(4, 1e3, torch.float32, (200,), seed=1).to(device)
    ref = wide(A).cpu().numpy()
    scale = np.linalg.norm(ref, 2, axis=(-2, -1)) * 4 * eps(A.dtype)
    worst = 0.0
    for ord in _ORDERS:
        got = wide(mpslinalg.matrix_norm(A, ord)).cpu().numpy()
        worst = max(worst, float((np.abs(got - np.linalg.norm(ref, ord, axis=(-2, -1)))
                                  / scale).max()))
    return worst


@check_case("cond", "p None, 2, -2, 1, 'fro', 3x3, condition number 1e3, 200 float32")
def _check_cond(device: torch.device) -> float:
    A = matrix_with_spread(3, 1e3, torch.float32, (200,), seed=2).to(device)
    ref = wide(A).cpu().numpy()
    worst = 0.0
    for p in (None, 2, -2, 1, "fro"):
        want = np.linalg.cond(ref, p)
        got = wide(mpslinalg.cond(A, p)).cpu().numpy()
        bound = 3 * eps(A.dtype) * np.linalg.cond(ref) * want
        worst = max(worst, float((np.abs(got - want) / bound).max()))
    return worst


@check_case("matrix_exp", "3x3 and 8x8, norms 1e-3 .. 1e2, spectra shifted left, float32")
def _check_matrix_exp(device: torch.device) -> float:
    import scipy.linalg

    worst = 0.0
    for n in (3, 8):
        for norm in (1e-3, 1.0, 1e2):
            A = random_matrix(n, torch.float64, (20,), seed=n).double()
            A = A / torch.linalg.matrix_norm(A, 1)[..., None, None] * norm
            A = A - torch.linalg.eigvals(A).real.amax(-1)[..., None, None] * torch.eye(n)
            got = wide(mpslinalg.matrix_exp(A.float().to(device))).cpu().numpy()
            ref = np.stack([scipy.linalg.expm(a) for a in A.float().double().numpy()])
            err = np.abs(got - ref).max((-2, -1)) / np.abs(ref).max((-2, -1))
            worst = max(worst, float((err / (eps(torch.float32) * (1 + norm))).max()))
    return worst


def _register_bench(fn: str, label: str, call, torch_call, cpu_batch: int, gpu_batch: int,
                    n: int = 3) -> None:
    @bench_case(fn, f"{label}, ({cpu_batch}, {n}, {n}) on cpu, ({gpu_batch}, {n}, {n}) on gpu, "
                    "float32")
    def run(device, repeats):
        batch = cpu_batch if device.type == "cpu" else gpu_batch
        A = random_matrix(n, torch.float32, (batch,), seed=3).to(device)
        return {"mpslinalg": lambda: call(A), "torch": lambda: torch_call(A)}


_register_bench("matrix_norm", "ord 2", lambda A: mpslinalg.matrix_norm(A, 2),
                lambda A: torch.linalg.matrix_norm(A, 2), 100_000, 1_000_000)
_register_bench("cond", "p None", mpslinalg.cond, torch.linalg.cond, 100_000, 1_000_000)
_register_bench("matrix_exp", "norm about 3", lambda A: mpslinalg.matrix_exp(A),
                lambda A: torch.linalg.matrix_exp(A), 100_000, 1_000_000)
