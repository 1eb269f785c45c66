"""Host side of metal/linalg/triangular.metal: triangular solves (LAPACK trsm / trsv) with the
triangles of a packed square matrix, in place (but by inverted diagonal blocks), optionally
applying LAPACK row interchanges.

``trsm`` runs a thread per right-hand side; ``trsv`` a threadgroup per right-hand side, for few
of them on large matrices. Both take their flags as one ``TriSolveParams`` struct (packed by
`mpslinalg._core.metal_params` from its declaration in metal/linalg/triangular.h). From
BLOCKED_MIN_N rows on, the blocked solve replaces both: per diagonal block of ``bs =
block_rows(n)`` rows (a multiple of BLOCK), ``trsm_diag`` (the block's rows, a simdgroup per
right-hand side, by sub-blocks of BLOCK rows) and ``trsm_update`` (the rows still to solve, on
the shared simdgroup-matrix product over many threadgroups): 2 * ceil(n / bs) - 1 launches per
triangular solve, whatever the batch, and one more per solve whose steps interchange rows
(from PERM_MIN_N rows, ungated: the pivots' permutation, `_permutation`, which X's rows are
then gathered by). A *gate* (the iterative refinement's
per-matrix status, `refine_metal`) makes the blocked kernels skip the batch elements whose word
is non-zero, decided on the device; a gated solve is the blocked one unless trsv is asked for
(trsv also honours the gate; trsm does not).

The solve by inverted diagonal blocks (``kind="inverse"``, asked for by name: `use_inverse`'s
rule takes it nowhere now, INVERSE_MIN_BLOCK; never with a gate; a step
with row interchanges keeps the blocked solve), as MAGMA's and cuBLAS-style trsm: the diagonal
blocks D_s of op(M) do not depend on B, so they are gathered into one contiguous (ceil(n / bs)
* batch, bs, bs) tensor and inverted at once (`diagonal_block_inverses`, LAPACK trtri by
`inverse_lower`; an upper D_s through its adjoint, U^-1 = ((U^H)^-1)^H, read as a conjugate-
transposed operand), then each block is X_s = D_s^-1 R_s, a GEMM, followed by the update of
the rows still to solve (trsm_update's product, R_rest -= op(M)[rest, s] X_s), both on the
shared kernel through `gemm_metal.launch_gemm`: the solution goes to a second tensor (a
product's output must not overlap its input), so no staging copy. Launches per step: one for
the inverses (INVERSE_TRTRI_BLOCK) plus 2 ceil(n / bs) - 1, whatever the batch (32 at n = 4096
against the blocked solve's 31), and two torch copies (the blocks gathered, inverse_lower's
identity); no host reads. What it trades: substitution is backward stable
componentwise (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., Thm 8.5),
a product with a computed inverse is not: its residual is bounded by about cond(D_s) u |D_s|
|x_s| (Du Croz and Higham, "Stability of methods for matrix inversion", IMA J. Numer. Anal. 12,
1992; Demmel, Higham and Schreiber, "Stability of block LU factorization", Numer. Linear
Algebra Appl. 2, 1995, for the inverted diagonal blocks of block algorithms). Measured in the
emulator with 32- to 256-row blocks (tests/linalg/test_lu_metal.py, docs/lu.rst): the
normwise xGET02 ratios of LU solves and of hard triangles stay far below 30, the componentwise
(Oettli-Prager) backward error of graded and +-1 triangles within n u, Kahan's matrix (n =
130, cond 1e21) moving from 0.01 n u to 0.45 n u: triangular inverses computed by substitution
are far more accurate than that bound on such matrices, and the rule is set by speed, not
accuracy.
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
PERM_MIN_N = 256  # the blocked solve's interchanges by a permutation from this order on
#: The rule of the solve by inverted diagonal blocks (`use_inverse`): diagonal blocks of at
#: least this many rows, or None: never. Measured on an NVIDIA H200 through the CUDA executor
#: (benchmarks/results/h200_round7.md; not an Apple GPU) at 4096^2, upper, 256-row blocks, the
#: answer changed with the kernels. Call 1 (the old tile product and trsm_diag): with 64
#: right-hand sides 2561 us inverse against 2284 us blocked, with one 1064 against 1892. Call
#: 2 (the tile product fetching a step's entries together): 1414 against 1622, and 1072
#: against 1505. Call 3 (trsm_diag's shorter chain as well): 2122 against 1123 us (cuBLAS 1241)
#: and 1190 against 927 us, the blocked solve faster by wall time at both counts (the inverse's
#: device time, 599 against 962 us, wins with one right-hand side, but its two torch copies and
#: its extra launch cost the host more). So the rule takes the blocked solve everywhere, which
#: also keeps substitution's componentwise stability; the inverse kind stays for callers that
#: ask for it (and for the benchmark to time).
INVERSE_MIN_BLOCK: int | None = None
#: `diagonal_block_inverses` inverts the blocks of bs rows (inverse_lower) by diagonal blocks of
#: at most this many rows: the whole block up to 256 (MAX_BLOCK), one trsm_diag launch for all
#: the blocks and their bs right-hand sides together (its 36 staged tiles at bs = 256 once per
#: solve, over ceil(n / bs) * batch * bs / 4 threadgroups), where inverse_lower's own
#: blocks of 32 rows took 15 launches (8 trsm_diag of one tile, 7 updates of depth 32).
#: Chosen for fewer launches. On the H200 at 4096^2 (h200_round7.md, call 2) the whole solve
#: took 1072 us this way against 1229 us inverting by 32-row blocks with one right-hand side
#: (where the 14 launches more cost the host more than they save the device: 788 against 701
#: us of device time), and 1414 against 1264 us with 64.
INVERSE_TRTRI_BLOCK = 256

#: The blocked solve's diagonal blocks (`block_rows`): the fewest rows, a multiple of BLOCK,
#: giving at most BLOCK_STEPS blocks, and at most MAX_BLOCK rows: 64 at n = 256, 128 at 512,
#: 256 from 897 on (with BLOCK_STEPS = 16 before: 32 up to 512, 64 to 1024, 128 to 2048). A
#: solve is 2 ceil(n / bs) - 1 launches: at n = 4096 with bs = 32 its 255 launches of ~10-20 us
#: each, not its work (a GEMM of n^2 k / 2 multiply-adds), set its time on the H200 through the
#: CUDA executor (4.9 ms against cuBLAS's 1.2 ms with 64 right-hand sides). A larger bs moves a
#: share bs / n of the work from trsm_update's product (many threadgroups) into trsm_diag (a
#: simdgroup per right-hand side, a single one for k = 1), whose serial path is bs dependent
#: broadcast steps (n per solve, whatever bs) plus (bs / 32) (bs / 32 + 1) / 2 staged tiles,
#: each two barriers and a chain of 32 products (its device reads overlap the two previous
#: tiles' work): per solve 2 n / bs launches against about n bs / 2048 tiles, least at
#: bs = 64 sqrt(launch / tile), 200-400 for a launch of 10-40 tiles. BLOCK_STEPS = 16: 31
#: launches per solve, trsm_diag's share of the work about 1/16 (at most 1/8, bs being rounded
#: up to a multiple of 32). MAX_BLOCK = 256: 36 tiles a trsm_diag launch; larger orders take
#: more blocks instead (63 launches at n = 8192). Both are estimates from those counts. On the
#: H200 at 4096^2 (bench_cuda_executor.py --sections trsm --trsm-blocks rule,128,512;
#: h200_round7.md, call 1, before the tile product fetched a step's entries together) the
#: blocked solve took 2146 / 2284 / 2573 us with 128 / 256 / 512-row blocks for 64 right-hand
#: sides and 1807 / 1892 / 2218 us for one: 128 rows was 5-6% faster there. Later
#: (h200_round11.md, call 5: lu_solve_metal alone, both triangular solves, interleaved) the
#: launches set the time below 4096: with BLOCK_STEPS 16 / 8 / 4 at n = 1024, 775 / 613 / 585
#: us with one right-hand side and 749 / 636 / 606 with 64; at 2048, 1208 / 1170 / 1169 and
#: 1304 / 1245 / 1239; at 4096 (256 rows in each) within 1%. Hence 4 (orders below 1024 were
#: not timed; there too it cuts launches, 31 -> 7 at n = 512, for a longer trsm_diag chain).
BLOCK_STEPS = 4
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


def use_inverse(n: int, k: int) -> bool:
    """Whether `_solve_left`'s rule takes the inverted diagonal blocks (``kind="inverse"``) for
    order n and k right-hand sides (the reasons beside INVERSE_MIN_BLOCK; k does not decide)."""
    return INVERSE_MIN_BLOCK is not None and block_rows(n) >= INVERSE_MIN_BLOCK


def substitution_kind(n: int, k: int, gated: bool = False) -> str:
    """The kind of `_solve_left` that substitutes with the triangle itself (never "inverse"):
    blocked from BLOCKED_MIN_N on or with a gate, else trsv for few right-hand sides, else trsm."""
    if n >= BLOCKED_MIN_N or gated:
        return "blocked"
    return "trsv" if k <= TRSV_MAX_RHS and n >= TRSV_MIN_N else "trsm"


def _solve_left(M, pivots, X, steps, fn: str, gate=None, kind=None) -> torch.Tensor:
    """The solution of the solves ``steps`` with M, X (contiguous (*, n, k)) the right-hand
    sides: X itself, overwritten, or (a step of kind "inverse") a new tensor, X then being
    spoilt. ``gate``: see `_solve_left_blocked` (the blocked solve and trsv honour it).
    ``kind``: "inverse", "blocked", "trsv" or "trsm", or None for the rule of the module
    docstring (`use_inverse`, else `substitution_kind`); "inverse" takes the blocked solve for
    the steps with row interchanges."""
    n, k = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    if n == 0 or k == 0 or batch == 0:
        return X
    if kind is None:
        kind = ("inverse" if gate is None and use_inverse(n, k) else
                substitution_kind(n, k, gate is not None))
    if kind == "inverse":
        if gate is not None:
            raise ValueError(f"mpslinalg.{fn}: internal error: the inverse kind takes no gate")
        spare = None
        for step in steps:
            if step[3]:  # interchanges: applied by trsm_diag
                X = _solve_left_blocked(M, pivots, X, (step,), fn)
            else:
                X, spare = _solve_left_inverse(M, X, step, fn, spare), X
        return X
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
    perm = _permutation(pivots, n, steps, fn) if gate is None else None
    for lower, unit, trans, swaps in steps:
        by_perm = swaps if perm is not None else 0  # the interchanges as gathers, not in trsm_diag
        swaps -= by_perm
        if by_perm == 1:  # P^T X = X[perm]
            X = _gather_rows(X, perm)
        for s in range(nblk):
            i0 = (s if lower else nblk - 1 - s) * bs
            params = block_params(n, k, lower=lower, unit=unit, trans=trans, swaps=swaps, i0=i0,
                                  bs=bs, ldx=k, x_batch=n * k, gate_stride=stride)
            launch(diag, M, pivots, X, params, words, **diag_grid(k, batch))
            rows = n - min(n, i0 + bs) if lower else i0
            if rows > 0:
                launch(update, M, X, params, words, **gemm_metal.gemm_grid(rows, k, batch))
        if by_perm == 2:  # P X = X[perm^-1]
            inverse = torch.empty_like(perm).scatter_(
                -1, perm, torch.arange(n, device=perm.device).expand_as(perm))
            X = _gather_rows(X, inverse)
    return X


def _gather_rows(X, index):
    """A new contiguous tensor: row i of each matrix of X (*, n, k) is row index[..., i];
    complex X through its real view (gathers of complex tensors are not on every device)."""
    if X.is_complex():
        rows = torch.take_along_dim(torch.view_as_real(X), index[..., None, None], dim=-3)
        return torch.view_as_complex(rows)
    return torch.take_along_dim(X, index.unsqueeze(-1), dim=-2)


def _permutation(pivots, n, steps, fn):
    """The permutation of the pivots (`lu_metal.pivots_to_permutation_metal`) when a step of the
    blocked solve interchanges rows and n is at least PERM_MIN_N, else None. trsm_diag applies
    interchanges one after another from one lane of each right-hand side's simdgroup, each
    waiting on the last one's round trip to memory: about 0.2 us an interchange through the
    CUDA executor, a third of lu_solve at n = 1024 to 4096. The permutation, computed once in
    threadgroup memory, turns them into one gather (or scatter) of X's rows by torch."""
    if n < PERM_MIN_N or not any(step[3] for step in steps):
        return None
    from . import lu_metal  # lu_metal imports this module

    return lu_metal.pivots_to_permutation_metal(pivots, n, fn=fn)


def diagonal_block_inverses(M: torch.Tensor, bs: int, *, lower: int, unit: int, trans: int,
                            fn: str) -> torch.Tensor:
    """The inverses of the diagonal blocks D_0, D_1, ... of bs rows of the triangle op(M) that
    the flags name (those of `block_params`; M contiguous (*, n, n), its batch flattened to b
    matrices): a new contiguous (ceil(n / bs), b, bs, bs) W, W[s] = D_s^-1 for a lower op(M),
    D_s^-H for an upper one (`inverse_lower` inverts lower triangles: D_s^-1 is then
    W[s]^H, applied as a conjugate-transposed operand, never formed). A short last block is
    padded by the identity (its inverse is W[s]'s leading block). One `inverse_lower` over all
    the blocks of the batch, by diagonal blocks of min(bs, INVERSE_TRTRI_BLOCK) rows: one
    trsm_diag launch for bs up to 256."""
    n = M.shape[-1]
    batch = math.prod(M.shape[:-2])
    nblk, full = _metal.ceil_div(n, bs), n // bs
    Mb = M.reshape(batch, n, n)
    blocks = torch.empty((nblk, batch, bs, bs), dtype=M.dtype, device=M.device)
    if full:
        # block s of a full matrix is its rows / columns [s bs, s bs + bs): the diagonal of the
        # (batch, full, bs, full, bs) view of the leading full * bs rows and columns
        lead = Mb[:, :full * bs, :full * bs].unflatten(1, (full, bs)).unflatten(3, (full, bs))
        blocks[:full].copy_(lead.diagonal(dim1=1, dim2=3).permute(3, 0, 1, 2))
    if full < nblk:
        r = n - full * bs
        blocks[full].zero_().diagonal(dim1=-2, dim2=-1).fill_(1)
        blocks[full, :, :r, :r].copy_(Mb[:, full * bs:, full * bs:])
    # op(M) lower: D_s is the stored lower triangle (trans = 0) or the adjoint of the upper one
    # (trans = 1), inverse_lower's two triangles as they are; op(M) upper: D_s^H is the other.
    return inverse_lower(blocks, trans=int(bool(lower) == bool(trans)), unit=unit, fn=fn,
                         block=min(bs, INVERSE_TRTRI_BLOCK))


def _solve_left_inverse(M, X, step, fn: str, out=None) -> torch.Tensor:
    """One step (lower, unit, trans, swaps = 0) of `_solve_left` by inverted diagonal blocks of
    `block_rows` (n) rows (see the module docstring): W = `diagonal_block_inverses`, then per
    block in solve order X_s = D_s^-1 R_s (gemm, read from X into the block's rows of a new
    tensor Y, or of ``out``) and R_rest -= op(M)[rest, s] X_s (gemm, in X: trsm_update's
    product). Returns Y; X is spoilt."""
    lower, unit, trans, _ = step
    n, k = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    bs = block_rows(n)
    nblk = _metal.ceil_div(n, bs)
    inverses = diagonal_block_inverses(M, bs, lower=lower, unit=unit, trans=trans, fn=fn)
    Y = torch.empty_like(X) if out is None else out
    # flat views: a block of rows of X, Y or M is bound from its first element (launch_gemm)
    rhs, sol, mat = X.view(-1), Y.view(-1), M.view(-1)
    op_d, op_m = ("N" if lower else "C"), ("C" if trans else "N")
    strides = {"ldb": k, "ldc": k, "stride_b": n * k, "stride_c": n * k, "fn": fn}
    for s in range(nblk):
        blk = s if lower else nblk - 1 - s
        i0 = blk * bs
        rows = min(bs, n - i0)
        gemm_metal.launch_gemm(inverses[blk], rhs[i0 * k:], sol[i0 * k:], rows, k, rows, batch,
                               lda=bs, stride_a=bs * bs, op_a=op_d, **strides)
        r0, rest = (i0 + rows, n - i0 - rows) if lower else (0, i0)
        if rest:
            # op(M)[rest, s]: M's block at (r0, i0), or the adjoint of the one at (i0, r0)
            at = i0 * n + r0 if trans else r0 * n + i0
            gemm_metal.launch_gemm(mat[at:], sol[i0 * k:], rhs[r0 * k:], rest, k, rows, batch,
                                   lda=n, stride_a=n * n, op_a=op_m, alpha=-1.0, beta=1.0,
                                   **strides)
    return Y


def inverse_lower(M: torch.Tensor, *, trans: int, fn: str, unit: int = 0,
                  block: int | None = None) -> torch.Tensor:
    """X = T^-1 (LAPACK trtri) for the lower triangular T of each matrix of the contiguous
    (*, n, n) tensor M: its lower triangle (``trans=0``), or the conjugate transpose of its upper
    one (``trans=1``); the other triangle is not read, nor the diagonal with ``unit=1`` (T's
    diagonal taken as 1: the L of a packed LU). A new contiguous X, exactly zero above its
    diagonal for finite T.

    The solve T X = I by the triangular solves; from BLOCKED_MIN_N on, the blocked one skips the
    columns of X still known to be zero: at the diagonal block of rows [i0, i0 + bs) only
    columns [0, i0 + bs) are nonzero, so the solve costs n^3 / 6 multiply-adds, not n^3 / 2.
    ``block``: that solve's diagonal block rows (a multiple of BLOCK up to DIAG_MAX_BLOCK),
    then taken at every order; None: `block_rows` (n), from BLOCKED_MIN_N on."""
    n = M.shape[-1]
    X = torch.eye(n, dtype=M.dtype, device=M.device).expand(M.shape).contiguous()
    batch = math.prod(M.shape[:-2])
    no_swaps = torch.zeros(1, dtype=torch.int32, device=M.device)
    if (block is None and n < BLOCKED_MIN_N) or batch == 0:
        return _solve_left(M, no_swaps, X, ((1, unit, trans, 0),), fn,
                           kind=substitution_kind(n, n))
    diag = _metal.kernel(_SOURCE, "trsm_diag", M.dtype, M.device, fn=fn)
    update = _metal.kernel(_SOURCE, "trsm_update", M.dtype, M.device, fn=fn)
    bs = block_rows(n) if block is None else block
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
