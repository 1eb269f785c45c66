"""ldl_factor, ldl_factor_ex and ldl_solve: LAPACK's pivots (torch on the CPU calls sytrf /
hetrf itself), reconstruction and solve ratios in float64, info, non-finite input, broadcasting,
and the op database's generic tests, on every backend."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg._core import metal as _metal
from mpslinalg._core.platform import torch_at_least
from mpslinalg.linalg import ldl, ldl_metal
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    count_launches,
    ldl_ratio,
    random_matrix,
    solve_ratio,
    wide,
)

FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
_WIDE = {torch.float32: torch.float64, torch.complex64: torch.complex128}


def dtypes(backend) -> list[torch.dtype]:
    both = [torch.float32, torch.complex64]
    return both if backend.is_metal else both + [torch.float64, torch.complex128]


def symmetric(n: int, dtype=torch.float32, batch=(), seed=0, hermitian=False) -> torch.Tensor:
    """X + X^T (X + X^H when ``hermitian``) of a standard normal X: indefinite, with 1 x 1 and
    2 x 2 pivots alike."""
    X = random_matrix(n, dtype, batch, seed)
    return X + (X.mH if hermitian else X.mT)


def saddle_point(n: int, dtype=torch.float32, batch=(), seed=0, hermitian=False):
    """[[H, C^T], [C, 0]] (KKT-like, ^H when ``hermitian``), the zero block no larger than H (so
    nonsingular): it forces 2 x 2 pivots and interchanges."""
    m = (n + 1) // 2
    X = random_matrix(n, dtype, batch, seed)
    A = X + (X.mH if hermitian else X.mT)
    A[..., m:, m:] = 0
    return A


def zero_diagonal(n: int, dtype=torch.float32, batch=(), seed=0, hermitian=False):
    """A symmetric (Hermitian) matrix with a zero diagonal: every first pivot test fails."""
    A = symmetric(n, dtype, batch, seed, hermitian)
    return A - torch.diag_embed(torch.diagonal(A, dim1=-2, dim2=-1))


def solve_or_refusal(backend, LD, pivots, B, hermitian: bool) -> torch.Tensor | None:
    """mpslinalg.ldl_solve; None where the call is refused as torch refuses it on that device:
    torch's CUDA ldl_solve takes no complex hermitian=True factors, and neither does its drop-in
    (the torch backend on CUDA), which must then raise torch's error."""
    if backend.backend == "torch" and B.device.type == "cuda" and B.is_complex() and hermitian:
        with pytest.raises(RuntimeError, match=r"^mpslinalg.ldl_solve: .*not supported on CUDA"):
            mpslinalg.ldl_solve(LD, pivots, B, hermitian=hermitian)
        return None
    return mpslinalg.ldl_solve(LD, pivots, B, hermitian=hermitian)


def full_matrix(A: torch.Tensor, hermitian: bool) -> torch.Tensor:
    """The symmetric (Hermitian) matrix the factorisation sees: A's lower triangle mirrored."""
    lower = torch.tril(A, -1)
    diag = torch.diagonal(A, dim1=-2, dim2=-1)
    if hermitian and A.is_complex():
        return lower + lower.mH + torch.diag_embed(diag.real.to(A.dtype))
    return lower + lower.mT + torch.diag_embed(diag)


def test_constants_mirror_the_header():
    from opdb import metal_constant

    assert int(metal_constant("linalg/ldl.h", "kLdlStageBytes")) == ldl_metal.STAGE_BYTES
    alpha = float(metal_constant("linalg/ldl.h", "kLdlAlpha").rstrip("f"))
    assert alpha == ldl_metal.ALPHA
    assert math.isclose(alpha, (1 + math.sqrt(17)) / 8, rel_tol=1e-8)
    assert ldl_metal.group_max_n(torch.float32) == 89
    assert ldl_metal.group_max_n(torch.complex64) == 62


# ---------------------------------------------------------------- LAPACK's pivots


#: (n, kinds) across the threadgroup-staged kernel and the device-memory one (float32 from 90,
#: complex64 from 63).
PIVOT_CASES = [(1, 0), (2, 1), (3, 2), (7, 3), (16, 4), (33, 5), (64, 6), (90, 7)]
KINDS = {"random": symmetric, "saddle point": saddle_point, "zero diagonal": zero_diagonal}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", ["real", "complex symmetric", "hermitian"])
def test_pivots_and_factors_are_lapacks(backend, kind, variant):
    """Against torch on the CPU in the same dtype, which calls LAPACK's sytrf / hetrf: the same
    pivots and info, and factors equal to rounding."""
    dtype = torch.float32 if variant == "real" else torch.complex64
    hermitian = variant == "hermitian"
    pairs = 0
    for n, seed in PIVOT_CASES:
        if kind != "random" and n < 3:
            continue
        A = KINDS[kind](n, dtype, (2,), seed, hermitian)
        LD, pivots, info = mpslinalg.ldl_factor_ex(backend.tensor(A), hermitian=hermitian)
        rLD, rpivots, rinfo = torch.linalg.ldl_factor_ex(A, hermitian=hermitian)
        assert torch.equal(pivots.cpu(), rpivots), (n, pivots, rpivots)
        assert torch.equal(info.cpu(), rinfo)
        scale = rLD.abs().amax().item()
        assert (LD.cpu() - rLD).abs().amax().item() <= 1e-3 * max(scale, 1.0), n
        pairs += int((pivots < 0).sum())
    assert pairs > 0  # 2 x 2 blocks were met


def test_pivot_conventions():
    """The packed form of a 2 x 2 block and an interchange, by hand."""
    A = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    for mode in ("torch", "metal"):
        with mpslinalg.use_backend(mode):
            LD, pivots = mpslinalg.ldl_factor(A)
        assert pivots.tolist() == [-2, -2, 3]
        assert torch.equal(LD, torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 0, 3]]))
        B = torch.tensor([[1.0, 2.0, 1.0], [2.0, 0.0, 1.0]])
        with mpslinalg.use_backend(mode):
            LD, pivots = mpslinalg.ldl_factor(B @ B.mT - 3 * torch.eye(2))
        assert pivots.tolist() == [1, 2]


# ---------------------------------------------------------------- accuracy


@FIXTURE_OK
@given(data=st.data())
def test_reconstruction_and_solve_ratios(backend, data):
    dtype = data.draw(st.sampled_from(dtypes(backend)), label="dtype")
    hermitian = data.draw(st.booleans(), label="hermitian") and dtype.is_complex
    n = data.draw(st.sampled_from([1, 2, 5, 17, 40]), label="n")
    batch = data.draw(st.sampled_from([(), (3,), (2, 1)]), label="batch")
    kind = data.draw(st.sampled_from(list(KINDS)), label="kind")
    scale = data.draw(st.sampled_from([1.0, 1e30, 1e-30]), label="scale")
    seed = data.draw(st.integers(0, 999), label="seed")
    if dtype in (torch.float64, torch.complex128) and scale != 1.0:
        scale = scale ** 5  # near float64's range ends too
    A = KINDS[kind](n, dtype, batch, seed, hermitian) * scale
    A = backend.tensor(A)
    A0 = A.clone()
    LD, pivots, info = mpslinalg.ldl_factor_ex(A, hermitian=hermitian)
    assert torch.equal(A, A0)
    assert LD.shape == A.shape and LD.dtype == dtype and pivots.dtype == torch.int32
    assert pivots.shape == A.shape[:-1] and info.shape == batch
    assert torch.equal(torch.triu(LD, 1), torch.zeros_like(LD))
    if kind == "zero diagonal" and n == 1:  # [[0]]: D = 0, no solve
        # (cuSOLVER's sytrf, torch's on CUDA, reports it no info: the torch backend there)
        assert (info != 0).all() or (backend.backend == "torch" and A.is_cuda)
        return
    assert (info == 0).all()
    assert ldl_ratio(A, LD, pivots, hermitian) < THRESH
    B = backend.tensor(random_matrix(n, dtype, batch, seed + 1)[..., :3] * scale)
    X = solve_or_refusal(backend, LD, pivots, B, hermitian)
    if X is None:
        return
    assert X.shape == B.shape and X.dtype == dtype
    assert solve_ratio(full_matrix(A, hermitian), X, B) < THRESH


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_extreme_scales(backend, scale):
    """Entries near float32's range ends (1e+-30: products and reciprocals stay finite)."""
    for dtype, hermitian, n in ((torch.float32, False, 12), (torch.complex64, True, 12),
                                (torch.complex64, False, 70), (torch.float32, False, 95)):
        for kind in ("saddle point", "zero diagonal"):
            A = backend.tensor(KINDS[kind](n, dtype, (2,), n, hermitian) * scale)
            LD, pivots, info = mpslinalg.ldl_factor_ex(A, hermitian=hermitian)
            assert (info == 0).all() and torch.isfinite(LD).all()
            assert torch.equal(pivots.cpu(), torch.linalg.ldl_factor_ex(
                A.cpu() / scale, hermitian=hermitian).pivots)
            assert ldl_ratio(A, LD, pivots, hermitian) < THRESH
            B = backend.tensor(random_matrix(n, dtype, (2,), 1)[..., :2] * scale)
            X = solve_or_refusal(backend, LD, pivots, B, hermitian)
            assert X is None or solve_ratio(full_matrix(A, hermitian), X, B) < THRESH


def test_opcheck(backend):
    """The registered ops' schema, fake tensors and dispatch (no derivative to check)."""
    from mpslinalg.linalg import ldl

    for dtype, hermitian in ((torch.float32, False), (torch.complex64, True)):
        A = backend.tensor(symmetric(5, dtype, (2,), 17, hermitian))
        args = (hermitian, backend.backend, False, "")
        torch.library.opcheck(ldl.ldl_factor_ex_op.overload, (A, *args))
        LD, pivots, _ = ldl.ldl_factor_ex_op(A, *args)
        B = backend.tensor(random_matrix(5, dtype, (2,), 18)[..., :2])
        if solve_or_refusal(backend, LD, pivots, B, hermitian) is not None:
            torch.library.opcheck(ldl.ldl_solve_op.overload, (LD, pivots, B, *args))


def test_reads_only_the_lower_triangle(backend):
    """NaN above the diagonal and (Hermitian) an imaginary diagonal change nothing."""
    for dtype, hermitian in ((torch.float32, False), (torch.complex64, False),
                             (torch.complex64, True)):
        for n in (5, 70):
            A = backend.tensor(symmetric(n, dtype, (2,), 5, hermitian))
            clean = mpslinalg.ldl_factor_ex(A, hermitian=hermitian)
            dirty = A + torch.triu(torch.full_like(A, math.nan), 1)
            if hermitian:
                dirty = dirty + 3j * torch.eye(n, device=A.device)
            for a, b in zip(mpslinalg.ldl_factor_ex(dirty, hermitian=hermitian), clean,
                            strict=True):
                assert torch.equal(a, b)


# ---------------------------------------------------------------- info and non-finite input


def test_info_and_errors(backend):
    A = symmetric(6, torch.float32, (3,), seed=7)
    A[1, :, 2] = 0  # column (and row) 3 zero: D(3, 3) is exactly zero
    A[1, 2, :] = 0
    A[2] = 0
    A = backend.tensor(A)
    LD, pivots, info = mpslinalg.ldl_factor_ex(A)
    # torch on the same device on the torch backend (cuSOLVER's sytrf on CUDA reports the
    # all-zero matrix's zero pivot one entry later than LAPACK: info 2), LAPACK's (torch on the
    # CPU) for the Metal kernels
    reference = A if backend.backend == "torch" else A.cpu()
    rLD, rpivots, rinfo = torch.linalg.ldl_factor_ex(reference)
    first = int(rinfo[2])
    assert info.tolist() == rinfo.tolist() and info[0] == 0 and info[1] == 3
    assert first == 1 or (first == 2 and reference.is_cuda)
    assert torch.equal(pivots.cpu(), rpivots.cpu())
    assert torch.isfinite(LD).all()  # the factorisation completed
    assert ldl_ratio(A, LD, pivots) < THRESH
    with pytest.raises(mpslinalg.LinAlgError,
                       match=r"^mpslinalg.ldl_factor: \(Batch element 1\): D\[\d,\d\] is zero"):
        mpslinalg.ldl_factor(A)
    with pytest.raises(mpslinalg.LinAlgError,
                       match=rf"^mpslinalg.ldl_factor_ex: D\[{first},{first}\] is zero"):
        mpslinalg.ldl_factor_ex(A[2], check_errors=True)
    with pytest.raises(RuntimeError):  # torch: an internal assert for the same input
        torch.linalg.ldl_factor(A.cpu())


def test_nonfinite_stays_in_its_batch_element(backend):
    for dtype, hermitian in ((torch.float32, False), (torch.complex64, True)):
        for n in (6, 95):
            A = symmetric(n, dtype, (3,), seed=8, hermitian=hermitian)
            clean = mpslinalg.ldl_factor_ex(backend.tensor(A), hermitian=hermitian)
            for value in (math.nan, math.inf):
                bad = A.clone()
                bad[1, n // 2, n // 3] = value
                LD, pivots, info = mpslinalg.ldl_factor_ex(backend.tensor(bad),
                                                           hermitian=hermitian)
                assert not torch.isfinite(LD[1]).all()
                for i in (0, 2):
                    assert torch.equal(LD[i], clean.LD[i])
                    assert torch.equal(pivots[i], clean.pivots[i])
                B = backend.tensor(torch.ones(3, n, 1, dtype=dtype))
                X = solve_or_refusal(backend, LD, pivots, B, hermitian)
                if X is None:
                    continue
                assert torch.isfinite(X[[0, 2]]).all()
                # (an Inf may leave zero multipliers and a finite solution, in torch too)
                assert not torch.isfinite(X[1]).all() or value == math.inf
            nan = torch.full_like(A, math.nan)
            LD, pivots, info = mpslinalg.ldl_factor_ex(backend.tensor(nan), hermitian=hermitian)
            lower = torch.ones(n, n, dtype=torch.bool, device=LD.device).tril()
            assert torch.isnan(LD[..., lower]).all()
            assert ((pivots.abs() >= 1) & (pivots.abs() <= n)).all()


# ---------------------------------------------------------------- ldl_solve


def _ref_solve(LD, pivots, B, hermitian):
    """torch.linalg.ldl_solve per broadcast batch element (torch's own does not broadcast LD)."""
    batch = torch.broadcast_shapes(LD.shape[:-2], B.shape[:-2])
    LD = LD.expand(*batch, *LD.shape[-2:]).reshape(-1, *LD.shape[-2:])
    pivots = pivots.expand(*batch, pivots.shape[-1]).reshape(-1, pivots.shape[-1])
    B = B.expand(*batch, *B.shape[-2:]).reshape(-1, *B.shape[-2:])
    X = [torch.linalg.ldl_solve(ld, p, b, hermitian=hermitian)
         for ld, p, b in zip(LD, pivots, B, strict=True)]
    return torch.stack(X).reshape(*batch, *B.shape[-2:])


def test_solve_broadcasts(backend):
    for dtype, hermitian in ((torch.float32, False), (torch.complex64, True)):
        A = symmetric(5, dtype, (2, 1), seed=9, hermitian=hermitian)
        LD, pivots = mpslinalg.ldl_factor(backend.tensor(A), hermitian=hermitian)
        for B in (random_matrix(5, dtype, (3,), 10)[..., :2],  # LD (2, 1) with B (3)
                  random_matrix(5, dtype, (), 11)[..., :4]):  # B without a batch
            X = solve_or_refusal(backend, LD, pivots, backend.tensor(B), hermitian)
            if X is None:
                break
            ref = _ref_solve(wide(LD), pivots.cpu(), wide(B), hermitian)
            assert X.shape == ref.shape
            torch.testing.assert_close(wide(X), ref, rtol=1e-4, atol=1e-4)
        else:  # one factor for many right-hand sides' batches
            X = mpslinalg.ldl_solve(LD[:1, :1], pivots[:1, :1],
                                    backend.tensor(random_matrix(5, dtype, (4,), 12)),
                                    hermitian=hermitian)
            assert X.shape == (1, 4, 5, 5)


def test_solve_validates_pivots(backend):
    A = backend.tensor(symmetric(4, torch.float32, (2,), seed=13))
    LD, pivots = mpslinalg.ldl_factor(A)
    B = backend.tensor(torch.ones(2, 4, 1))
    for bad, match in ((pivots * 0, r"\|pivot\| >= 1"), (pivots + 10, r"\|pivot\| <= LD")):
        with pytest.raises(RuntimeError, match=rf"^mpslinalg.ldl_solve: Pivots .*{match}"):
            mpslinalg.ldl_solve(LD, bad, B)
    with pytest.raises(RuntimeError, match="^mpslinalg.ldl_solve: Expected pivots to be integ"):
        mpslinalg.ldl_solve(LD, pivots.float(), B)
    X = mpslinalg.ldl_solve(LD, pivots.long(), B)  # any integer dtype, as torch
    torch.testing.assert_close(X, mpslinalg.ldl_solve(LD, pivots, B))


def test_solve_validates_pivots_where_torch_does_not(monkeypatch):
    """On CUDA torch's ldl_solve takes bad pivots unchecked (cuSOLVER reads out of bounds and
    the process's CUDA context is lost): there the torch backend validates them first, with one
    device read. Shown here by naming the CPU among those devices."""
    monkeypatch.setattr(ldl.ldl_solve_decl, "check_inputs_on", ("cuda", "cpu"))
    A = symmetric(4, torch.float32, (2,), seed=13)
    with mpslinalg.use_backend("torch"):
        LD, pivots = mpslinalg.ldl_factor(A)
        B = torch.ones(2, 4, 1)
        with count_host_syncs() as syncs:
            X = mpslinalg.ldl_solve(LD, pivots, B)
        assert len(syncs.calls) == 1
        torch.testing.assert_close(X, torch.linalg.ldl_solve(LD, pivots, B))
        with pytest.raises(RuntimeError, match=r"^mpslinalg.ldl_solve: Pivots .*\|pivot\| >= 1"):
            mpslinalg.ldl_solve(LD, pivots * 0, B)
    monkeypatch.setattr(ldl.ldl_solve_decl, "check_inputs_on", ("cuda",))
    with mpslinalg.use_backend("torch"), count_host_syncs() as syncs:
        mpslinalg.ldl_solve(LD, pivots, B)
    assert syncs.calls == []


def test_cpu_pivots_checked_where_torch_does_not():
    """torch before 2.13 passes bad pivots to LAPACK on the CPU (a heap corruption that aborts
    the process): the drop-in checks them there itself."""
    assert ("cpu" in ldl.UNCHECKED_PIVOTS_ON) == (not torch_at_least(2, 13))
    assert "cuda" in ldl.UNCHECKED_PIVOTS_ON


# ---------------------------------------------------------------- the metal path


def test_launches_and_host_reads(metal_backend):
    for n in (8, 100):
        A = metal_backend.tensor(symmetric(n, torch.float32, (3,), seed=14))
        with count_launches() as launches, count_host_syncs() as syncs:
            LD, pivots, info = mpslinalg.ldl_factor_ex(A)
        where = "group" if n <= ldl_metal.group_max_n(torch.float32) else "device"
        assert launches.names == [f"ldl_factor_{where}_float32"] and syncs.calls == []
        B = metal_backend.tensor(torch.ones(3, n, 2))
        with count_launches() as launches, count_host_syncs() as syncs:
            mpslinalg.ldl_solve(LD, pivots, B)
        assert launches.names == ["ldl_solve_float32"] and len(syncs.calls) == 1


def test_lane_order_independent(metal_backend, monkeypatch):
    if metal_backend.name != "emulator":
        pytest.skip("lane orders are an emulator option")
    for n, dtype in ((12, torch.complex64), (70, torch.complex64), (40, torch.float32)):
        A = saddle_point(n, dtype, (2,), seed=15, hermitian=dtype.is_complex)
        results = []
        for order in (None, "reverse", "random"):
            monkeypatch.setattr(_metal, "LANE_ORDER", order)
            results.append(ldl_metal.ldl_factor_metal(A, hermitian=dtype.is_complex))
        for result in results[1:]:
            for a, b in zip(result, results[0], strict=True):
                assert torch.equal(a, b)


def test_group_size_independent(metal_backend, monkeypatch):
    """A pipeline may allow fewer threads than the host asks for: same bits with fewer."""
    A = metal_backend.tensor(saddle_point(100, torch.complex64, (2,), seed=19, hermitian=True))
    full = ldl_metal.ldl_factor_metal(A, hermitian=True)
    monkeypatch.setattr(ldl_metal, "MAX_THREADS", 2 * ldl_metal.SIMD_WIDTH)
    for a, b in zip(ldl_metal.ldl_factor_metal(A, hermitian=True), full, strict=True):
        assert torch.equal(a, b)


def test_metal_refuses_float64(metal_backend):
    A = metal_backend.tensor(torch.eye(3))
    with pytest.raises(TypeError, match="^mpslinalg.ldl_factor: .*torch backend"):
        mpslinalg.ldl_factor(A.double())


# ---------------------------------------------------------------- autograd


def test_no_derivative_as_in_torch(backend):
    """torch defines no derivative: the forward takes inputs that require grad, backward
    raises RuntimeError (the metal backend and torch's alike)."""
    A = backend.tensor(symmetric(4, torch.float32, seed=16)).requires_grad_()
    LD, pivots = mpslinalg.ldl_factor(A)
    with pytest.raises(RuntimeError, match="derivative for .*ldl_factor_ex is not implemented"):
        LD.sum().backward()
    B = backend.tensor(torch.ones(4, 1)).requires_grad_()
    X = mpslinalg.ldl_solve(LD.detach(), pivots, B)
    with pytest.raises(RuntimeError, match="derivative for .*ldl_solve is not implemented"):
        X.sum().backward()


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _dtype(complex_: bool) -> torch.dtype:
    return torch.complex128 if complex_ else torch.float64


def factor_samples(complex_: bool) -> list[Sample]:
    """Symmetric indefinite inputs (complex: symmetric and Hermitian), batched, with 2 x 2
    pivots, broadcast-free and empty shapes."""
    dt = _dtype(complex_)
    variants = [{}] + ([{"hermitian": True}] if complex_ else [])
    samples = []
    for kw in variants:
        h = bool(kw)
        samples += [
            Sample((symmetric(3, dt, (), 1, h),), kw, desc=f"3x3 {kw}"),
            Sample((saddle_point(6, dt, (2,), 2, h),), kw, desc=f"(2, 6, 6) saddle point {kw}"),
            Sample((zero_diagonal(4, dt, (2, 3), 3, h),), kw, desc=f"(2, 3, 4, 4) {kw}"),
        ]
    return samples + [
        Sample((symmetric(1, dt, (3,), 4),), desc="(3, 1, 1)"),
        Sample((torch.zeros(0, 5, 5, dtype=dt),), desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=dt),), desc="0x0"),
    ]


def solve_samples(complex_: bool) -> list[Sample]:
    """(LD, pivots, B) from LAPACK's factors, B batched and broadcast."""
    dt = _dtype(complex_)
    variants = [{}] + ([{"hermitian": True}] if complex_ else [])
    samples = []
    for kw in variants:
        h = bool(kw)
        LD, pivots = torch.linalg.ldl_factor(saddle_point(6, dt, (2,), 5, h), hermitian=h)
        LD = LD.contiguous()
        # torch's CUDA ldl_solve refuses complex hermitian=True factors, and so does its drop-in
        refused = ("cuda",) if h else ()
        samples += [
            Sample((LD, pivots, random_matrix(6, dt, (2,), 6)[..., :3]), kw,
                   desc=f"(2, 6, 6), 3 rhs {kw}", refused_on=refused),
            Sample((LD[:1], pivots[:1], random_matrix(6, dt, (3,), 7)[..., :2]), kw,
                   desc=f"LD (1, 6, 6) broadcast to B (3, 6, 2) {kw}", refused_on=refused),
        ]
    LD, pivots = torch.linalg.ldl_factor(symmetric(3, dt, (), 8))
    LD = LD.contiguous()
    return samples + [
        Sample((LD, pivots, random_matrix(3, dt, (2,), 9)), desc="B batched, LD not"),
        Sample((LD, pivots, torch.zeros(3, 0, dtype=dt)), desc="no right-hand side"),
        Sample((torch.zeros(0, 3, 3, dtype=dt), torch.ones(0, 3, dtype=torch.int32),
                torch.zeros(0, 3, 2, dtype=dt)), desc="empty batch"),
    ]


def factor_bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3),), error=RuntimeError, match="dimensions"),
        BadSample((torch.zeros(2, 3, 4),), error=RuntimeError, match="square"),
        BadSample((torch.zeros(3, 3, dtype=torch.int32),), error=(TypeError, RuntimeError),
                  match="int"),
        BadSample(([[1.0, 0.0], [0.0, 1.0]],), error=(TypeError, AttributeError)),
    ]


def singular_samples() -> list[BadSample]:
    A = symmetric(4, torch.float64, (2,), 10)
    A[1] = 0
    # D[1,1] as LAPACK's sytrf reports it; torch's CUDA (cuSOLVER) reports D[2,2]
    return [BadSample((A,), error=RuntimeError,
                      match=r"\(Batch element 1\): D\[(1,1|2,2)\] is zero")]


def solve_bad_samples() -> list[BadSample]:
    LD, pivots = torch.linalg.ldl_factor(symmetric(4, torch.float64, (2,), 11))
    B = torch.ones(2, 4, 1, dtype=torch.float64)
    return [
        BadSample((LD, pivots, B[..., 0, 0]), error=(RuntimeError, IndexError)),
        BadSample((LD[..., :3], pivots, B), error=RuntimeError, match="square"),
        BadSample((LD, pivots[..., :3], B), error=RuntimeError, match="pivots"),
        BadSample((LD, pivots.double(), B), error=RuntimeError, match="integers"),
        BadSample((LD, pivots, torch.ones(2, 5, 1, dtype=torch.float64)), error=RuntimeError,
                  match="Incompatible"),
        BadSample((LD, pivots * 0, B), error=RuntimeError, match=r"\|pivot\| >= 1"),
        BadSample((LD, pivots + 5, B), error=RuntimeError, match=r"\|pivot\| <= LD"),
    ]


def _torch_solve(LD, pivots, B, *, hermitian=False, out=None):
    """torch.linalg.ldl_solve as the reference, LD expanded to B's batch (torch's own reads
    past the end of a smaller LD)."""
    batch = torch.broadcast_shapes(LD.shape[:-2], B.shape[:-2])
    return torch.linalg.ldl_solve(LD.expand(*batch, *LD.shape[-2:]),
                                  pivots.expand(*batch, pivots.shape[-1]), B,
                                  hermitian=hermitian, out=out)


OPS = [
    OpInfo("ldl_factor_ex", mpslinalg.ldl_factor_ex, torch.linalg.ldl_factor_ex, factor_samples,
           bad_samples=factor_bad_samples, grad_args=()),
    OpInfo("ldl_factor", mpslinalg.ldl_factor, torch.linalg.ldl_factor, factor_samples,
           bad_samples=lambda: factor_bad_samples() + singular_samples(), device_reads=1,
           grad_args=(), skips={"nonfinite": "a NaN diagonal is reported through info "
                                "(sytf2), so the checking form raises, as torch's does; "
                                "ldl_factor_ex takes the generic test"}),
    OpInfo("ldl_solve", mpslinalg.ldl_solve, _torch_solve, solve_samples,
           bad_samples=solve_bad_samples, device_reads=1, grad_args=(), nonfinite_args=(0, 2),
           skips={} if torch_at_least(2, 13) else {
               "bad_input_torch": "torch before 2.13 aborts the process on bad pivots (LAPACK's "
                                  "sytrs writes out of bounds, pytorch#136714)"}),
]
instantiate_generic_tests(globals(), OPS)
