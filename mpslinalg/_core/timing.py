"""The timing harness behind ``python -m mpslinalg bench`` and the scripts in ``benchmarks/``.

Contenders are timed interleaved, round-robin in one loop: each round calls every contender once
(``calls`` times), the starting contender rotating from round to round, so that a change of load,
clock or cache state during the run touches all of them alike. Each contender reports the min,
median and max of its per-call time over the rounds; speed ratios are taken between medians.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of one contender over the timed rounds.

    ``interleaved`` is False for a figure a case timed on its own (a median only, ``min`` and
    ``max`` equal to it), so that a table can say which figures were not measured side by side.
    """

    min: float
    median: float
    max: float
    rounds: int
    interleaved: bool = True

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Timing:
        return cls(min(seconds), statistics.median(seconds), max(seconds), len(seconds))

    @classmethod
    def median_only(cls, seconds: float) -> Timing:
        return cls(seconds, seconds, seconds, 1, interleaved=False)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _per_call(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def time_interleaved(contenders: Mapping[str, Callable[[], object]], device: torch.device,
                     rounds: int = 7, *, calls: int = 1, warmup: int = 1) -> dict[str, Timing]:
    """Time ``contenders`` (name -> zero-argument call) round-robin in one loop.

    Each contender is first called ``warmup`` times (caches, compilation, first-call costs);
    then ``rounds`` rounds each time ``calls`` consecutive calls of every contender, the device
    synchronised before and after, the first contender of a round rotating. Returns, per name in
    the given order, the per-call `Timing`.
    """
    names = list(contenders)
    if not names:
        return {}
    for name in names:
        for _ in range(warmup):
            contenders[name]()
    synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(max(1, rounds)):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_per_call(contenders[name], max(1, calls), device))
    return {name: Timing.of(samples[name]) for name in names}


def ratios(timings: Mapping[str, Timing], reference: str) -> dict[str, float]:
    """``other median / reference median`` per contender (> 1: the reference is faster)."""
    base = timings[reference].median
    return {name: t.median / base for name, t in timings.items() if name != reference}


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def load_average() -> tuple[float, float, float] | None:
    """``os.getloadavg()`` where the system has one (None on Windows)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def machine_header(device: torch.device) -> list[str]:
    """Lines describing the run: date, machine, device, threads, load and versions."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpu = platform.processor() or platform.machine()
    lines = [f"date      {now}",
             f"machine   {platform.system()} {platform.machine()} ({cpu}), "
             f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}"]
    if device.type == "cuda":
        lines.append(f"device    {device} ({torch.cuda.get_device_name(device)})")
    else:
        lines.append(f"device    {device}")
    load = load_average()
    shown = "unavailable" if load is None else " ".join(f"{x:.2f}" for x in load)
    lines.append(f"load avg  {shown} (1, 5, 15 min)")
    lines.append(f"versions  python {platform.python_version()}, torch {torch.__version__}, "
                 f"numpy {_version('numpy')}, scipy {_version('scipy')}")
    return lines


def busy_warning() -> str | None:
    """A warning when the 1-minute load average exceeds the CPU count (timings then mislead)."""
    load, cpus = load_average(), os.cpu_count() or 1
    if load is not None and load[0] > cpus:
        return (f"warning: load average {load[0]:.2f} exceeds the {cpus} CPUs: other work "
                "competes for the cores and the timings below are unreliable")
    return None


class PlotUnavailableError(RuntimeError):
    """matplotlib is missing: ``--plot`` needs the ``plot`` extra."""


def require_matplotlib() -> None:
    """Raise `PlotUnavailableError` unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotUnavailableError(
            "writing a figure needs matplotlib, which is not installed: "
            "pip install 'mpslinalg[plot]' (or pip install matplotlib)") from exc


def ratio_figure(results: Sequence[tuple[str, Mapping[str, Timing]]], *,
                 reference: str = "mpslinalg", title: str = ""):
    """A horizontal bar chart (a matplotlib Figure) of ``other median / reference median`` per case
    and contender, with the min/max spread as error bars (the other's max over the reference's
    min, and the other way round).

    The axis is logarithmic and centred at 1, and each bar starts at 1: right of 1 the reference
    is faster, left of it slower, by as much on either side (a bar from the axis' edge would draw
    a ratio of 0.5 as a long bar and 2 as a shorter one)."""
    require_matplotlib()
    import textwrap

    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    others: list[str] = []  # in order of first appearance: one colour each
    for _, timings in results:
        others += [n for n in timings if n != reference and n not in others]
    colours = {n: f"C{i % 10}" for i, n in enumerate(others)}
    bars = sum(len([n for n in t if n != reference]) for _, t in results)
    fig = Figure(figsize=(9, 1.6 + 0.3 * bars + 0.15 * len(results)))
    ax = fig.add_subplot()
    labelled: set[str] = set()
    reach = 2.0  # the axis spans [1 / reach, reach]: at least a factor 2 either way
    for i, (_, timings) in enumerate(results):
        present = [n for n in timings if n != reference]
        if reference not in timings or not present:
            continue
        ours, height = timings[reference], 0.8 / len(present)
        for k, name in enumerate(present):
            theirs = timings[name]
            mid = theirs.median / ours.median
            low, high = theirs.min / ours.max, theirs.max / ours.min
            reach = max(reach, high, 1 / low)
            ax.barh(len(results) - 1 - i + 0.4 - (k + 0.5) * height, mid - 1.0, left=1.0,
                    height=height, xerr=[[max(0.0, mid - low)], [max(0.0, high - mid)]],
                    capsize=2, color=colours[name], label=None if name in labelled else name)
            labelled.add(name)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlim(1 / (1.2 * reach), 1.2 * reach)
    ax.set_yticks(range(len(results)),
                  [textwrap.fill(label, 40) for label, _ in reversed(results)], fontsize=7)
    ax.set_ylim(-0.6, len(results) - 0.4)
    ax.set_xlabel(f"time of other / time of {reference}: ratio of medians, bars min-max "
                  f"(> 1: {reference} faster, < 1: slower)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def plot_ratios(results: Sequence[tuple[str, Mapping[str, Timing]]], path: str, *,
                reference: str = "mpslinalg", title: str = "") -> None:
    """Write `ratio_figure` of ``results`` to ``path``."""
    fig = ratio_figure(results, reference=reference, title=title)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # long case labels stay whole
