"""The small SVD and symmetric eigendecomposition (mpslinalg/small/orthogonal.py small_svd /
small_eigh): the generated SIMD CPU kernels against numpy, and the fused Triton kernels through
Triton's interpreter against the CPU kernels (bit-identical).

Ratios as LAPACK's tests (xSVDCH / xSYT21 style, 1-norms, float64 arithmetic):
``||A - U S Vh|| / (max(m, n) ||A|| eps)``, ``||U^T U - I|| / (m eps)``, ``||V^T V - I|| /
(n eps)``, ``|S - S_numpy| <= 30 max(m, n) eps S_max``, and for eigh ``||A V - V L|| /
(n ||A|| eps)``, all < 30, on random, rank-deficient, ill-conditioned (cond 1e6 / 1e12),
repeated-value and 1e+-30-scaled batches.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from triton_interpreter import run_cases

import mpslinalg
from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import orthogonal as so
from mpslinalg.small import paths
from mpslinalg.testing import THRESH, eps, matrix_with_spread, noncontiguous, random_matrix

from opdb import degenerate_matrices, degenerate_samples

pytestmark = pytest.mark.usefixtures("native_orth")

ROOT = Path(__file__).resolve().parent.parent.parent
DTYPES = (torch.float32, torch.float64)
SQUARE = (1, 2, 3, 4)


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    return (x.shape == y.shape and x.dtype == y.dtype
            and torch.equal(torch.isnan(x), torch.isnan(y))
            and torch.equal(torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0)))


def _norm1(x: torch.Tensor) -> torch.Tensor:
    return x.abs().sum(-2).amax(-1)


def _hard(m: int, n: int, dtype, batch: int = 64) -> torch.Tensor:
    """Random, rank-deficient (rank 0 .. k-1, exact), ill-conditioned and repeated-value
    matrices, scaled by 1e+-30 (float32) / 1e+-150 (float64) in part."""
    k = min(m, n)
    big = 1e30 if dtype == torch.float32 else 1e150
    parts = [random_matrix(n, torch.float64, (batch,), seed=m * 10 + n, m=m)]
    if m == n:
        for rank in range(n):
            parts.append(matrix_with_spread(n, 10.0, torch.float64, (4,), seed=rank, rank=rank))
        parts.append(matrix_with_spread(n, 1e6, torch.float64, (8,), seed=11))
        if dtype == torch.float64:
            parts.append(matrix_with_spread(n, 1e12, torch.float64, (8,), seed=12))
        parts.append(matrix_with_spread(n, 1.0, torch.float64, (4,), seed=13))  # all equal
    else:
        low = random_matrix(n, torch.float64, (8,), seed=14, m=m)
        low[:, :, -1] = low[:, :, 0]
        if k > 1:
            low[:4, 0] = 0
        parts.append(low)
    A = torch.cat(parts)
    A[1] = 0
    A[2] *= big
    A[3] /= big
    A[4, :, 0] *= big  # columns of very different norms
    return A.to(dtype)


def _check_svd(A: torch.Tensor, U, S, Vh, full: bool) -> dict[str, float]:
    *batch, m, n = A.shape
    k = min(m, n)
    e = eps(A.dtype)
    assert S.shape == (*batch, k) and S.dtype == A.dtype
    assert U.shape == (*batch, m, m if full else k) and Vh.shape == (*batch, n if full else k, n)
    A64, U64, S64, V64 = (x.double() for x in (A, U, S, Vh))
    assert (S64[..., :-1] >= S64[..., 1:]).all() and (S64 >= 0).all()  # descending
    ref = torch.from_numpy(np.linalg.svd(A64.numpy(), compute_uv=False))
    anorm = _norm1(A64)
    rec = A64 - U64[..., :k] @ torch.diag_embed(S64) @ V64[..., :k, :]
    ratios = {
        "reconstruction": float((_norm1(rec) / (max(m, n) * anorm.clamp_min(1e-300) * e)).max()),
        "orth U": float(_norm1(U64.mT @ U64 - torch.eye(U.shape[-1], dtype=torch.float64)).max()
                        / (m * e)),
        "orth V": float(_norm1(V64 @ V64.mT - torch.eye(Vh.shape[-2], dtype=torch.float64)).max()
                        / (n * e)),
        "S": float(((S64 - ref).abs().amax(-1) / (max(m, n) * e * ref[..., 0].clamp_min(1e-300)))
                   .max()),
    }
    assert all(r < THRESH for r in ratios.values()), ratios
    return ratios


# ---------------------------------------------------------------- SVD on CPU


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("shape", sc.SVD_SHAPES, ids=[f"{m}x{n}" for m, n in sc.SVD_SHAPES])
def test_svd_ratios(shape, dtype):
    A = _hard(*shape, dtype)
    A0 = A.clone()
    for full in (True, False):
        U, S, Vh = sc.small_svd(A, full, True, 2)
        _check_svd(A, U, S, Vh, full)
        _, Sv, _ = sc.small_svd(A, full, False)
        assert _same(Sv, S)  # the same sweeps without vectors
    assert torch.equal(A, A0)


def test_svd_rank_deficient_orthogonality_float32():
    """The upstream failure mode (pytorch#196112): batches of rank-deficient 3x3 keep U and V
    orthogonal (zero singular values get an orthonormal completion)."""
    A = torch.cat([matrix_with_spread(3, 10.0, torch.float32, (1000,), seed=r, rank=r)
                   for r in (0, 1, 2)] + [matrix_with_spread(3, 10.0, torch.float32, (200,),
                                                             seed=21, rank=r) for r in (1, 2)])
    # seed 1, matrix 785: sigma_3 / sigma_1 = 3e-22, whose column's squares are subnormal
    U, S, Vh = sc.small_svd(A, True, True)
    r = _check_svd(A, U, S, Vh, True)
    assert r["orth U"] < 10 and r["orth V"] < 10, r


def _degenerate(m: int, n: int, dtype, hermitian: bool = False) -> torch.Tensor:
    """The degenerate kinds of opdb.degenerate_matrices in one batch, in ``dtype``."""
    kinds = degenerate_matrices(m, n, per_kind=40, seed=m * 10 + n, hermitian=hermitian)
    return torch.cat(list(kinds.values())).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("shape", sc.SVD_SHAPES, ids=[f"{m}x{n}" for m, n in sc.SVD_SHAPES])
def test_svd_degenerate_orthogonality(shape, dtype):
    """A zero row or column, rows graded 1e-20 .. 1e20, rank 1, equal rows or columns: U and V
    orthonormal. The column of a zero singular value holds rounding residue inside the span of
    the others, which the sweeps shrink but never make orthogonal; it was normalised into U
    (||U^T U - I|| = 1, a column parallel to another) while U S Vh still rebuilt A."""
    A = _degenerate(*shape, dtype)
    for full in (True, False):
        U, S, Vh = sc.small_svd(A, full, True)
        _check_svd(A, U, S, Vh, full)


def test_svd_small_singular_values_relative_accuracy():
    """One-sided Jacobi keeps small singular values to high relative accuracy on graded
    matrices (A = D1 B D2 with well-conditioned B), where A^T A would square them away."""
    B = matrix_with_spread(3, 2.0, torch.float64, (50,), seed=22)
    D = torch.tensor([1.0, 1e-3, 1e-6], dtype=torch.float64)
    A = (D[:, None] * B * D[None, :])
    _, S, _ = sc.small_svd(A.float(), True, False)
    ref = torch.from_numpy(np.linalg.svd(A.numpy(), compute_uv=False))
    rel = ((S.double() - ref).abs() / ref).amax()
    assert rel < 30 * 3 * eps(torch.float32), float(rel)


def test_svd_extreme_scales_float32():
    """Entries of 1e+-30 in float32: the same relative accuracy as at scale 1."""
    A = random_matrix(3, torch.float32, (64,), seed=23)
    _, S1, _ = sc.small_svd(A, True, False)
    for scale in (1e30, 1e-30):
        U, S, Vh = sc.small_svd(A * scale, True, True)
        assert torch.isfinite(S).all() and torch.isfinite(U).all()
        _check_svd(A * scale, U, S, Vh, True)
        torch.testing.assert_close((S.double() / scale).float(), S1, rtol=1e-5, atol=0)


def _sweep_counting_svd(m: int, n: int):
    """The float32 singular-value kernel of m x n matrices, generated as the library's is but
    counting the sweeps its blocks run: ``svd(A)`` returns (S, sweeps), on blocks of 4 lanes
    (the baseline variant), one thread."""
    from native_gate import build_test_library

    original = sc._Cpp.sweeps

    @contextlib.contextmanager
    def counted(self, count, flag):
        with original(self, count, flag):
            self.w("++sweeps_run;", self.depth)
            yield

    name = sc._svd_name(m, n, "vals", "f32")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sc._Cpp, "sweeps", counted)
        kernel = sc._orth_function(name, "f32", sc._SVD_ARGS, "A, U, S, VH",
                                   lambda w: sc._svd_block(w, m, n, "vals", False))
    assert "++sweeps_run;" in kernel
    source = (sc._PRELUDE + "static long sweeps_run = 0;\n"
              'extern "C" __attribute__((visibility("default"))) long mpsl_sweeps_run() '
              "{ long run = sweeps_run; sweeps_run = 0; return run; }\n" + kernel)
    lib = ctypes.CDLL(str(build_test_library(source, sc._ORTH_FLAGS, "small_svd_sweep_count")))
    lib.mpsl_sweeps_run.restype = ctypes.c_long
    fn = getattr(lib, f"mpsl_small_{name}")
    p = ctypes.c_void_p
    fn.argtypes = [p, p, p, p, ctypes.c_long, ctypes.c_int, ctypes.c_int]

    def svd(A: torch.Tensor) -> tuple[torch.Tensor, int]:
        A = A.contiguous()
        S = torch.empty(A.shape[0], min(m, n))
        empty = torch.empty(0)
        lib.mpsl_sweeps_run()
        fn(A.data_ptr(), empty.data_ptr(), S.data_ptr(), empty.data_ptr(), A.shape[0], 1, 1)
        return S, lib.mpsl_sweeps_run()

    return svd


def _poisoned(A: torch.Tensor) -> torch.Tensor:
    """A's first four matrices with a NaN, an Inf, a -Inf and Inf everywhere."""
    A = A.clone()
    A[0, 1, 2] = math.nan
    A[1, 0, 0] = math.inf
    A[2, 3, 3] = -math.inf
    A[3] = math.inf
    return A


def test_svd_non_finite_gives_nan_quickly():
    A = _poisoned(random_matrix(4, torch.float32, (8,), seed=24))
    U, S, Vh = sc.small_svd(A, True, True)
    for x in (U, S, Vh):
        assert torch.isnan(x[:4]).all() and torch.isfinite(x[4:]).all()


def test_svd_non_finite_runs_no_sweeps_of_its_own():
    """A matrix with NaN or Inf is zeroed for the sweeps: a block of such matrices leaves the
    loop after its first sweep (no rotation), and one in a block of clean matrices adds no
    sweep to theirs (it would run all JACOBI_MAX_SWEEPS if its lanes kept rotating)."""
    from mpslinalg.small.codegen import JACOBI_MAX_SWEEPS

    svd = _sweep_counting_svd(4, 4)
    clean = random_matrix(4, torch.float32, (8,), seed=24)
    bad = _poisoned(clean)[:4]
    S, sweeps = svd(bad)
    assert S.isnan().all() and sweeps == 1, sweeps
    for i in range(4):  # each kind alone, in a block whose other lanes are empty
        assert svd(bad[i:i + 1])[1] == 1
    _, clean_sweeps = svd(clean[4:])
    assert 2 <= clean_sweeps < JACOBI_MAX_SWEEPS, clean_sweeps
    for i in range(4):  # one lane poisoned among three clean ones
        mixed = torch.cat([bad[i:i + 1], clean[5:]])
        S, sweeps = svd(mixed)
        assert S[0].isnan().all() and S[1:].isfinite().all()
        assert sweeps == svd(clean[5:])[1], (i, sweeps)


def _outcome(call):
    try:
        out = call()
    except torch.linalg.LinAlgError as error:
        return type(error), str(error)
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_batches_are_torchs(dtype):
    """The entry points on the kernels' path: a batch holding NaN or Inf gets torch.linalg's
    values or error exactly (the kernels alone give NaN; LAPACK raises for NaN, and for Inf
    raises or returns values), a clean batch the kernels' own results."""
    A = random_matrix(3, dtype, (40,), seed=25)
    A = A + A.mT
    assert so.torch_path(A) == "simd kernel on CPU"
    calls = ((lambda: so.small_svd(A, True, True), lambda: torch.linalg.svd(A)),
             (lambda: so.small_svd(A, False, False)[1], lambda: torch.linalg.svdvals(A)),
             (lambda: so.small_eigh(A, False, True), lambda: torch.linalg.eigh(A)),
             (lambda: so.small_eigh(A, True, False)[0], lambda: torch.linalg.eigvalsh(A, "U")))
    for where, value in (((2, 1, 1), math.nan), ((2, 1, 1), math.inf), ((3, 0, 0), math.inf)):
        A[where] = value
        for ours, theirs in calls:
            got, want = _outcome(ours), _outcome(theirs)
            if isinstance(want[0], type):
                assert got == want
            else:
                assert all(_same(g, w) for g, w in zip(got, want, strict=True))
        A[where] = 1.0
    assert not _same(so.small_svd(A, False, False)[1], torch.linalg.svdvals(A))  # the kernels'


def test_svd_layouts_and_empty_batches():
    A = random_matrix(4, torch.float32, (2, 9), seed=25, m=3)
    U, S, Vh = sc.small_svd(A, True, True)
    assert U.shape == (2, 9, 3, 3) and S.shape == (2, 9, 3) and Vh.shape == (2, 9, 4, 4)
    for view in (noncontiguous(A), A[0, 0], -A):
        for x, y in zip(sc.small_svd(view, False, True),
                        sc.small_svd(view.contiguous().resolve_neg(), False, True), strict=True):
            assert _same(x, y)
    for shape in ((0, 3, 3), (2, 0, 4, 3)):
        for full in (True, False):
            got = sc.small_svd(torch.zeros(shape), full, True)
            want = torch.linalg.svd(torch.zeros(shape), full_matrices=full)
            assert [x.shape for x in got] == [x.shape for x in want]


# ---------------------------------------------------------------- eigh on CPU


def _check_eigh(A: torch.Tensor, L, V) -> dict[str, float]:
    n = A.shape[-1]
    e = eps(A.dtype)
    A64, L64, V64 = A.double(), L.double(), V.double()
    assert (L64[..., :-1] <= L64[..., 1:]).all()  # ascending, torch's order
    anorm = _norm1(A64).clamp_min(1e-300)
    ref = torch.from_numpy(np.linalg.eigvalsh(A64.numpy()))
    ratios = {
        "residual": float((_norm1(A64 @ V64 - V64 * L64[..., None, :]) / (n * anorm * e)).max()),
        "orth": float(_norm1(V64.mT @ V64 - torch.eye(n, dtype=torch.float64)).max() / (n * e)),
        "values": float(((L64 - ref).abs().amax(-1) / (n * anorm * e)).max()),
    }
    assert all(r < THRESH for r in ratios.values()), ratios
    return ratios


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("n", SQUARE)
def test_eigh_ratios(n, dtype):
    A = _hard(n, n, dtype)
    A = A + A.mT
    A[5, 0, 0] = -A[5, 0, 0] - 3  # indefinite
    A0 = A.clone()
    for upper in (False, True):
        L, V = sc.small_eigh(A, upper, True, 2)
        _check_eigh(A, L, V)
        Lv, Ve = sc.small_eigh(A, upper, False)
        assert _same(Lv, L) and Ve.numel() == 0
    assert torch.equal(A, A0)


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("n", (2, 3, 4))
def test_eigh_degenerate_orthogonality(n, dtype):
    """The Hermitian degenerate kinds (a zero row and column, graded, rank 1, repeated): V is
    a product of rotations, orthonormal whatever the sweeps reach."""
    A = _degenerate(n, n, dtype, hermitian=True)
    for upper in (False, True):
        _check_eigh(A, *sc.small_eigh(A, upper, True))


def test_eigh_reads_only_the_named_triangle():
    S = random_matrix(4, torch.float64, (16,), seed=31)
    S = S + S.mT
    low, up = S.tril(), S.triu()
    low[..., 0, 3] = math.nan  # never read with upper=False
    up[..., 3, 0] = math.nan
    L1, V1 = sc.small_eigh(low, False, True)
    L2, V2 = sc.small_eigh(up, True, True)
    assert torch.isfinite(L1).all() and _same(L1, L2) and _same(V1, V2)
    torch.testing.assert_close(L1, torch.linalg.eigvalsh(S), rtol=0, atol=1e-12)


def test_eigh_extreme_scales_and_non_finite():
    S = random_matrix(3, torch.float32, (16,), seed=32)
    S = S + S.mT
    for scale in (1e30, 1e-30):
        L, V = sc.small_eigh(S * scale, False, True)
        assert torch.isfinite(L).all() and torch.isfinite(V).all()
        _check_eigh(S * scale, L, V)
    S[0, 2, 1] = math.nan
    S[1, 0, 0] = math.inf
    L, V = sc.small_eigh(S, False, True)
    assert torch.isnan(L[:2]).all() and torch.isnan(V[:2]).all() and torch.isfinite(L[2:]).all()


# ---------------------------------------------------------------- dispatch


def test_use_small_svd_and_eigh():
    with mpslinalg.use_backend("torch"):
        big = torch.zeros(64, 3, 3)
        assert so.use_small_svd(big) and so.use_small_eigh(big)
        assert so.use_small_svd(big.double()) and so.use_small_svd(torch.zeros(64, 3, 4))
        assert not so.use_small_svd(big[:1]) and not so.use_small_eigh(big[:1])  # crossover
        assert not so.use_small_svd(torch.zeros(64, 2, 3))  # no kernel for 2x3
        assert not so.use_small_eigh(torch.zeros(64, 3, 4))
        assert not so.use_small_svd(big.to(torch.complex64))
        assert not so.use_small_eigh(torch.zeros(64, 5, 5))
    assert not so.use_small_svd(big, "metal") and not so.use_small_eigh(big, "metal")


def _cpu_crossovers(op: str) -> dict[int, int]:
    """The crossovers of ``op``'s SIMD kernels on the CPU, by order."""
    return paths.TABLES[op].row(paths.SIMD_CPU, "cpu").min_batch


#: (full call, values-only call, the small_* function serving both, its CPU crossovers for the
#: full call and for the values-only one, whether the input is symmetric)
_CROSSOVER_PAIRS = [
    (mpslinalg.svd, mpslinalg.svdvals, "small_svd", _cpu_crossovers("svd"),
     _cpu_crossovers("svdvals"), False),
    (mpslinalg.eigh, mpslinalg.eigvalsh, "small_eigh", _cpu_crossovers("eigh"),
     _cpu_crossovers("eigvalsh"), True),
]


def test_values_only_calls_take_the_small_path_from_their_own_crossovers(monkeypatch):
    """torch.linalg.svdvals and eigvalsh cost about half of svd and eigh while the op's dispatch
    and the kernels' fixed cost stay, so the public svdvals / eigvalsh take the small path from
    their own, larger crossovers (sharing svd's / eigh's, they were 1.4-4.7x torch there): at
    the full call's crossover the values-only call is torch.linalg's."""
    taken = []

    def spy(name):
        real = getattr(mpslinalg.small, name)

        def call(*args):
            taken.append(name)
            return real(*args)
        return call

    for name in ("small_svd", "small_eigh"):
        monkeypatch.setattr(mpslinalg.small, name, spy(name))
    with mpslinalg.use_backend("torch"):
        for full, values, name, full_table, values_table, symmetric in _CROSSOVER_PAIRS:
            for n in (2, 3, 4):
                full_batch = full_table[n]
                values_batch = values_table[n]
                assert full_batch < values_batch, (name, n)
                A = random_matrix(n, torch.float32, (values_batch,), seed=50 + n)
                A = A + A.mT if symmetric else A
                for fn, batch, takes in ((full, full_batch, True), (values, full_batch, False),
                                         (values, values_batch, True)):
                    taken.clear()
                    fn(A[:batch])
                    assert taken == ([name] if takes else []), (fn.__name__, n, batch)


def test_fast_path_predicates_read_the_crossover_of_the_order():
    """The public calls' shapes-only predicates say yes from the crossover of the batch's own
    order and shape on (they took the smallest of the table: a batch of 2 x 2 matrices at the
    4 x 4 crossover, or of 2 x 3 ones, which have no kernel, took the op without the small path
    and paid its dispatch on top of torch.linalg)."""
    predicates = [(so.may_use_small_svd, _cpu_crossovers("svd")),
                  (lambda A: so.may_use_small_svd(A, compute_uv=False),
                   _cpu_crossovers("svdvals")),
                  (so.may_use_small_eigh, _cpu_crossovers("eigh")),
                  (lambda A: so.may_use_small_eigh(A, compute_v=False),
                   _cpu_crossovers("eigvalsh")),
                  (so.may_use_small_qr, _cpu_crossovers("qr"))]
    for may_use, table in predicates:
        for n, batch in table.items():
            assert may_use(torch.zeros(batch, n, n)), (table, n)
            assert not may_use(torch.zeros(batch - 1, n, n)), (table, n)
    assert not so.may_use_small_svd(torch.zeros(1 << 12, 2, 3))
    assert not so.may_use_small_eigh(torch.zeros(1 << 12, 4, 3))


def test_degenerate_samples_take_the_small_paths():
    """The op database's orthonormal_factors test checks the n <= 4 kernels on the torch
    backend: its samples of those shapes are batches at or above the crossovers."""
    with mpslinalg.use_backend("torch"):
        for hermitian, use in ((False, so.use_small_svd), (False, so.use_small_qr),
                               (True, so.use_small_eigh)):
            small = [s.args[0] for s in degenerate_samples(False, hermitian=hermitian)
                     if max(s.args[0].shape[-2:]) <= 4]
            assert small and all(use(A.float()) and use(A) for A in small), use.__name__


def test_entry_points_and_fallbacks():
    A = random_matrix(3, torch.float32, (10,), seed=41)
    got = so.small_svd(A, True, True)
    for x, y in zip(got, sc.small_svd(A, True, True), strict=True):
        assert _same(x, y)
    # shapes without a generated kernel, and complex: torch.linalg
    B = random_matrix(3, torch.float32, (5,), seed=42, m=2)
    U, S, Vh = so.small_svd(B, False, True)
    torch.testing.assert_close(S, torch.linalg.svdvals(B))
    C = random_matrix(3, torch.complex64, (5,), seed=43)
    H = C + C.mH
    L, V = so.small_eigh(H, False, True)
    torch.testing.assert_close(L, torch.linalg.eigvalsh(H))
    _, S, _ = so.small_svd(C, True, False)
    torch.testing.assert_close(S, torch.linalg.svdvals(C))


# ---------------------------------------------------------------- Triton (interpreter)

_SCRIPT = r"""
import sys
import torch
from mpslinalg.small import triton_kernels as st

cases = torch.load(sys.argv[1])
out = {}
for key, case in cases.items():
    st._LOAD = case["load"]
    A = case["A"]
    if case["op"] == "svd":
        out[key] = st.small_svd(A, case["full"], case["uv"])
    else:
        out[key] = st.small_eigh(A, case["upper"], case["uv"])
torch.save(out, sys.argv[2])
"""


def _triton_cases() -> dict[str, dict]:
    cases = {}
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        for m, n in sc.SVD_SHAPES:
            A = torch.cat([_hard(m, n, dtype), random_matrix(n, dtype, (150,), seed=5, m=m)])
            A[7, 0, 0] = math.nan
            for full, uv in ((True, True), (False, True), (False, False)):
                cases[f"svd-{name}-{m}x{n}-{full}-{uv}"] = {
                    "op": "svd", "A": A, "full": full, "uv": uv, "load": "auto"}
            cases[f"svd-{name}-{m}x{n}-degenerate"] = {
                "op": "svd", "A": _degenerate(m, n, dtype), "full": True, "uv": True,
                "load": "auto"}
        for n in SQUARE:
            A = random_matrix(n, dtype, (200,), seed=6)
            A[3, n - 1, 0] = math.inf
            for upper in (False, True):
                for uv in (False, True):
                    cases[f"eigh-{name}-{n}-{upper}-{uv}"] = {
                        "op": "eigh", "A": A, "upper": upper, "uv": uv, "load": "auto"}
        cases[f"svd-{name}-tile"] = {"op": "svd", "A": random_matrix(4, dtype, (130,), seed=7),
                                     "full": True, "uv": True, "load": "tile"}
        cases[f"eigh-{name}-empty"] = {"op": "eigh", "A": torch.zeros(0, 3, 3, dtype=dtype),
                                       "upper": False, "uv": True, "load": "auto"}
    return cases


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory):
    return run_cases(tmp_path_factory, "triton_svd", _triton_cases(), _SCRIPT)


def test_triton_bit_identical_to_cpu_kernels(triton_runs):
    """Every shape, variant and dtype: the same bits as the SIMD CPU kernels (whose early exit
    from the sweeps changes nothing: converged lanes rotate by the identity)."""
    cases, out = triton_runs
    assert set(out) == set(cases)
    for key, case in cases.items():
        if case["op"] == "svd":
            want = sc.small_svd(case["A"], case["full"], case["uv"])
        else:
            want = sc.small_eigh(case["A"], case["upper"], case["uv"])
        for g, w in zip(out[key], want, strict=True):
            assert _same(g, w), key


def test_triton_degenerate_orthogonality(triton_runs):
    """The fused Triton kernels (the CPU kernels' generator) keep U and V orthonormal on the
    degenerate batches."""
    cases, out = triton_runs
    keys = [key for key in cases if key.endswith("-degenerate")]
    assert len(keys) == len(DTYPES) * len(sc.SVD_SHAPES)
    for key in keys:
        _check_svd(cases[key]["A"], *out[key], full=True)


def test_triton_generated_source():
    pytest.importorskip("triton")
    from mpslinalg.small import triton_kernels as st

    src = st.svd_kernel_source(3, 3)
    assert "for sweep in range(" in src and "tl.sqrt_rn" in src and " if " not in src
    assert src.count("for ") == 1  # the sweeps; everything else straight-line
    assert "tl.store" in st.eigh_kernel_source(4, "float64", upper=True)
