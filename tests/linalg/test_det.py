"""det, slogdet, logdet against SciPy (float64) and torch, on every backend."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lu import _grad_pair, dtypes, sizes

import mpslinalg
from mpslinalg.testing import (
    count_host_syncs,
    matrix_with_spread,
    noncontiguous,
    random_matrix,
    singular_matrix,
    wide,
)

det_module = importlib.import_module("mpslinalg.linalg.det")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@FIXTURE_OK
@given(data=st.data())
def test_det_slogdet_relative_error(backend, data):
    """|det - det_ref| / |det_ref| <= n cond eps (the first-order perturbation bound, with
    LAPACK's factor 30 of slack)."""
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from([s for s in sizes(backend) if 0 < s <= 129]), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 1)]), label="batch")
    cond = data.draw(st.sampled_from([1.0, 1e3]), label="cond")
    seed = data.draw(st.integers(0, 999), label="seed")
    # singular values from sqrt(cond) down to 1/sqrt(cond): |det| = 1, representable at any n
    A = backend.tensor(matrix_with_spread(n, cond, dtype, batch, seed, scale=math.sqrt(cond)))
    A0 = A.clone()
    d = mpslinalg.det(A)
    sign, logabsdet = mpslinalg.slogdet(A)
    assert torch.equal(A, A0)
    assert d.shape == batch and d.dtype == dtype
    assert logabsdet.dtype == (A.real.dtype if dtype.is_complex else dtype)
    ref = torch.as_tensor(np.linalg.det(wide(A).numpy()))
    ref_sign, ref_log = (torch.as_tensor(x) for x in np.linalg.slogdet(wide(A).numpy()))
    eps = torch.finfo(A.real.dtype).eps
    bound = 30 * n * cond * eps
    assert ((wide(d) - ref).abs() <= bound * ref.abs()).all()
    assert ((wide(logabsdet) - ref_log).abs() <= bound).all()
    assert ((wide(sign) - ref_sign).abs() <= bound).all()
    logdet = mpslinalg.logdet(A)
    if dtype.is_complex:
        ref_logdet = ref_log + 1j * torch.angle(ref_sign)
        diff = wide(logdet) - ref_logdet
        diff = torch.complex(diff.real, torch.remainder(diff.imag + math.pi, 2 * math.pi)
                             - math.pi)
        assert (diff.abs() <= bound).all()
    else:
        expect = torch.where(ref_sign < 0, torch.nan, ref_log)
        torch.testing.assert_close(wide(logdet), expect, atol=bound, rtol=0, equal_nan=True)


def test_empty_and_tiny(backend):
    for shape in ((0, 0), (3, 0, 0), (0, 2, 2)):
        A = backend.tensor(torch.zeros(shape))
        torch.testing.assert_close(mpslinalg.det(A).cpu(), torch.linalg.det(A.cpu()))
        sign, logabsdet = mpslinalg.slogdet(A)
        ref = torch.linalg.slogdet(A.cpu())
        torch.testing.assert_close(sign.cpu(), ref.sign)
        torch.testing.assert_close(logabsdet.cpu(), ref.logabsdet)
    A = backend.tensor(torch.tensor([[[-2.5]], [[4.0]]]))
    assert mpslinalg.det(A).cpu().tolist() == [-2.5, 4.0]


def test_singular(backend):
    for dtype in (torch.float32, torch.complex64):
        for n in (3, 6):  # the small path and the general one
            A = random_matrix(n, dtype, (3,), seed=n)
            A[1] = singular_matrix(n, n - 1, dtype, seed=n + 1)
            A[2] = 0
            A = backend.tensor(A)
            d = mpslinalg.det(A)
            assert d[1] == 0 and d[2] == 0 and d[0] != 0
            sign, logabsdet = mpslinalg.slogdet(A)
            assert sign[1] == 0 and logabsdet[1] == -math.inf
            assert sign[2] == 0 and logabsdet[2] == -math.inf
            assert mpslinalg.logdet(A)[1].real == -math.inf


def test_nonfinite(backend):
    for n in (3, 6):
        A = random_matrix(n, torch.float32, (2,), seed=1)
        A[0, 0, 0] = float("nan")
        A = backend.tensor(A)
        assert torch.isnan(mpslinalg.det(A)[0]) and torch.isfinite(mpslinalg.det(A)[1])
        assert torch.isnan(mpslinalg.slogdet(A).logabsdet[0])


def test_noncontiguous_and_half(backend):
    A = backend.tensor(random_matrix(5, torch.complex64, (2,), seed=2))
    torch.testing.assert_close(mpslinalg.det(noncontiguous(A)).cpu(), torch.linalg.det(A.cpu()))
    torch.testing.assert_close(mpslinalg.det(A.mT).cpu(), torch.linalg.det(A.cpu()))
    H = backend.tensor(random_matrix(4, torch.float32, seed=3)).half()
    assert mpslinalg.det(H).dtype == torch.float16
    assert mpslinalg.slogdet(H).logabsdet.dtype == torch.float16


def test_validation(backend):
    A = backend.tensor(torch.randn(3, 4))
    for fn in (mpslinalg.det, mpslinalg.slogdet, mpslinalg.logdet):
        with pytest.raises(RuntimeError, match="square"):
            fn(A)
        with pytest.raises(RuntimeError, match="at least 2 dimensions"):
            fn(A[0])
        if backend.is_metal:
            with pytest.raises(TypeError, match="torch backend"):
                fn(A[:, :3].double())


def test_no_host_syncs(metal_backend):
    for n in (3, 6):
        A = metal_backend.tensor(random_matrix(n, torch.complex64, (4,), seed=4))
        with count_host_syncs() as syncs:
            mpslinalg.det(A)
            mpslinalg.slogdet(A)
            mpslinalg.logdet(A)
        assert syncs.calls == []


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize("small", [False, True])
def test_rules_match_torch_autograd_float64(small):
    for dtype in (torch.float64, torch.complex128):
        A = random_matrix(4, dtype, (3,), seed=5)
        for ours_fn, ref_fn in ((det_module.det_op, torch.linalg.det),
                                (det_module.slogdet_op, torch.linalg.slogdet)):
            ours, ref = _grad_pair(lambda A: ours_fn(A, "torch", small, ""), ref_fn, [A])  # noqa: B023 (called at once)
            torch.testing.assert_close(ours[0], ref[0])
        # numerically singular (rank-deficient product): the SVD branch, as torch
        S = random_matrix(4, dtype, (2,), seed=6, m=4)[..., :3] @ random_matrix(
            4, dtype, (2,), seed=7, m=3)
        ours, ref = _grad_pair(lambda A: det_module.det_op(A, "torch", small, ""),
                               torch.linalg.det, [S])
        torch.testing.assert_close(ours[0], ref[0])


def test_det_gradient_at_exactly_singular_matrices():
    """The gradient of det is the adjugate, also where det is exactly 0 (torch 2.13 returns 0
    for these inputs; finite differences confirm the adjugate)."""
    for dtype in (torch.float64, torch.complex128):
        A = random_matrix(4, dtype, (3,), seed=8)
        A[0, :, -1] = 0  # rank 3: adjugate non-zero
        A[1, :, -2:] = 0  # rank 2: adjugate zero
        for small in (False, True):
            torch.autograd.gradcheck(lambda A: det_module.det_op(A, "torch", small, ""),  # noqa: B023 (called at once)
                                     (A.requires_grad_(),))


def test_gradcheck_and_opcheck():
    A = random_matrix(3, torch.complex128, (2,), seed=9).requires_grad_()
    for small in (False, True):
        torch.autograd.gradcheck(lambda A: det_module.det_op(A, "torch", small, ""), (A,))  # noqa: B023 (called at once)
        torch.autograd.gradcheck(lambda A: det_module.slogdet_op(A, "torch", small, ""), (A,))  # noqa: B023 (called at once)
        torch.library.opcheck(det_module.det_op.overload, (A, "torch", small, ""))
        torch.library.opcheck(det_module.slogdet_op.overload, (A, "torch", small, ""))
    with mpslinalg.use_backend("torch"):
        torch.autograd.gradcheck(mpslinalg.logdet, (A,))
        torch.autograd.gradcheck(mpslinalg.det, (A,))


def test_gradients_on_backend(backend):
    for dtype in (torch.float32, torch.complex64):
        for n in (3, 6):
            A = backend.tensor(random_matrix(n, dtype, (2,), seed=10) + 3 * torch.eye(n))
            for ours_fn, ref_fn in ((mpslinalg.det, torch.linalg.det),
                                    (mpslinalg.slogdet, torch.linalg.slogdet),
                                    (mpslinalg.logdet, torch.logdet)):
                ours, ref = _grad_pair(ours_fn, ref_fn, [A])
                scale = ref[0].abs().max()
                torch.testing.assert_close(wide(ours[0]) / scale, ref[0] / scale,
                                           rtol=1e-4, atol=1e-4)
        S = A.clone()
        S[0, :, -1] = 0  # an exactly singular matrix: the adjugate formula on the device
        d = S.detach().requires_grad_()
        mpslinalg.det(d).real.sum().backward()
        ref = wide(S).requires_grad_()
        det_module.det_op(ref, "torch", False, "").real.sum().backward()
        torch.testing.assert_close(wide(d.grad), ref.grad, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402
    OpInfo,
    instantiate_generic_tests,
    square_bad_samples,
    square_samples,
)

OPS = [
    OpInfo("det", mpslinalg.det, torch.linalg.det, square_samples,
           bad_samples=square_bad_samples, small_path=True),
    OpInfo("slogdet", mpslinalg.slogdet, torch.linalg.slogdet, square_samples,
           bad_samples=square_bad_samples, small_path=True),
    OpInfo("logdet", mpslinalg.logdet, torch.logdet, square_samples,
           bad_samples=square_bad_samples, supports_out=False, small_path=True),
]
instantiate_generic_tests(globals(), OPS)


def test_det_without_intermediate_overflow(backend):
    """Rows scaled 1e-20 .. 1e20: prod(diag U) overflows float32 on the way, the determinant
    does not; a determinant out of range is inf, as torch's."""
    A = random_matrix(8, torch.float64, seed=21) * torch.logspace(-20, 20, 8,
                                                                 dtype=torch.float64)[:, None]
    d = mpslinalg.det(backend.tensor(A.float()))
    ref = torch.linalg.det(A.float().double())
    assert torch.isfinite(d.cpu()).all()
    # float32 elimination on a matrix this badly scaled loses digits: the same order of magnitude
    assert 0.5 < float(d.cpu().double() / ref) < 2
    huge = backend.tensor(torch.eye(70) * 1e3)
    assert mpslinalg.det(huge).cpu() == float("inf")
