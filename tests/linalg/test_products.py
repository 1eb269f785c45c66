"""matmul, multi_dot, vecdot, cross, diagonal, vander and matrix_power against torch, on every
backend."""

from __future__ import annotations

import pytest
import torch

import mpslinalg
from mpslinalg.testing import random_matrix

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests, well_conditioned


def _real(c: bool) -> torch.dtype:
    return torch.complex128 if c else torch.float64


def _r(c: bool, *shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, 2 if c else 1, generator=g, dtype=torch.float64)
    return torch.view_as_complex(x) if c else x[..., 0]


def _matmul_samples(c: bool) -> list[Sample]:
    return [
        Sample((_r(c, 3, 4, seed=1), _r(c, 4, 2, seed=2)), desc="matrices"),
        Sample((_r(c, 2, 1, 3, 4, seed=3), _r(c, 5, 4, 2, seed=4)), desc="broadcast batches"),
        Sample((_r(c, 4, seed=5), _r(c, 2, 4, 3, seed=6)), desc="vector @ batch"),
        Sample((_r(c, 4, seed=7), _r(c, 4, seed=8)), desc="dot"),
        Sample((_r(c, 0, 3, seed=9), _r(c, 3, 2, seed=10)), desc="empty"),
    ]


def _multi_dot_samples(c: bool) -> list[Sample]:
    return [
        Sample(([_r(c, 3, 4, seed=1), _r(c, 4, 5, seed=2), _r(c, 5, 2, seed=3)],),
               desc="three matrices"),
        Sample(([_r(c, 4, seed=4), _r(c, 4, 3, seed=5), _r(c, 3, seed=6)],),
               desc="row vector, matrix, column vector"),
    ]


def _vecdot_samples(c: bool) -> list[Sample]:
    return [
        Sample((_r(c, 2, 3, 4, seed=1), _r(c, 2, 3, 4, seed=2)), desc="last dimension"),
        Sample((_r(c, 4, 3, seed=3), _r(c, 4, 1, seed=4)), {"dim": 0}, desc="dim 0, broadcast"),
    ]


def _cross_samples(c: bool) -> list[Sample]:
    return [
        Sample((_r(c, 2, 5, 3, seed=1), _r(c, 2, 5, 3, seed=2)), desc="batch of 3-vectors"),
        Sample((_r(c, 4, 3, 2, seed=3), _r(c, 1, 3, 2, seed=4)), {"dim": -2},
               desc="dim -2, broadcast"),
    ]


def _diagonal_samples(c: bool) -> list[Sample]:
    A = _r(c, 2, 4, 5, seed=1)
    return [Sample((A,), desc="main"), Sample((A,), {"offset": 1}, desc="above"),
            Sample((A,), {"offset": -2, "dim1": 0, "dim2": 2}, desc="below, dims 0 and 2")]


def _vander_samples(c: bool) -> list[Sample]:
    return [Sample((_r(c, 3, 2, 4, seed=1),), desc="square"),
            Sample((_r(c, 3, seed=2),), {"N": 5}, desc="N = 5")]


def _power_samples(c: bool) -> list[Sample]:
    A = well_conditioned(3, (2,), c, 1)
    out = [Sample((A, n), desc=f"n {n}") for n in (2, 0, 1, 3, 4, 5, 8, -1, -3)]
    out += [Sample((well_conditioned(6, (), c, 2), -2), desc="6x6, n -2"),
            Sample((torch.zeros(0, 3, 3, dtype=_real(c)), 2), desc="empty batch")]
    return out


def _power_bad() -> list[BadSample]:
    singular = torch.ones(2, 3, 3, dtype=torch.float64)
    return [
        BadSample((torch.ones(3, 4), 2), error=RuntimeError, match="square"),
        BadSample((torch.ones(3, 3), 2.0), error=TypeError, match="int"),
        BadSample((singular, -1), error=RuntimeError, match="singular"),
        BadSample((torch.ones(3, 3, dtype=torch.int64), -1), error=RuntimeError,
                  match="floating point"),
    ]


#: Integer and low-precision inputs are torch's own business here (these are torch's functions
#: on every backend): test_integer_and_half_inputs_are_torchs covers them.
_TORCHS = "torch computes float16 / bfloat16 natively; test_integer_and_half_inputs_are_torchs"

OPS = [
    OpInfo("matmul", mpslinalg.matmul, torch.linalg.matmul, _matmul_samples,
           grad_args=(0, 1), nonfinite_args=(0,),
           bad_samples=lambda: [BadSample((torch.ones(2, 3), torch.ones(2, 3)),
                                          error=RuntimeError, match="cannot be multiplied")],
           skips={"upcast": _TORCHS}),
    OpInfo("multi_dot", mpslinalg.multi_dot, torch.linalg.multi_dot, _multi_dot_samples,
           bad_samples=lambda: [BadSample(([torch.ones(2, 3)],), error=RuntimeError,
                                          match="at least 2 tensors")],
           grad_args=(),
           skips={"upcast": _TORCHS,
                  "layouts": "a list argument: test_multi_dot_layouts_and_gradients",
                  "inputs_unmodified": "a list argument: test_multi_dot_layouts_and_gradients",
                  "nonfinite": "a list argument: test_multi_dot_layouts_and_gradients",
                  "meta": "a list argument: test_multi_dot_layouts_and_gradients"}),
    OpInfo("vecdot", mpslinalg.vecdot, torch.linalg.vecdot, _vecdot_samples, grad_args=(0, 1),
           bad_samples=lambda: [BadSample((torch.ones(2, 3), torch.ones(2, 4)),
                                          error=RuntimeError)],
           skips={"upcast": _TORCHS}),
    OpInfo("cross", mpslinalg.cross, torch.linalg.cross, _cross_samples, grad_args=(0, 1),
           bad_samples=lambda: [BadSample((torch.ones(2, 4), torch.ones(2, 4)),
                                          error=RuntimeError, match="length 3")],
           skips={"upcast": _TORCHS}),
    OpInfo("diagonal", mpslinalg.diagonal, torch.linalg.diagonal, _diagonal_samples,
           supports_out=False,
           bad_samples=lambda: [BadSample((torch.ones(3),), error=IndexError)],
           skips={"upcast": _TORCHS}),
    OpInfo("vander", mpslinalg.vander, torch.linalg.vander, _vander_samples, supports_out=False,
           bad_samples=lambda: [BadSample((torch.ones(3),), {"N": 0}, error=RuntimeError,
                                          match="N must be greater than 1")],
           skips={"upcast": _TORCHS}),
    # negative powers invert, raising for singular input: one device read
    OpInfo("matrix_power", mpslinalg.matrix_power, torch.linalg.matrix_power, _power_samples,
           bad_samples=_power_bad, device_reads=1, skips={"upcast": _TORCHS}),
]
instantiate_generic_tests(globals(), OPS)


def test_integer_and_half_inputs_are_torchs(backend):
    """These are torch's functions on every backend: integer and low-precision inputs give
    torch's results on the same device, or torch's refusal there (CUDA has no integer
    matmul)."""
    a = backend.tensor(torch.arange(12).reshape(3, 4))
    b = backend.tensor(torch.arange(12).reshape(4, 3))
    M = backend.tensor(torch.arange(9).reshape(3, 3))
    v = backend.tensor(torch.tensor([1, 2, 3]))
    cases = [(mpslinalg.matmul, torch.linalg.matmul, (a, b)),
             (mpslinalg.matrix_power, torch.linalg.matrix_power, (M, 3)),
             (mpslinalg.cross, torch.linalg.cross, (v, v.flip(0))),
             (mpslinalg.vander, torch.linalg.vander, (v,))]
    for dtype in (torch.float16, torch.bfloat16):
        x = backend.tensor(torch.randn(3, 3)).to(dtype)
        cases += [(mpslinalg.matmul, torch.linalg.matmul, (x, x)),
                  (mpslinalg.vecdot, torch.linalg.vecdot, (x, x))]
    for ours, theirs, args in cases:
        try:
            want = theirs(*args)
        except (RuntimeError, NotImplementedError) as error:
            with pytest.raises(type(error), match=f"mpslinalg.{ours.__name__}"):
                ours(*args)
            continue
        torch.testing.assert_close(ours(*args), want, rtol=0, atol=0)


def test_diagonal_is_a_view(backend):
    A = backend.tensor(torch.randn(2, 3, 3))
    d = mpslinalg.diagonal(A)
    d.zero_()
    assert torch.equal(A.diagonal(dim1=-2, dim2=-1).cpu(), torch.zeros(2, 3))


def test_multi_dot_layouts_and_gradients(backend):
    mats = [backend.tensor(random_matrix(n, torch.float32, (), seed=n, m=m))
            for m, n in ((3, 4), (4, 5), (5, 2))]
    mats[1] = mats[1].mT.contiguous().mT  # a transposed layout
    want = torch.linalg.multi_dot([m.cpu() for m in mats])
    torch.testing.assert_close(mpslinalg.multi_dot(mats).cpu(), want)
    leaves = [m.detach().clone().requires_grad_() for m in mats]
    (g,) = torch.autograd.grad(mpslinalg.multi_dot(leaves).sum(), leaves[0])
    torch.testing.assert_close(g.cpu(), torch.ones(3, 2) @ (mats[1] @ mats[2]).cpu().mT)


@pytest.mark.parametrize("n", (-3, -1, 4, 11))
def test_matrix_power_against_repeated_products(backend, n):
    A = backend.tensor(well_conditioned(4, (2,), False, 5)).to(torch.float32)
    base = torch.linalg.inv(A.double().cpu()) if n < 0 else A.double().cpu()
    want = base
    for _ in range(abs(n) - 1):
        want = want @ base
    torch.testing.assert_close(mpslinalg.matrix_power(A, n).cpu().double(), want,
                               rtol=1e-4, atol=1e-5)
