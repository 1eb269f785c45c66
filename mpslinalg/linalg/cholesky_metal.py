"""Host side of metal/linalg/cholesky.metal: LAPACK potrf (A = L L^H), and the triangular solves
of potrs / potri through `mpslinalg.linalg.triangular_metal`.

The functions take float32 / complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator),
any layout, whose validation and dtype policy the caller has done; they never read device values
on the host: the launch sequence depends on shapes only, and the batch is a grid dimension of
every kernel (no loop over batch elements).

Launches per call:
  cholesky_metal          a tril copy (torch's), then n < BLOCKED_MIN_N: 1 (chol_potf2_simd
                          up to 32 rows, chol_potf2 above); otherwise chol_potf2_simd (the
                          first block of BLOCK columns), then per block but the last trsm_diag
                          (the panel, triangular.metal) + chol_update (the trailing update,
                          which also factors the next diagonal block): 2 * ceil(n / 32) - 1
                          (63 at n = 1024, 255 at 4096); upper=True adds the conjugate
                          transposes in and out.
  solve_triangular_metal  1 (trsm / trsv) below triangular_metal.BLOCKED_MIN_N rows, the blocked
                          solve's 2 * ceil(n / bs) - 1 from there (bs =
                          triangular_metal.block_rows(n)), 2 * ceil(n / bs) by inverted
                          diagonal blocks where triangular_metal.use_inverse says (nowhere
                          now); plus gathers of non-contiguous or broadcast inputs.
  cholesky_solve_metal    twice that (the two triangular solves of potrs).
  cholesky_inverse_metal  potri: the triangular inverse (one solve against the identity), then
                          chol_lauum, then torch's ops mirroring the triangle.
"""

from __future__ import annotations

import functools
import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import SIMD_WIDTH, launch
from . import gemm_metal, triangular_metal

_SOURCE = "linalg/cholesky.metal"
_HEADER = "linalg/cholesky.h"
_TRIANGULAR_SOURCE = "linalg/triangular.metal"  # the panel's solve (trsm_diag)

# Mirrors of the named constants of metal/linalg/cholesky.h (tests/linalg/test_cholesky.py
# checks them).
UNBLOCKED_MAX = 64  # kCholUnblockedMax: largest order of one chol_potf2 launch
#: kCholBlock: columns per block of the blocked factorization, whose diagonal blocks but the
#: first chol_update factors. Blocks of 64 (the next block factored on the wide 64 x 64 tile in
#: two steps, half the launches) were slower at every size on an H200 through the CUDA executor
#: (1024^2: 998 us against 690; 4096^2: 4893 against 3925; benchmarks/results/h200_round22.md)
#: and were removed.
BLOCK = 32
ROW_THREADS = 8  # kCholRowThreads: chol_potf2's threads per row of a block wider than SIMD_WIDTH
POTF2_THREADS = 512  # kCholPotf2Threads: chol_potf2's threadgroup at most (ROW_THREADS rows of 64)

#: The blocked factorization from this order on (the tests lower it to reach the blocked path
#: on small matrices); at most UNBLOCKED_MAX + 1.
BLOCKED_MIN_N = UNBLOCKED_MAX + 1

#: (lower, unit, trans, swaps) of the two solves of potrs with a lower factor L (A = L L^H:
#: L Y = B, then L^H X = Y) and with an upper one U (A = U^H U: U^H Y = B, then U X = Y); the
#: stored triangle is read, the other never (`triangular_metal`).
POTRS_STEPS = {
    False: ((1, 0, 0, 0), (0, 0, 1, 0)),
    True: ((1, 0, 1, 0), (0, 0, 0, 0)),
}


#: Outer blocks of this many columns (a multiple of BLOCK) from OUTER_MIN_N rows on: after each
#: inner block chol_update updates only the outer block's own columns, and once the outer block
#: is factored, one chol_update of depth OUTER_WIDTH updates the rest of the matrix (which the
#: inner blocks' updates would each have read and written). The same launches. Measured through
#: the CUDA executor on an H200 (benchmarks/results/h200_round16.md, call 7, one call): 4096^2
#: 10% faster by medians with 256 columns (float32 and complex64; 128: 4% and 7%), 2048^2
#: complex64 7% slower, 1024^2 and 2048^2 float32 within the spread; the error of the factor
#: halved at 4096^2 (C rounded once per outer block instead of once per inner block).
OUTER_WIDTH = 256
OUTER_MIN_N = 4096


def _params(n: int, k0: int, w: int, next_block: int = 0, cols: int = 0) -> list[int]:
    return metal_params.pack(_HEADER, "CholParams", n=n, k0=k0, w=w, next=next_block,
                             cols=cols)


def _potf2(L, info, n: int, k0: int, w: int, batch: int, fn: str = "cholesky") -> None:
    """potf2 of the diagonal block [k0, k0 + w) of each of ``batch`` matrices of order ``n``
    in ``L``, in place (w <= UNBLOCKED_MAX)."""
    if w <= SIMD_WIDTH:
        # chol_potf2_simd: one simdgroup per matrix, a row a lane.
        kernel = _metal.kernel(_SOURCE, "chol_potf2_simd", L.dtype, L.device, fn=fn)
        threads = SIMD_WIDTH
    else:
        # chol_potf2: ROW_THREADS threads per row of the block (each holding some of its
        # entries), whole simdgroups: at most POTF2_THREADS, the kernel's
        # max_total_threads_per_threadgroup.
        kernel = _metal.kernel(_SOURCE, "chol_potf2", L.dtype, L.device, fn=fn)
        threads = _metal.ceil_div(ROW_THREADS * w, SIMD_WIDTH) * SIMD_WIDTH
    launch(kernel, L, info, _params(n, k0, w), threads=[threads, batch],
           group_size=[threads, 1])


def cholesky_metal(A: torch.Tensor, upper: bool, *, fn: str = "cholesky"
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """LAPACK potrf of each matrix of the (*, n, n) tensor ``A``, reading its lower triangle
    (``upper``: its upper one, and returning U = L^H with A = U^H U).

    Returns ``(L, info)``: L a new contiguous tensor, zero in the other triangle; info (*) int32,
    0 or the order of the first leading minor that is not positive definite, from whose column
    on L holds NaN (`metal/linalg/cholesky.h`). ``A`` is not modified.
    """
    *batch_shape, n, _ = A.shape
    # The working copy: tril of A (or of A^H), contiguous; the kernels factor it in place. A^H
    # is conjugated physically: a lazy conjugate view loses its conjugation inside a compiled
    # graph's op (aot_eager, torch 2.13).
    L = contiguous(torch.tril(triangular_metal.adjoint_copy(A) if upper else A), fn)
    info = torch.zeros(batch_shape, dtype=torch.int32, device=A.device)
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0:
        return L, info
    info_flat = info.view(batch)  # the same storage; a buffer even when info is 0-dim
    if n < BLOCKED_MIN_N:
        _potf2(L, info_flat, n, 0, n, batch, fn)
    else:
        no_pivots = _no_pivots(A.device)
        # (each bound to its tensors once: the host's cost per launch is most of a call's time
        # on the CUDA executor)
        panel = _metal.bind(_metal.kernel(_TRIANGULAR_SOURCE, "trsm_diag", A.dtype, A.device,
                                          fn=fn), L, no_pivots, L, after=(no_pivots,))
        outer = OUTER_WIDTH if n >= OUTER_MIN_N else n
        steps = _blocked_steps(n, batch, outer, A.dtype)
        updates = {tile: _metal.bind(_metal.kernel(_SOURCE, "chol_update", A.dtype, A.device,
                                                   fn=fn, tile=tile), L, info_flat)
                   for tile in {update[2] for _, update in steps}}
        # chol_potf2_simd factors the first diagonal block, chol_update each later one (in the
        # first tile of its trailing matrix) right after updating it.
        _potf2(L, info_flat, n, 0, BLOCK, batch, fn)
        for (panel_params, panel_grid), (params, grid, tile) in steps:
            panel(panel_params, **panel_grid)
            updates[tile](params, **grid)
    return (triangular_metal.adjoint_copy(L) if upper else L), info


@functools.lru_cache(maxsize=256)
def _blocked_steps(n: int, batch: int, outer: int, dtype: torch.dtype) -> tuple:
    """The blocked factorization's steps for order ``n`` (shapes only, so computed once): per
    block but the last, the (params, grid) of its panel's trsm_diag launch and the (params,
    grid, tile) of its chol_update launch. The parameters are packed
    here once: at n = 1024 a call took 1.42 ms of host time packing them at every call, 0.83
    ms with them packed once (an H200's host, benchmarks/results/h200_round10.md). With outer
    blocks of ``outer`` columns (a multiple of BLOCK; n for none), a block's update covers
    the columns of its outer block only, and the last block of an outer block updates the rest
    with the whole outer block's columns of L21 (depth ``outer``). Each chol_update's output
    block is `gemm_metal.tile_for`'s for its product (the wide one for the outer blocks' deep
    updates in float32, 32 x 32 for the 32-deep inner ones)."""
    steps = []
    for k0 in range(0, n - BLOCK, BLOCK):  # the blocks with rows below them
        s = k0 + BLOCK
        outer_k0 = k0 - k0 % outer
        outer_end = min(outer_k0 + outer, n)
        # L21 L11^H = A21: the rows of L21 are the right-hand sides of a right-side solve
        # with M = L11^H (the stored lower triangle, conjugate-transposed: upper), in place.
        panel = (triangular_metal.block_params(n, n - s, lower=0, unit=0, trans=1, swaps=0,
                                               i0=k0, bs=BLOCK, right=1, ldx=n,
                                               x_offset=s * n, x_batch=n * n),
                 triangular_metal.diag_grid(n - s, batch))
        # Within the outer block, its own columns by this block's columns of L21; at its end,
        # the rest of the matrix by all of the outer block's columns of L21.
        inner = s < outer_end
        first = k0 if inner else outer_k0
        cols = (outer_end if inner else n) - s
        tile = gemm_metal.tile_for(dtype, n - s, cols, s - first)
        update = (_params(n, first, s - first, min(BLOCK, n - s), cols),
                  gemm_metal.gemm_grid(n - s, cols, batch, tile), tile)
        steps.append((panel, update))
    return tuple(steps)


def _no_pivots(device: torch.device) -> torch.Tensor:
    """The pivots buffer of the triangular kernels, never read without interchanges."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def solve_triangular_metal(A: torch.Tensor, B: torch.Tensor, *, upper: bool, left: bool,
                           unitriangular: bool, fn: str = "solve_triangular") -> torch.Tensor:
    """X with A X = B (``left``) or X A = B, A (*, n, n) triangular (its other triangle, and its
    diagonal when ``unitriangular``, never read), batches broadcast. Returns a new contiguous
    X; no input is modified."""
    batch = B.shape[:-2]
    A = contiguous(A.expand(*batch, *A.shape[-2:]), fn)
    lower, unit = int(not upper), int(unitriangular)
    # op(A) = A^H (the right-hand solve's) is the other triangle, read transposed.
    steps = {False: ((lower, unit, 0, 0),), True: ((1 - lower, unit, 1, 0),)}
    return triangular_metal.solve_packed(A, _no_pivots(A.device), B, left=left, adjoint=False,
                                         steps=steps, fn=fn)


def cholesky_solve_metal(B: torch.Tensor, L: torch.Tensor, upper: bool, *,
                         fn: str = "cholesky_solve") -> torch.Tensor:
    """X with A X = B, A = L L^H (``upper``: A = U^H U, ``L`` holding U), L (*, n, n) broadcast
    to B's batch shape (*, n, k); only L's triangle is read. A new contiguous X."""
    batch = B.shape[:-2]
    L = contiguous(L.expand(*batch, *L.shape[-2:]), fn)
    return triangular_metal.solve_packed(L, _no_pivots(L.device), B, left=True, adjoint=False,
                                         steps={False: POTRS_STEPS[upper]}, fn=fn)


def cholesky_inverse_metal(L: torch.Tensor, upper: bool, *, fn: str = "cholesky_inverse"
                           ) -> torch.Tensor:
    """A^-1 given the factor of A = L L^H (A = U^H U when ``upper``, ``L`` holding U): LAPACK
    potri, A^-1 = X^H X with X = L^-1 (U^-H), the triangular inverse, and the lower triangle of
    the product formed by chol_lauum, mirrored (exactly Hermitian, real diagonal, as torch's).
    n^3 / 3 multiply-adds (n^3 / 2 below triangular_metal.BLOCKED_MIN_N, where the inverse is a
    plain solve), against n^3 for two solves with the identity. A new contiguous tensor."""
    L = contiguous(L, fn)
    *batch_shape, n, _ = L.shape
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0:
        return torch.zeros_like(L, memory_format=torch.contiguous_format)
    X = triangular_metal.inverse_lower(L, trans=int(upper), fn=fn)
    C = torch.empty_like(X)
    tile = gemm_metal.tile_for(L.dtype, n, n, n)
    lauum = _metal.kernel(_SOURCE, "chol_lauum", L.dtype, L.device, fn=fn, tile=tile)
    launch(lauum, X, C, _params(n, 0, 0), **gemm_metal.gemm_grid(n, n, batch, tile))
    below = torch.tril(C, -1)
    diagonal = torch.diag_embed(C.diagonal(dim1=-2, dim2=-1).real.to(C.dtype))
    return below + triangular_metal.adjoint_copy(below) + diagonal
