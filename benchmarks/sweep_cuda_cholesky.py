"""mpslinalg.linalg.cholesky_metal (blocks of 32 columns, 2 ceil(n / 32) - 1 launches) measured
through the CUDA executor on an NVIDIA GPU (not an Apple GPU): wall time (host clock around a
synchronised call, median [min, max] of interleaved rounds, against torch.linalg.cholesky /
cholesky_ex on the same GPU), device time per kernel (the executor's profiling mode, whose
events also count the host's gaps between launches), and the device time alone: the call
captured once in a CUDA graph and replayed, so no host time is left in it. (It also compared
blocks of 64 columns until round 22 measured them slower at every size and they were removed.)

    python benchmarks/sweep_cuda_cholesky.py [--cases 1x1024,1x2048,1x4096,64x64,16x256]
                                             [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

os.environ.setdefault("MPSLINALG_METAL_ON_CUDA", "1")

from bench_cuda_executor import _hpd  # noqa: E402 - the cholesky section's matrices

from mpslinalg.emulator import cuda  # noqa: E402
from mpslinalg.linalg import cholesky_metal as _chol  # noqa: E402


def _factor(A: torch.Tensor):
    return _chol.cholesky_metal(A, False)


def _wall_us(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6


def _graph_us(fn, replays: int = 5) -> float:
    """Device microseconds of one call: captured in a CUDA graph (the executor launches on
    torch's current stream, so capture records them) and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm: kernels compiled and geometry cached outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def _spread(ts) -> str:
    return f"{statistics.median(ts):.1f} [{min(ts):.1f}, {max(ts):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="1x1024,1x2048,1x4096,64x64,16x256",
                    help="comma-separated BATCHxN cases")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    print("| case | contender | wall us | device us (graph replay) | kernels: launches, "
          "profiled us | max rel. diff. from torch |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    for case in args.cases.split(","):
        batch, n = (int(v) for v in case.split("x"))
        A = _hpd(batch, n, torch.float32, 3, "cuda").reshape(batch, n, n)
        ref = torch.linalg.cholesky(A)
        contenders = {"executor": lambda A=A: _factor(A)}
        contenders["torch.linalg.cholesky"] = lambda A=A: torch.linalg.cholesky(A)
        contenders["torch.linalg.cholesky_ex"] = lambda A=A: torch.linalg.cholesky_ex(A)
        times = {who: [] for who in contenders}
        for fn in contenders.values():
            fn()
            fn()
        for _ in range(args.reps if n < 4096 else max(3, args.reps // 2)):
            for who, fn in contenders.items():
                times[who].append(_wall_us(fn))
        for who, fn in contenders.items():
            device, kernels, diff = "", "", ""
            if who.startswith("executor"):
                L, info = fn()
                diff = f"{float((L - ref).abs().max() / ref.abs().max()):.1e}"
                if not bool((info == 0).all()):
                    diff += " (info != 0)"
                with cuda.profile() as prof:
                    _factor(A)
                kernels = ", ".join(f"{k} {c} x, {us:.0f}"
                                    for k, (c, us) in sorted(prof.kernels().items()))
                device = f"{_graph_us(fn):.1f}"
            print(f"| {batch}x({n}x{n}) float32 | {who} | {_spread(times[who])} | {device} | "
                  f"{kernels} | {diff} |", flush=True)


if __name__ == "__main__":
    main()
