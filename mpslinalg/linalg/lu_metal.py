"""Host side of metal/linalg/lu.metal: LAPACK getrf, and getrs through the triangular solves of
`mpslinalg.linalg.triangular_metal`.

Building blocks of the LU-based families (lu, solve, det, inverse). They take float32 / complex64
tensors on MPS (the Apple GPU) or the CPU (the emulator), any layout (gathered into contiguous
buffers by one copy kernel when needed), whose validation and dtype policy the caller has done;
they never read device values on the host: the launch sequence depends on shapes only, and the
batch is a grid dimension of every kernel (no loop over batch elements).

Launches per call:
  lu_factor_metal   a matrix lu_small holds whole (`small_chunks`): 1; else n <=
                    PANEL_MAX_COLS: 1 (one panel spans the whole matrix); otherwise, per
                    panel of PANEL_WIDTH columns, lu_panel (lu_panel_tall for panels of more
                    than PANEL_MAX_ROWS rows) + lu_swap_trsm + lu_update (the last
                    panel has no trailing update): 3 * ceil(min(m, n) / 32) - 1 at most, and
                    for a panel of more than LEAF_MIN_ROWS rows its lu_panel replaced by
                    3 * ceil(32 / PANEL_LEAF) - 1 launches (`_plan`). From
                    OUTER_MIN_COLS columns on, the panels are grouped in outer blocks of
                    OUTER_WIDTH columns: each block's panels as above with their interchanges
                    and updates windowed to the block, then lu_swap_trsm + lu_update for the
                    rest of the matrix (2 launches a block more than the panels' own).
  lu_solve_metal    2 (forward and backward solves, pivots applied inside them; see
                    triangular_metal: the blocked solve's launches, and from PERM_MIN_N rows
                    one for the pivots' permutation), plus a gather per non-contiguous input.
  pivots_to_permutation_metal  1.
"""

from __future__ import annotations

import functools
import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import LINALG_DTYPES, SIMD_WIDTH, launch
from . import gemm_metal, triangular_metal

_LU_SOURCE = "linalg/lu.metal"
_LU_HEADER = "linalg/lu.h"

# Mirrors of the named constants of metal/linalg/lu.h (tests/linalg/test_lu_metal.py checks them).
PANEL_WIDTH = 32  # kLuPanelWidth: columns per panel of the blocked factorization
PANEL_MAX_COLS = 64  # kLuPanelMaxCols: widest panel of one lu_panel launch
PANEL_ROWS_PER_THREAD = 8  # kLuRowsPerThread: rows of lu_panel's registers per thread
SMALL_ROWS = 16  # kLuSmallRows: rows of one column per lu_small thread
SMALL_MAX_ROWS = SMALL_ROWS * SIMD_WIDTH  # kLuSmallMaxRows

# Host-side launch geometry (not seen by the kernels, which read their group size).
PANEL_MAX_THREADS = 1024  # lu_panel: one thread per row up to this many (Apple's group limit)
PANEL_MAX_ROWS = PANEL_ROWS_PER_THREAD * PANEL_MAX_THREADS  # taller panels: lu_panel_tall
# The choices below were measured on an NVIDIA H200 through the CUDA executor
# (benchmarks/sweep_cuda_lu.py; benchmarks/results/cuda_executor_lu.md, docs/lu.rst).
PANEL_THREADS = 256  # lu_panel: threads per group, or as many as its rows' registers need
OUTER_WIDTH = 128  # kLuOuterWidth: columns of an outer block (the depth of the large updates)
OUTER_MIN_COLS = 8192  # narrower: panels only (measured: blocks lose at 1024-2048, draw at 4096)
PANEL_LEAF = 8  # columns per lu_panel launch inside a panel of more than LEAF_MIN_ROWS rows
LEAF_MIN_ROWS = 2048  # shorter panels: one lu_panel launch (the leaves' launches cost more)
SMALL_MAX_COLS = 64  # lu_small up to this many columns (the panel path was faster at 128)
TALL_PANEL_THREADS = 256  # lu_panel_tall: rows beyond this many threads are dealt cyclically
SWAP_GROUP = 64  # lu_swap_trsm: one thread per column
PERM_GROUP = 256  # lu_pivots_to_perm: one thread per matrix
PERM_STAGE_ROWS = 8192  # kLuPermStageRows: lu_pivots_to_perm_staged up to this many rows ...
PERM_STAGE_MIN_ROWS = 256  # ... from this many (below, a thread per matrix does)
PERM_STAGE_GROUP = 256  # lu_pivots_to_perm_staged: threads per matrix


def _check(fn: str, **tensors: torch.Tensor) -> None:
    """Internal contract checks (shapes only: no device reads)."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"mpslinalg.{fn}: internal error: {name} must be contiguous")
        if name != "pivots" and t.dtype not in LINALG_DTYPES:
            raise TypeError(
                f"mpslinalg.{fn}: internal error: {name} has dtype {t.dtype}; the LU kernels "
                "take float32 or complex64"
            )


def _lu_params(m: int, n: int, k0: int, w: int, ncols: int, cb: int = 0,
               ce: int | None = None, rows16: bool = False) -> list[int]:
    return metal_params.pack(_LU_HEADER, "LuParams", m=m, n=n, k0=k0, w=w, ncols=ncols, cb=cb,
                             ce=n if ce is None else ce, rows16=int(rows16))


def _rows16(LU: torch.Tensor) -> bool:
    """Whether every row of the contiguous ``LU`` starts on a 16-byte boundary (lu_panel then
    loads a leaf's entries of a row as whole vectors): a row's bytes a multiple of 16, and the
    tensor at a multiple of 16 bytes from its storage's start, which every allocator aligns
    further (a fresh clone starts there)."""
    size = LU.element_size()
    return (LU.shape[-1] * size) % 16 == 0 and (LU.storage_offset() * size) % 16 == 0


def _panel_launch(rows: int, batch: int) -> tuple[str, list[int], list[int]]:
    """(kernel, threads, group_size) of lu_panel (lu_panel_tall past its register capacity) on
    the ``rows`` rows from the panel's first one down."""
    if rows > PANEL_MAX_ROWS:
        threads = min(TALL_PANEL_THREADS, _metal.ceil_div(rows, SIMD_WIDTH) * SIMD_WIDTH)
        return "lu_panel_tall", [threads, batch], [threads, 1]
    # PANEL_THREADS threads, or as many as the rows' registers need.
    need = _metal.ceil_div(rows, PANEL_ROWS_PER_THREAD)
    threads = _metal.ceil_div(max(need, min(PANEL_THREADS, rows)), SIMD_WIDTH) * SIMD_WIDTH
    return "lu_panel", [threads, batch], [threads, 1]


def small_chunks(m: int, n: int) -> int:
    """lu_small's threads per column for an m x n matrix, or 0 when lu_small does not take it
    (more than SMALL_MAX_COLS columns, SMALL_MAX_ROWS rows or 1024 threads)."""
    if m > SMALL_MAX_ROWS or n > SMALL_MAX_COLS:
        return 0
    chunks = 1
    while chunks * SMALL_ROWS < m:
        chunks *= 2
    return chunks if n * chunks <= PANEL_MAX_THREADS else 0


def lu_factor_metal(A: torch.Tensor, *, fn: str = "lu_factor"
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LAPACK getrf of each matrix of the contiguous (*, m, n) tensor ``A``.

    Returns ``(LU, pivots, info)``: LU (*, m, n) a new tensor holding the unit-lower L below the
    diagonal and U on and above it; pivots (*, min(m, n)) int32, 1-based (row i was interchanged
    with row pivots[i]); info (*) int32, the 1-based index of the first exactly-zero pivot or 0.
    A = P L U as in torch.linalg.lu_factor. ``A`` is not modified.
    """
    A = contiguous(A, fn)
    _check(fn, A=A)
    *batch_shape, m, n = A.shape
    kmax = min(m, n)
    LU = A.clone()
    pivots = torch.zeros((*batch_shape, kmax), dtype=torch.int32, device=A.device)
    info = torch.zeros(batch_shape, dtype=torch.int32, device=A.device)
    batch = math.prod(batch_shape)
    if batch == 0 or kmax == 0:
        return LU, pivots, info

    info_flat = info.view(batch)  # the same storage; a buffer even when info is 0-dim
    chunks = small_chunks(m, n)
    if chunks:
        kernel = _metal.kernel(_LU_SOURCE, "lu_small", A.dtype, A.device, fn=fn)
        threads = _metal.ceil_div(n * chunks, SIMD_WIDTH) * SIMD_WIDTH
        launch(kernel, LU, pivots, info_flat,
               metal_params.pack(_LU_HEADER, "LuSmallParams", m=m, n=n, chunks=chunks),
               threads=[threads, batch], group_size=[threads, 1])
        return LU, pivots, info
    # The launches depend on the shapes only: planned once per shape, then each kernel bound to
    # its tensors once, which halves the host's time to enqueue a call (1023 launches at
    # 4096 x 4096); the total did not move with it on the H200, where the LU is bound by its
    # kernels on the GPU (benchmarks/results/h200_round18.md, call 7).
    args = {"lu_panel": (LU, pivots, info_flat), "lu_panel_tall": (LU, pivots, info_flat),
            "lu_swap_trsm": (LU, pivots), "lu_update": (LU,)}
    bound: dict = {}
    for name, params, threads, group_size in _plan(m, n, batch, _rows16(LU), _tunables()):
        go = bound.get(name)
        if go is None:
            go = bound[name] = _metal.bind(
                _metal.kernel(_LU_SOURCE, name, A.dtype, A.device, fn=fn), *args[name])
        go(params, threads=threads, group_size=group_size)
    return LU, pivots, info


def _tunables() -> tuple:
    """The module's block sizes and geometry that `_plan` reads, its cache key with the shape
    (the tests set some of them to reach the paths at small sizes)."""
    return (PANEL_WIDTH, PANEL_LEAF, LEAF_MIN_ROWS, PANEL_MAX_COLS, PANEL_MAX_ROWS, OUTER_WIDTH,
            OUTER_MIN_COLS, TALL_PANEL_THREADS, PANEL_ROWS_PER_THREAD, PANEL_THREADS, SWAP_GROUP)


@functools.lru_cache(maxsize=256)
def _plan(m: int, n: int, batch: int, rows16: bool, tunables: tuple) -> tuple:
    """The launches of getrf on ``batch`` m x n matrices past lu_small, as (kernel, params,
    threads, group_size), for the module's current `_tunables` (which it reads as globals; the
    argument is the cache's key): one lu_panel launch when the panel kernel holds every column, else
    blocks of OUTER_WIDTH (or PANEL_WIDTH) columns, each factored (its panels or leaves one
    after another, each applied to the block right-looking, so the one-threadgroup step only
    holds a panel's or a leaf's columns) and then applied to the columns outside it."""
    kmax = min(m, n)
    plan: list = []

    def factor(k0: int, w: int) -> None:
        sub = (PANEL_WIDTH if w > PANEL_WIDTH
               else PANEL_LEAF if w > PANEL_LEAF and m - k0 > LEAF_MIN_ROWS else 0)
        if not sub:
            name, threads, group_size = _panel_launch(m - k0, batch)
            plan.append((name, _lu_params(m, n, k0, w, w, rows16=rows16), threads, group_size))
            return
        for j0 in range(k0, k0 + w, sub):
            lw = min(sub, k0 + w - j0)
            factor(j0, lw)
            apply(j0, lw, k0, k0 + w)

    def apply(k0: int, w: int, cb: int, ce: int) -> None:
        # the block [k0, k0 + w)'s interchanges on the window [cb, ce)'s other columns, its U
        # rows right of it (lu_swap_trsm) and its trailing update of the window (lu_update)
        params = _lu_params(m, n, k0, w, w, cb, ce, rows16)
        if ce - cb > w:
            plan.append(("lu_swap_trsm", params,
                         [_metal.ceil_div(ce - cb - w, SWAP_GROUP) * SWAP_GROUP, batch],
                         [SWAP_GROUP, 1]))
        s = k0 + w
        if s < ce and s < m:
            grid = gemm_metal.gemm_grid(m - s, ce - s, batch)
            plan.append(("lu_update", params, grid["threads"], grid["group_size"]))

    if n <= PANEL_MAX_COLS:
        factor_whole = _panel_launch(m, batch)
        return ((factor_whole[0], _lu_params(m, n, 0, kmax, n, rows16=rows16),
                 *factor_whole[1:]),)
    step = OUTER_WIDTH if n >= OUTER_MIN_COLS else PANEL_WIDTH
    for k0 in range(0, kmax, step):
        w = min(step, kmax - k0)
        factor(k0, w)
        # n > PANEL_MAX_COLS >= PANEL_WIDTH and OUTER_MIN_COLS > OUTER_WIDTH: there are always
        # columns outside the block.
        apply(k0, w, 0, n)
    return tuple(plan)


def pivots_to_permutation_metal(pivots: torch.Tensor, n: int, *, fn: str = "lu_unpack"
                                ) -> torch.Tensor:
    """The permutation of LAPACK pivots (*, k) for matrices of ``n`` rows: int64 (*, n) with
    ``A[..., perm, :] == L @ U``, i.e. ``P = eye(n)[:, perm]`` in A = P L U."""
    if pivots.dtype != torch.int32:
        pivots = pivots.to(torch.int32)
    pivots = contiguous(pivots, fn)
    *batch_shape, k = pivots.shape
    perm = torch.empty((*batch_shape, n), dtype=torch.int64, device=pivots.device)
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0:
        return perm
    if k == 0:
        perm.copy_(torch.arange(n, device=pivots.device).expand_as(perm))
        return perm
    params = metal_params.pack(_LU_HEADER, "LuPermParams", m=n, k=k, batch=batch)
    if PERM_STAGE_MIN_ROWS <= n <= PERM_STAGE_ROWS:
        kernel = _metal.kernel(_LU_SOURCE, "lu_pivots_to_perm_staged", torch.int32,
                               pivots.device, fn=fn)
        launch(kernel, pivots, perm, params, threads=[PERM_STAGE_GROUP, batch],
               group_size=[PERM_STAGE_GROUP, 1])
        return perm
    kernel = _metal.kernel(_LU_SOURCE, "lu_pivots_to_perm", torch.int32, pivots.device, fn=fn)
    group = min(PERM_GROUP, batch)
    launch(kernel, pivots, perm, params,
            threads=[_metal.ceil_div(batch, group) * group], group_size=[group])
    return perm


def lu_solve_metal(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *,
                   left: bool = True, adjoint: bool = False, fn: str = "lu_solve"
                   ) -> torch.Tensor:
    """Solve with the factor of `lu_factor_metal` (LAPACK getrs), A = P L U.

    LU (*, n, n) and pivots (*, n) are broadcast to the batch shape of B, (*, n, k) when
    ``left`` else (*, k, n). left: A X = B (adjoint: A^H X = B); right: X A = B (adjoint:
    X A^H = B). Returns a new contiguous X shaped like B; no input is modified.
    """
    batch = B.shape[:-2]
    LU = contiguous(LU.expand(*batch, *LU.shape[-2:]), fn)
    pivots = contiguous(pivots.expand(*batch, pivots.shape[-1]).to(torch.int32), fn)
    _check(fn, LU=LU, pivots=pivots)
    return triangular_metal.solve_packed(LU, pivots, B, left=left, adjoint=adjoint,
                                         steps=triangular_metal.LU_STEPS, fn=fn)
