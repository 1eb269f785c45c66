"""Host side of metal/linalg/triangular.metal: in-place triangular solves (LAPACK trsm / trsv)
with the triangles of a packed square matrix, optionally applying LAPACK row interchanges.

``trsm`` runs a thread per right-hand side; ``trsv`` a threadgroup per right-hand side, for few
of them on large matrices. Both take their flags as one ``TriSolveParams`` struct (packed by
`mpslinalg._core.metal_params` from its declaration in metal/linalg/triangular.h). From
BLOCKED_MIN_N rows on, the blocked solve replaces both: per diagonal block of ``bs =
block_rows(n)`` rows (a multiple of BLOCK), ``trsm_diag`` (the block's rows, a simdgroup per
right-hand side, by sub-blocks of BLOCK rows) and ``trsm_update`` (the rows still to solve, on
the shared simdgroup-matrix product over many threadgroups): 2 * ceil(n / bs) - 1 launches per
triangular solve, whatever the batch. A *gate* (the iterative refinement's
per-matrix status, `refine_metal`) makes the blocked kernels skip the batch elements whose word
is non-zero, decided on the device; a gated solve is the blocked one unless trsv is asked for
(trsv also honours the gate; trsm does not).
"""

from __future__ import annotations

import functools
import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.metal import SIMD_WIDTH, launch
from . import gemm_metal

_SOURCE = "linalg/triangular.metal"

SOLVE_GROUP = 64  # trsm: one thread per right-hand side (32 when there are at most 32)
TRSV_MAX_RHS = 4  # trsv (one threadgroup per right-hand side) for at most this many ...
TRSV_MIN_N = 32  # ... on matrices at least this large; trsm otherwise
TRSV_GROUP = 256  # trsv threads per group (at most kTriBlock simdgroups)
BLOCK = 32  # kTriBlock: rows per block of trsm / trsv, per sub-block of a diagonal block
DIAG_COLUMNS = 4  # kTriDiagSimdgroups: trsm_diag's right-hand sides (simdgroups) per group
DIAG_MAX_BLOCK = 512  # kTriMaxBlock: the largest diagonal block trsm_diag solves
BLOCKED_MIN_N = 256  # the blocked solve from this order on (its launches pay off there)

#: The blocked solve's diagonal blocks (`block_rows`): the fewest rows, a multiple of BLOCK,
#: giving at most BLOCK_STEPS blocks, and at most MAX_BLOCK rows; 32 up to n = 512 (the blocked
#: solve at its smallest orders is unchanged), 64 to 1024, 128 to 2048, 256 from there on. A
#: solve is 2 ceil(n / bs) - 1 launches: at n = 4096 with bs = 32 its 255 launches of ~10-20 us
#: each, not its work (a GEMM of n^2 k / 2 multiply-adds), set its time on the H200 through the
#: CUDA executor (4.9 ms against cuBLAS's 1.2 ms with 64 right-hand sides). A larger bs moves a
#: share bs / n of the work from trsm_update's product (many threadgroups) into trsm_diag (a
#: simdgroup per right-hand side, a single one for k = 1), whose serial path is bs dependent
#: broadcast steps (n per solve, whatever bs) plus (bs / 32) (bs / 32 + 1) / 2 staged tiles,
#: each two barriers and a chain of 32 products (its device reads overlap the previous tile's
#: work): per solve 2 n / bs launches against about n bs / 2048 tiles, least at
#: bs = 64 sqrt(launch / tile), 200-400 for a launch of 10-40 tiles. BLOCK_STEPS = 16: 31
#: launches per solve, trsm_diag's share of the work about 1/16 (at most 1/8, bs being rounded
#: up to a multiple of 32). MAX_BLOCK = 256: 36 tiles a trsm_diag launch; larger orders take
#: more blocks instead (63 launches at n = 8192). Both are estimates from those counts, to be
#: checked on the H200 (benchmarks/bench_cuda_executor.py --sections trsm --trsm-blocks
#: rule,128,512 times other block rows).
BLOCK_STEPS = 16
MAX_BLOCK = 256


def block_rows(n: int) -> int:
    """Rows per diagonal block of the blocked solve of order ``n``: the smallest multiple of
    BLOCK giving at most BLOCK_STEPS blocks, at most MAX_BLOCK (the reasons beside them)."""
    return min(MAX_BLOCK, BLOCK * max(1, _metal.ceil_div(n, BLOCK * BLOCK_STEPS)))


#: (lower, unit, trans, swaps) of the two solves of LAPACK getrs with packed LU factors, A = P L U:
#: A X = B is X = U^-1 L^-1 P^T B; A^H X = B is X = P L^-H U^-H B.
LU_STEPS = {
    False: ((1, 1, 0, 1), (0, 0, 0, 0)),
    True: ((1, 0, 1, 0), (0, 1, 1, 2)),
}


def adjoint_copy(x: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor holding x^H (x^T for real dtypes); never a view of x (the
    transpose of a (*, 1, 1) tensor is already contiguous, so .contiguous() would alias)."""
    out = x.transpose(-2, -1).clone(memory_format=torch.contiguous_format)
    if out.is_complex():
        out = out.conj_physical_()
    return out


def _solve_left(M, pivots, X, steps, fn: str, gate=None, kind=None) -> torch.Tensor:
    """Overwrite X (contiguous (*, n, k)) by the solves ``steps`` with M. ``gate``: see
    `_solve_left_blocked` (the blocked solve and trsv honour it). ``kind``: "blocked",
    "trsv" or "trsm", or None for the rule of the module docstring (blocked with a gate)."""
    n, k = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    if n == 0 or k == 0 or batch == 0:
        return X
    if kind is None:
        kind = "blocked" if n >= BLOCKED_MIN_N or gate is not None else (
            "trsv" if k <= TRSV_MAX_RHS and n >= TRSV_MIN_N else "trsm")
    if kind == "blocked":
        return _solve_left_blocked(M, pivots, X, steps, fn, gate)
    words, stride = gate if gate is not None else (pivots, 0)
    if kind == "trsv":
        kernel = _metal.kernel(_SOURCE, "trsv", X.dtype, X.device, fn=fn)
        group = min(TRSV_GROUP, _metal.ceil_div(n, SIMD_WIDTH) * SIMD_WIDTH)
        grid = {"threads": [group, k, batch], "group_size": [group, 1, 1]}
        extra = (words,)
    else:
        if gate is not None:
            raise ValueError(f"mpslinalg.{fn}: internal error: trsm takes no gate")
        kernel = _metal.kernel(_SOURCE, "trsm", X.dtype, X.device, fn=fn)
        group = SIMD_WIDTH if k <= SIMD_WIDTH else SOLVE_GROUP
        grid = {"threads": [_metal.ceil_div(k, group) * group, batch], "group_size": [group, 1]}
        extra = ()
    for lower, unit, trans, swaps in steps:
        params = metal_params.pack("linalg/triangular.h", "TriSolveParams", n=n, k=k,
                                   lower=lower, unit=unit, trans=trans, swaps=swaps,
                                   gate_stride=stride)
        launch(kernel, M, pivots, X, params, *extra, **grid)
    return X


def block_params(n: int, k: int, *, lower: int, unit: int, trans: int, swaps: int, i0: int,
                 bs: int, right: int = 0, ldx: int, x_offset: int = 0, x_batch: int,
                 gate_stride: int = 0) -> list[int]:
    """The packed TriBlockParams of trsm_diag / trsm_update (metal/linalg/triangular.h): one
    step, at the diagonal block of rows [i0, i0 + bs) (``bs`` a multiple of BLOCK up to
    DIAG_MAX_BLOCK, the same at every step of a solve, ``i0`` a multiple of it), of M X = B
    (``right``: X M = B) with X[i][j] at ``x_offset + i * ldx + j`` of each batch element's
    ``x_batch`` entries; ``gate_stride``: see `_solve_left_blocked`."""
    if not 0 < bs <= DIAG_MAX_BLOCK or bs % BLOCK or i0 % bs:
        raise ValueError(f"mpslinalg: internal error: diagonal blocks of {bs} rows at row {i0}")
    return list(_block_params(n, k, lower, unit, trans, swaps, i0, bs, right, ldx, x_offset,
                              x_batch, gate_stride))


@functools.lru_cache(maxsize=4096)
def _block_params(n, k, lower, unit, trans, swaps, i0, bs, right, ldx, x_offset, x_batch,
                  gate_stride) -> tuple[int, ...]:
    # Packed once per shape: a solve at n = 8192 takes 126 of them, and the iterative
    # refinement repeats the solve at every step.
    return tuple(metal_params.pack("linalg/triangular.h", "TriBlockParams", n=n, k=k,
                                   lower=lower, unit=unit, trans=trans, swaps=swaps, i0=i0,
                                   bs=bs, right=right, ldx=ldx, x_offset=x_offset,
                                   x_batch=x_batch, gate_stride=gate_stride))


def diag_grid(k: int, batch: int) -> dict:
    """threads / group_size of a trsm_diag launch over ``k`` right-hand sides."""
    group = DIAG_COLUMNS * SIMD_WIDTH
    return {"threads": [_metal.ceil_div(k, DIAG_COLUMNS) * group, batch],
            "group_size": [group, 1]}


def _solve_left_blocked(M, pivots, X, steps, fn: str, gate=None) -> torch.Tensor:
    """`_solve_left` by diagonal blocks of `block_rows` (n) rows: trsm_diag then trsm_update
    per block. ``gate``: None, or (an int32 tensor, a stride): batch element b is skipped where
    ``gate[b * stride]`` is non-zero (read on the device at each launch)."""
    n, k = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    diag = _metal.kernel(_SOURCE, "trsm_diag", X.dtype, X.device, fn=fn)
    update = _metal.kernel(_SOURCE, "trsm_update", X.dtype, X.device, fn=fn)
    # without a gate the buffer is not read: any int32 tensor binds it
    words, stride = gate if gate is not None else (pivots, 0)
    bs = block_rows(n)
    nblk = _metal.ceil_div(n, bs)
    for lower, unit, trans, swaps in steps:
        for s in range(nblk):
            i0 = (s if lower else nblk - 1 - s) * bs
            params = block_params(n, k, lower=lower, unit=unit, trans=trans, swaps=swaps, i0=i0,
                                  bs=bs, ldx=k, x_batch=n * k, gate_stride=stride)
            launch(diag, M, pivots, X, params, words, **diag_grid(k, batch))
            rows = n - min(n, i0 + bs) if lower else i0
            if rows > 0:
                launch(update, M, X, params, words, **gemm_metal.gemm_grid(rows, k, batch))
    return X


def inverse_lower(M: torch.Tensor, *, trans: int, fn: str, unit: int = 0) -> torch.Tensor:
    """X = T^-1 (LAPACK trtri) for the lower triangular T of each matrix of the contiguous
    (*, n, n) tensor M: its lower triangle (``trans=0``), or the conjugate transpose of its upper
    one (``trans=1``); the other triangle is not read, nor the diagonal with ``unit=1`` (T's
    diagonal taken as 1: the L of a packed LU). A new contiguous X, exactly zero above its
    diagonal for finite T.

    The solve T X = I by the triangular solves; from BLOCKED_MIN_N on, the blocked one skips the
    columns of X still known to be zero: at the diagonal block of rows [i0, i0 + bs) only
    columns [0, i0 + bs) are nonzero, so the solve costs n^3 / 6 multiply-adds, not n^3 / 2."""
    n = M.shape[-1]
    X = torch.eye(n, dtype=M.dtype, device=M.device).expand(M.shape).contiguous()
    batch = math.prod(M.shape[:-2])
    no_swaps = torch.zeros(1, dtype=torch.int32, device=M.device)
    if n < BLOCKED_MIN_N or batch == 0:
        return _solve_left(M, no_swaps, X, ((1, unit, trans, 0),), fn)
    diag = _metal.kernel(_SOURCE, "trsm_diag", M.dtype, M.device, fn=fn)
    update = _metal.kernel(_SOURCE, "trsm_update", M.dtype, M.device, fn=fn)
    bs = block_rows(n)
    for i0 in range(0, n, bs):
        cols = min(n, i0 + bs)
        params = block_params(n, cols, lower=1, unit=unit, trans=trans, swaps=0, i0=i0, bs=bs,
                              ldx=n, x_batch=n * n)
        launch(diag, M, no_swaps, X, params, no_swaps, **diag_grid(cols, batch))
        if cols < n:
            launch(update, M, X, params, no_swaps, **gemm_metal.gemm_grid(n - cols, cols, batch))
    return X


def solve_packed(M: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, left: bool,
                 adjoint: bool, steps: dict, fn: str, gate=None, kind=None) -> torch.Tensor:
    """X with op(A) X = B (``left``) or X op(A) = B, where A^-1 is the product of the triangular
    solves ``steps[False]`` with the packed matrix M and op(A) = A^H when ``adjoint``; M and
    pivots contiguous with B's batch shape. Returns a new contiguous X; B is not modified.
    ``gate`` (see `_solve_left_blocked`): the batch elements it closes are left as B's copy;
    ``kind``: see `_solve_left`."""
    if left:
        X = B.resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
        return _solve_left(M, pivots, X, steps[adjoint], fn, gate, kind)
    # X A = B <=> A^H X^H = B^H and X A^H = B <=> A X^H = B^H.
    return adjoint_copy(_solve_left(M, pivots, adjoint_copy(B), steps[not adjoint], fn, gate,
                                    kind))


def triangular_solve_metal(M: torch.Tensor, B: torch.Tensor, *, upper: bool, unit: bool = False,
                           left: bool = True, adjoint: bool = False,
                           fn: str = "solve_triangular") -> torch.Tensor:
    """X with op(M) X = B (``left``) or X op(M) = B for the triangle of M (*, n, n) that
    ``upper`` names (the other is not read; ``unit``: its diagonal is taken as 1), op(M) = M^H
    when ``adjoint``; M is broadcast to B's batch shape. LAPACK trsm. Returns a new tensor."""
    from .._core.copy import contiguous

    batch = B.shape[:-2]
    M = contiguous(M.expand(*batch, *M.shape[-2:]), fn)
    no_swaps = torch.zeros((*batch, M.shape[-1]), dtype=torch.int32, device=M.device)
    lower = 0 if upper else 1
    # op(M) = M^H is the other triangle of the stored one, read transposed.
    steps = {False: ((lower, int(unit), 0, 0),), True: ((1 - lower, int(unit), 1, 0),)}
    return solve_packed(M, no_swaps, B, left=left, adjoint=adjoint, steps=steps, fn=fn)
