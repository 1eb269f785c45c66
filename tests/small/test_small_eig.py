"""The n <= 4 eigenproblem (mpslinalg/small/eig.py): eig and eigvals of real float32 matrices
through the generated SIMD CPU kernels. Accuracy against LAPACK in float64 (residual ratios
||A V - V diag(w)|| / (n ||A|| eps) < 30; eigenvalues against SciPy's within a small multiple of
eps cond(lambda), the condition numbers from SciPy's left and right vectors) on random,
symmetric, skew-symmetric, non-normal graded, repeated, nearly repeated, defective (Jordan) and
1e+-30-scaled matrices; complex pairs exactly conjugate; geev's normalisation; NaN / Inf
confined to its batch element; tails, threads and column-major input give the same bits; which
path serves which call."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from triton_interpreter import run_cases

from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import eig as seig
from mpslinalg.small import paths
from mpslinalg.testing import eps, noncontiguous, random_matrix

SIZES = (1, 2, 3, 4)
EPS = eps(torch.float32)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _kinds(n: int) -> dict[str, torch.Tensor]:
    """Batches of every kind of matrix the accuracy targets name (float64, cast by the caller)."""
    g = torch.Generator().manual_seed(n)
    X = torch.randn(64, n, n, generator=g, dtype=torch.float64)
    Q = torch.linalg.qr(torch.randn(16, n, n, generator=g, dtype=torch.float64))[0]
    d = torch.logspace(-3, 3, n, dtype=torch.float64)
    repeated = torch.tensor([1.0, 1.0, -2.0, -2.0][:n], dtype=torch.float64)
    near = torch.tensor([1.0, 1.0 + 1e-4, 2.0, 2.0 - 1e-4][:n], dtype=torch.float64)
    ints = torch.randint(-2, 3, (64, n, n), generator=g).double()
    # defective: J_n(0), J_n(0) with 1e-20 in the corner (eigenvalues 1e-20^(1/n) e^(2 pi i k / n),
    # J_n(0) to working accuracy), J_n(2), and J_n(2) in a random orthogonal basis
    jordan = torch.diag(torch.ones(n - 1, dtype=torch.float64), 1)
    corner = jordan.clone()
    corner[n - 1, 0] = 1e-20
    defective = torch.stack([jordan, corner, jordan + 2 * torch.eye(n, dtype=torch.float64),
                             *(Q[:4] @ (jordan + 2 * torch.eye(n, dtype=torch.float64))
                               @ Q[:4].mT)])
    # cyclic permutations: exceptional shifts (the standard shifts stall there)
    cyclic = torch.stack([torch.roll(torch.eye(n, dtype=torch.float64), s, 0)
                          for s in range(n)])
    return {
        "random": X,
        "symmetric": X + X.mT,
        "skew": X - X.mT,
        "graded": d[:, None] * X[:16] / d[None, :],  # non-normal, entries 1e-6 .. 1e6
        "upper": torch.triu(X[:16]),
        "repeated": (Q * repeated) @ Q.mT,
        "nearly repeated": (Q * near) @ torch.linalg.inv(Q),
        "integers": ints,
        "defective": defective,
        "cyclic": cyclic,
        "scaled up": X[:16] * 1e30,
        "scaled down": X[:16] * 1e-30,
    }


def _complex_kinds(n: int) -> dict[str, torch.Tensor]:
    """Complex batches (complex128, cast by the caller): random, Hermitian, graded, upper
    triangular, repeated (unitary basis), defective, real, 1e+-30-scaled."""
    g = torch.Generator().manual_seed(100 + n)
    X = torch.randn(64, n, n, generator=g, dtype=torch.complex128)
    Q = torch.linalg.qr(torch.randn(16, n, n, generator=g, dtype=torch.complex128))[0]
    d = torch.logspace(-3, 3, n, dtype=torch.float64)
    repeated = torch.tensor([1.0, 1.0, -2.0j, -2.0j][:n], dtype=torch.complex128)
    jordan = torch.diag(torch.ones(n - 1, dtype=torch.complex128), 1)
    eye = torch.eye(n, dtype=torch.complex128)
    return {
        "random": X,
        "hermitian": X + X.mH,
        "graded": d[:, None] * X[:16] / d[None, :],
        "upper": torch.triu(X[:16]),
        "repeated": (Q * repeated) @ Q.mH,
        "defective": torch.stack([jordan, jordan + (2 + 1j) * eye,
                                  *(Q[:4] @ (jordan + (2 + 1j) * eye) @ Q[:4].mH)]),
        "real": X.real.to(torch.complex128),
        "scaled up": X[:16] * 1e30,
        "scaled down": X[:16] * 1e-30,
    }


def _residual(A: torch.Tensor, w: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """||A V - V diag(w)||_1 / (n ||A||_1 eps) per matrix, in float64."""
    n = A.shape[-1]
    Ac, Vc, wc = A.to(torch.complex128), V.to(torch.complex128), w.to(torch.complex128)
    R = Ac @ Vc - Vc * wc[..., None, :]
    norm = torch.linalg.matrix_norm(Ac, 1).clamp_min(torch.finfo(torch.float64).tiny)
    return torch.linalg.matrix_norm(R, 1) / (n * norm * EPS)


def _match(w: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The permutation of ``ref`` nearest to ``w`` (greedy, n <= 4)."""
    left, out = list(range(len(ref))), []
    for x in w:
        k = min(left, key=lambda i: abs(ref[i] - x))
        left.remove(k)
        out.append(k)
    return np.array(out)


@pytest.mark.parametrize("n", SIZES)
def test_accuracy_against_lapack(native_eig, n):
    for kind, A64 in _kinds(n).items():
        A = A64.float()
        w, V = seig.small_eig(A, backend="torch")
        assert w.dtype == V.dtype == torch.complex64
        assert w.shape == A.shape[:-1] and V.shape == A.shape
        ratio = _residual(A.double(), w, V)
        assert ratio.max() < 30, (kind, ratio.max().item())
        # unit 2-norm columns
        torch.testing.assert_close(torch.linalg.vector_norm(V, dim=-2),
                                   torch.ones(w.shape), atol=4 * EPS, rtol=0)
        # eigenvalues within a small multiple of eps cond(lambda) ||A|| of SciPy's (float64)
        for a, got in zip(A.double().numpy(), w.numpy(), strict=True):
            ref, vl, vr = scipy.linalg.eig(a, left=True, right=True)
            cond = 1 / np.abs(np.sum(vl.conj() * vr, axis=0)).clip(1e-300)
            scale = np.abs(a).sum(0).max()
            err = np.abs(got - ref[_match(got, ref)])
            if kind in ("integers", "defective"):  # error ~ eps^(1/k), k the Jordan block's size
                assert (err <= 30 * EPS ** (1 / n) * scale + 1e-300).all(), (kind, a, got, ref)
                continue
            assert (err <= 30 * n * EPS * cond[_match(got, ref)] * scale + 1e-300).all(), (
                kind, a, got, ref)


@pytest.mark.parametrize("n", SIZES)
def test_complex_accuracy_against_lapack(n):
    """complex64 through the Metal kernels (the emulator runs them here)."""
    for kind, A128 in _complex_kinds(n).items():
        A = A128.to(torch.complex64)
        w, V = seig.small_eig(A, backend="metal")
        _exact(seig.small_eigvals(A, backend="metal"), w)
        assert w.dtype == V.dtype == torch.complex64
        ratio = _residual(A.to(torch.complex128), w, V)
        assert ratio.max() < 30, (kind, ratio.max().item())
        torch.testing.assert_close(torch.linalg.vector_norm(V, dim=-2),
                                   torch.ones(w.shape), atol=4 * EPS, rtol=0)
        # zgeev's normalisation: the first component of largest modulus real and >= 0
        i = torch.argmax(V.abs() ** 2, dim=-2, keepdim=True)
        top = V.gather(-2, i)
        assert (top.imag == 0).all() and (top.real >= 0).all()
        for a, got in zip(A.to(torch.complex128).numpy(), w.numpy(), strict=True):
            ref, vl, vr = scipy.linalg.eig(a, left=True, right=True)
            cond = 1 / np.abs(np.sum(vl.conj() * vr, axis=0)).clip(1e-300)
            scale = np.abs(a).sum(0).max()
            order = _match(got, ref)
            err = np.abs(got - ref[order])
            if kind == "defective":
                assert (err <= 30 * EPS ** (1 / n) * scale + 1e-300).all(), (kind, a, got, ref)
                continue
            assert (err <= 30 * n * EPS * cond[order] * scale + 1e-300).all(), (
                kind, a, got, ref)


@pytest.mark.parametrize("n", SIZES)
def test_complex_pairs_exactly_conjugate(native_eig, n):
    A = _kinds(n)["random"].float()
    w, V = seig.small_eig(A, backend="torch")
    for k in range(n):
        # a positive imaginary part: the next eigenvalue is its conjugate, bit for bit, and so
        # is its eigenvector
        top = w[:, k].imag > 0
        if not top.any():
            continue
        assert k + 1 < n
        _exact(w[top, k + 1], w[top, k].conj())
        _exact(V[top, :, k + 1], V[top, :, k].conj())
    # geev's normalisation: a complex vector's first component of largest modulus is real
    for b, k in zip(*torch.nonzero(w.imag != 0, as_tuple=True), strict=True):
        v = V[b, :, k]
        i = int(torch.argmax(v.abs() ** 2))
        assert v[i].imag == 0


@pytest.mark.parametrize("n", SIZES)
def test_vectors_agree_with_torch(native_eig, n):
    """For well-separated eigenvalues each vector is torch's up to a unit factor (a sign for
    real and complex ones: geev's rotation makes the largest component real). The order of the
    eigenvalues is the Schur form's, which may differ from torch's: LAPACK's QR converges to
    another order where its balancing or its shifts differ (a few percent of random 3 x 3)."""
    A = random_matrix(n, torch.float32, (64,), seed=5)
    w, V = seig.small_eig(A, backend="torch")
    tw, tV = torch.linalg.eig(A.double())
    for b in range(64):
        order = torch.from_numpy(_match(w[b].numpy(), tw[b].numpy()))
        torch.testing.assert_close(w[b].to(torch.complex128), tw[b, order], atol=1e-4,
                                   rtol=1e-4)
        overlap = (V[b].to(torch.complex128).conj() * tV[b][:, order]).sum(-2)
        unit = torch.ones(n, dtype=torch.float64)
        torch.testing.assert_close(overlap.abs(), unit, atol=1e-3, rtol=0)
        complex_ = w[b].imag != 0
        # complex vectors: geev's rotation (the largest component real), so torch's vector up
        # to a sign (that of the component before the rotation, which depends on the Schur
        # basis: LAPACK's balancing and shifts give another)
        torch.testing.assert_close(overlap[complex_].real.abs(), unit[complex_], atol=1e-3,
                                   rtol=0)


def test_jordan_blocks(native_eig):
    """A Jordan block J_n(2): every eigenvalue 2 (to eps^(1/n)), each column an eigenvector to
    working accuracy, all of them (nearly) parallel to e_1, as LAPACK's."""
    for n in SIZES:
        J = (2 * torch.eye(n) + torch.diag(torch.ones(n - 1), 1))[None]
        w, V = seig.small_eig(J, backend="torch")
        assert (w - 2).abs().max() <= 4 * EPS ** (1 / n)
        assert _residual(J.double(), w, V).max() < 30
        assert (V[0, 0].abs() > 1 - 1e-3).all()


def test_eigvals_same_bits_as_eig(native_eig):
    for n in SIZES:
        A = random_matrix(n, torch.float32, (37,), seed=n)
        _exact(seig.small_eigvals(A, backend="torch"), seig.small_eig(A, backend="torch")[0])


@pytest.mark.parametrize("dtype", (torch.float32, torch.complex64), ids=("float32", "complex64"))
def test_non_finite_confined(dtype, native_eig):
    """float32 on the torch backend's CPU kernels, complex64 on the Metal kernels."""
    backend = "metal" if dtype.is_complex else "torch"
    for n in SIZES:
        A = random_matrix(n, dtype, (6,), seed=n)
        w0, V0 = seig.small_eig(A, backend=backend)
        for b, bad in ((1, float("nan")), (3, float("inf")), (4, -float("inf"))):
            A[b, n - 1, 0] = bad
        w, V = seig.small_eig(A, backend=backend)
        for b in range(6):
            if b in (1, 3, 4):
                assert torch.isnan(w[b].real).all() and torch.isnan(V[b].real).all()
            else:
                _exact(w[b], w0[b])
                _exact(V[b], V0[b])


def test_tails_threads_layouts_same_bits(native_eig):
    for n in SIZES:
        A = random_matrix(n, torch.float32, (4099,), seed=n)
        w, V = sc.small_eig(A, True, threads=1)
        for threads in (2, 3):
            _exact(sc.small_eig(A, True, threads=threads)[1], V)
        _exact(sc.small_eig(A[:13], True)[0], w[:13])
        At = A.mT.contiguous().mT  # column-major: read in place
        _exact(sc.small_eig(At, True)[1], V)
        _exact(sc.small_eig(noncontiguous(A[:50]), True)[1], V[:50])
        if sc.EIG_LIBRARY.loaded is not None:
            base = sc._BASELINE
            try:
                sc._BASELINE = True
                _exact(sc.small_eig(A[:100], True)[1], V[:100])
            finally:
                sc._BASELINE = base


def test_input_not_modified(native_eig):
    A = random_matrix(3, torch.float32, (9,), seed=1)
    before = A.clone()
    seig.small_eig(A, backend="torch")
    _exact(A, before)


def test_paths():
    A = torch.zeros(64, 3, 3)
    ready = sc.EIG_LIBRARY.loaded is not None
    assert seig.use_small_eig(A, "torch") == ready
    assert seig.use_small_eigvals(A, "torch") == ready
    assert seig.may_use_small_eig(A) and seig.may_use_small_eigvals(A)
    assert not seig.may_use_small_eig(torch.zeros(3, 3))  # one matrix: torch's own
    assert not seig.may_use_small_eig(torch.zeros(64, 5, 5))
    assert not seig.may_use_small_eig(A.double())
    assert not seig.use_small_eig(A.double(), "torch")
    # complex64: the Metal kernels only (the torch backend runs torch's)
    assert not seig.use_small_eig(torch.zeros(64, 3, 3, dtype=torch.complex64), "torch")
    assert seig.use_small_eig(torch.zeros(64, 3, 3, dtype=torch.complex64), "metal")
    assert not seig.use_small_eig(torch.zeros(64, 3, 3, dtype=torch.complex128), "metal")
    crossover = paths.EIG_CPU_CROSSOVERS["eig"][3]
    assert seig.may_use_small_eig(torch.zeros(crossover, 3, 3))
    assert not seig.may_use_small_eig(torch.zeros(crossover - 1, 3, 3))
    # the fallback: torch's own results where no row serves
    w, V = seig.small_eig(A.double(), backend="torch")
    assert w.dtype == torch.complex128
    assert paths.choose("eig", A.double(), "torch") == paths.TORCH_LINALG


# ---------------------------------------------------------------- C++ vs the emulated Metal


def _hard_batch(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every kind of matrix of `_kinds` (`_complex_kinds`), and single NaN / Inf entries."""
    kinds = _complex_kinds(n) if dtype.is_complex else _kinds(n)
    A = torch.cat([A[:8] for A in kinds.values()]).to(dtype)
    special = random_matrix(n, dtype, (3,), seed=40 + n)
    special[0, 0, n - 1] = float("nan")
    special[1, n - 1, 0] = float("inf")
    special[2] = 0.0
    return torch.cat([A, special])


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", SIZES)
def test_bit_identical_to_emulator_kernel(n, baseline, monkeypatch, native_eig):
    """Both instruction-set variants, 1 and 3 threads, eig and eigvals."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _hard_batch(n)
    for compute_v in (False, True):
        want = seig._metal_eig(A, compute_v)
        for threads in (1, 3):
            got = sc.small_eig(A, compute_v, threads)
            _exact(got[0], want[0])
            if compute_v:
                _exact(got[1], want[1])


@pytest.mark.parametrize("batch", (1, 37))
def test_metal_single_launch_no_sync(metal_backend, batch):
    """One launch of the small kernel and no device read, for n = 1..4, eig and eigvals."""
    from mpslinalg.testing import count_host_syncs, count_launches

    for n, dtype in ((n, dtype) for n in SIZES for dtype in (torch.float32, torch.complex64)):
        A = metal_backend.tensor(random_matrix(n, dtype, (batch,), seed=131))
        for fn, vectors in ((seig.small_eig, 1), (seig.small_eigvals, 0)):
            fn(A, backend="metal")  # compile outside the counted region
            with count_host_syncs() as syncs, count_launches() as launches:
                fn(A, backend="metal")
            assert syncs.calls == []
            assert launches.names == [f"small_eig_{str(dtype)[6:]}_n{n}_vectors{vectors}"]


# ---------------------------------------------------------------- Triton (interpreter)

_SCRIPT = r"""
import sys
import torch
from mpslinalg.small import triton_kernels as st

cases = torch.load(sys.argv[1])
out = {}
for key, case in cases.items():
    st._LOAD = case["load"]
    out[key] = {v: st.small_eig(case["A"], v) for v in (False, True)}
torch.save(out, sys.argv[2])
"""


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory):
    cases = {f"n{n}-{load}": {"A": _hard_batch(n)[::2].contiguous(), "load": load}
             for n in SIZES for load in ("auto", "strided")}
    return run_cases(tmp_path_factory, "triton_eig", cases, _SCRIPT)


def test_triton_bit_identical_to_cpu_kernels(triton_runs, native_eig):
    cases, out = triton_runs
    assert set(out) == set(cases)
    for key, case in cases.items():
        for compute_v in (False, True):
            w, V = sc.small_eig(case["A"], compute_v)
            _exact(out[key][compute_v][0], w)
            if compute_v:
                _exact(out[key][compute_v][1], V)
