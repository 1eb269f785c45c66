"""Batched QR of m x n matrices, m, n <= 4: mpslinalg's small path vs torch.linalg.qr vs a copy.

Self-contained: ``python benchmarks/bench_small_qr.py [--device cpu|cuda] [--out FILE]``.
Candidates run interleaved (one call of each per round, in turn), each timed alone and
synchronised (CUDA: by CUDA events around the call, i.e. device time including the launch
overhead the host adds between the events); the table gives min / median / max in ms and ratios
of medians. Columns: ``small path`` = ``mpslinalg.small.small_qr`` (the kernel and its output
allocation), ``public qr`` = ``mpslinalg.qr`` on the torch backend (the op's dispatch added; it
falls back to torch.linalg.qr below the crossover batch), ``torch`` = ``torch.linalg.qr``,
``copy`` = ``A.clone()`` (the memory-traffic floor: reads A and writes as many bytes).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg.small import cpu_simd, orthogonal  # noqa: E402


def timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """A function timing one call in ms (CUDA: events; CPU: perf_counter)."""
    if device.type == "cuda":
        def run(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return run

    def run_cpu(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return run_cpu


def interleaved(fns: dict[str, Callable[[], object]], device: torch.device,
                repeats: int) -> dict[str, list[float]]:
    """{name: [ms per call]}: one warm-up call each, then ``repeats`` rounds calling each in
    turn."""
    run = timer(device)
    for fn in fns.values():
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(run(fn))
    return times


def spread(ts: list[float]) -> str:
    return f"{min(ts):.3f} / {statistics.median(ts):.3f} / {max(ts):.3f}"


def header(device: torch.device, dtype: torch.dtype, repeats: int, what: str) -> list[str]:
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine())
    lines = [f"device {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} "
             f"CPU threads, {str(dtype).removeprefix('torch.')}, {repeats} interleaved rounds, "
             f"ms as min / median / max; {what}"]
    if device.type == "cpu":
        lines.append(f"native CPU library: {cpu_simd.ORTH_LIBRARY.status}")
    return lines


def measure(A: torch.Tensor, mode: str, device: torch.device, repeats: int,
            time_torch: bool = True) -> str:
    """One table row for the batch A (torch.linalg.qr left out unless ``time_torch``: on CUDA
    it takes ~41 s per call for 1e6 3x3 matrices)."""
    fns = {"small": lambda: orthogonal.small_qr(A, mode),
           "public": lambda: mpslinalg.qr(A, mode),
           "torch": lambda: torch.linalg.qr(A, mode),
           "copy": lambda: A.clone()}
    if not time_torch:
        del fns["torch"]
    with mpslinalg.use_backend("torch"):
        t = interleaved(fns, device, repeats)
    med = {k: statistics.median(v) for k, v in t.items()}
    m, n = A.shape[-2:]
    if time_torch:
        theirs = [spread(t["torch"]), None, f"{med['torch'] / med['small']:.1f}x",
                  f"{med['torch'] / med['public']:.1f}x"]
    else:
        theirs = ["not timed", None, "", ""]
    theirs[1] = spread(t["copy"])
    row = [f"{m}x{n}", str(A.shape[0]), spread(t["small"]), spread(t["public"]), *theirs,
           f"{med['small'] / med['copy']:.1f}x"]
    return "| " + " | ".join(row) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--shapes", default="3x3,3x4,4x3,4x4,2x2")
    parser.add_argument("--batches", default="1,64,1000,100000,1000000")
    parser.add_argument("--mode", default="reduced", choices=("reduced", "complete", "r"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    parser.add_argument("--torch-max-batch", type=int, default=None,
                        help="leave torch.linalg.qr out above this batch (too slow on CUDA)")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu_simd.ORTH_LIBRARY.wait()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    lines = header(device, dtype, args.repeats, f"mode={args.mode!r}")
    probe = torch.zeros(2, 3, 3, dtype=dtype, device=device)
    lines += [f"small path: {orthogonal.torch_path(probe)}", ""]
    cols = ["m x n", "batch", "small path", "public qr", "torch.linalg.qr", "copy",
            "torch/small", "torch/public", "small/copy"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    print("\n".join(lines), flush=True)
    gen = torch.Generator().manual_seed(0)
    for m, n in shapes:
        for batch in batches:
            A = torch.randn(batch, m, n, generator=gen, dtype=dtype).to(device)
            repeats = args.repeats if batch * m * n <= 2_000_000 else max(3, args.repeats // 2)
            time_torch = args.torch_max_batch is None or batch <= args.torch_max_batch
            line = measure(A, args.mode, device, repeats, time_torch)
            lines.append(line)
            print(line, flush=True)
            del A
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
