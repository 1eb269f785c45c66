"""inv and inv_ex against SciPy (float64) and torch.linalg, on every backend."""

from __future__ import annotations

import importlib

import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lu import _grad_pair, dtypes, sizes

import mpslinalg
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    inv_ratio,
    matrix_with_spread,
    noncontiguous,
    random_matrix,
    singular_matrix,
    wide,
)

inverse_module = importlib.import_module("mpslinalg.linalg.inverse")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@FIXTURE_OK
@given(data=st.data())
def test_inv_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from([s for s in sizes(backend) if s <= 129]), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 1), (0,)]), label="batch")
    cond = data.draw(st.sampled_from([1.0, 1e4]), label="cond")
    seed = data.draw(st.integers(0, 999), label="seed")
    A = (matrix_with_spread(n, cond, dtype, batch, seed) if n
         else random_matrix(0, dtype, batch))
    A = backend.tensor(A)
    A0 = A.clone()
    X, info = mpslinalg.inv_ex(A)
    assert torch.equal(A, A0)
    assert X.shape == A.shape and X.dtype == dtype and info.shape == batch
    assert (info.cpu() == 0).all()
    assert inv_ratio(A, X, dtype=dtype) < THRESH


def test_against_scipy(backend):
    for dtype in dtypes(backend):
        A = random_matrix(31, dtype, seed=1)
        X = mpslinalg.inv(backend.tensor(A))
        ref = torch.from_numpy(scipy.linalg.inv(wide(A).numpy()))
        cond = torch.linalg.cond(wide(A))
        err = (wide(X) - ref).abs().max() / ref.abs().max()
        assert err < 31 * cond * torch.finfo(A.real.dtype).eps


def test_singular(backend):
    for n in (3, 6):  # the small path and the general one
        A = random_matrix(n, torch.float32, (3,), seed=2)
        A[1] = singular_matrix(n, n - 2, torch.float32, seed=3)
        A = backend.tensor(A)
        _, info = mpslinalg.inv_ex(A)
        _, ref_info = torch.linalg.inv_ex(A.cpu())
        assert torch.equal(info.cpu(), ref_info) and info[1] == n - 1
        with pytest.raises(torch.linalg.LinAlgError) as ours:
            mpslinalg.inv(A)
        with pytest.raises(torch.linalg.LinAlgError) as theirs:
            torch.linalg.inv(A.cpu())
        assert str(ours.value).removeprefix("mpslinalg.inv") == \
            str(theirs.value).removeprefix("linalg.inv")
        with pytest.raises(mpslinalg.LinAlgError, match="^mpslinalg.inv_ex: The diagonal"):
            mpslinalg.inv_ex(A[1], check_errors=True)


def test_nonfinite_noncontiguous_half(backend):
    A = random_matrix(5, torch.float32, (2,), seed=4)
    A[0, 3, 3] = float("inf")
    X, _ = mpslinalg.inv_ex(backend.tensor(A))
    assert not torch.isfinite(X[0]).all() and torch.isfinite(X[1]).all()
    A = backend.tensor(random_matrix(5, torch.complex64, (2,), seed=5))
    assert inv_ratio(A, mpslinalg.inv(noncontiguous(A)), dtype=A.dtype) < THRESH
    assert inv_ratio(A.mH, mpslinalg.inv(A.mH), dtype=A.dtype) < THRESH
    H = backend.tensor(random_matrix(4, torch.float32, seed=6) + 4 * torch.eye(4)).half()
    assert mpslinalg.inv(H).dtype == torch.float16


def test_validation(backend):
    A = backend.tensor(torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="^mpslinalg.inv: .*square"):
        mpslinalg.inv(A)
    with pytest.raises(RuntimeError, match="^mpslinalg.inv_ex: .*at least 2 dimensions"):
        mpslinalg.inv_ex(A[0])
    with pytest.raises(TypeError, match="^mpslinalg.inv: "):
        mpslinalg.inv(A[:, :3].int())
    if backend.is_metal:  # float64 is refined on float32 kernels (tests/linalg/test_refine.py)
        assert mpslinalg.inv(A[:, :3].double().cpu()).dtype == torch.float64


def test_no_host_syncs(metal_backend):
    for n in (3, 6):
        A = metal_backend.tensor(random_matrix(n, torch.complex64, (4,), seed=7))
        with count_host_syncs() as syncs:
            mpslinalg.inv_ex(A)
        assert syncs.calls == []


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize("small", [False, True])
def test_rule_matches_torch_autograd_float64(small):
    for dtype in (torch.float64, torch.complex128):
        A = random_matrix(4, dtype, (3,), seed=8)
        ours, ref = _grad_pair(lambda A: inverse_module.inv_ex_op(A, "torch", small, "")[0],
                               torch.linalg.inv, [A])
        torch.testing.assert_close(ours[0], ref[0])


def test_gradcheck_and_opcheck():
    A = random_matrix(3, torch.complex128, (2,), seed=9).requires_grad_()
    for small in (False, True):
        torch.autograd.gradcheck(lambda A: inverse_module.inv_ex_op(A, "torch", small, "")[0], (A,))  # noqa: B023 (called at once)
        torch.library.opcheck(inverse_module.inv_ex_op.overload, (A, "torch", small, ""))
    with mpslinalg.use_backend("torch"):
        torch.autograd.gradcheck(mpslinalg.inv, (A,))


def test_gradients_on_backend(backend):
    for dtype in (torch.float32, torch.complex64):
        for n in (3, 6):
            A = backend.tensor(random_matrix(n, dtype, (2,), seed=10) + 3 * torch.eye(n))
            ours, ref = _grad_pair(mpslinalg.inv, torch.linalg.inv, [A])
            torch.testing.assert_close(wide(ours[0]), ref[0], rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402
    OpInfo,
    instantiate_generic_tests,
    singular_samples,
    square_bad_samples,
    square_samples,
)

OPS = [
    OpInfo("inv", mpslinalg.inv, torch.linalg.inv, square_samples,
           bad_samples=lambda: square_bad_samples() + singular_samples(), device_reads=1,
           small_path=True, metal_float64=True),
    OpInfo("inv_ex", mpslinalg.inv_ex, torch.linalg.inv_ex, square_samples,
           bad_samples=square_bad_samples, small_path=True, metal_float64=True),
]
instantiate_generic_tests(globals(), OPS)
