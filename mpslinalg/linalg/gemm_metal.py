"""Host side of metal/common/gemm.metal: the shared simdgroup-matrix product of the Metal
families, C = beta C + alpha op(A) op(B), as a standalone kernel.

The kernels of other families (LU's trailing update, the blocked triangular solves) call the
device function ``gemm_tile`` of metal/common/gemm.h directly; this module launches the
standalone ``gemm`` kernel (the tests of that device function, benchmarks, the float64-class
solve's corrections, the triangular solve by inverted diagonal blocks: `launch_gemm` on blocks
of larger matrices), or ``gemm_narrow`` for C of at most `NARROW_MAX_N` columns (a simdgroup
per row of C). One launch per call, whatever the batch; no host reads.
"""

from __future__ import annotations

import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.metal import LINALG_DTYPES, launch

_SOURCE = "common/gemm.metal"
_HEADER = "common/gemm.h"

# Mirrors of metal/common/gemm.h (tests/linalg/test_gemm_metal.py checks them).
TILE_M = 32  # kGemmTileM: output rows of a threadgroup (the default block)
TILE_N = 32  # kGemmTileN: output columns of a threadgroup (the default block)
WIDE_TILE = 64  # kGemmWideTile: side of the wide block (float32 only)
#: The wide block serves float32 products of C with at least this many entries (256 wide blocks)
#: and at least WIDE_MIN_DEPTH deep. Measured through the CUDA executor on an H200 (round 16,
#: float32, same run): the standalone gemm 2048^3 1215 -> 785 us, 4096^3 9065 -> 5838 us with
#: the wide block. Below these sizes it is not measured: a quarter as many threadgroups leaves
#: a large GPU's cores idle, and a shallow product (Cholesky's 32-deep updates) has little
#: staging for the wide block to save; the thresholds are where it is known to pay.
WIDE_MIN_ENTRIES = 1024 * 1024
WIDE_MIN_DEPTH = 256
THREADS = 128  # kGemmThreads: threads of a threadgroup (4 simdgroups)
NARROW_COLS = 4  # kGemmNarrowCols: columns of C per pass of gemm_narrow over op(A)
NARROW_ROWS = 8  # kGemmNarrowRows: rows of C (simdgroups) per gemm_narrow threadgroup
#: gemm_narrow serves C of at most this many columns (two passes over op(A)); wider, the tile
#: kernel's reuse of each staged tile of op(A) for 32 columns wins.
NARROW_MAX_N = 2 * NARROW_COLS

#: op() codes of the kernel: kGemmNoTrans, kGemmTrans, kGemmConjTrans.
OPS = {"N": 0, "T": 1, "C": 2}
#: The part of C written: kGemmFull ("F"), kGemmLower ("L": j <= i).
UPLO = {"F": 0, "L": 1}


def gemm_params(m: int, n: int, k: int, *, lda: int, ldb: int, ldc: int, op_a: str = "N",
                op_b: str = "N", uplo: str = "F", stride_a: int = 0, stride_b: int = 0,
                stride_c: int = 0, alpha: float = 1.0, beta: float = 0.0) -> list[int]:
    """The packed GemmParams of metal/common/gemm.h."""
    return metal_params.pack(_HEADER, "GemmParams", m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc,
                             op_a=OPS[op_a], op_b=OPS[op_b], uplo=UPLO[uplo], stride_a=stride_a,
                             stride_b=stride_b, stride_c=stride_c, alpha=alpha, beta=beta)


def tile_for(dtype: torch.dtype, m: int, n: int, k: int) -> int:
    """The side of the output block (the kernels' ``Tile``, their ``tile`` name parameter) of
    an m x n x k product of ``dtype`` elements for the kernels instantiated with both (gemm,
    chol_update, chol_lauum): `WIDE_TILE` for large, deep float32 products, TILE_M otherwise."""
    wide = (dtype == torch.float32 and m * n >= WIDE_MIN_ENTRIES and k >= WIDE_MIN_DEPTH)
    return WIDE_TILE if wide else TILE_M


def gemm_grid(m: int, n: int, batch: int, tile: int = TILE_M) -> dict:
    """threads / group_size of a launch covering an m x n output for each of ``batch``, by
    blocks of ``tile`` x ``tile`` (the default block, or `tile_for`'s)."""
    return {"threads": [_metal.ceil_div(n, tile) * THREADS, _metal.ceil_div(m, tile), batch],
            "group_size": [THREADS, 1, 1]}


def narrow_grid(m: int, batch: int) -> dict:
    """threads / group_size of a gemm_narrow launch for an m-row C, each of ``batch``."""
    group = NARROW_ROWS * _metal.SIMD_WIDTH
    return {"threads": [group, _metal.ceil_div(m, NARROW_ROWS), batch],
            "group_size": [group, 1, 1]}


def gemm_metal(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor | None = None, *,
               op_a: str = "N", op_b: str = "N", alpha: float = 1.0, beta: float = 0.0,
               uplo: str = "F", fn: str = "gemm", kernel: str | None = None) -> torch.Tensor:
    """``beta C + alpha op(A) op(B)`` for contiguous (*, r, c) float32 / complex64 tensors of one
    batch shape; op is "N" (as is), "T" (transpose) or "C" (conjugate transpose); ``uplo="L"``
    computes the lower triangle only (C's, or zeros, elsewhere). ``kernel``: "tile" (gemm),
    "narrow" (gemm_narrow, uplo "F" only) or None: narrow for C of at most `NARROW_MAX_N`
    columns. Returns a new tensor; C, when given, is not modified."""
    for name, t in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if t.dtype not in LINALG_DTYPES or not t.is_contiguous():
            raise ValueError(f"mpslinalg.{fn}: internal error: {name} must be a contiguous "
                             "float32 or complex64 tensor")
    *batch_shape, ra, ca = A.shape
    rb, cb = B.shape[-2:]
    m, k = (ra, ca) if op_a == "N" else (ca, ra)
    kb, n = (rb, cb) if op_b == "N" else (cb, rb)
    if kb != k or tuple(B.shape[:-2]) != tuple(batch_shape):
        raise ValueError(f"mpslinalg.{fn}: internal error: shapes {tuple(A.shape)} and "
                         f"{tuple(B.shape)} do not multiply")
    if C is None:
        out = torch.zeros((*batch_shape, m, n), dtype=A.dtype, device=A.device)
        beta = 0.0
    else:
        out = C.clone()
    batch = math.prod(batch_shape)
    if batch == 0 or m == 0 or n == 0:
        return out
    if k == 0 and uplo == "F":  # (the kernel scales a triangle alone)
        return out.mul_(beta) if beta != 0.0 else out.zero_()
    launch_gemm(A, B, out, m, n, k, batch, lda=ca, ldb=cb, ldc=n, op_a=op_a, op_b=op_b,
                uplo=uplo, stride_a=ra * ca, stride_b=rb * cb, stride_c=m * n, alpha=alpha,
                beta=beta, fn=fn, kernel=kernel)
    return out


def launch_gemm(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, m: int, n: int, k: int,
                batch: int, *, lda: int, ldb: int, ldc: int, stride_a: int, stride_b: int,
                stride_c: int, op_a: str = "N", op_b: str = "N", uplo: str = "F",
                alpha: float = 1.0, beta: float = 0.0, fn: str = "gemm",
                kernel: str | None = None) -> None:
    """One launch of ``C = beta C + alpha op(A) op(B)`` in place, for ``batch`` products of an
    m x n C: each buffer bound from its storage offset on (a view whose first element is the
    matrix's; e.g. ``X.view(-1)[offset:]`` for a block of a larger matrix), with the row
    strides ``ld*`` and the batch strides ``stride_*`` given (no check: the caller's
    layout). C must not overlap the parts of A and B read (the kernels stage them as they
    go); beta = 0 never reads C. ``kernel``: see `gemm_metal`. m, n, k, batch > 0."""
    if kernel is None:
        kernel = "narrow" if n <= NARROW_MAX_N and uplo == "F" else "tile"
    if kernel == "narrow" and uplo != "F":
        raise ValueError(f"mpslinalg.{fn}: internal error: gemm_narrow writes all of C")
    params = gemm_params(m, n, k, lda=lda, ldb=ldb, ldc=ldc, op_a=op_a, op_b=op_b, uplo=uplo,
                         stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
                         alpha=alpha, beta=beta)
    if kernel == "narrow":
        found = _metal.kernel(_SOURCE, "gemm_narrow", A.dtype, A.device, fn=fn)
        grid = narrow_grid(m, batch)
    else:
        tile = tile_for(A.dtype, m, n, k)
        found = _metal.kernel(_SOURCE, "gemm", A.dtype, A.device, fn=fn, tile=tile)
        grid = gemm_grid(m, n, batch, tile)
    launch(found, A, B, C, params, **grid)
