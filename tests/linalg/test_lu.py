"""lu_factor, lu_factor_ex, lu, lu_solve against SciPy (float64) and torch.linalg, on every backend.

Accuracy by LAPACK's ratios (helpers.lu_ratio / solve_ratio < THRESH); pivots compared exactly
with SciPy's getrf on matrices built without near-ties; derivative rules compared with torch's own
autograd in float64 / complex128 (through the same rule functions on the torch backend) and, on
the metal backend, in float32 / complex64 with a tolerance.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg.linalg.lu import memory_safe_pivots
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    lu_ratio,
    noncontiguous,
    random_matrix,
    singular_matrix,
    solve_ratio,
    wide,
)

lu_module = importlib.import_module("mpslinalg.linalg.lu")

#: Sizes across the kernels' block boundaries (the emulator runs them all in well under a
#: second each); test_boundary_sizes runs 127..200 and 512 on every backend.
ALL_SIZES = [0, 1, 2, 5, 31, 32, 33, 127, 128, 129, 200]
BATCHES = [(), (1,), (3,), (2, 2), (0,)]
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def dtypes(backend) -> list[torch.dtype]:
    both = [torch.float32, torch.complex64]
    return both if backend.is_metal else both + [torch.float64, torch.complex128]


def sizes(backend) -> list[int]:
    return ALL_SIZES


def unpack(LU, pivots):
    return torch.lu_unpack(wide(LU), pivots.cpu())


def no_tie_matrix(n: int, dtype, batch=(), seed=0) -> torch.Tensor:
    """A = P0 L0 U0 with |L0| <= 0.2 below a unit diagonal and 1 <= |U0_kk| <= 2: partial
    pivoting picks P0 with a margin of more than 3x at every step, so any correct getrf (blocked
    or not, in float32 or float64) returns the same pivots."""
    rng = np.random.default_rng(seed)

    def draw(*shape):
        z = rng.uniform(-1, 1, shape)
        if dtype.is_complex:
            z = (z + 1j * rng.uniform(-1, 1, shape)) / np.sqrt(2)
        return z

    L0 = np.tril(0.2 * draw(*batch, n, n), -1) + np.eye(n)
    U0 = np.triu(draw(*batch, n, n), 1)
    d = draw(*batch, n)
    d = d / np.maximum(np.abs(d), 1e-3) * rng.uniform(1, 2, (*batch, n))
    U0 = U0 + d[..., None] * np.eye(n)
    perm = np.stack([rng.permutation(n) for _ in range(int(np.prod(batch, dtype=int)))])
    P0 = np.eye(n)[perm].reshape(*batch, n, n)
    return torch.from_numpy(P0 @ L0 @ U0).to(dtype)


# ---------------------------------------------------------------- factorisation accuracy


@FIXTURE_OK
@given(data=st.data())
def test_lu_factor_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from(sizes(backend)), label="n")
    m = data.draw(st.sampled_from([n, max(n - 3, 0), n + 2]), label="m")
    batch = data.draw(st.sampled_from(BATCHES), label="batch")
    strided = data.draw(st.booleans(), label="noncontiguous")
    A = backend.tensor(random_matrix(n, dtype, batch, seed=data.draw(st.integers(0, 999)), m=m))
    if strided:
        A = noncontiguous(A)
    A0 = A.clone()
    LU, pivots, info = mpslinalg.lu_factor_ex(A)
    assert torch.equal(A, A0), "input modified"
    assert LU.shape == A.shape and LU.dtype == A.dtype and LU.device == A.device
    assert pivots.shape == (*batch, min(m, n)) and pivots.dtype == torch.int32
    assert info.shape == batch and info.dtype == torch.int32
    assert (info.cpu() == 0).all()
    P, L, U = unpack(LU, pivots)
    assert lu_ratio(A, P, L, U, dtype=dtype) < THRESH


def test_pivots_match_scipy(backend):
    for dtype in dtypes(backend):
        for n in (3, 33, 129):
            A = no_tie_matrix(n, dtype, batch=(2,), seed=n)
            _, pivots = mpslinalg.lu_factor(backend.tensor(A))
            for b in range(2):
                _, ref = scipy.linalg.lu_factor(wide(A[b]).numpy())
                np.testing.assert_array_equal(pivots[b].cpu().numpy(), ref + 1)


@pytest.mark.slow
def test_boundary_sizes(backend):
    """The 128 -> 129 boundary where Apple's MPSMatrixDecompositionLU breaks, 200 and 512."""
    for n in (127, 128, 129, 200, 512):
        for dtype in (torch.float32, torch.complex64):
            A = backend.tensor(random_matrix(n, dtype, seed=n))
            LU, pivots = mpslinalg.lu_factor(A)
            assert lu_ratio(A, *unpack(LU, pivots), dtype=dtype) < THRESH


def test_lu_returns_P_L_U(backend):
    for m, n in ((4, 4), (6, 3), (3, 6)):
        for dtype in (torch.float32, torch.complex64):
            A = backend.tensor(random_matrix(n, dtype, (2,), seed=m, m=m))
            P, L, U = mpslinalg.lu(A)
            k = min(m, n)
            assert P.shape == (2, m, m) and L.shape == (2, m, k) and U.shape == (2, k, n)
            assert torch.equal(L.tril(-1) + torch.eye(m, k, dtype=dtype, device=A.device), L)
            assert torch.equal(U.triu(), U)
            assert lu_ratio(A, P, L, U, dtype=dtype) < THRESH
            LU, pivots = mpslinalg.lu_factor(A)
            torch.testing.assert_close(wide(P), unpack(LU, pivots)[0])


def test_empty(backend):
    for shape in ((0, 0), (0, 3, 3), (2, 0, 3), (3, 0), (2, 0, 0)):
        A = backend.tensor(torch.zeros(shape))
        ref = torch.linalg.lu_factor_ex(A.cpu())
        LU, pivots, info = mpslinalg.lu_factor_ex(A)
        assert LU.shape == ref.LU.shape and pivots.shape == ref.pivots.shape
        assert torch.equal(info.cpu(), ref.info)
        P, L, U = mpslinalg.lu(A)
        refP, refL, refU = torch.linalg.lu(A.cpu())
        assert (P.shape, L.shape, U.shape) == (refP.shape, refL.shape, refU.shape)
    LU, pivots = mpslinalg.lu_factor(backend.tensor(torch.zeros(0, 0)))
    X = mpslinalg.lu_solve(LU, pivots, backend.tensor(torch.zeros(0, 2)))
    assert X.shape == (0, 2)


def test_float16_computed_in_float32(backend):
    A = random_matrix(5, torch.float32, (2,), seed=1)
    for low in (torch.float16, torch.bfloat16):
        LU, pivots = mpslinalg.lu_factor(backend.tensor(A.to(low)))
        assert LU.dtype == low
        ref, ref_piv = torch.linalg.lu_factor(A.to(low).float())
        torch.testing.assert_close(LU.cpu(), ref.to(low))
        assert torch.equal(pivots.cpu(), ref_piv)


# ---------------------------------------------------------------- singular, non-finite


def test_singular_info_and_error(backend):
    A = random_matrix(5, torch.float32, (3,), seed=2)
    A[1] = singular_matrix(5, 3, torch.float32, seed=3)  # columns 3, 4 zero: U[4,4] = 0
    A = backend.tensor(A)
    _, _, info = mpslinalg.lu_factor_ex(A)
    assert info.cpu().tolist() == [0, 4, 0]
    _, _, ref_info = torch.linalg.lu_factor_ex(A.cpu())
    assert torch.equal(info.cpu(), ref_info)
    with pytest.raises(torch.linalg.LinAlgError) as ours:
        mpslinalg.lu_factor(A)
    with pytest.raises(RuntimeError) as theirs:
        torch.linalg.lu_factor(A.cpu())
    assert str(ours.value).removeprefix("mpslinalg.lu_factor") == \
        str(theirs.value).removeprefix("torch.linalg.lu_factor")
    assert "(Batch element 1)" in str(ours.value)
    with pytest.raises(mpslinalg.LinAlgError, match="U\\[4,4\\] is zero"):
        mpslinalg.lu_factor_ex(A[1], check_errors=True)
    P, L, U = mpslinalg.lu(A)  # never raises
    assert lu_ratio(A, P, L, U, dtype=A.dtype) < THRESH


def test_nonfinite_input_gives_nan(backend):
    for bad in (float("nan"), float("inf")):
        A = random_matrix(6, torch.float32, (2,), seed=4)
        A[0, 2, 3] = bad
        LU, _, _ = mpslinalg.lu_factor_ex(backend.tensor(A))
        assert not torch.isfinite(LU[0]).all()
        assert torch.isfinite(LU[1]).all()


# ---------------------------------------------------------------- lu_solve


@FIXTURE_OK
@given(data=st.data())
def test_lu_solve_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from([s for s in sizes(backend) if s <= 33]), label="n")
    k = data.draw(st.sampled_from([1, 3]), label="k")
    left = data.draw(st.booleans(), label="left")
    adjoint = data.draw(st.booleans(), label="adjoint")
    batch_A, batch_B = data.draw(st.sampled_from([((), ()), ((2,), (2,)), ((2,), (3, 1)),
                                                  ((1,), (2,)), ((), (2,))]), label="batches")
    seed = data.draw(st.integers(0, 999), label="seed")
    A = backend.tensor(random_matrix(n, dtype, batch_A, seed=seed))
    B = backend.tensor(random_matrix(k, dtype, batch_B, seed=seed + 1, m=n))
    if not left:
        B = B.mT
    LU, pivots = mpslinalg.lu_factor(A)
    B0 = B.clone()
    X = mpslinalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint)
    assert torch.equal(B, B0)
    ref = torch.linalg.lu_solve(LU.cpu(), pivots.cpu(), B.cpu(), left=left, adjoint=adjoint)
    assert X.shape == ref.shape and X.dtype == dtype
    opA = A.mH if adjoint else A
    if left:
        assert solve_ratio(opA, X, B.expand_as(X), dtype=dtype) < THRESH
    else:
        assert solve_ratio(opA.mH, X.mH, B.expand_as(X).mH, dtype=dtype) < THRESH


def test_lu_solve_noncontiguous(backend):
    A = backend.tensor(random_matrix(7, torch.complex64, (2,), seed=5))
    B = backend.tensor(random_matrix(3, torch.complex64, (2,), seed=6, m=7))
    LU, pivots = mpslinalg.lu_factor(A)
    X = mpslinalg.lu_solve(noncontiguous(LU), noncontiguous(pivots), noncontiguous(B))
    assert solve_ratio(A, X, B, dtype=A.dtype) < THRESH


# ---------------------------------------------------------------- validation


def test_validation_messages(backend):
    A = backend.tensor(torch.randn(3, 3))
    LU, pivots = mpslinalg.lu_factor(A)
    cases = [
        (lambda: mpslinalg.lu_factor(A[0]), RuntimeError,
         "at least 2 dimensions|2 or more dimensions"),
        (lambda: mpslinalg.lu_factor(A.int()), TypeError, "int32"),
        (lambda: mpslinalg.lu_solve(LU, pivots, A[0]), RuntimeError, "at least 2 dimensions"),
        (lambda: mpslinalg.lu_solve(LU, pivots.long(), A), RuntimeError, "torch.int32"),
        (lambda: mpslinalg.lu_solve(LU, pivots[:2], A), RuntimeError,
         "pivots.shape|Number of pivots"),
        (lambda: mpslinalg.lu_solve(LU, pivots, A[:2]), RuntimeError,
         r"equation AX = B \(3x3 and 2x3\)"),
        (lambda: mpslinalg.lu_solve(LU, pivots, A[:, :2], left=False),
         RuntimeError, r"XA = B"),
        (lambda: mpslinalg.lu_solve(LU, pivots, A.double()), RuntimeError, "dtype"),
        (lambda: mpslinalg.lu_solve(LU[:2, :2], pivots[:2], A), RuntimeError, "AX = B"),
    ]
    if backend.is_metal or A.device.type != "cuda":  # torch factors CUDA tensors unpivoted
        cases += [(lambda: mpslinalg.lu_factor(A, pivot=False), RuntimeError,
                   "LU without pivoting is not implemented"),
                  (lambda: mpslinalg.lu(A, pivot=False), RuntimeError, "LU without pivoting")]
    else:
        P, L, U = mpslinalg.lu(A, pivot=False)
        assert P.shape == torch.linalg.lu(A, pivot=False).P.shape  # torch's P: empty
        torch.testing.assert_close(L @ U, A, rtol=1e-4, atol=1e-4)
    for call, exc, match in cases:
        with pytest.raises(exc, match=match) as err:
            call()
        assert str(err.value).startswith("mpslinalg.lu"), str(err.value)


def test_float64_on_metal_is_a_type_error(metal_backend):
    for dtype in (torch.float64, torch.complex128):
        with pytest.raises(TypeError, match="torch backend"):
            mpslinalg.lu_factor(metal_backend.tensor(torch.eye(3, dtype=dtype)))


def test_no_host_syncs(metal_backend):
    A = metal_backend.tensor(random_matrix(6, torch.complex64, (4,), seed=7))
    B = metal_backend.tensor(random_matrix(2, torch.complex64, (4,), seed=8, m=6))
    with count_host_syncs() as syncs:
        LU, pivots, info = mpslinalg.lu_factor_ex(A)
        mpslinalg.lu(A)
    assert syncs.calls == []
    with count_host_syncs() as syncs:  # the pivots' validation, as torch's
        mpslinalg.lu_solve(LU, pivots, B, adjoint=True)
    assert syncs.calls == ["lu_solve pivots"]


def test_cuda_pivots_are_clamped_not_read(backend):
    """torch validates lu_solve's pivots on the CPU only; on CUDA it reads them unchecked (-2**31
    is an illegal memory access on an H200, torch 2.11). There the torch backend clamps them
    into 1..n on the device, with no device read; every other backend raises as torch's CPU."""
    A = backend.tensor(random_matrix(5, torch.float32, (2,), seed=9))
    B = backend.tensor(random_matrix(2, torch.float32, (2,), seed=10, m=5))
    LU, pivots = mpslinalg.lu_factor(A)
    bad = pivots.clone()
    bad[0, 1], bad[0, 3] = -2**31, 2**31 - 1
    if backend.name != "cuda":
        with pytest.raises(RuntimeError, match="mpslinalg.lu_solve: Pivots given to lu_solve"):
            mpslinalg.lu_solve(LU, bad, B)
        return
    clamped = memory_safe_pivots(LU, bad).cpu()
    assert clamped[0, 1] == 1 and clamped[0, 3] == 5 and torch.equal(clamped[1], pivots[1].cpu())
    for call in (lambda: mpslinalg.lu_solve(LU, bad, B),  # the fast path
                 lambda: mpslinalg.lu_solve(LU.half(), bad, B.half())):  # the op (upcast)
        with count_host_syncs() as syncs:
            X = call()
        assert syncs.calls == []
        torch.cuda.synchronize()  # an out-of-bounds access would be reported here
        good = mpslinalg.lu_solve(LU.to(X.dtype), pivots, B.to(X.dtype))
        assert torch.equal(X[1], good[1])


# ---------------------------------------------------------------- autograd


def _grad_pair(f_ours, f_ref, inputs, seed=0):
    """Gradients of a random real functional of the outputs, ours vs the reference."""
    torch.manual_seed(seed)
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    ys = [wide(x).requires_grad_() for x in inputs]
    out, ref = f_ours(*xs), f_ref(*ys)
    out = out if isinstance(out, (tuple, list)) else (out,)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    loss_o = loss_r = 0
    for o, r in zip(out, ref, strict=True):
        w = torch.randn_like(r)
        loss_o = loss_o + (o.cpu().to(r.dtype) * w).real.sum()
        loss_r = loss_r + (r * w).real.sum()
    return torch.autograd.grad(loss_o, xs), torch.autograd.grad(loss_r, ys)


def test_rules_match_torch_autograd_float64():
    """The derivative rules (run on the torch backend in float64 / complex128) equal torch's."""
    for dtype in (torch.float64, torch.complex128):
        for m, n in ((5, 5), (3, 6), (6, 3)):
            A = random_matrix(n, dtype, (2,), seed=m, m=m)
            ours, ref = _grad_pair(
                lambda A: lu_module.lu_factor_ex_op(A, True, "torch", False, "")[0],
                lambda A: torch.linalg.lu_factor_ex(A)[0], [A])
            torch.testing.assert_close(ours[0], ref[0])
        A = random_matrix(5, dtype, (2,), seed=1)
        LU, pivots = torch.linalg.lu_factor(A)
        for left in (True, False):
            for adjoint in (True, False):
                B = random_matrix(3, dtype, (2,), seed=2, m=5)
                B = B if left else B.mT
                ours, ref = _grad_pair(
                    lambda LU, B: lu_module.lu_solve_op(  # noqa: B023 (called at once)
                    LU, pivots, B, left, adjoint, "torch", False, ""),  # noqa: B023
                    lambda LU, B: torch.linalg.lu_solve(LU, pivots, B, left=left,  # noqa: B023 (called at once)
                                                        adjoint=adjoint), [LU, B])  # noqa: B023 (called at once)
                for a, b in zip(ours, ref, strict=True):
                    torch.testing.assert_close(a, b)


def test_gradcheck_rules():
    A = random_matrix(4, torch.complex128, (2,), seed=3, m=5).requires_grad_()
    torch.autograd.gradcheck(
        lambda A: lu_module.lu_factor_ex_op(A, True, "torch", False, "")[0], (A,))
    A = random_matrix(4, torch.float64, seed=4).requires_grad_()
    LU, pivots = torch.linalg.lu_factor(A.detach())
    B = random_matrix(2, torch.float64, seed=5, m=4).requires_grad_()
    torch.autograd.gradcheck(
        lambda LU, B: lu_module.lu_solve_op(LU, pivots, B, True, True, "torch", False, ""),
        (LU.requires_grad_(), B))


def test_opcheck():
    A = random_matrix(4, torch.float64, (2,), seed=6).requires_grad_()
    LU, pivots = torch.linalg.lu_factor(A.detach())
    B = random_matrix(2, torch.float64, (2,), seed=7, m=4).requires_grad_()
    torch.library.opcheck(lu_module.lu_factor_ex_op.overload, (A, True, "torch", False, ""))
    torch.library.opcheck(lu_module.lu_solve_op.overload,
                          (LU.requires_grad_(), pivots, B, True, False, "torch", False, ""))


def test_gradients_on_backend(backend):
    """Gradients through the public API (float32 / complex64) against torch CPU float64."""
    for dtype in (torch.float32, torch.complex64):
        A = backend.tensor(random_matrix(5, dtype, (2,), seed=8, m=4))
        ours, ref = _grad_pair(lambda A: mpslinalg.lu(A)[1:], lambda A: torch.linalg.lu(A)[1:],
                               [A])
        torch.testing.assert_close(wide(ours[0]), ref[0], rtol=1e-3, atol=1e-3)
        A = backend.tensor(random_matrix(5, dtype, (2,), seed=9))
        B = backend.tensor(random_matrix(2, dtype, (2,), seed=10, m=5))
        LU, pivots = mpslinalg.lu_factor(A)
        ours, ref = _grad_pair(
            lambda LU, B: mpslinalg.lu_solve(LU, pivots, B, adjoint=True),  # noqa: B023 (called at once)
            lambda LU, B: torch.linalg.lu_solve(LU, pivots.cpu(), B, adjoint=True), [LU, B])  # noqa: B023 (called at once)
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(wide(a), b, rtol=1e-3, atol=1e-3)


def test_opcheck_metal_ops(metal_backend):
    """The custom ops on the metal backend (schema, fake tensors, autograd registration, AOT)."""
    ops = {m: importlib.import_module(f"mpslinalg.linalg.{m}") for m in ("det", "inverse", "solve")}
    A = metal_backend.tensor(random_matrix(6, torch.complex64, (2,), seed=11)).requires_grad_()
    B = metal_backend.tensor(random_matrix(2, torch.complex64, (2,), seed=12, m=6)).requires_grad_()
    LU, pivots = mpslinalg.lu_factor(A.detach())
    for op, args in [
        (lu_module.lu_factor_ex_op, (A, True, "metal", False, "")),
        (lu_module.lu_solve_op, (LU.requires_grad_(), pivots, B, True, True, "metal", False, "")),
        (ops["solve"].solve_ex_op, (A, B, True, "metal", False, "")),
        (ops["inverse"].inv_ex_op, (A, "metal", False, "")),
        (ops["det"].det_op, (A, "metal", False, "")),
        (ops["det"].slogdet_op, (A, "metal", False, "")),
    ]:
        torch.library.opcheck(op.overload, args, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n", [6, 40, 100])
def test_launches_grow_with_panels_not_with_batch(n):
    """On the metal backend every op launches a fixed sequence of kernels per call: the batch is a
    grid dimension, never a Python loop (emulator counters)."""
    from mpslinalg import emulator

    def launches(op, batch):
        A = random_matrix(n, torch.float32, (batch,), seed=batch) + n * torch.eye(n)
        B = random_matrix(n, torch.float32, (batch,), seed=7, m=n)[..., :2]
        emulator.reset_launch_counts()
        with mpslinalg.use_backend("metal"):
            op(A, B)
        return emulator.total_launches()

    ops = {
        "lu_factor_ex": lambda A, B: mpslinalg.lu_factor_ex(A),
        "solve_ex": lambda A, B: mpslinalg.solve_ex(A, B),
        "inv_ex": lambda A, B: mpslinalg.inv_ex(A),
        "det": lambda A, B: mpslinalg.det(A),
    }
    for name, op in ops.items():
        counts = {batch: launches(op, batch) for batch in (1, 9)}
        assert counts[1] == counts[9] > 0, (name, counts)
    panels = -(-n // 32)
    assert launches(ops["lu_factor_ex"], 1) == (1 if n <= 64 else 3 * panels - 1)


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402,I001
    BadSample, OpInfo, Sample, instantiate_generic_tests, singular_samples, solve_samples,
    square_samples, well_conditioned)


def _rectangular_samples(complex_: bool) -> list[Sample]:
    c = complex_
    return square_samples(c) + [
        Sample((well_conditioned(3, (2,), c, 11, m=5),), desc="tall (2, 5, 3)"),
        Sample((well_conditioned(5, (), c, 12, m=3),), desc="wide (3, 5)"),
    ]


def _lu_solve_samples(complex_: bool) -> list[Sample]:
    out = []
    for sample in solve_samples(complex_):
        A, B = sample.args
        if B.dim() < max(A.dim(), 2) or A.shape[-1] == 0:  # lu_solve takes no vectors
            continue
        LU, pivots = torch.linalg.lu_factor(A)
        out.append(Sample((LU, pivots, B), sample.kwargs, sample.desc))
        out.append(Sample((LU, pivots, B), {**sample.kwargs,
                          "adjoint": True}, sample.desc + ", adjoint"))
    return out


def _lu_solve_bad() -> list[BadSample]:
    LU, pivots = torch.linalg.lu_factor(torch.eye(3, dtype=torch.float64))
    return [
        BadSample((LU, pivots, LU[0]), match="dimensions"),
        BadSample((LU, pivots.long(), LU), match="int32"),
        BadSample((LU, pivots[:2], LU), match="pivots"),
        BadSample((LU, pivots, LU[:2]), match="AX = B"),
        # torch does not validate pivots on CUDA, and mpslinalg clamps them there instead of
        # paying a device read per call (test_cuda_pivots_are_clamped_not_read)
        BadSample((LU, pivots * 0, LU), match="greater or equal to 1", valid_on=("cuda",)),
        BadSample((LU, pivots - 1, LU), match="greater or equal to 1", valid_on=("cuda",)),
        BadSample((LU, pivots + 3, LU), match="smaller or equal to", valid_on=("cuda",)),
    ]


def _rectangular_bad() -> list[BadSample]:
    return [BadSample((torch.zeros(3),), match="dimensions"),
            BadSample((torch.zeros(3, 3, dtype=torch.int32),), error=(TypeError, RuntimeError))]


OPS = [
    OpInfo("lu_factor", mpslinalg.lu_factor, torch.linalg.lu_factor, _rectangular_samples,
           bad_samples=lambda: _rectangular_bad() + singular_samples(), device_reads=1,
           ref_on_backend_device=True),
    OpInfo("lu_factor_ex", mpslinalg.lu_factor_ex, torch.linalg.lu_factor_ex,
           _rectangular_samples, bad_samples=_rectangular_bad, ref_on_backend_device=True),
    OpInfo("lu", mpslinalg.lu, torch.linalg.lu, _rectangular_samples,
           bad_samples=_rectangular_bad, ref_on_backend_device=True),
    OpInfo("lu_solve", mpslinalg.lu_solve, torch.linalg.lu_solve, _lu_solve_samples,
           bad_samples=_lu_solve_bad, grad_args=(0, 2), nonfinite_args=(2,),
           device_reads=1),
]
instantiate_generic_tests(globals(), OPS)
