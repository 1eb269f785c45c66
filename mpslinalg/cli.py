"""``python -m mpslinalg info | check | bench``."""

from __future__ import annotations

import argparse
import math
import platform
import sys
from collections.abc import Sequence

import torch

from . import __version__
from ._core import platform as _platform
from ._core import registry as _registry
from ._core.backend import use_backend


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
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
    if cxx:
        print(f"  metal in the emulator  usable (CPU tensors; C++ compiler: {cxx})")
    else:
        print("  metal in the emulator  not usable: no C++ compiler found "
              "(set $CXX or install g++ or clang++)")
    _print_small_paths()
    return 0


def _print_small_paths() -> None:
    """Which implementation serves batches of n <= 4 here (the path table of mpslinalg.small)."""
    from .small import cpu_simd, dispatch, orthogonal

    library = cpu_simd.LIBRARY
    library.wait(timeout=30)  # a cold cache builds in the background; info may wait for it
    cpu_simd.ORTH_LIBRARY.wait(timeout=60)
    print()
    print(f"n <= 4 path (mpslinalg.small): native CPU kernels {library.status}, "
          f"QR/SVD/eigh kernels {cpu_simd.ORTH_LIBRARY.status}")
    probes = [("cpu", torch.float32), ("cpu", torch.complex64), ("cpu", torch.float64)]
    if torch.cuda.is_available():
        probes += [("cuda", torch.float32), ("cuda", torch.complex64)]
    with use_backend("torch"):
        for device, dtype in probes:
            A = torch.zeros(1 << 17, 4, 4, dtype=dtype, device=device)
            taken = dispatch.use_small_path(A, "torch")
            path = dispatch.torch_path(A) if taken else "torch.linalg"
            print(f"  torch backend, {device} {str(dtype).removeprefix('torch.'):<10} "
                  f"batch 131072 of 4x4, inv/solve/det: {path}")
        uses = {"qr": orthogonal.use_small_qr, "svd": orthogonal.use_small_svd,
                "eigh": orthogonal.use_small_eigh}
        for device, dtype in probes:
            A = torch.zeros(1 << 17, 3, 3, dtype=dtype, device=device)
            paths = ", ".join(
                f"{op} {orthogonal.torch_path(A) if use(A, 'torch') else 'torch.linalg'}"
                for op, use in uses.items())
            print(f"  torch backend, {device} {str(dtype).removeprefix('torch.'):<10} "
                  f"batch 131072 of 3x3: {paths}")


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
    rows, failures = [], 0
    for i, case in enumerate(selected, start=1):
        print(f"[{i}/{len(selected)}] {case.op}: {case.case} ...", end=" ", flush=True)
        try:
            with use_backend(args.backend):
                ratio = float(case.run(device))
            ok = math.isfinite(ratio) and ratio < case.bound
            shown = f"{ratio:.3g}"
        except Exception as exc:  # a failing case is reported, the others still run
            ok, shown = False, _shorten(f"error: {type(exc).__name__}: {exc}", 120)
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


def cmd_bench(args: argparse.Namespace) -> int:
    selected = _registered(_registry.BENCHES, "group", args.group, "benchmarks")
    if not selected:
        return 0
    device = _device(args)
    print(f"benchmarking on device {device}, median of {args.repeats} runs, backend "
          f"{args.backend}; ratio = other / mpslinalg (> 1: mpslinalg is faster)")
    rows = []
    for i, bench in enumerate(selected, start=1):
        print(f"[{i}/{len(selected)}] {bench.group}: {bench.case}", flush=True)
        with use_backend(args.backend):
            times = bench.run(device, args.repeats)
        ours = times["mpslinalg"]
        for name, seconds in times.items():
            ratio = "" if name == "mpslinalg" else f"{seconds / ours:.2f}x"
            rows.append((bench.group, bench.case, name, f"{seconds * 1e3:.3f}", ratio))
    print()
    print(_table(("group", "case", "implementation", "median ms", "ratio"), rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpslinalg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions and what can run here, and why not")
    check = sub.add_parser("check", help="validate the kernels against SciPy on hard cases")
    check.add_argument("--backend", default="metal", choices=("metal", "torch", "auto"),
                       help="which implementation to check (default: metal, the Metal kernels: "
                       "on the Apple GPU for MPS tensors, in the emulator for CPU tensors)")
    check.add_argument("--device", default=None, help="cpu, mps or cuda (default: mps if usable)")
    check.add_argument("--op", action="append",
                       help="only this op (repeatable); an unknown name lists the valid ones")
    bench = sub.add_parser("bench", help="speed against torch.linalg and SciPy")
    bench.add_argument("--backend", default="auto", choices=("metal", "torch", "auto"),
                       help="the backend mpslinalg runs on (default: auto)")
    bench.add_argument("--device", default=None, help="cpu, mps or cuda (default: mps if usable)")
    bench.add_argument("--repeats", type=int, default=7,
                       help="timed runs per implementation; the median is reported")
    bench.add_argument("--group", action="append",
                       help="only this group (repeatable); an unknown name lists the valid ones")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"info": cmd_info, "check": cmd_check, "bench": cmd_bench}[args.command]
    try:
        return handler(args)
    except _UsageError as exc:
        print(f"mpslinalg {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
