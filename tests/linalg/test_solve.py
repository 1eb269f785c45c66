"""solve and solve_ex against SciPy (float64) and torch.linalg, on every backend."""

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
    matrix_with_spread,
    noncontiguous,
    random_matrix,
    singular_matrix,
    solve_ratio,
    wide,
)

solve_module = importlib.import_module("mpslinalg.linalg.solve")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def residual_ratio(A, X, B, left, dtype):
    if left:
        return solve_ratio(A, X, B, dtype=dtype)
    return solve_ratio(A.mH, X.mH, B.mH, dtype=dtype)


@FIXTURE_OK
@given(data=st.data())
def test_solve_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from([s for s in sizes(backend) if s <= 129]), label="n")
    k = data.draw(st.sampled_from([1, 4]), label="k")
    left = data.draw(st.booleans(), label="left")
    batch_A, batch_B = data.draw(st.sampled_from([((), ()), ((3,), (3,)), ((2, 1), (3,)),
                                                  ((), (2,)), ((0,), (0,))]), label="batches")
    cond = data.draw(st.sampled_from([1.0, 1e3]), label="cond")
    seed = data.draw(st.integers(0, 999), label="seed")
    A = backend.tensor(matrix_with_spread(max(n, 1), cond, dtype, batch_A, seed)[..., :n, :n]
                       if n else random_matrix(0, dtype, batch_A))
    B = backend.tensor(random_matrix(k, dtype, batch_B, seed + 1, m=n))
    if not left:
        B = B.mT
    A0, B0 = A.clone(), B.clone()
    X = mpslinalg.solve(A, B, left=left)
    assert torch.equal(A, A0) and torch.equal(B, B0), "input modified"
    ref = torch.linalg.solve(A.cpu(), B.cpu(), left=left)
    assert X.shape == ref.shape and X.dtype == dtype and X.device == A.device
    Ab = A.expand(*X.shape[:-2], n, n)
    assert residual_ratio(Ab, X, B.expand_as(X), left, dtype) < THRESH


def test_against_scipy(backend):
    for dtype in dtypes(backend):
        A = random_matrix(33, dtype, seed=1)
        B = random_matrix(3, dtype, seed=2, m=33)
        X = mpslinalg.solve(backend.tensor(A), backend.tensor(B))
        ref = torch.from_numpy(scipy.linalg.solve(wide(A).numpy(), wide(B).numpy()))
        cond = torch.linalg.cond(wide(A))
        err = (wide(X) - ref).abs().max() / ref.abs().max()
        assert err < 33 * cond * torch.finfo(A.real.dtype).eps


def test_vector_rhs_rule(backend):
    """torch's rule: B is a (batch of) vector(s) when B.ndim == 1 or B.shape == A.shape[:-1]."""
    cases = [((3, 3), (3,), True), ((2, 3, 3), (2, 3), True), ((2, 3, 3), (3,), True),
             ((2, 3, 3), (3, 2), True), ((2, 1, 3, 3), (2, 1, 3), True),
             ((2, 3, 3), (1, 3), False), ((3, 3), (2, 3), False), ((3, 3), (2, 3), "right"),
             ((2, 3, 3), (2, 3), "right"), ((2, 3, 3), (3,), "right"), ((0, 3, 3), (0, 3), True)]
    for shape_A, shape_B, ok in cases:
        left = ok != "right"
        A = backend.tensor(random_matrix(3, torch.float32, shape_A[:-2], seed=3))
        B = backend.tensor(torch.randn(shape_B))
        try:
            ref = torch.linalg.solve(A.cpu(), B.cpu(), left=left)
        except RuntimeError:
            ref = None
        if ref is None:
            with pytest.raises(RuntimeError, match="^mpslinalg.solve: "):
                mpslinalg.solve(A, B, left=left)
        else:
            X = mpslinalg.solve(A, B, left=left)
            assert X.shape == ref.shape, (shape_A, shape_B, left)
            torch.testing.assert_close(X.cpu(), ref, rtol=1e-4, atol=1e-4)


def test_noncontiguous(backend):
    A = backend.tensor(random_matrix(6, torch.complex64, (2,), seed=4))
    B = backend.tensor(random_matrix(2, torch.complex64, (2,), seed=5, m=6))
    X = mpslinalg.solve(noncontiguous(A), noncontiguous(B))
    assert solve_ratio(A, X, B, dtype=A.dtype) < THRESH
    X = mpslinalg.solve(A.mT, B)  # a transposed view
    assert solve_ratio(A.mT, X, B, dtype=A.dtype) < THRESH


def test_small_sizes_match_general_path(backend):
    """n <= 4 may take the single-launch small path: same results, info and errors."""
    for n in (1, 2, 3, 4):
        for dtype in (torch.float32, torch.complex64):
            A = random_matrix(n, dtype, (5,), seed=n)
            A[2] = singular_matrix(n, n - 1, dtype, seed=n)
            B = random_matrix(2, dtype, (5,), seed=n + 1, m=n)
            X, info = mpslinalg.solve_ex(backend.tensor(A), backend.tensor(B))
            _, ref_info = torch.linalg.solve_ex(A, B)
            assert torch.equal(info.cpu(), ref_info)
            keep = [0, 1, 3, 4]
            assert solve_ratio(A[keep], X[keep], B[keep], dtype=dtype) < THRESH


# ---------------------------------------------------------------- singular, non-finite


def test_singular(backend):
    A = random_matrix(4, torch.float32, (3,), seed=6)
    A[2] = singular_matrix(4, 2, torch.float32, seed=7)
    A = backend.tensor(A)
    B = backend.tensor(random_matrix(1, torch.float32, (3,), seed=8, m=4))
    _, info = mpslinalg.solve_ex(A, B)
    assert info.cpu().tolist() == [0, 0, 3]
    with pytest.raises(torch.linalg.LinAlgError) as ours:
        mpslinalg.solve(A, B)
    with pytest.raises(torch.linalg.LinAlgError) as theirs:
        torch.linalg.solve(A.cpu(), B.cpu())
    assert str(ours.value).removeprefix("mpslinalg.solve") == \
        str(theirs.value).removeprefix("torch.linalg.solve")
    assert "(Batch element 2)" in str(ours.value)
    with pytest.raises(mpslinalg.LinAlgError, match="^mpslinalg.solve_ex: The solver failed"):
        mpslinalg.solve_ex(A[2], B[2], check_errors=True)
    # info has A's batch shape when B broadcasts it (as torch).
    _, info = mpslinalg.solve_ex(A, backend.tensor(torch.randn(2, 1, 4, 1)))
    assert info.shape == (3,)


def test_nonfinite(backend):
    A = random_matrix(5, torch.float32, (2,), seed=9)
    A[0, 1, 1] = float("nan")
    X, _ = mpslinalg.solve_ex(backend.tensor(A), backend.tensor(torch.ones(2, 5, 1)))
    assert torch.isnan(X[0]).any() and torch.isfinite(X[1]).all()


# ---------------------------------------------------------------- validation, syncs


def test_validation(backend):
    A = backend.tensor(torch.randn(3, 3))
    cases = [
        (lambda: mpslinalg.solve(A[0], A[0]), RuntimeError, "at least 2 dimensions"),
        (lambda: mpslinalg.solve(A[:, :2], A), RuntimeError, "square"),
        (lambda: mpslinalg.solve(A, A.double()), RuntimeError, "same dtype"),
        (lambda: mpslinalg.solve(A, torch.randn(4, device=A.device)), RuntimeError,
         r"AX = B \(3x3 and 4x1\)"),
        (lambda: mpslinalg.solve(A.int(), A.int()), TypeError, "int32"),
        (lambda: mpslinalg.solve_ex(A.expand(2, 3, 3), torch.randn(4, 3, 1, device=A.device)),
         RuntimeError, "broadcast|must match the size"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match) as err:
            call()
        assert str(err.value).startswith("mpslinalg.solve"), str(err.value)
    if backend.is_metal:  # float64 is refined on float32 kernels (tests/linalg/test_refine.py)
        Ad = A.double().cpu() + 3 * torch.eye(3, dtype=torch.float64)
        assert mpslinalg.solve(Ad, Ad).dtype == torch.float64


def test_no_host_syncs(metal_backend):
    for n in (3, 6):  # the small path and the general one
        A = metal_backend.tensor(random_matrix(n, torch.complex64, (4,), seed=10))
        B = metal_backend.tensor(random_matrix(2, torch.complex64, (4,), seed=11, m=n))
        with count_host_syncs() as syncs:
            mpslinalg.solve_ex(A, B)
            mpslinalg.solve_ex(A, B.mT, left=False)
        assert syncs.calls == []
        with count_host_syncs() as syncs:
            mpslinalg.solve(A, B)
        assert len(syncs.calls) == 1  # check_errors reads info once


def test_float16(backend):
    A = random_matrix(4, torch.float32, seed=12) + 4 * torch.eye(4)
    B = torch.randn(4, 2)
    X = mpslinalg.solve(backend.tensor(A.half()), backend.tensor(B.half()))
    assert X.dtype == torch.float16
    torch.testing.assert_close(X.cpu(), torch.linalg.solve(A.half().float(), B.half().float())
                               .half(), rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize("small", [False, True])
def test_rule_matches_torch_autograd_float64(small):
    for dtype in (torch.float64, torch.complex128):
        for left in (True, False):
            A = random_matrix(3, dtype, (2, 1), seed=13)
            B = random_matrix(2, dtype, (3,), seed=14, m=3)
            B = B if left else B.mT
            ours, ref = _grad_pair(
                lambda A, B: solve_module.solve_ex_op(A, B, left, "torch", small, "")[0],  # noqa: B023 (called at once)
                lambda A, B: torch.linalg.solve(A, B, left=left), [A, B])  # noqa: B023 (called at once)
            for a, b in zip(ours, ref, strict=True):
                torch.testing.assert_close(a, b)


def test_gradcheck_and_opcheck():
    A = random_matrix(3, torch.complex128, (2,), seed=15).requires_grad_()
    B = random_matrix(2, torch.complex128, (2,), seed=16, m=3).requires_grad_()
    for small in (False, True):
        torch.autograd.gradcheck(
            lambda A, B: solve_module.solve_ex_op(A, B, True, "torch", small, "")[0], (A, B))  # noqa: B023 (called at once)
        torch.library.opcheck(solve_module.solve_ex_op.overload,
                              (A, B.mT, False, "torch", small, ""))
    with mpslinalg.use_backend("torch"):
        torch.autograd.gradcheck(mpslinalg.solve, (A, B))


def test_gradients_on_backend(backend):
    for dtype in (torch.float32, torch.complex64):
        for n in (3, 7):
            A = backend.tensor(random_matrix(n, dtype, (2,), seed=17))
            B = backend.tensor(random_matrix(2, dtype, (2,), seed=18, m=n))
            ours, ref = _grad_pair(mpslinalg.solve, torch.linalg.solve, [A, B])
            for a, b in zip(ours, ref, strict=True):
                torch.testing.assert_close(wide(a), b, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402,I001
    BadSample, OpInfo, instantiate_generic_tests, singular_samples,
    solve_samples)


def _solve_bad() -> list[BadSample]:
    A = torch.eye(3, dtype=torch.float64)
    return [
        BadSample((A[0], A[0]), match="dimensions"),
        BadSample((A[:, :2], A), match="square"),
        BadSample((A, torch.zeros(4)), match="AX = B"),
        BadSample((A.expand(2, 3, 3), torch.zeros(4, 3, 1)), match="broadcast|must match"),
    ]


def _solve_singular() -> list[BadSample]:
    (singular,) = singular_samples()
    return [BadSample((singular.args[0], torch.ones(2, 4, 1, dtype=torch.float64)),
                      error=singular.error, match=singular.match)]


OPS = [
    OpInfo("solve", mpslinalg.solve, torch.linalg.solve, solve_samples,
           bad_samples=lambda: _solve_bad() + _solve_singular(), grad_args=(0, 1),
           nonfinite_args=(0,), device_reads=1, small_path=True, metal_float64=True),
    OpInfo("solve_ex", mpslinalg.solve_ex, torch.linalg.solve_ex, solve_samples,
           bad_samples=_solve_bad, grad_args=(0, 1), nonfinite_args=(0,),
           small_path=True, metal_float64=True),
]
instantiate_generic_tests(globals(), OPS)
