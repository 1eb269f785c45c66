"""svd_lowrank and pca_lowrank against torch's, on every backend."""

from __future__ import annotations

import pytest
import torch

import mpslinalg
from mpslinalg.testing import wide

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests


def _low_rank(m: int, n: int, rank: int, c: bool, batch: tuple = (), seed: int = 0):
    """An exactly rank-``rank`` matrix: with q >= rank the range finder captures it whatever its
    random draw, so ours and torch's reconstruct the same matrix."""
    g = torch.Generator().manual_seed(seed)
    dtype = torch.complex128 if c else torch.float64
    left = torch.randn(*batch, m, rank, generator=g, dtype=dtype)
    right = torch.randn(*batch, rank, n, generator=g, dtype=dtype)
    return left @ right


def _reconstruct(out):
    U, S, V = out
    return (U @ (S.unsqueeze(-1).to(U.dtype) * V.mH), S)


def _samples(c: bool) -> list[Sample]:
    return [
        Sample((_low_rank(30, 8, 3, c, seed=1), 5), desc="30x8, rank 3, q 5"),
        Sample((_low_rank(8, 30, 2, c, (2,), seed=2), 4, 1), desc="wide batch, niter 1"),
        Sample((_low_rank(20, 6, 2, c, seed=3), 4, 2, _low_rank(20, 6, 1, c, seed=4)),
               desc="with M"),
    ]


def _pca_samples(c: bool) -> list[Sample]:
    return [
        Sample((_low_rank(40, 6, 3, c, seed=5), 4), desc="40x6, rank 3"),
        Sample((_low_rank(40, 6, 2, c, (2,), seed=6), 3, False), desc="not centred"),
    ]


_RANDOM = ("the factors depend on the random test matrix, which the generic tests draw "
           "separately for ours and torch's; test_gradients_equal_torchs_for_one_draw")

OPS = [
    OpInfo("svd_lowrank", mpslinalg.svd_lowrank, torch.svd_lowrank, _samples,
           compare=_reconstruct, supports_out=False, grad_args=(),
           bad_samples=lambda: [BadSample((torch.ones(3),), error=(RuntimeError, IndexError,
                                                                    ValueError))],
           skips={"bad_input_torch": "torch's own raises ValueError from a tuple unpacking",
                  "upcast": "torch's computes float16 in float32 and returns float32; "
                            "test_low_precision_is_torchs",
                  "nonfinite": "NaN reaches every factor through the random products; "
                               "test_nonfinite_gives_nan"}),
    OpInfo("pca_lowrank", mpslinalg.pca_lowrank, torch.pca_lowrank, _pca_samples,
           compare=_reconstruct, supports_out=False, grad_args=(),
           bad_samples=lambda: [BadSample((torch.ones(4, 3), 5), error=ValueError,
                                          match="not greater than")],
           skips={"upcast": "as svd_lowrank (test_low_precision_is_torchs)",
                  "nonfinite": "as svd_lowrank (test_nonfinite_gives_nan)"}),
]
instantiate_generic_tests(globals(), OPS)


@pytest.mark.parametrize("fn", ("svd_lowrank", "pca_lowrank"))
def test_gradients_equal_torchs_for_one_draw(backend, fn):
    """The same seed draws the same test matrix: our factors and their gradients are torch's."""
    A0 = backend.tensor(_low_rank(24, 7, 4, False, seed=7)).to(torch.float32)
    grads = []
    for f in (getattr(mpslinalg, fn), getattr(torch, fn)):
        A = A0.clone().requires_grad_()  # one device: one generator draws the test matrix
        torch.manual_seed(11)
        U, S, V = f(A, 3)
        loss = (U @ torch.diag(S) @ V.mT).square().sum() + S.sum()
        grads.append(torch.autograd.grad(loss, A)[0].cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-3)


def test_approximation_of_a_decaying_spectrum(backend):
    """A full-rank matrix with singular values 2^-k: rank 6 + 4 oversampling, 2 iterations,
    recovers the leading singular values (Halko et al. 2011, sec. 10)."""
    g = torch.Generator().manual_seed(8)
    Q1 = torch.linalg.qr(torch.randn(200, 40, generator=g, dtype=torch.float64)).Q
    Q2 = torch.linalg.qr(torch.randn(40, 40, generator=g, dtype=torch.float64)).Q
    S = 2.0 ** -torch.arange(40, dtype=torch.float64)
    A = backend.tensor((Q1 * S) @ Q2.mT).to(torch.float32)
    _, got, _ = mpslinalg.svd_lowrank(A, q=10)
    torch.testing.assert_close(wide(got)[:6], S[:6], rtol=1e-3, atol=1e-5)


def test_low_precision_is_torchs(backend):
    """float16: torch's outcome on the torch backend (the CPU has no half QR); on the metal
    backend the QR and SVD compute in float32 and the factors come back in float16."""
    A = backend.tensor(_low_rank(20, 5, 2, False, seed=9)).to(torch.float16)
    if backend.is_metal:
        U, S, V = mpslinalg.svd_lowrank(A, 3)
        assert U.dtype == S.dtype == V.dtype == torch.float16
        torch.testing.assert_close((U * S) @ V.mT, A, rtol=2e-2, atol=2e-2)
        return
    try:  # torch's outcome on this device
        want = torch.svd_lowrank(A, 3)
    except (RuntimeError, NotImplementedError) as error:
        with pytest.raises(type(error), match="mpslinalg.svd_lowrank"):
            mpslinalg.svd_lowrank(A, 3)
    else:
        assert [x.dtype for x in mpslinalg.svd_lowrank(A, 3)] == [x.dtype for x in want]


def test_nonfinite_gives_nan(backend):
    A = backend.tensor(_low_rank(20, 5, 2, False, seed=10)).to(torch.float32)
    A[3, 1] = float("nan")
    if not backend.is_metal:  # torch's outcome on this device (the CPU raises)
        try:
            torch.manual_seed(0)
            want = torch.svd_lowrank(A, 3)
        except torch.linalg.LinAlgError:
            pytest.raises(torch.linalg.LinAlgError, mpslinalg.svd_lowrank, A, 3)
        else:
            torch.manual_seed(0)
            got = mpslinalg.svd_lowrank(A, 3)
            assert torch.equal(got[1].isnan(), want[1].isnan())
        return
    U, S, V = mpslinalg.svd_lowrank(A, 3)
    assert S.isnan().all()
