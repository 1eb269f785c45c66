"""python -m mpslinalg info | check | bench: what runs here, the kernels validated on hard cases,
and speed against torch (and SciPy)."""

from __future__ import annotations

import argparse
import math
import platform
import sys
import textwrap
from collections.abc import Sequence

import torch

from . import __version__
from ._core import platform as _platform
from ._core import registry as _registry
from ._core import timing as _timing
from ._core.backend import use_backend

#: Widest a table cell grows before its text wraps onto further lines (at word boundaries).
_CELL_WIDTH = 60


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           width: int = _CELL_WIDTH) -> str:
    """A plain-text table; a cell longer than ``width`` wraps onto further lines of its row."""
    wrapped = [[textwrap.wrap(cell, width) or [""] for cell in row] for row in rows]
    widths = [max(len(h), *(len(line) for r in wrapped for line in r[i])) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    for row in wrapped:
        for k in range(max(len(cell) for cell in row)):
            lines.append(fmt.format(*(cell[k] if k < len(cell) else "" for cell in row))
                         .rstrip())
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    print(f"mpslinalg {__version__}")
    print(f"torch     {torch.__version__}")
    print(f"Python    {platform.python_version()}")
    system = platform.system()
    os_version = platform.mac_ver()[0] if system == "Darwin" else platform.release()
    print(f"OS        {system} {os_version} ({platform.machine()})")
    print()
    reasons = _platform.mps_unavailable_reasons()
    cxx = _platform.find_cxx()
    print("backends and executors:")
    print("  torch                  usable (torch.linalg on CPU" +
          (", CUDA" if torch.cuda.is_available() else "") + ")")
    if reasons:
        print("  metal on the Apple GPU not usable:")
        for reason in reasons:
            print(f"    - {reason}")
    else:
        print("  metal on the Apple GPU usable (torch.mps.compile_shader)")
    unusable = _platform.emulator_unavailable_reasons()
    if unusable:
        print(f"  metal in the emulator  not usable: {'; '.join(unusable)}")
    else:
        print(f"  metal in the emulator  usable (CPU tensors; C++ compiler: {cxx})")
    _print_small_paths()
    return 0


def _native_lines() -> list[str]:
    """Whether each native library of the n <= 4 path is loaded, and from where or why not."""
    from .small import cpu_simd

    return [f"native CPU kernels, {what}: {library.status}"
            for what, library in cpu_simd.LIBRARIES.items()]


def _print_small_paths() -> None:
    """Which implementation serves batches of n <= 4 here (the path table of mpslinalg.small)."""
    from .small import paths

    print()
    print("n <= 4 path (mpslinalg.small):")
    for line in _native_lines():
        print(f"  {line}")
    print("  per op, the first row that serves a call decides (on the torch backend from the "
          "batch of its order, max(m, n)):")
    for table in paths.TABLES.values():
        print(f"  {', '.join(table.functions)}:")
        for row in table.rows:
            print(f"    {row.describe()}")
        print(f"    otherwise: {table.fallback}")


class _UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _device(args: argparse.Namespace) -> torch.device:
    if not args.device:
        return _platform.default_device()
    device = torch.device(args.device)
    if device.type == "mps" and _platform.mps_unavailable_reasons():
        raise _UsageError("--device mps: MPS is not usable here: "
                          + "; ".join(_platform.mps_unavailable_reasons()))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise _UsageError("--device cuda: torch sees no CUDA device here")
    return device


def _registered(entries: list, key: str, wanted: list[str] | None, what: str) -> list:
    """The registered cases whose ``key`` is in ``wanted`` (all when None); says so when none,
    and refuses names nothing is registered under."""
    from . import cases

    cases.load_all()
    known = sorted({getattr(e, key) for e in entries})
    unknown = [w for w in wanted or [] if w not in known]
    if unknown:
        raise _UsageError(f"no {what} for {', '.join(unknown)}; choose from: "
                          + ", ".join(known))
    selected = [e for e in entries if not wanted or getattr(e, key) in wanted]
    if not selected:
        print(f"no {what} registered")
    return selected


def cmd_check(args: argparse.Namespace) -> int:
    selected = _registered(_registry.CHECKS, "op", args.op, "checks")
    if not selected:
        return 0
    device = _device(args)
    cases = "case" if len(selected) == 1 else "cases"
    print(f"checking {len(selected)} {cases} on the {args.backend} backend, device {device}")
    for line in _native_lines():
        print(f"n <= 4 path: {line}")
    rows, failures = [], 0
    for i, case in enumerate(selected, start=1):
        print(f"[{i}/{len(selected)}] {case.op}: {case.case} ...", end=" ", flush=True)
        try:
            with use_backend(args.backend):
                ratio = float(case.run(device))
            ok = math.isfinite(ratio) and ratio < case.bound
            shown = f"{ratio:.3g}"
        except Exception as exc:  # a failing case is reported, the others still run
            ok, shown = False, _shorten(f"error: {type(exc).__name__}: {exc}", 4 * _CELL_WIDTH)
        failures += not ok
        print("pass" if ok else "FAIL")
        rows.append((case.op, case.case, shown, f"< {case.bound:g}", "pass" if ok else "FAIL"))
    print()
    print(_table(("op", "case", "error ratio", "bound", "result"), rows))
    print(f"\n{len(selected) - failures} passed, {failures} failed")
    return 1 if failures else 0


def _shorten(text: str, width: int) -> str:
    """``text`` cut at a word boundary to at most ``width`` characters, marked when cut."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    return text[: width - 4].rsplit(" ", 1)[0] + " ..."


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def cmd_bench(args: argparse.Namespace) -> int:
    if args.plot:
        try:
            _timing.require_matplotlib()
        except _timing.PlotUnavailableError as exc:
            raise _UsageError(f"--plot: {exc}") from None
    if args.repeats < 1:
        raise _UsageError(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads is not None:
        if args.threads < 1:
            raise _UsageError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    selected = _registered(_registry.BENCHES, "group", args.group, "benchmarks")
    if not selected:
        return 0
    device = _device(args)
    header = _timing.machine_header(device)
    print("\n".join(header))
    for line in _native_lines():
        print(f"n <= 4    {line}")
    print(f"backend   {args.backend}; {args.repeats} rounds, the contenders of a case timed "
          "interleaved (round-robin, one loop)")
    print("ratio     other median / mpslinalg median (> 1: mpslinalg is faster)")
    warning = _timing.busy_warning()
    if warning:
        print(warning)
    print()
    rows, results, blocks = [], [], False
    for i, bench in enumerate(selected, start=1):
        print(f"[{i}/{len(selected)}] {bench.group}: {bench.case}", flush=True)
        with use_backend(args.backend):
            timings = _registry.run_bench(bench, device, args.repeats)
        results.append((f"{bench.group}: {bench.case}", timings))
        ours = timings.get("mpslinalg")
        for name, t in timings.items():
            ratio = "" if name == "mpslinalg" or ours is None else f"{t.median / ours.median:.2f}x"
            mark = "" if t.interleaved else "*"
            blocks |= not t.interleaved
            spread = ("", "") if not t.interleaved else (_ms(t.min), _ms(t.max))
            rows.append((bench.group, bench.case, name, spread[0], _ms(t.median) + mark,
                         spread[1], ratio))
    print()
    print(_table(("group", "case", "contender", "min ms", "median ms", "max ms", "ratio"), rows))
    if blocks:
        print("\n* timed by the case itself, on its own (median only, not interleaved)")
    warning = _timing.busy_warning()
    if warning:
        print(warning)
    if args.plot:
        title = f"{header[1].removeprefix('machine').strip()}; {header[0].split(None, 1)[1]}"
        _timing.plot_ratios(results, args.plot, title=title)
        print(f"\nfigure written to {args.plot}")
    return 0


def _names(entries: list, key: str) -> str:
    from . import cases

    cases.load_all()
    return ", ".join(sorted({getattr(e, key) for e in entries})) or "(none registered)"


def build_parser(list_cases: bool = True) -> argparse.ArgumentParser:
    """The command line; ``list_cases`` loads every case module to name the ops and groups in
    the help (only a call that asks for help needs them)."""

    def names(entries: list, key: str) -> str:
        return _names(entries, key) if list_cases else "(see --help)"

    parser = argparse.ArgumentParser(prog="mpslinalg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions and what can run here, and why not")
    check = sub.add_parser("check", help="validate the kernels against SciPy on hard cases",
                           description="Run every registered hard case (or those of --op) and "
                           "print LAPACK-style error ratios; exit status 1 when any fails.",
                           epilog=f"ops: {names(_registry.CHECKS, 'op')}")
    check.add_argument("--backend", default="metal", choices=("metal", "torch", "auto"),
                       help="which implementation to check (default: metal, the Metal kernels: "
                       "on the Apple GPU for MPS tensors, in the emulator for CPU tensors)")
    check.add_argument("--device", default=None, help="cpu, mps or cuda (default: mps if usable)")
    check.add_argument("--op", action="append",
                       help="only this op (repeatable); an unknown name lists the valid ones")
    bench = sub.add_parser("bench", help="speed against torch.linalg and SciPy",
                           description="Time the public functions against torch (and SciPy or "
                           "NumPy where they apply), interleaved; print min / median / max and "
                           "the ratio of medians.",
                           epilog=f"groups: {names(_registry.BENCHES, 'group')}")
    bench.add_argument("--backend", default="auto", choices=("metal", "torch", "auto"),
                       help="the backend mpslinalg runs on (default: auto)")
    bench.add_argument("--device", default=None, help="cpu, mps or cuda (default: mps if usable)")
    bench.add_argument("--repeats", type=int, default=7,
                       help="rounds: each round calls every contender of a case once, "
                       "round-robin; min / median / max over the rounds are reported "
                       "(default: 7)")
    bench.add_argument("--threads", type=int, default=None,
                       help="torch's CPU threads (torch.set_num_threads; default: torch's "
                       "choice, shown in the header)")
    bench.add_argument("--plot", metavar="FILE", default=None,
                       help="also write a figure of the ratios to FILE (.png, .svg, .pdf; "
                       "needs matplotlib: pip install 'mpslinalg[plot]')")
    bench.add_argument("--group", action="append",
                       help="only this group (repeatable); an unknown name lists the valid ones")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # a broken case module then fails the commands that use the cases, not `info`
    args = build_parser(list_cases=any(a in ("-h", "--help") for a in argv)).parse_args(argv)
    handler = {"info": cmd_info, "check": cmd_check, "bench": cmd_bench}[args.command]
    try:
        return handler(args)
    except _UsageError as exc:
        print(f"mpslinalg {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
