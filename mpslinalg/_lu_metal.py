"""Host dispatch of the LU kernels: metal/linalg/lu.metal and metal/linalg/triangular.metal.

Internal building blocks for the public ops (mpslinalg/lu.py, solve.py, det.py, inverse.py).
They take contiguous float32 / complex64 tensors on MPS (the Apple GPU) or the CPU (the
emulator) whose validation, dtype policy and batch broadcasting the caller has done, and they
never read device values on the host: the launch sequence depends on shapes only, and the batch
is a grid dimension of every kernel (no loop over batch elements).

Launches per call:
  lu_factor_metal   n <= PANEL_MAX_COLS: 1 (one panel spans the whole matrix); otherwise, per
                    panel of PANEL_WIDTH columns, lu_panel + lu_swap_trsm + lu_update (the last
                    panel has no trailing update): 3 * ceil(min(m, n) / 32) - 1 at most.
  lu_solve_metal    2 (forward and backward solves, pivots applied inside them; lu_trsm with a
                    thread per right-hand side, or lu_trsv with a threadgroup per right-hand
                    side when there are few of them and n is large).
  pivots_to_permutation_metal  1.
"""

from __future__ import annotations

import math

import torch

from . import _metal

_LU_SOURCE = "linalg/lu.metal"
_TRI_SOURCE = "linalg/triangular.metal"

# Mirrors of the named constants of metal/linalg/lu.h (tests/test_lu_metal.py checks them).
PANEL_WIDTH = 32  # kLuPanelWidth: columns per panel of the blocked factorization
PANEL_MAX_COLS = 64  # kLuPanelMaxCols: widest panel of one lu_panel launch
UPDATE_TILE = 64  # kLuTile: trailing-update output tile (rows and columns)
UPDATE_THREADS = 256  # kLuTileThreads: threads of a trailing-update threadgroup

# Host-side launch geometry (not seen by the kernels, which read their group size).
SIMD_WIDTH = 32
PANEL_MAX_THREADS = 256  # rows beyond this many threads are dealt cyclically
SWAP_GROUP = 64  # lu_swap_trsm: one thread per column
SOLVE_GROUP = 64  # lu_trsm: one thread per right-hand side (32 when there are at most 32)
TRSV_MAX_RHS = 4  # lu_trsv (one threadgroup per right-hand side) for at most this many ...
TRSV_MIN_N = 128  # ... on matrices at least this large; lu_trsm otherwise
TRSV_GROUP = 256  # lu_trsv threads per group (at most kTriBlock simdgroups)
PERM_GROUP = 256  # lu_pivots_to_perm: one thread per matrix

#: Test hook: the lane order forwarded as ``order=`` to the emulator's kernels (e.g.
#: ``"reverse"``), so tests can show results do not depend on it. Never passed on MPS.
LANE_ORDER: str | None = None

_SUPPORTED = (torch.float32, torch.complex64)


def _launch(kernel, *args, threads, group_size) -> None:
    extra = {}
    if LANE_ORDER is not None and args[0].device.type == "cpu":
        extra["order"] = LANE_ORDER
    kernel(*args, threads=threads, group_size=group_size, **extra)


def _check(fn: str, **tensors: torch.Tensor) -> None:
    """Internal contract checks (shapes only: no device reads)."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"mpslinalg.{fn}: internal error: {name} must be contiguous")
        if name != "pivots" and t.dtype not in _SUPPORTED:
            raise TypeError(
                f"mpslinalg.{fn}: internal error: {name} has dtype {t.dtype}; the LU kernels "
                "take float32 or complex64"
            )


def _panel(kernel, LU, pivots, info, m, n, k0, w, ncols, batch) -> None:
    threads = min(PANEL_MAX_THREADS, _metal.ceil_div(m - k0, SIMD_WIDTH) * SIMD_WIDTH)
    _launch(kernel, LU, pivots, info, m, n, k0, w, ncols,
            threads=[threads, batch], group_size=[threads, 1])


def lu_factor_metal(A: torch.Tensor, *, fn: str = "lu_factor"
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LAPACK getrf of each matrix of the contiguous (*, m, n) tensor ``A``.

    Returns ``(LU, pivots, info)``: LU (*, m, n) a new tensor holding the unit-lower L below the
    diagonal and U on and above it; pivots (*, min(m, n)) int32, 1-based (row i was interchanged
    with row pivots[i]); info (*) int32, the 1-based index of the first exactly-zero pivot or 0.
    A = P L U as in torch.linalg.lu_factor. ``A`` is not modified.
    """
    _check(fn, A=A)
    *batch_shape, m, n = A.shape
    kmax = min(m, n)
    LU = A.clone()
    pivots = torch.zeros((*batch_shape, kmax), dtype=torch.int32, device=A.device)
    info = torch.zeros(batch_shape, dtype=torch.int32, device=A.device)
    batch = math.prod(batch_shape)
    if batch == 0 or kmax == 0:
        return LU, pivots, info

    panel = _metal.kernel(_LU_SOURCE, "lu_panel", A.dtype, A.device, fn=fn)
    info_flat = info.view(batch)  # the same storage; a buffer even when info is 0-dim
    if n <= PANEL_MAX_COLS:
        _panel(panel, LU, pivots, info_flat, m, n, 0, kmax, n, batch)
        return LU, pivots, info

    swap_trsm = _metal.kernel(_LU_SOURCE, "lu_swap_trsm", A.dtype, A.device, fn=fn)
    update = _metal.kernel(_LU_SOURCE, "lu_update", A.dtype, A.device, fn=fn)
    for k0 in range(0, kmax, PANEL_WIDTH):
        w = min(PANEL_WIDTH, kmax - k0)
        _panel(panel, LU, pivots, info_flat, m, n, k0, w, w, batch)
        # n > PANEL_MAX_COLS >= w: there are always columns outside the panel.
        _launch(swap_trsm, LU, pivots, m, n, k0, w,
                threads=[_metal.ceil_div(n - w, SWAP_GROUP) * SWAP_GROUP, batch],
                group_size=[SWAP_GROUP, 1])
        s = k0 + w
        if s < m and s < n:
            _launch(update, LU, m, n, k0, w,
                    threads=[_metal.ceil_div(n - s, UPDATE_TILE) * UPDATE_THREADS,
                             _metal.ceil_div(m - s, UPDATE_TILE), batch],
                    group_size=[UPDATE_THREADS, 1, 1])
    return LU, pivots, info


def _adjoint_copy(x: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor holding x^H (x^T for real dtypes); never a view of x (the
    transpose of a (*, 1, 1) tensor is already contiguous, so .contiguous() would alias)."""
    out = x.transpose(-2, -1).clone(memory_format=torch.contiguous_format)
    if out.is_complex():
        out = out.conj_physical_()
    return out


def _solve_left(LU, pivots, X, adjoint: bool, fn: str) -> torch.Tensor:
    """Overwrite X (contiguous (*, n, k)) with A^-1 X, or A^-H X when ``adjoint``."""
    n, k = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    if n == 0 or k == 0 or batch == 0:
        return X
    if k <= TRSV_MAX_RHS and n >= TRSV_MIN_N:
        trsm = _metal.kernel(_TRI_SOURCE, "lu_trsv", X.dtype, X.device, fn=fn)
        group = min(TRSV_GROUP, _metal.ceil_div(n, SIMD_WIDTH) * SIMD_WIDTH)
        grid = {"threads": [group, k, batch], "group_size": [group, 1, 1]}
    else:
        trsm = _metal.kernel(_TRI_SOURCE, "lu_trsm", X.dtype, X.device, fn=fn)
        group = SIMD_WIDTH if k <= SIMD_WIDTH else SOLVE_GROUP
        grid = {"threads": [_metal.ceil_div(k, group) * group, batch], "group_size": [group, 1]}
    #            lower, unit, trans, swaps
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        _launch(trsm, LU, pivots, X, n, k, 1, 1, 0, 1, **grid)
        _launch(trsm, LU, pivots, X, n, k, 0, 0, 0, 0, **grid)
    else:  # A^H = U^H L^H P^T: X = P L^-H U^-H B
        _launch(trsm, LU, pivots, X, n, k, 1, 0, 1, 0, **grid)
        _launch(trsm, LU, pivots, X, n, k, 0, 1, 1, 2, **grid)
    return X


def lu_solve_metal(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *,
                   left: bool = True, adjoint: bool = False, fn: str = "lu_solve"
                   ) -> torch.Tensor:
    """Solve with the factor of :func:`lu_factor_metal` (LAPACK getrs), A = P L U.

    LU (*, n, n), pivots (*, n), B (*, n, k) when ``left`` else (*, k, n), all contiguous with
    the same batch shape. left: A X = B (adjoint: A^H X = B); right: X A = B (adjoint:
    X A^H = B). Returns a new X shaped like B; B is not modified.
    """
    if pivots.dtype != torch.int32:
        pivots = pivots.to(torch.int32)
    _check(fn, LU=LU, pivots=pivots, B=B)
    if left:
        return _solve_left(LU, pivots, B.clone(), adjoint, fn)
    # X A = B <=> A^H X^H = B^H and X A^H = B <=> A X^H = B^H.
    Xh = _solve_left(LU, pivots, _adjoint_copy(B), not adjoint, fn)
    return _adjoint_copy(Xh)


def pivots_to_permutation_metal(pivots: torch.Tensor, n: int, *, fn: str = "lu_unpack"
                                ) -> torch.Tensor:
    """The permutation of LAPACK pivots (*, k) for matrices of ``n`` rows: int64 (*, n) with
    ``A[..., perm, :] == L @ U``, i.e. ``P = eye(n)[:, perm]`` in A = P L U."""
    if pivots.dtype != torch.int32:
        pivots = pivots.to(torch.int32)
    pivots = pivots.contiguous()
    *batch_shape, k = pivots.shape
    perm = torch.empty((*batch_shape, n), dtype=torch.int64, device=pivots.device)
    batch = math.prod(batch_shape)
    if batch == 0 or n == 0:
        return perm
    if k == 0:
        perm.copy_(torch.arange(n, device=pivots.device).expand_as(perm))
        return perm
    kernel = _metal.kernel(_LU_SOURCE, "lu_pivots_to_perm", torch.int32, pivots.device, fn=fn)
    group = min(PERM_GROUP, batch)
    _launch(kernel, pivots, perm, n, k, batch,
            threads=[_metal.ceil_div(batch, group) * group], group_size=[group])
    return perm
