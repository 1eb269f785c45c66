"""Registration of the cases behind ``python -m mpslinalg check`` and ``bench``.

Each op family registers its cases in ``mpslinalg/cases/<family>.py``; the CLI imports that
package, so adding a family never touches the CLI.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from .timing import Timing, synchronize, time_interleaved

#: LAPACK's threshold for its test ratios (e.g. xGET01 / xGET02 use THRESH = 30).
DEFAULT_BOUND = 30.0


@dataclass(frozen=True)
class CheckCase:
    """A fixed hard case: ``run(device)`` computes with the mpslinalg API and returns a LAPACK-style
    error ratio, which passes when finite and below ``bound``. Raising fails the case."""

    op: str
    case: str
    run: Callable[[torch.device], float]
    bound: float = DEFAULT_BOUND


@dataclass(frozen=True)
class BenchCase:
    """``run(device, repeats)`` returns the contenders keyed by name, ``"mpslinalg"`` first (the
    reference the ratios are taken against), each a zero-argument callable on inputs it built:
    `run_bench` times them interleaved. A case may instead return the median seconds it
    timed itself (one float per name, e.g. from `median_time`); the CLI then marks those
    figures as not interleaved."""

    group: str
    case: str
    run: Callable[[torch.device, int], Mapping[str, Callable[[], object] | float]]


CHECKS: list[CheckCase] = []
BENCHES: list[BenchCase] = []


def check_case(op: str, case: str, *, bound: float = DEFAULT_BOUND):
    def register(run: Callable[[torch.device], float]) -> Callable[[torch.device], float]:
        CHECKS.append(CheckCase(op, case, run, bound))
        return run

    return register


def bench_case(group: str, case: str):
    def register(run: Callable[[torch.device, int], dict[str, float]]):
        BENCHES.append(BenchCase(group, case, run))
        return run

    return register


def run_bench(case: BenchCase, device: torch.device, repeats: int) -> dict[str, Timing]:
    """The `Timing` of each contender of ``case``: interleaved round-robin
    (`mpslinalg._core.timing.time_interleaved`) when the case returns callables."""
    contenders = case.run(device, repeats)
    if all(callable(c) for c in contenders.values()):
        return time_interleaved(contenders, device, repeats)
    return {name: c if isinstance(c, Timing) else Timing.median_only(float(c))
            for name, c in contenders.items()}


def median_time(fn: Callable[[], object], device: torch.device, repeats: int = 5,
                warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds, the device synchronised around each run (one
    contender on its own; prefer returning callables from a bench case, timed interleaved)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
