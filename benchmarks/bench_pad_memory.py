"""Peak extra memory and time of ``mpslinalg.ops.pad`` against ``F.pad`` on one device.

Self-contained: ``python benchmarks/bench_pad_memory.py [--device cpu|cuda|mps] [--runs N]``.
The two are run interleaved (ours, torch, ours, ...), each call on a fresh input, and the table
gives min / median / max of the wall time (synchronised) and the peak memory allocated during
the call beyond what existed before it, next to the output's own size:

- cuda: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``;
- mps: the growth of ``torch.mps.driver_allocated_memory`` across the call (what upstream's
  MPSGraph pad leaked: memory the driver holds outside torch's allocator);
- cpu: the running peak of the allocations and frees torch's profiler records during the call.

On the CPU mpslinalg's path is the Metal emulator, so its times say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mpslinalg  # noqa: E402

#: (label, shape, pads): the 5-D temporal pad of a video VAE decoder and a 2-D crop; on the
#: CPU (the emulator) the larger dimensions are divided by 4.
CASES = [
    ("5-D temporal bf16, T+2", (1, 16, 8, 256, 256), [0, 0, 0, 0, 2, 0]),
    ("2-D crop+pad bf16", (2048, 2048), [-3, 5, 7, -2]),
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _peak_cpu(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        out = fn()
        del out
    # allocations are attributed to the op that made them (its self memory), frees to
    # "[memory]" events; their running sum in time order peaks at the call's peak
    running = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        running += event.self_cpu_memory_usage
        peak = max(peak, running)
    return peak


def measure(fn, device: torch.device) -> tuple[float, int]:
    """(seconds, peak extra bytes) of one call."""
    _sync(device)
    if device.type == "cpu":
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        return seconds, _peak_cpu(fn)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = torch.mps.driver_allocated_memory()
    start = time.perf_counter()
    out = fn()
    _sync(device)
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        peak = torch.mps.driver_allocated_memory() - before
    del out
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="mps" if torch.backends.mps.is_available() else
                        "cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    backend = "metal" if device.type in ("cpu", "mps") else "torch"
    print(f"device {device}, mpslinalg backend {backend!r}, {args.runs} interleaved runs\n")
    print("| case | impl | time ms min / median / max | peak extra MiB (max) | output MiB |")
    print("|---|---|---|---|---|")
    with mpslinalg.use_backend(backend):
        for label, shape, pads in CASES:
            if device.type == "cpu":
                shape = tuple(max(1, s // 4) if s > 8 else s for s in shape)
            x = torch.randn(shape).to(torch.bfloat16).to(device)
            impls = {"mpslinalg": lambda x=x, pads=pads: mpslinalg.ops.pad(x, pads),
                     "F.pad": lambda x=x, pads=pads: F.pad(x, pads)}
            out_mib = F.pad(x, pads).numel() * x.element_size() / 2**20
            for fn in impls.values():  # warm-up (compilation, caches)
                fn()
            results = {name: ([], []) for name in impls}
            for _ in range(args.runs):
                for name, fn in impls.items():
                    seconds, peak = measure(fn, device)
                    results[name][0].append(seconds * 1e3)
                    results[name][1].append(peak / 2**20)
            for name, (times, peaks) in results.items():
                spread = (f"{min(times):.3f} / {statistics.median(times):.3f} / "
                          f"{max(times):.3f}")
                print(f"| {label} {tuple(shape)} | {name} | {spread} | {max(peaks):.2f} | "
                      f"{out_mib:.2f} |")


if __name__ == "__main__":
    main()
