"""The float64-class solve of the metal backend (iterative refinement on float32 kernels,
docs/float64.rst): accuracy against LAPACK's dgesv and time against float64 solves.

    python benchmarks/bench_refine.py                       # CPU: the emulator, small sizes
    python benchmarks/bench_refine.py --device cuda --n 4096  # NVIDIA GPU, CUDA executor

On the CPU the Metal kernels run in the emulator (its times say nothing of a GPU; they are
here to show the accuracy and the step counts), against NumPy's and torch's float64 solve.
On CUDA (``MPSLINALG_METAL_ON_CUDA=1`` is set here) the same Metal kernels run through the CUDA
executor on the GPU: the refined float64 solve against the float32 Metal solve on the same GPU
and against torch's float64 solve on the host CPU (all its threads). The refined solve runs
once per kind of correction named by ``--corrections`` (``refine_metal.CORRECTION``: "inverse",
the factors' inverses applied by the GEMM, the default for few right-hand sides; "blocked",
trsm_diag + trsm_update; "trsv"). Those are NVIDIA figures, through the CUDA executor, never
Apple-GPU ones.

Contenders are timed interleaved (one call of each per round, the device synchronised around
each call) after a warm-up call; the table gives min / median / max over the rounds, and the
issue's cost targets at each n (refined at most 2x the float32 Metal solve, faster than torch's
float64 solve on the host CPU). On CUDA a second table gives the device time per call of each
Metal kernel of the refined and the float32 solve (the executor's profiling mode, CUDA events
around each launch, in separate calls after the timed rounds: it adds host time per launch),
against the wall time: the difference is host time (launches, torch's own ops). Accuracy:
the normwise forward error against a solution refined with long-double residuals (for n <= 512;
above it, against LAPACK's solution, which then bounds nothing finer than LAPACK's own error)
and the normwise backward error ||b - A x||max / (||A||inf ||x||max + ||b||max).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

os.environ.setdefault("MPSLINALG_METAL_ON_CUDA", "1")  # the metal backend on CUDA tensors

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg.cases.refine import exact_solution, solve_errors  # noqa: E402
from mpslinalg.linalg import refine_metal  # noqa: E402
from mpslinalg.testing import matrix_with_spread  # noqa: E402

EXACT_MAX_N = 512  # the long-double reference costs O(n^3) long-double work


def _refined_name(kind: str) -> str:
    return f"refined float64 (metal, {kind} correction)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(contenders: dict, reps: int) -> dict[str, list[float]]:
    times = {name: [] for name in contenders}
    for fn, device in contenders.values():  # warm-up (compiles the kernels)
        fn()
        _sync(device)
    for _ in range(reps):
        for name, (fn, device) in contenders.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def _kernel_times(fn, calls: int = 2) -> dict[str, tuple[float, float]]:
    """Host name -> (launches, device microseconds) per call of each CUDA-executor kernel fn
    launches (the executor's profiling mode)."""
    from mpslinalg.emulator import cuda

    fn()
    torch.cuda.synchronize()
    with cuda.profile() as prof:
        for _ in range(calls):
            fn()
    return {name: (count / calls, us / calls) for name, (count, us) in prof.kernels().items()}


def run(n: int, cond: float, device: torch.device, reps: int, kinds: list[str],
        profile: list[str] | None = None) -> list[str]:
    A = matrix_with_spread(n, cond, torch.float64, seed=1)
    b = torch.randn(n, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    Ad, bd = A.to(device), b.to(device)
    A32, b32 = Ad.float(), bd.float()
    def metal():
        return mpslinalg.use_backend("metal")

    An, bn = A.numpy(), b.numpy()
    reference = exact_solution(An, bn) if n <= EXACT_MAX_N else scipy.linalg.solve(An, bn)

    def refined(kind: str):
        def call():
            saved, refine_metal.CORRECTION = refine_metal.CORRECTION, kind
            try:
                with metal():
                    return mpslinalg.solve_ex(Ad, bd)
            finally:
                refine_metal.CORRECTION = saved
        return call

    lines = []
    for kind in kinds:
        saved, refine_metal.CORRECTION = refine_metal.CORRECTION, kind
        try:
            with metal():
                res = refine_metal.solve_refined(Ad, bd)
        finally:
            refine_metal.CORRECTION = saved
        fwd, berr = solve_errors(An, bn, res.X.cpu().numpy(), reference)
        lines.append(f"| {n} | {cond:.0e} | {_refined_name(kind)} | {fwd:.2e} | {berr:.2e} |")
        lines.append(f"| {n} | {cond:.0e} | {kind}: steps (first: the float32 solve) | "
                     f"{int(res.steps)} | info {int(res.info)} |")
    fwd, berr = solve_errors(An, bn, scipy.linalg.solve(An, bn), reference)
    lines.append(f"| {n} | {cond:.0e} | LAPACK dgesv (scipy) | {fwd:.2e} | {berr:.2e} |")

    def float32():
        with metal():
            mpslinalg.solve_ex(A32, b32)

    contenders = {_refined_name(kind): (refined(kind), device) for kind in kinds}
    contenders |= {"float32 solve (metal)": (float32, device),
                  "torch float64 solve, CPU": (lambda: torch.linalg.solve(A, b),
                                               torch.device("cpu"))}
    if device.type == "cpu":
        contenders["numpy float64 solve"] = (lambda: np.linalg.solve(An, bn), device)
    times = _timed(contenders, reps)
    base = statistics.median(times[_refined_name(kinds[0])])
    for name, t in times.items():
        med = statistics.median(t)
        lines.append(f"| {n} | time | {name} | {min(t) * 1e3:.4g} / {med * 1e3:.4g} / "
                     f"{max(t) * 1e3:.4g} ms | x{med / base:.3g} of {kinds[0]} |")
    for name in map(_refined_name, kinds):
        mine = statistics.median(times[name])
        to_f32 = mine / statistics.median(times["float32 solve (metal)"])
        to_cpu = mine / statistics.median(times["torch float64 solve, CPU"])
        lines.append(f"| {n} | {cond:.0e} | targets of {name}: / float32 <= 2, / torch CPU "
                     f"< 1 | {to_f32:.2f} ({'met' if to_f32 <= 2 else 'not met'}), "
                     f"{to_cpu:.2f} ({'met' if to_cpu < 1 else 'not met'}) | |")
    if profile is not None and device.type == "cuda":
        for name in (*map(_refined_name, kinds), "float32 solve (metal)"):
            per = _kernel_times(contenders[name][0])
            wall = statistics.median(times[name]) * 1e6
            total = sum(us for _, us in per.values())
            profile.append(f"| {n} | {cond:.0e} | {name} | all Metal kernels | "
                           f"{sum(c for c, _ in per.values()):.0f} | {total:.0f} "
                           f"(wall {wall:.0f}) |")
            for kernel, (count, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                profile.append(f"| {n} | {cond:.0e} | {name} | {kernel} | {count:.0f} | "
                               f"{us:.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--n", type=int, nargs="*", default=None)
    parser.add_argument("--cond", type=float, nargs="*", default=[1e2, 1e6])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--corrections", default="inverse,blocked",
                        help="the correction kinds timed (refine_metal.CORRECTION), "
                        "comma-separated: inverse, blocked, trsv")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    sizes = args.n or ([4096] if device.type == "cuda" else [64, 128])
    where = torch.cuda.get_device_name(device) + " through the CUDA executor" \
        if device.type == "cuda" else f"{platform.processor() or platform.machine()} (emulator)"
    lines = [f"bench_refine {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {where}, "
             f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads",
             "", "| n | cond / time | contender | forward error / min/median/max | "
             "backward error / ratio |", "|---|---|---|---|---|"]
    profile = [] if device.type == "cuda" else None
    for n in sizes:
        for cond in args.cond:
            lines += run(n, cond, device, args.reps, args.corrections.split(","), profile)
    if profile:
        lines += ["", "Device time per call of each Metal kernel (the CUDA executor's profiling "
                  "mode; wall: the median of the timed rounds), microseconds:", "",
                  "| n | cond | solve | kernel | launches | device us |",
                  "|---|---|---|---|---|---|", *profile]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
