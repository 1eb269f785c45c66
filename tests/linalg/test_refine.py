"""Float64-class solve / inv on the metal backend (iterative refinement on float32 kernels,
mpslinalg.linalg.refine_metal) against LAPACK's dgesv, and the double-float self-test."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.linalg
import torch

import mpslinalg
from mpslinalg._core import metal as _metal
from mpslinalg._core.errors import UNREFINED_INFO
from mpslinalg.cases.refine import exact_solution as _exact
from mpslinalg.cases.refine import solve_errors as _errors
from mpslinalg.emulator import build as emulator_build
from mpslinalg.emulator import compile_shader as emulator_compile_shader
from mpslinalg.linalg import refine_metal, triangular_metal
from mpslinalg.testing import count_host_syncs, count_launches, matrix_with_spread

N = 24
REFINED32 = refine_metal.REFINED_DTYPES


def _home(backend, x: torch.Tensor) -> torch.Tensor:
    """Where float64 lives for ``backend``: the CPU for MPS (no float64 there)."""
    return x if backend.device.type == "mps" else x.to(backend.device)


def _rhs(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    B = torch.randn(shape, generator=gen, dtype=torch.float64)
    if dtype.is_complex:
        B = torch.complex(B, torch.randn(shape, generator=gen, dtype=torch.float64))
    return B


# ---------------------------------------------------------------- the double-float self-test

def test_double_float_selftest(metal_backend):
    rows = refine_metal.selftest(metal_backend.device)
    assert [r.name for r in rows] == list(refine_metal.SELFTEST_OUTPUTS)
    assert all(r.ok for r in rows), [r for r in rows if not r.ok]


def test_selftest_fails_under_fast_math(monkeypatch):
    """Built with -ffast-math (reassociation allowed), the compiler folds the error terms
    away and the self-test says so: it can fail."""
    monkeypatch.setattr(emulator_build, "_BASE_FLAGS",
                        [*emulator_build._BASE_FLAGS, "-ffast-math"])
    # (a source of its own: libraries are cached by source)
    lib = emulator_compile_shader(_metal.load_source("linalg/refine.metal") + "// -ffast-math\n")
    rows = refine_metal.selftest(torch.device("cpu"), kernel=lib.refine_selftest_float32)
    failed = {r.name for r in rows if not r.ok}
    assert {"two_sum", "fast_two_sum"} <= failed, rows


def test_header_constants_mirrored():
    src = (_metal.metal_root() / "linalg" / "refine.h").read_text()

    def value(name):
        return int(re.search(rf"constexpr int {name} = (\d+);", src).group(1))

    assert refine_metal.STATE_INTS == value("kRefineStateInts")
    assert refine_metal.ERR_FLOATS == value("kRefineErrFloats")
    assert (refine_metal.ITERATING, refine_metal.CONVERGED, refine_metal.FAILED,
            refine_metal.NONFINITE) == tuple(value(f"kRefine{s}") for s in
                                             ("Iterating", "Converged", "Failed", "Nonfinite"))


# ---------------------------------------------------------------- the kernels of a step

def _pieces(x: torch.Tensor) -> torch.Tensor:
    """float64 / complex128 x as three float32 / complex64 pieces summing to it exactly (no
    scaling, unlike refine_split: each remainder is exact in float64)."""
    out = []
    for _ in range(3):
        p = x.to(REFINED32[x.dtype])
        out.append(p)
        x = x - p.to(x.dtype)
    assert not x.any()
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("k", [1, 3, 40])
def test_residual_kernel(dtype, left, k):
    """refine_residual against the exact residual, rounded to float32, near a solution (the
    sum cancels to about 1e-7 of its terms): within an ulp of float32, for every lane split
    (k = 1: the 32 lanes along A's row; 3: four columns of eight slices; 40: a lane per
    column, a partial tile), n past one simdgroup's stride, both sides; a matrix whose status
    is not ITERATING keeps its R."""
    n = 70
    A = matrix_with_spread(n, 1e3, dtype, batch=(2,), seed=11)
    shape = (2, n, k) if left else (2, k, n)
    B = _rhs(shape, dtype, seed=12)
    X = torch.linalg.solve(A, B, left=left).to(REFINED32[dtype]).to(dtype)  # float32-accurate
    Ap, Bp, Xp = (_pieces(t) for t in (A, B, X))
    state = torch.tensor([[refine_metal.ITERATING, 0], [refine_metal.CONVERGED, 0]],
                         dtype=torch.int32)
    R = torch.full(shape, 7.0, dtype=REFINED32[dtype])
    refine_metal.residual(Ap, Bp, Xp, state, R, left=left, step=1)
    wide = np.clongdouble if dtype.is_complex else np.longdouble

    def exact(pieces):  # the pieces' sum in long double: the float64 exactly
        return sum(p.numpy().astype(wide) for p in pieces)

    An, Bn, Xn = exact(Ap), exact(Bp), exact(Xp)
    Rn = Bn - (An @ Xn if left else Xn @ An)
    got = R.numpy()[0].astype(wide)
    ref = Rn[0].astype(R.numpy().dtype).astype(wide)
    assert np.abs(ref).max() < 1e-5 * np.abs(Bn[0]).max()  # the sum did cancel
    assert (np.abs(got - ref) <= 2.0 ** -23 * np.abs(Rn[0])).all(), np.abs(got - ref).max()
    assert (R[1] == 7.0).all()
    # step 0 starts from X = 0: R is B rounded, whatever Xp holds
    refine_metal.residual(Ap, Bp, Xp, state, R, left=left, step=0)
    assert torch.equal(R[0], B[0].to(R.dtype))


@pytest.mark.parametrize("kind,bs", [("blocked", 32), ("blocked", 64), ("trsv", None)])
@pytest.mark.parametrize("left", [True, False])
def test_gated_correction_solve(left, kind, bs, monkeypatch):
    """The correction solve's kernels (the blocked trsm_diag + trsm_update whatever n, with
    diagonal blocks of bs rows, or trsv): a closed gate (a status word not ITERATING) leaves
    that batch element untouched on the device while the others are solved."""
    from mpslinalg.linalg import lu_metal

    if bs is not None:
        monkeypatch.setattr(triangular_metal, "block_rows", lambda n: bs)
    n, k = 70, 3
    A = matrix_with_spread(n, 10.0, torch.float32, batch=(2,), seed=3)
    LU, piv, _ = lu_metal.lu_factor_metal(A)
    B = torch.randn((2, n, k) if left else (2, k, n), generator=torch.Generator().manual_seed(4))
    state = torch.tensor([[refine_metal.FAILED, 0], [refine_metal.ITERATING, 0]],
                         dtype=torch.int32)
    with count_launches() as launches:
        X = triangular_metal.solve_packed(LU, piv, B, left=left, adjoint=False,
                                          steps=triangular_metal.LU_STEPS, fn="t",
                                          gate=(state, refine_metal.STATE_INTS), kind=kind)
    blocks = -(-n // triangular_metal.block_rows(n))
    if kind == "blocked":
        assert launches.names.count("trsm_diag_float32") == 2 * blocks
        assert launches.names.count("trsm_update_float32") == 2 * (blocks - 1)
    else:
        assert launches.names.count("trsv_float32") == 2
    assert torch.equal(X[0], B[0])
    ref = torch.linalg.solve(A[1].double(), B[1].double(), left=left)
    assert ((X[1].double() - ref).abs().max() / ref.abs().max()) < 1e-5


#: (left side, right side) kernel counted, per step: the inverse correction's products of one
#: column per right-hand side take gemm_narrow (left), the right side's rows the tile kernel.
CORRECTION_LAUNCHES = {"inverse": (("gemm_narrow_complex64", "gemm_complex64_tile32"), 2),
                       "blocked": (("trsm_diag_complex64",) * 2, 2),
                       "trsv": (("trsv_complex64",) * 2, 2)}


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("kind", sorted(CORRECTION_LAUNCHES))
def test_each_correction_within_10x_of_lapack(monkeypatch, kind, left):
    """The same accuracy with each kind of correction (refine_metal.CORRECTION), on both sides,
    A's batch broadcast against B's."""
    monkeypatch.setattr(refine_metal, "CORRECTION", kind)
    A = matrix_with_spread(N, 1e6, torch.complex128, batch=(2, 1), seed=6)
    B = _rhs((3, N, 2), torch.complex128, seed=1)
    if not left:
        B = B.mT.contiguous()
    with count_launches() as launches:
        res = refine_metal.solve_refined(A, B, left=left)
    names, per_step = CORRECTION_LAUNCHES[kind]
    assert launches.names.count(names[0 if left else 1]) == per_step * refine_metal.MAX_STEPS
    An = np.broadcast_to(A.numpy(), (2, 3, N, N))
    Bn = np.broadcast_to(B.numpy(), (2, 3, *B.shape[-2:]))
    if not left:  # X A = B is A^T X^T = B^T
        An, Bn = An.swapaxes(-1, -2), Bn.swapaxes(-1, -2)
    X = res.X.numpy() if left else res.X.numpy().swapaxes(-1, -2)
    for i in np.ndindex(*X.shape[:-2]):
        exact = _exact(An[i], Bn[i])
        fwd, berr = _errors(An[i], Bn[i], X[i], exact)
        fwd_lapack, berr_lapack = _errors(An[i], Bn[i], scipy.linalg.solve(An[i], Bn[i]), exact)
        assert fwd <= 10 * fwd_lapack and berr <= 10 * berr_lapack, (i, fwd, fwd_lapack, berr,
                                                                     berr_lapack)
    assert res.info.tolist() == [[0], [0]]


def test_correction_kind_rule(monkeypatch):
    """The inverse correction for few right-hand sides, the solves for many (inv)."""
    monkeypatch.setattr(refine_metal, "CORRECTION", None)
    n = 64
    assert refine_metal.correction_kind(n, n // refine_metal.INVERSE_RHS_RATIO) == "inverse"
    assert refine_metal.correction_kind(n, n // refine_metal.INVERSE_RHS_RATIO + 1) == "blocked"
    monkeypatch.setattr(refine_metal, "CORRECTION", "trsv")
    assert refine_metal.correction_kind(n, 1) == "trsv"


# ---------------------------------------------------------------- accuracy against LAPACK

@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6])
def test_within_10x_of_lapack(metal_backend, dtype, cond):
    A = matrix_with_spread(N, cond, dtype, batch=(2,), seed=int(np.log10(cond)))
    B = _rhs((2, N, 3), dtype, seed=1)
    X, info = mpslinalg.solve_ex(_home(metal_backend, A), _home(metal_backend, B))
    assert X.dtype == dtype and torch.equal(info.cpu(), torch.zeros(2, dtype=torch.int32))
    An, Bn = A.numpy(), B.numpy()
    exact = _exact(An, Bn)
    fwd, berr = _errors(An, Bn, X.cpu().numpy(), exact)
    fwd_lapack, berr_lapack = _errors(An, Bn, scipy.linalg.solve(An, Bn), exact)
    assert fwd <= 10 * fwd_lapack, (fwd, fwd_lapack)
    assert berr <= 10 * berr_lapack, (berr, berr_lapack)


def test_graded_matrix(metal_backend):
    """Rows and columns graded over 1e-4 .. 1e4 (cond ~1e8 of which the scaling is most):
    partial pivoting handles the grading, and so does the refinement."""
    A = matrix_with_spread(N, 10.0, torch.float64, seed=5)
    g = torch.logspace(-2, 2, N, dtype=torch.float64)
    A = g[:, None] * A * g.flip(0)[None, :]
    B = _rhs((N, 2), torch.float64, seed=2)
    X, info = mpslinalg.solve_ex(_home(metal_backend, A), _home(metal_backend, B))
    An, Bn = A.numpy(), B.numpy()
    exact = _exact(An, Bn)
    fwd, berr = _errors(An, Bn, X.cpu().numpy(), exact)
    fwd_lapack, berr_lapack = _errors(An, Bn, scipy.linalg.solve(An, Bn), exact)
    assert int(info) == 0
    assert fwd <= 10 * fwd_lapack and berr <= 10 * berr_lapack, (fwd, fwd_lapack, berr,
                                                                 berr_lapack)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("cond", [1e9, 1e12])
def test_too_ill_conditioned_is_reported(metal_backend, dtype, cond):
    A = matrix_with_spread(N, cond, dtype, batch=(3,), seed=7)
    A[1] = matrix_with_spread(N, 1e3, dtype, seed=8)  # one batch element well conditioned
    B = _rhs((3, N, 1), dtype)
    X, info = mpslinalg.solve_ex(_home(metal_backend, A), _home(metal_backend, B))
    assert info.tolist() == [UNREFINED_INFO, 0, UNREFINED_INFO]
    with pytest.raises(mpslinalg.LinAlgError, match=r"^mpslinalg.solve: \(Batch element 0\): "
                       "The iterative refinement did not reach float64 accuracy"):
        mpslinalg.solve(_home(metal_backend, A), _home(metal_backend, B))
    with pytest.raises(mpslinalg.LinAlgError, match="^mpslinalg.inv: .*refinement"):
        mpslinalg.inv(_home(metal_backend, A))


def test_steps_and_backward_error_reported():
    A = matrix_with_spread(N, 1e4, torch.float64, batch=(2,), seed=1)
    res = refine_metal.solve_refined(A, _rhs((2, N, 2), torch.float64))
    assert ((res.steps >= 2) & (res.steps < refine_metal.MAX_STEPS)).all(), res.steps
    assert (res.berr <= np.sqrt(N) * refine_metal.EPS64).all(), res.berr


@pytest.mark.parametrize("scale", [1e-30, 1e30, 1e-300, 1e300])
def test_extreme_scales(metal_backend, scale):
    """Power-of-two scaling per matrix: float64 values far outside float32's range."""
    A = matrix_with_spread(N, 1e3, torch.float64, seed=4)
    B = _rhs((N, 2), torch.float64)
    X0, _ = mpslinalg.solve_ex(_home(metal_backend, A), _home(metal_backend, B))
    for As, Bs, Xs in ((A * scale, B * scale, X0), (A, B * scale, X0 * scale)):
        X, info = mpslinalg.solve_ex(_home(metal_backend, As), _home(metal_backend, Bs))
        assert int(info) == 0 and X.isfinite().all()
        exact = _exact(As.numpy(), Bs.numpy())
        fwd, _ = _errors(As.numpy(), Bs.numpy(), X.cpu().numpy(), exact)
        fwd_lapack, _ = _errors(As.numpy(), Bs.numpy(),
                                scipy.linalg.solve(As.numpy(), Bs.numpy()), exact)
        assert fwd <= 10 * fwd_lapack, (fwd, fwd_lapack)
        torch.testing.assert_close(X.cpu(), Xs.cpu(), rtol=1e-12, atol=0)


# ---------------------------------------------------------------- the public contract

@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_batched_broadcast_and_right_side(metal_backend, dtype):
    A = matrix_with_spread(6, 1e3, dtype, batch=(2, 1), seed=2)
    B = _rhs((3, 6, 4), dtype, seed=3)
    X = mpslinalg.solve(_home(metal_backend, A), _home(metal_backend, B))
    ref = torch.linalg.solve(A, B)
    assert X.shape == (2, 3, 6, 4) and X.dtype == dtype
    torch.testing.assert_close(X.cpu(), ref, rtol=1e-12, atol=1e-12)
    Bt = _rhs((2, 1, 4, 6), dtype, seed=4)
    Xr = mpslinalg.solve(_home(metal_backend, A), _home(metal_backend, Bt), left=False)
    torch.testing.assert_close(Xr.cpu(), torch.linalg.solve(A, Bt, left=False),
                               rtol=1e-12, atol=1e-12)
    v = mpslinalg.solve(_home(metal_backend, A[0, 0]), _home(metal_backend, B[0, :, 0]))
    torch.testing.assert_close(v.cpu(), torch.linalg.solve(A[0, 0], B[0, :, 0]),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_inv(metal_backend, dtype):
    A = matrix_with_spread(10, 1e5, dtype, batch=(2,), seed=6)
    Ainv, info = mpslinalg.inv_ex(_home(metal_backend, A))
    assert Ainv.dtype == dtype and info.tolist() == [0, 0]
    ref = torch.from_numpy(np.stack([scipy.linalg.inv(a) for a in A.numpy()]))
    err = (Ainv.cpu() - ref).abs().amax((-2, -1)) / ref.abs().amax((-2, -1))
    assert (err <= 1e5 * 2.0 ** -52 * 10).all(), err
    eye = torch.eye(2, dtype=dtype)  # n <= 4 takes no float32 small path for float64
    assert torch.equal(mpslinalg.inv(_home(metal_backend, 2 * eye)).cpu(), eye / 2)


def test_singular_and_nonfinite(metal_backend):
    A = matrix_with_spread(5, 10.0, torch.float64, batch=(3,), seed=9)
    A[0, :, 2] = 0  # an exact zero pivot: the LU's info, as torch
    A[2, 1, 1] = float("nan")  # NaN in, NaN out, no failure reported (as LAPACK)
    B = _rhs((3, 5, 1), torch.float64)
    X, info = mpslinalg.solve_ex(_home(metal_backend, A), _home(metal_backend, B))
    # info as the float32 path's (its LU is the same kernels')
    assert info.tolist() == mpslinalg.solve_ex(A.float(), B.float()).info.tolist()
    assert info[0] == torch.linalg.solve_ex(A[0], B[0]).info > 0 and info[1] == 0
    assert X[2].isnan().any()
    torch.testing.assert_close(X[1].cpu(), torch.linalg.solve(A[1], B[1]), rtol=1e-12,
                               atol=1e-12)
    Ainf = A[1].clone()
    Ainf[0, 0] = float("inf")
    assert not mpslinalg.solve(_home(metal_backend, Ainf),
                               _home(metal_backend, B[1])).isfinite().all()


def test_no_host_sync_and_fixed_launches(metal_backend):
    A = _home(metal_backend, matrix_with_spread(8, 1e2, torch.float64, seed=1))
    B = _home(metal_backend, _rhs((8, 2), torch.float64))
    with count_host_syncs() as syncs, count_launches() as launches:
        mpslinalg.solve_ex(A, B)
    assert syncs.calls == []
    names = launches.names
    assert names.count("refine_split_float32") == 2
    assert names.count("refine_residual_float32") == refine_metal.MAX_STEPS
    assert names.count("refine_update_float32") == refine_metal.MAX_STEPS
    # the correction for 2 right-hand sides of order 8: L^-1 and U^-H once (trsm at n = 8),
    # then two products a step
    assert refine_metal.correction_kind(8, 2) == "inverse"
    assert names.count("trsm_float32") == 2 and names.count("lu_pivots_to_perm_int32") == 1
    assert names.count("gemm_narrow_float32") == 2 * refine_metal.MAX_STEPS
    assert not {"trsm_diag_float32", "trsv_float32"} & set(names)


def test_other_functions_name_the_refined_ones(metal_backend):
    A = _home(metal_backend, matrix_with_spread(5, 10.0, torch.float64, seed=1))
    with pytest.raises(TypeError, match=r"^mpslinalg.det: .*solve, solve_ex, inv, inv_ex, lstsq"):
        mpslinalg.det(A)
    with pytest.raises(TypeError, match=r"^mpslinalg.qr: .*solve, solve_ex, inv, inv_ex, lstsq"):
        mpslinalg.qr(A)


def test_float32_path_unchanged(metal_backend):
    A = metal_backend.tensor(matrix_with_spread(6, 10.0, torch.float32, seed=1))
    with count_launches() as launches:
        mpslinalg.solve(A, A[..., :1])
    assert not any(name.startswith("refine_") for name in launches.names)


def test_gradient_through_the_refined_solve(metal_backend):
    """The derivative rule solves the adjoint system through the op: refined as well."""
    A = matrix_with_spread(4, 10.0, torch.float64, seed=2).requires_grad_()
    B = _rhs((4, 2), torch.float64).requires_grad_()
    gA, gB = torch.autograd.grad(mpslinalg.solve(A, B).sum(), (A, B))
    rA, rB = torch.autograd.grad(torch.linalg.solve(A, B).sum(), (A, B))
    torch.testing.assert_close(gA, rA, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gB, rB, rtol=1e-10, atol=1e-12)


def test_check_case_fails_loudly(monkeypatch):
    """``python -m mpslinalg check``'s double-float case raises, naming the lost terms."""
    from mpslinalg._core.registry import CHECKS
    from mpslinalg.cases import load_all

    load_all()
    case = next(c for c in CHECKS if c.op == "double_float")
    with mpslinalg.use_backend("metal"):
        assert case.run(torch.device("cpu")) < case.bound
        lost = [refine_metal.SelftestRow("two_sum", 2.0 ** -30, 0.0, False)]
        monkeypatch.setattr(refine_metal, "selftest", lambda device: lost)
        with pytest.raises(AssertionError, match="two_sum failed .*fast math"):
            case.run(torch.device("cpu"))


# ---------------------------------------------------------------- lstsq (augmented system)

def _spread(m, n, cond, dtype, seed=0):
    """A random m x n matrix of rank min(m, n) with singular values from 1 down to 1/cond."""
    U = torch.linalg.qr(_rhs((m, m), dtype, seed))[0]
    V = torch.linalg.qr(_rhs((n, n), dtype, seed + 1))[0]
    k = min(m, n)
    S = torch.logspace(0, -np.log10(cond), k, dtype=torch.float64)
    return (U[:, :k] * S.to(dtype)) @ V[:, :k].mH


def _lstsq_exact(A: torch.Tensor, B: torch.Tensor) -> np.ndarray:
    """The least-squares (minimum-norm) solution through the augmented system, solved to
    beyond float64 (alpha = 1: exact in float64)."""
    m, n = A.shape
    s = m + n
    K = torch.zeros(s, s, dtype=A.dtype)
    rhs = torch.zeros(s, B.shape[-1], dtype=A.dtype)
    if m >= n:
        K[:m, :m] = torch.eye(m)
        K[:m, m:], K[m:, :m], rhs[:m] = A, A.mH, B
        return _exact(K.numpy(), rhs.numpy())[m:]
    K[:n, :n] = torch.eye(n)
    K[:n, n:], K[n:, :n], rhs[n:] = A.mH, A, B
    return _exact(K.numpy(), rhs.numpy())[:n]


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("shape", [(20, 8), (8, 20), (10, 10)])
@pytest.mark.parametrize("cond", [1e2, 1e4])
def test_lstsq_within_10x_of_lapack(metal_backend, dtype, shape, cond):
    A = _spread(*shape, cond, dtype, seed=3)
    B = _rhs((shape[0], 2), dtype, seed=5)
    X, residuals, rank, svals = mpslinalg.lstsq(_home(metal_backend, A), _home(metal_backend, B))
    ref = torch.linalg.lstsq(A, B, driver="gels")
    assert X.dtype == dtype and residuals.shape == ref.residuals.shape
    exact = _lstsq_exact(A, B)

    def fwd(x):
        return float(np.abs(x - exact).max() / np.abs(exact).max())

    assert fwd(X.cpu().numpy()) <= 10 * fwd(ref.solution.numpy()), (
        fwd(X.cpu().numpy()), fwd(ref.solution.numpy()))
    if residuals.numel():
        torch.testing.assert_close(residuals.cpu(), ref.residuals, rtol=1e-10, atol=1e-14)


def test_lstsq_failure_raises(metal_backend):
    A = _spread(12, 6, 10.0, torch.float64)
    A[:, 2] = 0  # rank-deficient: the augmented system is singular
    B = _rhs((12, 1), torch.float64)
    with pytest.raises(mpslinalg.LinAlgError, match="^mpslinalg.lstsq: "):
        mpslinalg.lstsq(_home(metal_backend, A), _home(metal_backend, B))
    with pytest.raises(mpslinalg.LinAlgError, match="did not reach float64 accuracy"):
        mpslinalg.lstsq(_home(metal_backend, _spread(12, 6, 1e9, torch.float64)),
                        _home(metal_backend, B))
    with pytest.raises(TypeError, match="driver 'gels' only"):
        mpslinalg.lstsq(_home(metal_backend, _spread(12, 6, 10.0, torch.float64)),
                        _home(metal_backend, B), driver="gelsd")
