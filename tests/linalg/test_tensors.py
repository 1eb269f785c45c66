"""tensorinv and tensorsolve against NumPy (float64) and torch, on every backend."""

from __future__ import annotations

import numpy as np
import torch

import mpslinalg
from mpslinalg.testing import count_launches, wide

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests, well_conditioned


def _tensor(c: bool, shape: tuple[int, ...], split: int, seed: int) -> torch.Tensor:
    """A well-conditioned tensor whose first ``split`` dimensions form the rows."""
    rows = int(np.prod(shape[:split]))
    return well_conditioned(rows, (), c, seed).reshape(shape)


def _tensorinv_samples(c: bool) -> list[Sample]:
    return [
        Sample((_tensor(c, (4, 2, 2), 1, 1), 1), desc="(4, 2, 2), ind 1"),
        Sample((_tensor(c, (2, 3, 6), 2, 2),), desc="(2, 3, 6), ind 2"),
        Sample((_tensor(c, (2, 2, 2, 2), 2, 3), 2), desc="(2, 2, 2, 2): the small path"),
    ]


def _tensorsolve_samples(c: bool) -> list[Sample]:
    A = _tensor(c, (2, 3, 6), 2, 4)
    return [
        Sample((A, well_conditioned(3, (2,), c, 5)[..., 0]), desc="(2, 3, 6) with (2, 3)"),
        Sample((_tensor(c, (6, 2, 3), 1, 6), well_conditioned(3, (2,), c, 7)[..., 0], (0,)),
               desc="dims (0,)"),
    ]


#: Opt-outs shared by both functions.
_SKIPS = {"upcast": "torch refuses float16 / bfloat16 (low precision inverses / LU on the CPU)",
          "nonfinite": "no batch dimensions: a NaN anywhere reaches every entry through the "
                       "inverse; test_nonfinite_reaches_every_entry checks that"}

OPS = [
    OpInfo("tensorinv", mpslinalg.tensorinv, torch.linalg.tensorinv, _tensorinv_samples,
           bad_samples=lambda: [
               BadSample((torch.ones(4, 2, 2), 0), error=RuntimeError, match="positive"),
               BadSample((torch.ones(4, 2, 3), 1), error=RuntimeError),
               BadSample((torch.zeros(4, 2, 2), 1), error=RuntimeError, match="singular")],
           device_reads=1, skips=_SKIPS),
    OpInfo("tensorsolve", mpslinalg.tensorsolve, torch.linalg.tensorsolve, _tensorsolve_samples,
           grad_args=(0, 1), nonfinite_args=(0,), device_reads=1,
           bad_samples=lambda: [BadSample((torch.ones(2, 3, 5), torch.ones(2, 3)),
                                          error=RuntimeError, match="prod")],
           skips=_SKIPS),
]
instantiate_generic_tests(globals(), OPS)


def test_against_numpy(backend):
    for dtype in (torch.float32, torch.complex64):
        A = backend.tensor(_tensor(dtype.is_complex, (2, 3, 3, 2), 2, 8)).to(dtype)
        np.testing.assert_allclose(wide(mpslinalg.tensorinv(A)).numpy(),
                                   np.linalg.tensorinv(wide(A).numpy()), rtol=1e-4, atol=1e-5)
        B = backend.tensor(well_conditioned(3, (2,), dtype.is_complex, 9)[..., 0]).to(dtype)
        np.testing.assert_allclose(wide(mpslinalg.tensorsolve(A, B)).numpy(),
                                   np.linalg.tensorsolve(wide(A).numpy(), wide(B).numpy()),
                                   rtol=1e-4, atol=1e-5)


def test_small_tensors_take_one_launch_on_metal(metal_backend):
    """A (2, 2, 2, 2) tensor is a 4x4 matrix: one n <= 4 kernel."""
    A = metal_backend.tensor(_tensor(False, (2, 2, 2, 2), 2, 10)).to(torch.float32)
    with count_launches() as launches:
        mpslinalg.tensorinv(A)
    assert launches.names == ["small_inv_float32_n4"], launches.names


def test_nonfinite_reaches_every_entry(backend):
    A = backend.tensor(_tensor(False, (2, 2, 2, 2), 2, 11)).to(torch.float32)
    A[0, 1, 0, 1] = float("nan")
    assert not mpslinalg.tensorinv(A).isfinite().any()
    assert not mpslinalg.tensorsolve(A, backend.tensor(torch.ones(2, 2))).isfinite().any()
