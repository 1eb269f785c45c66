"""Batched inverse, determinant and solve for n <= 4 (camera geometry), in one pass over the batch:
the choice of path and the entry points.

Camera-geometry code inverts millions of 2x2 / 3x3 / 4x4 matrices per step (poses, intrinsics,
homographies). A general LU pays per-matrix overhead; this module computes the same LAPACK-style
factorisation for the whole batch at once:

- metal backend: one launch of ``metal/linalg/small_inverse.metal`` per op, one thread per matrix,
  the matrix in registers;
- torch backend on CPU, float32: generated SIMD C++ kernels (`mpslinalg.small.cpu_simd`, the
  Metal kernel's arithmetic over blocks of 8 matrices, one vector instruction per operation for
  the whole block, bit-identical to the Metal kernel in the emulator) on torch's intra-op
  threads, once the library (built in the background from import, `.native`) is loaded;
- torch backend on CUDA, float32/float64, when ``triton`` imports: one fused Triton kernel per op
  (`mpslinalg.small.triton_kernels`, the same arithmetic as the Metal kernel, a matrix per
  lane);
- torch backend otherwise (complex, float64 on CPU, no compiler yet): the batch in
  structure-of-arrays layout ``(n, width, batch)`` and the same unrolled elimination written as
  whole-batch tensor ops (no Python loop over the batch).

Both follow LAPACK ``getrf`` + ``getrs``: partial pivoting with pivot = argmax |a| (complex:
|re| + |im|, like ``icamax``), lowest row on ties, elimination carried on past a zero pivot,
which is recorded in ``info`` (1-based index of the first zero pivot, 0 = ok); the inverse is
the solution of ``A X = I`` (forward elimination, then column-oriented back substitution like
``trsm``). So results, ``info`` and error semantics match the general LU path. The tensor ops
scale a complex column by the pivot's reciprocal as LAPACK's getrf does through torch on the
CPU (`_reciprocal`: NaN for an infinite pivot), so NaN and Inf propagate as in torch.linalg.

The choice is one table (`_TABLE`, `choose_path`; the ``mpslinalg.small`` logger
says at DEBUG level which path served a call). The public API (``mpslinalg.inv``/``det``/
``solve``...) validates, broadcasts, casts and calls these functions when `use_small_path`
says so; they only compute (forward only, no host synchronisation, inputs never modified).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._core import metal as _metal
from .._core.backend import resolve_backend
from .._core.checks import TORCH_DTYPES
from . import cpu_simd
from .codegen import MAX_N

log = logging.getLogger("mpslinalg.small")

#: Metal source of the kernels.
_SOURCE = "linalg/small_inverse.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256

#: Matrices per chunk on CPU (see _chunks): 131072 4x4 float32 systems with identity right-hand
#: sides are 16 MiB of workspace, which L3 holds through the elimination; smaller chunks pay
#: more per-op dispatch than they save (measured: 8192-65536 at batch 1e5 and 1e6).
_CPU_CHUNK = 131072

#: Largest work buffer kept between calls on CPU (see _buffer): covers batch 1e5 at n = 4 while
#: bounding what an idle thread holds (a few buffers of at most this size).
_SCRATCH_MAX_BYTES = 16 << 20

#: Smallest batch for which the torch fast path beats torch.linalg, per device type and n
#: (measured with benchmarks/bench_small_inverse.py, results in benchmarks/results/: the
#: tensor-op path issues a fixed number of whole-batch tensor ops, ~70-90 for n = 4, so below
#: these sizes per-op dispatch costs more than LAPACK's / cuSOLVER's per-matrix work). Chosen on
#: the safe side of the measured crossovers so the small path is never the slower one. n = 1 and
#: device types not listed always use torch.linalg.
#: "cuda": the fused Triton kernel (float32/float64 with triton installed), measured on the
#: H200 (2026-11-30, benchmarks/results/small_inverse.md): the kernel alone beats
#: torch.linalg.inv from batch 1 (0.05-0.09 ms against 0.10-0.18 ms), but the public call adds
#: the registered op's dispatch (~0.06 ms), so public inv_ex is faster only from batch 131072
#: (0.15-0.19 ms against 0.26-0.36 ms; at 16384 still 0.10-0.17 against 0.12-0.16).
#: "cuda-soa": the tensor-op path on CUDA (complex, or no triton), measured.
#: "cpu-simd": the SIMD CPU kernels (float32, `mpslinalg.small.cpu_simd`), measured with 2
#: threads through the public API: the kernel alone beats torch.linalg from batch 16 (11 us
#: against 14-17 us), but the custom op that carries the small path's autograd costs ~15 us
#: more per call than the direct torch.linalg call, which inv recovers from batch 256 (n = 2)
#: and 128 (n = 3, 4). The table is shared by inv, solve, det and slogdet, whose torch.linalg
#: calls are cheaper than inv's: re-measured 2026-12-01 (2-core machine, load average ~30,
#: torch 2.13.0+cpu; the public call with the small path forced against torch.linalg,
#: interleaved, 15-21 rounds of 50 calls, twice; minima, since torch's own batched LU took
#: ~8 ms in some rounds): at 128 3x3 / 4x4 inv 1.2-1.6x, det 1.2-1.6x, slogdet 1.35-1.8x,
#: solve 3.3-3.6x (its small path ~60-70 us at any batch up to 2048); at 512 solve still
#: 1.2-1.8x, the others 0.7-1.07x; at 1024 solve 0.5-1.0x and the others 0.25-0.8x; 2x2 alike
#: (solve 2.5x at 256, 1.5x at 512, 0.4-0.5x at 1024). So 1024 for every n, until the ops get
#: tables of their own.
_TORCH_MIN_BATCH = {
    "cpu": {2: 4096, 3: 8192, 4: 65536},
    "cpu-simd": {2: 1024, 3: 1024, 4: 1024},
    "cuda": {2: 131072, 3: 131072, 4: 131072},
    "cuda-soa": {2: 786432, 3: 524288, 4: 786432},
}


#: Fewest matrices (per device type and n) for which the torch backend may take the small path.
_FEWEST = {
    device: {n: min(limits[n] for kind, limits in _TORCH_MIN_BATCH.items()
                    if kind.split("-")[0] == device and n in limits)
             for n in range(2, MAX_N + 1)}
    for device in ("cpu", "cuda")
}


def may_use_small_path(A: torch.Tensor) -> bool:
    """A cheap necessary condition of `use_small_path` on the torch backend: the public
    functions' fast path asks it on every call, so it reads shapes only."""
    shape = A.shape
    if len(shape) < 3 or shape[-1] > MAX_N or shape[-1] < 2:
        return False
    fewest = _FEWEST.get(A.device.type)
    return fewest is not None and A.numel() >= fewest[shape[-1]] * shape[-1] * shape[-1]


def use_small_path(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute ``A``'s inverse, solve or determinant on
    ``backend`` (default: the one in force; square, 1 <= n <= 4; on the torch backend only
    where it is measured to beat torch.linalg for this device and batch)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2] or not 1 <= A.shape[-1] <= MAX_N:
        return False
    if backend is None:
        backend = resolve_backend(A.device, "inv")
    if backend == "metal":
        return A.dtype in _metal.LINALG_DTYPES
    if A.dtype not in TORCH_DTYPES:
        return False
    device = A.device.type
    if device == "cuda" and not (A.dtype in _TRITON_DTYPES and _TRITON_INSTALLED):
        device = "cuda-soa"
    elif device == "cpu" and A.dtype == torch.float32 and _simd_available():
        device = "cpu-simd"
    limit = _TORCH_MIN_BATCH.get(device, {}).get(A.shape[-1])
    return limit is not None and math.prod(A.shape[:-2]) >= limit


@functools.cache
def _import_triton_kernels():
    """mpslinalg.small.triton_kernels, or None when triton is not installed (or fails to import)."""
    try:
        from . import triton_kernels as _small_triton
    except ImportError:
        return None
    return _small_triton


#: dtypes the fused Triton kernels serve (Triton has no complex type).
_TRITON_DTYPES = (torch.float32, torch.float64)


#: Whether triton is installed (found without importing it, which takes a second; a triton that
#: then fails to import sends calls to the tensor-op path).
_TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


def _simd_available() -> bool:
    """Whether the native CPU library is loaded (never waits for its build; an attribute read,
    so torch.compile traces it without a graph break)."""
    return cpu_simd.LIBRARY.loaded is not None


def _triton_module(A: torch.Tensor):
    """The fused Triton kernels when they serve ``A`` (a CUDA float32/float64 tensor, triton
    importable), else None. Complex dtypes stay on the tensor-op path (Triton has no complex
    type)."""
    if A.device.type != "cuda" or A.dtype not in _TRITON_DTYPES:
        return None
    return _import_triton_kernels()


# ------------------------------------------------------------------------------ torch backend

class _Scratch(threading.local):
    """Per-thread CPU work buffers kept between calls. Freshly allocated multi-megabyte buffers
    cost a page fault per 4 KiB on first touch, which measured 25-60 % of the CPU path's time at
    batch 1e5; the small path's ~20 temporaries are therefore reused (never returned to the
    caller: outputs are always fresh tensors)."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}


_scratch = _Scratch()


def _buffer(name: str, shape: tuple[int, ...], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """An uninitialised work tensor: reused per (name, dtype) and thread on CPU, fresh elsewhere
    (accelerators have caching allocators) or when larger than _SCRATCH_MAX_BYTES."""
    numel = math.prod(shape)
    size = numel * torch.empty(0, dtype=dtype).element_size()
    if device.type != "cpu" or size > _SCRATCH_MAX_BYTES:
        return torch.empty(shape, dtype=dtype, device=device)
    buf = _scratch.buffers.get((name, dtype))
    if buf is None or buf.numel() < numel:
        buf = _scratch.buffers[(name, dtype)] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)


def _abs1_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """|re| + |im| for complex (LAPACK's pivot measure), |x| for real, written into ``out``."""
    if x.is_complex():
        parts = torch.abs(torch.view_as_real(x),
                          out=_buffer("abs1", (*x.shape, 2), out.dtype, x.device))
        return torch.sum(parts, -1, out=out)
    return torch.abs(x, out=out)


def _abs1(x: torch.Tensor) -> torch.Tensor:
    """|re| + |im| for complex (LAPACK's pivot measure), |x| for real."""
    if x.is_complex():
        return torch.view_as_real(x).abs().sum(-1)
    return x.abs()


def _workspace(A: torch.Tensor, rhs: torch.Tensor | None, m: int):
    """The system in structure-of-arrays layout, each matrix entry a batch vector: U = A as a
    contiguous (n, n, batch) tensor and R = the m right-hand sides (None: the identity) as
    (n, m, batch), or None when m = 0. On CPU they are separate tensors (saves a pass over A);
    elsewhere they are views into one (n, n + m, batch) tensor M, also returned, so that each
    row operation is a single kernel launch. Returns (U, R, M or None)."""
    n = A.shape[-1]
    batch = math.prod(A.shape[:-2])
    # Copying a (batch, n*n, 1) -> (1, n*n, batch) transposed view into a contiguous tensor takes
    # torch's fast transpose path (2-4x faster on CPU than copying a permuted (n, n, batch) view).
    if A.device.type == "cpu":
        U = _buffer("U", (n, n, batch), A.dtype, A.device)
        U.view(1, n * n, batch).copy_(A.reshape(batch, n * n, 1).transpose(0, 2))
    elif m == 0:
        U = _transpose(A, batch, n * n).view(n, n, batch)
        # Factored in place: never in the caller's memory.
        if U.untyped_storage().data_ptr() == A.untyped_storage().data_ptr():
            U = U.clone()
    if m == 0:
        return U, None, None
    if A.device.type == "cpu":
        R = torch.empty((n, m, batch), dtype=A.dtype, device=A.device)
        M = None
    else:
        M = torch.empty((n, n + m, batch), dtype=A.dtype, device=A.device)
        M[:, :n].copy_(_transpose(A, batch, n * n).view(n, n, batch))
        U, R = M[:, :n], M[:, n:]
    if rhs is None:
        R.zero_()
        for i in range(n):
            R[i, i].fill_(1)
    else:
        R.copy_(_transpose(rhs, batch, n * m).view(n, m, batch))
    return U, R, M


def _transpose(x: torch.Tensor, batch: int, size: int) -> torch.Tensor:
    """(*, ...) with ``size`` entries per batch element -> contiguous (size, batch)."""
    return x.reshape(batch, size, 1).transpose(0, 2).contiguous().view(size, batch)


#: Integer type of the same width as each dtype's real part (for exact bitwise selects).
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The same memory as integers (complex: (..., 2) real/imag), for branch-free selects."""
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.view(_BITS[x.dtype])


def _factor(U: torch.Tensor, R: torch.Tensor | None, M: torch.Tensor | None,
            n: int) -> torch.Tensor:
    """Factor the workspace of `_workspace` in place; returns the row-interchange count."""
    if U.device.type == "cpu":
        return _factor_select(U, R, n)
    return _factor_gather(U if M is None else M, n)


def _factor_gather(M: torch.Tensor, n: int) -> torch.Tensor:
    """`_factor_select` in fewer, larger ops for accelerators, where each op costs a kernel
    launch: the pivot row by argmax (first maximum, like idamax) and gather, the interchange by
    one select. (On CPU argmax over a short leading dimension and gather are slow.)"""
    w, batch = M.shape[1], M.shape[-1]
    swaps = torch.zeros(batch, dtype=torch.int32, device=M.device)
    offsets = torch.arange(n, device=M.device).view(-1, 1, 1)
    for k in range(n - 1):
        blk = M[k:, k:]  # (n - k, w - k, batch)
        p = torch.argmax(_abs1(blk[:, 0]), dim=0).view(1, 1, -1)
        swaps.add_(p[0, 0] != 0)
        pivot_row = torch.gather(blk, 0, p.expand(1, w - k, batch))
        # The row that held the pivot receives the old row k, the others stay.
        torch.where(p == offsets[1:n - k], blk[:1], blk[1:], out=blk[1:])
        blk[:1].copy_(pivot_row)
        _eliminate(M, k)
    return swaps


def _reciprocal(p: torch.Tensor) -> torch.Tensor:
    """1 / p for complex p as getrf's scaling of the column below the pivot gives it through
    torch on the CPU: scaled by s = |re| + |im| (no overflow or underflow of |p|^2), so NaN for
    an infinite p, where torch's own division (Smith's algorithm, which trsm's division by U's
    diagonal matches) gives 0. p = 0 gives NaN."""
    re, im = p.real, p.imag
    s = re.abs() + im.abs()
    re, im = re / s, im / s
    d = s * (re * re + im * im)
    return torch.complex(re / d, -im / d)


def _div_by_pivot(x: torch.Tensor, p: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """The multipliers x / p of getrf's column below the pivot p: complex as getrf scales
    (x * `_reciprocal` (p) where |p| >= safmin, the smallest normal number, else x / p), real
    by IEEE division (which already gives what LAPACK gives)."""
    if not x.is_complex():
        return torch.div(x, p, out=out)
    scaled = torch.mul(x, _reciprocal(p))
    return torch.where(p.abs() >= torch.finfo(p.real.dtype).tiny, scaled, x / p, out=out)


def _eliminate(M: torch.Tensor, k: int, R: torch.Tensor | None = None) -> None:
    """Step k of the elimination below the (already interchanged) pivot M[k, k], applied to the
    columns k+1.. of M and to all columns of R."""
    piv = M[k, k]
    n, batch, dev = M.shape[0], M.shape[-1], M.device
    # A zero pivot means the column below it is zero too: LAPACK skips the scaling, so the
    # multipliers are 0, not 0/0.
    zero = torch.eq(piv, 0, out=_buffer("zero", (batch,), torch.bool, dev))
    safe = torch.add(piv, zero, out=_buffer("safe", (batch,), M.dtype, dev))
    mult = _div_by_pivot(M[k + 1:, k], safe,
                         out=_buffer("mult", (n - k - 1, batch), M.dtype, dev))
    mult = mult.unsqueeze(1)
    M[k + 1:, k + 1:].addcmul_(mult, M[k:k + 1, k + 1:], value=-1)
    if R is not None:
        R[k + 1:].addcmul_(mult, R[k:k + 1], value=-1)


def _factor_select(M: torch.Tensor, R: torch.Tensor | None, n: int) -> torch.Tensor:
    """Gaussian elimination with partial pivoting of the first n columns of ``M`` (n, w, batch),
    in place; row operations act on all w columns of M and on all of R (n, m, batch) if given
    (so the right-hand sides become L^-1 P B), the multipliers are not stored. Pivots are those
    ``getrf`` chooses: the first row of largest |a| (complex: |re| + |im|), lowest index on
    ties. Returns the number of row interchanges per batch element (integer)."""
    batch, dev = M.shape[-1], M.device
    real = M.real.dtype if M.is_complex() else M.dtype
    ibits = _BITS[real]
    swaps = torch.zeros(batch, dtype=ibits, device=dev)
    for k in range(n - 1):
        cands = n - k - 1
        mag = _abs1_into(M[k:, k], _buffer("mag", (n - k, batch), real, dev))
        # g[i] = 1 where row k+1+i is strictly larger than every row above it (a NaN never
        # is); the pivot is the last such row: onehot[i] = g[i] * prod_{j > i} (1 - g[j]).
        g = _buffer("g", (cands, batch), ibits, dev)
        best = mag[0]
        for i in range(cands):
            torch.gt(mag[i + 1], best, out=g[i])
            if i + 1 < cands:
                best = torch.maximum(best, mag[i + 1], out=_buffer("best", (batch,), real, dev))
        onehot = g
        if cands > 1:
            keep = torch.neg(g[cands - 1], out=_buffer("keep", (batch,), ibits, dev)).add_(1)
            nxt = _buffer("next", (batch,), ibits, dev)
            for i in range(cands - 2, -1, -1):
                if i > 0:
                    torch.neg(g[i], out=nxt).add_(1).mul_(keep)
                onehot[i].mul_(keep)
                keep, nxt = nxt, keep
        for i in range(cands):
            swaps.add_(onehot[i])
        # Interchange row k with the pivot row by an exact bitwise select (xor swap under an
        # all-ones mask): no arithmetic on the values, so Inf and NaN move like any number.
        mask = onehot.neg_().unsqueeze(1)  # (cands, 1, batch): 0 or all bits set
        if M.is_complex():
            mask = mask.unsqueeze(-1)
        for part in (M[k:, k:], None if R is None else R[k:]):
            if part is None:
                continue
            rows = _bits(part)  # (n - k, width, batch[, 2])
            diff = _buffer("diff", tuple(rows.shape[1:]), rows.dtype, dev)
            for i in range(cands):
                torch.bitwise_xor(rows[i + 1], rows[0], out=diff).bitwise_and_(mask[i])
                rows[i + 1].bitwise_xor_(diff)
                rows[0].bitwise_xor_(diff)
        _eliminate(M, k, R)
    return swaps


def _back_substitute(U: torch.Tensor, R: torch.Tensor, n: int) -> torch.Tensor:
    """Solve U X = R in place, column-oriented like LAPACK ``trsm``."""
    for k in range(n - 1, -1, -1):
        R[k].div_(U[k, k].unsqueeze(0))  # trsm's division: 0 for an infinite U_kk
        if k > 0:
            R[:k].addcmul_(U[:k, k].unsqueeze(1), R[k].unsqueeze(0), value=-1)
    return R


def _diag(M: torch.Tensor) -> list[torch.Tensor]:
    return [M[k, k] for k in range(M.shape[0])]


def _info(diag: list[torch.Tensor]) -> torch.Tensor:
    """1-based index of the first zero pivot, 0 when none (int32, per batch element)."""
    batch, dev = diag[0].shape[0], diag[0].device
    info = torch.zeros(batch, dtype=torch.int32, device=dev)
    zero = _buffer("zero", (batch,), torch.bool, dev)
    for k in range(len(diag) - 1, -1, -1):
        info.masked_fill_(torch.eq(diag[k], 0, out=zero), k + 1)
    return info


def _perm_sign(swaps: torch.Tensor, dtype) -> torch.Tensor:
    """(-1)^(number of row interchanges)."""
    return (1 - 2 * (swaps & 1)).to(dtype)


def _chunks(U: torch.Tensor) -> list[slice]:
    """Batch ranges processed one after the other: on CPU, chunks whose workspace stays in cache
    across the ~100 passes of the elimination (a fixed number of chunks per call, not a loop
    over matrices); elsewhere the whole batch at once."""
    batch = U.shape[-1]
    step = _CPU_CHUNK if U.device.type == "cpu" else max(batch, 1)
    return [slice(start, min(start + step, batch)) for start in range(0, batch, step)]


def _torch_solve(A: torch.Tensor, B: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = A.shape[-1]
    batch_shape = A.shape[:-2]
    batch = math.prod(A.shape[:-2])
    m = n if B is None else B.shape[-1]
    U, R, M = _workspace(A, B, m)
    info = torch.empty(batch, dtype=torch.int32, device=A.device)
    for part in _chunks(U):
        Uc = U[..., part]
        Rc = None if R is None else R[..., part]
        _factor(Uc, Rc, None if M is None else M[..., part], n)
        info[part] = _info(_diag(Uc))
        if Rc is not None:
            _back_substitute(Uc, Rc, n)
    if R is None:  # no right-hand sides: only info
        R = torch.empty((n, 0, batch), dtype=A.dtype, device=A.device)
    # (n, m, batch) -> (batch, n, m): returned as a view (batch-innermost strides) rather than
    # paying for a transposing copy.
    X = R.permute(2, 0, 1)
    return X.reshape(*batch_shape, n, m), info.reshape(batch_shape)


def _torch_lu_diag(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The diagonal of U (batch, n) and the permutation sign (batch,) of the matrix torch's det
    factors: A^T for a contiguous real A (`_det_operand`), else A."""
    n = A.shape[-1]
    U, _, _ = _workspace(A, None, 0)
    if not A.is_complex() and A.is_contiguous():
        U = U.transpose(0, 1)
    swaps = torch.empty(U.shape[-1], dtype=torch.int64, device=A.device)
    for part in _chunks(U):
        swaps[part] = _factor(U[..., part], None, None, n)
    return torch.diagonal(U, dim1=0, dim2=1), _perm_sign(swaps, A.dtype)


def _torch_det(A: torch.Tensor) -> torch.Tensor:
    diag, sign = _torch_lu_diag(A)
    return (diag.prod(-1) * sign).reshape(A.shape[:-2])


def _torch_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    diag, sign = _torch_lu_diag(A)
    sign = torch.sgn(diag).prod(-1) * sign  # sgn(0) = 0: singular -> sign 0
    logabs = diag.abs().log().sum(-1)  # log 0 = -inf: singular -> -inf
    return sign.reshape(A.shape[:-2]), logabs.reshape(A.shape[:-2])


# ------------------------------------------------------------------------------ metal backend

def _metal_run(op: str, fn: str, A: torch.Tensor, tensors: list[torch.Tensor],
               scalars: tuple[int, ...] = ()) -> None:
    """One launch of ``<op>_<dtype>_n<N>`` over the batch of A: thread t handles matrix t.
    Kernel arguments: A, ``tensors`` (batch-leading, contiguous), the batch size, ``scalars``."""
    from .._core.copy import contiguous

    batch = math.prod(A.shape[:-2])
    if batch == 0:
        return
    kern = _metal.kernel(_SOURCE, op, A.dtype, A.device, fn=fn, n=A.shape[-1])
    _metal.launch(kern, *(contiguous(t, fn) for t in [A, *tensors]), batch, *scalars,
                  threads=batch, group_size=min(_GROUP, batch))


def _metal_inv(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_inv", "inv_ex", A, [X, info])
    return X, info


def _metal_solve(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(B.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_solve", "solve_ex", A, [B, X, info], (B.shape[-1],))
    return X, info


def _metal_det(A: torch.Tensor) -> torch.Tensor:
    det = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    _metal_run("small_det", "det", A, [det])
    return det


def _metal_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    sign = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    logabs = torch.empty(A.shape[:-2], dtype=torch.float32, device=A.device)
    _metal_run("small_slogdet", "slogdet", A, [sign, logabs])
    return sign, logabs


# ------------------------------------------------------------------------------ path table


@dataclass(frozen=True)
class Path:
    """One implementation of the four small-path functions."""

    name: str
    inv_ex: Callable
    solve_ex: Callable
    det: Callable
    slogdet: Callable


def _simd_path() -> Path:
    def threads() -> int:
        return torch.get_num_threads()

    return Path("simd kernel on CPU",
                lambda A: cpu_simd.small_inv_ex(A, threads()),
                lambda A, B: cpu_simd.small_solve_ex(A, B, threads()),
                lambda A: cpu_simd.small_det(A, threads()),
                lambda A: cpu_simd.small_slogdet(A, threads()))


def _triton_path() -> Path:
    tri = _import_triton_kernels()
    return Path("triton", tri.small_inv_ex, tri.small_solve_ex, tri.small_det, tri.small_slogdet)


_METAL = Path("metal kernel", _metal_inv, _metal_solve, _metal_det, _metal_slogdet)
_TENSOR_OPS = Path("tensor ops", lambda A: _torch_solve(A, None), _torch_solve, _torch_det,
                   _torch_slogdet)

#: The choice, first match wins: (path, when it serves A on the backend in force). The
#: thresholds of `_TORCH_MIN_BATCH` decide separately whether the small path is taken at
#: all on the torch backend.
_TABLE: list[tuple[Callable[[], Path], Callable[[torch.Tensor, str], bool]]] = [
    (lambda: _METAL, lambda A, backend: backend == "metal"),
    (_simd_path, lambda A, backend: A.device.type == "cpu" and A.dtype == torch.float32
     and _simd_available()),
    (_triton_path, lambda A, backend: A.device.type == "cuda" and A.dtype in _TRITON_DTYPES
     and _import_triton_kernels() is not None),
    (lambda: _TENSOR_OPS, lambda A, backend: True),
]


def choose_path(A: torch.Tensor, backend: str | None = None) -> Path:
    """The implementation that serves ``A`` (see `_TABLE`)."""
    backend = backend or resolve_backend(A.device, "inv")
    for make, serves in _TABLE:
        if serves(A, backend):
            path = make()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("small path for %s %s on the %s backend: %s", tuple(A.shape),
                          A.dtype, backend, path.name)
            return path
    raise AssertionError("the last row of the table serves every input")


def torch_path(A: torch.Tensor) -> str:
    """Which implementation the small_* functions run for ``A`` (for benchmarks and logs)."""
    return choose_path(A).name


# ------------------------------------------------------------------------------ entry points

def small_inv_ex(A: torch.Tensor, *, backend: str | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of A (*, n, n), n <= 4; info as ``getrf``'s (first zero pivot, 1-based).
    ``backend``: the call's (default: the one in force), which chooses the kernel."""
    return choose_path(A, backend).inv_ex(A)


def small_solve_ex(A: torch.Tensor, B: torch.Tensor, *, backend: str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B for A (*, n, n), B (*, n, k) of the same batch shape."""
    return choose_path(A, backend).solve_ex(A, B)


def _det_operand(path: Path, A: torch.Tensor) -> torch.Tensor:
    """What ``path``'s det and slogdet get for ``A``. torch.linalg.det and slogdet factor a
    contiguous real A as LAPACK reads its memory, A^T (det(A^T) = det(A)), any other A as it
    is, and where A holds Inf or NaN the two factorisations give different values. The
    generated kernels factor the transpose of the contiguous matrix they read
    (`mpslinalg.small.codegen.TRANSPOSED_OPS`) and the tensor ops choose by layout
    themselves, so the kernels get A^T (contiguous where A is column-major) for any A but a
    contiguous one. The Metal kernel factors A on the metal backend."""
    if path in (_METAL, _TENSOR_OPS) or A.is_contiguous():
        return A
    return A.mT


def small_det(A: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """det(A) for A (*, n, n), n <= 4: product of U's diagonal times the permutation sign
    (on the torch backend of the matrix torch's det factors, see `_det_operand`)."""
    path = choose_path(A, backend)
    return path.det(_det_operand(path, A))


def small_slogdet(A: torch.Tensor, *, backend: str | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det|) for A (*, n, n), n <= 4; singular gives (0, -inf). A real matrix
    whose log|det| is NaN (a NaN in U's diagonal) has sign 0, as torch's product of sgn(U_kk)
    gives (sgn(NaN) = 0), on every path and device; the kernels would give +-1."""
    path = choose_path(A, backend)
    sign, logabs = path.slogdet(_det_operand(path, A))
    if not sign.is_complex():  # complex sgn(NaN) is NaN: the kernels give that already
        sign = sign.masked_fill(logabs.isnan(), 0)
    return sign, logabs
