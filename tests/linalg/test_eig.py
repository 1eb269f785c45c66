"""eig and eigvals against SciPy (float64) and torch.linalg, on every backend: LAPACK's xGET22
residual and eigenvalue errors within eps * cond(eigenvalue) on random, graded, non-normal,
rotation (all complex pairs), companion, defective and extremely scaled matrices; exact conjugate
pairs for real input; non-finite input; non-convergence reporting; derivative rules against
torch's; the Metal kernels' paths, launch counts, lane orders and header mirrors."""

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
from mpslinalg.cases.eig import (
    companion,
    conjugate_pairs_exact,
    eig_ratios,
    eigenvalue_ratio,
    graded,
    non_normal,
    residual_ratio,
    rotations,
)
from mpslinalg.testing import THRESH, count_host_syncs, random_matrix, wide

from opdb import metal_constant

eig_module = importlib.import_module("mpslinalg.linalg.eig")
eig_metal_module = importlib.import_module("mpslinalg.linalg.eig_metal")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = (torch.float32, torch.complex64)


def dtypes(backend):
    extra = () if backend.is_metal else (torch.float64, torch.complex128)
    return DTYPES + extra


def complex_of(dtype):
    return torch.complex128 if dtype in (torch.float64, torch.complex128) else torch.complex64


def check_eig(A: torch.Tensor, L: torch.Tensor, V: torch.Tensor, exact_pairs: bool) -> dict:
    """Shapes, dtypes, unit-norm columns, (for the metal backend) exact conjugate pairs and
    the two ratios (< THRESH); returns the ratios."""
    n = A.shape[-1]
    assert L.shape == A.shape[:-1] and L.dtype == complex_of(A.dtype) and L.device == A.device
    assert V.shape == A.shape and V.dtype == complex_of(A.dtype) and V.device == A.device
    if n == 0 or A.numel() == 0:
        return {}
    norms = torch.linalg.vector_norm(wide(V), dim=-2)
    assert (norms - 1).abs().max() < 10 * n * torch.finfo(A.real.dtype).eps
    if exact_pairs:
        assert conjugate_pairs_exact(A, L, V)
    ratios = eig_ratios(A.cpu(), L.cpu(), V.cpu())
    assert all(r < THRESH for r in ratios.values()), ratios
    return ratios


def make(kind: str, n: int, dtype, batch: tuple, seed: int) -> torch.Tensor:
    if kind == "graded":
        return graded(n, dtype, batch, seed)
    if kind == "non-normal":
        return non_normal(n, dtype, batch, seed)
    if kind == "rotations":
        return rotations(n, dtype if not dtype.is_complex else torch.float64, batch,
                         seed).to(dtype)
    if kind == "repeated":  # eigenvalues -1, 2 (each about n / 2 times), diagonalisable
        wide_dtype = complex_of(dtype) if dtype.is_complex else torch.float64
        X = random_matrix(n, wide_dtype, batch, seed)
        D = torch.tensor([-1.0, 2.0], dtype=torch.float64).repeat(n)[:n].to(wide_dtype)
        return (X * D[..., None, :] @ torch.linalg.inv(X)).to(dtype)
    return random_matrix(n, dtype, batch, seed)


SIZES = (1, 2, 3, 4, 5, 8, 13, 20)
KINDS = ("random", "graded", "non-normal", "rotations", "repeated")


@FIXTURE_OK
@given(data=st.data())
def test_eig_ratios(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    n = data.draw(st.sampled_from(SIZES), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 2)]), label="batch")
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    A = backend.tensor(make(kind, n, dtype, batch, seed))
    L, V = mpslinalg.eig(A)
    check_eig(A, L, V, exact_pairs=backend.is_metal)
    W = mpslinalg.eigvals(A)
    if backend.is_metal:  # the same arithmetic on the active block, without T's rest and Z
        torch.testing.assert_close(W, L, rtol=0, atol=0)
    else:
        assert eigenvalue_ratio(A.cpu(), W.cpu()) < THRESH


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_extreme_scales_keep_relative_accuracy(backend, scale):
    """float32 entries near 1e-30 and 1e30: the same accuracy as at scale 1 (the exact
    power-of-two scaling)."""
    for dtype in DTYPES:
        for n in (3, 12):
            A1 = random_matrix(n, dtype, (2,), seed=n)
            A = backend.tensor(A1 * scale)
            L, V = mpslinalg.eig(A)
            assert torch.isfinite(L).all() and torch.isfinite(V).all()
            check_eig(A, L, V, exact_pairs=backend.is_metal)
            if backend.is_metal:  # scaling by a power of 2 is exact: the same bits, scaled
                L1, V1 = mpslinalg.eig(backend.tensor(A1))
                two = 2.0 ** round(math.log2(scale))
                if (A1 * two == A1 * scale).all():
                    torch.testing.assert_close(L, L1 * two, rtol=0, atol=0)
                    torch.testing.assert_close(V, V1, rtol=0, atol=0)


def test_balancing_gives_graded_accuracy(backend):
    """A = D B D^-1 with D = diag(1 .. 1e-6): entries over 1e12 apart, the eigenvalues of B.
    With the balancing, each eigenvalue is within 30 n eps ||B|| cond_B of B's (the accuracy of
    B itself), not merely of ||A|| ~ 1e6 ||B||."""
    from mpslinalg.cases.eig import matched, scipy_eigenvalues

    for dtype in DTYPES:
        n = 10
        B = random_matrix(n, complex_of(dtype) if dtype.is_complex else torch.float64, (2,), 7)
        d = torch.logspace(0, -6, n, dtype=torch.float64).to(B.dtype)
        A = (d[:, None] * B / d[None, :]).to(dtype)
        L = mpslinalg.eigvals(backend.tensor(A)).cpu()
        ref, cond = scipy_eigenvalues(B)
        for b in range(2):
            err = np.abs(matched(wide(L)[b].numpy(), ref[b]) - ref[b])
            bound = n * torch.finfo(torch.float32).eps * torch.linalg.matrix_norm(B[b]).item()
            assert (err / (bound * cond[b])).max() < THRESH


@pytest.mark.parametrize("n", [61, 72])  # eig_group's stage and eig_device's memory
def test_balancing_far_from_one(metal_backend, n):
    """A companion matrix with coefficients up to 1e29: scaled to entries below 1 and balanced,
    it came out near 1e-28, where the eigenvectors' 2 x 2 solves underflowed (0 / 0: NaN
    vectors); the kernels scale it back after the balancing. Finite vectors, LAPACK's
    residual ratio (the eigenvalues themselves are as ill-conditioned as the polynomial's
    roots)."""
    from mpslinalg.cases.eig import companion

    A = metal_backend.tensor(companion(np.linspace(0.5, 3.0, n)))
    L, V = mpslinalg.eig(A)
    assert torch.isfinite(L).all() and torch.isfinite(V).all()
    assert residual_ratio(A.cpu(), L.cpu(), V.cpu()) < THRESH


def test_known_spectra(backend):
    """Triangular (isolated by the balancing), companion (polynomial roots), diagonal with
    repeated values, zero, identity, all ones and cyclic permutations: eigenvalues as SciPy's
    within eps * cond, residuals below 30."""
    cases = [torch.triu(random_matrix(6, torch.float32, (), 1)),
             torch.tril(random_matrix(6, torch.complex64, (), 2)),
             companion(np.arange(1.0, 7.0)),
             torch.diag(torch.tensor([3.0, 1.0, 3.0, -2.0, 1.0])),
             torch.zeros(4, 4), torch.eye(5, dtype=torch.complex64), torch.ones(6, 6)]
    # cyclic permutations (roots of unity): the standard shifts stall on them, the exceptional
    # shifts of every 10 iterations without a deflation get them going
    cases += [torch.roll(torch.eye(n), 1, 0).to(dtype) for n in (3, 4, 8, 11)
              for dtype in DTYPES]
    for A in cases:
        Ab = backend.tensor(A)
        L, V = mpslinalg.eig(Ab)
        check_eig(Ab, L, V, exact_pairs=backend.is_metal)


def test_isolated_rows_and_columns(backend):
    """Rows and columns the balancing permutes away: the eigenvalues they isolate and the
    vectors through the permutation back."""
    for dtype in DTYPES:
        A = random_matrix(7, dtype, (2,), seed=3)
        A[:, 2, :] = 0
        A[:, 2, 2] = 5
        A[:, :, 5] = 0
        A[:, 5, 5] = -4
        Ab = backend.tensor(A)
        L, V = mpslinalg.eig(Ab)
        check_eig(Ab, L, V, exact_pairs=backend.is_metal)


def test_jordan_block(backend):
    """A Jordan block J = 2 I + N (defective): the eigenvalue 2 to within about eps^(1/n), and
    every computed eigenvector is (up to rounding) e_1, the only one there is, so V is singular:
    LAPACK's result too. The residual stays small."""
    for dtype in DTYPES:
        n = 5
        J = (2 * torch.eye(n) + torch.diag(torch.ones(n - 1), 1)).to(dtype)
        Jb = backend.tensor(J)
        L, V = mpslinalg.eig(Jb)
        assert residual_ratio(J, L.cpu(), V.cpu()) < THRESH
        assert (wide(L) - 2).abs().max() < 10 * torch.finfo(torch.float32).eps ** (1 / n)
        assert (wide(V)[0].abs() - 1).abs().max() < 1e-5  # every column ~ e_1


def test_conjugate_pairs_exact(metal_backend):
    """Real input: each complex pair is (lambda, conj(lambda)) exactly, positive imaginary part
    first, with exactly conjugate eigenvectors (one is computed, the other conjugated)."""
    for n in (2, 7, 16):
        A = metal_backend.tensor(rotations(n, torch.float32, (3,), seed=n))
        L, V = mpslinalg.eig(A)
        assert (L.imag != 0).sum() >= 2 * (n // 2) * 3 - 3
        assert conjugate_pairs_exact(A, L, V)
        assert conjugate_pairs_exact(A, mpslinalg.eigvals(A))


def test_eigenvectors_normalised_like_lapack(backend):
    """Unit 2-norm columns whose largest component is real (xGEEV's normalisation)."""
    for dtype in DTYPES:
        A = backend.tensor(random_matrix(9, dtype, (2,), seed=5))
        V = wide(mpslinalg.eig(A).eigenvectors)
        norms = torch.linalg.vector_norm(V, dim=-2)
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-6)
        largest = V.abs().argmax(dim=-2, keepdim=True)
        assert (V.gather(-2, largest).imag.abs() < 1e-6).all()


def test_nonfinite_gives_nan_only_there(metal_backend):
    """NaN or Inf in one batch element: NaN eigenvalues and vectors there (found before any
    iteration), the others bit for bit as without it; no error (info 0)."""
    cases = [(dtype, n, value) for dtype in DTYPES for n in (3, 9)
             for value in (math.nan, math.inf)]
    cases += [(torch.float32, 64, math.nan), (torch.complex64, 45, math.inf)]  # device memory
    for dtype, n, value in cases:
        A = random_matrix(n, dtype, (3,), seed=n)
        clean = eig_metal_module.eig_metal(metal_backend.tensor(A), vectors=True)
        bad = A.clone()
        bad[1, n // 2, n - 1] = value
        w, V, info = eig_metal_module.eig_metal(metal_backend.tensor(bad), vectors=True)
        assert info.cpu().tolist() == [0, 0, 0]
        assert w[1].isnan().all() and V[1].isnan().all()
        for b in (0, 2):
            assert torch.equal(w[b], clean[0][b]) and torch.equal(V[b], clean[1][b])
        if n == 3:
            L, _ = mpslinalg.eig(metal_backend.tensor(bad))  # no raise
            assert L[1].isnan().all() and torch.isfinite(L[0]).all()


def test_nonconvergence_raises_as_torch(metal_backend, monkeypatch):
    """info > 0 from the n > 4 kernel (a QR iteration out of its bound): eig and eigvals raise
    LinAlgError in torch's wording, naming the batch element; the eigenvalues are NaN there."""
    forward = eig_module.eig_op.forward["metal"]

    def failing(A, vectors):
        w, V, info = forward(A, vectors)
        info = info.clone()
        info[1] = 3
        return w, V, info

    monkeypatch.setitem(eig_module.eig_op.forward, "metal", failing)
    A = metal_backend.tensor(random_matrix(5, torch.float32, (2,), seed=1))
    for fn in (mpslinalg.eig, mpslinalg.eigvals):
        with pytest.raises(mpslinalg.LinAlgError,
                           match=r"mpslinalg\.eig\w*: \(Batch element 1\): The algorithm failed "
                                 r"to converge .* \(error code: 3\)"):
            fn(A)


def test_iteration_bound_matches_lapack():
    assert eig_metal_module.ITMAX_PER_ORDER == 30 and eig_metal_module.ITMAX_MIN_ORDER == 10


def test_empty(backend):
    for dtype in dtypes(backend):
        for shape in [(0, 0), (3, 0, 0), (0, 4, 4), (2, 0, 3, 3)]:
            A = backend.tensor(torch.zeros(shape, dtype=dtype))
            L, V = mpslinalg.eig(A)
            assert L.shape == shape[:-1] and V.shape == shape
            assert L.dtype == V.dtype == complex_of(dtype)
            assert mpslinalg.eigvals(A).shape == shape[:-1]


def test_paths():
    f32, c64 = torch.float32, torch.complex64
    assert eig_metal_module.group_max_n(f32, True) == 63
    assert eig_metal_module.group_max_n(c64, True) == 44
    assert eig_metal_module.group_max_n(f32, False) == 89
    assert eig_metal_module.group_max_n(c64, False) == 63
    assert eig_metal_module.path(63, f32, True) == "group"
    assert eig_metal_module.path(64, f32, True) == "device"
    assert eig_metal_module.path(45, c64, True) == "device"
    assert eig_metal_module.path(45, c64, False) == "group"
    # real eigvals leaves the stage with eig (its multishift sweeps: eig's bits)
    assert eig_metal_module.path(63, f32, False) == "group"
    assert eig_metal_module.path(64, f32, False) == "device"


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_memory_path(metal_backend, dtype):
    """Matrices larger than the threadgroup stage: the same kernel body in device memory."""
    n = eig_metal_module.group_max_n(dtype, True) + 1
    A = metal_backend.tensor(random_matrix(n, dtype, (), seed=30))
    L, V = mpslinalg.eig(A)
    check_eig(A, L, V, exact_pairs=True)


MULTISHIFT_N = 66  # above eig.h's kEigMultishiftMinOrder (60): a few multishift sweeps


@pytest.mark.parametrize("kind", [*KINDS, "cyclic"])
def test_multishift_sweeps(metal_backend, monkeypatch, kind):
    """eig_device's multishift sweeps on real input (active windows of at least 60 rows):
    LAPACK's accuracy on every kind of matrix, exact conjugate pairs, eigvals bit for bit eig's.
    The cyclic permutation (eigenvalues the roots of unity, the trailing block nilpotent: its
    eigenvalues, zero, are shifts that never converge) needs the exceptional shifts."""
    n = MULTISHIFT_N
    if kind == "cyclic":
        A0 = torch.roll(torch.eye(n), 1, 0)
    else:
        A0 = make(kind, n, torch.float32, (), seed=40)
    A = metal_backend.tensor(A0)
    assert eig_metal_module.path(n, torch.float32, True) == "device"
    L, V = mpslinalg.eig(A)
    check_eig(A, L, V, exact_pairs=True)
    W = mpslinalg.eigvals(A)
    assert torch.equal(W, L)
    if kind == "random":  # the sweeps ran: eig_group's double-shift sweeps give other bits
        monkeypatch.setattr(eig_metal_module, "path", lambda n, dtype, vectors: "group")
        W_group = eig_metal_module.eig_metal(A, vectors=False)[0]
        assert not torch.equal(W_group, W)
        assert eigenvalue_ratio(A.cpu(), W_group.cpu()) < THRESH


AED_N = 80  # several of eig.h's deflation windows (kEigAedWindow = 30 rows) and sweeps


@pytest.mark.parametrize("kind", ["random", "rotations"])
def test_aggressive_early_deflation(metal_backend, monkeypatch, kind):
    """The deflation windows before the multishift sweeps (xLAQR3: the window's Schur form,
    blocks reordered by xLAEXC swaps, 1 x 1 and 2 x 2 (rotations: complex pairs only), the rest
    reduced back to Hessenberg form): LAPACK's accuracy with them and without them, exact
    conjugate pairs, eigvals bit for bit eig's, and bits of their own (so they ran)."""
    A = metal_backend.tensor(make(kind, AED_N, torch.float32, (), seed=42))
    results = {}
    for aed in (True, False):
        monkeypatch.setattr(eig_metal_module, "AGGRESSIVE_EARLY_DEFLATION", aed)
        L, V = mpslinalg.eig(A)
        check_eig(A, L, V, exact_pairs=True)
        if aed:
            assert torch.equal(mpslinalg.eigvals(A), L)
        results[aed] = L
    assert not torch.equal(results[True], results[False])


def test_results_independent_of_threads(metal_backend, monkeypatch):
    """eig_device's bits do not depend on its threads per group (a pipeline's limit may cut
    them), the multishift sweeps included."""
    A = metal_backend.tensor(random_matrix(MULTISHIFT_N, torch.float32, (), seed=41))
    results = []
    for count in (64, 512):
        monkeypatch.setattr(eig_metal_module, "DEVICE_MIN_THREADS", count)
        results.append(eig_metal_module.eig_metal(A, vectors=True))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_device_path_matches_group_path(metal_backend, monkeypatch):
    """Both kernels run the same arithmetic in the same order: bit-identical results."""
    for dtype, n in [(torch.float32, 11), (torch.complex64, 11), (torch.float32, 12)]:
        A = metal_backend.tensor(random_matrix(n, dtype, (2,), seed=31))
        for vectors in (True, False):
            group = eig_metal_module.eig_metal(A, vectors=vectors)
            monkeypatch.setattr(eig_metal_module, "path", lambda n, dtype, vectors: "device")
            device = eig_metal_module.eig_metal(A, vectors=vectors)
            monkeypatch.undo()
            for a, b in zip(group, device, strict=True):
                assert torch.equal(a, b)


def test_launch_counts_independent_of_batch(metal_backend):
    if metal_backend.name != "emulator":
        pytest.skip("launches are counted by the emulator")
    for n, dtype, batches in [(3, torch.float32, (1, 500)), (9, torch.complex64, (1, 6))]:
        for batch in batches:
            A = metal_backend.tensor(random_matrix(n, dtype, (batch,), seed=n))
            for fn in (mpslinalg.eig, mpslinalg.eigvals):
                emulator.reset_launch_counts()
                fn(A)
                assert emulator.total_launches() == 1, (n, batch, emulator.launch_counts())
        A = metal_backend.tensor(random_matrix(n, dtype, (2,), seed=n)).mT
        emulator.reset_launch_counts()
        mpslinalg.eig(A)
        assert emulator.total_launches() == 2  # a non-contiguous input adds one gather


def test_lane_order_independent(metal_backend, monkeypatch):
    if metal_backend.name != "emulator":
        pytest.skip("lane orders are an emulator option")
    for dtype, n in [(torch.float32, 10), (torch.complex64, 10), (torch.float32, 64)]:
        A = random_matrix(n, dtype, (2,), seed=32)
        results = []
        for order in (None, "reverse", "random"):
            monkeypatch.setattr(_metal, "LANE_ORDER", order)
            results.append(eig_metal_module.eig_metal(A, vectors=True))
        for result in results[1:]:
            for a, b in zip(result, results[0], strict=True):
                assert torch.equal(a, b)


def test_host_syncs(metal_backend):
    """The checking forms read info once; nothing else reads the device."""
    A = metal_backend.tensor(random_matrix(5, torch.float32, (2,), seed=1))
    for fn in (mpslinalg.eig, mpslinalg.eigvals):
        with count_host_syncs() as syncs:
            fn(A)
        assert len(syncs.calls) == 1
    with count_host_syncs() as syncs:
        eig_metal_module.eig_metal(A, vectors=True)
    assert not syncs.calls


def test_metal_rejects_double(metal_backend):
    with pytest.raises(TypeError, match="mpslinalg.eig"):
        mpslinalg.eig(metal_backend.tensor(torch.eye(3, dtype=torch.float64)))


def test_low_precision_computes_in_float32(backend):
    """float16 / bfloat16 (which torch.linalg.eig refuses): computed in float32, complex64
    results."""
    A = random_matrix(4, torch.float32, (), seed=2)
    ref = mpslinalg.eigvals(backend.tensor(A.half().float()))
    got = mpslinalg.eigvals(backend.tensor(A.half()))
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got, ref)


# ---------------------------------------------------------------- derivatives


def _grad(fn, A, weight_seed=0):
    A = A.clone().requires_grad_()
    out = fn(A)
    outs = out if isinstance(out, tuple) else (out,)
    gen = torch.Generator().manual_seed(weight_seed)
    loss = 0
    for o in outs:
        w = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o)
        loss = loss + (o * w).real.sum()
    return torch.autograd.grad(loss, A)[0]


def _gauge_free(L, V):
    """V diag(L) V^H and V V^H: independent of the order and the phases of the pairs."""
    return (V * L[..., None, :]) @ V.mH, V @ V.mH


def _sorted_parts(L):
    return L.real.sort(-1).values, L.imag.sort(-1).values


def test_gradients_match_torch(backend):
    """Gauge-invariant losses (sorted eigenvalue parts, V diag(L) V^H, V V^H) against torch's
    autograd in float64 / complex128; on the torch backend through our op and our rule."""
    for dtype in DTYPES:
        wide_dtype = complex_of(dtype) if dtype.is_complex else torch.float64
        wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
        A = random_matrix(5, wide_dtype, (2,), seed=60)
        for ours, ref in [
            (lambda M: _sorted_parts(mpslinalg.eigvals(M)),
             lambda M: _sorted_parts(torch.linalg.eigvals(M))),
            (lambda M: _gauge_free(*mpslinalg.eig(M)), lambda M: _gauge_free(*torch.linalg.eig(M))),
        ]:
            ref_grad = _grad(ref, A)
            if backend.is_metal:
                got = _grad(ours, backend.tensor(A.to(dtype)))
                torch.testing.assert_close(wide(got), ref_grad, rtol=2e-3, atol=2e-3)
            else:
                torch.testing.assert_close(_grad(ours, A), ref_grad)


def test_backward_rule_matches_torch_in_complex128():
    """Our rule itself (the op called on the torch backend, so torch's forward and our
    backward) against torch's autograd of torch.linalg.eig, in complex128 and float64, for
    losses of L alone, of V alone and of both."""
    for dtype in (torch.complex128, torch.float64):
        A = random_matrix(6, dtype, (2,), seed=62)

        def ours(M):
            L, V, _ = eig_module.eig_op(M, True, "torch", False, "")
            return L, V

        for pick in (lambda L, V: (L,), lambda L, V: _gauge_free(L, V)[1:],
                     lambda L, V: _gauge_free(L, V)):
            got = _grad(lambda M, pick=pick: pick(*ours(M)), A)
            want = _grad(lambda M, pick=pick: pick(*torch.linalg.eig(M)), A)
            torch.testing.assert_close(got, want)


def test_phase_dependent_loss_raises(backend):
    """A loss that depends on the phase of the eigenvectors is ill-defined: torch's error."""
    A = backend.tensor(random_matrix(4, torch.float32, (), seed=61)).requires_grad_()
    V = mpslinalg.eig(A).eigenvectors
    with pytest.raises(RuntimeError, match="ill-defined"):
        V.imag.sum().backward()
    L, V = eig_module.eig_op(A.detach().double().requires_grad_(), True, "torch", False, "")[:2]
    with pytest.raises(RuntimeError, match="mpslinalg.eig: .*ill-defined"):
        V.imag.sum().backward()


# ---------------------------------------------------------------- header mirrors


def test_host_constants_mirror_header():
    def const(name):
        return metal_constant("linalg/eig.h", name)

    assert int(const("kEigStageBytes")) == eig_metal_module.STAGE_BYTES
    assert int(const("kEigMaxThreads")) == eig_metal_module.MAX_THREADS
    assert int(const("kEigItmaxPerOrder")) == eig_metal_module.ITMAX_PER_ORDER
    assert int(const("kEigItmaxMinOrder")) == eig_metal_module.ITMAX_MIN_ORDER
    assert int(const("kEigAedWindow")) == eig_metal_module.AED_WINDOW


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402,I001
    OpInfo, Sample, instantiate_generic_tests, square_bad_samples)


def _eig_samples(c: bool) -> list[Sample]:
    dtype = torch.complex128 if c else torch.float64
    return [
        Sample((random_matrix(5, dtype, (), 1),), desc="5x5"),
        Sample((random_matrix(6, dtype, (2,), 2),), desc="(2, 6, 6)"),
        Sample((random_matrix(3, dtype, (2, 3), 3),), desc="(2, 3, 3, 3)"),
        Sample((random_matrix(1, dtype, (2,), 4),), desc="1x1"),
        Sample((torch.zeros(0, 4, 4, dtype=dtype),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=dtype),), desc="0x0"),
    ]


def _eig_invariants(out) -> tuple[torch.Tensor, ...]:
    """What eig determines whatever the order of the eigenvalues and the phases of V's
    columns, for distinct eigenvalues: the sorted real and imaginary parts of L,
    V diag(L) V^H and V V^H."""
    L, V = out
    return (*_sorted_parts(L), *_gauge_free(L, V))


def _torch_eigvals(A: torch.Tensor) -> torch.Tensor:
    """torch.linalg.eigvals, with NaN for the matrices holding NaN or Inf, which would crash
    it (mpslinalg._core.torch_bugs): the reference of the generic tests."""
    finite = torch.isfinite(A).all(-1).all(-1)
    w = torch.linalg.eigvals(torch.where(finite[..., None, None], A, 0))
    return torch.where(finite[..., None], w, torch.full_like(w, complex(math.nan, math.nan)))


def test_torch_backend_eigvals_survives_nonfinite(backend):
    """torch's own CPU eigvals dies of a segmentation fault on NaN / Inf in float32, complex64
    and complex128 (and gives some finite values in float64): ours gives NaN for that matrix
    and the others' eigenvalues."""
    for dtype in dtypes(backend):
        A = random_matrix(5, dtype, (3,), seed=9)
        clean = mpslinalg.eigvals(backend.tensor(A))
        for value in (math.nan, math.inf):
            bad = A.clone()
            bad[1, 2, 3] = value
            got = mpslinalg.eigvals(backend.tensor(bad))
            assert got[1].isnan().all()
            torch.testing.assert_close(got[0::2], clean[0::2])


_UPCAST_SKIP = {"upcast": "the results are complex: float16 / bfloat16 input (which "
                          "torch.linalg.eig refuses) gives complex64, see "
                          "test_low_precision_computes_in_float32"}

OPS = [
    OpInfo("eig", mpslinalg.eig, torch.linalg.eig, _eig_samples,
           bad_samples=square_bad_samples, compare=_eig_invariants, device_reads=1, small_path=True,
           skips={"nonfinite": "torch.linalg.eig raises RuntimeError for non-finite input; "
                               "test_nonfinite_gives_nan_only_there checks ours",
                  **_UPCAST_SKIP}),
    OpInfo("eigvals", mpslinalg.eigvals, _torch_eigvals, _eig_samples,
           bad_samples=square_bad_samples, compare=_sorted_parts, device_reads=1,
           out_ref=torch.linalg.eigvals, skips=dict(_UPCAST_SKIP), small_path=True),
]
instantiate_generic_tests(globals(), OPS)


# ---------------------------------------------------------------- the deflation window's swaps

_SWAP_PROBE = """
[[kernel]] void swap_probe(device const float* tin [[buffer(0)]], device float* tout [[buffer(1)]],
                           device float* vout [[buffer(2)]], device int* moved [[buffer(3)]],
                           device const int* args [[buffer(4)]],
                           uint lane [[thread_index_in_simdgroup]]) {
  using namespace mpsl;
  threadgroup float t[64];
  threadgroup float v[64];
  const int m = args[0];
  for (int e = int(lane); e < m * m; e += kSimdWidth) {
    t[e] = tin[e];
    v[e] = e / m == e % m ? 1.0f : 0.0f;
  }
  eig_barrier(EigSimdSync());
  const bool ok = eig_swap_blocks(&t[0], &v[0], m, args[1], args[2], args[3], int(lane));
  eig_barrier(EigSimdSync());
  for (int e = int(lane); e < m * m; e += kSimdWidth) {
    tout[e] = t[e];
    vout[e] = v[e];
  }
  if (lane == 0) {
    moved[0] = ok ? 1 : 0;
  }
}
"""


def _quasi_triangular(sizes, seed):
    """An upper quasi-triangular matrix whose diagonal blocks have the orders ``sizes``, its
    2 x 2 blocks in xLANV2's standard form [[a, b], [c, a]] (b c < 0: a complex pair)."""
    gen = torch.Generator().manual_seed(seed)
    m = sum(sizes)
    T = torch.triu(torch.randn(m, m, generator=gen, dtype=torch.float64), 1)
    j = 0
    for k, size in enumerate(sizes):
        a = float(k + 1)  # well separated eigenvalues: every swap is accepted
        if size == 1:
            T[j, j] = a
        else:
            b, c = 0.5 + torch.rand(2, generator=gen, dtype=torch.float64).tolist()[0], -1.5
            T[j:j + 2, j:j + 2] = torch.tensor([[a, b], [c, a]], dtype=torch.float64)
        j += size
    return T.float()


def _block_eigenvalues(T, j, size):
    return np.sort_complex(np.linalg.eigvals(T[j:j + size, j:j + size].double().numpy()))


@pytest.mark.parametrize("n1,n2", [(1, 1), (1, 2), (2, 1), (2, 2)])
@pytest.mark.parametrize("before", [0, 1, 2])
def test_swap_blocks(n1, n2, before):
    """eig_swap_blocks (xLAEXC) on blocks of orders n1, n2 after `before` rows: V orthogonal,
    V^T T V the new T, the two blocks exchanged (their eigenvalues), T still quasi-triangular
    with standard 2 x 2 blocks, the rows and columns outside the two blocks' touched as
    LAPACK's."""
    lib = emulator.compile_shader(_metal.load_source("linalg/eig.h") + _SWAP_PROBE)
    sizes = [1] * before + [n1, n2, 1]
    m = sum(sizes)
    T0 = _quasi_triangular(sizes, seed=10 * n1 + n2 + before)
    T, V = torch.empty(m, m), torch.empty(m, m)
    moved = torch.zeros(1, dtype=torch.int32)
    args = torch.tensor([m, before, n1, n2], dtype=torch.int32)
    lib.swap_probe(T0, T, V, moved, args, threads=32, group_size=32)
    assert moved.item() == 1
    Td, Vd = T.double(), V.double()
    eps = torch.finfo(torch.float32).eps
    assert (Vd.T @ Vd - torch.eye(m, dtype=torch.float64)).abs().max() < 10 * eps
    assert (Vd.T @ T0.double() @ Vd - Td).abs().max() < 30 * eps * T0.abs().max()
    # the new order: the block of order n2 at `before`, then the one of order n1
    np.testing.assert_allclose(_block_eigenvalues(T, before, n2),
                               _block_eigenvalues(T0, before + n1, n2), rtol=1e-5)
    np.testing.assert_allclose(_block_eigenvalues(T, before + n2, n1),
                               _block_eigenvalues(T0, before, n1), rtol=1e-5)
    structure = torch.triu(torch.ones(m, m, dtype=torch.bool))
    j = 0
    for size in [1] * before + [n2, n1, 1]:
        structure[j:j + size, j:j + size] = True
        if size == 2:
            assert T[j, j] == T[j + 1, j + 1] and T[j, j + 1] * T[j + 1, j] < 0
        j += size
    assert (T[~structure] == 0).all()
