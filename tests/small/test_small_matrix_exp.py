"""The n <= 4 matrix exponential (mpslinalg/small/matrix_exp.py): the SIMD CPU kernels
bit-identical to the Metal kernel compiled for the CPU by the emulator (float32, every tail
length, both instruction-set variants, threads), the Triton kernels under Triton's interpreter
bit-identical to the CPU kernels, the Metal kernels one launch and no host synchronisation,
and which path serves which call."""

from __future__ import annotations

import math

import pytest
import torch
from triton_interpreter import run_cases

import mpslinalg
from mpslinalg.small import codegen, paths
from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import matrix_exp as sm
from mpslinalg.testing import count_host_syncs, count_launches, noncontiguous, random_matrix

SIZES = (1, 2, 3, 4)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _hard_batch(n: int) -> torch.Tensor:
    """Norms from 1e-30 to 1e30 (0 to 100 squarings), ratios ||A||_1 / theta_7 exactly at and
    next to powers of two (the boundaries of s), NaN / Inf in one entry, zeros, -0, the
    largest finite entries; 8k + 5 matrices, so that blocks have a tail."""
    norms = [0.0, 1e-30, 1e-8, 1e-3, 0.5, 1.0, 3.0, 10.0, 1e2, 1e3, 1e5, 1e10, 1e30]
    mats = [random_matrix(n, torch.float32, (3,), seed=1 + i) * norm
            for i, norm in enumerate(norms)]
    theta = torch.tensor(codegen.EXPM_THETA_7, dtype=torch.float32)
    for k in (0, 1, 7, 64, 100):
        at = torch.eye(n) * (theta * 2.0 ** k)  # ||A||_1 / theta_7 = 2^k (rounded)
        mats += [at[None], torch.nextafter(at, at + 1)[None], torch.nextafter(at, at - 1)[None]]
    special = random_matrix(n, torch.float32, (6,), seed=30)
    special[0, 0, n - 1] = math.nan
    special[1, n - 1, 0] = math.inf
    special[2, 0, 0] = -math.inf
    special[3] = -0.0
    special[4] = torch.finfo(torch.float32).max
    special[5, :, 0] = -1e38
    mats.append(special)
    A = torch.cat(mats)
    extra = (-A.shape[0]) % 8 + 5
    return torch.cat([A, random_matrix(n, torch.float32, (extra,), seed=31)])


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", SIZES)
def test_bit_identical_to_emulator_kernel(n, baseline, monkeypatch, native_expm):
    """Both instruction-set variants (AVX2 where the CPU has it, and the SSE2 baseline), on
    1, 2 and 3 threads."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _hard_batch(n)
    want = sm._metal_matrix_exp(A)
    for threads in (1, 2, 3):
        _exact(sc.small_matrix_exp(A, threads), want)


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", (2, 3))
def test_every_tail_length(n, baseline, monkeypatch, native_expm):
    """Batches of 1..17 matrices: a partial block of every length, alone or after full ones;
    the lanes squaring different numbers of times."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = random_matrix(n, torch.float32, (17,), seed=41) * torch.logspace(-3, 3, 17)[:, None, None]
    A[5] = 0
    for batch in range(1, 18):
        _exact(sc.small_matrix_exp(A[:batch], 2), sm._metal_matrix_exp(A[:batch]))


def test_layouts_and_inputs_not_modified(native_expm):
    A = random_matrix(3, torch.float32, (2, 9), seed=51) * 5
    A0 = A.clone()
    X = sc.small_matrix_exp(A)
    assert torch.equal(A, A0) and X.shape == (2, 9, 3, 3)
    _exact(sc.small_matrix_exp(noncontiguous(A)), X)
    _exact(sc.small_matrix_exp(-A), sm._metal_matrix_exp((-A).contiguous()))  # lazy negation
    _exact(sc.small_matrix_exp(A[0, 0]), X[0, 0])  # no batch dimension
    for shape in ((0, 4, 4), (2, 0, 3, 3)):
        assert sc.small_matrix_exp(torch.zeros(shape)).shape == shape


def test_nonfinite_matrix_is_nan_and_leaves_the_others(native_expm):
    A = random_matrix(4, torch.float32, (9,), seed=61)
    A[4, 1, 1] = math.nan
    A[6, 0, 2] = math.inf
    X = sc.small_matrix_exp(A)
    assert X[[4, 6]].isnan().all()
    clean = [0, 1, 2, 3, 5, 7, 8]
    _exact(X[clean], sc.small_matrix_exp(A[clean]))


def test_torch_backend_paths(monkeypatch, native_expm):
    """float32 batches of n = 2..4 on CPU take the SIMD kernels at every batch; n = 1, float64
    and complex take torch.linalg.matrix_exp (the same bits as torch)."""
    A = random_matrix(3, torch.float32, (5,), seed=71)
    assert sm.use_small_matrix_exp(A, "torch")
    assert paths.choose("matrix_exp", A, "torch") == paths.SIMD_CPU
    with mpslinalg.use_backend("torch"):
        _exact(mpslinalg.matrix_exp(A), sc.small_matrix_exp(A))
        for other in (A.double(), A.to(torch.complex64), A[..., :1, :1]):
            assert not sm.use_small_matrix_exp(other, "torch")
            _exact(mpslinalg.matrix_exp(other), torch.linalg.matrix_exp(other))
    monkeypatch.setattr(sc.EXPM_LIBRARY, "loaded", None)  # not installed
    assert not sm.use_small_matrix_exp(A, "torch")


# ---------------------------------------------------------------- metal: launches and syncs


@pytest.mark.parametrize("batch", (1, 37, 1000))
def test_metal_single_launch_no_sync(metal_backend, batch):
    """The public call: one launch of the small kernel and no device read, for n = 1..4."""
    for dtype in (torch.float32, torch.complex64):
        for n in SIZES:
            A = metal_backend.tensor(random_matrix(n, dtype, (batch,), seed=81) * 30)
            mpslinalg.matrix_exp(A)  # compile outside the counted region
            with count_host_syncs() as syncs, count_launches() as launches:
                mpslinalg.matrix_exp(A)
            assert syncs.calls == []
            assert launches.names == [f"small_matrix_exp_{str(dtype)[6:]}_n{n}"]


def test_metal_backward_of_n2_runs_on_the_small_path(metal_backend):
    """The block-triangular derivative of n <= 2 is one 2n x 2n small launch."""
    A = random_matrix(2, torch.float32, (6,), seed=91).requires_grad_()
    G = random_matrix(2, torch.float32, (6,), seed=92)
    with count_launches() as launches:
        (grad,) = torch.autograd.grad(mpslinalg.matrix_exp(metal_backend.tensor(A)),
                                      A, metal_backend.tensor(G))
    assert launches.names == ["small_matrix_exp_float32_n2", "small_matrix_exp_float32_n4"]
    (want,) = torch.autograd.grad(torch.linalg.matrix_exp(A), A, G)
    torch.testing.assert_close(grad.cpu(), want, rtol=1e-4, atol=1e-5)


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
    A0 = A.clone()
    out[key] = {"exp": st.small_matrix_exp(A), "untouched": torch.equal(A, A0)
                or bool(torch.isnan(A).any())}
torch.save(out, sys.argv[2])
"""


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory):
    cases = {}
    for n in SIZES:
        A = _hard_batch(n)[::37].contiguous()  # every kind of matrix, fewer of each
        for load in ("auto", "tile", "strided"):
            cases[f"n{n}-{load}"] = {"A": A, "load": load}
    return run_cases(tmp_path_factory, "triton_expm", cases, _SCRIPT)


def test_triton_bit_identical_to_cpu_kernels(triton_runs, native_expm):
    cases, out = triton_runs
    assert set(out) == set(cases)
    for key, case in cases.items():
        assert out[key]["untouched"], key
        _exact(out[key]["exp"], sc.small_matrix_exp(case["A"]))
