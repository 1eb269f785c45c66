"""cholesky, cholesky_ex, solve_triangular, cholesky_solve, cholesky_inverse against torch and
LAPACK's ratios (float64 references), on every backend.

Accuracy: ||L L^H - A|| / (n ||A|| eps) (xPOT01) and ||A X - B|| / (||A|| ||X|| n eps) (xTRT02,
xPOT02) below THRESH, on sizes across the kernels' block boundaries, graded and nearly singular
Hermitian positive-definite matrices and scales near 1e+-30. Failures: info is torch's, the
columns before the failing minor are torch's, the rest NaN on the metal backend. Derivative
rules against torch's autograd in float64 / complex128 (the rules run on the torch backend)
and in float32 / complex64 on the metal backend.
"""

from __future__ import annotations

import functools
import importlib
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lu import _grad_pair, dtypes

import mpslinalg
from mpslinalg.linalg import cholesky_metal, triangular_metal
from mpslinalg.testing import (
    THRESH,
    batch_ratio,
    count_host_syncs,
    count_launches,
    eps,
    inv_ratio,
    matrix_with_spread,
    norm1,
    random_matrix,
    solve_ratio,
    wide,
)

cholesky_module = importlib.import_module("mpslinalg.linalg.cholesky")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

#: Orders across the kernels' boundaries: the one-threadgroup kernel (<= 64), the blocks of 32
#: and the trailing update's tiles of 64.
SIZES = [0, 1, 2, 5, 31, 32, 33, 64, 65, 97, 129]


def hpd(n: int, dtype=torch.float64, batch: tuple = (), seed: int = 0, cond: float = 10.0,
        scale: float = 1.0) -> torch.Tensor:
    """Hermitian positive definite, eigenvalues spread geometrically from ``scale`` down to
    ``scale / cond`` (Q diag(s) Q^H, Q Haar), built in float64 and rounded to ``dtype``."""
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    M = matrix_with_spread(n, 1.0, wide_dtype, batch, seed)  # unitary
    s = scale * cond ** (-torch.arange(n, dtype=torch.float64) / max(n - 1, 1))
    A = (M * s.to(wide_dtype)) @ M.mH
    return (0.5 * (A + A.mH)).to(dtype)


def graded_hpd(n: int, dtype=torch.float64, batch: tuple = (), seed: int = 0,
               spread: float = 1e6) -> torch.Tensor:
    """D H D with H well conditioned and D graded 1 .. spread^-1/2: Cholesky is accurate on it
    whatever its condition number (the factor scales row by row)."""
    d = torch.logspace(0, -0.5 * math.log10(spread), n, dtype=torch.float64)
    A = d[:, None] * hpd(n, torch.complex128 if dtype.is_complex else torch.float64, batch,
                         seed) * d[None, :]
    return A.to(dtype)


def potrf_ratio(A, L, upper: bool = False, dtype=None) -> float:
    """||L L^H - A|| / (n ||A|| eps) (LAPACK xPOT01), with A the Hermitian matrix of the
    triangle read; the maximum over the batch."""
    dtype = dtype or L.dtype
    A, L = wide(A), wide(L)
    H = A.triu() + A.triu(1).mH if upper else A.tril() + A.tril(-1).mH
    product = L.mH @ L if upper else L @ L.mH
    n = max(A.shape[-1], 1)
    return batch_ratio(norm1(product - H), n * norm1(H) * eps(dtype))


def tri_solve_ratio(A, X, B, *, upper: bool, left: bool, unit: bool, dtype=None) -> float:
    """||op X - B|| / (||T|| ||X|| n eps) with T the triangle of A solved with (xTRT02)."""
    T = wide(A).triu() if upper else wide(A).tril()
    if unit:
        T = T - torch.diag_embed(T.diagonal(dim1=-2, dim2=-1)) + torch.eye(T.shape[-1])
    if left:
        return solve_ratio(T, X, B, dtype=dtype)
    return solve_ratio(T.mH, X.mH, B.mH, dtype=dtype)


def _kernel_op(name: str) -> str:
    """A launched kernel's op: its host name without the dtype and the compile-time parameters
    (``chol_update_float32_tile64`` -> ``chol_update``)."""
    return re.split(r"_(?:float32|complex64)(?:_|$)", name)[0]


# ---------------------------------------------------------------- the kernels' constants


@pytest.mark.parametrize("name, value", [("kCholUnblockedMax", cholesky_metal.UNBLOCKED_MAX),
                                         ("kCholBlock", cholesky_metal.BLOCK),
                                         ("kCholRowThreads", cholesky_metal.ROW_THREADS),
                                         ("kCholPotf2Threads", cholesky_metal.POTF2_THREADS)])
def test_host_mirrors_header_constants(name, value):
    from opdb import metal_constant

    assert int(metal_constant("linalg/cholesky.h", name)) == value


def test_block_is_one_triangular_solve_block():
    """The panel's solve is one trsm_diag step: the factorization's block is the solve's
    diagonal block (bs), a multiple of its 32-row sub-block."""
    from opdb import metal_constant

    assert int(metal_constant("linalg/triangular.h", "kTriBlock")) == triangular_metal.BLOCK
    assert cholesky_metal.BLOCK % triangular_metal.BLOCK == 0
    assert cholesky_metal.BLOCKED_MIN_N <= cholesky_metal.UNBLOCKED_MAX + 1
    assert cholesky_metal.OUTER_WIDTH % cholesky_metal.BLOCK == 0


def test_potf2_entries_stay_in_registers():
    """chol_potf2 and chol_potf2_simd keep each thread's entries of the block in a register
    array indexed by constants only: NVRTC's PTX of their instantiations has no local memory (a
    runtime index into the entries, or a loop over them left rolled, would put them there: the
    latency the kernels exist to remove), nor has float32 chol_update's, whose first simdgroup
    factors the next diagonal block a row a lane (complex64's has the product's own local array,
    fused or not). Needs NVRTC, not a GPU (the test-cuda extra)."""
    import re

    from mpslinalg._core import metal as _metal
    from mpslinalg.emulator import cuda

    try:
        cuda._load_nvrtc()
    except cuda.NvrtcNotFoundError as exc:
        pytest.skip(f"NVRTC is not available (the test-cuda extra installs it): {exc}")
    ptx = cuda.compile_ptx(_metal.load_source("linalg/cholesky.metal"))
    entries = dict(re.findall(r"\.entry \w+?_(chol_(?:potf2_\w+|update_float32_tile\d+))\((.*?)"
                              r"(?=\.entry |\Z)", ptx, re.S))
    assert sorted(entries) == ["chol_potf2_complex64", "chol_potf2_float32",
                               "chol_potf2_simd_complex64", "chol_potf2_simd_float32",
                               "chol_update_float32_tile32", "chol_update_float32_tile64"]
    for name, body in entries.items():
        assert ".local" not in body, name


# ---------------------------------------------------------------- factorisation accuracy


@FIXTURE_OK
@given(data=st.data())
def test_cholesky_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from(SIZES), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 1), (0,)]), label="batch")
    upper = data.draw(st.booleans(), label="upper")
    seed = data.draw(st.integers(0, 999), label="seed")
    A = backend.tensor(hpd(n, dtype, batch, seed, cond=1e3))
    A0 = A.clone()
    L, info = mpslinalg.cholesky_ex(A, upper=upper)
    assert torch.equal(A, A0)
    assert L.shape == A.shape and L.dtype == dtype and info.shape == batch
    assert (info.cpu() == 0).all()
    assert potrf_ratio(A, L, upper) < THRESH
    tri = wide(L).triu(1) if not upper else wide(L).tril(-1)
    assert (tri == 0).all(), "the other triangle is zero"
    diag = wide(L).diagonal(dim1=-2, dim2=-1)
    assert (diag.real > 0).all() and (not diag.is_complex() or (diag.imag == 0).all())


@pytest.mark.parametrize("n", [33, 64, 65, 129, 200])
def test_cholesky_matches_torch(backend, n):
    for dtype in dtypes(backend):
        A = backend.tensor(hpd(n, dtype, (2,), seed=n))
        ref = torch.linalg.cholesky(wide(A))
        for upper in (False, True):
            L = mpslinalg.cholesky(A, upper=upper)
            want = ref.mH if upper else ref
            tol = 50 * n * eps(dtype)
            assert (wide(L) - want).abs().max() <= tol * want.abs().max()


@pytest.mark.parametrize("kind", ["graded", "nearly singular", "tiny", "huge"])
def test_hard_inputs(metal_backend, kind):
    """Graded rows (1 .. 1e-3.5), condition 1e7 in float32, and entries scaled by 1e-30 and
    1e30: the backward-error ratio stays below THRESH."""
    for dtype in (torch.float32, torch.complex64):
        for n in (8, 70, 100):  # one kernel, two blocks, four blocks
            if kind == "graded":
                A = graded_hpd(n, dtype, (2,), seed=n, spread=1e7)
            elif kind == "nearly singular":
                A = hpd(n, dtype, (2,), seed=n, cond=1e7)
            else:
                A = hpd(n, dtype, (2,), seed=n, scale=1e-30 if kind == "tiny" else 1e30)
            A = metal_backend.tensor(A)
            L, info = mpslinalg.cholesky_ex(A)
            if kind == "nearly singular":
                # rounding A to float32 may leave its smallest eigenvalue below zero, which
                # the factorisation must then report; where it does not, the factor is good
                ok = wide(info) == 0
                ref_info = torch.linalg.cholesky_ex(wide(A)).info
                assert torch.equal(ok, ref_info == 0) or (ok.all() and not ref_info.any())
                assert potrf_ratio(A[ok], L[ok]) < THRESH
            else:
                assert (info.cpu() == 0).all()
                assert potrf_ratio(A, L) < THRESH


def test_lane_order_independent(metal_backend, monkeypatch):
    """Every result element is computed by one thread in a fixed order: the same bits
    whatever order the emulator runs the lanes in (one block and several)."""
    if metal_backend.name != "emulator":
        pytest.skip("lane orders are an emulator option")
    from mpslinalg._core import metal as _metal

    for n, dtype in ((20, torch.complex64), (100, torch.complex64), (150, torch.float32)):
        A = hpd(n, dtype, (2,), seed=16)
        results = []
        for order in (None, "reverse", "random"):
            monkeypatch.setattr(_metal, "LANE_ORDER", order)
            results.append(cholesky_metal.cholesky_metal(A, False))
        for result in results[1:]:
            for a, b in zip(result, results[0], strict=True):
                assert torch.equal(a, b)


# ---------------------------------------------------------------- failures and info


def _indefinite(n: int, dtype, minor: int, seed: int = 0) -> torch.Tensor:
    """HPD but for its trailing block from ``minor`` (1-based) on, made indefinite: the leading
    minors of orders below ``minor`` are positive definite, that of order ``minor`` is not."""
    A = hpd(n, dtype, (), seed)
    A[minor - 1, minor - 1] = -2.0
    return A


@pytest.mark.parametrize("n, minor", [(5, 1), (5, 3), (5, 5), (40, 17), (70, 1), (70, 33),
                                      (70, 64), (70, 70)])
def test_info_is_the_failing_minor(backend, n, minor):
    for dtype in dtypes(backend):
        A = torch.stack([hpd(n, dtype, (), 1), _indefinite(n, dtype, minor, 2),
                         hpd(n, dtype, (), 3)])
        A = backend.tensor(A)
        L, info = mpslinalg.cholesky_ex(A)
        ref_L, ref_info = torch.linalg.cholesky_ex(wide(A))
        assert torch.equal(info.cpu(), ref_info) and info[1] == minor
        # the leading minor's factor is torch's; the other batch elements are untouched
        k = minor - 1
        torch.testing.assert_close(wide(L)[1, :, :k], ref_L[1, :, :k], rtol=1e-4, atol=1e-4)
        assert potrf_ratio(A[0::2], L[0::2]) < THRESH
        if backend.is_metal:
            # from the failing column on: NaN in the lower triangle, never finite garbage
            lower = torch.ones(n, n, dtype=torch.bool).tril()
            assert wide(L)[1, :, k:][lower[:, k:]].isnan().all()
        with pytest.raises(mpslinalg.LinAlgError, match=rf"Batch element 1\).*order {minor} "):
            mpslinalg.cholesky(A)
        with pytest.raises(torch.linalg.LinAlgError):
            mpslinalg.cholesky_ex(A, upper=True, check_errors=True)



def test_simdgroup_potf2_every_order(metal_backend):
    """Orders 1 to 32, chol_potf2_simd (one simdgroup, a row a lane, the column by broadcasts,
    the groups of kCholColumnGroup entries past the block skipped): a good matrix, failing
    minors first, mid-way and last, and NaN read below the diagonal, per dtype: info exactly
    torch's (float64), the factor torch's before the failing column and NaN from it on."""
    for dtype in (torch.float32, torch.complex64):
        for n in range(1, cholesky_metal.BLOCK + 1):
            minors = sorted({1, (n + 1) // 2, n})
            A = torch.stack([hpd(n, dtype, (), n)] +
                            [_indefinite(n, dtype, m, seed=n + m) for m in minors])
            nan = hpd(n, dtype, (), 2 * n).unsqueeze(0)
            nan[0, n - 1, n // 2] = math.nan
            A = torch.cat([A, nan])
            # the kernels directly: orders up to 4 take the n <= 4 path through cholesky_ex
            L, info = cholesky_metal.cholesky_metal(metal_backend.tensor(A), False)
            L, info = L.cpu(), info.cpu()
            ref_L, ref_info = torch.linalg.cholesky_ex(wide(A))
            assert torch.equal(info, ref_info), (dtype, n)
            assert info[0] == 0 and potrf_ratio(A[:1], L[:1]) < THRESH
            lower = torch.ones(n, n, dtype=torch.bool).tril()
            for b in range(1, A.shape[0]):
                k = int(info[b]) - 1
                torch.testing.assert_close(wide(L)[b, :, :k], ref_L[b, :, :k], rtol=1e-4,
                                           atol=1e-4, equal_nan=True)
                assert wide(L)[b, :, k:][lower[:, k:]].isnan().all(), (dtype, n, b)
            assert (L.triu(1) == 0).all()

def test_nan_stays_in_its_batch_element(backend):
    for n in (4, 70):
        A = hpd(n, torch.float32, (3,), seed=4)
        A[1, n // 2, 1] = math.nan  # below the diagonal: read
        A = backend.tensor(A)
        L, info = mpslinalg.cholesky_ex(A)
        if not backend.is_metal and backend.device.type == "cuda":
            # cuSOLVER's potrf does not see NaN (info 0): the torch backend is torch's there
            assert torch.equal(info, torch.linalg.cholesky_ex(A).info)
            continue
        _, ref_info = torch.linalg.cholesky_ex(wide(A))
        assert torch.equal(info.cpu(), ref_info)
        assert info[1] > 0 and info[0] == 0 and info[2] == 0
        assert not torch.isfinite(L[1]).all() and torch.isfinite(L[0::2]).all()
        with pytest.raises(mpslinalg.LinAlgError, match=r"\(Batch element 1\)"):
            mpslinalg.cholesky(A)


@pytest.mark.parametrize("upper", [False, True])
def test_reads_only_its_triangle(backend, upper):
    """NaN in the triangle not read, and an imaginary part on the diagonal, change nothing."""
    for dtype in dtypes(backend):
        for n in (5, 70):
            A = hpd(n, dtype, (2,), seed=5)
            poisoned = A.clone()
            other = torch.ones(n, n, dtype=torch.bool).tril(-1)
            other = other if upper else other.mT
            poisoned[:, other] = math.nan
            if dtype.is_complex:
                poisoned.diagonal(dim1=-2, dim2=-1).imag.fill_(7.0)
            L = mpslinalg.cholesky(backend.tensor(poisoned), upper=upper)
            assert torch.equal(L, mpslinalg.cholesky(backend.tensor(A), upper=upper))
            B = backend.tensor(random_matrix(3, dtype, (2,), seed=6, m=n))
            for fn in (lambda T, B=B: mpslinalg.cholesky_solve(B, T, upper),
                       lambda T: mpslinalg.cholesky_inverse(T, upper),
                       lambda T, B=B: mpslinalg.solve_triangular(T, B, upper=upper)):
                T = L.clone()
                T[:, other] = math.nan
                assert torch.equal(fn(T), fn(L))


# ---------------------------------------------------------------- solves


@FIXTURE_OK
@given(data=st.data())
def test_solve_triangular_ratio(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from([0, 1, 3, 31, 33, 130]), label="n")
    k = data.draw(st.sampled_from([1, 3, 40]), label="k")
    upper, left, unit = (data.draw(st.booleans(), label=name) for name in ("upper", "left",
                                                                          "unit"))
    batch_a, batch_b = data.draw(st.sampled_from([((), ()), ((2,), (2,)), ((2, 1), (3,)),
                                                  ((), (2,)), ((0,), ())]), label="batches")
    seed = data.draw(st.integers(0, 999), label="seed")
    # the factor of an HPD matrix: a triangle with a condition number like the matrix's root
    T = torch.linalg.cholesky(hpd(n, wide(torch.empty(0, dtype=dtype)).dtype, batch_a, seed,
                                  cond=1e4), upper=upper).to(dtype)
    if unit:
        T = T / T.diagonal(dim1=-2, dim2=-1).unsqueeze(-1 if not upper else -2)
    T = T + (torch.ones_like(T).tril(-1) if upper else torch.ones_like(T).triu(1))  # not read
    B = random_matrix(n, dtype, batch_b, seed + 1, m=k)
    B = B.mT if left else B
    A, B = backend.tensor(T), backend.tensor(B.contiguous())
    X = mpslinalg.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
    assert X.dtype == dtype
    assert X.shape == (*torch.broadcast_shapes(batch_a, batch_b), *B.shape[-2:])
    Bb = B.expand(X.shape)
    assert tri_solve_ratio(A, X, Bb, upper=upper, left=left, unit=unit, dtype=dtype) < THRESH


def test_cholesky_solve_and_inverse_ratio(backend):
    for dtype in dtypes(backend):
        for n in (3, 33, 70):
            for upper in (False, True):
                A = backend.tensor(hpd(n, dtype, (2,), seed=n, cond=1e3))
                L = mpslinalg.cholesky(A, upper=upper)
                B = backend.tensor(random_matrix(4, dtype, (3, 1), seed=7, m=n))
                X = mpslinalg.cholesky_solve(B, L, upper)
                assert X.shape == (3, 2, n, 4)
                assert solve_ratio(A.expand(3, 2, n, n), X, B.expand(3, 2, n, 4)) < THRESH
                inverse = mpslinalg.cholesky_inverse(L, upper)
                if backend.is_metal or backend.device.type == "cpu":  # torch's CUDA one is not
                    assert torch.equal(inverse, inverse.mH)
                eye = torch.eye(n, dtype=wide(inverse).dtype)
                ratio = batch_ratio(norm1(wide(A) @ wide(inverse) - eye),
                                    n * norm1(A) * norm1(inverse) * eps(dtype))
                assert ratio < THRESH


def test_empty_shapes(backend):
    for dtype in dtypes(backend):
        for shape in ((0, 0), (2, 0, 0), (0, 3, 3)):
            A = backend.tensor(torch.zeros(shape, dtype=dtype))
            L, info = mpslinalg.cholesky_ex(A)
            assert L.shape == shape and info.shape == shape[:-2]
            assert mpslinalg.cholesky_inverse(A).shape == shape
            B = backend.tensor(torch.zeros((*shape[:-1], 2), dtype=dtype))
            assert mpslinalg.cholesky_solve(B, A).shape == B.shape
            assert mpslinalg.solve_triangular(A, B, upper=True).shape == B.shape


def test_validation(backend):
    A = backend.tensor(torch.eye(3))
    with pytest.raises(RuntimeError, match="^mpslinalg.solve_triangular: .*at least 2"):
        mpslinalg.solve_triangular(A, A[0], upper=True)
    with pytest.raises(RuntimeError, match=r"^mpslinalg.solve_triangular: .*XA = B"):
        mpslinalg.solve_triangular(A, A[:, :2], upper=True, left=False)
    with pytest.raises(TypeError):
        mpslinalg.solve_triangular(A, A)  # upper is required, as in torch
    with pytest.raises(RuntimeError, match="^mpslinalg.cholesky_solve: .*Incompatible"):
        mpslinalg.cholesky_solve(A[:2], A)
    with pytest.raises(RuntimeError, match="^mpslinalg.cholesky: .*square"):
        mpslinalg.cholesky(A[:2])
    if backend.is_metal:
        with pytest.raises(TypeError, match="torch backend"):
            mpslinalg.cholesky(A.double())


def test_compiled_conjugate_paths(backend):
    """The paths that conjugate inside the op (upper=True, X A = B, the inverse's Hermitian
    part) give the eager results in a compiled graph, where a lazy conjugate view would not."""
    torch._dynamo.reset()
    A = backend.tensor(hpd(5, torch.complex64, (2,), seed=14))
    B = backend.tensor(random_matrix(5, torch.complex64, (2,), seed=15, m=3))

    def f(A, B):
        U = mpslinalg.cholesky(A, upper=True)
        return (U, mpslinalg.solve_triangular(U, B, upper=True, left=False),
                mpslinalg.cholesky_inverse(U, upper=True))

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(A, B), f(A, B), strict=True):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------- host reads and launches


def test_no_host_syncs_and_launches(metal_backend):
    A = metal_backend.tensor(hpd(70, torch.complex64, (3,), seed=8))
    with count_host_syncs() as syncs:
        L, _ = mpslinalg.cholesky_ex(A)
        mpslinalg.cholesky_solve(A[..., :2], L)
        mpslinalg.cholesky_inverse(L)
        mpslinalg.solve_triangular(L, A, upper=False)
    assert syncs.calls == []
    for n in (64, 70, 129):
        A = metal_backend.tensor(hpd(n, torch.float32, (2,), seed=n))
        with count_launches() as counter:
            mpslinalg.cholesky_ex(A)
        # chol_potf2 (n <= 64), or chol_potf2_simd (the first block), then trsm_diag (the
        # panel) and chol_update (which factors the next diagonal block) per block but the last
        kernels = [k for k in counter.names if k.startswith(("chol_", "trsm_"))]
        blocks = 1 if n < cholesky_metal.BLOCKED_MIN_N else math.ceil(n / cholesky_metal.BLOCK)
        assert len(kernels) == 2 * blocks - 1, counter.names
        first = "chol_potf2" if blocks == 1 else "chol_potf2_simd"
        assert [_kernel_op(k) for k in kernels] == [first] + [
            "trsm_diag", "chol_update"] * (blocks - 1), counter.names


# ---------------------------------------------------------------- blocked paths at small orders


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("n", [33, 40, 64])
def test_blocked_factorization_at_small_orders(n, dtype, monkeypatch):
    """The blocked potrf (chol_potf2, then trsm_diag + chol_update, which factors the next
    diagonal block), forced from order 33 on: the
    one-threadgroup kernel's factor to rounding, the ratio, the other triangle zero, and its
    launches; both triangles read, a failing minor in the second block."""
    A = hpd(n, dtype, (2,), seed=n, cond=1e3)
    whole, _ = cholesky_metal.cholesky_metal(A, False)
    monkeypatch.setattr(cholesky_metal, "BLOCKED_MIN_N", 33)
    for upper in (False, True):
        with count_launches() as counter:
            L, info = cholesky_metal.cholesky_metal(A, upper)
        kernels = [k for k in counter.names if k.startswith(("chol_", "trsm_"))]
        assert len(kernels) == 2 * math.ceil(n / cholesky_metal.BLOCK) - 1, counter.names
        assert (info == 0).all() and potrf_ratio(A, L, upper) < THRESH
        torch.testing.assert_close(L.mH if upper else L, whole, rtol=1e-5, atol=1e-5)
        assert ((L.tril(-1) if upper else L.triu(1)) == 0).all()
    bad = torch.stack([A[0], _indefinite(n, dtype, 33, seed=n)])
    L, info = cholesky_metal.cholesky_metal(bad, False)
    assert info.tolist() == [0, 33]
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    assert L[1][:, 32:][lower[:, 32:]].isnan().all()
    torch.testing.assert_close(wide(L)[1, :, :32],
                               torch.linalg.cholesky_ex(wide(bad[1])).L[:, :32], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("outer", [64, 96])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_outer_blocks_at_small_orders(dtype, outer, monkeypatch):
    """Outer blocks of 64 or 96 columns forced from order 65 on (the default: 256 columns from
    order 4096): each inner block's update kept to its outer block's columns, the rest of the
    matrix updated once per outer block with its depth. The same launches as without, the
    factor to rounding, and a failing minor in the last outer block: info torch's, the factor
    torch's before its column and NaN from it on."""
    n, minor = 150, 140
    A = hpd(n, dtype, (2,), seed=11, cond=1e3)
    A[1, minor - 1, minor - 1] = -2.0
    plain, _ = cholesky_metal.cholesky_metal(A, False)  # below OUTER_MIN_N: no outer blocks
    monkeypatch.setattr(cholesky_metal, "OUTER_WIDTH", outer)
    monkeypatch.setattr(cholesky_metal, "OUTER_MIN_N", 65)
    with count_launches() as counter:
        L, info = cholesky_metal.cholesky_metal(A, False)
    kernels = [k for k in counter.names if k.startswith(("chol_", "trsm_"))]
    assert len(kernels) == 2 * math.ceil(n / cholesky_metal.BLOCK) - 1, counter.names
    assert torch.equal(info, torch.linalg.cholesky_ex(wide(A)).info)
    assert info.tolist() == [0, minor]
    assert potrf_ratio(A[:1], L[:1]) < THRESH
    torch.testing.assert_close(L[0], plain[0], rtol=1e-5, atol=1e-5)
    k = minor - 1
    Ab = wide(A[1])
    L11 = torch.linalg.cholesky(Ab[:k, :k])
    L21 = torch.linalg.solve_triangular(L11.mH, Ab[k:, :k], upper=True, left=False)
    torch.testing.assert_close(wide(L)[1, :, :k], torch.cat([L11, L21]), rtol=1e-4, atol=1e-4)
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    assert wide(L)[1, :, k:][lower[:, k:]].isnan().all()
    assert (L.triu(1) == 0).all()


def test_wide_tile_deep_updates_same_bits(monkeypatch):
    """float32's deep products take gemm.h's 64 x 64 block where gemm_metal.tile_for says
    (forced here at n = 150 with outer blocks of 64 columns): the outer blocks' updates of the
    rest (depth 64) as chol_update_float32_tile64, whose first block still holds the next
    diagonal block it factors, the 32-deep inner updates as tile32, and cholesky_inverse's
    lauum; factor, info and inverse bitwise those of the 32 x 32 blocks."""
    from mpslinalg.linalg import gemm_metal

    n = 150
    A = hpd(n, torch.float32, (2,), seed=13, cond=1e3)
    A[1, 139, 139] = -2.0  # a failing minor in the last outer block
    monkeypatch.setattr(cholesky_metal, "OUTER_WIDTH", 64)
    monkeypatch.setattr(cholesky_metal, "OUTER_MIN_N", 65)
    narrow = cholesky_metal.cholesky_metal(A, False)
    narrow_inverse = cholesky_metal.cholesky_inverse_metal(narrow[0][:1], False)
    monkeypatch.setattr(gemm_metal, "WIDE_MIN_ENTRIES", 1)
    monkeypatch.setattr(gemm_metal, "WIDE_MIN_DEPTH", 33)
    # a cache of the steps of its own (the module's holds those of the default thresholds)
    monkeypatch.setattr(cholesky_metal, "_blocked_steps",
                        functools.lru_cache(cholesky_metal._blocked_steps.__wrapped__))
    with count_launches() as counter:
        L, info = cholesky_metal.cholesky_metal(A, False)
    updates = [k for k in counter.names if k.startswith("chol_update")]
    # blocks 0-4, of which 1 and 3 end an outer block (their update is 64 deep)
    assert updates == ["chol_update_float32_tile32", "chol_update_float32_tile64"] * 2, updates
    torch.testing.assert_close(L, narrow[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(info, narrow[1]) and info.tolist() == [0, 140]
    with count_launches() as counter:
        inverse = cholesky_metal.cholesky_inverse_metal(L[:1], False)
    assert "chol_lauum_float32_tile64" in counter.names
    assert torch.equal(inverse, narrow_inverse)


@pytest.mark.parametrize("n, minor", [(65, 65), (96, 70), (129, 100), (200, 170), (150, 33),
                                      (150, 64)])
def test_fused_next_block_failures_and_nan(n, minor):
    """chol_update factors the next diagonal block in the threadgroup that updated it: a batch
    of a good matrix, one whose failing minor lies in a later block (its first or last column,
    or the last, partial block at n = 65) and one with NaN read below the diagonal, per dtype:
    info exactly torch's (float64), the factor torch's before the failing column and NaN (lower
    triangle) from it on, the other batch elements untouched."""
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    for dtype in (torch.float32, torch.complex64):
        A = hpd(n, dtype, (3,), seed=n, cond=1e3)
        A[1, minor - 1, minor - 1] = -2.0
        A[2, n // 2, 3] = math.nan
        L, info = cholesky_metal.cholesky_metal(A, False)
        assert torch.equal(info, torch.linalg.cholesky_ex(wide(A)).info)
        assert info[0] == 0 and info[1] == minor and info[2] > 0
        assert potrf_ratio(A[:1], L[:1]) < THRESH
        for b in (1, 2):
            # Columns [0, k) of the factor, all rows, from A's first k columns in float64:
            # L11 = chol(A11), L21 = A21 L11^-H (LAPACK's factor leaves the failing block's
            # panel unsolved, so it is no reference there). The NaN read in batch element 2
            # lies in row n // 2 (its failing pivot), which NaN fills in both.
            k = int(info[b]) - 1
            Ab = wide(A[b])
            L11 = torch.linalg.cholesky(Ab[:k, :k])
            L21 = torch.linalg.solve_triangular(L11.mH, Ab[k:, :k], upper=True, left=False)
            torch.testing.assert_close(wide(L)[b, :, :k], torch.cat([L11, L21]), rtol=1e-4,
                                       atol=1e-4, equal_nan=True)
            assert wide(L)[b, :, k:][lower[:, k:]].isnan().all()
        assert (L.triu(1) == 0).all()


@pytest.mark.parametrize("bs", [32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("upper", [False, True])
def test_blocked_inverse_and_solves(upper, dtype, bs, monkeypatch):
    """cholesky_inverse's blocked triangular inverse (columns known zero skipped) and product,
    cholesky_solve and solve_triangular on the blocked solves, forced at n = 70 with diagonal
    blocks of bs rows: ratios, an exactly Hermitian inverse with a real diagonal, the other
    triangle never read, launches."""
    monkeypatch.setattr(triangular_metal, "BLOCKED_MIN_N", 32)
    monkeypatch.setattr(triangular_metal, "block_rows", lambda n: bs)
    n = 70
    A = hpd(n, dtype, (2,), seed=21, cond=1e3)
    L, _ = cholesky_metal.cholesky_metal(A, upper)
    poisoned = L.clone()
    other = torch.ones(n, n, dtype=torch.bool).tril(-1)
    poisoned[:, other if upper else other.mT] = math.nan
    blocks = math.ceil(n / bs)
    with count_launches() as counter:
        inverse = cholesky_metal.cholesky_inverse_metal(poisoned, upper)
    assert [_kernel_op(k) for k in counter.names] == [
        "trsm_diag", "trsm_update"] * (blocks - 1) + ["trsm_diag", "chol_lauum"], counter.names
    assert torch.equal(inverse, inverse.mH)
    Linv = triangular_metal.inverse_lower(poisoned, trans=int(upper), fn="t")
    assert (Linv.triu(1) == 0).all()  # the columns skipped as known zero, and the others'
    assert inv_ratio(L.mH if upper else L, Linv) < THRESH
    eye = torch.eye(n, dtype=wide(inverse).dtype)
    assert batch_ratio(norm1(wide(A) @ wide(inverse) - eye),
                       n * norm1(A) * norm1(inverse) * eps(dtype)) < THRESH
    B = random_matrix(3, dtype, (2,), seed=22, m=n)
    with count_launches() as counter:
        X = cholesky_metal.cholesky_solve_metal(B, poisoned, upper)
    assert len(counter.names) == 2 * (2 * blocks - 1)
    assert solve_ratio(A, X, B) < THRESH
    X = cholesky_metal.solve_triangular_metal(poisoned, B, upper=upper, left=True,
                                              unitriangular=False)
    assert tri_solve_ratio(L, X, B, upper=upper, left=True, unit=False) < THRESH


# ---------------------------------------------------------------- autograd


def _sym(A):
    return 0.5 * (A + A.mH)


@pytest.mark.parametrize("upper", [False, True])
def test_rules_match_torch_autograd_float64(upper):
    """The derivative rules (run on the torch backend in float64 / complex128) equal torch's."""
    for dtype in (torch.float64, torch.complex128):
        A = hpd(5, dtype, (2,), seed=9)
        ours, ref = _grad_pair(
            lambda A: cholesky_module.cholesky_ex_op(_sym(A), upper, "torch", False, "")[0],
            lambda A: torch.linalg.cholesky(_sym(A), upper=upper), [A])
        torch.testing.assert_close(ours[0], ref[0])
        L = torch.linalg.cholesky(A, upper=upper)
        B = random_matrix(3, dtype, (2,), seed=10, m=5)
        ours, ref = _grad_pair(
            lambda B, L: cholesky_module.cholesky_solve_op(B, L, upper, "torch", False, ""),
            lambda B, L: torch.cholesky_solve(B, L, upper), [B, L])
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b)
        ours, ref = _grad_pair(
            lambda L: cholesky_module.cholesky_inverse_op(L, upper, "torch", False, ""),
            lambda L: torch.cholesky_inverse(L, upper), [L])
        torch.testing.assert_close(ours[0], ref[0])
        for left in (True, False):
            for unit in (False, True):
                Bs = B if left else B.mT
                ours, ref = _grad_pair(
                    lambda T, B: cholesky_module.solve_triangular_op(  # noqa: B023
                        T, B, upper, left, unit, "torch", False, ""),  # noqa: B023
                    lambda T, B: torch.linalg.solve_triangular(  # noqa: B023
                        T, B, upper=upper, left=left, unitriangular=unit), [L, Bs])  # noqa: B023
                for a, b in zip(ours, ref, strict=True):
                    torch.testing.assert_close(a, b)


def test_gradcheck_and_opcheck():
    A = hpd(3, torch.complex128, (2,), seed=11).requires_grad_()
    torch.autograd.gradcheck(
        lambda A: cholesky_module.cholesky_ex_op(_sym(A), False, "torch", False, "")[0], (A,))
    torch.library.opcheck(cholesky_module.cholesky_ex_op.overload,
                          (A.detach(), True, "torch", False, ""))
    L = torch.linalg.cholesky(A.detach()).requires_grad_()
    B = random_matrix(2, torch.complex128, (2,), seed=12, m=3).requires_grad_()
    torch.autograd.gradcheck(
        lambda B, L: cholesky_module.cholesky_solve_op(B, _as_factor(L), False, "torch", False, ""),
        (B, L))
    torch.autograd.gradcheck(
        lambda L: cholesky_module.cholesky_inverse_op(_as_factor(L), False, "torch", False, ""),
        (L,))
    torch.autograd.gradcheck(
        lambda L, B: cholesky_module.solve_triangular_op(L, B, False, True, False, "torch",
                                                         False, ""), (L, B))
    for op, args in ((cholesky_module.cholesky_solve_op, (B, L, False)),
                     (cholesky_module.cholesky_inverse_op, (L, True)),
                     (cholesky_module.solve_triangular_op, (L, B, False, True, True))):
        torch.library.opcheck(op.overload, (*(a.detach() if isinstance(a, torch.Tensor)
                                              else a for a in args), "torch", False, ""))


def test_gradients_on_metal(metal_backend):
    """The rules on the metal backend (float32 / complex64 kernels) against torch's float64
    autograd."""
    for dtype in (torch.float32, torch.complex64):
        for n in (4, 40):
            A = metal_backend.tensor(hpd(n, dtype, (2,), seed=n))
            for upper in (False, True):
                ours, ref = _grad_pair(lambda A: mpslinalg.cholesky(_sym(A), upper=upper),  # noqa: B023
                                       lambda A: torch.linalg.cholesky(_sym(A), upper=upper),  # noqa: B023
                                       [A])
                torch.testing.assert_close(wide(ours[0]), ref[0], rtol=1e-3, atol=1e-3)
                L = mpslinalg.cholesky(A, upper=upper)
                B = metal_backend.tensor(random_matrix(2, dtype, (2,), seed=13, m=n))
                ours, ref = _grad_pair(lambda B, L: mpslinalg.cholesky_solve(B, L, upper),  # noqa: B023
                                       lambda B, L: torch.cholesky_solve(B, L, upper),  # noqa: B023
                                       [B, L])
                for a, b in zip(ours, ref, strict=True):
                    torch.testing.assert_close(wide(a), b, rtol=1e-3, atol=1e-3)
                ours, ref = _grad_pair(lambda L: mpslinalg.cholesky_inverse(L, upper),  # noqa: B023
                                       lambda L: torch.cholesky_inverse(L, upper), [L])  # noqa: B023
                torch.testing.assert_close(wide(ours[0]), ref[0], rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402
    BadSample,
    OpInfo,
    Sample,
    instantiate_generic_tests,
    square_bad_samples,
)


def _hpd_samples(complex_: bool) -> list[Sample]:
    d = torch.complex128 if complex_ else torch.float64
    return [
        Sample((hpd(3, d, (2,), 1),), desc="(2, 3, 3)"),
        Sample((hpd(6, d, (), 2),), {"upper": True}, desc="6x6 upper"),
        Sample((hpd(70, d, (2,), 3),), desc="(2, 70, 70), blocked"),
        Sample((hpd(4, d, (2, 3), 4),), {"upper": True}, desc="(2, 3, 4, 4) upper"),
        Sample((hpd(1, d, (3,), 5),), desc="(3, 1, 1)"),
        Sample((torch.zeros(0, 5, 5, dtype=d),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=d),), desc="0x0"),
    ]


def _not_positive_definite() -> list[BadSample]:
    A = hpd(4, torch.float64, (2,), 6)
    A[1, 2, 2] = -1.0
    # (NaN input raises on the CPU and metal only, since cuSOLVER's potrf does not see NaN:
    # test_nan_stays_in_its_batch_element)
    return [BadSample((A,), error=torch.linalg.LinAlgError, match=r"\(Batch element 1\).*order 3")]


def _factor(complex_: bool, n: int, batch: tuple, seed: int, upper: bool) -> torch.Tensor:
    d = torch.complex128 if complex_ else torch.float64
    return torch.linalg.cholesky(hpd(n, d, batch, seed), upper=upper).contiguous()


def _triangular_samples(complex_: bool) -> list[Sample]:
    c = complex_
    d = torch.complex128 if c else torch.float64
    return [
        Sample((_factor(c, 3, (2,), 1, True), random_matrix(2, d, (2,), 2, m=3)),
               {"upper": True}, desc="(2, 3, 3) upper"),
        Sample((_factor(c, 6, (2,), 3, False), random_matrix(6, d, (2,), 4, m=3)),
               {"upper": False, "left": False}, desc="(2, 6, 6) lower, X A = B"),
        Sample((_factor(c, 40, (2, 1), 5, False), random_matrix(3, d, (3,), 6, m=40)),
               {"upper": False, "unitriangular": True}, desc="broadcast, unit, 40x40"),
        Sample((_factor(c, 4, (), 7, True), random_matrix(4, d, (0,), 8)),
               {"upper": True}, desc="empty batch of B"),
    ]


def _triangular_bad() -> list[BadSample]:
    A = torch.eye(3)
    return [
        BadSample((A, torch.ones(3)), {"upper": True}, match="at least 2"),
        BadSample((A, torch.ones(4, 2)), {"upper": True}, match="AX = B"),
        BadSample((torch.ones(3, 4), torch.ones(3, 2)), {"upper": True}, match="square"),
        BadSample((A.expand(2, 3, 3), torch.ones(3, 3, 2)), {"upper": True}),
    ]


def _cholesky_solve_samples(complex_: bool) -> list[Sample]:
    c = complex_
    d = torch.complex128 if c else torch.float64
    return [
        Sample((random_matrix(2, d, (2,), 1, m=3), _factor(c, 3, (2,), 2, False)),
               desc="(2, 3, 3), 2 rhs"),
        Sample((random_matrix(3, d, (3, 2), 3, m=5), _factor(c, 5, (2,), 4, False)),
               desc="broadcast (3, 2, 5, 3) with (2, 5, 5)"),
        Sample((random_matrix(2, d, (2,), 5, m=6), _factor(c, 6, (2,), 6, True), True),
               desc="(2, 6, 6) upper"),
        Sample((random_matrix(3, d, (2,), 9, m=40), _factor(c, 40, (2,), 10, False)),
               desc="(2, 40, 40)"),
        Sample((random_matrix(2, d, (0,), 7, m=4), _factor(c, 4, (), 8, False)),
               desc="empty batch of B"),
    ]


def _cholesky_solve_bad() -> list[BadSample]:
    A = torch.eye(3)
    return [
        BadSample((torch.ones(3), A), match="at least 2"),
        BadSample((torch.ones(4, 2), A), match="Incompatible"),
        BadSample((torch.ones(3, 2), torch.ones(3, 4)), match="square"),
        BadSample((torch.ones(2, 3, 2), A.expand(3, 3, 3))),
    ]


def _cholesky_inverse_samples(complex_: bool) -> list[Sample]:
    c = complex_
    d = torch.complex128 if c else torch.float64
    return [
        Sample((_factor(c, 3, (2,), 1, False),), desc="(2, 3, 3)"),
        Sample((_factor(c, 5, (2,), 4, False),), desc="(2, 5, 5)"),
        Sample((_factor(c, 40, (2,), 2, False),), desc="(2, 40, 40)"),
        Sample((_factor(c, 5, (2, 2), 3, True), True), desc="(2, 2, 5, 5) upper"),
        Sample((torch.zeros(0, 4, 4, dtype=d),), desc="empty batch"),
    ]


def _cholesky_inverse_bad() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3),), match="dimensions"),
        BadSample((torch.zeros(2, 3, 4),), match="square"),
        BadSample((torch.zeros(3, 3, dtype=torch.int32),),
                  error=(TypeError, RuntimeError, NotImplementedError)),
    ]


def _as_factor(x: torch.Tensor) -> torch.Tensor:
    """A lower Cholesky factor made of ``x`` (square; other inputs as they are): its lower
    triangle with a real diagonal, as torch's OpInfo gradcheck wrapper for a triangular input
    (the derivative then lives on what is read; LAPACK's potri also ignores an imaginary part
    of the diagonal, which the derivative of torch's cholesky_inverse assumes absent)."""
    if x.shape[-1] != x.shape[-2]:
        return x
    d = x.diagonal(dim1=-2, dim2=-1)
    return x.tril(-1) + torch.diag_embed(d.real.to(x.dtype) if x.is_complex() else d)


_FAILS_ON_NAN = ("the checking form raises LinAlgError for NaN input (a NaN pivot is not "
                 "positive), as torch's does, so there is no result to compare; cholesky_ex "
                 "takes the generic nonfinite test and test_nan_stays_in_its_batch_element checks "
                 "both")

OPS = [
    OpInfo("cholesky", mpslinalg.cholesky, torch.linalg.cholesky, _hpd_samples,
           bad_samples=lambda: square_bad_samples() + _not_positive_definite(), device_reads=1,
           grad_transform=_sym, skips={"nonfinite": _FAILS_ON_NAN}, small_path=True),
    OpInfo("cholesky_ex", mpslinalg.cholesky_ex, torch.linalg.cholesky_ex, _hpd_samples,
           bad_samples=square_bad_samples, grad_transform=_sym, small_path=True),
    OpInfo("solve_triangular", mpslinalg.solve_triangular, torch.linalg.solve_triangular,
           _triangular_samples, bad_samples=_triangular_bad, grad_args=(0, 1),
           nonfinite_args=(0, 1), small_path=True),
    OpInfo("cholesky_solve", mpslinalg.cholesky_solve, torch.cholesky_solve,
           _cholesky_solve_samples, bad_samples=_cholesky_solve_bad, grad_args=(0, 1),
           nonfinite_args=(0, 1), grad_transform=_as_factor, small_path=True),
    OpInfo("cholesky_inverse", mpslinalg.cholesky_inverse, torch.cholesky_inverse,
           _cholesky_inverse_samples, bad_samples=_cholesky_inverse_bad, grad_transform=_as_factor),
]
instantiate_generic_tests(globals(), OPS)
