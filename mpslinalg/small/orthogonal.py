"""Householder QR of batches of m x n matrices, m, n <= 4, in one pass over the batch: the choice
of path and the entry points (the op family :mod:`mpslinalg.linalg.qr` calls them as its
``"small"`` forward).

Camera code factors millions of 3x3 and 3x4 matrices at once (RQ/QR of projection matrices,
orthogonalising rotations), where torch.linalg.qr pays LAPACK's per-matrix overhead (about
0.6 us per 3x3 matrix on CPU) or, on CUDA, cuSOLVER's per-matrix launches. Here:

- torch backend on CPU, float32/float64: generated SIMD C++ (:func:`mpslinalg.small.cpu_simd.
  small_qr`, blocks of 8 float32 / 4 float64 matrices per AVX2 instruction) on torch's intra-op
  threads, once the library (built in the background from import) is loaded;
- torch backend on CUDA, float32/float64, when ``triton`` imports: one fused Triton kernel
  (:func:`mpslinalg.small.triton_kernels.small_qr`, a matrix per lane in registers), one launch,
  no host synchronisation;
- everything else (complex dtypes, no compiler or no triton): torch.linalg.qr.

Both kernels are generated from :func:`mpslinalg.small.codegen.emit_qr_factor` /
:func:`~mpslinalg.small.codegen.emit_qr_q`, the operations of ``qr_small`` in
``metal/linalg/qr.h`` in the same order: LAPACK geqr2 with larfg's reflectors (beta =
-sign(alpha) * norm, so R's diagonal has LAPACK's signs and Q, R match torch.linalg.qr up to
rounding), column norms by nrm2's scaled sum of squares (entries near 1e+-30 in float32 neither
overflow nor underflow), then orgqr by backward accumulation. float32 results are bit-identical
to the Metal kernel compiled for the CPU by :mod:`mpslinalg.emulator` (tests/small/
test_small_qr.py). The metal backend keeps ``qr_small`` itself (:mod:`mpslinalg.linalg.qr_metal`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._core.backend import resolve_backend
from . import cpu_simd
from .codegen import MAX_N
from .dispatch import _TRITON_DTYPES, _batch_numel, _import_triton_kernels, _triton_available

log = logging.getLogger("mpslinalg.small")

#: Smallest batch for which the small QR path beats torch.linalg.qr through the public
#: mpslinalg.qr, per kernel (the same for every m, n <= 4):
#: "cpu-simd": measured with benchmarks/bench_small_qr.py on the 2-core CI machine (results in
#: benchmarks/results/small_qr.md): the kernel alone beats torch.linalg.qr from ~16-32 matrices,
#: but the public call's custom op costs ~15 us more than the direct torch.linalg.qr call
#: (~4 us + ~0.2 us per 3x3 matrix), which is recovered from batch 128 (3x3 and 4x4: 1.1-1.4x
#: there, 0.6-0.9x at 64).
#: "cuda": the fused Triton kernel. Not measured here (no GPU): torch.linalg.qr on CUDA costs
#: ~43 us per 3x3 matrix (issue figures: 42.6 ms for 1000 on an H200), more than the registered
#: op's dispatch (~0.06 ms on the H200 for the inverse) from a batch of 2 on; to be confirmed
#: with benchmarks/bench_small_qr.py --device cuda.
_TORCH_MIN_BATCH = {"cpu-simd": 128, "cuda": 2}


def _simd_available() -> bool:
    """Whether the orthogonal-factorisation library is loaded (never waits for its build)."""
    return cpu_simd.ORTH_LIBRARY.loaded is not None


def _kind(A: torch.Tensor) -> str | None:
    """Which small-path kernel serves ``A`` on the torch backend ("cpu-simd", "cuda"), or
    None (torch.linalg)."""
    if A.dtype not in cpu_simd.ORTH_DTYPES:
        return None
    if A.device.type == "cpu":
        return "cpu-simd" if _simd_available() else None
    if A.device.type == "cuda" and A.dtype in _TRITON_DTYPES and _triton_available():
        return "cuda"
    return None


def _small_shape(shape) -> bool:
    return len(shape) >= 2 and 1 <= shape[-2] <= MAX_N and 1 <= shape[-1] <= MAX_N


#: Fewest matrices per device type for which the torch backend may take the small QR path.
_FEWEST = {"cpu": _TORCH_MIN_BATCH["cpu-simd"], "cuda": _TORCH_MIN_BATCH["cuda"]}


def may_use_small_qr(A: torch.Tensor) -> bool:
    """A cheap necessary condition of :func:`use_small_qr` on the torch backend (shapes only:
    the public ``qr``'s fast path asks it on every call)."""
    shape = A.shape
    if not _small_shape(shape):
        return False
    fewest = _FEWEST.get(A.device.type)
    return fewest is not None and A.numel() >= fewest * shape[-1] * shape[-2]


def use_small_qr(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute ``torch.linalg.qr(A)`` on ``backend`` (default:
    the one in force): m, n <= 4, float32/float64, on the torch backend only where a kernel is
    available and measured (or estimated, see :data:`_TORCH_MIN_BATCH`) to beat torch.linalg.
    The metal backend keeps its own ``qr_small`` kernel."""
    if not _small_shape(A.shape):
        return False
    if backend is None:
        backend = resolve_backend(A.device, "qr")
    if backend != "torch":
        return False
    kind = _kind(A)
    return kind is not None and _batch_numel(A) >= _TORCH_MIN_BATCH[kind]


# ------------------------------------------------------------------------------ path table


@dataclass(frozen=True)
class Path:
    """One implementation of the small orthogonal factorisations."""

    name: str
    qr: Callable[[torch.Tensor, str], tuple[torch.Tensor, torch.Tensor]]


def _simd_path() -> Path:
    return Path("simd kernel on CPU",
                lambda A, mode: cpu_simd.small_qr(A, mode, torch.get_num_threads()))


def _triton_path() -> Path:
    return Path("triton", _import_triton_kernels().small_qr)


_TORCH = Path("torch.linalg", lambda A, mode: tuple(torch.linalg.qr(A, mode)))

#: The choice, first match wins: (path, whether it serves A). The thresholds of
#: :data:`_TORCH_MIN_BATCH` decide separately whether the public functions take the small path.
_TABLE: list[tuple[Callable[[], Path], Callable[[torch.Tensor], bool]]] = [
    (_simd_path, lambda A: A.device.type == "cpu" and A.dtype in cpu_simd.ORTH_DTYPES
     and _simd_available()),
    (_triton_path, lambda A: A.device.type == "cuda" and A.dtype in _TRITON_DTYPES
     and _import_triton_kernels() is not None),
    (lambda: _TORCH, lambda A: True),
]


def choose_path(A: torch.Tensor) -> Path:
    """The implementation that serves ``A`` (see :data:`_TABLE`)."""
    for make, serves in _TABLE:
        if serves(A):
            path = make()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("small orthogonal path for %s %s: %s", tuple(A.shape), A.dtype,
                          path.name)
            return path
    raise AssertionError("the last row of the table serves every input")


def torch_path(A: torch.Tensor) -> str:
    """Which implementation the small_* functions of this module run for ``A``."""
    return choose_path(A).name


# ------------------------------------------------------------------------------ entry points


def small_qr(A: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of ``torch.linalg.qr(A, mode)`` for A (*, m, n), m, n <= 4 (mode 'r': Q is an
    empty tensor). Forward only, no host synchronisation, A never modified."""
    return choose_path(A).qr(A, mode)
