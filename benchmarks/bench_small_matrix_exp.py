"""Batched n <= 4 matrix exponential: mpslinalg.matrix_exp (its small path where the table
takes it) vs torch.linalg.matrix_exp.

Self-contained: ``python benchmarks/bench_small_matrix_exp.py [--device cpu|cuda]
[--batches 1024,100000] [--orders 3,4] [--rounds 7] [--forced]``. Prints one line per (n,
batch): per-call milliseconds min / median / max of the public ``mpslinalg.matrix_exp`` and of
``torch.linalg.matrix_exp``, timed interleaved (the harness of ``python -m mpslinalg bench``),
and the ratio of medians ``torch / ours`` (> 1: ours is faster). ``--forced`` times the small
path's entry point itself (the kernel without the public call's dispatch), for finding the
crossovers. Inputs: randn / n, float32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg._core.timing import busy_warning, machine_header, time_interleaved  # noqa: E402
from mpslinalg.small import matrix_exp as small_expm  # noqa: E402


def _ms(t) -> str:
    return f"{t.min * 1e3:.3f} / {t.median * 1e3:.3f} / {t.max * 1e3:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="1024,100000")
    parser.add_argument("--orders", default="3,4")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--forced", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print("\n".join(machine_header(device)))
    warning = busy_warning()
    if warning:
        print(warning)
    print("| n | batch | ours ms (min / median / max) | torch ms (min / median / max) | "
          "torch / ours |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in args.orders.split(",")):
        for batch in (int(x) for x in args.batches.split(",")):
            A = torch.randn(batch, n, n, device=device) / n
            ours = small_expm.small_matrix_exp if args.forced else mpslinalg.matrix_exp
            times = time_interleaved({"ours": lambda A=A, f=ours: f(A),
                                      "torch": lambda A=A: torch.linalg.matrix_exp(A)},
                                     device, args.rounds, calls=args.calls)
            print(f"| {n} | {batch} | {_ms(times['ours'])} | {_ms(times['torch'])} | "
                  f"{times['torch'].median / times['ours'].median:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
