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
- torch backend otherwise (complex, float64 on CPU, no compiler yet): the same unrolled
  elimination as whole-batch tensor ops on the batch in structure-of-arrays layout
  (`mpslinalg.small.tensor_lu`).

Both follow LAPACK ``getrf`` + ``getrs``: partial pivoting with pivot = argmax |a| (complex:
|re| + |im|, like ``icamax``), lowest row on ties, elimination carried on past a zero pivot,
which is recorded in ``info`` (1-based index of the first zero pivot, 0 = ok); the inverse is
the solution of ``A X = I`` (forward elimination, then column-oriented back substitution like
``trsm``). So results, ``info`` and error semantics match the general LU path.

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
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._core import metal as _metal
from .._core.backend import resolve_backend
from .._core.checks import TORCH_DTYPES
from . import cpu_simd, tensor_lu
from .codegen import MAX_N

log = logging.getLogger("mpslinalg.small")

#: Metal source of the kernels.
_SOURCE = "linalg/small_inverse.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256

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


#: The generated SIMD kernels on torch's intra-op threads (read per call: torch.set_num_threads
#: may change them).
_SIMD = Path("simd kernel on CPU",
             lambda A: cpu_simd.small_inv_ex(A, torch.get_num_threads()),
             lambda A, B: cpu_simd.small_solve_ex(A, B, torch.get_num_threads()),
             lambda A: cpu_simd.small_det(A, torch.get_num_threads()),
             lambda A: cpu_simd.small_slogdet(A, torch.get_num_threads()))


@functools.cache
def _triton_path() -> Path:
    """The fused Triton kernels (made once, when a call first needs them: importing triton
    takes a second)."""
    tri = _import_triton_kernels()
    return Path("triton", tri.small_inv_ex, tri.small_solve_ex, tri.small_det, tri.small_slogdet)


_METAL = Path("metal kernel", _metal_inv, _metal_solve, _metal_det, _metal_slogdet)
_TENSOR_OPS = Path("tensor ops", lambda A: tensor_lu.solve(A, None), tensor_lu.solve,
                   tensor_lu.det, tensor_lu.slogdet)

#: The choice, first match wins: (path, when it serves A on the backend in force). The
#: thresholds of `_TORCH_MIN_BATCH` decide separately whether the small path is taken at
#: all on the torch backend.
_TABLE: list[tuple[Callable[[], Path], Callable[[torch.Tensor, str], bool]]] = [
    (lambda: _METAL, lambda A, backend: backend == "metal"),
    (lambda: _SIMD, lambda A, backend: A.device.type == "cpu" and A.dtype == torch.float32
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
    if path is _METAL or path is _TENSOR_OPS or A.is_contiguous():
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
