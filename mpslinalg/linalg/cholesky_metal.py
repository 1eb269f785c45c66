"""Host side of metal/linalg/cholesky.metal: LAPACK potrf (A = L L^H), and the triangular solves
of potrs / potri through `mpslinalg.linalg.triangular_metal`.

The functions take float32 / complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator),
any layout, whose validation and dtype policy the caller has done; they never read device values
on the host: the launch sequence depends on shapes only, and the batch is a grid dimension of
every kernel (no loop over batch elements).

Launches per call:
  cholesky_metal          a tril copy (torch's), then n <= UNBLOCKED_MAX: 1 (chol_potf2);
                          otherwise per block of BLOCK columns chol_potf2 + chol_trsm +
                          chol_syrk (the last block has neither): 3 * ceil(n / 32) - 2;
                          upper=True adds the conjugate transposes in and out.
  solve_triangular_metal  1 (trsm / trsv), plus gathers of non-contiguous or broadcast inputs.
  cholesky_solve_metal    2 (the two triangular solves of potrs).
  cholesky_inverse_metal  2 (the same against the identity), and the Hermitian part.
"""

from __future__ import annotations

import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import SIMD_WIDTH, launch
from . import triangular_metal

_SOURCE = "linalg/cholesky.metal"
_HEADER = "linalg/cholesky.h"

# Mirrors of the named constants of metal/linalg/cholesky.h (tests/linalg/test_cholesky.py
# checks them).
UNBLOCKED_MAX = 64  # kCholUnblockedMax: largest order of one chol_potf2 launch
BLOCK = 32  # kCholBlock: columns per block of the blocked factorization
UPDATE_TILE = 64  # kCholTile: trailing-update output tile (rows and columns)
UPDATE_THREADS = 256  # kCholTileThreads: threads of a trailing-update threadgroup

# Host-side launch geometry (not seen by the kernels, which read their group size).
PANEL_GROUP = 64  # chol_trsm: one thread per row of the panel

#: (lower, unit, trans, swaps) of the two solves of potrs with a lower factor L (A = L L^H:
#: L Y = B, then L^H X = Y) and with an upper one U (A = U^H U: U^H Y = B, then U X = Y); the
#: stored triangle is read, the other never (`triangular_metal`).
POTRS_STEPS = {
    False: ((1, 0, 0, 0), (0, 0, 1, 0)),
    True: ((1, 0, 1, 0), (0, 0, 0, 0)),
}


def _params(n: int, k0: int, w: int) -> list[int]:
    return metal_params.pack(_HEADER, "CholParams", n=n, k0=k0, w=w)


def _potf2(kernel, L, info, n: int, k0: int, w: int, batch: int) -> None:
    threads = _metal.ceil_div(w, SIMD_WIDTH) * SIMD_WIDTH
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
    potf2 = _metal.kernel(_SOURCE, "chol_potf2", A.dtype, A.device, fn=fn)
    info_flat = info.view(batch)  # the same storage; a buffer even when info is 0-dim
    if n <= UNBLOCKED_MAX:
        _potf2(potf2, L, info_flat, n, 0, n, batch)
    else:
        trsm = _metal.kernel(_SOURCE, "chol_trsm", A.dtype, A.device, fn=fn)
        syrk = _metal.kernel(_SOURCE, "chol_syrk", A.dtype, A.device, fn=fn)
        for k0 in range(0, n, BLOCK):
            w = min(BLOCK, n - k0)
            _potf2(potf2, L, info_flat, n, k0, w, batch)
            rest = n - k0 - w
            if rest == 0:
                break
            params = _params(n, k0, w)
            launch(trsm, L, params,
                   threads=[_metal.ceil_div(rest, PANEL_GROUP) * PANEL_GROUP, batch],
                   group_size=[PANEL_GROUP, 1])
            tiles = _metal.ceil_div(rest, UPDATE_TILE)
            launch(syrk, L, params, threads=[tiles * UPDATE_THREADS, tiles, batch],
                   group_size=[UPDATE_THREADS, 1, 1])
    return (triangular_metal.adjoint_copy(L) if upper else L), info


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
    """A^-1 given the factor of A = L L^H (A = U^H U when ``upper``): the two solves of potrs
    against the identity, then the Hermitian part (LAPACK potri forms one triangle and torch
    mirrors it; the solves leave it Hermitian only to rounding). A new contiguous tensor."""
    n = L.shape[-1]
    eye = torch.eye(n, dtype=L.dtype, device=L.device).expand(L.shape)
    X = cholesky_solve_metal(eye, L, upper, fn=fn)
    return 0.5 * (X + triangular_metal.adjoint_copy(X))
