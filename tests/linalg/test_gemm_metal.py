"""Kernel-level tests of the shared simdgroup-matrix product (metal/common/gemm.h) through its
standalone kernel (mpslinalg/linalg/gemm_metal.py): on CPU tensors (the emulator) and, when
present, on MPS. Compared with the product in float64 / complex128."""

from __future__ import annotations

import pytest
import torch

from mpslinalg import emulator
from mpslinalg.linalg import gemm_metal as _gemm
from mpslinalg.testing import count_launches, wide

from opdb import metal_constant

DEVICES = ["cpu"] + (["mps"] if torch.backends.mps.is_available() else [])
DTYPES = [torch.float32, torch.complex64]


def _op(x: torch.Tensor, op: str) -> torch.Tensor:
    return {"N": x, "T": x.mT, "C": x.mH}[op]


def _operands(m, n, k, op_a, op_b, dtype, batch, seed):
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn((*batch, *((m, k) if op_a == "N" else (k, m))), dtype=dtype, generator=gen)
    B = torch.randn((*batch, *((k, n) if op_b == "N" else (n, k))), dtype=dtype, generator=gen)
    C = torch.randn((*batch, m, n), dtype=dtype, generator=gen)
    return A, B, C


def _check(m, n, k, op_a, op_b, dtype, device, *, alpha=-1.0, beta=1.0, batch=(2,), seed=0,
           kernel=None):
    A, B, C = _operands(m, n, k, op_a, op_b, dtype, batch, seed)
    before = C.clone()
    out = _gemm.gemm_metal(A.to(device), B.to(device), C.to(device), op_a=op_a, op_b=op_b,
                           alpha=alpha, beta=beta, kernel=kernel).cpu()
    assert torch.equal(C, before)
    ref = beta * wide(C) + alpha * (_op(wide(A), op_a) @ _op(wide(B), op_b))
    # Componentwise bound of a float32 dot product of length k (with the beta C term).
    bound = (abs(beta) * wide(C).abs() + abs(alpha) * (_op(wide(A), op_a).abs()
                                                        @ _op(wide(B), op_b).abs()))
    err = (wide(out) - ref).abs()
    assert out.shape == ref.shape and out.dtype == dtype
    assert bool((err <= 4 * (k + 2) * 2**-24 * bound + 1e-30).all()), float(err.max())


KERNELS = pytest.mark.parametrize("kernel", ["tile", "narrow"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(8, 8, 8), (32, 32, 16), (1, 1, 1), (37, 29, 21),
                                   (65, 3, 40), (3, 70, 5), (70, 1, 100)])
@KERNELS
def test_gemm_sizes(m, n, k, dtype, device, kernel):
    """Whole tiles, and edges that are not multiples of the 32 x 32 x 16 tile (the narrow
    kernel: of its 8 rows, 4 columns and 32 lanes)."""
    _check(m, n, k, "N", "N", dtype, device, kernel=kernel)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_a,op_b", [("T", "N"), ("N", "T"), ("C", "N"), ("N", "C"),
                                       ("C", "T")])
@KERNELS
def test_gemm_transposes(op_a, op_b, dtype, device, kernel):
    _check(33, 17 if kernel == "tile" else 5, 19, op_a, op_b, dtype, device, seed=1,
           kernel=kernel)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, -2.0)])
@KERNELS
def test_gemm_scalars(alpha, beta, device, kernel):
    _check(20, 9, 11, "N", "N", torch.complex64, device, alpha=alpha, beta=beta, kernel=kernel)


def test_narrow_kernel_for_few_columns():
    """C of at most NARROW_MAX_N columns takes gemm_narrow, wider ones the tile kernel; one
    launch whatever the batch."""
    for n, name in ((1, "gemm_narrow_float32"), (_gemm.NARROW_MAX_N, "gemm_narrow_float32"),
                    (_gemm.NARROW_MAX_N + 1, "gemm_float32_tile32")):
        for batch in ((1,), (3,)):
            A, B, _ = _operands(12, n, 7, "N", "N", torch.float32, batch, 5)
            emulator.reset_launch_counts()
            with count_launches() as launches:
                _gemm.gemm_metal(A, B)
            assert launches.names == [name]


@pytest.mark.parametrize("device", DEVICES)
def test_gemm_beta_zero_ignores_nan_in_c(device):
    A, B, C = _operands(9, 9, 9, "N", "N", torch.float32, (1,), 2)
    C.fill_(float("nan"))
    out = _gemm.gemm_metal(A.to(device), B.to(device), C.to(device), beta=0.0).cpu()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, A @ B, rtol=1e-5, atol=1e-5)


def test_gemm_one_launch_whatever_the_batch_and_lane_order(monkeypatch):
    from mpslinalg._core import metal as _metal

    outs = []
    for batch in ((1,), (5,)):
        A, B, C = _operands(40, 40, 24, "N", "N", torch.complex64, batch, 3)
        emulator.reset_launch_counts()
        outs.append(_gemm.gemm_metal(A, B, C, alpha=-1.0, beta=1.0))
        assert emulator.total_launches() == 1
    monkeypatch.setattr(_metal, "LANE_ORDER", "reverse")
    assert torch.equal(_gemm.gemm_metal(A, B, C, alpha=-1.0, beta=1.0), outs[-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_lower_triangle_only(dtype, device):
    """uplo="L" (Cholesky's HERK): C -= A A^H on C's lower triangle, across tiles and edges;
    the strict upper triangle is C's own, NaN there included."""
    A, _, C = _operands(45, 45, 20, "N", "C", dtype, (2,), 4)
    C = torch.where(torch.ones(45, 45, dtype=torch.bool).triu(1), float("nan"), C)
    out = _gemm.gemm_metal(A.to(device), A.to(device), C.to(device), op_b="C", alpha=-1.0,
                           beta=1.0, uplo="L").cpu()
    lower = torch.ones(45, 45, dtype=torch.bool).tril()
    ref = wide(C) - wide(A) @ wide(A).mH
    err = (wide(out) - ref)[:, lower].abs()
    assert bool((err <= 4 * 22 * 2**-24 * (wide(C).abs() + wide(A).abs() @ wide(A).abs().mH)
                 [:, lower]).all())
    assert out[:, ~lower].isnan().all()


def test_gemm_empty():
    A = torch.randn(2, 0, 3)
    B = torch.randn(2, 3, 4)
    assert _gemm.gemm_metal(A, B).shape == (2, 0, 4)
    C = torch.randn(2, 5, 4)
    out = _gemm.gemm_metal(torch.randn(2, 5, 0), torch.randn(2, 0, 4), C, beta=2.0)
    assert torch.equal(out, 2 * C)


def test_host_constants_mirror_header():
    def const(name):
        return int(metal_constant("common/gemm.h", name).split()[0])

    assert const("kGemmTileM") == _gemm.TILE_M and const("kGemmTileN") == _gemm.TILE_N
    assert const("kGemmWideTile") == _gemm.WIDE_TILE
    sm, sn = const("kGemmSimdgroupsM"), const("kGemmSimdgroupsN")
    assert sm * sn * 32 == _gemm.THREADS
    assert const("kGemmNarrowCols") == _gemm.NARROW_COLS
    assert const("kGemmNarrowRows") == _gemm.NARROW_ROWS
    assert [const(n) for n in ("kGemmNoTrans", "kGemmTrans", "kGemmConjTrans")] == [0, 1, 2]
    assert _gemm.OPS == {"N": 0, "T": 1, "C": 2}
    assert [const(n) for n in ("kGemmFull", "kGemmLower")] == [_gemm.UPLO[u] for u in "FL"]


@pytest.mark.parametrize("m,n,k,op_a,op_b,uplo", [(65, 70, 40, "N", "N", "F"),
                                                  (130, 129, 33, "T", "N", "F"),
                                                  (37, 150, 17, "N", "T", "F"),
                                                  (100, 100, 24, "N", "T", "L")])
def test_wide_tile_same_bits(m, n, k, op_a, op_b, uplo, monkeypatch):
    """float32 products take the 64 x 64 block where tile_for says (forced here at small sizes):
    gemm_float32_tile64, bitwise the 32 x 32 block's result (every entry summed in the same
    order), across block edges, transposes and the lower triangle; complex64 keeps 32 x 32."""
    A, B, C = _operands(m, n, k, op_a, op_b, torch.float32, (2,), 6)
    kwargs = dict(op_a=op_a, op_b=op_b, alpha=-1.0, beta=1.0, uplo=uplo, kernel="tile")
    with count_launches() as launches:
        narrow = _gemm.gemm_metal(A, B, C, **kwargs)
    assert launches.names == ["gemm_float32_tile32"]
    monkeypatch.setattr(_gemm, "WIDE_MIN_ENTRIES", 1)
    monkeypatch.setattr(_gemm, "WIDE_MIN_DEPTH", 1)
    with count_launches() as launches:
        out = _gemm.gemm_metal(A, B, C, **kwargs)
    assert launches.names == ["gemm_float32_tile64"]
    assert torch.equal(out, narrow)
    assert _gemm.tile_for(torch.complex64, m, n, k) == _gemm.TILE_M
