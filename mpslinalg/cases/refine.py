"""Check cases of the float64-class path (solve / inv of float64 and complex128 on the metal
backend: iterative refinement on float32 kernels) and of the double-float self-test.

The self-test fails loudly when the compiler dropped the error terms of the double-float
arithmetic (fast math). The solve cases return the larger of the forward and backward error
ratios to LAPACK's dgesv (bound 10: within 10x of LAPACK); beyond float32 factors' reach the
failure must be reported through ``info``.
"""

from __future__ import annotations

import numpy as np
import torch

import mpslinalg

from .._core.errors import UNREFINED_INFO
from .._core.registry import check_case
from ..linalg import refine_metal
from ..testing import matrix_with_spread

#: Within this factor of LAPACK's forward and backward errors (the issue's target).
LAPACK_FACTOR = 10.0


def _home(device: torch.device) -> torch.device:
    """Where float64 tensors live for ``device``: the CPU when it is the Apple GPU (MPS has no
    float64; the metal backend works them on the GPU and returns them to the CPU)."""
    return torch.device("cpu") if device.type == "mps" else device


def exact_solution(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A X = B to well beyond float64: LAPACK's solution refined with long-double residuals."""
    import scipy.linalg

    wide = np.clongdouble if A.dtype.kind == "c" else np.longdouble
    X = scipy.linalg.solve(A, B).astype(wide)
    for _ in range(4):
        r = B.astype(wide) - A.astype(wide) @ X
        X = X + scipy.linalg.solve(A, r.astype(A.dtype))
    return X


def solve_errors(A: np.ndarray, B: np.ndarray, X: np.ndarray, exact: np.ndarray
                 ) -> tuple[float, float]:
    """(normwise forward error, normwise backward error ||B - A X||max / (||A||inf ||X||max +
    ||B||max)), the largest over a batch."""
    wide = exact.dtype
    fwd = np.abs(X - exact).max(axis=(-2, -1)) / np.abs(exact).max(axis=(-2, -1))
    r = B.astype(wide) - A.astype(wide) @ X.astype(wide)
    den = np.abs(A).sum(-1).max(-1) * np.abs(X).max(axis=(-2, -1)) + np.abs(B).max(axis=(-2, -1))
    return float(fwd.max()), float((np.abs(r).max(axis=(-2, -1)) / den).max())


@check_case("double_float", "self-test: error terms survive compilation", bound=1.0)
def _selftest(device) -> float:
    if mpslinalg.get_backend() == "torch":
        return 0.0  # no Metal kernel on that path: nothing of ours to test
    rows = refine_metal.selftest(device)
    lost = [r.name for r in rows if not r.ok]
    if lost:
        raise AssertionError(
            f"double-float arithmetic is broken on {device}: {', '.join(lost)} failed (error "
            "terms lost: was the library compiled with fast math / reassociation?)")
    return max(r.error / r.bound for r in rows if r.bound)


def _register(dtype: torch.dtype, cond: float) -> None:
    name = str(dtype).removeprefix("torch.")

    @check_case("solve", f"{name} cond {cond:.0e} (refined, ratio to LAPACK)",
                bound=LAPACK_FACTOR)
    def _solve(device) -> float:
        import scipy.linalg

        A = matrix_with_spread(48, cond, dtype, (2,), seed=11)
        B = matrix_with_spread(48, 10.0, dtype, (2,), seed=12)[..., :2]
        home = _home(device)
        X, info = mpslinalg.solve_ex(A.to(home), B.to(home))
        if info.cpu().any():
            raise AssertionError(f"refinement reported failure: info={info.tolist()}")
        An, Bn = A.numpy(), B.numpy()
        exact = exact_solution(An, Bn)
        fwd, berr = solve_errors(An, Bn, X.cpu().numpy(), exact)
        fwd_ref, berr_ref = solve_errors(An, Bn, scipy.linalg.solve(An, Bn), exact)
        return max(fwd / fwd_ref, berr / berr_ref)


for _dtype in (torch.float64, torch.complex128):
    _register(_dtype, 1e6)


@check_case("solve", "float64 cond 1e10 (beyond float32 factors: reported)")
def _unreachable(device) -> float:
    A = matrix_with_spread(48, 1e10, torch.float64, seed=13)
    home = _home(device)
    _, info = mpslinalg.solve_ex(A.to(home), A[:, :1].to(home))
    if mpslinalg.get_backend() != "torch" and int(info) != UNREFINED_INFO:
        raise AssertionError(f"a float32-grade answer was not reported: info={int(info)}")
    return 0.0


@check_case("inv", "float64 cond 1e5 (refined, ratio to LAPACK)", bound=LAPACK_FACTOR)
def _inv(device) -> float:
    import scipy.linalg

    A = matrix_with_spread(32, 1e5, torch.float64, seed=14)
    ours = mpslinalg.inv(A.to(_home(device))).cpu().numpy()
    An = A.numpy()
    exact = exact_solution(An, np.eye(32))
    fwd, _ = solve_errors(An, np.eye(32), ours, exact)
    fwd_ref, _ = solve_errors(An, np.eye(32), scipy.linalg.inv(An), exact)
    return fwd / fwd_ref
