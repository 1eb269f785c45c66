"""Which implementation serves each n <= 4 op: one declarative table per op and one chooser.

A table (`TABLES`, by op) lists the op's rows in the order they are tried: the path (an
implementation: `SIMD_CPU`, `TRITON`, `METAL`, `TENSOR_OPS`), the backend and device type it
runs on, the dtypes it serves, whether it is ready (the native library loaded, triton
installed), and from which batch of each order, max(m, n), the public call through it beats
torch.linalg, with the measurement that says so and its date. The first row that serves a call
decides both whether the call takes the small path (`takes_small_path`: its batch at least the
row's crossover) and which implementation runs (`choose`); where no row serves, the small
functions run the table's fallback. `may_take_small_path` is the shapes-only necessary
condition the public functions' fast paths ask on every call.

The entry points of `mpslinalg.small.dispatch` (inv, solve, det, slogdet) and
`mpslinalg.small.orthogonal` (qr, svd, eigh) bind each path's name to their functions; the
``use_small_*`` / ``may_use_small_*`` / ``choose_path`` / ``torch_path`` functions there are
queries of these tables, and ``python -m mpslinalg info`` prints them. A new n <= 4 op is its
description in `mpslinalg.small.codegen` and its table here (with each target's launch wrapper
of the op, and its entry point).

Everything the queries read is an attribute or a constant (the libraries' ``loaded``, whether
triton is installed), so torch.compile traces them without a graph break; importing triton
(about a second) happens only when a call first runs the Triton kernels (`Row.loads`).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from .._core import metal as _metal
from .._core.backend import resolve_backend
from .._core.checks import TORCH_DTYPES
from . import cpu_simd
from .codegen import MAX_N

log = logging.getLogger("mpslinalg.small")

#: The paths, by the names `choose`, the logs and ``info`` give them.
SIMD_CPU = "simd kernel on CPU"  # generated SIMD C++ (`mpslinalg.small.cpu_simd`)
TRITON = "triton"  # generated fused Triton kernels (`mpslinalg.small.triton_kernels`)
METAL = "metal kernel"  # the Metal kernels, one thread per matrix (metal backend)
TENSOR_OPS = "tensor ops"  # whole-batch tensor ops (`mpslinalg.small.tensor_lu`)
TORCH_LINALG = "torch.linalg"  # no kernel: torch.linalg itself

#: dtypes the fused Triton kernels serve (Triton has no complex type).
TRITON_DTYPES = (torch.float32, torch.float64)

#: Whether triton is installed (found without importing it, which takes a second; a triton that
#: then fails to import sends calls to the next row, see `Row.loads`).
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


@functools.cache
def import_triton_kernels():
    """mpslinalg.small.triton_kernels, or None when triton is not installed (or fails to import)."""
    try:
        from . import triton_kernels
    except ImportError:
        return None
    return triton_kernels


def _always() -> bool:
    return True


def _lu_kernels_loaded() -> bool:
    """Whether the native LU library is loaded (never waits for it; an attribute read)."""
    return cpu_simd.LIBRARY.loaded is not None


def _orthogonal_kernels_loaded() -> bool:
    """Whether the native QR / SVD / eigh library is loaded (never waits for it)."""
    return cpu_simd.ORTH_LIBRARY.loaded is not None


def _expm_kernels_loaded() -> bool:
    """Whether the native matrix-exponential library is loaded (never waits for it)."""
    return cpu_simd.EXPM_LIBRARY.loaded is not None


def _chol_kernels_loaded() -> bool:
    """Whether the native Cholesky-family library is loaded (never waits for it)."""
    return cpu_simd.CHOL_LIBRARY.loaded is not None


def _eig_kernels_loaded() -> bool:
    """Whether the native eig library is loaded (never waits for it)."""
    return cpu_simd.EIG_LIBRARY.loaded is not None


def _triton_installed() -> bool:
    return TRITON_INSTALLED


def _triton_imports() -> bool:
    return import_triton_kernels() is not None


#: Every batch: the row serves from one matrix on (the metal backend's one-launch kernels).
EVERY_BATCH = None


@dataclass(frozen=True)
class Row:
    """One path of an op's table: where it runs, what it serves and from which batch."""

    path: str
    backend: str
    #: device type, or None: any (the metal backend runs wherever it is allowed to)
    device: str | None
    dtypes: tuple[torch.dtype, ...]
    #: order (max(m, n)) -> smallest batch from which the public call through this path beats
    #: torch.linalg; an order not listed: never; `EVERY_BATCH`: from one matrix on
    min_batch: Mapping[int, int] | None
    #: when ``min_batch`` was measured (ISO date; None: nothing to measure) and how
    date: str | None
    measured: str
    #: cheap (an attribute read, traced by torch.compile): whether the path can run now
    ready: Callable[[], bool] = _always
    #: whether the path loads (may import, once); asked only by `choose`, after ``ready``
    loads: Callable[[], bool] = _always

    def serves(self, A: torch.Tensor, backend: str) -> bool:
        """Whether the row serves ``A`` on ``backend`` now (whatever the batch)."""
        return (self.backend == backend and self.device in (None, A.device.type)
                and A.dtype in self.dtypes and self.ready())

    def describe(self) -> str:
        """One line for ``python -m mpslinalg info``: the path, where it runs, what it serves,
        whether it is ready here, from which batch of each order on, and when that was
        measured."""
        where = f"{self.backend} {self.device or 'any'}"
        dtypes = " ".join(str(dtype).removeprefix("torch.") for dtype in self.dtypes)
        if self.min_batch is EVERY_BATCH:
            batches = "every batch"
        else:
            batches = f"n = 1..{MAX_N} from batch " + ", ".join(
                str(self.min_batch.get(n, "-")) for n in range(1, MAX_N + 1))
        ready = "ready" if self.ready() else "not ready"
        measured = f" (measured {self.date})" if self.date else ""
        return f"{self.path:<18}  {where:<10}  {dtypes:<37}  {ready:<9}  {batches}{measured}"


@dataclass(frozen=True)
class Table:
    """An op's rows, first match wins, and what the small functions run where none serves."""

    #: the public function whose backend a call resolves (``resolve_backend``'s ``fn``)
    fn: str
    #: the public functions whose small path the table decides
    functions: tuple[str, ...]
    #: the (m, n) the kernels serve
    shapes: frozenset[tuple[int, int]]
    rows: tuple[Row, ...]
    fallback: str
    #: (device type, dtype, m, n) -> the fewest elements from which some torch-backend row may
    #: serve the batch: the smallest crossover of max(m, n) among the rows on that device
    #: times m n, for the dtypes some row there serves (one lookup: the fast paths ask
    #: `may_take_small_path` on every call)
    _fewest_elements: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        torch_rows = [row for row in self.rows if row.backend == "torch"]
        fewest = {}
        for device in {row.device for row in torch_rows}:
            rows = [row for row in torch_rows if row.device == device]
            for m, n in self.shapes:
                limits = [row.min_batch[max(m, n)] for row in rows
                          if max(m, n) in row.min_batch]
                if limits:
                    fewest.update(dict.fromkeys(
                        ((device, dtype, m, n) for row in rows for dtype in row.dtypes),
                        min(limits) * m * n))
        object.__setattr__(self, "_fewest_elements", fewest)

    def row_for(self, A: torch.Tensor, backend: str) -> Row | None:
        """The first row that serves ``A`` on ``backend``, readiness included."""
        for row in self.rows:
            if row.serves(A, backend):
                return row
        return None

    def row(self, path: str, device: str | None) -> Row:
        """The row of ``path`` on ``device``."""
        return next(row for row in self.rows if row.path == path and row.device == device)

    def crossovers(self, device: str, order: int) -> list[int]:
        """The batches at which the torch backend's choice for ``order`` on ``device`` changes
        hands (one per row that lists the order)."""
        return sorted({row.min_batch[order] for row in self.rows
                       if row.backend == "torch" and row.device == device
                       and order in row.min_batch})


def _on_torch_threads(name: str) -> Callable:
    return lambda *args: getattr(cpu_simd, name)(*args, torch.get_num_threads())


#: The generated SIMD kernels on torch's intra-op threads (read per call: torch.set_num_threads
#: may change them), under the names of the Triton module's functions.
_SIMD_FUNCTIONS = SimpleNamespace(**{name: _on_torch_threads(name) for name in (
    "small_inv_ex", "small_solve_ex", "small_det", "small_slogdet", "small_qr", "small_svd",
    "small_eigh", "small_matrix_exp", "small_cholesky_ex", "small_solve_triangular",
    "small_cholesky_solve", "small_eig")})


def functions(path: str, own: Mapping[str, object]) -> object:
    """The functions of ``path`` (``small_inv_ex``, ``small_qr``, ...): the generated kernels'
    (the Triton module imported when a call first needs it), or those an op family binds to
    its other paths itself (``own``: the Metal host code, tensor ops, torch.linalg)."""
    if path == TRITON:
        return import_triton_kernels()
    if path == SIMD_CPU:
        return _SIMD_FUNCTIONS
    return own[path]


# ------------------------------------------------------------------------------ the tables

_SQUARES = frozenset((n, n) for n in range(1, MAX_N + 1))
_ALL_SHAPES = frozenset((m, n) for m in range(1, MAX_N + 1) for n in range(1, MAX_N + 1))


def _each_order(batch: int, first: int = 1) -> dict[int, int]:
    return dict.fromkeys(range(first, MAX_N + 1), batch)


# inv, solve, det, slogdet (one table: the ops get tables of their own once measured apart).
# The tensor-op path issues a fixed number of whole-batch tensor ops (~70-90 for n = 4), so
# below its crossovers per-op dispatch costs more than LAPACK's / cuSOLVER's per-matrix work.
# The crossovers are chosen on the safe side of the measured ones, so the small path is never
# the slower one; n = 1 is torch.linalg's at every batch.
_LU = Table("inv", ("inv", "inv_ex", "solve", "solve_ex", "det", "slogdet", "logdet"), _SQUARES, (
    Row(METAL, "metal", None, _metal.LINALG_DTYPES, EVERY_BATCH, None,
        "one launch of metal/linalg/small_inverse.metal per call, one thread per matrix"),
    # The kernel alone beats torch.linalg from batch 16 (11 us against 14-17 us), but the
    # custom op that carries the small path's autograd costs ~15 us more per call than the
    # direct torch.linalg call, which inv recovers from batch 256 (n = 2) and 128 (n = 3, 4);
    # solve, det and slogdet, whose torch.linalg calls are cheaper than inv's, later: at 128
    # 3x3 / 4x4 inv 1.2-1.6x, det 1.2-1.6x, slogdet 1.35-1.8x, solve 3.3-3.6x (its small
    # path ~60-70 us at any batch up to 2048); at 512 solve still 1.2-1.8x, the others
    # 0.7-1.07x; at 1024 solve 0.5-1.0x and the others 0.25-0.8x; 2x2 alike (solve 2.5x at
    # 256, 1.5x at 512, 0.4-0.5x at 1024). So 1024 for every n.
    Row(SIMD_CPU, "torch", "cpu", (torch.float32,), {2: 1024, 3: 1024, 4: 1024},
        "2026-12-01", "2-core machine, load average ~30, torch 2.13.0+cpu, 2 threads: the public "
        "call with the small path forced against torch.linalg, interleaved, 15-21 rounds of 50 "
        "calls, twice, minima (benchmarks/bench_overhead.py's harness, "
        "benchmarks/results/overhead.md)", ready=_lu_kernels_loaded),
    Row(TENSOR_OPS, "torch", "cpu", TORCH_DTYPES, {2: 4096, 3: 8192, 4: 65536},
        "2026-11-29", "2 threads, torch 2.11 (benchmarks/bench_small_inverse.py, "
        "benchmarks/results/small_inverse.md, whole-batch tensor ops)"),
    # The kernel alone beats torch.linalg.inv from batch 1 (0.05-0.09 ms against 0.10-0.18
    # ms), but the public call adds the registered op's dispatch (~0.06 ms), so public inv_ex
    # is faster only from batch 131072 (0.15-0.19 ms against 0.26-0.36 ms; at 16384 still
    # 0.10-0.17 against 0.12-0.16).
    Row(TRITON, "torch", "cuda", TRITON_DTYPES, _each_order(131072, first=2),
        "2026-11-30", "NVIDIA H200, public inv_ex against torch.linalg.inv "
        "(benchmarks/results/small_inverse.md, H200 sweep of the crossover)",
        ready=_triton_installed, loads=_triton_imports),
    Row(TENSOR_OPS, "torch", "cuda", TORCH_DTYPES, {2: 786432, 3: 524288, 4: 786432},
        "2026-11-29", "NVIDIA H200, torch 2.11 + CUDA 13.0 (benchmarks/results/small_inverse.md, "
        "whole-batch tensor ops)"),
), fallback=TENSOR_OPS)

# qr. CPU: the kernel alone beats torch.linalg.qr from ~16-32 matrices, but the public call's
# custom op costs ~15-20 us more than the direct torch.linalg.qr call (~4 us + ~0.1 / 0.2 /
# 0.25 us per 2x2 / 3x3 / 4x4 matrix), which is recovered from batch ~200 (2x2: 0.7x at 128;
# 3x3: 0.8-0.9x at 128, 5x at 1000) and ~100 (3x4, 4x3, 4x4: 1.2-1.3x at 128, 0.6-0.9x at
# 64). CUDA: torch.linalg.qr costs ~0.2 ms + ~60 us per 3x3 matrix (0.26 ms for one, 61 ms
# for 1000), the public call through the small path ~0.43-0.58 ms up to 1e5 matrices (the
# kernel ~0.25-0.38 ms, the op's dispatch ~0.2 ms): from 8 matrices on (torch ~0.7 ms) it is
# faster than torch, at 2-4 it would be up to ~1.4x slower (estimated from those two points).
_QR = Table("qr", ("qr",), _ALL_SHAPES, (
    Row(SIMD_CPU, "torch", "cpu", cpu_simd.ORTH_DTYPES, {1: 256, 2: 256, 3: 256, 4: 128},
        "2026-11-30", "2-core CI machine, torch 2.13.0+cpu, 2 threads "
        "(benchmarks/bench_small_qr.py, benchmarks/results/small_qr.md)",
        ready=_orthogonal_kernels_loaded),
    Row(TRITON, "torch", "cuda", TRITON_DTYPES, _each_order(8),
        "2026-11-30", "NVIDIA H200 (benchmarks/results/small_qr_h200.md; 8: the point measured "
        "faster, 2-4 estimated slower)", ready=_triton_installed, loads=_triton_imports),
), fallback=TORCH_LINALG)

# svd / svdvals / eigh / eigvalsh through small_svd / small_eigh. The values-only calls have
# their own tables: torch.linalg.svdvals / eigvalsh cost about half of svd / eigh, while the
# registered op's dispatch (~15 us on a quiet CPU) and the kernels' fixed cost stay.
# CPU, measured after `orthogonal._as_torch_where_nonfinite`'s check was added: the public call
# (benchmarks/bench_overhead.py's ``run`` on n x n randn batches, float32 and float64, 7
# interleaved rounds of 100 calls, each sweep twice) with the small path forced at batches
# 8 ... 65536, then with these tables at each crossover and the batch below it. Each crossover
# is the smallest power of two from which the ratio of medians stayed below 1 in both runs and
# both dtypes: there 0.38-0.87 (svd), 0.37-0.74 (svdvals), 0.41-1.00 (eigh), 0.46-0.92
# (eigvalsh), and 1.03-1.08 at the batch below (torch.linalg's fast path, its medians up to
# 1.22 in noisy rounds). The 2026-11-30 tables (svd 32 / 32 / 16 / 8 and eigh 64 / 64 / 32 /
# 16 for n = 1 ... 4, shared by svdvals / eigvalsh) lost there after the check: svd 2.4-4.8x
# (1 x 1 at 32), 1.3-3.0x (2 x 2 at 32), 1.1-3.0x (4 x 4 at 8); eigh 6x (1 x 1 at 64),
# 1.2-3.4x (2 x 2 at 64); svdvals 1.4-4.8x (3 x 3 at 16), eigvalsh 1.9-3.7x (3 x 3 at 32).
# The 1 x 1 eigh / eigvalsh won only from 65536 matrices (1.0-2.3x at 1024-16384). 3 x 4 and
# 4 x 3 take the 4 x 4 crossover: svd at 16 1.01-1.09x (torch's 3 x 4 is cheaper than its
# 4 x 4; 0.41-0.78x at 32), svdvals at 64 0.38-0.65x.
# CUDA, at 1000 3x3 matrices: svd 0.39 ms in torch vs 0.24 ms for the kernel, svdvals 0.34 vs
# 0.18, eigh 0.22 vs 0.14; with the op's ~0.2 ms of dispatch the public call is then ~1.1x
# torch for svd and ~1.5x for eigh, so the small path starts at 1024 matrices for the SVD and
# at 4096 for eigh (torch's eigh grows ~linearly; cuSOLVER's batched eigh fails outright from
# some batch below 1e5, which this path serves); the values-only calls keep them (not
# re-measured on a GPU).
_ORTH_CPU = ("2026-12-01", "2-core CI machine, shared (load average 29-35), torch 2.13.0+cpu, "
             "2 threads (benchmarks/bench_overhead.py, benchmarks/results/overhead.md)")
_ORTH_CUDA = ("2026-11-30", "NVIDIA H200, 1000 3x3 matrices "
              "(benchmarks/results/small_svd_h200.md)")


def _jacobi(function: str, shapes: frozenset, fn: str, cpu: dict[int, int], cuda: int) -> Table:
    return Table(fn, (function,), shapes, (
        Row(SIMD_CPU, "torch", "cpu", cpu_simd.ORTH_DTYPES, cpu, *_ORTH_CPU,
            ready=_orthogonal_kernels_loaded),
        Row(TRITON, "torch", "cuda", TRITON_DTYPES, _each_order(cuda), *_ORTH_CUDA,
            ready=_triton_installed, loads=_triton_imports),
    ), fallback=TORCH_LINALG)


_SVD_SHAPES = frozenset(cpu_simd.SVD_SHAPES)

# matrix_exp. CPU: torch.linalg.matrix_exp costs ~45 us for a single 2x2 .. 4x4 matrix (its
# degree selection and the batch's norms), the public call through the small path ~20-25 us up
# to batch 64 (the registered op's dispatch, the kernel ~7-10 us): 2.0-2.2x at batch 1, 2-12x
# at 2-64 for n = 2, 3, 4 (ratios of medians; minima alike), so every batch. n = 1: torch's is
# exp itself (5x faster than the kernel), never. CUDA (H200): from the LU family's crossover,
# 131072, 5.6-7.6x, at 1e6 24-35x; batches between 16384 (torch's own there) and 131072 not
# swept yet, so the crossover may lie lower.
_MATRIX_EXP = Table("matrix_exp", ("matrix_exp",), _SQUARES, (
    Row(METAL, "metal", None, _metal.LINALG_DTYPES, EVERY_BATCH, None,
        "one launch of metal/linalg/small_matrix_exp.metal per call, one thread per matrix"),
    Row(SIMD_CPU, "torch", "cpu", cpu_simd.EXPM_DTYPES, _each_order(1, first=2),
        "2026-12-02", "2-core machine, shared (load average 3-4), torch 2.13.0+cpu, 2 threads: "
        "the public call against torch.linalg.matrix_exp at batches 1 .. 64, interleaved, 9 "
        "rounds of 20 calls (benchmarks/bench_small_matrix_exp.py, "
        "benchmarks/results/small_matrix_exp.md)",
        ready=_expm_kernels_loaded),
    Row(TRITON, "torch", "cuda", (torch.float32,), _each_order(131072, first=2),
        "2026-12-02", "one NVIDIA H200, torch 2.11.0+cu130: the public call against "
        "torch.linalg.matrix_exp at batches 131072 and 1e6, interleaved, 5 rounds: 5.6-7.6x "
        "at 131072, 24-35x at 1e6 (benchmarks/bench_small_matrix_exp.py, "
        "benchmarks/results/small_matrix_exp.md); not swept below 131072",
        ready=_triton_installed, loads=_triton_imports),
), fallback=TORCH_LINALG)

# cholesky / cholesky_ex, solve_triangular, cholesky_solve (mpslinalg.small.cholesky): one table
# each, the same rows. CPU (measured 2026-12-02 on the shared 2-core machine, load average 6-8
# while other sessions worked, so noisy; torch 2.13.0+cpu, 2 threads): the small path's entry
# point against torch.linalg.cholesky / torch.linalg.solve_triangular / torch.cholesky_solve
# (SPD X X^T / n + I, its factor, one right-hand side) at batches 1 .. 4096, interleaved, 9
# rounds of 50 calls, minima; the family's public functions were not merged yet, so their
# dispatch was taken as that of the public matrix_exp over its own entry point (15-23 us). The
# entry point costs 8-15 us up to batch 1024 (9-25 us at 2048); torch's calls 3-6 us for one
# matrix, 13-47 us at 512 and 45-360 us at 1024. Each crossover is the smallest batch at which
# entry + dispatch stayed below torch's minimum: cholesky 1024 (n = 1..3; at 512 n = 2, 3 tie
# within 10%), 512 for n = 4 (37 against 45 us); solve_triangular 1024 (at 512 n = 3 loses, 32
# against 24 us); cholesky_solve 512 for n = 2..4 (29-31 against 39-47 us), 1024 for n = 1.
# complex64 (measured after, load average 18-22): the same crossovers or lower (cholesky n = 3,
# 4 and solve_triangular n = 4 won from 512, cholesky_solve n = 4 from 256), so one table
# serves both dtypes. (benchmarks/bench_small_cholesky.py, benchmarks/results/small_cholesky.md.)
# More right-hand
# sides than `mpslinalg.small.cholesky.MAX_RHS` take torch (the use_small_* queries say so).
# CUDA: not measured (no device in the session that wrote them): the LU family's crossover
# (131072, where its public call through the Triton kernels overtook torch.linalg.inv on the
# H200), PROVISIONAL, to be swept with benchmarks/bench_small_cholesky.py --device cuda.

#: The torch backend's CPU crossovers of the Cholesky family, by table: n -> the smallest batch
#: from which the public call through the small path beats torch's own function.
CHOLESKY_CPU_CROSSOVERS = {
    "cholesky": {1: 1024, 2: 1024, 3: 1024, 4: 512},
    "solve_triangular": _each_order(1024),
    "cholesky_solve": {1: 1024, 2: 512, 3: 512, 4: 512},
}
_CHOLESKY_CPU_MEASURED = (
    "2026-12-02", "2-core machine, shared (load average 6-22: noisy), torch 2.13.0+cpu, 2 "
    "threads, float32 and complex64: the small path's entry point plus the public "
    "matrix_exp's dispatch (15-23 us) against torch's function at batches 1 .. 4096, "
    "interleaved, 9 rounds of 50 calls, minima (benchmarks/bench_small_cholesky.py, "
    "benchmarks/results/small_cholesky.md)")
_CHOLESKY_CUDA = (
    "2026-11-30", "PROVISIONAL: the LU family's H200 crossover (benchmarks/results/"
    "small_inverse.md), not measured for this family")


def _cholesky_family(fn: str, functions: tuple[str, ...]) -> Table:
    return Table(fn, functions, _SQUARES, (
        Row(METAL, "metal", None, _metal.LINALG_DTYPES, EVERY_BATCH, None,
            "one launch of metal/linalg/small_cholesky.metal per call, one thread per matrix"),
        Row(SIMD_CPU, "torch", "cpu", cpu_simd.CHOL_DTYPES, CHOLESKY_CPU_CROSSOVERS[fn],
            *_CHOLESKY_CPU_MEASURED, ready=_chol_kernels_loaded),
        Row(TRITON, "torch", "cuda", (torch.float32,), _each_order(131072), *_CHOLESKY_CUDA,
            ready=_triton_installed, loads=_triton_imports),
    ), fallback=TORCH_LINALG)


# eig / eigvals (mpslinalg.small.eig): real float32 input, complex64 results. CPU (measured
# 2026-12-02 on the shared 2-core machine, load average 5-9 while other sessions worked, so
# noisy; torch 2.13.0+cpu, 2 threads): the small path's entry point against torch.linalg.eig /
# eigvals at batches 1 .. 64, interleaved, 9 rounds of 20 calls, minima; the family's public
# functions were not merged yet, so their dispatch was taken as that of the public matrix_exp
# over its own entry point (14-16 us at batch 64). The entry point costs 7-30 us (eig) and 5-21
# us (eigvals) up to batch 64; torch's calls 13-194 us (eig) and 8-120 us (eigvals). Each
# crossover is the smallest batch at which entry + dispatch stayed below torch's minimum: eig 8
# for n = 3, 4 (24 against 30 / 35 us), 16 for n = 2, 64 for n = 1; eigvals 16 for n = 3, 4, 64
# for n = 2, never for n = 1 up to 64 (21 against 13 us). At (1e4, 3, 3) eig: 1.9 against 31
# ms (minima; benchmarks/bench_small_eig.py, benchmarks/results/small_eig.md). CUDA:
# PROVISIONAL, not measured in the session that wrote the kernels: torch's CUDA eig is a CPU
# hybrid (48 s for (1e5, 3, 3) float32 on an H200, 436 ms for (1000, 3, 3)), so any batch of
# the generated kernels wins; the row serves from batch 1.

#: The torch backend's CPU crossovers of eig / eigvals: n -> the smallest batch from which the
#: public call through the small path beats torch.linalg.eig / eigvals.
EIG_CPU_CROSSOVERS = {
    "eig": {1: 64, 2: 16, 3: 8, 4: 8},
    "eigvals": {2: 64, 3: 16, 4: 16},
}
_EIG_CPU_MEASURED = (
    "2026-12-02", "2-core machine, shared (load average 5-9: noisy), torch 2.13.0+cpu, 2 "
    "threads, float32: the small path's entry point plus the public matrix_exp's dispatch "
    "(14-16 us) against torch.linalg.eig / eigvals at batches 1 .. 64, interleaved, 9 rounds "
    "of 20 calls, minima (benchmarks/bench_small_eig.py, benchmarks/results/small_eig.md)")
_EIG_CUDA = (
    "2026-12-02", "PROVISIONAL, not measured: torch's CUDA eig is a CPU hybrid (48 s for "
    "(1e5, 3, 3) float32 on an H200), so the generated kernels win at any batch; to be swept "
    "with benchmarks/bench_small_eig.py --device cuda (benchmarks/results/small_eig.md)")


def _eig_family(fn: str) -> Table:
    return Table(fn, (fn,), _SQUARES, (
        Row(METAL, "metal", None, _metal.LINALG_DTYPES, EVERY_BATCH, None,
            "one launch of metal/linalg/small_eig.metal per call, one thread per matrix"),
        Row(SIMD_CPU, "torch", "cpu", cpu_simd.EIG_DTYPES, EIG_CPU_CROSSOVERS[fn],
            *_EIG_CPU_MEASURED, ready=_eig_kernels_loaded),
        Row(TRITON, "torch", "cuda", (torch.float32,), _each_order(1), *_EIG_CUDA,
            ready=_triton_installed, loads=_triton_imports),
    ), fallback=TORCH_LINALG)


#: The table of each small op, by name ("inv": inv, solve, det, slogdet and their forms).
TABLES: dict[str, Table] = {
    "inv": _LU,
    "qr": _QR,
    "svd": _jacobi("svd", _SVD_SHAPES, "svd", {1: 256, 2: 64, 3: 32, 4: 16}, 1024),
    "svdvals": _jacobi("svdvals", _SVD_SHAPES, "svd", {1: 1024, 2: 256, 3: 64, 4: 64}, 1024),
    "eigh": _jacobi("eigh", _SQUARES, "eigh", {2: 256, 3: 64, 4: 32}, 4096),
    "eigvalsh": _jacobi("eigvalsh", _SQUARES, "eigh", {2: 512, 3: 128, 4: 64}, 4096),
    "matrix_exp": _MATRIX_EXP,
    "cholesky": _cholesky_family("cholesky", ("cholesky", "cholesky_ex")),
    "solve_triangular": _cholesky_family("solve_triangular", ("solve_triangular",)),
    "cholesky_solve": _cholesky_family("cholesky_solve", ("cholesky_solve",)),
    "eig": _eig_family("eig"),
    "eigvals": _eig_family("eigvals"),
}


# ------------------------------------------------------------------------------ the queries


def takes_small_path(op: str, A: torch.Tensor, backend: str | None = None) -> bool:
    """Whether ``op`` of ``A`` on ``backend`` (default: the one in force) takes the small path:
    (m, n) a kernel shape, and the first row that serves ``A`` lists its order with a
    crossover at or below its batch."""
    table = TABLES[op]
    if A.dim() < 2 or tuple(A.shape[-2:]) not in table.shapes:
        return False
    if backend is None:
        backend = resolve_backend(A.device, table.fn)
    row = table.row_for(A, backend)
    if row is None:
        return False
    if row.min_batch is EVERY_BATCH:
        return True
    limit = row.min_batch.get(max(A.shape[-2:]))
    return limit is not None and math.prod(A.shape[:-2]) >= limit


def may_take_small_path(op: str, A: torch.Tensor) -> bool:
    """A cheap necessary condition of `takes_small_path` on the torch backend (shapes only: the
    public functions' fast paths ask it on every call; a single matrix, the common case that
    must stay cheapest, is answered first): a batch of a kernel shape in a dtype some row of
    the device serves, at least the smallest crossover of the batch's own order there."""
    shape = A.shape
    if len(shape) < 3:
        return False
    elements = TABLES[op]._fewest_elements.get((A.device.type, A.dtype, shape[-2], shape[-1]))
    return elements is not None and A.numel() >= elements


def choose(op: str, A: torch.Tensor, backend: str | None = None) -> str:
    """The path that runs ``op`` of ``A`` on ``backend`` (default: the one in force): the first
    row that serves ``A`` and loads, else the table's fallback (the ``mpslinalg.small`` logger
    says which at DEBUG level). The batch size plays no part: `takes_small_path` decided
    whether the small functions are called."""
    table = TABLES[op]
    backend = backend or resolve_backend(A.device, table.fn)
    path = next((row.path for row in table.rows if row.serves(A, backend) and row.loads()),
                table.fallback)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("small path of %s for %s %s on the %s backend: %s", op, tuple(A.shape),
                  A.dtype, backend, path)
    return path
