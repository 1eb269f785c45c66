"""matrix_exp against SciPy (float64) and torch, on every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

import mpslinalg
from mpslinalg.linalg.matrix_exp import matrix_exp_op
from mpslinalg.testing import count_host_syncs, random_matrix, wide

from opdb import OpInfo, Sample, instantiate_generic_tests, square_bad_samples, well_conditioned


def _samples(c: bool) -> list[Sample]:
    dtype = torch.complex128 if c else torch.float64
    return [
        Sample((well_conditioned(3, (2,), c, 1),), desc="(2, 3, 3)"),
        Sample((well_conditioned(6, (), c, 2) * 3,), desc="6x6, norm about 30: squarings"),
        Sample((well_conditioned(4, (2, 2), c, 3) * 1e-3,), desc="small norms"),
        Sample((torch.zeros(0, 3, 3, dtype=dtype),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=dtype),), desc="0x0"),
    ]


OPS = [
    OpInfo("matrix_exp", mpslinalg.matrix_exp, torch.linalg.matrix_exp, _samples,
           bad_samples=lambda: square_bad_samples()[:3], supports_out=False, device_reads=1,
           small_path=True,
           rtol={torch.float32: 1e-3, torch.complex64: 1e-3, torch.float64: 1e-10,
                 torch.complex128: 1e-10}),
]
instantiate_generic_tests(globals(), OPS)


def _relative_error(got: torch.Tensor, A: torch.Tensor) -> float:
    want = np.stack([scipy.linalg.expm(a) for a in wide(A).reshape(-1, *A.shape[-2:]).numpy()])
    want = torch.as_tensor(want).reshape(got.shape)
    return float(((wide(got) - want).abs().amax((-2, -1))
                  / want.abs().amax((-2, -1))).max())


@pytest.mark.parametrize("n", (1, 2, 3, 4, 6))
@pytest.mark.parametrize("norm", (1e-8, 1e-3, 1.0, 10.0, 1e2, 1e3))
def test_against_scipy_across_norms(backend, norm, n):
    """||A|| from 1e-8 to 1e3 (up to 9 squarings past theta_7), n <= 4 (the small path: on
    the torch backend its float32 batches of n >= 2) and 6: within 300 n eps * (1 + ||A||) of
    SciPy's float64 expm, relative to the largest entry (squaring amplifies the approximant's
    error by up to ||A||; Higham 2005, sec. 3)."""
    for dtype in (torch.float32, torch.complex64):
        wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
        A = random_matrix(n, dtype, (3,), seed=int(math.log10(norm) + 10)).to(wide_dtype)
        A = A / torch.linalg.matrix_norm(A, 1)[..., None, None] * norm
        # the spectrum shifted to real parts <= 0 keeps e^A representable and not tiny
        abscissa = torch.linalg.eigvals(A).real.amax(-1)
        A = A - abscissa[..., None, None] * torch.eye(n, dtype=A.dtype)
        A = backend.tensor(A.to(dtype))
        eps = torch.finfo(torch.float32).eps
        assert _relative_error(mpslinalg.matrix_exp(A), A) <= 300 * n * eps * (1 + norm)


def test_nilpotent_and_non_normal(backend):
    """A strictly upper triangular matrix: exp is the finite series; a Jordan block and a
    highly non-normal matrix (departure from normality 1e4) against SciPy."""
    N = torch.triu(torch.randn(5, 5, generator=torch.Generator().manual_seed(4)), 1)
    want = torch.eye(5) + N + N @ N / 2 + N @ N @ N / 6 + N @ N @ N @ N / 24
    got = mpslinalg.matrix_exp(backend.tensor(N)).cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    J = -torch.eye(4) + torch.diag(torch.ones(3), 1)
    assert _relative_error(mpslinalg.matrix_exp(backend.tensor(J)), J) <= 1e-5
    # non-normal: the exponential's condition number is about ||T|| (Higham 2005, sec. 1)
    T = torch.tensor([[-1.0, 1e4], [0.0, -2.0]])
    eps = torch.finfo(torch.float32).eps
    assert _relative_error(mpslinalg.matrix_exp(backend.tensor(T)), T) <= 10 * eps * 1e4


def test_rule_against_finite_differences_float64():
    """The block-triangular derivative, in float64 (the op with torch's forward)."""
    A = random_matrix(4, torch.float64, (2,), seed=5).requires_grad_()
    torch.autograd.gradcheck(lambda A: matrix_exp_op(A, "torch", False, ""), (A,))
    C = random_matrix(3, torch.complex128, (), seed=6).requires_grad_()
    torch.autograd.gradcheck(lambda A: matrix_exp_op(A, "torch", False, ""), (C,))


def test_device_reads_on_metal(metal_backend):
    """n > 4: one device read (the batch's number of squarings); n <= 4: none (the small
    kernel squares each matrix its own number of times)."""
    for n, reads in ((6, 1), (3, 0)):
        A = metal_backend.tensor(random_matrix(n, torch.float32, (8,), seed=7) * 20)
        with count_host_syncs() as syncs:
            mpslinalg.matrix_exp(A)
        assert len(syncs.calls) == reads, syncs.calls


def test_nonfinite_matrix_leaves_the_others(backend):
    """NaN / Inf in one matrix of the batch stays there (the metal backend, and the small path
    on the torch backend); where torch's own serves and spreads it (its degree chosen for the
    batch), torch's result on this device."""
    A = backend.tensor(random_matrix(3, torch.float32, (3,), seed=8) * 10)
    clean = mpslinalg.matrix_exp(A)
    for value in (math.nan, math.inf):
        B = A.clone()
        B[1, 0, 2] = value
        got = mpslinalg.matrix_exp(B)
        theirs = torch.linalg.matrix_exp(B)
        spread = not torch.equal(theirs[[0, 2]], torch.linalg.matrix_exp(A)[[0, 2]])
        if not backend.is_metal and spread:
            torch.testing.assert_close(got, theirs, equal_nan=True)
            continue
        assert not got[1].isfinite().all()
        torch.testing.assert_close(got[[0, 2]], clean[[0, 2]])
