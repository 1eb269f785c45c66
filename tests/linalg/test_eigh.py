"""eigh and eigvalsh against SciPy (float64) and torch.linalg, on every backend: LAPACK's
xSYT21-style ratios on random, repeated, clustered, rank-deficient, ill-conditioned and extremely
scaled Hermitian matrices; the UPLO contract; non-finite input; the Metal kernels' paths, launch
counts, convergence and header mirrors."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg.cases.eigh import (
    eigenvalue_ratio,
    eigh_ratios,
    hermitian,
    hermitian_with_spectrum,
    random_hermitian,
)
from mpslinalg.testing import THRESH, count_host_syncs, wide

from opdb import metal_constant

eigh_module = importlib.import_module("mpslinalg.linalg.eigh")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = (torch.float32, torch.complex64)


def dtypes(backend):
    extra = () if backend.is_metal else (torch.float64, torch.complex128)
    return DTYPES + extra


def spectrum(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Eigenvalues of one of the hard kinds of Hermitian matrix."""
    if kind == "repeated":  # three distinct values, each repeated
        return np.sort(rng.choice([-2.0, 0.5, 3.0], size=n))
    if kind == "clustered":  # a cluster 1e-6 wide and two outliers
        return np.r_[1.0 + 1e-6 * rng.standard_normal(n)][:n] * np.r_[
            np.ones(max(n - 2, 0)), [-5.0, 7.0]][:n]
    if kind == "rank-deficient":  # rank about n / 3, the rest exactly zero
        lam = np.zeros(n)
        lam[: max(n // 3, 1)] = rng.uniform(1, 2, max(n // 3, 1))
        return lam
    if kind == "ill-conditioned":  # |lambda| from 1 down to 1e-7, both signs
        return np.geomspace(1.0, 1e-7, n) * rng.choice([-1.0, 1.0], size=n)
    return rng.standard_normal(n)  # random


def check_eigh(A: torch.Tensor, L: torch.Tensor, V: torch.Tensor, UPLO: str = "L") -> dict:
    """Shapes, dtypes, ascending order and the three ratios (< THRESH); returns the ratios."""
    n = A.shape[-1]
    real = A.real.dtype if A.is_complex() else A.dtype
    assert L.shape == A.shape[:-1] and L.dtype == real and L.device == A.device
    assert V.shape == A.shape and V.dtype == A.dtype and V.device == A.device
    Lc = L.cpu()
    assert (Lc[..., 1:] >= Lc[..., :-1]).all(), "eigenvalues not ascending"
    if n == 0 or A.numel() == 0:
        return {}
    ratios = eigh_ratios(A, L, V, UPLO)
    assert all(r < THRESH for r in ratios.values()), ratios
    return ratios


# n = 63 / 45 (past the threadgroup stage) is covered by test_device_memory_path.
SIZES = (1, 2, 3, 4, 5, 8, 13, 20)
KINDS = ("random", "repeated", "clustered", "rank-deficient", "ill-conditioned")


@FIXTURE_OK
@given(data=st.data())
def test_eigh_ratios(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from(SIZES), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 2)]), label="batch")
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    UPLO = data.draw(st.sampled_from(["L", "U", "l", "u"]), label="UPLO")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    lam = np.stack([spectrum(kind, n, rng) for _ in range(math.prod(batch))]).reshape(
        *batch, n)
    A = backend.tensor(hermitian_with_spectrum(lam, dtype, batch, seed))
    L, V = mpslinalg.eigh(A, UPLO=UPLO)
    check_eigh(A, L, V, UPLO)
    # the Metal kernels make the same rotations without vectors; LAPACK uses other drivers
    exact = {"rtol": 0, "atol": 0} if backend.is_metal else {}
    torch.testing.assert_close(mpslinalg.eigvalsh(A, UPLO=UPLO), L, **exact)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_extreme_scales_keep_relative_accuracy(backend, scale):
    """float32 entries near 1e-30 and 1e30: the same relative accuracy as at scale 1 (the
    exact power-of-two scaling); eigenvalues within 30 n eps max|lambda| of SciPy's."""
    for dtype in DTYPES:
        for n in (3, 12):
            A1 = random_hermitian(n, dtype, (2,), seed=n)
            A = backend.tensor(A1 * scale)
            L, V = mpslinalg.eigh(A)
            assert torch.isfinite(L).all() and torch.isfinite(V).all()
            check_eigh(A, L, V)
            L1, _ = mpslinalg.eigh(backend.tensor(A1))
            rel = (wide(L) / scale - wide(L1)).abs().max() / wide(L1).abs().max()
            assert rel < 30 * n * torch.finfo(torch.float32).eps, rel


def test_only_the_uplo_triangle_is_read(backend):
    """NaN in the other triangle and in the imaginary part of the diagonal changes nothing."""
    for dtype in dtypes(backend):
        for n in (3, 9):
            A = random_hermitian(n, dtype, (2,), seed=20 + n)
            for UPLO in ("L", "U"):
                garbage = A.clone()
                other = (torch.ones(n, n, dtype=torch.bool).triu(1) if UPLO == "L"
                         else torch.ones(n, n, dtype=torch.bool).tril(-1))
                garbage[..., other] = math.nan
                if dtype.is_complex:
                    garbage.diagonal(dim1=-2, dim2=-1).imag.fill_(math.nan)
                before = garbage.clone()
                G = backend.tensor(garbage)
                L, V = mpslinalg.eigh(G, UPLO=UPLO)
                assert torch.equal(G.cpu(), before) or torch.equal(
                    G.cpu().isnan(), before.isnan()), "input modified"
                L0, V0 = mpslinalg.eigh(backend.tensor(A), UPLO=UPLO)
                torch.testing.assert_close(L, L0, rtol=0, atol=0)
                torch.testing.assert_close(V, V0, rtol=0, atol=0)
                check_eigh(backend.tensor(hermitian(A, UPLO)), L, V)


def test_nonfinite_gives_nan_quickly(metal_backend, monkeypatch):
    """NaN or Inf in the read triangle: NaN eigenvalues and vectors for that matrix (no sweep
    runs: status [n, 0]), the other matrices as without it; torch raises for NaN instead. Every
    path: n = 64 takes the tridiagonal one here."""
    monkeypatch.setattr(eigh_module, "TRIDIAG_MIN_N", 64)
    for dtype in DTYPES:
        for n in (3, 7, 63, 64):
            A = random_hermitian(n, dtype, (3,), seed=n)
            clean = eigh_module.eigh_metal(metal_backend.tensor(A), lower=True, vectors=True)
            for value in (math.nan, math.inf, -math.inf):
                bad = A.clone()
                bad[1, n - 1, 0] = value
                w, V, status = eigh_module.eigh_metal(metal_backend.tensor(bad), lower=True,
                                                      vectors=True)
                assert w[1].isnan().all() and V[1].isnan().all()
                assert status[1].tolist() == [n, 0]
                for i in (0, 2):
                    assert torch.equal(w[i], clean[0][i]) and torch.equal(V[i], clean[1][i])
                L = mpslinalg.eigvalsh(metal_backend.tensor(bad))
                assert L[1].isnan().all() and torch.isfinite(L[0]).all()


def test_empty(backend):
    for dtype in dtypes(backend):
        for shape in [(0, 3, 3), (2, 0, 0), (0, 0), (0, 70, 70)]:
            A = backend.tensor(torch.zeros(shape, dtype=dtype))
            L, V = mpslinalg.eigh(A)
            real = A.real.dtype if A.is_complex() else A.dtype
            assert L.shape == shape[:-1] and V.shape == shape and L.dtype == real
            assert mpslinalg.eigvalsh(A).shape == shape[:-1]


def test_zero_and_identity_and_diagonal(backend):
    for dtype in DTYPES:
        for n in (2, 5, 40):
            Z = backend.tensor(torch.zeros(2, n, n, dtype=dtype))
            L, V = mpslinalg.eigh(Z)
            assert torch.equal(L.cpu(), torch.zeros(2, n))
            assert torch.equal(V.cpu(), torch.eye(n, dtype=dtype).expand(2, n, n))
            d = torch.arange(n, 0, -1, dtype=torch.float32)
            L, V = mpslinalg.eigh(backend.tensor(torch.diag(d).to(dtype)))
            if backend.name == "cuda":  # cuSOLVER's tridiagonal solver rounds even here
                torch.testing.assert_close(L.cpu(), d.flip(0))
                torch.testing.assert_close(V.cpu().abs(), torch.eye(n).flip(1).to(V.real.dtype))
                continue
            assert torch.equal(L.cpu(), d.flip(0))  # exact: nothing to rotate, only sorting
            assert torch.equal(V.cpu().abs(), torch.eye(n).flip(1).to(V.real.dtype))


# ---------------------------------------------------------------- metal paths


def test_paths():
    assert eigh_module.path(4, torch.float32) == "small"
    assert eigh_module.group_max_n(torch.float32) == 62
    assert eigh_module.group_max_n(torch.complex64) == 44
    assert eigh_module.path(62, torch.float32) == "group"
    assert eigh_module.path(63, torch.float32) == "device"
    assert eigh_module.path(44, torch.complex64) == "group"
    assert eigh_module.path(45, torch.complex64) == "device"
    assert eigh_module.TRIDIAG_MIN_N == 128
    for dtype in DTYPES:
        assert eigh_module.path(127, dtype) == "device"
        assert eigh_module.path(128, dtype) == "tridiagonal"


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_memory_path(metal_backend, dtype):
    """Matrices larger than the threadgroup stage: the same kernel body in device memory."""
    n = eigh_module.group_max_n(dtype) + 1
    A = metal_backend.tensor(hermitian_with_spectrum(
        np.r_[np.zeros(n // 2), np.linspace(1, 2, n - n // 2)], dtype, (), seed=30))
    L, V = mpslinalg.eigh(A)
    check_eigh(A, L, V)
    assert eigh_module.eigh_metal(A, lower=True, vectors=True)[2][0] == 0  # converged


def test_device_path_matches_group_path(metal_backend, monkeypatch):
    """Both kernels run the same arithmetic in the same order: bit-identical results."""
    for dtype, n in [(torch.float32, 11), (torch.complex64, 11), (torch.float32, 12)]:
        A = metal_backend.tensor(random_hermitian(n, dtype, (2,), seed=31))
        group = eigh_module.eigh_metal(A, lower=False, vectors=True)
        monkeypatch.setattr(eigh_module, "path", lambda n, dtype: "device")
        device = eigh_module.eigh_metal(A, lower=False, vectors=True)
        monkeypatch.undo()
        for a, b in zip(group, device, strict=True):
            assert torch.equal(a, b)


def test_results_independent_of_threads(metal_backend, monkeypatch):
    """eigh_device's bits do not depend on its threads per group (a pipeline's limit may cut
    them): 96 threads leave a thread several batches of items a step (eigh_device_load_batch),
    some of them partial; 1024 leave threads without items (n = 45)."""
    for dtype, n in [(torch.float32, 63), (torch.complex64, 45)]:
        assert eigh_module.path(n, dtype) == "device"
        A = metal_backend.tensor(random_hermitian(n, dtype, (2,), seed=33))
        results = []
        for count in (96, 1024):
            monkeypatch.setattr(eigh_module, "_group_threads", lambda n, count=count: count)
            results.append(eigh_module.eigh_metal(A, lower=True, vectors=True))
        for a, b in zip(*results, strict=True):
            assert torch.equal(a, b)


def test_launch_counts_independent_of_batch(metal_backend):
    if metal_backend.name != "emulator":
        pytest.skip("launches are counted by the emulator")
    for n, dtype, batches in [(3, torch.float32, (1, 100000)), (4, torch.complex64, (1, 1000)),
                              (9, torch.float32, (1, 6)), (45, torch.complex64, (1, 2))]:
        for batch in batches:
            A = metal_backend.tensor(random_hermitian(n, dtype, (batch,), seed=n))
            for fn in (mpslinalg.eigh, mpslinalg.eigvalsh):
                emulator.reset_launch_counts()
                fn(A)
                assert emulator.total_launches() == 1, (n, batch, emulator.launch_counts())
        # a non-contiguous input adds one gather
        A = metal_backend.tensor(random_hermitian(n, dtype, (2,), seed=n)).mT
        emulator.reset_launch_counts()
        mpslinalg.eigh(A)
        assert emulator.total_launches() == 2


def test_lane_order_independent(metal_backend, monkeypatch):
    if metal_backend.name != "emulator":
        pytest.skip("lane orders are an emulator option")
    monkeypatch.setattr(eigh_module, "TRIDIAG_MIN_N", 46)  # 46, 47: the tridiagonal path
    for n in (10, 45, 46, 47):
        A = random_hermitian(n, torch.complex64, (2,), seed=32)
        results = []
        for order in (None, "reverse", "random"):
            monkeypatch.setattr(_metal, "LANE_ORDER", order)
            results.append(eigh_module.eigh_metal(A, lower=True, vectors=True))
        for result in results[1:]:
            for a, b in zip(result, results[0], strict=True):
                assert torch.equal(a, b)


HARD = {
    "random 20": lambda dtype: random_hermitian(20, dtype, (), 40),
    "repeated 16": lambda dtype: hermitian_with_spectrum(np.repeat([1.0, -1.0], 8), dtype, (),
                                                         41),
    "clustered 16": lambda dtype: hermitian_with_spectrum(1 + 1e-6 * np.arange(16), dtype, (),
                                                          42),
    "rank 3 of 16": lambda dtype: hermitian_with_spectrum(np.r_[1, 2, 3, np.zeros(13)], dtype,
                                                          (), 43),
    "graded 1 .. 1e-7, 16": lambda dtype: hermitian_with_spectrum(np.geomspace(1, 1e-7, 16),
                                                                  dtype, (), 44),
}


@pytest.mark.parametrize("case", sorted(HARD))
def test_converges_within_the_sweep_bound(metal_backend, case):
    """info 0 (converged) well inside MAX_SWEEPS on the hard spectra."""
    for dtype in DTYPES:
        A = metal_backend.tensor(HARD[case](dtype))
        w, V, status = eigh_module.eigh_metal(A, lower=True, vectors=True)
        info, sweeps = status.tolist()
        assert info == 0 and 0 < sweeps <= eigh_module.MAX_SWEEPS // 2, (case, status)
        check_eigh(A, w, V)


# ---------------------------------------------------------------- tridiagonal path


@pytest.fixture(params=["staged", "unstaged", "no leaves"])
def tridiagonal(request, monkeypatch):
    """The tridiagonal path from n = 5 on, so that the emulator runs it at small sizes, a launch
    per column before the last four; divide and conquer's deflation scan on threadgroup memory,
    or on the workspace as past DIVIDE_STAGE; and without eigh_dc_leaf (DIVIDE_LEAF_MAX = 1:
    merges from the 1 x 1 blocks up, as for the levels above the leaves)."""
    monkeypatch.setattr(eigh_module, "TRIDIAG_MIN_N", 5)
    monkeypatch.setattr(eigh_module, "TRIDIAG_TAIL", 4)
    if request.param == "unstaged":
        monkeypatch.setattr(eigh_module, "DIVIDE_STAGE", 0)
    if request.param == "no leaves":
        monkeypatch.setattr(eigh_module, "DIVIDE_LEAF_MAX", 1)
    return request.param


@pytest.mark.parametrize("kind", KINDS)
def test_tridiagonal_path_ratios(metal_backend, tridiagonal, kind):
    """LAPACK's ratios on every spectrum kind, both triangles; eigvalsh's eigenvalues (the same
    reduction, then bisection) within LAPACK's eigenvalue ratio too."""
    rng = np.random.default_rng(70)
    for dtype in DTYPES:
        for n in (5, 12, 33):
            assert eigh_module.path(n, dtype) == "tridiagonal"
            lam = np.stack([spectrum(kind, n, rng) for _ in range(2)])
            A = metal_backend.tensor(hermitian_with_spectrum(lam, dtype, (2,), 71 + n))
            for UPLO in ("L", "U"):
                w, V, status = eigh_module.eigh_metal(A, lower=UPLO == "L", vectors=True)
                check_eigh(A, w, V, UPLO)
                assert (status[:, 0] == 0).all(), status  # converged
                assert (status[:, 1] <= 30 * n).all()
                w_only, _, status = eigh_module.eigh_metal(A, lower=UPLO == "L",
                                                           vectors=False)
                assert eigenvalue_ratio(A, w_only, UPLO) < THRESH
                assert (w_only[:, 1:] >= w_only[:, :-1]).all()
                assert (status[:, 0] == 0).all() and (status[:, 1] <= 64).all()


def test_tridiagonal_path_at_its_crossover(metal_backend):
    """The default rule's smallest order, float32 and complex64."""
    for dtype in DTYPES:
        n = eigh_module.TRIDIAG_MIN_N
        A = metal_backend.tensor(random_hermitian(n, dtype, (), seed=72))
        L, V = mpslinalg.eigh(A)
        check_eigh(A, L, V)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_tridiagonal_extreme_scales(metal_backend, tridiagonal, scale):
    """The exact power-of-two scaling happens in step 0: the same relative accuracy as at
    scale 1."""
    for dtype in DTYPES:
        n = 14
        A1 = random_hermitian(n, dtype, (2,), seed=73)
        L, V = mpslinalg.eigh(metal_backend.tensor(A1 * scale))
        assert torch.isfinite(L).all() and torch.isfinite(V).all()
        check_eigh(metal_backend.tensor(A1 * scale), L, V)
        L1 = mpslinalg.eigvalsh(metal_backend.tensor(A1))
        rel = (wide(L) / scale - wide(L1)).abs().max() / wide(L1).abs().max()
        assert rel < 30 * n * torch.finfo(torch.float32).eps, rel


def test_tridiagonal_zero_and_diagonal_exact(metal_backend, tridiagonal):
    """Nothing to reduce (every tau 0) and nothing to rotate: exact results."""
    for dtype in DTYPES:
        n = 11
        L, V = mpslinalg.eigh(metal_backend.tensor(torch.zeros(2, n, n, dtype=dtype)))
        assert torch.equal(L.cpu(), torch.zeros(2, n))
        assert torch.equal(V.cpu(), torch.eye(n, dtype=dtype).expand(2, n, n))
        d = torch.arange(n, 0, -1, dtype=torch.float32)
        L, V = mpslinalg.eigh(metal_backend.tensor(torch.diag(d).to(dtype)))
        assert torch.equal(L.cpu(), d.flip(0))
        assert torch.equal(V.cpu().abs(), torch.eye(n).flip(1).to(V.real.dtype))


def test_tridiagonal_launches_independent_of_batch(metal_backend, tridiagonal):
    if metal_backend.name != "emulator":
        pytest.skip("launches are counted by the emulator")
    n = 10
    for fn, vectors in ((mpslinalg.eigvalsh, False), (mpslinalg.eigh, True)):
        counts = []
        for batch in (1, 5):
            A = metal_backend.tensor(random_hermitian(n, torch.complex64, (batch,), seed=75))
            emulator.reset_launch_counts()
            fn(A)
            counts.append(emulator.launch_counts())
        assert counts[0] == counts[1]
        assert counts[0]["eigh_tridiag_step_complex64"] == n - eigh_module.TRIDIAG_TAIL
        assert counts[0]["eigh_tridiag_tail_complex64"] == 1
        assert counts[0]["eigh_tridiag_load_complex64"] == 1
        if vectors:
            # ceil(log2 n) levels; level l's blocks have at most ceil(n 2^l / 2^levels) rows.
            # The highest level below the last whose blocks have at most DIVIDE_LEAF_MAX rows is
            # one eigh_dc_leaf launch (none for level 0), each level above it five launches.
            levels = (n - 1).bit_length()
            leaf = max(lv for lv in range(levels)
                       if -(-(n << lv) >> levels) <= eigh_module.DIVIDE_LEAF_MAX)
            assert leaf == (0 if tridiagonal == "no leaves" else 3)  # blocks of 5 rows at n = 10
            assert counts[0].get("eigh_dc_leaf_float32", 0) == (leaf > 0)
            for kernel in ("merge", "secular", "zhat", "mix"):
                assert counts[0][f"eigh_dc_{kernel}_float32"] == levels - leaf
        else:
            assert counts[0]["eigh_tridiag_bisect_complex64"] == 1
            assert emulator.total_launches() == n - eigh_module.TRIDIAG_TAIL + 3


def test_tridiagonal_tail_gives_the_same_bits(metal_backend, tridiagonal, monkeypatch):
    """The columns reduced by eigh_tridiag_tail (one threadgroup, all rows) and by a launch
    each (eigh_tridiag_step) are the same computation: the same bits whatever the split,
    including a tail that reduces the whole matrix (step 0's scaling in it)."""
    n = 13
    A = metal_backend.tensor(random_hermitian(n, torch.complex64, (2,), seed=76) * 1e20)
    results = []
    for tail in (1, 4, n):
        monkeypatch.setattr(eigh_module, "TRIDIAG_TAIL", tail)
        results.append(eigh_module.eigh_metal(A, lower=False, vectors=True))
        results.append(eigh_module.eigh_metal(A, lower=True, vectors=False))
    for result in results[2:]:
        other = results[0] if result[1].numel() else results[1]
        for a, b in zip(result, other, strict=True):
            assert torch.equal(a, b)
    check_eigh(A, results[0][0], results[0][1], "U")


def test_tridiagonal_no_host_syncs(metal_backend, tridiagonal):
    A = metal_backend.tensor(random_hermitian(12, torch.complex64, (2,), seed=77))
    with count_host_syncs() as syncs:
        mpslinalg.eigh(A)
        mpslinalg.eigvalsh(A)
    assert syncs.calls == []


def test_no_host_syncs(metal_backend):
    A = metal_backend.tensor(random_hermitian(12, torch.complex64, (2,), seed=50))
    with count_host_syncs() as syncs:
        mpslinalg.eigh(A)
        mpslinalg.eigvalsh(A)
    assert syncs.calls == []


def test_metal_rejects_orders_past_32_bit_indexing(metal_backend):
    n = eigh_module.MAX_N + 1
    A = torch.zeros(1, 1, device=metal_backend.device).expand(n, n)  # no memory behind it
    with pytest.raises(ValueError, match="mpslinalg.eigh: the metal backend supports matrices"):
        mpslinalg.eigh(A)


def test_metal_rejects_double(metal_backend):
    with pytest.raises(TypeError, match="mpslinalg.eigh: the metal backend"):
        mpslinalg.eigh(metal_backend.tensor(torch.eye(3, dtype=torch.float64)))


# ---------------------------------------------------------------- autograd


def _grad(fn, A, weight_seed=0):
    A = A.clone().requires_grad_()
    out = fn((A + A.mH) / 2)
    outs = out if isinstance(out, tuple) else (out,)
    gen = torch.Generator().manual_seed(weight_seed)
    loss = 0
    for o in outs:
        w = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o)
        loss = loss + (o * w).real.sum()
    return torch.autograd.grad(loss, A)[0]


def test_gradients_match_torch(backend):
    """Gauge-invariant losses (eigenvalues, |V|, V diag(L) V^H) against torch's autograd in
    float64 / complex128."""
    for dtype in DTYPES:
        wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
        A = random_hermitian(5, wide_dtype, (2,), seed=60)
        for ours, ref in [
            (lambda M: mpslinalg.eigvalsh(M), lambda M: torch.linalg.eigvalsh(M)),
            (lambda M: mpslinalg.eigh(M).eigenvectors.abs(),
             lambda M: torch.linalg.eigh(M).eigenvectors.abs()),
            (lambda M: (lambda L, V: (V * L.to(V.dtype)[..., None, :]) @ V.mH)(
                *mpslinalg.eigh(M)),
             lambda M: (lambda L, V: (V * L.to(V.dtype)[..., None, :]) @ V.mH)(
                *torch.linalg.eigh(M))),
        ]:
            ref_grad = _grad(ref, A)
            if backend.is_metal:
                got = _grad(ours, backend.tensor(A.to(dtype)))
                torch.testing.assert_close(wide(got), ref_grad, rtol=2e-3, atol=2e-3)
            else:
                torch.testing.assert_close(_grad(ours, A), ref_grad)


def test_repeated_eigenvalues_gradients_as_torch(backend):
    """At a repeated eigenvalue a loss of L alone (or eigvalsh) has a finite gradient, one that
    uses V a non-finite one, as torch's."""
    for dtype in DTYPES:
        A = torch.diag(torch.tensor([1.0, 1.0, 2.0])).to(dtype)
        ref = A.to(torch.complex128 if dtype.is_complex else torch.float64).requires_grad_()
        torch.linalg.eigvalsh(ref).sum().backward()
        for fn in (lambda M: mpslinalg.eigvalsh(M).sum(),
                   lambda M: mpslinalg.eigh(M).eigenvalues.sum()):
            M = backend.tensor(A).clone().requires_grad_()
            fn(M).backward()
            torch.testing.assert_close(wide(M.grad), ref.grad)
        M = backend.tensor(A).clone().requires_grad_()
        L, V = mpslinalg.eigh(M)
        (V.abs().sum() + L.sum()).backward()
        assert not torch.isfinite(M.grad).all()


def test_complex_gauge_dependent_loss_raises(backend):
    """A loss that depends on the phase of complex eigenvectors is ill-defined: torch's error."""
    A = backend.tensor(random_hermitian(4, torch.complex64, (), seed=61)).requires_grad_()
    V = mpslinalg.eigh(A).eigenvectors
    with pytest.raises(RuntimeError, match="ill-defined"):
        V.real.sum().backward()


# ---------------------------------------------------------------- docs, header mirrors



def test_host_constants_mirror_header():
    def const(name):
        return metal_constant("linalg/eigh.h", name)

    assert int(const("kEighSmallMax")) == eigh_module.SMALL_MAX
    assert int(const("kEighMaxSweeps")) == eigh_module.MAX_SWEEPS
    assert int(const("kEighStageBytes")) == eigh_module.STAGE_BYTES
    assert int(const("kEighRotFloats")) == eigh_module.ROT_FLOATS
    assert int(const("kEighGroupMaxPairs")) == eigh_module.GROUP_MAX_PAIRS
    assert int(const("kEighStatusInts")) == eigh_module.STATUS_INTS
    assert const("kEighMaxThreads") == "kMaxThreadsPerGroup" and eigh_module.MAX_THREADS == 1024
    def tri(name):
        return int(metal_constant("linalg/eigh_tridiagonal.h", name))

    assert tri("kTridiagBisectThreads") == eigh_module.TRIDIAG_BISECT_THREADS

    def divide(name):
        return int(metal_constant("linalg/eigh_divide.h", name))

    assert divide("kDivideWorkFloats") == eigh_module.DIVIDE_WORK_FLOATS
    assert divide("kDivideWorkInts") == eigh_module.DIVIDE_WORK_INTS
    assert divide("kDivideStageMax") == eigh_module.DIVIDE_STAGE
    # every pair of the largest staged order fits the group's rotation buffer
    assert (eigh_module.group_max_n(torch.float32) + 1) // 2 <= eigh_module.GROUP_MAX_PAIRS


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402,I001
    BadSample, OpInfo, Sample, degenerate_samples, instantiate_generic_tests)


def _wide_dtype(c: bool) -> torch.dtype:
    return torch.complex128 if c else torch.float64


def _eigh_samples(c: bool) -> list[Sample]:
    dtype = _wide_dtype(c)
    return [
        Sample((random_hermitian(5, dtype, (), 1),), desc="5x5"),
        Sample((random_hermitian(3, dtype, (2, 3), 2),), desc="(2, 3, 3, 3) one thread each"),
        Sample((random_hermitian(9, dtype, (2,), 3),), {"UPLO": "U"}, desc="(2, 9, 9) upper"),
        Sample((random_hermitian(1, dtype, (2,), 4),), desc="1x1"),
        Sample((torch.zeros(0, 4, 4, dtype=dtype),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=dtype),), desc="0x0"),
    ]


def _eigh_bad() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3),), match="dimensions"),
        BadSample((torch.zeros(3, 4),), match="square"),
        BadSample((torch.zeros(3, 3, dtype=torch.int32),), error=(TypeError, RuntimeError,
                                                                  NotImplementedError),
                  match="int"),
        BadSample((torch.zeros(3, 3),), {"UPLO": "X"}, match="UPLO"),
        BadSample((torch.zeros(3, 3),), {"UPLO": "lower"}, match="UPLO"),
    ]


def _eigh_invariants(out) -> tuple[torch.Tensor, ...]:
    """What eigh determines whatever the signs (phases) of V's columns, for distinct
    eigenvalues: L and |V| (torch's OpInfo compares the same)."""
    L, V = out
    return L, V.abs()


_HERMITIAN_PERTURBATION = {"grad_transform": lambda A: (A + A.mH) / 2}
_NONFINITE_SKIP = {"nonfinite": "torch raises LinAlgError for NaN input (and returns NaN for "
                                "Inf); test_nonfinite_gives_nan_quickly checks ours"}

OPS = [
    OpInfo("eigh", mpslinalg.eigh, torch.linalg.eigh, _eigh_samples, bad_samples=_eigh_bad,
           compare=_eigh_invariants, skips=dict(_NONFINITE_SKIP), small_path=True,
           orthonormal=lambda out: (out.eigenvectors,),
           degenerate=lambda c: degenerate_samples(c, ({}, {"UPLO": "U"}), hermitian=True),
           **_HERMITIAN_PERTURBATION),
    OpInfo("eigvalsh", mpslinalg.eigvalsh, torch.linalg.eigvalsh, _eigh_samples,
           bad_samples=_eigh_bad, skips=dict(_NONFINITE_SKIP), small_path=True,
           **_HERMITIAN_PERTURBATION),
]
instantiate_generic_tests(globals(), OPS)
