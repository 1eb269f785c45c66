"""Host side of metal/linalg/qr.metal: Householder QR (LAPACK geqrf, orgqr / ungqr, ormqr /
unmqr, larft), the tall-skinny TSQR tree and the one-launch batched QR of matrices up to 4 x 4.

Building blocks of the QR family (qr, geqrf, householder_product, lstsq). They take float32 /
complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator), any layout (gathered into
contiguous buffers by one copy kernel when needed), whose validation and dtype policy the caller
has done; they never read device values on the host: the launch sequence depends on shapes
only, and the batch is a grid dimension of every kernel (no loop over batch elements).

Launches per call, with P = ceil(min(m, n) / PANEL_WIDTH) panels:
  geqrf_metal       4 P - 3 at most: per panel qr_panel (its V and Y = V T), then the block
                    reflector on the columns right of it (none after the last panel when
                    n <= m): qr_apply_w (Y^H C = T^H V^H C, split over row chunks, on the shared
                    GEMM), qr_apply_sum (the chunks added) where the rows from k0 on make more
                    than one chunk of APPLY_CHUNK, and qr_apply_update (C -= V W on the shared
                    GEMM).
  apply_q_metal     1 + 2 or 3 per panel, for Q C or Q^H C: qr_explicit_v (V, and Y = V op(T) for
                    every panel at once), then per panel the same three (or two) launches.
  orgqr_metal       as apply_q_metal on the first columns of the identity.
  larft_metal       1 (every panel's T at once).
  gelsy_metal       1 (lstsq_gelsy, the whole of xGELSY for one matrix per threadgroup).
  qr_metal          m, n <= SMALL_MAX: 1 (qr_small). Tall-skinny (see use_tsqr): the TSQR tree
                    of L levels (leaves included), 2 L + 1 launches (2 L - 1 for mode 'r'; 3 and
                    2 for one leaf), see _tsqr. Otherwise geqrf_metal + orgqr_metal (Q not
                    formed for mode='r').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import LINALG_DTYPES, SIMD_WIDTH, launch
from ..small.codegen import QR_MODES
from . import gemm_metal, triangular_metal

_SOURCE = "linalg/qr.metal"

_HEADER = "linalg/qr.h"

# Mirrors of the named constants of metal/linalg/qr.h (tests/linalg/test_qr.py checks them).
PANEL_WIDTH = 16  # kQrPanelWidth: columns per panel, order of each T
PANEL_MAX_SIMDGROUPS = 8  # kQrMaxSimdgroups: qr_panel threadgroups hold at most this many
STAGE_ELEMS = 2176  # kQrStageElems: panels this small (rows x stage_pitch(w)) are staged
APPLY_CHUNK = 256  # kQrApplyChunk: rows of C per qr_apply_w threadgroup (split-K depth)
APPLY_COLS = 64  # kQrApplyCols: qr_apply_sum threads per threadgroup
EXPLICIT_THREADS = 256  # kQrExplicitThreads: qr_explicit_v threads per threadgroup
LARFT_THREADS = PANEL_WIDTH * PANEL_WIDTH  # kQrLarftThreads
SMALL_MAX = 4  # kQrSmallMax
SMALL_MODES = QR_MODES  # kQrModeReduced / Complete / R
GELSY_MAX_THREADS = 256  # kLstsqMaxThreads: lstsq_gelsy's threadgroup holds at most this many
TSQR_MAX_COLS = 256  # kTsqrMaxCols: TSQR serves matrices of at most this many columns
TSQR_THREADS = 256  # kTsqrThreads: threads of a qr_tsqr_factor threadgroup
TSQR_STAGE_BYTES = 24576  # kTsqrStageBytes: nodes this small are factored in threadgroup memory
TSQR_MAX_NODE_ELEMS = 1 << 30  # kTsqrMaxNodeElems: qr_tsqr_factor indexes a node in 32 bits

# Host-side launch geometry and path choice.
SMALL_GROUP = 256  # qr_small: one thread per matrix
#: TSQR leaves hold at most this many rows (at least 2 n, so that the evenly dealt leaves all
#: have n rows or more), fewer when fewer fit in threadgroup memory.
TSQR_LEAF_ROWS = 256
#: R factors stacked per tree node at most (at least 2), fewer when fewer fit in threadgroup
#: memory.
TSQR_FAN_IN = 16
#: TSQR serves matrices of at least this many leaves (fewer leave the GPU as idle as one
#: factorisation, and the blocked path does less work).
TSQR_MIN_LEAVES = 4
#: Whether qr_tsqr_factor may stage a node in threadgroup memory (tests turn it off to exercise
#: the factorisation in device memory on small shapes).
TSQR_STAGE = True

#: (lower, unit, trans, swaps) of triangular_metal's solves with the upper triangle R of a QR
#: factor (packed square): R X = B is one backward substitution; R^H X = B one forward
#: substitution with the conjugate transpose of the stored triangle.
R_STEPS = {False: ((0, 0, 0, 0),), True: ((1, 0, 1, 0),)}


def _check(fn: str, **tensors: torch.Tensor) -> None:
    """Internal contract checks (shapes only: no device reads)."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"mpslinalg.{fn}: internal error: {name} must be contiguous")
        if t.dtype not in LINALG_DTYPES:
            raise TypeError(f"mpslinalg.{fn}: internal error: {name} has dtype {t.dtype}; the "
                            "QR kernels take float32 or complex64")


def _params(**fields: int) -> list[int]:
    """The QrParams struct holding ``fields`` (0 in the fields a kernel does not read)."""
    return metal_params.pack(_HEADER, "QrParams", 0, **fields)


def _panels(k: int) -> list[tuple[int, int]]:
    """(k0, w) of the panels covering k reflectors."""
    return [(k0, min(PANEL_WIDTH, k - k0)) for k0 in range(0, k, PANEL_WIDTH)]


def _t_buffer(batch: int, npanels: int, like: torch.Tensor) -> torch.Tensor:
    return torch.empty((batch, max(npanels, 1), PANEL_WIDTH, PANEL_WIDTH), dtype=like.dtype,
                       device=like.device)


class _BlockReflector:
    """The launches of C <- op(I - V T V^H) C for the panels of one factor (larfb), given V and
    Y = V op(T) (op(T) = T for Q^H, T^H for Q): the workspaces, sized once for the largest panel
    and C."""

    def __init__(self, v: torch.Tensor, y: torch.Tensor, ldv: int, C: torch.Tensor, *,
                 batch: int, m: int, cols: int, fn: str):
        self.v, self.y, self.ldv, self.C, self.m, self.batch = v, y, ldv, C, m, batch
        chunks = _metal.ceil_div(m, APPLY_CHUNK)
        self.part = torch.empty(batch * chunks * PANEL_WIDTH * max(cols, 1), dtype=C.dtype,
                                device=C.device)
        self.work = torch.empty(batch * PANEL_WIDTH * max(cols, 1), dtype=C.dtype,
                                device=C.device)
        self.kernels = [_metal.kernel(_SOURCE, name, C.dtype, C.device, fn=fn)
                        for name in ("qr_apply_w", "qr_apply_sum", "qr_apply_update")]

    def apply(self, *, k0: int, w: int, v_col0: int, ldc: int, c_col0: int, c_cols: int) -> None:
        """C[k0:, c_col0 : c_col0 + c_cols] <- op(I - V T V^H) C for the panel whose w
        reflectors are the columns [v_col0, v_col0 + w) of V (and of Y), k0 its first row."""
        m, batch = self.m, self.batch
        if c_cols <= 0 or m - k0 <= 0:
            return
        chunks = _metal.ceil_div(m - k0, APPLY_CHUNK)
        params = _params(m=m, k0=k0, w=w, ldc=ldc, c_col0=c_col0, c_cols=c_cols, ldv=self.ldv,
                         v_col0=v_col0, chunks=chunks)
        apply_w, add, update = self.kernels
        col_tiles = _metal.ceil_div(c_cols, gemm_metal.TILE_N) * gemm_metal.THREADS
        # one chunk: its product is W itself
        launch(apply_w, self.y, self.C, self.work if chunks == 1 else self.part, params,
               threads=[col_tiles, chunks, batch], group_size=[gemm_metal.THREADS, 1, 1])
        if chunks > 1:
            launch(add, self.part, self.work, params,
                   threads=[_metal.ceil_div(PANEL_WIDTH * c_cols, APPLY_COLS) * APPLY_COLS,
                            batch], group_size=[APPLY_COLS, 1])
        launch(update, self.v, self.work, self.C, params,
               threads=[col_tiles, _metal.ceil_div(m - k0, gemm_metal.TILE_M), batch],
               group_size=[gemm_metal.THREADS, 1, 1])


def geqrf_metal(A: torch.Tensor, *, fn: str = "geqrf"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LAPACK geqrf of each matrix of the (*, m, n) tensor ``A`` (not modified).

    Returns ``(a, tau, T)``: a (*, m, n) new, R on and above the diagonal and the reflectors
    below it; tau (*, min(m, n)); T (batch, panels, PANEL_WIDTH, PANEL_WIDTH), the compact-WY
    factor of each panel (for `apply_q_metal`), batch flattened.
    """
    A = contiguous(A, fn)
    _check(fn, A=A)
    *batch_shape, m, n = A.shape
    k = min(m, n)
    batch = math.prod(batch_shape)
    a = A.clone()
    tau = torch.zeros((*batch_shape, k), dtype=A.dtype, device=A.device)
    panels = _panels(k)
    tmat = _t_buffer(batch, len(panels), A)
    if batch == 0 or k == 0:
        return a, tau, tmat
    panel = _metal.kernel(_SOURCE, "qr_panel", A.dtype, A.device, fn=fn)
    v = torch.empty((batch, m, PANEL_WIDTH), dtype=A.dtype, device=A.device)
    y = torch.empty_like(v)
    reflector = _BlockReflector(v, y, PANEL_WIDTH, a, batch=batch, m=m, cols=n, fn=fn)
    for index, (k0, w) in enumerate(panels):
        threads = min(PANEL_MAX_SIMDGROUPS * SIMD_WIDTH,
                      _metal.ceil_div(m - k0, SIMD_WIDTH) * SIMD_WIDTH)
        launch(panel, a, tau, tmat, v, y, _params(m=m, n=n, k=k, k0=k0, w=w, panel=index,
                                                   npanels=len(panels), ldv=PANEL_WIDTH),
               threads=[threads, batch], group_size=[threads, 1])
        reflector.apply(k0=k0, w=w, v_col0=0, ldc=n, c_col0=k0 + w, c_cols=n - k0 - w)
    return a, tau, tmat


def larft_metal(a: torch.Tensor, tau: torch.Tensor, *, fn: str = "householder_product"
                ) -> torch.Tensor:
    """The compact-WY T of every panel of the reflectors stored in ``a`` (*, m, n) with ``tau``
    (*, k), both contiguous; the layout of `geqrf_metal`'s T."""
    *batch_shape, m, n = a.shape
    k = tau.shape[-1]
    batch = math.prod(batch_shape)
    npanels = len(_panels(k))
    tmat = _t_buffer(batch, npanels, a)
    if batch == 0 or k == 0:
        return tmat
    kernel = _metal.kernel(_SOURCE, "qr_larft", a.dtype, a.device, fn=fn)
    launch(kernel, a, tau, tmat, _params(m=m, n=n, k=k, npanels=npanels),
           threads=[npanels * LARFT_THREADS, batch], group_size=[LARFT_THREADS, 1])
    return tmat


def apply_q_metal(a: torch.Tensor, tmat: torch.Tensor, C: torch.Tensor, *, k: int,
                  adjoint: bool, fn: str = "qr") -> torch.Tensor:
    """Q^H C (``adjoint``) or Q C, Q = H(0) ... H(k - 1) the product of the first k reflectors of
    the factor ``(a, tmat)`` (LAPACK ormqr / unmqr from the left); C (*, m, c) with a's batch
    shape. Returns a new contiguous tensor; C is not modified."""
    C = contiguous(C, fn).clone()
    _check(fn, a=a, C=C)
    *batch_shape, m, n = a.shape
    cols = C.shape[-1]
    batch = math.prod(batch_shape)
    panels = _panels(k)
    if batch == 0 or cols == 0 or not panels:
        return C
    v = torch.empty((batch, m, k), dtype=C.dtype, device=C.device)
    y = torch.empty_like(v)
    explicit = _metal.kernel(_SOURCE, "qr_explicit_v", a.dtype, a.device, fn=fn)
    launch(explicit, a, tmat, v, y, _params(m=m, n=n, k=k, npanels=tmat.shape[1],
                                            adjoint=adjoint),
           threads=[_metal.ceil_div(m * k, EXPLICIT_THREADS) * EXPLICIT_THREADS, batch],
           group_size=[EXPLICIT_THREADS, 1])
    reflector = _BlockReflector(v, y, k, C, batch=batch, m=m, cols=cols, fn=fn)
    for k0, w in panels if adjoint else panels[::-1]:
        reflector.apply(k0=k0, w=w, v_col0=k0, ldc=cols, c_col0=0, c_cols=cols)
    return C


def orgqr_metal(a: torch.Tensor, tmat: torch.Tensor, *, k: int, cols: int, fn: str = "qr"
                ) -> torch.Tensor:
    """The first ``cols`` columns of Q = H(0) ... H(k - 1) (LAPACK orgqr / ungqr, blocked: the
    panels applied to the identity in reverse order)."""
    *batch_shape, m, _ = a.shape
    eye = torch.zeros((*batch_shape, m, cols), dtype=a.dtype, device=a.device)
    eye.diagonal(dim1=-2, dim2=-1).fill_(1)
    return apply_q_metal(a, tmat, eye, k=k, adjoint=False, fn=fn)


def solve_r_metal(R: torch.Tensor, B: torch.Tensor, *, left: bool, adjoint: bool,
                  fn: str = "lstsq") -> torch.Tensor:
    """X with op(R) X = B (``left``) or X op(R) = B, R (*, n, n) upper triangular (entries below
    the diagonal are not read) with B's batch shape, op(R) = R^H when ``adjoint``; through the
    triangular solves of `mpslinalg.linalg.triangular_metal`. Returns a new tensor."""
    batch = B.shape[:-2]
    R = contiguous(R.expand(*batch, *R.shape[-2:]), fn)
    no_swaps = torch.zeros((*batch, R.shape[-1]), dtype=torch.int32, device=R.device)
    return triangular_metal.solve_packed(R, no_swaps, B, left=left, adjoint=adjoint,
                                         steps=R_STEPS, fn=fn)


# ---------------------------------------------------------------- qr


def _qr_small(A: torch.Tensor, mode: str, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    *batch_shape, m, n = A.shape
    k = min(m, n)
    batch = math.prod(batch_shape)
    rows = m if mode == "complete" else k
    R = torch.empty((*batch_shape, rows, n), dtype=A.dtype, device=A.device)
    qcols = m if mode == "complete" else k
    Q = torch.empty((*batch_shape, m, qcols) if mode != "r" else (1,), dtype=A.dtype,
                    device=A.device)
    if batch:
        kernel = _metal.kernel(_SOURCE, "qr_small", A.dtype, A.device, fn=fn, m=m, n=n)
        group = min(SMALL_GROUP, _metal.ceil_div(batch, SIMD_WIDTH) * SIMD_WIDTH)
        launch(kernel, A, Q, R, batch, SMALL_MODES[mode],
               threads=[_metal.ceil_div(batch, group) * group], group_size=[group])
    return (Q if mode != "r" else Q.new_empty(0)), R


@dataclass(frozen=True)
class TsqrLevel:
    """One level of the TSQR tree (the TsqrParams of metal/linalg/qr.h): its matrix has ``rows``
    rows, dealt to ``nodes`` nodes as ``parts`` units of ``unit`` rows (node g owns the units
    [g parts // nodes, (g + 1) parts // nodes))."""

    rows: int
    nodes: int
    parts: int
    unit: int

    def tallest(self) -> int:
        """Rows of the tallest node."""
        return _metal.ceil_div(self.parts, self.nodes) * self.unit


def stage_pitch(n: int) -> int:
    """The row pitch of a panel or TSQR node staged in threadgroup memory (qr_stage_pitch of
    metal/linalg/qr.h): n rounded up to an odd count, so that the lanes reading one column of
    consecutive rows hit distinct banks."""
    return n | 1


def tsqr_shape(n: int, dtype: torch.dtype) -> tuple[int, int]:
    """(leaf rows, fan-in) of the TSQR tree for n columns: as many rows as fit in threadgroup
    memory (at the staged pitch) up to TSQR_LEAF_ROWS but at least 2 n (so that the evenly dealt
    leaves of any matrix with m >= n have n rows or more), and as many R factors per node as
    fit, from 2 to TSQR_FAN_IN."""
    elem = 8 if dtype.is_complex else 4
    fit = TSQR_STAGE_BYTES // (elem * stage_pitch(n))
    return max(2 * n, min(fit, TSQR_LEAF_ROWS)), max(2, min(TSQR_FAN_IN, fit // n))


def tsqr_levels(m: int, n: int, dtype: torch.dtype) -> list[TsqrLevel]:
    """The levels of the TSQR tree of an m x n matrix (m >= n), leaves first, root last."""
    leaf_rows, fan_in = tsqr_shape(n, dtype)
    nodes = _metal.ceil_div(m, leaf_rows)
    levels = [TsqrLevel(m, nodes, m, 1)]
    while nodes > 1:
        children, nodes = nodes, _metal.ceil_div(nodes, fan_in)
        levels.append(TsqrLevel(children * n, nodes, children, n))
    if max(lev.tallest() for lev in levels) * n > TSQR_MAX_NODE_ELEMS:
        # qr_tsqr_factor indexes a node in 32 bits; the defaults' nodes are far smaller
        raise ValueError(f"a node of the TSQR tree of {m} x {n} exceeds TSQR_MAX_NODE_ELEMS")
    return levels


def use_tsqr(m: int, n: int, mode: str, dtype: torch.dtype = torch.float32) -> bool:
    """Whether `qr_metal` takes the tall-skinny tree for an m x n matrix."""
    return (mode != "complete" and 0 < n <= TSQR_MAX_COLS
            and m >= TSQR_MIN_LEAVES * tsqr_shape(n, dtype)[0])


def _tsqr_params(level: TsqrLevel, n: int, *, want_q: bool = False, tiles: int = 0) -> list[int]:
    return metal_params.pack(_HEADER, "TsqrParams", 0, n=n, rows=level.rows, nodes=level.nodes,
                             parts=level.parts, unit=level.unit, want_q=want_q,
                             stage=TSQR_STAGE, tiles=tiles)


def _tsqr(A: torch.Tensor, want_q: bool, fn: str) -> tuple[torch.Tensor | None, torch.Tensor]:
    """TSQR (Demmel, Grigori, Hoemmen, Langou 2012, "Communication-optimal parallel and
    sequential QR and LU factorizations", sec. 3) of a contiguous (batch, m, n) tensor, m >= n,
    with LAPACK's signs. For a tree of L levels (leaves included):
      L x qr_tsqr_factor   the levels bottom up, each node's explicit Q left in its rows;
      L - 2 x qr_tsqr_q    top down, Y_l = diag(Q_level_l) Y_(l+1) from the root's Q, for the
                           levels above the leaves (only node 0's first n rows for mode 'r');
      qr_tsqr_signs        Q's first n rows, D from them (see metal/linalg/qr.h), R <- D R;
    and with ``want_q``: qr_tsqr_scale (Y_1 <- Y_1 D) and qr_tsqr_q for the leaves, Q = diag(
    Q_leaves) Y_1. One leaf: the signs, then the scale on its Q. Memory: A's copy, Q, and the
    tree's stacks (at most 2 m rows of n elements in all)."""
    batch, m, n = A.shape
    levels = tsqr_levels(m, n, A.dtype)
    dev, dtype = A.device, A.dtype
    mats = [A.clone()] + [torch.empty((batch, lev.rows, n), dtype=dtype, device=dev)
                          for lev in levels[1:]]
    R = torch.empty((batch, n, n), dtype=dtype, device=dev)
    factor = _metal.kernel(_SOURCE, "qr_tsqr_factor", dtype, dev, fn=fn)
    for index, lev in enumerate(levels):
        rout = mats[index + 1] if index + 1 < len(levels) else R
        launch(factor, mats[index], rout, _tsqr_params(lev, n, want_q=True),
               threads=[TSQR_THREADS, lev.nodes, batch], group_size=[TSQR_THREADS, 1, 1])
    product = _metal.kernel(_SOURCE, "qr_tsqr_q", dtype, dev, fn=fn)
    col_threads = _metal.ceil_div(n, gemm_metal.TILE_N) * gemm_metal.THREADS

    def times_above(index: int, x: torch.Tensor, rows_of_node_0: bool) -> torch.Tensor:
        lev = levels[index]
        out = torch.empty((batch, lev.rows, n), dtype=dtype, device=dev)
        tiles = _metal.ceil_div(lev.tallest(), gemm_metal.TILE_M)
        groups = _metal.ceil_div(n, gemm_metal.TILE_M) if rows_of_node_0 else lev.nodes * tiles
        launch(product, mats[index], x, out, _tsqr_params(lev, n, tiles=tiles),
               threads=[col_threads, groups, batch], group_size=[gemm_metal.THREADS, 1, 1])
        return out

    x = mats[-1]  # the root's explicit Q
    for index in range(len(levels) - 2, 0, -1):
        x = times_above(index, x, rows_of_node_0=not want_q)
    one_leaf = len(levels) == 1
    d = torch.empty((batch, n), dtype=torch.float32, device=dev)
    work = torch.empty((batch, n, n), dtype=dtype, device=dev)
    signs = _metal.kernel(_SOURCE, "qr_tsqr_signs", dtype, dev, fn=fn)
    sign_level = TsqrLevel(m, 0 if one_leaf else levels[0].nodes, 0, 0)
    launch(signs, mats[0], x, work, R, d, _tsqr_params(sign_level, n),
           threads=[TSQR_THREADS, batch], group_size=[TSQR_THREADS, 1])
    if not want_q:
        return None, R
    scale = _metal.kernel(_SOURCE, "qr_tsqr_scale", dtype, dev, fn=fn)
    rows = x.shape[1]
    launch(scale, x, d, _tsqr_params(TsqrLevel(rows, 0, 0, 0), n),
           threads=[_metal.ceil_div(rows * n, TSQR_THREADS) * TSQR_THREADS, batch],
           group_size=[TSQR_THREADS, 1])
    return (x if one_leaf else times_above(0, x, rows_of_node_0=False)), R


def _qr_dense(A: torch.Tensor, mode: str, fn: str) -> tuple[torch.Tensor | None, torch.Tensor]:
    """QR of a contiguous (batch, m, n) tensor by the blocked kernels or the TSQR tree."""
    _, m, n = A.shape
    if use_tsqr(m, n, mode, A.dtype):
        return _tsqr(A, mode != "r", fn)
    k = min(m, n)
    a, _, tmat = geqrf_metal(A, fn=fn)
    rows = m if mode == "complete" else k
    R = a[:, :rows, :].triu()
    if mode == "r":
        return None, R
    return orgqr_metal(a, tmat, k=k, cols=m if mode == "complete" else k, fn=fn), R


def qr_metal(A: torch.Tensor, mode: str = "reduced", *, fn: str = "qr"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.linalg.qr of the (*, m, n) tensor ``A`` (not modified): ``(Q, R)`` with
    torch's shapes for ``mode`` ('reduced', 'complete', 'r': Q empty)."""
    A = contiguous(A, fn)
    _check(fn, A=A)
    *batch_shape, m, n = A.shape
    k = min(m, n)
    if 0 < m <= SMALL_MAX and 0 < n <= SMALL_MAX:
        return _qr_small(A, mode, fn)
    rows = m if mode == "complete" else k
    qcols = m if mode == "complete" else k
    batch = math.prod(batch_shape)
    if batch == 0 or k == 0:
        R = torch.zeros((*batch_shape, rows, n), dtype=A.dtype, device=A.device)
        Q = torch.zeros((*batch_shape, m, qcols), dtype=A.dtype, device=A.device)
        Q.diagonal(dim1=-2, dim2=-1).fill_(1)
        return (Q if mode != "r" else A.new_empty(0)), R
    Q, R = _qr_dense(A.view(batch, m, n), mode, fn)
    R = R.reshape(*batch_shape, rows, n)
    if Q is None:
        return A.new_empty(0), R
    return Q.reshape(*batch_shape, m, qcols), R


# ---------------------------------------------------------------- lstsq (gelsy)


def gelsy_metal(A: torch.Tensor, B: torch.Tensor, rcond: float, *, fn: str = "lstsq"
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """LAPACK xGELSY for each pair of matrices of ``A`` (batch, m, n) and ``B`` (batch, m, k),
    m, n > 0 (neither modified): QR with column pivoting, the numerical rank by incremental
    condition estimation against ``rcond``, the minimum-norm solution. One launch
    (lstsq_gelsy, one threadgroup per matrix). Returns ``(X, rank)``: X (batch, n, k), rank
    (batch,) int32."""
    A, B = contiguous(A, fn), contiguous(B, fn)
    _check(fn, A=A, B=B)
    batch, m, n = A.shape
    k = B.shape[-1]
    mn = min(m, n)
    dev, dtype = A.device, A.dtype
    a = A.clone()
    bw = torch.zeros((batch, max(m, n), k), dtype=dtype, device=dev)
    bw[:, :m] = B
    X = torch.empty((batch, n, k), dtype=dtype, device=dev)
    rank = torch.empty((batch,), dtype=torch.int32, device=dev)
    jpvt = torch.empty((batch, n), dtype=torch.int32, device=dev)
    norms = torch.empty((batch, 2, n), dtype=torch.float32, device=dev)
    wt = torch.empty((batch, n, mn), dtype=dtype, device=dev)
    tau2 = torch.empty((batch, mn), dtype=dtype, device=dev)
    ice = torch.empty((batch, 2, mn), dtype=dtype, device=dev)
    if batch == 0:
        return X, rank
    kernel = _metal.kernel(_SOURCE, "lstsq_gelsy", dtype, dev, fn=fn)
    threads = min(GELSY_MAX_THREADS,
                  _metal.ceil_div(max(m, n + k), SIMD_WIDTH) * SIMD_WIDTH)
    launch(kernel, a, bw, X, rank, jpvt, norms, wt, tau2, ice,
           metal_params.pack(_HEADER, "LstsqParams", m=m, n=n, k=k, rcond=rcond),
           threads=[threads, batch], group_size=[threads, 1])
    return X, rank
