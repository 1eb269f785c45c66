"""Host side of metal/linalg/svd.metal: the one-sided Jacobi SVD.

Building block of the SVD family (svd, svdvals, pinv, matrix_rank). It takes float32 /
complex64 tensors on MPS (the Apple GPU) or the CPU (the emulator), any layout, whose
validation and dtype policy the caller has done; it never reads device values on the host: the
launch sequence depends on shapes only and the batch is a grid dimension of every kernel.

Paths and launches per call (a gather copy first when the input is not contiguous):
  m, n <= SMALL_MAX   1: svd_small, one matrix per thread, any batch (generated from the n <= 4
                      description of `mpslinalg.small.codegen`: metal/linalg/svd_small.h).
  m == n < BLOCK_MIN_N
                      1: svd_jacobi, one threadgroup per matrix (W and V in threadgroup memory
                      when they fit, see `staged`, in a device workspace otherwise).
  m == n >= BLOCK_MIN_N
                      5 + 2 MAX_SWEEPS (blocks - 1), blocks = ceil(n / BLOCK_WIDTH) rounded
                      up to even (6 with vectors): the block Jacobi of metal/linalg/svd_block.h,
                      two launches per round of pairs of column blocks, threadgroups of
                      BLOCK_SPLIT_ROWS rows of a pair; the rounds after convergence return at
                      once.
  m > n               the QR factorisation of `mpslinalg.linalg.qr_metal` (Q formed, in
                      'complete' mode when U must be completed to m x m), then svd_jacobi on R;
                      U = Q U_R.
  m < n               the same for A^H (A = V' S U'^H from A^H = U' S V'^H).
"""

from __future__ import annotations

import math

import torch

from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.metal import LINALG_DTYPES, SIMD_WIDTH, launch
from . import qr_metal

_SOURCE = "linalg/svd.metal"

# Mirrors of the named constants of metal/linalg/svd.h (tests/linalg/test_svd.py checks them).
MAX_SWEEPS = 30  # kSvdMaxSweeps
NOT_CONVERGED = -1  # kSvdNotConverged
NON_FINITE = -2  # kSvdNonFinite
MAX_SIMDGROUPS = 32  # kSvdMaxSimdgroups
SMALL_MAX = 4  # kSvdSmallMax
STAGE_BYTES = 32768 - MAX_SIMDGROUPS * 4  # kSvdStageBytes

#: svd_small: matrices (threads) per threadgroup.
SMALL_GROUP = 256

_BLOCK_HEADER = "linalg/svd_block.h"
# Mirrors of metal/linalg/svd_block.h's constants (tests/linalg/test_svd.py checks them).
BLOCK_WIDTH = 16  # kSvdBlockWidth
BLOCK_THREADS = 256  # kSvdBlockThreads
BLOCK_SPLIT_ROWS = 64  # kSvdBlockSplitRows
BLOCK_TINY_NORM = 2.0**-28  # kSvdBlockTinyNorm

#: Square matrices of this order and more take the block Jacobi kernels (svd_block.h), below it
#: svd_jacobi's single threadgroup a matrix (set from the H200 measurements of
#: benchmarks/results/h200_round19.md; tests lower it to run the block kernels on small sizes).
BLOCK_MIN_N = 64
#: svd_block_round: Jacobi sweeps on a pair of blocks' Gram matrix at most.
BLOCK_INNER_SWEEPS = 1
#: svd_block_rotate: rows of a pair per threadgroup below and from BLOCK_ROTATE_WIDE_N (each
#: threadgroup forms the pair's rotation, so fewer of them share the GPU's cores among fewer
#: copies of that work; measured on the H200, round 19: 256^2 10.2 ms with 64 rows, 11.2 with
#: 128; 1024^2 88 ms with 64, 76 with 128, 78 with 256).
BLOCK_ROTATE_ROWS = (64, 128)
BLOCK_ROTATE_WIDE_N = 512
#: svd_block_norms / svd_block_output: simdgroups (columns) per threadgroup.
BLOCK_OUTPUT_SIMDGROUPS = 8
#: svd_block_scale and svd_block_complete (one threadgroup a matrix), svd_block_load: threads.
BLOCK_GROUP = 256


#: svd_jacobi with W and V in threadgroup memory: simdgroups at most (MAX_SIMDGROUPS serves the
#: device workspace, where more pairs in flight hide more of the memory's latency; the staged
#: path's width is left as it was, its speed at 32 not measured).
STAGED_MAX_SIMDGROUPS = 16


def jacobi_threads(n: int, dtype: torch.dtype) -> int:
    """Threads of one svd_jacobi threadgroup: one simdgroup per pair of a step, at most
    STAGED_MAX_SIMDGROUPS (W and V in threadgroup memory) or MAX_SIMDGROUPS (in the device
    workspace). The results do not depend on it: each pair is one simdgroup's, whatever the
    number of simdgroups."""
    pairs = max(1, (n + 1) // 2)
    most = STAGED_MAX_SIMDGROUPS if staged(n, dtype) else MAX_SIMDGROUPS
    return SIMD_WIDTH * min(most, pairs)


def staged(n: int, dtype: torch.dtype) -> bool:
    """Whether svd_jacobi keeps an n x n matrix's W and V in threadgroup memory (else in the
    device workspace): n <= 63 for float32, n <= 45 for complex64."""
    itemsize = 8 if dtype == torch.complex64 else 4
    return 2 * n * n * itemsize <= STAGE_BYTES


def _jacobi(A: torch.Tensor, vectors: bool, fn: str):
    """svd_jacobi on a contiguous (batch, n, n) tensor: (U, S, Vh, info) with U, Vh None
    unless ``vectors``."""
    batch, n, _ = A.shape
    dev = A.device
    S = torch.empty((batch, n), dtype=torch.float32, device=dev)
    info = torch.empty((batch,), dtype=torch.int32, device=dev)
    U = torch.empty((batch, n, n) if vectors else (1,), dtype=A.dtype, device=dev)
    Vh = torch.empty((batch, n, n) if vectors else (1,), dtype=A.dtype, device=dev)
    work = torch.empty((batch, 2, n, n), dtype=A.dtype, device=dev)
    norms = torch.empty((batch, n), dtype=torch.float32, device=dev)
    kernel = _metal.kernel(_SOURCE, "svd_jacobi", A.dtype, dev, fn=fn)
    threads = _metal.group_width(kernel, jacobi_threads(n, A.dtype))
    launch(kernel, A, work, norms, U, S, Vh, info, n, int(vectors),
           threads=[threads, batch], group_size=[threads, 1])
    return (U if vectors else None), S, (Vh if vectors else None), info


def rotate_rows(n: int) -> int:
    """Rows of a pair of blocks per svd_block_rotate threadgroup for order n."""
    return BLOCK_ROTATE_ROWS[n >= BLOCK_ROTATE_WIDE_N]


def block_count(n: int) -> int:
    """Column blocks of the block Jacobi for order n: ceil(n / BLOCK_WIDTH) rounded up to even
    (a last block past n is empty)."""
    blocks = _metal.ceil_div(n, BLOCK_WIDTH)
    return blocks + (blocks & 1)


def _block(A: torch.Tensor, vectors: bool, fn: str):
    """The block Jacobi kernels (metal/linalg/svd_block.h) on a contiguous (batch, n, n) tensor:
    (U, S, Vh, info) as `_jacobi`'s."""
    batch, n, _ = A.shape
    dtype, dev = A.dtype, A.device
    blocks = block_count(n)
    splits = _metal.ceil_div(n, BLOCK_SPLIT_ROWS)
    S = torch.empty((batch, n), dtype=torch.float32, device=dev)
    info = torch.empty((batch,), dtype=torch.int32, device=dev)
    U = torch.empty((batch, n, n) if vectors else (1,), dtype=dtype, device=dev)
    Vh = torch.empty((batch, n, n) if vectors else (1,), dtype=dtype, device=dev)
    work = torch.empty((batch, 2 if vectors else 1, n, n), dtype=dtype, device=dev)
    grams = torch.empty((batch, blocks // 2, splits, 4 * BLOCK_WIDTH**2), dtype=dtype,
                        device=dev)
    parts = torch.empty((batch, splits, 2), dtype=torch.float32, device=dev)
    norms = torch.empty((batch, n), dtype=torch.float32, device=dev)
    # svd_block_state_ints: non-finite flag, scale, a word per sweep and pair slot of a round
    state = torch.empty((batch, 2 + MAX_SWEEPS * (blocks // 2)), dtype=torch.int32, device=dev)
    layout = metal_params.param_struct(_BLOCK_HEADER, "SvdBlockParams")
    words = layout.pack(n=n, batch=batch, vectors=vectors, blocks=blocks, sweep=0, round=0,
                        inner=BLOCK_INNER_SWEEPS, rotate_rows=rotate_rows(n))

    def kernel(name: str):
        return _metal.kernel(_SOURCE, name, dtype, dev, fn=fn)

    def one_group_each(name: str, *args) -> None:  # a threadgroup per matrix
        k = kernel(name)
        width = _metal.group_width(k, BLOCK_GROUP)
        launch(k, *args, words, threads=[width, batch], group_size=[width, 1])

    scan = kernel("svd_block_scan")
    width = _metal.group_width(scan, BLOCK_GROUP)
    launch(scan, A, parts, words, threads=[width, splits, batch], group_size=[width, 1, 1])
    one_group_each("svd_block_scale", parts, S, U, Vh, info, state)
    load = kernel("svd_block_load")
    width = _metal.group_width(load, BLOCK_GROUP)
    launch(load, A, work, state, words, threads=[_metal.ceil_div(n, width) * width, n, batch],
           group_size=[width, 1, 1])
    # MAX_SWEEPS sweeps whatever the data (no host reads); a round after the converged sweep
    # returns at once. The host's cost per launch is most of such a round's, hence bound.
    gram_kernel, rotate_kernel = kernel("svd_block_gram"), kernel("svd_block_rotate")
    gram, rotate = _metal.bind(gram_kernel, work, grams, state), _metal.bind(
        rotate_kernel, work, grams, state)
    width = min(_metal.group_width(gram_kernel, BLOCK_THREADS),
                _metal.group_width(rotate_kernel, BLOCK_THREADS))
    pieces = _metal.ceil_div(n, rotate_rows(n))
    group = [width, 1, 1]
    sweep_word, round_word = layout.word("sweep"), layout.word("round")
    for sweep in range(MAX_SWEEPS):
        for step in range(blocks - 1):
            words = list(words)
            words[sweep_word], words[round_word] = sweep, step
            gram(words, threads=[width, blocks // 2 * splits, batch], group_size=group)
            rotate(words, threads=[width, blocks // 2 * pieces, batch], group_size=group)
    columns = _metal.ceil_div(n, BLOCK_OUTPUT_SIMDGROUPS)
    width = BLOCK_OUTPUT_SIMDGROUPS * SIMD_WIDTH
    launch(kernel("svd_block_norms"), work, norms, state, words,
           threads=[width, columns, batch], group_size=[width, 1, 1])
    launch(kernel("svd_block_output"), work, norms, U, S, Vh, info, state, words,
           threads=[width, columns, batch], group_size=[width, 1, 1])
    if vectors:
        one_group_each("svd_block_complete", work, norms, U, state)
    return (U if vectors else None), S, (Vh if vectors else None), info


def _small(A: torch.Tensor, vectors: bool, full: bool, fn: str):
    """svd_small on a contiguous (batch, m, n) tensor, m, n <= SMALL_MAX."""
    batch, m, n = A.shape
    k = min(m, n)
    dev = A.device
    ucols, vrows = (m, n) if full else (k, k)
    S = torch.empty((batch, k), dtype=torch.float32, device=dev)
    info = torch.empty((batch,), dtype=torch.int32, device=dev)
    U = torch.empty((batch, m, ucols) if vectors else (1,), dtype=A.dtype, device=dev)
    Vh = torch.empty((batch, vrows, n) if vectors else (1,), dtype=A.dtype, device=dev)
    kernel = _metal.kernel(_SOURCE, "svd_small", A.dtype, dev, fn=fn, m=m, n=n)
    group = min(SMALL_GROUP, _metal.ceil_div(batch, SIMD_WIDTH) * SIMD_WIDTH)
    params = metal_params.pack("linalg/svd.h", "SvdSmallParams", batch=batch, vectors=vectors,
                               full=full)
    launch(kernel, A, U, S, Vh, info, params,
           threads=[_metal.ceil_div(batch, group) * group], group_size=[group])
    return (U if vectors else None), S, (Vh if vectors else None), info


def _square(A: torch.Tensor, vectors: bool, fn: str):
    """The square path: svd_jacobi below BLOCK_MIN_N, the block Jacobi from it on."""
    return (_block if A.shape[-1] >= BLOCK_MIN_N else _jacobi)(A, vectors, fn)


def _tall(A: torch.Tensor, vectors: bool, full: bool, fn: str):
    """m > n: A = Q R, R = U_R S V^H, U = Q U_R (Q m x m when ``full``: its trailing columns
    complete U)."""
    _, m, n = A.shape
    mode = ("complete" if full else "reduced") if vectors else "r"
    Q, R = qr_metal.qr_metal(A, mode, fn=fn)
    R = R[:, :n, :].contiguous()
    Ur, S, Vh, info = _square(R, vectors, fn)
    if not vectors:
        return None, S, None, info
    U = torch.matmul(Q[:, :, :n], Ur)
    if full:
        U = torch.cat([U, Q[:, :, n:]], dim=-1)
    return U, S, Vh, info


def _empty(batch_shape, m: int, n: int, dtype, device, vectors: bool, full: bool):
    k = min(m, n)
    ucols, vrows = (m, n) if full else (k, k)
    S = torch.zeros((*batch_shape, k), dtype=dtype.to_real(), device=device)
    info = torch.zeros(batch_shape, dtype=torch.int32, device=device)
    if not vectors:
        return None, S, None, info
    U = torch.zeros((*batch_shape, m, ucols), dtype=dtype, device=device)
    Vh = torch.zeros((*batch_shape, vrows, n), dtype=dtype, device=device)
    U.diagonal(dim1=-2, dim2=-1).fill_(1)
    Vh.diagonal(dim1=-2, dim2=-1).fill_(1)
    return U, S, Vh, info


def svd_metal(A: torch.Tensor, full_matrices: bool = False, *, vectors: bool = True,
              fn: str = "svd"):
    """The SVD of each matrix of the (*, m, n) tensor ``A`` (not modified).

    Returns ``(U, S, Vh, info)`` with torch.linalg.svd's shapes for ``full_matrices`` (U and
    Vh None unless ``vectors``) and ``info`` (*) int32: the number of Jacobi sweeps run (the
    last applied no rotation), ``NOT_CONVERGED`` after ``MAX_SWEEPS`` (svd_small:
    `mpslinalg.small.codegen.JACOBI_MAX_SWEEPS`), or ``NON_FINITE`` for
    input with NaN or Inf (then S, U and Vh are NaN).
    """
    *batch_shape, m, n = A.shape
    if A.dtype not in LINALG_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: internal error: the SVD kernels take float32 or "
                        f"complex64, got {A.dtype}")
    batch = math.prod(batch_shape)
    full = full_matrices and vectors
    if batch == 0 or min(m, n) == 0:
        return _empty(batch_shape, m, n, A.dtype, A.device, vectors, full)
    A = contiguous(A, fn).view(batch, m, n)
    if m <= SMALL_MAX and n <= SMALL_MAX:
        U, S, Vh, info = _small(A, vectors, full, fn)
    elif m == n:
        U, S, Vh, info = _square(A, vectors, fn)
    elif m > n:
        U, S, Vh, info = _tall(A, vectors, full, fn)
    else:  # A^H = U' S V'^H, so A = V' S U'^H
        Up, S, Vhp, info = _tall(contiguous(A.mH, fn), vectors, full, fn)
        U, Vh = (Vhp.mH, Up.mH) if vectors else (None, None)
    S = S.view(*batch_shape, S.shape[-1])
    info = info.view(batch_shape)
    if not vectors:
        return None, S, None, info
    U = U.reshape(*batch_shape, *U.shape[-2:])
    Vh = Vh.reshape(*batch_shape, *Vh.shape[-2:])
    return U, S, Vh, info
