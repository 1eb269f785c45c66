"""The SIMD CPU kernels of the small path (mpslinalg/_small_cpu.py).

They must be bit-identical to the Metal kernel compiled for the CPU by the emulator (the path
they replace for float32 on the torch backend), including info, NaN/Inf propagation, pivot ties
and every position of the first zero pivot (det and slogdet: of the transpose, which the kernels
factor as torch's det does); and they must cover every batch layout (block tails, thread
splits, empty and non-contiguous batches).
"""

from __future__ import annotations

import math

import pytest
import torch

import mpslinalg
from mpslinalg.small import cpu_simd as sc
from mpslinalg.small import dispatch as si
from mpslinalg.testing import matrix_with_spread, noncontiguous, random_matrix, singular_matrix

pytestmark = pytest.mark.usefixtures("native_small_cpu")

SIZES = (1, 2, 3, 4)


def _exact(got, want):
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want),
                    strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def _all_ops(mod_or_ref, A, B, threads):
    """(inv_ex, solve_ex, det, slogdet) of A by the SIMD kernels or the emulator path."""
    if mod_or_ref is sc:
        return (sc.small_inv_ex(A, threads), sc.small_solve_ex(A, B, threads),
                sc.small_det(A, threads), sc.small_slogdet(A, threads))
    At = A.mT.contiguous()  # the SIMD det and slogdet factor the transpose of what they read
    return (si._metal_inv(A), si._metal_solve(A, B), si._metal_det(At), si._metal_slogdet(At))


def _hard_batch(n: int) -> torch.Tensor:
    """Random, ill-conditioned, singular (first zero pivot at every position), NaN/Inf, signed
    zeros, huge/tiny and tied-pivot matrices; 8k + 5 of them so that blocks have a tail."""
    mats = [random_matrix(n, torch.float32, (40,), seed=1),
            matrix_with_spread(n, 1e7, torch.float32, (8,), seed=2)]
    for rank in range(n):
        mats.append(singular_matrix(n, rank, torch.float32, (3,), seed=3 + rank))
    special = random_matrix(n, torch.float32, (16,), seed=9)
    special[0] = 0
    special[1, 0, 0] = math.nan
    special[2, n - 1, n - 1] = math.inf
    special[3, :, 0] = -math.inf
    special[4] = -0.0
    special[5, :, 0] = torch.tensor([1.0, -1.0, 1.0, -1.0])[:n]  # ties: the lowest row wins
    special[6] = 1.0
    special[7, 0] = math.nan
    special[8] *= 1e30
    special[9] *= 1e-30
    special[10, :, 0] = torch.tensor([0.0, -2.0, 2.0, -2.0])[:n]
    special[11, :, 0] = torch.tensor([math.nan, 1.0, 3.0, 2.0])[:n]
    mats.append(special)
    A = torch.cat(mats)
    extra = (-A.shape[0]) % 8 + 5
    return torch.cat([A, random_matrix(n, torch.float32, (extra,), seed=11)])


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", SIZES)
def test_bit_identical_to_emulator_kernel(n, baseline, monkeypatch):
    """Both instruction-set variants (AVX2 where the CPU has it, and the SSE2 baseline)."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = _hard_batch(n)
    for m in (1, 3):
        B = random_matrix(m, torch.float32, (A.shape[0],), seed=20 + m, m=n)
        B[3] = math.nan
        want = _all_ops(si, A, B, 1)
        for threads in (1, 2, 3):
            _exact(_all_ops(sc, A, B, threads), want)


@pytest.mark.parametrize("baseline", (False, True), ids=("auto", "baseline"))
@pytest.mark.parametrize("n", (2, 4))
def test_every_tail_length(n, baseline, monkeypatch):
    """Batches of 1..17 matrices: a partial block of every length, alone or after full ones."""
    monkeypatch.setattr(sc, "_BASELINE", baseline)
    A = random_matrix(n, torch.float32, (17,), seed=31)
    A[5] = 0
    B = random_matrix(2, torch.float32, (17,), seed=32, m=n)
    for batch in range(1, 18):
        _exact(_all_ops(sc, A[:batch], B[:batch], 2), _all_ops(si, A[:batch], B[:batch], 1))


@pytest.mark.parametrize("n", SIZES)
def test_info_first_zero_pivot(n):
    A = torch.cat([singular_matrix(n, rank, torch.float32, (2,), seed=41 + rank)
                   for rank in range(n)] + [random_matrix(n, torch.float32, (2,), seed=49)])
    _, info = sc.small_inv_ex(A)
    assert torch.equal(info, torch.linalg.lu_factor_ex(A).info)
    sign, logabs = sc.small_slogdet(A)
    assert (sign[info > 0] == 0).all() and (logabs[info > 0] == -math.inf).all()


def test_layouts_and_shapes():
    A = random_matrix(4, torch.float32, (2, 9), seed=51)
    B = random_matrix(3, torch.float32, (2, 9), seed=52, m=4)
    X, info = sc.small_inv_ex(A)
    assert X.shape == (2, 9, 4, 4) and info.shape == (2, 9)
    _exact(sc.small_inv_ex(noncontiguous(A)), (X, info))
    _exact(sc.small_inv_ex(A.mT), si._metal_inv(A.mT.contiguous()))
    _exact(sc.small_inv_ex(-A), si._metal_inv((-A).contiguous()))  # lazy negation resolved
    _exact(sc.small_solve_ex(noncontiguous(A), noncontiguous(B)),
           si._metal_solve(A.contiguous(), B.contiguous()))
    _exact(sc.small_det(A[0, 0]), si._metal_det(A[0, 0].mT.contiguous()))  # no batch dimension
    broadcast = A[0, :1].expand(5, 4, 4)  # stride-0 batch
    _exact(sc.small_det(broadcast), si._metal_det(broadcast.mT.contiguous()))
    for shape in ((0, 4, 4), (2, 0, 3, 3)):
        E = torch.zeros(shape)
        X, info = sc.small_inv_ex(E)
        assert X.shape == shape and info.shape == shape[:-2]
        assert sc.small_det(E).shape == shape[:-2]
        assert sc.small_solve_ex(E, torch.zeros(*shape[:-1], 2))[0].shape == (*shape[:-1], 2)
    # No right-hand sides: an empty X, info still set.
    A3 = random_matrix(3, torch.float32, (4,), seed=53)
    A3[2, :, 1] = 0
    X, info = sc.small_solve_ex(A3, torch.zeros(4, 3, 0))
    assert X.shape == (4, 3, 0) and info.tolist() == [0, 0, 2, 0]


def test_inputs_not_modified():
    A = random_matrix(4, torch.float32, (20,), seed=61)
    B = random_matrix(2, torch.float32, (20,), seed=62, m=4)
    A0, B0 = A.clone(), B.clone()
    _all_ops(sc, A, B, 2)
    assert torch.equal(A, A0) and torch.equal(B, B0)


def test_torch_backend_dispatch(monkeypatch):
    A = random_matrix(4, torch.float32, (100,), seed=71)
    assert si.torch_path(A) == "simd kernel on CPU"
    assert si.torch_path(A.to(torch.complex64)) == "tensor ops"  # never the emulator
    with mpslinalg.use_backend("torch"):
        _exact(si.small_inv_ex(A), si._metal_inv(A))
        _exact(si.small_slogdet(A), si._metal_slogdet(A.mT.contiguous()))
    monkeypatch.setattr(sc.LIBRARY, "loaded", None)  # not in this installation
    assert si.torch_path(A) == "tensor ops"

