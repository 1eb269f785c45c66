"""The n <= 4 Cholesky family (mpslinalg/small/cholesky.py): cholesky_ex, solve_triangular and
cholesky_solve. The SIMD CPU kernels bit-identical to the Metal kernels compiled for the CPU by
the emulator (float32, every variant, tail lengths, both instruction-set variants, threads), the
Triton kernels under Triton's interpreter bit-identical to the CPU kernels; torch's info and
its partial factor after a non-positive minor; only the named triangle read; accuracy (LAPACK
ratios < 30 on random, graded, near-singular and 1e+-30-scaled SPD matrices, float32 and
complex64); the Metal kernels one launch and no host synchronisation; which path serves which
call."""

from __future__ import annotations

import math

import pytest
import torch
from triton_interpreter import run_cases

import mpslinalg
from mpslinalg.small import cholesky as sch
from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import paths
from mpslinalg.testing import (
    count_host_syncs,
    count_launches,
    eps,
    noncontiguous,
    norm1,
    random_matrix,
    solve_ratio,
    wide,
)

SIZES = (1, 2, 3, 4)
#: solve_triangular's variants: (left, upper, unitriangular).
VARIANTS = tuple((left, upper, unit) for left in (True, False) for upper in (False, True)
                 for unit in (False, True))


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _spd(n: int, dtype: torch.dtype, batch: int, seed: int) -> torch.Tensor:
    """X X^H / n + I / 10 (well conditioned, Hermitian to the bit)."""
    X = random_matrix(n, torch.complex128 if dtype.is_complex else torch.float64, (batch,), seed)
    A = X @ X.mH / n + 0.1 * torch.eye(n)
    return ((A + A.mH) / 2).to(dtype)


def _graded(n: int, dtype: torch.dtype, seed: int, spread: float = 1e6) -> torch.Tensor:
    """D S D with S well conditioned SPD and D = diag(spread^-1 .. spread): diagonal entries
    from spread^-2 to spread^2."""
    S = _spd(n, torch.complex128 if dtype.is_complex else torch.float64, 1, seed)[0]
    d = torch.logspace(-math.log10(spread), math.log10(spread), n, dtype=torch.float64)
    return (d[:, None] * S * d[None, :]).to(dtype)


def _near_singular(n: int, dtype: torch.dtype, cond: float, seed: int) -> torch.Tensor:
    """Q diag(s) Q^H, s spread from 1 to 1 / cond (xLATMS mode 3)."""
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    Q = torch.linalg.qr(random_matrix(n, wide_dtype, (), seed))[0]
    s = cond ** (-torch.arange(n, dtype=torch.float64) / max(n - 1, 1))
    A = (Q * s) @ Q.mH
    return ((A + A.mH) / 2).to(dtype)


def _positive_definite(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every kind of SPD matrix the accuracy targets name: random, graded (diagonal spread 1e4
    .. 1e12), near-singular (condition 1e3 .. 1e6); the random, near-singular and least graded
    ones also scaled by 1e30 and 1e-30 (the more graded ones scaled so would leave float32's
    normal range, where no unscaled potf2, LAPACK's included, promises anything)."""
    mats = [_spd(n, dtype, 8, seed=1), _graded(n, dtype, seed=2, spread=1e2)[None]]
    mats += [_near_singular(n, dtype, c, seed=10 + i)[None]
             for i, c in enumerate((1e3, 1e5, 1e6))]
    A = torch.cat(mats)
    graded = [_graded(n, dtype, seed=3 + i, spread=s)[None] for i, s in enumerate((1e4, 1e6))]
    return torch.cat([A, A * 1e30, A * 1e-30, *graded])


def _not_positive_definite(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A leading minor of every order not positive (a negative, a zero, a NaN pivot: L0 L0^H
    of an integer L0 with l_kk = 2, then a_kk lowered by 4 - value, so every order of the sums
    gives the pivot exactly), NaN and Inf entries in either triangle, zeros, the indefinite
    X X^H - 2 I."""
    mats = []
    for k in range(n):
        for value in (-1.0, 0.0, math.nan):
            gen = torch.Generator().manual_seed(20 + k)
            L0 = torch.randint(-3, 4, (n, n), generator=gen).tril(-1).to(torch.complex128)
            if dtype.is_complex:
                L0 = L0 + 1j * torch.randint(-3, 4, (n, n), generator=gen).tril(-1)
            L0 = L0 + 2 * torch.eye(n)
            A = L0 @ L0.mH
            A[k, k] = A[k, k] - 4 + value
            mats.append((A if dtype.is_complex else A.real).to(dtype)[None])
        for entry in (math.nan, math.inf):
            A = _spd(n, dtype, 1, seed=30 + k)
            A[0, k, 0] = entry
            A[0, 0, k] = entry
            mats.append(A)
    mats.append(torch.zeros(1, n, n, dtype=dtype))
    X = random_matrix(n, dtype, (4,), seed=40)
    mats.append(X @ X.mH - 2.0 * torch.eye(n, dtype=dtype))
    return torch.cat(mats)


def _hard_batch(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Both kinds, 8k + 5 matrices (blocks with a tail)."""
    A = torch.cat([_positive_definite(n, dtype), _not_positive_definite(n, dtype)])
    extra = (-A.shape[0]) % 8 + 5
    return torch.cat([A, _spd(n, dtype, extra, seed=50)])


def _right_hand_sides(A: torch.Tensor, k: int, left: bool, seed: int) -> torch.Tensor:
    n = A.shape[-1]
    B = random_matrix(k, A.dtype, (A.shape[0],), seed, m=n)
    return B if left else B.mT.contiguous()


def _triangular(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Well-conditioned triangular-ish matrices (both triangles filled, the kernels read one),
    a zero and a NaN on the diagonal, an Inf off it; 8k + 3 of them."""
    A = random_matrix(n, dtype, (21,), seed=60) + 4 * torch.eye(n, dtype=dtype)
    A[1, n - 1, n - 1] = 0
    A[2, 0, 0] = math.nan
    A[3, n - 1, 0] = math.inf
    A[4, 0, n - 1] = math.inf
    return A


# ---------------------------------------------------------------- C++ vs the emulated Metal


DTYPES = pytest.mark.parametrize("dtype", (torch.float32, torch.complex64),
                                 ids=("float32", "complex64"))


@DTYPES
@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", SIZES)
def test_cholesky_bit_identical_to_emulator_kernel(n, baseline, dtype, monkeypatch,
                                                   native_chol):
    """Both instruction-set variants, 1, 2 and 3 threads, lower and upper."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _hard_batch(n, dtype)
    for upper in (False, True):
        want = sch._metal_cholesky_ex(A, upper)
        for threads in (1, 2, 3):
            L, info = sc.small_cholesky_ex(A, upper, threads)
            _exact(L, want[0])
            _exact(info, want[1])


@DTYPES
@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", SIZES)
def test_solves_bit_identical_to_emulator_kernel(n, baseline, dtype, monkeypatch, native_chol):
    """Every solve_triangular variant and cholesky_solve, 0..3 right-hand sides (complex:
    Smith's quotient with its branches and its Inf rule, lane by lane)."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _triangular(n, dtype)
    for k in (0, 1, 3):
        for left, upper, unit in VARIANTS:
            B = _right_hand_sides(A, k, left, seed=61)
            _exact(sc.small_solve_triangular(A, B, upper, left, unit, 2),
                   sch._metal_solve_triangular(A, B, upper, left, unit))
        for upper in (False, True):
            L = sch._metal_cholesky_ex(_spd(n, dtype, 21, seed=62), upper)[0]
            L[5] = A[5]  # a factor with a non-finite or zero diagonal too
            B = _right_hand_sides(A, k, True, seed=63)
            _exact(sc.small_cholesky_solve(B, L, upper, 2), sch._metal_cholesky_solve(B, L, upper))


@pytest.mark.parametrize("n", (2, 3))
def test_every_tail_length(n, native_chol):
    """Batches of 1..17 matrices: a partial block of every length, alone or after full ones."""
    A = _hard_batch(n)[-17:]
    T = _triangular(n)[:17]
    B = _right_hand_sides(T, 2, True, seed=71)
    for batch in range(1, 18):
        want = sch._metal_cholesky_ex(A[:batch], False)
        got = sc.small_cholesky_ex(A[:batch], False, 1)
        _exact(got[0], want[0])
        _exact(got[1], want[1])
        _exact(sc.small_solve_triangular(T[:batch], B[:batch], True, True, False, 1),
               sch._metal_solve_triangular(T[:batch], B[:batch], True, True, False))


# ---------------------------------------------------------------- torch's contract


@pytest.mark.parametrize("dtype", (torch.float32, torch.complex64))
@pytest.mark.parametrize("n", SIZES)
def test_info_and_partial_factor_are_torchs(n, dtype, native_chol):
    """info is torch.linalg.cholesky_ex's on the CPU (MKL's potrf) for every kind of input,
    and where a minor is not positive the factor holds potf2's partial result as torch's does:
    the same NaN pattern, the entries past the failing column the input's, the failing pivot
    the non-positive value (to rounding), lower and upper."""
    A = _hard_batch(n, dtype)
    for upper in (False, True):
        L, info = sch._metal_cholesky_ex(A, upper)
        want, want_info = torch.linalg.cholesky_ex(A, upper=upper)
        _exact(info, want_info)
        assert torch.equal(L.isnan(), want.isnan())
        scale = A.abs().flatten(-2).nan_to_num(0, 0, 0).amax(-1)[:, None, None].clamp_min(1e-37)
        # to rounding: the last pivot of a matrix of condition 1e6 has a relative error of
        # ~cond eps / its size, ~5e-5 of sqrt(max |a_ij|) (the accuracy test bounds the residual)
        torch.testing.assert_close(L / scale.sqrt(), want / scale.sqrt(), rtol=1e-4, atol=2e-4,
                                   equal_nan=True)
        # from the failing column on (its entries below the pivot, every later column, the
        # later diagonal), the factor holds the input's entries exactly
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        if upper:
            i, j = j, i
        for b in (info != 0).nonzero().flatten().tolist():
            col = int(info[b]) - 1
            keep = ((i > j) & (j >= col)) | ((i == j) & (j > col))
            _exact(L[b][keep], A[b][keep])
            _exact(want[b][keep], A[b][keep])


@pytest.mark.parametrize("n", SIZES)
def test_only_the_named_triangle_is_read(n, native_chol, metal_backend):
    """Garbage (NaN) in the other triangle changes nothing, on every target."""
    for dtype in (torch.float32, torch.complex64):
        A = _spd(n, dtype, 9, seed=81)
        for upper in (False, True):
            dirty = A.clone()
            mask = torch.tril(torch.ones(n, n, dtype=torch.bool), -1)
            dirty[:, mask.mT if not upper else mask] = math.nan
            want = sch.small_cholesky_ex(A, upper)
            got = sch.small_cholesky_ex(dirty, upper)
            _exact(got[0], want[0])
            B = _right_hand_sides(A, 2, True, seed=82)
            _exact(sch.small_solve_triangular(dirty, B, upper), sch.small_solve_triangular(
                torch.triu(A) if upper else torch.tril(A), B, upper))
            _exact(sch.small_cholesky_solve(B, dirty, upper), sch.small_cholesky_solve(
                B, torch.triu(A) if upper else torch.tril(A), upper))
            # the CPU kernels, whatever the backend in force
            for got, ref in zip(sc.small_cholesky_ex(dirty, upper),
                                sc.small_cholesky_ex(A, upper), strict=True):
                _exact(got, ref)


def _cholesky_ratio(A: torch.Tensor, L: torch.Tensor, upper: bool) -> torch.Tensor:
    """||L L^H - A|| / (n ||A|| eps) per matrix (U^H U for upper; xPOT01)."""
    n = A.shape[-1]
    Aw, Lw = wide(A), wide(L)
    rebuilt = Lw.mH @ Lw if upper else Lw @ Lw.mH
    return norm1(rebuilt - Aw) / (n * norm1(Aw) * eps(A.dtype))


@pytest.mark.parametrize("n", SIZES)
def test_accuracy(n, native_chol, metal_backend):
    """LAPACK's ratios < 30: the factor (xPOT01) of random, graded, near-singular (condition
    1e3 .. 1e6) SPD matrices at scales 1, 1e30 and 1e-30 (no scaling is needed: see
    `mpslinalg.small.codegen`'s Cholesky section), the triangular solves and the Cholesky
    solves (xGET02-style residual ratios), float32 and complex64 on the CPU and the Metal
    kernels; info 0 for all of them."""
    for dtype in (torch.float32, torch.complex64):
        A = _positive_definite(n, dtype)
        for run in (sch.small_cholesky_ex, lambda A, upper: sc.small_cholesky_ex(A, upper, 2)):
            for upper in (False, True):
                L, info = run(A, upper)
                assert not info.any()
                assert float(_cholesky_ratio(A, L, upper).max()) < 30, (dtype, upper)
                B = _right_hand_sides(A, 3, True, seed=91)
                X = sch.small_cholesky_solve(B, L, upper)
                assert solve_ratio(A, X, B) < 30
                for left in (True, False):
                    B = _right_hand_sides(A, 3, left, seed=92)
                    X = sch.small_solve_triangular(L, B, upper, left)
                    if left:
                        assert solve_ratio(L, X, B) < 30
                    else:
                        assert solve_ratio(L.mT, X.mT, B.mT) < 30


def test_near_singular_cond_1e7(native_chol):
    """Condition 1e7, float32's limit: where the factorisation succeeds its ratio is < 30, and
    info is torch's."""
    A = torch.stack([_near_singular(n, torch.float32, 1e7, seed=100 + n)
                     for n in (4, 4, 4)])[:, :4, :4]
    L, info = sc.small_cholesky_ex(A, False, 1)
    _exact(info, torch.linalg.cholesky_ex(A)[1])
    ok = info == 0
    if ok.any():
        assert float(_cholesky_ratio(A[ok], L[ok], False).max()) < 30


def test_layouts_broadcast_and_inputs_not_modified(native_chol):
    A = _spd(3, torch.float32, 18, seed=111).reshape(2, 9, 3, 3)
    A0 = A.clone()
    L, info = sc.small_cholesky_ex(A)
    assert torch.equal(A, A0) and L.shape == (2, 9, 3, 3) and info.shape == (2, 9)
    _exact(sc.small_cholesky_ex(noncontiguous(A))[0], L)
    # column-major batches (torch's factors) are read in place, with the same bits
    col = A.mT.contiguous().mT
    _exact(sc.small_cholesky_ex(col, True)[0], sc.small_cholesky_ex(A, True)[0])
    T = torch.linalg.cholesky(A)
    assert not T.is_contiguous() and T.mT.is_contiguous()
    R = random_matrix(2, torch.float32, (2, 9), seed=113, m=3)
    for left, upper, unit in VARIANTS:
        rhs = R if left else R.mT.contiguous()
        _exact(sc.small_solve_triangular(T, rhs, upper, left, unit),
               sc.small_solve_triangular(T.contiguous(), rhs, upper, left, unit))
    _exact(sc.small_cholesky_solve(R, T), sc.small_cholesky_solve(R, T.contiguous()))
    # complex: lazy conjugates are resolved (A.mH of a Hermitian matrix is A, as a view)
    C = _spd(3, torch.complex64, 5, seed=114)
    Cv = C.mH
    assert Cv.is_conj()
    _exact(sc.small_cholesky_ex(Cv)[0], sc.small_cholesky_ex(Cv.resolve_conj().contiguous())[0])
    Lc = sc.small_cholesky_ex(C)[0].mH  # a column-major conjugated view: trans and conj
    Rc = random_matrix(2, torch.complex64, (5,), seed=115, m=3)
    _exact(sc.small_solve_triangular(Lc, Rc, True), sc.small_solve_triangular(
        Lc.resolve_conj().contiguous(), Rc, True))
    _exact(sc.small_cholesky_ex(A[0, 0])[0], L[0, 0])  # no batch dimension
    for shape in ((0, 4, 4), (2, 0, 3, 3)):
        got, got_info = sc.small_cholesky_ex(torch.zeros(shape))
        assert got.shape == shape and got_info.shape == shape[:-2]
    # broadcast batch dimensions of solve_triangular / cholesky_solve
    B = random_matrix(2, torch.float32, (9,), seed=112, m=3)
    B0 = B.clone()
    with mpslinalg.use_backend("torch"):
        X = sch.small_solve_triangular(L, B, False)
        _exact(X, sch.small_solve_triangular(L, B.expand(2, 9, 3, 2).contiguous(), False))
        torch.testing.assert_close(X, torch.linalg.solve_triangular(L, B, upper=False))
        Y = sch.small_cholesky_solve(B, L[:1])
        torch.testing.assert_close(Y, torch.cholesky_solve(B, L[:1]), rtol=1e-4, atol=1e-5)
    assert torch.equal(B, B0)


# ---------------------------------------------------------------- which path serves


def test_torch_backend_paths(monkeypatch, native_chol):
    """float32 and complex64 CPU batches from the table's crossover take the SIMD kernels;
    smaller batches and float64 take torch's functions; more than MAX_RHS right-hand sides
    too."""
    table = paths.TABLES["cholesky"].row(paths.SIMD_CPU, "cpu")
    big = _spd(3, torch.float32, table.min_batch[3], seed=121)
    small = big[: table.min_batch[3] - 1]
    assert sch.use_small_cholesky(big, "torch") and sch.may_use_small_cholesky(big)
    assert not sch.use_small_cholesky(small, "torch")
    assert paths.choose("cholesky", big, "torch") == paths.SIMD_CPU
    with mpslinalg.use_backend("torch"):
        _exact(sch.small_cholesky_ex(big)[0], sc.small_cholesky_ex(big)[0])
        cbig = big.to(torch.complex64)
        assert paths.choose("cholesky", cbig, "torch") == paths.SIMD_CPU
        _exact(sch.small_cholesky_ex(cbig)[0], sc.small_cholesky_ex(cbig)[0])
        for other in (big.double(),):
            assert not sch.use_small_cholesky(other, "torch")
            _exact(sch.small_cholesky_ex(other)[0], torch.linalg.cholesky_ex(other)[0])
    rhs = sch.MAX_RHS
    crossover = paths.TABLES["solve_triangular"].row(paths.SIMD_CPU, "cpu").min_batch[3]
    L = big[:crossover] if crossover <= big.shape[0] else _spd(3, torch.float32, crossover, 1)
    assert sch.use_small_solve_triangular(L, torch.ones(crossover, 3, rhs), True, "torch")
    assert not sch.use_small_solve_triangular(L, torch.ones(crossover, 3, rhs + 1), True,
                                              "torch")
    assert not sch.use_small_solve_triangular(L, torch.ones(crossover, rhs + 1, 3), False,
                                              "torch")
    crossover = paths.TABLES["cholesky_solve"].row(paths.SIMD_CPU, "cpu").min_batch[3]
    L = _spd(3, torch.float32, crossover, seed=122)
    assert sch.use_small_cholesky_solve(torch.ones(crossover, 3, rhs), L, "torch")
    assert sch.may_use_small_cholesky_solve(torch.ones(crossover, 3, rhs), L, False)
    assert not sch.may_use_small_cholesky_solve(L[:1], L[:1])
    assert sch.may_use_small_solve_triangular(big, big, False)
    assert not sch.may_use_small_cholesky(big[:1])
    assert not sch.use_small_cholesky_solve(torch.ones(crossover, 3, rhs + 1), L, "torch")
    assert sch.use_small_cholesky(big, "metal") and sch.use_small_cholesky(big[:1], "metal")
    monkeypatch.setattr(sc.CHOL_LIBRARY, "loaded", None)  # not installed
    assert not sch.use_small_cholesky(big, "torch")


# ---------------------------------------------------------------- metal: launches and syncs


@pytest.mark.parametrize("batch", (1, 37))
def test_metal_single_launch_no_sync(metal_backend, batch):
    """One launch of the small kernel and no device read, for n = 1..4, every variant."""
    for dtype in (torch.float32, torch.complex64):
        name = str(dtype)[6:]
        for n in SIZES:
            A = metal_backend.tensor(_spd(n, dtype, batch, seed=131))
            B = metal_backend.tensor(random_matrix(2, dtype, (batch,), seed=132, m=n))
            Bt = B.mT.contiguous()
            calls = {
                f"small_cholesky_{name}_n{n}_upper1": (sch.small_cholesky_ex, (A, True)),
                f"small_cholesky_solve_{name}_n{n}_upper0": (sch.small_cholesky_solve, (B, A)),
                f"small_solve_triangular_{name}_n{n}_left0_upper1_unit1": (
                    sch.small_solve_triangular, (A, Bt, True, False, True))}
            for kernel, (fn, args) in calls.items():
                fn(*args)  # compile outside the counted region
                with count_host_syncs() as syncs, count_launches() as launches:
                    fn(*args)
                assert syncs.calls == []
                assert launches.names == [kernel]


# ---------------------------------------------------------------- Triton (interpreter)

_SCRIPT = r"""
import sys
import torch
from mpslinalg.small import triton_kernels as st

cases = torch.load(sys.argv[1])
out = {}
for key, case in cases.items():
    st._LOAD = case["load"]
    A, B, T = case["A"], case["B"], case["T"]
    res = {}
    for upper in (False, True):
        res[("chol", upper)] = st.small_cholesky_ex(A, upper)
        res[("chol_solve", upper)] = st.small_cholesky_solve(B, res[("chol", upper)][0], upper)
    for left, upper, unit in case["variants"]:
        rhs = B if left else B.mT.contiguous()
        res[("trsm", left, upper, unit)] = st.small_solve_triangular(T, rhs, upper, left, unit)
    out[key] = res
torch.save(out, sys.argv[2])
"""


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory):
    cases = {}
    for n in SIZES:
        A = _hard_batch(n)[::3].contiguous()
        T = _triangular(n)
        B = random_matrix(2, torch.float32, (A.shape[0],), seed=141, m=n)
        for load in ("auto", "tile", "strided"):
            cases[f"n{n}-{load}"] = {"A": A, "B": B, "T": T[: A.shape[0]].contiguous()
                                     if T.shape[0] >= A.shape[0] else
                                     T.repeat(math.ceil(A.shape[0] / T.shape[0]), 1, 1)[
                                         : A.shape[0]].contiguous(),
                                     "load": load, "variants": VARIANTS}
    return run_cases(tmp_path_factory, "triton_chol", cases, _SCRIPT)


def _potf2_cusolver(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """potf2 in float64 with the rules of cuSOLVER's potrf for non-finite pivots (torch's CUDA
    cholesky_ex): only a pivot <= 0 fails (a NaN one does not), an infinite pivot's column
    below it is t / inf; after a failure the input's entries stay, as the kernels leave them.
    The factor in the kernels' layout (L, or L^H with ``upper``) and info."""
    lower = (A.triu().mH if upper else A.tril()).to(torch.float64).clone()
    n = lower.shape[-1]
    info = torch.zeros(lower.shape[0], dtype=torch.int32)
    for b, L in enumerate(lower):
        for j in range(n):
            d = L[j, j].real - (L[j, :j].abs() ** 2).sum()
            if d <= 0:
                info[b] = j + 1
                L[j, j] = d
                break
            s = d.sqrt()
            L[j, j] = s
            for i in range(j + 1, n):
                L[i, j] = (L[i, j] - (L[i, :j] * L[j, :j].conj()).sum()) / s
    factor = lower.mH if upper else lower
    return factor.to(A.dtype), info


def test_triton_bit_identical_to_cpu_kernels(triton_runs, native_chol):
    """Bit-identical to the CPU kernels, except that cholesky_ex follows torch's CUDA function
    (cuSOLVER) where the triangle read holds NaN or Inf: there it is `_potf2_cusolver`'s, to
    rounding, with the same NaN pattern and info."""
    cases, out = triton_runs
    assert set(out) == set(cases)
    nonfinite_rows = 0
    for key, case in cases.items():
        A, B, T = case["A"], case["B"], case["T"]
        for upper in (False, True):
            L, info = sc.small_cholesky_ex(A, upper)
            got_L, got_info = out[key][("chol", upper)]
            read = A.triu() if upper else A.tril()
            odd = ~read.isfinite().flatten(-2).all(-1)
            nonfinite_rows += int(odd.sum())
            _exact(got_L[~odd], L[~odd])
            _exact(got_info[~odd], info[~odd])
            want_L, want_info = _potf2_cusolver(A[odd], upper)
            _exact(got_info[odd], want_info)
            torch.testing.assert_close(got_L[odd], want_L, rtol=1e-5, atol=1e-6, equal_nan=True)
            L = got_L
            _exact(out[key][("chol_solve", upper)], sc.small_cholesky_solve(B, L, upper))
        for left, upper, unit in VARIANTS:
            rhs = B if left else B.mT.contiguous()
            _exact(out[key][("trsm", left, upper, unit)],
                   sc.small_solve_triangular(T, rhs, upper, left, unit))
    assert nonfinite_rows, "the hard batches hold NaN and Inf"
