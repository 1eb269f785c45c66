"""The small QR path (mpslinalg/small/orthogonal.py): the generated SIMD CPU kernels and fused
Triton kernels of m x n QR, m, n <= 4, and their use by mpslinalg.qr on the torch backend.

- float32: bit-identical to ``qr_small`` of metal/linalg/qr.h compiled for the CPU by the
  emulator (same operations in the same order) for finite input, zero and -0.0 columns and
  entries of 1e+-30 included; both instruction-set variants, every block tail, thread splits;
- NaN and Inf: the NaN pattern and the finite entries of torch.linalg.qr (LAPACK on the CPU),
  every single non-finite entry of every shape and mode, float32/float64;
- float32/float64: LAPACK's ratios (xQRT01) < 30 and equality with torch.linalg.qr, signs
  included;
- the Triton kernels through Triton's interpreter (a subprocess with TRITON_INTERPRET=1):
  bit-identical to the CPU kernels, every shape, mode and load layout;
- the public qr: the small path above the crossover batch, torch.linalg.qr below it, autograd
  through the op unchanged, no host synchronisation.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from triton_interpreter import run_cases

import mpslinalg
from mpslinalg.linalg import qr_metal
from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import orthogonal as so
from mpslinalg.small import paths
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    noncontiguous,
    orthogonality_ratio,
    qr_ratio,
    random_matrix,
)

pytestmark = pytest.mark.usefixtures("native_orth")

ROOT = Path(__file__).resolve().parent.parent.parent
SHAPES = [(m, n) for m in range(1, 5) for n in range(1, 5)]
MODES = ("reduced", "complete", "r")
DTYPES = (torch.float32, torch.float64)


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bit-identical values (NaN where NaN), same shape and dtype."""
    return (x.shape == y.shape and x.dtype == y.dtype
            and torch.equal(torch.isnan(x), torch.isnan(y))
            and torch.equal(torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0)))


def _hard_batch(m: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Random matrices and special ones (zero, zero and -0.0 columns, zero tails, NaN, Inf,
    1e+-30 scales, equal columns), 8k + 5 of them so that blocks have a tail."""
    A = random_matrix(n, dtype, (45,), seed=m * 10 + n, m=m)
    A[1] = 0
    A[2, :, 0] = 0
    A[3, :, 0] = -0.0
    A[4, 1:, 0] = 0  # the first reflector is the identity
    A[5, 0, 0] = math.nan
    A[6, m - 1, 0] = math.inf
    A[7] *= 1e30
    A[8] *= 1e-30
    A[9, :, -1] = A[9, :, 0]
    A[10, 0, 0] = -0.0
    A[11, :, 0] *= 1e-30
    A[12, :, -1] *= 1e30
    return A


def _check(A, Q, R, mode):
    """Shapes and LAPACK's ratios against A (float32 / float64)."""
    *batch, m, n = A.shape
    k = min(m, n)
    rows = m if mode == "complete" else k
    assert R.shape == (*batch, rows, n) and R.dtype == A.dtype
    assert torch.equal(R, R.triu())
    if mode == "r":
        assert Q.numel() == 0
        return
    assert Q.shape == (*batch, m, rows) and Q.dtype == A.dtype
    if A.numel():
        assert qr_ratio(A, Q, R) < THRESH
        assert orthogonality_ratio(Q) < THRESH


# ---------------------------------------------------------------- SIMD CPU kernels


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_cpu_bit_identical_to_metal_kernel(shape, baseline, monkeypatch):
    """float32, finite input: the same bits as qr_small compiled for the CPU by the emulator,
    every mode, both instruction-set variants, 1-3 threads (non-finite input follows LAPACK
    instead: test_nonfinite_like_torch)."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _hard_batch(*shape)
    A = A[A.flatten(1).isfinite().all(1)]
    for mode in MODES:
        want = qr_metal._qr_small(A, mode, "qr")
        for threads in (1, 3):
            got = sc.small_qr(A, mode, threads)
            assert _same(got[0], want[0]) and _same(got[1], want[1]), (mode, threads)


def _nonfinite_batch(m: int, n: int, dtype) -> torch.Tensor:
    """Random matrices with one entry NaN, Inf or -Inf, each entry in turn, alone or in a
    column of zeros (the identity reflector and larf's scan of zeros meet the non-finite
    value)."""
    cases = []
    for value in (math.nan, math.inf, -math.inf):
        for pos in range(m * n):
            for zero_column in (False, True):
                A = random_matrix(n, dtype, (), seed=len(cases), m=m)
                if zero_column:
                    A[:, pos % n] = 0
                A.view(-1)[pos] = value
                cases.append(A)
    return torch.stack(cases)


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_nonfinite_like_torch(shape, dtype):
    """A NaN or Inf entry anywhere: Q and R non-finite exactly where torch.linalg.qr's are
    (LAPACK's geqrf / orgqr on the CPU), the same infinities, and the finite entries equal to
    rounding."""
    A = _nonfinite_batch(*shape, dtype)
    tol = 1e-4 if dtype == torch.float32 else 1e-11
    for mode in MODES:
        for ours, theirs in zip(sc.small_qr(A, mode), torch.linalg.qr(A, mode), strict=True):
            assert torch.equal(ours.isnan(), theirs.isnan()), mode
            assert torch.equal(ours.isinf(), theirs.isinf()), mode
            finite = ours.isfinite()
            assert torch.equal(ours[ours.isinf()], theirs[theirs.isinf()]), mode
            torch.testing.assert_close(ours[finite], theirs[finite], rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_ratios_and_torch_equality(shape, dtype):
    """LAPACK's ratios < 30, and Q, R equal to torch.linalg.qr's (LAPACK's reflectors: the
    same signs) to rounding."""
    m, n = shape
    A = random_matrix(n, dtype, (37,), seed=m + 7 * n, m=m)
    tol = 1e-4 if dtype == torch.float32 else 1e-11
    for mode in MODES:
        Q, R = sc.small_qr(A, mode)
        _check(A, Q, R, mode)
        Qt, Rt = torch.linalg.qr(A, mode)
        torch.testing.assert_close(R, Rt, rtol=0, atol=tol)
        if mode != "r":
            torch.testing.assert_close(Q, Qt, rtol=0, atol=tol)


@pytest.mark.parametrize("scale", (1e30, 1e-30))
@pytest.mark.parametrize("shape", [(3, 3), (4, 4), (3, 4), (4, 3), (2, 2)])
def test_extreme_scales_float32(shape, scale):
    """Scaled sums of squares: entries of 1e+-30 neither overflow nor underflow in float32;
    R scales exactly with A up to rounding, Q does not change."""
    m, n = shape
    A = random_matrix(n, torch.float32, (64,), seed=3, m=m)
    Q1, R1 = sc.small_qr(A)
    Q, R = sc.small_qr(A * scale)
    assert torch.isfinite(Q).all() and torch.isfinite(R).all()
    _check(A * scale, Q, R, "reduced")
    torch.testing.assert_close(Q, Q1, rtol=0, atol=1e-5)
    torch.testing.assert_close((R.double() / scale).float(), R1, rtol=1e-5, atol=1e-6)


def test_rank_deficient_and_zero_columns():
    for dtype in DTYPES:
        A = random_matrix(3, dtype, (8,), seed=4, m=4)
        A[:4, :, 2] = A[:4, :, 0] + A[:4, :, 1]  # rank 2
        A[4:, :, 1] = 0
        Q, R = sc.small_qr(A, "complete")
        _check(A, Q, R, "complete")
        Z = torch.zeros(5, 3, 3, dtype=dtype)
        Q, R = sc.small_qr(Z)
        assert torch.equal(R, Z) and torch.equal(Q, torch.eye(3, dtype=dtype).expand(5, 3, 3))


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
def test_every_tail_length(baseline, monkeypatch):
    """Batches of 1..17: a partial block of every length, alone or after full ones."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    for dtype in DTYPES:
        A = random_matrix(3, dtype, (17,), seed=31, m=4)
        full = sc.small_qr(A, "complete")
        for batch in range(1, 18):
            Q, R = sc.small_qr(A[:batch], "complete", 2)
            assert _same(Q, full[0][:batch]) and _same(R, full[1][:batch])


def test_layouts_and_empty_batches():
    A = random_matrix(3, torch.float32, (2, 9), seed=51, m=4)
    Q, R = sc.small_qr(A)
    assert Q.shape == (2, 9, 4, 3) and R.shape == (2, 9, 3, 3)
    for view in (noncontiguous(A), A.mT.contiguous().mT, A[0, 0]):
        got = sc.small_qr(view)
        want = sc.small_qr(view.contiguous())
        assert _same(got[0], want[0]) and _same(got[1], want[1])
    got = sc.small_qr(-A)  # lazy negation resolved
    want = sc.small_qr((-A).contiguous())
    assert _same(got[1], want[1])
    for shape in ((0, 3, 3), (2, 0, 4, 3)):
        for mode in MODES:
            Q, R = sc.small_qr(torch.zeros(shape), mode)
            Qt, Rt = torch.linalg.qr(torch.zeros(shape), mode)
            assert Q.shape == Qt.shape and R.shape == Rt.shape, mode


def test_inputs_not_modified():
    A = random_matrix(4, torch.float64, (20,), seed=61)
    A0 = A.clone()
    sc.small_qr(A, "complete", 2)
    assert torch.equal(A, A0)


# ---------------------------------------------------------------- dispatch and the public qr


def test_use_small_qr():
    big = torch.zeros(paths.TABLES["qr"].row(paths.SIMD_CPU, "cpu").min_batch[4], 3, 4)
    with mpslinalg.use_backend("torch"):
        assert so.use_small_qr(big) and so.may_use_small_qr(big)
        assert so.use_small_qr(big.double())
        assert not so.use_small_qr(big[:-1])  # below the crossover
        assert not so.may_use_small_qr(big[:-1])
        assert not so.use_small_qr(big.to(torch.complex64))  # complex: torch.linalg
        assert not so.use_small_qr(torch.zeros(200, 5, 3))
        assert not so.use_small_qr(torch.zeros(200, 0, 3))
        assert not so.use_small_qr(torch.zeros(200, 3, 3))  # 3x3: crossover at 256
        assert so.use_small_qr(torch.zeros(256, 3, 3))
    assert not so.use_small_qr(big, "metal")  # the metal backend keeps qr_small
    assert so.torch_path(big) == "simd kernel on CPU"
    assert so.torch_path(big.to(torch.complex64)) == "torch.linalg"


def test_public_qr_takes_the_small_path(monkeypatch):
    calls = []
    real = sc.small_qr
    monkeypatch.setattr(sc, "small_qr", lambda *a: calls.append(a[1]) or real(*a))
    A = random_matrix(3, torch.float32, (300,), seed=71)
    with mpslinalg.use_backend("torch"):
        for mode in MODES:
            with count_host_syncs() as syncs:
                Q, R = mpslinalg.qr(A, mode=mode)
            assert syncs.calls == []
            Qt, Rt = torch.linalg.qr(A, mode)
            torch.testing.assert_close(R, Rt, rtol=0, atol=1e-5)
            if mode != "r":
                torch.testing.assert_close(Q, Qt, rtol=0, atol=1e-5)
        assert calls == list(MODES)
        mpslinalg.qr(A[:5])  # below the crossover: torch.linalg.qr
        assert len(calls) == len(MODES)


def test_autograd_through_the_small_path():
    """The op's derivative rule runs on the small path's outputs: gradients equal torch's."""
    A = random_matrix(3, torch.float64, (200,), seed=81, m=4)
    GQ = random_matrix(3, torch.float64, (200,), seed=82, m=4)
    GR = random_matrix(3, torch.float64, (200,), seed=83)
    grads = []
    for fn in (mpslinalg.qr, torch.linalg.qr):
        X = A.clone().requires_grad_()
        with mpslinalg.use_backend("torch"):
            Q, R = fn(X)
        ((Q * GQ).sum() + (R * GR).sum()).backward()
        grads.append(X.grad)
    assert so.use_small_qr(A, "torch")
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- Triton kernels (interpreter)

_SCRIPT = r"""
import sys
import torch
from mpslinalg.small import triton_kernels as st

cases = torch.load(sys.argv[1])
out = {}
for key, case in cases.items():
    st._LOAD = case["load"]
    A = case["A"]
    A0 = A.clone()
    out[key] = {"qr": st.small_qr(A, case["mode"]),
                "untouched": torch.equal(torch.nan_to_num(A), torch.nan_to_num(A0))}
torch.save(out, sys.argv[2])
"""


def _triton_cases() -> dict[str, dict]:
    cases = {}
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        for m, n in SHAPES:
            # 301 matrices: three programs of 128, the last one partial.
            A = torch.cat([_hard_batch(m, n, dtype), random_matrix(n, dtype, (256,), seed=5, m=m)])
            for mode in MODES:
                cases[f"{name}-{m}x{n}-{mode}"] = {"A": A, "mode": mode, "load": "auto"}
            if (m, n) in ((4, 4), (3, 4), (2, 2), (4, 2)):
                for load in ("tile", "strided"):
                    cases[f"{name}-{m}x{n}-complete-{load}"] = {"A": A, "mode": "complete",
                                                                "load": load}
        cases[f"{name}-empty"] = {"A": torch.zeros(0, 2, 3, 3, dtype=dtype), "mode": "reduced",
                                  "load": "auto"}
        cases[f"{name}-batched-view"] = {
            "A": random_matrix(4, dtype, (3, 5), seed=9, m=3).mT, "mode": "complete",
            "load": "auto"}
    return cases


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory):
    return run_cases(tmp_path_factory, "triton_qr", _triton_cases(), _SCRIPT)


def test_triton_bit_identical_to_cpu_kernels(triton_runs):
    """Every shape, mode, dtype and load layout: the same bits as the SIMD CPU kernels (and so,
    for float32, as the Metal kernel), inputs untouched."""
    cases, out = triton_runs
    assert set(out) == set(cases)
    for key, case in cases.items():
        assert out[key]["untouched"], key
        want = sc.small_qr(case["A"], case["mode"])
        got = out[key]["qr"]
        assert _same(got[0], want[0]) and _same(got[1], want[1]), key


def test_triton_generated_source():
    pytest.importorskip("triton")
    from mpslinalg.small import triton_kernels as st

    src = st.qr_kernel_source(3, 3)
    assert "tl.where" in src and "tl.math.div_rn" in src and "tl.sqrt_rn" in src
    assert " if " not in src and "for " not in src  # straight-line code
    assert src.count("tl.store") == 18  # R and Q, entry by entry (rows of 3: strided)
    assert "tl.sqrt(" in st.qr_kernel_source(4, 4, "float64", "complete")
