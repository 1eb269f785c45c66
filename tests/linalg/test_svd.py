"""svd, svdvals, pinv and matrix_rank against SciPy (float64) and torch.linalg, on every
backend: LAPACK-style ratios on random, rank-deficient, ill-conditioned and extremely scaled
batches; torch's tolerance rules; the derivative rules against torch's; the Metal kernels'
launch counts, convergence report and header mirrors."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg.linalg import svd_metal
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    inv_ratio,
    matrix_with_spread,
    orthogonality_ratio,
    penrose_ratios,
    random_matrix,
    singular_matrix,
    singular_values_ratio,
    svd_ratio,
    wide,
)

from opdb import metal_constant

svd_module = importlib.import_module("mpslinalg.linalg.svd")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = (torch.float32, torch.complex64)


def dtypes(backend):
    extra = () if backend.is_metal else (torch.float64, torch.complex128)
    return DTYPES + extra


def scipy_svdvals(A: torch.Tensor) -> torch.Tensor:
    """SciPy's singular values (gesdd, float64 / complex128) of each matrix of A."""
    *batch, m, n = A.shape
    a = wide(A).numpy().reshape(-1, m, n)
    if a.shape[0] == 0 or min(m, n) == 0:
        return torch.zeros((*batch, min(m, n)), dtype=torch.float64)
    s = np.stack([scipy.linalg.svdvals(x) for x in a])
    return torch.from_numpy(s).reshape(*batch, min(m, n))


def check_svd(A: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor,
              full: bool) -> dict:
    """Shapes, dtypes, order, and LAPACK's ratios: reconstruction, orthogonality of U and V,
    singular values against SciPy. Returns the ratios."""
    *batch, m, n = A.shape
    k = min(m, n)
    real = A.real.dtype if A.is_complex() else A.dtype
    assert U.shape == (*batch, m, m if full else k) and U.dtype == A.dtype
    assert Vh.shape == (*batch, n if full else k, n) and Vh.dtype == A.dtype
    assert S.shape == (*batch, k) and S.dtype == real
    assert U.device == A.device and S.device == A.device
    s = wide(S)
    assert (s[..., :-1] >= s[..., 1:]).all(), "singular values not in descending order"
    assert (s >= 0).all()
    ratios = {
        "svd": svd_ratio(A, U, S, Vh, dtype=A.dtype),
        "orth U": orthogonality_ratio(U, dtype=A.dtype),
        "orth V": orthogonality_ratio(Vh.mH, dtype=A.dtype),
        "S": singular_values_ratio(S, scipy_svdvals(A), m, n, dtype=A.dtype),
    }
    assert max(ratios.values()) < THRESH, ratios
    return ratios


SHAPES = [(1, 1), (3, 3), (4, 2), (2, 4), (3, 4), (4, 4), (8, 8), (7, 5), (5, 7), (12, 5),
          (5, 12), (9, 9)]
KINDS = ("random", "rank-deficient", "ill-conditioned", "tiny", "huge")


def make(kind: str, m: int, n: int, dtype, batch, seed: int) -> torch.Tensor:
    """A batch of one kind of test matrix, m x n."""
    k = min(m, n)
    if kind == "random":
        return random_matrix(n, dtype, batch, seed, m=m)
    square = {"rank-deficient": dict(cond=10.0, rank=max(k // 2, 1)),
              "ill-conditioned": dict(cond=1e6)}.get(kind, dict(cond=100.0))
    A = matrix_with_spread(max(m, n), dtype=torch.complex128 if dtype.is_complex
                           else torch.float64, batch=batch, seed=seed, **square)
    A = A[..., :m, :n]
    scale = {"tiny": 1e-30, "huge": 1e30}.get(kind, 1.0)
    return (A * scale).to(dtype)


@FIXTURE_OK
@given(data=st.data())
def test_svd_ratios(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    m, n = data.draw(st.sampled_from(SHAPES), label="shape")
    batch = data.draw(st.sampled_from([(), (2,), (2, 1)]), label="batch")
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    full = data.draw(st.booleans(), label="full_matrices")
    seed = data.draw(st.integers(0, 999), label="seed")
    if kind in ("tiny", "huge") and dtype not in DTYPES:
        kind = "random"
    A = backend.tensor(make(kind, m, n, dtype, batch, seed))
    A0 = A.clone()
    U, S, Vh = mpslinalg.svd(A, full_matrices=full)
    assert torch.equal(A, A0), "input modified"
    check_svd(A, U, S, Vh, full)
    S2 = mpslinalg.svdvals(A)
    assert singular_values_ratio(S2, scipy_svdvals(A), m, n, dtype=A.dtype) < THRESH


def test_rank_deficient_batches_keep_u_orthonormal(backend):
    """pytorch#196112: a batch of rank-25 32 x 32 (here rank 5 of 12, to keep the emulator
    fast) and ill-conditioned matrices; |U^H U - I| must stay at the CPU's level and the
    numerical rank exact at rtol=1e-4."""
    for dtype in DTYPES:
        A = matrix_with_spread(12, 10.0, dtype, (4,), seed=21, rank=5)
        A[2] = matrix_with_spread(12, 1e7, dtype, (), seed=22)
        A[3] = 0
        A[3, :, 2] = 1.0  # rank one, with exactly zero columns
        A = backend.tensor(A)
        U, S, Vh = mpslinalg.svd(A)
        check_svd(A, U, S, Vh, True)
        rank = mpslinalg.matrix_rank(A[[0, 1, 3]], rtol=1e-4)
        assert rank.tolist() == [5, 5, 1]


@pytest.mark.parametrize("scale", [1e-30, 1e30, 1e-38, 3e38 / 64])
def test_extreme_scales_float32(backend, scale):
    """The same relative accuracy at any scale float32 holds (LAPACK-style prescaling)."""
    for dtype in DTYPES:
        for m, n, batch in [(6, 6, (2,)), (9, 4, ()), (3, 3, (5,)), (2, 4, (3,))]:
            A = backend.tensor((matrix_with_spread(max(m, n), 1e3, torch.complex128, batch, 23)
                                [..., :m, :n] * scale).to(dtype) if dtype.is_complex else
                               (matrix_with_spread(max(m, n), 1e3, torch.float64, batch, 23)
                                [..., :m, :n] * scale).to(dtype))
            U, S, Vh = mpslinalg.svd(A, full_matrices=False)
            assert torch.isfinite(S).all() and torch.isfinite(U).all()
            check_svd(A, U, S, Vh, False)


def test_zero_and_identity(backend):
    for dtype in DTYPES:
        for shape in [(3, 3), (6, 6), (7, 4), (4, 7), (2, 3)]:
            A = backend.tensor(torch.zeros(shape, dtype=dtype))
            U, S, Vh = mpslinalg.svd(A)
            assert torch.equal(S.cpu(), torch.zeros_like(S.cpu()))
            assert orthogonality_ratio(U) < THRESH and orthogonality_ratio(Vh.mH) < THRESH
            E = backend.tensor(torch.eye(*shape, dtype=dtype))
            check_svd(E, *mpslinalg.svd(E), True)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (0, 4, 4), (2, 0, 3), (2, 3, 0)])
def test_empty_shapes(backend, shape):
    A = backend.tensor(torch.zeros(shape))
    for full in (False, True):
        ours = mpslinalg.svd(A, full_matrices=full)
        ref = torch.linalg.svd(A.cpu(), full_matrices=full)
        for a, b in zip(ours, ref, strict=True):
            assert a.shape == b.shape, (shape, full)
    assert mpslinalg.svdvals(A).shape == torch.linalg.svdvals(A.cpu()).shape
    assert mpslinalg.pinv(A).shape == torch.linalg.pinv(A.cpu()).shape
    torch.testing.assert_close(mpslinalg.matrix_rank(A).cpu(), torch.linalg.matrix_rank(A.cpu()))


# ---------------------------------------------------------------- matrix_rank and pinv


@pytest.mark.parametrize("m,n,k", [(4, 4, 2), (6, 5, 3), (3, 7, 1), (12, 12, 7), (2, 2, 0),
                                   (8, 5, 5)])
def test_matrix_rank_exact_on_rank_k_products(backend, m, n, k):
    for dtype in DTYPES:
        x = random_matrix(k, dtype, (3,), seed=31, m=m)
        y = random_matrix(n, dtype, (3,), seed=32, m=k)
        A = backend.tensor(x @ y if k else torch.zeros(3, m, n, dtype=dtype))
        assert mpslinalg.matrix_rank(A).tolist() == [k] * 3
        H = backend.tensor(x @ x.mH) if k else backend.tensor(torch.zeros(3, m, m, dtype=dtype))
        assert mpslinalg.matrix_rank(H, hermitian=True).tolist() == [k] * 3


def test_tolerance_rules_match_torch(backend):
    """atol / rtol as floats or tensors (broadcast), the defaults, legacy forms."""
    A = matrix_with_spread(5, 1e4, torch.float64, (3,), seed=33)
    A32 = backend.tensor(A.float())
    calls = [
        ((), {}),
        ((), {"atol": 0.05}),
        ((), {"rtol": 0.05}),
        ((), {"atol": 0.0}),
        ((), {"atol": 1e-3, "rtol": 0.2}),
        ((), {"atol": torch.tensor([[0.5], [2e-3]])}),
        ((), {"rtol": torch.tensor([0.5, 1e-3, 0.05])}),
        ((), {"atol": torch.tensor([0.0, 0.5, 2.0]), "hermitian": False}),
        ((0.05,), {}),
        ((torch.tensor(0.05),), {}),
        ((0.05, False), {}),
    ]
    for args, kwargs in calls:
        on = [backend.tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        on_kw = {k: backend.tensor(v) if isinstance(v, torch.Tensor) else v
                 for k, v in kwargs.items()}
        ours = mpslinalg.matrix_rank(A32, *on, **on_kw)
        # rtol 1e-3 meets a singular value of 1e-3: on CUDA, cuSOLVER's float32 rounding
        # decides whether it is kept, for the rank and for the pseudo-inverse alike
        on_cuda = backend.name == "cuda"
        ref = (torch.linalg.matrix_rank(A32, *on, **on_kw).cpu() if on_cuda
               else torch.linalg.matrix_rank(A, *args, **kwargs))
        assert torch.equal(ours.cpu(), ref), (args, kwargs, ours, ref)
        X = mpslinalg.pinv(A32, *on, **on_kw).cpu()
        Xr = (wide(torch.linalg.pinv(A32, *on, **on_kw)) if on_cuda
              else torch.linalg.pinv(wide(A32), *args, **kwargs))
        assert X.shape == Xr.shape and X.dtype == torch.float32
        # kept singular values down to 1e-4: errors of order cond * eps relative to |X|
        torch.testing.assert_close(wide(X), Xr, rtol=0, atol=1e-2 * float(Xr.abs().max()))


def test_hermitian_reads_the_lower_triangle(backend):
    for dtype in DTYPES:
        A = random_matrix(5, dtype, (2,), seed=34)
        ours = mpslinalg.pinv(backend.tensor(A), hermitian=True)
        ref = torch.linalg.pinv(wide(A), hermitian=True)
        torch.testing.assert_close(wide(ours), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
        assert torch.equal(mpslinalg.matrix_rank(backend.tensor(A), hermitian=True).cpu(),
                           torch.linalg.matrix_rank(wide(A), hermitian=True))


@pytest.mark.parametrize("c", [1e-30, 1e-12, 1e12, 1e30])
def test_pinv_scales_exactly(backend, c):
    """pinv(c A) = pinv(A) / c, to rounding, for any float32 c."""
    for dtype in DTYPES:
        A = backend.tensor(random_matrix(4, dtype, (2,), seed=35, m=6))
        X = wide(mpslinalg.pinv(A))
        Xc = wide(mpslinalg.pinv(A * c))
        torch.testing.assert_close(Xc * c, X, rtol=1e-5, atol=1e-5 * float(X.abs().max()))


@pytest.mark.parametrize("shape,rank", [((5, 5), 5), ((7, 4), 4), ((4, 7), 4), ((8, 8), 3),
                                        ((3, 3), 2), ((12, 5), 2)])
def test_penrose_conditions(backend, shape, rank):
    m, n = shape
    for dtype in DTYPES:
        A = matrix_with_spread(max(m, n), 1e2, dtype, (2,), seed=36, rank=rank)[..., :m, :n]
        A = backend.tensor(A)
        ratios = penrose_ratios(A, mpslinalg.pinv(A, rtol=1e-4), dtype=dtype)
        assert max(ratios.values()) < THRESH, ratios


@pytest.mark.parametrize("offset", [1.0, 1e2, 1e4, 1e5])
def test_camera_case(backend, offset):
    """pinv([A b; 0 1]) with |b| >> |A| (pytorch#75494): the affine inverse
    [A^-1, -A^-1 b; 0 1]. One-sided Jacobi is insensitive to the scaling of the columns, so on
    the metal backend the result has float32's relative accuracy at any offset (torch's
    float32 LAPACK loses a factor of about the offset: 1e-4 at 1e2, 1e-1 at 1e5). With
    torch's default rtol (eps * n) the inverse is exact while |b| / |A| < ~1e3; beyond, the
    smallest singular value falls under the default tolerance (as it does in torch), hence
    rtol=0."""
    n = 4
    for dtype in DTYPES:
        R = matrix_with_spread(3, 10.0, dtype, (64,), seed=37)
        b = random_matrix(1, dtype, (64,), seed=38, m=3) * offset
        M = torch.zeros(64, n, n, dtype=dtype)
        M[:, :3, :3], M[:, :3, 3:], M[:, 3, 3] = R, b, 1
        exact = torch.linalg.inv(wide(M))
        X = mpslinalg.pinv(backend.tensor(M), rtol=0.0)
        if offset <= 1e2:
            assert inv_ratio(M, mpslinalg.pinv(backend.tensor(M)), dtype=dtype) < THRESH
        if backend.is_metal:
            err = (wide(X) - exact).abs().amax((-2, -1)) / exact.abs().amax((-2, -1))
            assert err.max() < THRESH * n * torch.finfo(torch.float32).eps, err.max()


def test_matrix_rank_out(backend):
    """As torch: the count is cast into an out of any dtype."""
    A = backend.tensor(random_matrix(4, torch.float32, (2,), seed=50))
    for dtype in (torch.int64, torch.int8, torch.float32):
        out = backend.tensor(torch.empty(0, dtype=dtype))
        got = mpslinalg.matrix_rank(A, out=out)
        assert got is out and out.dtype == dtype and out.tolist() == [4, 4]


# ---------------------------------------------------------------- non-finite input


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (6, 6), (9, 4), (4, 9)])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_nonfinite_gives_nan_fast(backend, shape, value):
    """LAPACK's gesdd can loop forever on Inf (Reference-LAPACK#1409); ours returns NaN for
    the poisoned matrix at once and leaves the rest of the batch alone: the kernels report it
    NON_FINITE, which they do before any sweep, the other matrices take the sweeps they take
    clean, and (emulator) the call makes the launches of a clean one."""
    for dtype in DTYPES:
        clean = random_matrix(shape[1], dtype, (3,), seed=39, m=shape[0])
        clean_S = mpslinalg.svdvals(backend.tensor(clean))
        A = clean.clone()
        A[1, 0, 0] = value
        if not backend.is_metal:  # torch's LAPACK: LinAlgError for NaN, NaN S for Inf
            try:
                S = mpslinalg.svdvals(backend.tensor(A))
            except torch.linalg.LinAlgError as err:
                assert str(err).startswith("mpslinalg.svdvals")
            else:
                assert not S[1].isfinite().all()
            continue
        launches = []
        for B in (clean, A):
            emulator.reset_launch_counts()
            U, S, Vh = mpslinalg.svd(backend.tensor(B))
            launches.append(emulator.launch_counts())
        assert S[1].isnan().all() and U[1].isnan().all() and Vh[1].isnan().all()
        torch.testing.assert_close(S[[0, 2]], clean_S[[0, 2]])
        if backend.name == "emulator":
            assert launches[1] == launches[0], launches
        sweeps = [svd_metal.svd_metal(backend.tensor(B), False)[3].tolist() for B in (clean, A)]
        assert sweeps[1][1] == svd_metal.NON_FINITE, sweeps
        assert sweeps[1][::2] == sweeps[0][::2] and min(sweeps[0]) >= 1, sweeps
        assert mpslinalg.pinv(backend.tensor(A))[1].isnan().all()
        assert mpslinalg.svdvals(backend.tensor(A))[1].isnan().all()


_NONFINITE_MESSAGE = ("The algorithm failed to converge because the input matrix contained "
                      "non-finite values.")


@pytest.mark.parametrize("fn", [mpslinalg.svd, mpslinalg.svdvals])
def test_nan_raises_at_every_batch_size_like_torch(fn):
    """The issue's case: on the torch backend a NaN batch raises torch's LinAlgError below the
    small path's crossover (torch.linalg) and above it (the Jacobi kernels, whose NaN result
    hands the batch to torch.linalg), with the same message; Inf gives torch's values."""
    A = random_matrix(3, torch.float32, (16,), seed=44)
    A[:, 0, 0] = math.nan
    with mpslinalg.use_backend("torch"):
        for batch in (A, A[:15]):
            with pytest.raises(torch.linalg.LinAlgError) as err:
                fn(batch)
            assert str(err.value) == (f"mpslinalg.{fn.__name__}: (Batch element 0): "
                                      f"{_NONFINITE_MESSAGE}")
        A[:, 0, 0] = math.inf
        ours, theirs = fn(A), getattr(torch.linalg, fn.__name__)(A)
        for o, t in zip(ours if fn is mpslinalg.svd else (ours,),
                        theirs if fn is mpslinalg.svd else (theirs,), strict=True):
            assert torch.equal(o.isnan(), t.isnan())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 3, 3), (16, 2, 4)])
def test_general_path_errors_name_mpslinalg(dtype, shape):
    """float16 / bfloat16 and shapes without a small kernel take the general path on the torch
    backend, where torch.linalg runs inside the ops: its errors name mpslinalg.<fn> in
    torch's wording, as the fast path's do (they named linalg.svd)."""
    A = random_matrix(shape[-1], torch.float32, shape[:1], seed=45, m=shape[-2]).to(dtype)
    A[1, 0, 0] = math.nan
    with mpslinalg.use_backend("torch"):
        for fn in (mpslinalg.svd, mpslinalg.svdvals, mpslinalg.pinv, mpslinalg.matrix_rank):
            with pytest.raises(torch.linalg.LinAlgError) as err:
                fn(A)
            assert str(err.value) == (f"mpslinalg.{fn.__name__}: (Batch element 1): "
                                      f"{_NONFINITE_MESSAGE}")
        with pytest.raises(RuntimeError) as err:  # mpslinalg's own check: worded once
            mpslinalg.svd(A[0, 0])
        assert str(err.value).startswith("mpslinalg.svd: ")
        assert "mpslinalg.svd: mpslinalg" not in str(err.value)


def test_matrix_rank_of_nan_raises_on_metal(metal_backend):
    """An integer cannot carry NaN: matrix_rank raises torch's LinAlgError for the batch element
    holding NaN (it returned rank 0), with one device read; Inf gives torch's rank 0."""
    A = random_matrix(3, torch.float32, (3,), seed=46)
    A[1, 0, 0] = math.nan
    with count_host_syncs() as syncs, pytest.raises(torch.linalg.LinAlgError) as err:
        mpslinalg.matrix_rank(metal_backend.tensor(A))
    assert len(syncs.calls) == 1
    assert str(err.value) == f"mpslinalg.matrix_rank: (Batch element 1): {_NONFINITE_MESSAGE}"
    A[1, 0, 0] = math.inf
    assert mpslinalg.matrix_rank(metal_backend.tensor(A)).tolist() == (
        torch.linalg.matrix_rank(A).tolist())


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_hermitian_matrix_rank_of_nan_raises_eighs_error_on_metal(metal_backend, dtype):
    """torch computes matrix_rank(hermitian=True) with eigvalsh, so NaN in the lower triangle
    raises eigh's LinAlgError ("... repeated eigenvalues (error code: n - 2)") from order 3
    on, and of orders 1 and 2 (no iteration) returns a rank; the metal backend says the same
    (it raised the SVD's "non-finite values"), with one device read. NaN in the upper
    triangle alone is not read."""
    for n, batch in ((3, (3,)), (4, (2, 2)), (7, (2,))):
        A = random_matrix(n, dtype, batch, seed=47 + n)
        A = A + A.mH
        A.view(-1, n, n)[1, n - 1, 1] = math.nan
        with pytest.raises(torch.linalg.LinAlgError) as expected:
            torch.linalg.matrix_rank(A, hermitian=True)
        with count_host_syncs() as syncs, pytest.raises(torch.linalg.LinAlgError) as err:
            mpslinalg.matrix_rank(metal_backend.tensor(A), hermitian=True)
        assert len(syncs.calls) == 1
        assert str(err.value) == "mpslinalg.matrix_rank: " + str(expected.value).partition(
            ": ")[2]
        upper = A.view(-1, n, n)[1]
        upper[n - 1, 1], upper[1, n - 1] = upper[1, n - 1].conj(), math.nan
        assert torch.equal(
            mpslinalg.matrix_rank(metal_backend.tensor(A), hermitian=True).cpu(),
            torch.linalg.matrix_rank(A, hermitian=True))
    for n in (1, 2):  # NaN off the diagonal of a 2 x 2: eigenvalues NaN, rank 0
        A = torch.eye(n, dtype=dtype).expand(2, n, n).clone()
        A[1, n - 1, 0] = math.nan
        assert mpslinalg.matrix_rank(metal_backend.tensor(A), hermitian=True).tolist() == (
            torch.linalg.matrix_rank(A, hermitian=True).tolist())


def test_info_reports_sweeps_and_nonfinite(metal_backend):
    """The kernels' convergence report: sweeps to convergence (bounded, read only by tests and
    ``check``), NON_FINITE for poisoned matrices."""
    A = matrix_with_spread(10, 1e6, torch.float32, (3,), seed=40)
    A[1, 2, 3] = math.nan
    A[2] = 0
    _, _, _, info = svd_metal.svd_metal(metal_backend.tensor(A), False)
    info = info.cpu().tolist()
    assert 1 <= info[0] <= 15 and info[1] == svd_metal.NON_FINITE and info[2] == 1, info
    _, _, _, info = svd_metal.svd_metal(
        metal_backend.tensor(random_matrix(3, torch.complex64, (50,), seed=41)), False)
    assert info.max().item() <= 8 and info.min().item() >= 1


# ---------------------------------------------------------------- launches, host syncs, layout


@pytest.mark.parametrize("shape,launches", [((3, 3), 1), ((4, 2), 1), ((2, 4), 1), ((8, 8), 1),
                                            ((12, 5), 5), ((5, 12), 6)])
def test_launch_counts_independent_of_batch(metal_backend, shape, launches):
    """n <= 4: one svd_small launch; square: one svd_jacobi launch; tall: QR (one panel: 1
    launch, Q: 3, the reflectors written out and the block reflector's two for one chunk of
    rows) + svd_jacobi; wide: the same plus one copy gathering A^H."""
    if metal_backend.name != "emulator":
        pytest.skip("launch counters are the emulator's")
    m, n = shape
    for batch in (1, 7):
        A = metal_backend.tensor(random_matrix(n, torch.float32, (batch,), seed=42, m=m))
        emulator.reset_launch_counts()
        with count_host_syncs() as syncs:
            mpslinalg.svd(A, full_matrices=False)
        assert emulator.total_launches() == launches, emulator.launch_counts()
        assert not syncs.calls
        emulator.reset_launch_counts()
        mpslinalg.svdvals(A)
        assert emulator.total_launches() <= launches


def test_lane_order_independent(metal_backend, monkeypatch):
    if metal_backend.name != "emulator":
        pytest.skip("lane orders are an emulator option")
    A = matrix_with_spread(9, 1e3, torch.complex64, (2,), seed=43, rank=6)
    results = []
    for order in (None, "reverse", "random"):
        monkeypatch.setattr(_metal, "LANE_ORDER", order)
        results.append(mpslinalg.svd(A))
    for out in results[1:]:
        for a, b in zip(out, results[0], strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("n,dtype", [(40, torch.float32), (45, torch.complex64),
                                     (46, torch.complex64), (64, torch.float32)])
def test_many_pairs_staged_and_in_device_memory(metal_backend, monkeypatch, n, dtype):
    """More pairs per step than simdgroups per threadgroup and columns longer than a
    simdgroup, with W and V in threadgroup memory (the largest n that fits) and in the device
    workspace (the smallest n that does not; svd_jacobi there, not the block kernels)."""
    monkeypatch.setattr(svd_metal, "BLOCK_MIN_N", 10**6)
    assert svd_metal.staged(n, dtype) == (n in (40, 45))
    A = metal_backend.tensor(matrix_with_spread(n, 1e4, dtype, (), seed=44, rank=n - 9))
    check_svd(A, *mpslinalg.svd(A), True)


def test_results_independent_of_threads(metal_backend, monkeypatch):
    """svd_jacobi's bits do not depend on its simdgroups (a pipeline's limit may cut them):
    3 take 32 or 23 pairs a step unevenly, 32 one each or none; zero columns, so the
    completion of U runs too."""
    monkeypatch.setattr(svd_metal, "BLOCK_MIN_N", 10**6)
    for n, dtype in [(64, torch.float32), (46, torch.complex64)]:
        assert not svd_metal.staged(n, dtype)
        A = matrix_with_spread(n, 1e4, dtype, (), seed=47)
        A[:, -3:] = 0
        A = metal_backend.tensor(A)
        results = []
        for count in (3, 32):
            monkeypatch.setattr(svd_metal, "jacobi_threads",
                                lambda n, dtype, count=count: count * svd_metal.SIMD_WIDTH)
            results.append(svd_metal.svd_metal(A))
        for a, b in zip(*results, strict=True):
            assert torch.equal(a, b)


def test_metal_rejects_64_bit(metal_backend):
    with pytest.raises(TypeError, match="mpslinalg.svd: the metal backend supports"):
        mpslinalg.svd(metal_backend.tensor(torch.eye(3, dtype=torch.float64)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matrix_rank_upcast(backend, dtype):
    """float16 / bfloat16 input: the rank of the same matrices in float32 (rank 2, 3 and 4
    matrices, and tolerances that cut the spectrum between its values)."""
    A = torch.cat([singular_matrix(4, r, torch.float32, (2,), seed=46 + r) for r in (2, 3)]
                  + [matrix_with_spread(4, 1e2, torch.float32, (2,), seed=49)]).to(dtype)
    for kwargs in ({}, {"rtol": 0.05}, {"atol": 0.5}):
        want = mpslinalg.matrix_rank(backend.tensor(A.float()), **kwargs)
        got = mpslinalg.matrix_rank(backend.tensor(A), **kwargs)
        assert got.dtype == torch.int64 and torch.equal(got, want), (kwargs, got, want)


def test_float16_upcast_raw(backend):
    A = backend.tensor(random_matrix(5, torch.float32, (2,), seed=45, m=6))
    U, S, Vh = mpslinalg.svd(A.half(), full_matrices=False)
    assert U.dtype == S.dtype == Vh.dtype == torch.float16
    U32, S32, Vh32 = mpslinalg.svd(A.half().float(), full_matrices=False)
    torch.testing.assert_close(S, S32.half())
    torch.testing.assert_close(U, U32.half())


def test_host_constants_mirror_header():
    def const(name):
        return int(metal_constant("linalg/svd.h", name))

    assert const("kSvdMaxSweeps") == svd_metal.MAX_SWEEPS
    assert const("kSvdNotConverged") == svd_metal.NOT_CONVERGED
    assert const("kSvdNonFinite") == svd_metal.NON_FINITE
    assert const("kSvdMaxSimdgroups") == svd_metal.MAX_SIMDGROUPS
    assert const("kSvdSmallMax") == svd_metal.SMALL_MAX
    stage = metal_constant("linalg/svd.h", "kSvdStageBytes")
    assert stage == "kMaxThreadgroupMemoryBytes - kSvdMaxSimdgroups * 4"
    assert svd_metal.STAGE_BYTES == 32768 - svd_metal.MAX_SIMDGROUPS * 4


def _round_robin(m, r, k):
    """Mirror of metal/common/jacobi.h's jacobi_round_robin (the modulo as one conditional
    subtraction)."""
    turn = m - 1
    if k == 0:
        x, y = turn, r
    else:
        x, y = r + k, r - k + turn
        x, y = (x - turn if x >= turn else x), (y - turn if y >= turn else y)
        assert (x, y) == ((r + k) % turn, (r - k + turn) % turn)
    return min(x, y), max(x, y)


def test_round_robin_meets_every_pair_once():
    """The circle ordering of svd_jacobi and eigh_group: every pair once per sweep, no column
    twice in a step."""
    for n in range(1, 12):
        n2 = n + n % 2
        seen = []
        for step in range(n2 - 1):
            cols = []
            for slot in range(n2 // 2):
                p, q = _round_robin(n2, step, slot)
                cols += [p, q]
                if q < n:
                    seen.append((p, q))
            assert len(set(cols)) == len(cols)
        assert sorted(seen) == [(p, q) for p in range(n) for q in range(p + 1, n)]


# ---------------------------------------------------------------- derivatives


def _gauge_invariant(U, S, Vh):
    """Functions of the SVD that do not depend on the phase of the singular vectors."""
    k = S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    w = torch.linspace(1, 2, k, dtype=S.dtype, device=S.device)
    return S, U @ Vh, (U * w.to(U.dtype)) @ U.mH, Vh.mH @ (w.to(Vh.dtype).unsqueeze(-1) * Vh)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 5)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("full", [False, True])
def test_svd_backward_matches_torch(shape, dtype, full):
    """Our svd_backward (through the op's torch forward) passes gradcheck and equals torch's
    autograd in float64 / complex128."""
    A = matrix_with_spread(max(shape[-2:]), 10.0, dtype, shape[:-2], seed=46)[
        ..., :shape[-2], :shape[-1]].clone().requires_grad_()

    def ours(A):
        return _gauge_invariant(*svd_module.svd_op(A, full, None, "torch", False, ""))

    def theirs(A):
        return _gauge_invariant(*torch.linalg.svd(A, full_matrices=full))

    torch.autograd.gradcheck(ours, (A,))
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(o.shape, generator=gen, dtype=dtype) for o in theirs(A)]
    g1 = torch.autograd.grad(sum((o * w).real.sum() for o, w in zip(ours(A), weights,
                                                                       strict=True)), A)
    g2 = torch.autograd.grad(sum((o * w).real.sum() for o, w in zip(theirs(A), weights,
                                                                       strict=True)), A)
    torch.testing.assert_close(g1, g2)


def test_svd_backward_ill_defined_complex_gauge(backend):
    A = backend.tensor(random_matrix(3, torch.complex64, (), seed=47)).requires_grad_()
    U, S, Vh = mpslinalg.svd(A)
    with pytest.raises(RuntimeError, match="depends on this phase term") as err:
        U.sum().abs().backward()
    assert "svd_backward" in str(err.value)
    A64 = wide(A.detach()).requires_grad_()
    with pytest.raises(RuntimeError, match="depends on this phase term"):
        torch.linalg.svd(A64)[0].sum().abs().backward()


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_svdvals_and_pinv_backward(shape, dtype):
    A = random_matrix(shape[1], dtype, (2,), seed=48, m=shape[0]).requires_grad_()
    zero = torch.zeros((), dtype=torch.float64)
    rtol = torch.full((), 1e-10, dtype=torch.float64)
    torch.autograd.gradcheck(lambda A: svd_module.svdvals_op(A, None, "torch", False, ""), (A,))
    torch.autograd.gradcheck(
        lambda A: svd_module.pinv_op(A, zero, rtol, False, "torch", False, ""), (A,))


def test_metal_gradients_against_torch(metal_backend):
    for dtype in DTYPES:
        A = random_matrix(3, dtype, (2,), seed=49, m=5)
        A = matrix_with_spread(5, 10.0, dtype, (2,), seed=49)[..., :3]
        for fn, ref in [(lambda A: _gauge_invariant(*mpslinalg.svd(A, full_matrices=False)),
                         lambda A: _gauge_invariant(*torch.linalg.svd(A, full_matrices=False))),
                        (lambda A: (mpslinalg.svdvals(A),), lambda A: (torch.linalg.svdvals(A),)),
                        (lambda A: (mpslinalg.pinv(A),), lambda A: (torch.linalg.pinv(A),))]:
            a = metal_backend.tensor(A).requires_grad_()
            a64 = wide(A).requires_grad_()
            outs, refs = fn(a), ref(a64)
            gen = torch.Generator().manual_seed(1)
            ws = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in refs]
            g = torch.autograd.grad(sum((o * w.to(o)).real.sum() for o, w in zip(outs, ws,
                                                                                  strict=True)), a)
            g64 = torch.autograd.grad(sum((o * w).real.sum() for o, w in zip(refs, ws,
                                                                              strict=True)), a64)
            torch.testing.assert_close(wide(g[0]), g64[0], rtol=1e-3,
                                       atol=1e-4 * float(g64[0].abs().max()))


# ---------------------------------------------------------------- docstrings



# ---------------------------------------------------------------- the op database

from opdb import (  # noqa: E402,I001
    BadSample, OpInfo, Sample, degenerate_samples, instantiate_generic_tests)


def _dt(c: bool) -> torch.dtype:
    return torch.complex128 if c else torch.float64


def _rect(m: int, n: int, batch: tuple, c: bool, seed: int) -> torch.Tensor:
    """m x n with well separated singular values (10 ** (-j / k))."""
    return matrix_with_spread(max(m, n), 10.0, _dt(c), batch, seed)[..., :m, :n].contiguous()


def _svd_samples(c: bool) -> list[Sample]:
    return [
        Sample((_rect(3, 3, (), c, 1),), desc="3x3"),
        Sample((_rect(5, 3, (2,), c, 2), False), desc="(2, 5, 3) reduced"),
        Sample((_rect(6, 6, (2,), c, 3),), desc="(2, 6, 6) full"),
        Sample((_rect(3, 7, (2,), c, 4),), desc="(2, 3, 7) full"),
        Sample((_rect(4, 2, (2, 1), c, 5), True), desc="(2, 1, 4, 2) full"),
        Sample((torch.zeros(0, 3, 3, dtype=_dt(c)),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 3, dtype=_dt(c)),), desc="0 rows"),
    ]


def _svd_compare(out):
    """Gauge-invariant: S, U_k diag(S) Vh_k, U^H U, Vh Vh^H (the last two cover the
    completed columns of full_matrices)."""
    U, S, Vh = out
    k = S.shape[-1]
    rebuilt = (U[..., :k] * S.unsqueeze(-2).to(U.dtype)) @ Vh[..., :k, :]
    return S, rebuilt, U.mH @ U, Vh @ Vh.mH


def _matrix_bad() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3),), error=RuntimeError, match="dimensions"),
        BadSample((torch.zeros(3, 3, dtype=torch.int32),), error=(TypeError, RuntimeError),
                  match="int"),
        BadSample(([[1.0, 0.0], [0.0, 1.0]],), error=(TypeError, AttributeError)),
    ]


def _svd_bad() -> list[BadSample]:
    return _matrix_bad() + [
        BadSample((torch.eye(3),), {"driver": "gesvd"}, error=RuntimeError, match="driver",
                  valid_on=("cuda",)),
    ]


def _svdvals_samples(c: bool) -> list[Sample]:
    return [Sample(s.args[:1], desc=s.desc) for s in _svd_samples(c)]


def _pinv_samples(c: bool) -> list[Sample]:
    h = _rect(4, 4, (2,), c, 6)
    h = h + h.mH
    return [
        Sample((_rect(3, 3, (), c, 1),), desc="3x3"),
        Sample((_rect(5, 3, (2,), c, 2),), desc="(2, 5, 3)"),
        Sample((_rect(3, 6, (2,), c, 3),), desc="(2, 3, 6)"),
        Sample((_rect(4, 4, (2,), c, 4),), {"rtol": 0.45}, desc="rtol float"),
        Sample((_rect(4, 4, (2,), c, 4),), {"atol": torch.tensor([0.45, 0.0])},
               desc="atol tensor"),
        Sample((_rect(4, 4, (), c, 4),), {"rtol": torch.tensor([[0.45], [0.05]])},
               desc="rtol tensor broadcast"),
        Sample((_rect(6, 6, (2,), c, 5), 0.45), desc="legacy rcond"),
        Sample((h,), {"hermitian": True}, desc="hermitian"),
        Sample((torch.zeros(0, 3, 3, dtype=_dt(c)),), desc="empty batch"),
    ]


def _tol_bad() -> list[BadSample]:
    return _matrix_bad() + [
        BadSample((torch.eye(3),), {"atol": torch.tensor(1j)}, error=RuntimeError,
                  match="complex"),
        BadSample((torch.zeros(3, 4),), {"hermitian": True}, error=RuntimeError, match="square"),
        BadSample((torch.eye(3), 0.1), {"atol": 0.2}, error=TypeError),
        BadSample((torch.eye(3).expand(2, 3, 3),), {"atol": torch.zeros(3)}, error=RuntimeError),
    ]


def _rank_samples(c: bool) -> list[Sample]:
    def product(m, n, k, batch, seed):
        x = random_matrix(k, _dt(c), batch, seed, m=m)
        y = random_matrix(n, _dt(c), batch, seed + 1, m=k)
        return x @ y

    x = random_matrix(2, _dt(c), (2,), 9, m=5)
    return [
        # rtol above float32's rounding of the products (the float64 reference's default
        # rtol would count it); test_matrix_rank_exact_on_rank_k_products checks the default
        Sample((product(4, 4, 2, (), 1),), {"rtol": 1e-4}, desc="4x4 rank 2"),
        Sample((product(6, 5, 3, (2,), 3),), {"rtol": 1e-4}, desc="(2, 6, 5) rank 3"),
        Sample((product(3, 7, 2, (2,), 5),), {"rtol": 1e-4}, desc="(2, 3, 7) rank 2"),
        Sample((_rect(5, 5, (2,), c, 7),), {"atol": torch.tensor([[0.5], [0.05]])},
               desc="atol tensor broadcast"),
        Sample((_rect(5, 5, (2,), c, 7), 0.45), desc="legacy tol"),
        Sample((x @ x.mH,), {"hermitian": True, "rtol": 1e-4}, desc="hermitian rank 2"),
        Sample((torch.zeros(2, 0, 3, dtype=_dt(c)),), desc="0 rows"),
    ]


_NO_NAN_REFERENCE = ("the reference, torch.linalg.svd on the CPU, raises LinAlgError for NaN "
                     "input (gesdd's info), so there is no result to compare with; "
                     "test_nonfinite_gives_nan_fast covers NaN and Inf on every backend")

OPS = [
    OpInfo("svd", mpslinalg.svd, torch.linalg.svd, _svd_samples, bad_samples=_svd_bad,
           compare=_svd_compare, small_path=True,
           degenerate=lambda c: degenerate_samples(c, ({"full_matrices": True},
                                                       {"full_matrices": False})),
           skips={"upcast": "the invariants are products rounded in float16; "
                            "test_float16_upcast_raw compares the raw U and S instead",
                  "nonfinite": _NO_NAN_REFERENCE}),
    OpInfo("svdvals", mpslinalg.svdvals, torch.linalg.svdvals, _svdvals_samples,
           bad_samples=_svd_bad, small_path=True, skips={"nonfinite": _NO_NAN_REFERENCE}),
    OpInfo("pinv", mpslinalg.pinv, torch.linalg.pinv, _pinv_samples, bad_samples=_tol_bad,
           skips={"nonfinite": _NO_NAN_REFERENCE}),
    OpInfo("matrix_rank", mpslinalg.matrix_rank, torch.linalg.matrix_rank, _rank_samples,
           bad_samples=_tol_bad, grad_args=(), rank_output=0, device_reads=1,
           skips={"nonfinite": _NO_NAN_REFERENCE,
                  "upcast": "the rank is an integer, and the upcast test compares floating "
                            "outputs; test_matrix_rank_upcast compares the ranks"}),
]

instantiate_generic_tests(globals(), OPS)


# ---------------------------------------------------------------- the block Jacobi (svd_block.h)


@pytest.fixture
def block_path(monkeypatch):
    """Square matrices from order 8 on take the block Jacobi kernels, so that the emulator runs
    them on small sizes (two to four column blocks of 16)."""
    monkeypatch.setattr(svd_metal, "BLOCK_MIN_N", 8)


@pytest.mark.parametrize("kind,n", [(kind, n) for kind in KINDS for n in (17, 40)]
                         + [("random", 72), ("rank-deficient", 72)])
def test_block_ratios(metal_backend, block_path, kind, n):
    """Every kind of test matrix at a block count of 2 (one round a sweep) and of 4 with an
    empty last block (three rounds of two pairs), two kinds at 6 blocks with rows in two
    threadgroups (72 > BLOCK_SPLIT_ROWS; a minute each on the emulator), real and complex, a
    batch of two; the tall path (QR, then the block Jacobi on R) too."""
    for dtype in DTYPES:
        A = metal_backend.tensor(make(kind, n, n, dtype, (2,), seed=n))
        A0 = A.clone()
        U, S, Vh = mpslinalg.svd(A)
        assert torch.equal(A, A0), "input modified"
        check_svd(A, U, S, Vh, True)
        assert singular_values_ratio(mpslinalg.svdvals(A), scipy_svdvals(A), n, n,
                                     dtype=dtype) < THRESH
    T = metal_backend.tensor(make(kind, n + 5, n, torch.float32, (), seed=n))
    check_svd(T, *mpslinalg.svd(T, full_matrices=False), False)


def test_block_rank_deficient_zero_and_identity(metal_backend, block_path):
    """pytorch#196112's kinds on the block path: rank-deficient and ill-conditioned matrices,
    a rank-one matrix with exactly zero columns (U's columns of zero norm completed), the zero
    matrix and the identity."""
    for dtype in DTYPES:
        A = matrix_with_spread(20, 10.0, dtype, (5,), seed=61, rank=7)
        A[2] = matrix_with_spread(20, 1e7, dtype, (), seed=62)
        A[3] = 0
        A[3, :, 2] = 1.0
        A[4] = torch.eye(20, dtype=dtype)
        A = metal_backend.tensor(A)
        U, S, Vh = mpslinalg.svd(A)
        check_svd(A, U, S, Vh, True)
        assert mpslinalg.matrix_rank(A[[0, 1, 3, 4]], rtol=1e-4).tolist() == [7, 7, 1, 20]
        Z = metal_backend.tensor(torch.zeros(2, 18, 18, dtype=dtype))
        U, S, Vh = mpslinalg.svd(Z)
        assert not S.cpu().any()
        assert orthogonality_ratio(U) < THRESH and orthogonality_ratio(Vh.mH) < THRESH


def test_block_nonfinite_stays_in_its_matrix(metal_backend, block_path):
    A = matrix_with_spread(20, 1e3, torch.float32, (3,), seed=63)
    A[1, 4, 7] = math.nan
    A[2, 0, 0] = math.inf
    U, S, Vh, info = svd_metal.svd_metal(metal_backend.tensor(A))
    info = info.cpu().tolist()
    assert info[1] == info[2] == svd_metal.NON_FINITE and 1 <= info[0] <= 12, info
    for x in (U, S, Vh):
        assert x[1:].isnan().all() and x[0].isfinite().all()
    check_svd(A[0], U[0].cpu(), S[0].cpu(), Vh[0].cpu(), True)


@pytest.mark.parametrize("n", [20, 40])
def test_block_launch_counts_independent_of_batch(metal_backend, block_path, n):
    """6 launches (scan, scale, load, norms, output, and the completion with vectors) and
    MAX_SWEEPS sweeps of blocks - 1 rounds of two, whatever the batch and the data; no host
    reads."""
    if metal_backend.name != "emulator":
        pytest.skip("launch counters are the emulator's")
    rounds = svd_metal.MAX_SWEEPS * (svd_metal.block_count(n) - 1)
    for batch in (1, 3):
        A = metal_backend.tensor(random_matrix(n, torch.float32, (batch,), seed=64))
        for fn, launches in ((mpslinalg.svd, 6 + 2 * rounds),
                             (mpslinalg.svdvals, 5 + 2 * rounds)):
            emulator.reset_launch_counts()
            with count_host_syncs() as syncs:
                fn(A)
            assert emulator.total_launches() == launches, emulator.launch_counts()
            assert emulator.launch_counts()["svd_block_rotate_float32"] == rounds
            assert not syncs.calls


def test_block_results_independent_of_threads_and_lanes(metal_backend, block_path, monkeypatch):
    """The bits do not depend on the threads of svd_block_gram and svd_block_rotate (64: four
    passes over the Gram matrix's entries and the rows) nor on the order the lanes run in."""
    A = matrix_with_spread(36, 1e4, torch.complex64, (2,), seed=65, rank=30)
    A = metal_backend.tensor(A)
    reference = svd_metal.svd_metal(A)
    variants = [("BLOCK_THREADS", 64)]
    if metal_backend.name == "emulator":
        variants += [("LANE_ORDER", "reverse"), ("LANE_ORDER", "random")]
    for name, value in variants:
        with monkeypatch.context() as m:
            m.setattr(_metal if name == "LANE_ORDER" else svd_metal, name, value)
            for a, b in zip(svd_metal.svd_metal(A), reference, strict=True):
                assert torch.equal(a, b), name


def test_block_converges_in_few_sweeps(metal_backend, block_path, monkeypatch):
    """The sweeps of the block method (info) on random and graded matrices stay far from
    MAX_SWEEPS (the host launches all of them; the ones after convergence return at once) and
    no more than svd_jacobi's on the same matrices."""
    for dtype in DTYPES:
        A = metal_backend.tensor(torch.cat([matrix_with_spread(48, 1e5, dtype, (2,), seed=66),
                                            random_matrix(48, dtype, (2,), seed=67)]))
        block = svd_metal.svd_metal(A, vectors=False)[3].cpu()
        monkeypatch.setattr(svd_metal, "BLOCK_MIN_N", 10**6)
        jacobi = svd_metal.svd_metal(A, vectors=False)[3].cpu()
        monkeypatch.setattr(svd_metal, "BLOCK_MIN_N", 8)
        assert 1 <= block.min() and block.max() <= 16 and (block <= jacobi).all(), (block, jacobi)


def test_block_host_constants_mirror_header():
    def const(name):
        return metal_constant("linalg/svd_block.h", name)

    assert int(const("kSvdBlockWidth")) == svd_metal.BLOCK_WIDTH
    assert int(const("kSvdBlockThreads")) == svd_metal.BLOCK_THREADS
    assert int(const("kSvdBlockSplitRows")) == svd_metal.BLOCK_SPLIT_ROWS
    assert float(const("kSvdBlockTinyNorm").rstrip("f")) == np.float32(svd_metal.BLOCK_TINY_NORM)
