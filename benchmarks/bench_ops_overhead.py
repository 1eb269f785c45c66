"""Drop-in cost of the `mpslinalg.ops` functions that guard a torch call, on the torch backend.

Self-contained: ``python benchmarks/bench_ops_overhead.py [--device cpu|cuda] [--rounds R]
[--calls C]``. Same method as ``bench_overhead.py`` (its `measure`: the two contenders
interleaved, min / median / max per call in microseconds, the ratio of the medians, ours over
torch's; the goal is at most 1.25). Rows:

- the Laguerre and Legendre polynomials, whose degree bound guards torch's unbounded recurrence
  (docs/known_issues.rst), with the degree given as a number and as a tensor, and the Chebyshev
  polynomial (no guard) beside them;
- ``grouped_mm`` of rows grouped by offsets (bfloat16 on CUDA, float32 on the CPU). On CUDA the
  groups are moved to 16-byte boundaries on the device because torch's kernel asserts on the
  device otherwise; torch's own call is timed on aligned groups, ours also on groups of 3 rows
  (torch's would assert on CUDA).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_overhead import format_us, measure, print_table  # noqa: E402

from mpslinalg import ops  # noqa: E402
from mpslinalg._core.timing import time_interleaved  # noqa: E402

POLYNOMIALS = ("laguerre_polynomial_l", "legendre_polynomial_p", "chebyshev_polynomial_t")
SIZES = (1, 1000, 1_000_000)
#: (tokens, inner, outputs, experts) of the grouped products.
GROUPED = ((64, 256, 512, 8), (4096, 1024, 1024, 8), (512, 2048, 1408, 64))


def polynomial_rows(device: torch.device, rounds: int, calls: int) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for size in SIZES:
        x = torch.rand(size, generator=gen).to(device)
        degrees = {"7": 7, "tensor of 7": torch.full((size,), 7.0, device=device)}
        for name in POLYNOMIALS:
            ours_fn, torch_fn = getattr(ops, name), getattr(torch.special, name)
            for label, n in degrees.items():
                a, b = measure(lambda f=ours_fn, x=x, n=n: f(x, n),
                               lambda f=torch_fn, x=x, n=n: f(x, n),
                               rounds, calls if size < 10**6 else max(1, calls // 10), device)
                rows.append([name, f"({size},)", label, format_us(a), format_us(b),
                             f"{a.median / b.median:.2f}"])
    return rows


def grouped_rows(device: torch.device, rounds: int, calls: int) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for tokens, inner, outputs, experts in GROUPED:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        a = torch.randn(tokens, inner, generator=gen).to(device, dtype)
        # (G, K, N) with K contiguous: the layout torch's kernel takes without a copy
        b = torch.randn(experts, outputs, inner, generator=gen).to(device, dtype).mT
        aligned = torch.full((experts,), tokens // experts).cumsum(0).to(device, torch.int32)
        ragged = torch.tensor([3] * (experts - 1) + [tokens - 3 * (experts - 1)])
        ragged = ragged.cumsum(0).to(device, torch.int32)
        shape = f"{tokens}x{inner} @ {experts}x{inner}x{outputs}"
        ours, theirs = measure(lambda a=a, b=b, o=aligned: ops.grouped_mm(a, b, offs=o),
                               lambda a=a, b=b, o=aligned: F.grouped_mm(a, b, offs=o),
                               rounds, calls, device)
        rows.append(["grouped_mm", shape, "equal groups (16-byte aligned)", format_us(ours),
                     format_us(theirs), f"{ours.median / theirs.median:.2f}"])
        t = time_interleaved({"ours": lambda a=a, b=b, o=ragged: ops.grouped_mm(a, b, offs=o)},
                             device, rounds, calls=calls, warmup=3)["ours"]
        rows.append(["grouped_mm", shape, "groups of 3 rows", format_us(t),
                     "(device-side assert)" if device.type == "cuda" else "-", "-"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    def rows():
        yield from polynomial_rows(device, args.rounds, args.calls)
        if hasattr(F, "grouped_mm"):
            yield from grouped_rows(device, args.rounds, max(1, args.calls // 2))

    print_table("Drop-in cost of the guarded ops on the torch backend", device,
                f"{args.rounds} interleaved rounds of {args.calls} calls (1e6 elements: "
                f"{max(1, args.calls // 10)})", "degree / groups", rows())


if __name__ == "__main__":
    main()
