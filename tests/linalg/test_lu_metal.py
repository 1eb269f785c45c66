"""Kernel-level tests of the LU kernels (metal/linalg/lu.metal, triangular.metal) through their
host dispatch (mpslinalg/_lu_metal.py): on CPU tensors (the emulator) and, when present, on MPS.

The public ops (mpslinalg.lu_factor, solve, ...) are tested in their own files; here the
factorization is compared with LAPACK's getrf (SciPy) element for element where LAPACK's result is
determined (pivots, info) and by LAPACK's test ratios where rounding may differ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg.linalg import lu_metal as _lu_metal
from mpslinalg.linalg import triangular_metal
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    count_launches,
    lu_ratio,
    matrix_with_spread,
    random_matrix,
    singular_matrix,
    solve_ratio,
    wide,
)

from opdb import metal_constant

DEVICES = ["cpu"] + (["mps"] if torch.backends.mps.is_available() else [])
DTYPES = [torch.float32, torch.complex64]
SIZES = [0, 1, 2, 31, 32, 33, 127, 128, 129, 200]


# ---------------------------------------------------------------- references and helpers

def lapack_getrf(A: torch.Tensor):
    """SciPy's getrf in A's own precision (sgetrf / cgetrf) per batch element: 1-based pivots
    (*, min(m, n)) and info (*) as numpy arrays."""
    a = A.detach().cpu().numpy()
    batch = a.shape[:-2]
    k = min(a.shape[-2:])
    piv = np.zeros((*batch, k), dtype=np.int64)
    info = np.zeros(batch, dtype=np.int64)
    if k == 0:
        return piv, info
    for idx in np.ndindex(*batch):
        getrf = scipy.linalg.lapack.get_lapack_funcs("getrf", (a[idx],))
        _, p, inf = getrf(a[idx])
        piv[idx] = p[:k] + 1
        info[idx] = inf
    return piv, info


def unpack(LU: torch.Tensor, pivots: torch.Tensor):
    """P, L, U of A = P L U, computed by torch on the CPU in float64 / complex128."""
    return torch.lu_unpack(wide(LU), pivots.cpu())


def factor(A: torch.Tensor, device: str):
    LU, piv, info = _lu_metal.lu_factor_metal(A.to(device))
    assert LU.device.type == device and LU.dtype == A.dtype and LU.shape == A.shape
    assert piv.dtype == torch.int32 and info.dtype == torch.int32
    assert piv.shape == (*A.shape[:-2], min(A.shape[-2:])) and info.shape == A.shape[:-2]
    return LU.cpu(), piv.cpu(), info.cpu()


def check_factor(A: torch.Tensor, device: str, *, pivots_like_lapack: bool = True) -> float:
    LU, piv, info = factor(A, device)
    P, L, U = unpack(LU, piv)
    ratio = lu_ratio(A, P, L, U, dtype=A.dtype)
    assert ratio < THRESH, ratio
    ref_piv, ref_info = lapack_getrf(A)
    if pivots_like_lapack:
        np.testing.assert_array_equal(piv.numpy(), ref_piv)
    np.testing.assert_array_equal(info.numpy(), ref_info)
    return ratio


def expected_launches(m: int, n: int) -> int:
    kmax = min(m, n)
    if kmax == 0:
        return 0
    if _lu_metal.small_chunks(m, n) or n <= _lu_metal.PANEL_MAX_COLS:
        return 1
    panels = math.ceil(kmax / _lu_metal.PANEL_WIDTH)
    last = (panels - 1) * _lu_metal.PANEL_WIDTH + min(_lu_metal.PANEL_WIDTH,
                                                      kmax - (panels - 1) * _lu_metal.PANEL_WIDTH)
    has_last_update = last < m and last < n
    return 3 * panels - (0 if has_last_update else 1)


# ---------------------------------------------------------------- factorization

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_factor_square(n, dtype, device):
    check_factor(random_matrix(n, dtype, seed=n), device)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_factor_and_solve_large(dtype, device):
    """n = 512: 16 panels; the solve with one right-hand side (lu_trsv) and with many."""
    A = random_matrix(512, dtype, seed=5)
    check_factor(A, device)
    LU, piv, _ = _lu_metal.lu_factor_metal(A.to(device))
    for k in (1, 40):
        B = random_matrix(k, dtype, seed=6, m=512)
        X = _lu_metal.lu_solve_metal(LU, piv, B.to(device))
        assert solve_ratio(A, X.cpu(), B, dtype=dtype) < THRESH


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(50, 20), (20, 50), (300, 7), (130, 70), (70, 130), (40, 200),
                                 (97, 96)])
def test_factor_rectangular(m, n, dtype, device):
    check_factor(random_matrix(n, dtype, seed=m + n, m=m), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [5, 70])
def test_factor_batched(n, dtype, device):
    check_factor(random_matrix(n, dtype, batch=(3, 2), seed=n), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 4, 4), (2, 0, 3), (2, 3, 0), (0, 0)])
def test_factor_empty(shape, device):
    A = torch.randn(shape).to(device)
    emulator.reset_launch_counts()
    LU, piv, info = _lu_metal.lu_factor_metal(A)
    assert LU.shape == A.shape
    assert piv.shape == (*shape[:-2], min(shape[-2:])) and info.shape == shape[:-2]
    assert emulator.total_launches() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,rank", [(6, 4), (100, 90)])
def test_factor_singular_trailing(n, rank, dtype, device):
    """Zero trailing columns: info = rank + 1, pivots and info like LAPACK."""
    A = singular_matrix(n, rank, dtype, batch=(2,), seed=1)
    A[1] = random_matrix(n, dtype, seed=2)
    check_factor(A, device)
    _, _, info = factor(A, device)
    assert info.tolist() == [rank + 1, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,col", [(10, 3), (100, 40), (70, 0)])
def test_factor_zero_pivot_inside(n, col, dtype, device):
    """A zero column in the middle: getrf records it and goes on past it."""
    A = random_matrix(n, dtype, seed=3)
    A[:, col] = 0
    A[:, col + 5] = 0
    check_factor(A, device)
    _, _, info = factor(A, device)
    assert int(info) == col + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [8, 100])
@pytest.mark.parametrize("bad", ["nan_entry", "all_nan", "inf_entry"])
def test_factor_nonfinite_finishes(bad, n, dtype, device):
    A = random_matrix(n, dtype, batch=(2,), seed=4)
    if bad == "nan_entry":
        A[0, n // 2, n // 3] = float("nan")
    elif bad == "all_nan":
        A[0] = float("nan")
    else:
        A[0, 1, 1] = float("inf")
    LU, piv, info = factor(A, device)
    # A lone Inf pivot scales its column to 0 and may leave no NaN (as in LAPACK).
    assert not torch.isfinite(LU[0]).all()
    if bad != "inf_entry":
        assert torch.isnan(LU[0]).any()
    assert ((piv[0] >= 1) & (piv[0] <= n)).all()
    P, L, U = unpack(LU[1:], piv[1:])  # the finite batch element is unaffected
    assert lu_ratio(A[1:], P, L, U, dtype=dtype) < THRESH


@pytest.mark.parametrize("device", DEVICES)
def test_factor_ill_conditioned(device):
    A = matrix_with_spread(100, 1e6, torch.complex64, seed=6)
    check_factor(A, device, pivots_like_lapack=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [20, 100])
def test_factor_does_not_modify_input_or_sync(n, device):
    A = random_matrix(n, torch.complex64, batch=(2,), seed=7).to(device)
    before = A.clone()
    with count_host_syncs() as syncs:
        LU, piv, info = _lu_metal.lu_factor_metal(A)
    assert syncs.calls == []
    assert torch.equal(A, before) and LU.data_ptr() != A.data_ptr()


@pytest.mark.parametrize("m,n", [(20, 20), (100, 100), (130, 70), (70, 130), (40, 200)])
def test_factor_launches_grow_with_panels_not_batch(m, n):
    counts = []
    for batch in (1, 7):
        A = random_matrix(n, torch.float32, batch=(batch,), seed=8, m=m)
        emulator.reset_launch_counts()
        _lu_metal.lu_factor_metal(A)
        counts.append(emulator.total_launches())
    assert counts[0] == counts[1] == expected_launches(m, n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [40, 100])
def test_factor_lane_order_independent(n, dtype, monkeypatch):
    A = random_matrix(n, dtype, batch=(2,), seed=9)
    ref = _lu_metal.lu_factor_metal(A)
    monkeypatch.setattr(_metal, "LANE_ORDER", "reverse")
    out = _lu_metal.lu_factor_metal(A)
    for r, o in zip(ref, out, strict=True):
        assert torch.equal(r, o)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n", [(700, 40), (300, 100), (70, 70)])
def test_factor_vector_rows_same_bits(m, n, dtype, monkeypatch):
    """lu_panel's 16-byte loads and stores of a row's leaf entries (rows aligned: n * size a
    multiple of 16) give the bits of the entry-by-entry path; the host grants them only where
    rows are aligned."""
    A = random_matrix(n, dtype, batch=(2,), seed=12, m=m)
    assert _lu_metal._rows16(A.clone()) == (n * A.element_size() % 16 == 0)
    shifted = torch.empty(2 * m * n + 1, dtype=dtype)[1:].view(2, m, n)  # one entry off
    assert not _lu_metal._rows16(shifted)
    vec = _lu_metal.lu_factor_metal(A)
    monkeypatch.setattr(_lu_metal, "_rows16", lambda LU: False)
    scalar = _lu_metal.lu_factor_metal(A)
    for v, s in zip(vec, scalar, strict=True):
        assert torch.equal(v, s)


# ---------------------------------------------------------------- solve

def _solve_case(n, k, dtype, left, adjoint, device, batch=(2,)):
    A = random_matrix(n, dtype, batch=batch, seed=10 + n)
    B = random_matrix(k, dtype, batch=batch, seed=11 + k, m=n)
    if not left:
        B = B.mT.contiguous()
    LU, piv, _ = _lu_metal.lu_factor_metal(A.to(device))
    return A, B, LU, piv


def _solve_residual_ratio(A, X, B, left, adjoint):
    op = A.mH if adjoint else A
    if left:
        return solve_ratio(op, X, B, dtype=X.dtype)
    # X op = B  <=>  op^T X^T = B^T
    return solve_ratio(op.mT, X.mT, B.mT, dtype=X.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("n,k", [(1, 1), (7, 3), (33, 40), (129, 5), (129, 1), (200, 3)])
def test_solve(n, k, left, adjoint, dtype, device):
    A, B, LU, piv = _solve_case(n, k, dtype, left, adjoint, device)
    Bd = B.to(device)
    before = Bd.clone()
    LU_before = LU.clone()
    with count_host_syncs() as syncs:
        X = _lu_metal.lu_solve_metal(LU, piv, Bd, left=left, adjoint=adjoint)
    assert syncs.calls == []
    assert torch.equal(Bd, before) and torch.equal(LU, LU_before)
    assert X.shape == B.shape and X.dtype == dtype and X.device.type == device
    ratio = _solve_residual_ratio(A, X.cpu(), B, left, adjoint)
    assert ratio < THRESH, ratio


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [300, 1100])
@pytest.mark.parametrize("adjoint", [False, True])
def test_trsv_staged_and_in_memory(n, adjoint, dtype):
    """trsv stages a column of at most kTriStageRows entries and its pivots in threadgroup
    memory, longer ones stay in device memory: getrs's two solves, interchanges before (A X = B)
    or after (A^H X = B) them, on a packed factor with random LAPACK-style pivots."""
    assert 300 <= int(metal_constant("linalg/triangular.h", "kTriStageRows")) < 1100
    g = torch.Generator().manual_seed(n)
    real = torch.float32
    L = torch.tril(torch.randn(n, n, generator=g, dtype=real), -1) / n
    U = torch.triu(torch.randn(n, n, generator=g, dtype=real), 1) / n + torch.eye(n) * 2
    LU = (L + U).to(dtype).unsqueeze(0)
    piv = (torch.arange(n) + torch.randint(0, 4, (n,), generator=g)).clamp(max=n - 1) + 1
    piv = piv.to(torch.int32).unsqueeze(0)
    B = torch.randn(1, n, 1, generator=g, dtype=real).to(dtype)
    emulator.reset_launch_counts()
    X = triangular_metal._solve_left(LU, piv, B.clone(), triangular_metal.LU_STEPS[adjoint],
                                     "t", kind="trsv")
    assert emulator.total_launches() == 2
    P, Lu, Uu = torch.lu_unpack(LU, piv)
    A = P @ Lu @ Uu
    assert solve_ratio(A.mH if adjoint else A, X, B, dtype=dtype) < THRESH


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 3, 3, 2), (2, 0, 0, 2), (2, 3, 3, 0)])
def test_solve_empty(shape, device):
    b, n, _, k = shape
    LU = torch.randn(b, n, n).to(device)
    piv = torch.ones(b, n, dtype=torch.int32).to(device)
    B = torch.randn(b, n, k).to(device)
    emulator.reset_launch_counts()
    X = _lu_metal.lu_solve_metal(LU, piv, B)
    assert X.shape == B.shape
    assert emulator.total_launches() == 0


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("n,k", [(70, 5), (200, 1)])  # trsm, trsv
def test_solve_launches_and_lane_order(n, k, adjoint, monkeypatch):
    counts, results = [], []
    for batch in (1, 7):
        A, B, LU, piv = _solve_case(n, k, torch.complex64, True, adjoint, "cpu", batch=(batch,))
        emulator.reset_launch_counts()
        results.append(_lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint))
        counts.append(emulator.total_launches())
    assert counts == [2, 2]
    monkeypatch.setattr(_metal, "LANE_ORDER", "reverse")
    assert torch.equal(_lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint), results[-1])


# ---------------------------------------------------------------- pivots -> permutation

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n", [(6, 6), (9, 4), (4, 9), (70, 70)])
def test_pivots_to_permutation(m, n, device):
    A = random_matrix(n, torch.float32, batch=(3,), seed=12, m=m)
    LU, piv, _ = _lu_metal.lu_factor_metal(A.to(device))
    perm = _lu_metal.pivots_to_permutation_metal(piv, m)
    assert perm.dtype == torch.int64 and perm.shape == (3, m)
    P, _, _ = unpack(LU, piv)
    eye = torch.eye(m, dtype=P.dtype)
    assert torch.equal(torch.stack([eye[:, p] for p in perm.cpu()]), P)  # P = eye[:, perm]


@pytest.mark.parametrize("m,k", [(300, 300), (2500, 2500), (600, 250)])
def test_pivots_to_permutation_staged(m, k, monkeypatch):
    """lu_pivots_to_perm_staged (one threadgroup a matrix, the permutation in threadgroup
    memory, the pivots staged kLuPermChunk at a time: 2500 takes three rounds) against the
    interchanges applied one by one, and against lu_pivots_to_perm."""
    g = torch.Generator().manual_seed(m + k)
    piv = torch.stack([(torch.arange(k) + torch.randint(0, m, (k,), generator=g)).clamp(max=m - 1)
                       for _ in range(2)]) + 1
    piv = piv.to(torch.int32)
    want = []
    for row in piv.tolist():
        p = list(range(m))
        for i, q in enumerate(row):
            p[i], p[q - 1] = p[q - 1], p[i]
        want.append(p)
    with count_launches() as launches:
        perm = _lu_metal.pivots_to_permutation_metal(piv, m)
    assert launches.names == ["lu_pivots_to_perm_staged_int32"]
    assert perm.tolist() == want
    monkeypatch.setattr(_lu_metal, "PERM_STAGE_MIN_ROWS", m + 1)
    assert torch.equal(_lu_metal.pivots_to_permutation_metal(piv, m), perm)


# ---------------------------------------------------------------- header mirrors

def test_host_constants_mirror_header():
    def const(name):
        return metal_constant("linalg/lu.h", name)

    assert int(const("kLuPanelWidth")) == _lu_metal.PANEL_WIDTH
    assert int(const("kLuOuterWidth")) == _lu_metal.OUTER_WIDTH
    assert _lu_metal.OUTER_MIN_COLS > _lu_metal.OUTER_WIDTH  # a block never spans every column
    assert int(const("kLuPanelMaxCols")) == _lu_metal.PANEL_MAX_COLS
    assert int(const("kLuRowsPerThread")) == _lu_metal.PANEL_ROWS_PER_THREAD
    assert int(const("kLuSmallRows")) == _lu_metal.SMALL_ROWS
    assert _lu_metal.PANEL_MAX_THREADS <= 1024 and _lu_metal.PANEL_MAX_THREADS % 32 == 0
    assert _lu_metal.TALL_PANEL_THREADS <= 1024 and _lu_metal.TALL_PANEL_THREADS % 32 == 0



# ---------------------------------------------------------------- blocked paths at small sizes

def test_triangular_constants_mirror_header():
    from mpslinalg.linalg import triangular_metal as tm

    assert int(metal_constant("linalg/triangular.h", "kTriBlock")) == tm.BLOCK
    assert int(metal_constant("linalg/triangular.h", "kTriDiagSimdgroups")) == tm.DIAG_COLUMNS
    assert int(metal_constant("linalg/triangular.h", "kTriMaxBlock")) == tm.DIAG_MAX_BLOCK
    assert tm.MAX_BLOCK % tm.BLOCK == 0 and tm.MAX_BLOCK <= tm.DIAG_MAX_BLOCK
    assert tm.BLOCK_STEPS >= 1
    # the inverse kind inverts its blocks by trsm_diag blocks (block_params' bounds)
    assert tm.INVERSE_TRTRI_BLOCK % tm.BLOCK == 0 and tm.INVERSE_TRTRI_BLOCK <= tm.DIAG_MAX_BLOCK
    # the rule takes the inverse kind nowhere (None), or where blocks of MAX_BLOCK rows can reach
    assert tm.INVERSE_MIN_BLOCK is None or tm.INVERSE_MIN_BLOCK <= tm.MAX_BLOCK


@pytest.mark.parametrize("n", [1, 31, 256, 512, 513, 1000, 1024, 1025, 2048, 4096, 8192, 10000])
def test_block_rows_rule(n):
    """The blocked solve's diagonal blocks: the smallest multiple of BLOCK giving at most
    BLOCK_STEPS blocks, capped at MAX_BLOCK (64 rows at 256, 128 at 512, 256 from 897 on)."""
    from mpslinalg.linalg import triangular_metal as tm

    bs = tm.block_rows(n)
    assert bs % tm.BLOCK == 0 and tm.BLOCK <= bs <= tm.MAX_BLOCK
    assert bs == tm.MAX_BLOCK or math.ceil(n / bs) <= tm.BLOCK_STEPS
    assert bs == tm.BLOCK or math.ceil(n / (bs - tm.BLOCK)) > tm.BLOCK_STEPS
    assert bs == {256: 64, 512: 128, 513: 160, 1024: 256, 2048: 256, 4096: 256}.get(n, bs)


def _force_block_rows(monkeypatch, bs: int) -> None:
    """The blocked solve at every order, with diagonal blocks of ``bs`` rows (never the
    inverted blocks, which the rule would take for few right-hand sides at 256 rows and more)."""
    from mpslinalg.linalg import triangular_metal

    monkeypatch.setattr(triangular_metal, "BLOCKED_MIN_N", 32)
    monkeypatch.setattr(triangular_metal, "block_rows", lambda n: bs)
    monkeypatch.setattr(triangular_metal, "INVERSE_MIN_BLOCK", 1 << 30)


def _force_inverse(monkeypatch, bs: int) -> None:
    """The solve by inverted diagonal blocks of ``bs`` rows at every order and count of
    right-hand sides (where no gate asks for the blocked solve)."""
    from mpslinalg.linalg import triangular_metal

    _force_block_rows(monkeypatch, bs)
    monkeypatch.setattr(triangular_metal, "INVERSE_MIN_BLOCK", 1)


def _inverse_launches(n: int, bs: int) -> int:
    """Launches of one step by inverted diagonal blocks (module docstring): inverse_lower of
    the blocks by diagonal blocks of min(bs, INVERSE_TRTRI_BLOCK) rows, then a product per
    block and an update per block but the last."""
    from mpslinalg.linalg import triangular_metal as tm

    inverse = 2 * math.ceil(bs / min(bs, tm.INVERSE_TRTRI_BLOCK)) - 1
    return inverse + 2 * math.ceil(n / bs) - 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k,bs,lower,unit,trans", [
    *((70, 5, 32, lower, unit, trans) for lower in (1, 0) for unit in (0, 1) for trans in (0, 1)),
    (80, 12, 64, 1, 1, 0), (80, 12, 64, 0, 0, 0), (80, 12, 64, 1, 0, 1), (80, 12, 64, 0, 1, 1)])
def test_inverse_triangular_solve(n, k, bs, lower, unit, trans, dtype, monkeypatch):
    """The solve by inverted diagonal blocks (kind "inverse": gemm_narrow for 5 right-hand
    sides, the tile kernel for 12; short last blocks) on every triangle / diagonal / adjoint
    flag, batched: against the blocked substitution and the float64 solve; launches
    `_inverse_launches` for a batch of 1 and of 2; M and the other triangle untouched."""
    from mpslinalg.linalg import triangular_metal

    _force_inverse(monkeypatch, bs)
    no_swaps = torch.zeros(1, dtype=torch.int32)
    counts = []
    for batch in (1, 2):
        M = random_matrix(n, dtype, batch=(batch,), seed=30 + n) + 4 * torch.eye(n, dtype=dtype)
        B = random_matrix(k, dtype, batch=(batch,), seed=31 + n, m=n)
        M_before = M.clone()
        emulator.reset_launch_counts()
        X = triangular_metal._solve_left(M, no_swaps, B.clone(), ((lower, unit, trans, 0),),
                                         "t", kind="inverse")
        counts.append(emulator.total_launches())
        assert torch.equal(M, M_before)
    assert counts == [_inverse_launches(n, bs)] * 2
    old = triangular_metal._solve_left(M, no_swaps, B.clone(), ((lower, unit, trans, 0),), "t",
                                       kind="blocked")
    # the stored triangle: M's lower one for a lower solve, its upper one for an upper one,
    # the other way round when solving with its conjugate transpose
    T = wide(M).tril(-1) if bool(lower) != bool(trans) else wide(M).triu(1)
    T = T + (torch.eye(n, dtype=T.dtype) if unit else torch.diag_embed(
        wide(M).diagonal(dim1=-2, dim2=-1)))
    ref = torch.linalg.solve_triangular(T.mH if trans else T, wide(B), upper=not lower)
    scale = ref.abs().max()
    assert (wide(X) - ref).abs().max() / scale < 1e-5
    assert (wide(X) - wide(old)).abs().max() / scale < 1e-5


def test_inverse_trtri_by_smaller_blocks(monkeypatch):
    """The inverse kind with its diagonal blocks inverted by smaller ones (INVERSE_TRTRI_BLOCK
    under bs: inverse_lower's blocked solve of several steps, skipping the known zero
    columns), complex, upper and conjugate-transposed: the float64 solve, the launches."""
    from mpslinalg.linalg import triangular_metal

    n, k, bs = 80, 12, 64
    _force_inverse(monkeypatch, bs)
    monkeypatch.setattr(triangular_metal, "INVERSE_TRTRI_BLOCK", 32)
    M = random_matrix(n, torch.complex64, batch=(2,), seed=40) + 4 * torch.eye(
        n, dtype=torch.complex64)
    B = random_matrix(k, torch.complex64, batch=(2,), seed=41, m=n)
    emulator.reset_launch_counts()
    X = triangular_metal.triangular_solve_metal(M, B, upper=True, adjoint=True)
    assert emulator.total_launches() == _inverse_launches(n, bs) == 3 + 3
    ref = torch.linalg.solve_triangular(wide(M).triu().mH, wide(B), upper=False)
    assert (wide(X) - ref).abs().max() / ref.abs().max() < 1e-5


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_inverse_lu_solve_keeps_interchanges_blocked(adjoint, dtype, monkeypatch):
    """lu_solve under the inverse kind: the step with row interchanges (L's with P^T B, L^H's
    with P X) stays the blocked solve, the other is by inverted blocks: the launches of one of
    each, for batches of 1 and 4, and LAPACK's residual ratio."""
    n, k, bs = 70, 3, 32
    _force_inverse(monkeypatch, bs)
    counts = []
    for batch in (1, 4):
        A, B, LU, piv = _solve_case(n, k, dtype, True, adjoint, "cpu", batch=(batch,))
        emulator.reset_launch_counts()
        X = _lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint)
        counts.append(emulator.total_launches())
        assert _solve_residual_ratio(A, X, B, True, adjoint) < THRESH
    assert counts == [2 * math.ceil(n / bs) - 1 + _inverse_launches(n, bs)] * 2


def test_inverse_rule(monkeypatch):
    """`use_inverse`: nowhere as measured (INVERSE_MIN_BLOCK None); with INVERSE_MIN_BLOCK set,
    diagonal blocks of that many rows whatever the right-hand sides (256: 4096^2 yes, 512^2
    no, its blocks being 128 rows); a gated solve never takes it."""
    from mpslinalg.linalg import triangular_metal as tm

    assert tm.INVERSE_MIN_BLOCK is None
    assert not any(tm.use_inverse(n, k) for n in (256, 4096, 16384) for k in (1, 64))
    monkeypatch.setattr(tm, "INVERSE_MIN_BLOCK", 256)
    assert tm.use_inverse(4096, 1) and tm.use_inverse(4096, 64) and tm.use_inverse(8192, 1000)
    assert tm.block_rows(512) < 256
    assert not tm.use_inverse(512, 1) and not tm.use_inverse(512, 64)
    assert tm.substitution_kind(4096, 64) == "blocked" and tm.substitution_kind(100, 2) == "trsv"
    assert tm.substitution_kind(100, 2, gated=True) == "blocked"
    # the rule as _solve_left applies it (forced at small n): by launches
    _force_inverse(monkeypatch, 32)
    M = random_matrix(64, torch.float32, seed=5) + 4 * torch.eye(64)
    B = random_matrix(2, torch.float32, seed=6, m=64)
    pivots = torch.arange(1, 65, dtype=torch.int32)  # no interchange
    gate = (torch.zeros(1, dtype=torch.int32), 1)  # open
    for step, gated, launches in (((0, 0, 0, 0), False, _inverse_launches(64, 32)),
                                  ((0, 0, 0, 0), True, 3), ((1, 1, 0, 1), False, 3)):
        emulator.reset_launch_counts()
        tm._solve_left(M, pivots, B.clone(), (step,), "t", gate if gated else None)
        assert emulator.total_launches() == launches
    with pytest.raises(ValueError, match="internal error"):
        tm._solve_left(M, pivots, B.clone(), ((0, 0, 0, 0),), "t", gate, kind="inverse")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("n,k", [(70, 1), (100, 3)])
def test_blocked_solve_interchanges_by_permutation(n, k, adjoint, dtype, monkeypatch):
    """The blocked solve's interchanges as one gather by the pivots' permutation (forced at small
    n; the staged permutation kernel too): the bits of trsm_diag's interchanges, one launch more
    (the permutation's), and the gated solve keeps the interchanges in trsm_diag."""
    _force_block_rows(monkeypatch, 32)
    monkeypatch.setattr(_lu_metal, "PERM_STAGE_MIN_ROWS", 1)
    A, B, LU, piv = _solve_case(n, k, dtype, True, adjoint, "cpu")
    monkeypatch.setattr(triangular_metal, "PERM_MIN_N", 1 << 30)
    emulator.reset_launch_counts()
    ref = _lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint)
    in_kernel = emulator.total_launches()
    monkeypatch.setattr(triangular_metal, "PERM_MIN_N", 1)
    before = B.clone()
    with count_launches() as launches:
        X = _lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint)
    assert len(launches.names) == in_kernel + 1
    assert "lu_pivots_to_perm_staged_int32" in launches.names
    assert torch.equal(X, ref) and torch.equal(B, before)
    assert X.is_contiguous() and X.shape == B.shape
    gate = torch.zeros(2, dtype=torch.int32)
    steps = triangular_metal.LU_STEPS[adjoint]
    with count_launches() as launches:
        gated = triangular_metal._solve_left(LU, piv, B.clone(), steps, "t", (gate, 1),
                                             "blocked")
    assert "lu_pivots_to_perm_staged_int32" not in launches.names
    assert torch.equal(gated, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower,unit,trans", [(1, 1, 0), (0, 0, 0), (1, 0, 1), (0, 1, 1)])
@pytest.mark.parametrize("n,k,bs", [(70, 1, 32), (65, 40, 32), (70, 1, 64), (150, 5, 64),
                                    (129, 3, 128)])
def test_blocked_triangular_solve(n, k, bs, lower, unit, trans, dtype, monkeypatch):
    """trsm_diag + trsm_update (forced at small n), diagonal blocks of bs rows (bs / 32
    sub-blocks each, a short last block): every triangle / diagonal / adjoint flag against the
    float64 solve, with the interchanges of an LU applied before (lower) or after (upper) as
    getrs does; 2 ceil(n / bs) - 1 launches."""
    from mpslinalg.linalg import triangular_metal

    _force_block_rows(monkeypatch, bs)
    A = random_matrix(n, dtype, batch=(2,), seed=13)
    LU, piv, _ = _lu_metal.lu_factor_metal(A)
    B = random_matrix(k, dtype, batch=(2,), seed=14, m=n)
    swaps = (1 if lower else 2) if not trans else 0
    emulator.reset_launch_counts()
    X = triangular_metal._solve_left(LU, piv, B.clone(), ((lower, unit, trans, swaps),), "t")
    assert emulator.total_launches() == 2 * math.ceil(n / bs) - 1
    # The stored triangle: L for a lower solve, U for an upper one, the other way round when
    # the solve is with its conjugate transpose (U^H is lower, L^H upper).
    M = wide(LU).tril(-1) if bool(lower) != bool(trans) else wide(LU).triu(1)
    M = M + (torch.eye(n, dtype=M.dtype) if unit else torch.diag_embed(
        wide(LU).diagonal(dim1=-2, dim2=-1)))
    if trans:
        M = M.mH
    P = torch.lu_unpack(wide(LU), piv)[0]
    Bw = P.mT @ wide(B) if swaps == 1 else wide(B)
    ref = torch.linalg.solve_triangular(M, Bw, upper=not lower)
    if swaps == 2:
        ref = P @ ref
    err = (wide(X) - ref).abs().max() / ref.abs().max()
    assert err < 1e-4, float(err)


@pytest.mark.parametrize("bs", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower,trans", [(1, 0), (0, 0), (1, 1), (0, 1)])
def test_blocked_right_side_solve_in_place(lower, trans, dtype, bs):
    """trsm_diag + trsm_update with right = 1 (X M = B, a row of X per right-hand side, as
    Cholesky's panel is solved) on an X lying inside a larger buffer (x_offset, ldx > n),
    diagonal blocks of bs rows: the solve against the float64 one, the buffer around X
    untouched."""
    from mpslinalg._core import metal as _metal
    from mpslinalg.linalg import gemm_metal, triangular_metal

    n, k, pad_rows, pad_cols = 70, 5, 2, 3
    LU = random_matrix(n, dtype, batch=(2,), seed=17) + 8 * torch.eye(n, dtype=dtype)
    buf = random_matrix(n + pad_cols, dtype, batch=(2,), seed=18, m=k + pad_rows)
    before = buf.clone()
    ldx, x_offset = n + pad_cols, pad_rows * (n + pad_cols) + 1
    diag = _metal.kernel("linalg/triangular.metal", "trsm_diag", dtype, LU.device)
    update = _metal.kernel("linalg/triangular.metal", "trsm_update", dtype, LU.device)
    nblk = math.ceil(n / bs)
    forward = lower != 1  # x M = b is M^T x^T = b^T
    no_pivots = torch.zeros(1, dtype=torch.int32)
    for s in range(nblk):
        i0 = (s if forward else nblk - 1 - s) * bs
        params = triangular_metal.block_params(n, k, lower=lower, unit=0, trans=trans, swaps=0,
                                               i0=i0, bs=bs, right=1, ldx=ldx,
                                               x_offset=x_offset, x_batch=buf[0].numel())
        _metal.launch(diag, LU, no_pivots, buf, params, no_pivots,
                      **triangular_metal.diag_grid(k, 2))
        rest = n - min(n, i0 + bs) if forward else i0
        if rest > 0:
            _metal.launch(update, LU, buf, params, no_pivots, **gemm_metal.gemm_grid(k, rest, 2))
    M = wide(LU).tril() if bool(lower) != bool(trans) else wide(LU).triu()
    M = M.mH if trans else M
    inside = torch.zeros_like(buf, dtype=torch.bool)
    inside[:, pad_rows:, 1:1 + n] = True
    ref = torch.linalg.solve_triangular(M, wide(before)[:, pad_rows:, 1:1 + n],
                                        upper=not lower, left=False)
    err = (wide(buf)[:, pad_rows:, 1:1 + n] - ref).abs().max() / ref.abs().max()
    assert err < 1e-4, float(err)
    assert torch.equal(buf[~inside], before[~inside])


@pytest.mark.parametrize("bs", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("inverse", [False, True])
def test_blocked_solve_ratio(left, adjoint, dtype, bs, inverse, monkeypatch):
    """LAPACK's residual ratio of lu_solve by the blocked solve, and with inverted diagonal
    blocks for its step without interchanges (measured when added: 0.005-0.010 either way)."""
    (_force_inverse if inverse else _force_block_rows)(monkeypatch, bs)
    A, B, LU, piv = _solve_case(97, 3, dtype, left, adjoint, "cpu")
    X = _lu_metal.lu_solve_metal(LU, piv, B, left=left, adjoint=adjoint)
    assert _solve_residual_ratio(A, X, B, left, adjoint) < THRESH


def _hard_triangle(n: int, kind: str, dtype) -> torch.Tensor:
    """A lower triangle: "graded" (rows and columns scaled by 10^(-8 i / n): condition number
    ~1e16), "ill" (unit diagonal over +-1 entries: condition number growing exponentially
    with n, ~5e15 at n = 130) or "kahan" (Kahan's matrix, transposed: diagonal s^i, -c s^i
    beside it, s = sin 1.2, c = cos 1.2; ~1e21 at n = 130, the diagonal blocks' up to 3e5, and
    not an integer matrix, whose inverse would be exact)."""
    gen = torch.Generator().manual_seed(n)
    T = torch.randn(n, n, generator=gen, dtype=torch.float64).tril()
    if kind == "graded":
        d = 10.0 ** (-8.0 * torch.arange(n, dtype=torch.float64) / n)
        T = d[:, None] * (T + 4 * torch.eye(n, dtype=torch.float64)) * d[None, :]
    elif kind == "kahan":
        powers = math.sin(1.2) ** torch.arange(n, dtype=torch.float64)
        T = (torch.eye(n, dtype=torch.float64) - math.cos(1.2) * torch.ones(
            n, n, dtype=torch.float64).tril(-1)) * powers[None, :]
    else:
        T = torch.sign(T).tril(-1) + torch.eye(n, dtype=torch.float64)
    return T.to(dtype)


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("kind", ["graded", "ill", "kahan"])
@pytest.mark.parametrize("upper,left,adjoint", [(False, True, False), (True, True, True),
                                                (True, False, False), (False, False, True)])
def test_blocked_solve_hard_triangles(upper, left, adjoint, kind, inverse, monkeypatch):
    """Diagonal blocks of 64 and 128 rows keep substitution's componentwise backward error
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Thm 8.5: the computed x
    solves (T + dT) x = b with |dT| <= gamma_n |T|), measured as Oettli and Prager's
    max_i |T x - b|_i / (|T| |x| + |b|)_i in units of n u, on graded and ill-conditioned
    triangles. The inverted diagonal blocks (``inverse``) carry no such theorem (their bound
    grows with the blocks' condition numbers), but stay within it here (Kahan's matrix:
    0.45 n u at most, against 0.011 n u by substitution; measured when added)."""
    from mpslinalg.linalg import triangular_metal

    n, k = 130, 4
    T = _hard_triangle(n, kind, torch.float32)
    T = T.mT.contiguous() if upper else T
    B = random_matrix(k, torch.float32, seed=3, m=n)
    B = B if left else B.mT.contiguous()
    op = wide(T).mH if adjoint else wide(T)
    for bs in (32, 64, 128):
        (_force_inverse if inverse else _force_block_rows)(monkeypatch, bs)
        X = wide(triangular_metal.triangular_solve_metal(T, B, upper=upper, left=left,
                                                         adjoint=adjoint))
        if left:
            res, scale = op @ X - wide(B), op.abs() @ X.abs() + wide(B).abs()
        else:
            res, scale = X @ op - wide(B), X.abs() @ op.abs() + wide(B).abs()
        ratio = float((res.abs() / scale).max()) / (n * 2.0 ** -24)
        assert ratio < 1, (bs, ratio)


@pytest.mark.parametrize("upper,adjoint", [(False, False), (True, True)])
def test_blocked_solve_largest_block(upper, adjoint, monkeypatch):
    """trsm_diag at its largest diagonal block (kTriMaxBlock rows, every simdgroup's slots of
    solved values used) and a short last block, complex."""
    from mpslinalg.linalg import triangular_metal

    n, k, bs = triangular_metal.DIAG_MAX_BLOCK + 8, 6, triangular_metal.DIAG_MAX_BLOCK
    _force_block_rows(monkeypatch, bs)
    M = random_matrix(n, torch.complex64, batch=(2,), seed=21) + 8 * torch.eye(
        n, dtype=torch.complex64)
    B = random_matrix(k, torch.complex64, batch=(2,), seed=22, m=n)
    emulator.reset_launch_counts()
    X = triangular_metal.triangular_solve_metal(M, B, upper=upper, adjoint=adjoint)
    assert emulator.total_launches() == 3
    T = wide(M).triu() if upper else wide(M).tril()
    ref = torch.linalg.solve_triangular(T.mH if adjoint else T, wide(B), upper=upper != adjoint)
    err = (wide(X) - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, float(err)


@pytest.mark.parametrize("bs", [32, 64])
def test_blocked_solve_lane_order(bs, monkeypatch):
    """trsm_diag's staged tiles are shared by the group's simdgroups: the same bits whatever
    order the emulator runs the lanes in."""
    _force_block_rows(monkeypatch, bs)
    A = random_matrix(100, torch.complex64, batch=(2,), seed=19)
    LU, piv, _ = _lu_metal.lu_factor_metal(A)
    B = random_matrix(6, torch.complex64, batch=(2,), seed=20, m=100)
    results = []
    for order in (None, "reverse", "random"):
        monkeypatch.setattr(_metal, "LANE_ORDER", order)
        results.append(_lu_metal.lu_solve_metal(LU, piv, B, adjoint=True))
    assert torch.equal(results[1], results[0]) and torch.equal(results[2], results[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(100, 100), (130, 70)])
def test_tall_panel_kernel(m, n, dtype, monkeypatch):
    """lu_panel_tall (panels beyond lu_panel's registers; forced here): LAPACK's pivots."""
    monkeypatch.setattr(_lu_metal, "PANEL_MAX_ROWS", 48)
    monkeypatch.setattr(_lu_metal, "small_chunks", lambda m, n: 0)
    check_factor(random_matrix(n, dtype, seed=m, m=m), "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(33, 33), (64, 64), (100, 60), (20, 50), (100, 100), (70, 130)])
def test_panel_paths_without_lu_small(m, n, dtype, monkeypatch):
    """lu_panel over the whole matrix (n <= PANEL_MAX_COLS) and the blocked path at sizes
    lu_small takes otherwise: LAPACK's pivots."""
    monkeypatch.setattr(_lu_metal, "small_chunks", lambda m, n: 0)
    check_factor(random_matrix(n, dtype, batch=(2,), seed=m * n, m=m), "cpu")


@pytest.mark.parametrize("m,n,chunks", [(1, 1, 1), (16, 64, 1), (17, 64, 2), (300, 3, 32),
                                        (512, 2, 32), (513, 2, 0), (128, 128, 8), (129, 64, 16),
                                        (129, 128, 0), (257, 64, 0)])
def test_lu_small_geometry(m, n, chunks, monkeypatch):
    """lu_small's threads per column: a power of two covering the rows, within 1024 threads
    and one simdgroup per column."""
    monkeypatch.setattr(_lu_metal, "SMALL_MAX_COLS", 128)
    assert _lu_metal.small_chunks(m, n) == chunks


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(100, 100), (128, 128), (70, 90)])
def test_lu_small_wide(m, n, dtype, monkeypatch):
    """lu_small past SMALL_MAX_COLS (it holds up to 1024 threads' registers): LAPACK's
    pivots."""
    monkeypatch.setattr(_lu_metal, "SMALL_MAX_COLS", 128)
    assert _lu_metal.small_chunks(m, n)
    check_factor(random_matrix(n, dtype, seed=m + 2 * n, m=m), "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
def test_panel_leaves(dtype, monkeypatch):
    """Panels by leaves (forced at small sizes; a leaf width that does not divide the panel):
    LAPACK's pivots."""
    monkeypatch.setattr(_lu_metal, "small_chunks", lambda m, n: 0)
    monkeypatch.setattr(_lu_metal, "LEAF_MIN_ROWS", 40)
    monkeypatch.setattr(_lu_metal, "PANEL_LEAF", 12)
    check_factor(random_matrix(100, dtype, batch=(2,), seed=17, m=130), "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,width,leaves", [(200, 200, 64, False), (130, 100, 128, True),
                                              (90, 230, 96, False), (230, 90, 64, True)])
def test_outer_blocks(m, n, width, leaves, dtype, monkeypatch):
    """Outer blocks (forced at small sizes): panels inside each block, a block's U rows solved by
    tiles of 32 rows in lu_swap_trsm, leaves inside the panels too: LAPACK's pivots, a backward
    error within the bound, lane order irrelevant."""
    monkeypatch.setattr(_lu_metal, "small_chunks", lambda m, n: 0)
    monkeypatch.setattr(_lu_metal, "OUTER_MIN_COLS", 0)
    monkeypatch.setattr(_lu_metal, "OUTER_WIDTH", width)
    if leaves:
        monkeypatch.setattr(_lu_metal, "LEAF_MIN_ROWS", 40)
        monkeypatch.setattr(_lu_metal, "PANEL_LEAF", 12)
    A = random_matrix(n, dtype, batch=(2,), seed=m + n + width, m=m)
    check_factor(A, "cpu")
    ref = _lu_metal.lu_factor_metal(A)
    monkeypatch.setattr(_metal, "LANE_ORDER", "reverse")
    for r, o in zip(ref, _lu_metal.lu_factor_metal(A), strict=True):
        assert torch.equal(r, o)


def test_outer_block_launches(monkeypatch):
    """200 x 200 by blocks of 64: three blocks of two panels (panel, swap, update; panel, swap)
    plus the block's swap and update, 7 launches each, then the 8-column rest (a panel and a
    swap): 23, against 20 for panels alone (3 * 7 - 1)."""
    A = random_matrix(200, torch.float32, seed=3)
    emulator.reset_launch_counts()
    _lu_metal.lu_factor_metal(A)
    assert emulator.total_launches() == expected_launches(200, 200) == 20
    monkeypatch.setattr(_lu_metal, "OUTER_MIN_COLS", 0)
    monkeypatch.setattr(_lu_metal, "OUTER_WIDTH", 64)
    emulator.reset_launch_counts()
    _lu_metal.lu_factor_metal(A)
    assert emulator.total_launches() == 23


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper,unit,left,adjoint,blocked", [
    (True, False, True, False, False), (False, True, True, True, False),
    (True, True, False, True, False), (False, False, False, False, False),
    (True, False, True, False, True), (False, True, True, True, True),
    (True, True, False, False, True), (False, False, False, True, True)])
def test_triangular_solve_metal(blocked, left, adjoint, unit, upper, dtype, monkeypatch):
    """Every flag of triangular_solve_metal, on the small kernels and on the blocked path."""
    from mpslinalg.linalg import triangular_metal

    if blocked:
        monkeypatch.setattr(triangular_metal, "BLOCKED_MIN_N", 32)
    n, k = 40, 5
    M = random_matrix(n, dtype, seed=15) + 4 * torch.eye(n, dtype=dtype)
    B = random_matrix(k, dtype, batch=(2,), seed=16, m=n)
    if not left:
        B = B.mT.contiguous()
    X = triangular_metal.triangular_solve_metal(M, B, upper=upper, unit=unit, left=left,
                                                adjoint=adjoint)
    T = wide(M).triu() if upper else wide(M).tril()
    if unit:
        T = T - torch.diag_embed(T.diagonal()) + torch.eye(n, dtype=T.dtype)
    op = T.mH if adjoint else T
    ref = torch.linalg.solve(op, wide(B)) if left else torch.linalg.solve(op.mT, wide(B).mT).mT
    err = (wide(X) - ref).abs().max() / ref.abs().max()
    assert err < 1e-4, float(err)
