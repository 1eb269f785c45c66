"""vector_norm, matrix_norm, norm and cond against NumPy (float64) and torch, on every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mpslinalg
from mpslinalg._core import torch_bugs
from mpslinalg.testing import count_launches, matrix_with_spread, wide

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests, well_conditioned

MATRIX_ORDS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)
COND_ORDS = (None, "fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


def _real(c: bool) -> torch.dtype:
    return torch.complex128 if c else torch.float64


def _vector_samples(c: bool) -> list[Sample]:
    x = well_conditioned(4, (3,), c, 1)
    return [
        Sample((x,), desc="all elements"),
        Sample((x, 1, (-1,)), desc="ord 1 over the last dimension"),
        Sample((x, math.inf, (0, 2), True), desc="max over two dimensions, keepdim"),
        Sample((x, -math.inf, -2), desc="min"),
        Sample((x, 0.5, 1), desc="ord 0.5"),
        Sample((x[0, 0],), desc="a vector"),
        Sample((torch.zeros(0, 3, dtype=_real(c)), 2, 1), desc="empty"),
    ]


def _matrix_samples(c: bool) -> list[Sample]:
    out = [Sample((well_conditioned(3, (2,), c, 2), ord), desc=f"ord {ord}")
           for ord in MATRIX_ORDS]
    out += [
        Sample((well_conditioned(3, (), c, 3, m=5), 2), desc="5x3, ord 2"),
        Sample((well_conditioned(6, (), c, 4), "nuc", (0, 1), True), desc="6x6 nuc keepdim"),
        Sample((well_conditioned(4, (2,), c, 5), -2, (2, 0)), desc="ord -2 over (2, 0)"),
        Sample((torch.zeros(0, 3, 3, dtype=_real(c)), 2), desc="empty batch"),
    ]
    return out


def _norm_samples(c: bool) -> list[Sample]:
    A = well_conditioned(3, (2,), c, 6)
    return [
        Sample((A,), desc="all elements"),
        Sample((A[0], "nuc"), desc="2-D with an order: a matrix norm"),
        Sample((A[0, 0], 3), desc="1-D ord 3"),
        Sample((A, 2, (1, 2)), desc="2-tuple dim: ord 2 matrix norm"),
        Sample((A, 1, 2, True), desc="int dim: vector norm, keepdim"),
    ]


def _cond_samples(c: bool) -> list[Sample]:
    A = well_conditioned(3, (2,), c, 7)
    out = [Sample((A, p), desc=f"p {p}") for p in COND_ORDS]
    out += [
        Sample((well_conditioned(3, (), c, 8, m=5),), desc="5x3, p None"),
        Sample((well_conditioned(6, (), c, 9), 1), desc="6x6, p 1"),
        Sample((torch.zeros(2, 0, 0, dtype=_real(c)), 1), desc="0x0"),
    ]
    return out


def _matrix_bad() -> list[BadSample]:
    A = torch.ones(2, 3, 3)
    return [
        BadSample((torch.ones(3),), error=RuntimeError, match="at least 2 dimensions"),
        BadSample((A, 3), error=RuntimeError, match="Order 3 not supported"),
        BadSample((A, 2, (0, 0)), error=RuntimeError, match="dims must be different"),
        BadSample((A.long(),), error=RuntimeError, match="floating point or complex"),
    ]


def _cond_bad() -> list[BadSample]:
    return [
        BadSample((torch.ones(3, 4), 1), error=RuntimeError, match="square"),
        BadSample((torch.ones(3, 3), 3), error=RuntimeError, match="invalid norm type"),
    ]


def _cond_ref(A, p=None, *, out=None):
    """torch.linalg.cond; where torch cannot differentiate it (mpslinalg._core.torch_bugs),
    torch's formula out of place: torch's matrix norms of A and of its inverse."""
    if not torch_bugs.cond_gradient_affected(A, p):
        return torch.linalg.cond(A, p, out=out)
    inv, info = torch.linalg.inv_ex(A)
    inv = inv.masked_fill((info > 0)[..., None, None], math.inf)
    return torch.linalg.matrix_norm(A, p) * torch.linalg.matrix_norm(inv, p)


OPS = [
    OpInfo("vector_norm", mpslinalg.vector_norm, torch.linalg.vector_norm, _vector_samples,
           bad_samples=lambda: [BadSample((torch.ones(3).long(),), error=RuntimeError,
                                          match="floating point or complex")],
           skips={"upcast": "torch computes float16 / bfloat16 norms natively; "
                            "test_low_precision_is_torchs compares them"}),
    OpInfo("matrix_norm", mpslinalg.matrix_norm, torch.linalg.matrix_norm, _matrix_samples,
           bad_samples=_matrix_bad,
           skips={"upcast": "torch refuses float16 / bfloat16 (test_low_precision_is_torchs)"}),
    OpInfo("norm", mpslinalg.norm, torch.linalg.norm, _norm_samples,
           bad_samples=lambda: [BadSample((torch.ones(2, 2, 2), 2), error=RuntimeError,
                                          match="1D or 2D")],
           skips={"upcast": "torch refuses float16 / bfloat16 matrix norms and computes "
                            "vector norms natively (test_low_precision_is_torchs)"}),
    OpInfo("cond", mpslinalg.cond, _cond_ref, _cond_samples, bad_samples=_cond_bad,
           skips={"upcast": "torch refuses float16 / bfloat16 (test_low_precision_is_torchs)",
                  "nonfinite": "the reference, torch.linalg.cond on the CPU, raises LinAlgError "
                               "for NaN input (its svdvals), so there is no result to compare "
                               "with; test_cond_nonfinite checks ours"}),
]
instantiate_generic_tests(globals(), OPS)


def test_against_numpy(backend):
    """Every order of NumPy's `norm` and `cond`, float64 reference, condition number 1e3: the
    norms within 30 n eps ||A||_2 (the perturbation bound of singular values, with LAPACK's
    factor 30), the condition numbers within 30 n cond eps relatively."""
    n, cond = 4, 1e3
    for dtype in (torch.float32, torch.complex64):
        A = backend.tensor(matrix_with_spread(n, cond, dtype, (3,), seed=11))
        ref = wide(A).numpy()
        eps = torch.finfo(A.real.dtype).eps
        spectral = np.linalg.norm(ref, 2, axis=(-2, -1))
        for ord in MATRIX_ORDS:
            got = wide(mpslinalg.matrix_norm(A, ord)).numpy()
            want = np.linalg.norm(ref, ord, axis=(-2, -1))
            np.testing.assert_array_less(np.abs(got - want), 30 * n * eps * spectral * n,
                                         err_msg=f"norm {ord}")
        for p in COND_ORDS:
            got = wide(mpslinalg.cond(A, p)).numpy()
            want = np.linalg.cond(ref, p)
            np.testing.assert_allclose(got, want, rtol=30 * n * cond * eps, err_msg=f"cond {p}")


def test_cond_of_singular_input_is_infinite(backend):
    """(For 'nuc' torch takes the singular values of the infinite inverse: no answer to match.)"""
    A = backend.tensor(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
    for p in torch_bugs.COND_BY_INVERSE:
        assert mpslinalg.cond(A, p).item() == math.inf, p
        assert torch.linalg.cond(A.cpu(), p).item() == math.inf, p


def test_low_precision_is_torchs(backend):
    """float16 / bfloat16: vector norms and the Frobenius norm natively as torch; the spectral
    matrix norms refused as torch refuses them; cond: torch's error on the torch backend (the
    CPU has no half SVD), computed in float32 and returned in the input's dtype on the metal
    backend."""
    for dtype in (torch.float16, torch.bfloat16):
        x = backend.tensor(torch.randn(3, 3)).to(dtype)
        torch.testing.assert_close(mpslinalg.vector_norm(x).cpu(),
                                   torch.linalg.vector_norm(x.cpu()))
        torch.testing.assert_close(mpslinalg.matrix_norm(x).cpu(),
                                   torch.linalg.matrix_norm(x.cpu()))
        with pytest.raises(RuntimeError, match="mpslinalg.matrix_norm: Low precision"):
            mpslinalg.matrix_norm(x, 2)
        if backend.is_metal:
            got = mpslinalg.cond(x)
            assert got.dtype == dtype
            torch.testing.assert_close(got.float(), mpslinalg.cond(x.float()), rtol=2e-2, atol=0)
        else:  # torch's outcome on this device (the CPU has no half SVD)
            try:
                want = torch.linalg.cond(x)
            except (RuntimeError, NotImplementedError) as error:
                with pytest.raises(type(error), match="mpslinalg.cond"):
                    mpslinalg.cond(x)
            else:
                torch.testing.assert_close(mpslinalg.cond(x), want)


def test_spectral_orders_take_svdvals_on_metal(metal_backend):
    """One svdvals launch (the n <= 4 path) serves a batch of 3x3 spectral norms."""
    A = metal_backend.tensor(torch.randn(64, 3, 3))
    with count_launches() as launches:
        mpslinalg.matrix_norm(A, 2)
    assert len(launches.names) == 1, launches.names


def test_cond_gradient_where_torchs_fails(backend):
    """torch's cond has no gradient for the orders through the inverse; ours equals the
    gradient of torch's formula computed out of place."""
    A = backend.tensor(well_conditioned(3, (2,), False, 12)).to(torch.float32)
    for p in torch_bugs.COND_BY_INVERSE:
        X = A.detach().clone().requires_grad_()
        with pytest.raises(RuntimeError, match="inplace operation"):
            torch.linalg.cond(X.cpu(), p).sum().backward()
        (grad,) = torch.autograd.grad(mpslinalg.cond(X, p).sum(), X)
        Y = A.detach().cpu().double().requires_grad_()
        (want,) = torch.autograd.grad(_cond_ref(Y, p).sum(), Y)
        torch.testing.assert_close(grad.cpu().double(), want, rtol=1e-3, atol=1e-4)


def test_cond_nonfinite(backend):
    """NaN in one batch element: NaN there and the others unchanged where mpslinalg computes
    (the metal backend), torch's outcome where torch does."""
    A = backend.tensor(well_conditioned(3, (3,), False, 13)).to(torch.float32)
    clean = mpslinalg.cond(A)
    A[1, 0, 0] = math.nan
    if backend.is_metal:
        got = mpslinalg.cond(A)
        assert got[1].isnan()
        torch.testing.assert_close(got[[0, 2]], clean[[0, 2]])
    else:  # torch's own, whatever torch does on this device (the CPU raises, CUDA gives NaN)
        try:
            want = torch.linalg.cond(A)
        except torch.linalg.LinAlgError:
            with pytest.raises(torch.linalg.LinAlgError, match="mpslinalg.cond"):
                mpslinalg.cond(A)
        else:
            torch.testing.assert_close(mpslinalg.cond(A), want, equal_nan=True)
    for p in (1, "fro"):  # through the inverse: no error, non-finite there
        got = mpslinalg.cond(A, p)
        assert not got[1].isfinite() and got[[0, 2]].isfinite().all()


def test_small_batches_take_the_small_singular_values(monkeypatch):
    """On the torch backend a large batch of 3x3 matrices gets its spectral norms and condition
    numbers from the n <= 4 kernels (torch computes a full SVD per matrix), with torch's
    values."""
    from mpslinalg import small

    calls = []
    real = small.small_svd
    monkeypatch.setattr(small, "small_svd", lambda *a, **k: calls.append(1) or real(*a, **k))
    A = torch.randn(4096, 3, 3, generator=torch.Generator().manual_seed(14))
    with mpslinalg.use_backend("torch"):
        for ord in (2, -2, "nuc"):
            torch.testing.assert_close(mpslinalg.matrix_norm(A, ord),
                                       torch.linalg.matrix_norm(A, ord))
            torch.testing.assert_close(mpslinalg.norm(A, ord, (-2, -1)),
                                       torch.linalg.norm(A, ord, (-2, -1)))
        for p in (None, 2, -2):
            # cond's relative error is about cond eps (s_min's error is eps s_max)
            want = torch.linalg.cond(A.double(), p)
            bound = 90 * torch.finfo(torch.float32).eps * torch.linalg.cond(A.double()) ** 2
            assert ((mpslinalg.cond(A, p).double() - want).abs() <= bound).all(), p
        small_paths = len(calls)
        mpslinalg.matrix_norm(A[:2], 2)  # below the crossover: torch's
        mpslinalg.matrix_norm(A, 2, keepdim=True, dtype=torch.float64)  # torch's too
    assert small_paths == 9 and len(calls) == 9
