"""Batched n <= 4 eig / eigvals: the small path (`mpslinalg.small.eig`) vs torch.

Self-contained: ``python benchmarks/bench_small_eig.py [--device cpu|cuda] [--ops eig,eigvals]
[--dtypes float32,complex64] [--batches 10000] [--orders 3] [--rounds 7] [--calls 1] [--copy]``.
Prints one line per (op, dtype, n, batch): per-call milliseconds min / median / max of the small
path's entry point on the torch backend (``small_eig`` / ``small_eigvals``: the path its table
chooses, torch's own function where no row serves) and of torch's (``torch.linalg.eig`` /
``eigvals``), timed interleaved (the harness of ``python -m mpslinalg bench``), and the ratio of
medians ``torch / ours`` (> 1: ours is faster). Default dtype float32. ``--copy`` adds a contender
that copies A (``A.clone()``: the memory-bound floor the issue's targets compare with) and the ratio
``ours / copy``. ``--no-torch`` leaves torch out (its CUDA eig takes about 48 s at (1e5, 3, 3) on an
H200). Inputs: standard normal matrices (real ones have real and complex eigenvalues). The defaults
are the CPU target's figures; the crossover sweep: ``--batches 1,2,4,8,16,32,64 --orders 1,2,3,4
--calls 20``; on the H200: ``--device cuda --batches 100000,1000000 --copy`` (with ``--no-torch`` at
1e6).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mpslinalg._core.timing import busy_warning, machine_header, time_interleaved  # noqa: E402
from mpslinalg.small import eig as small_eig  # noqa: E402


def _ms(t) -> str:
    return f"{t.min * 1e3:.3f} / {t.median * 1e3:.3f} / {t.max * 1e3:.3f}"


def contenders(op: str, A: torch.Tensor, with_torch: bool) -> dict:
    """ours / torch for ``op`` of ``A``."""
    if op == "eig":
        fns = {"ours": lambda: small_eig.small_eig(A, "torch"),
               "torch": lambda: torch.linalg.eig(A)}
    else:
        fns = {"ours": lambda: small_eig.small_eigvals(A, "torch"),
               "torch": lambda: torch.linalg.eigvals(A)}
    if not with_torch:
        del fns["torch"]
    return fns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", default="eig")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--batches", default="10000")
    parser.add_argument("--orders", default="3")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--copy", action="store_true")
    parser.add_argument("--no-torch", dest="torch", action="store_false")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print("\n".join(machine_header(device)))
    warning = busy_warning()
    if warning:
        print(warning)
    copy_head = " copy ms (min / median / max) | ours / copy |" if args.copy else ""
    print("| op | dtype | n | batch | path | ours ms (min / median / max) | "
          f"torch ms (min / median / max) | torch / ours |{copy_head}")
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.copy else ""))
    gen = torch.Generator().manual_seed(0)
    cases = [(op, getattr(torch, dtype), n, batch) for op in args.ops.split(",")
             for dtype in args.dtypes.split(",") for n in (int(x) for x in args.orders.split(","))
             for batch in (int(x) for x in args.batches.split(","))]
    for op, dtype, n, batch in cases:
        A = torch.randn(batch, n, n, dtype=dtype, generator=gen).to(device)
        fns = contenders(op, A, args.torch)
        if args.copy:
            fns["copy"] = A.clone
        path = small_eig.paths.choose(op, A, "torch")
        times = time_interleaved(fns, device, args.rounds, calls=args.calls)
        theirs = (f"{_ms(times['torch'])} | "
                  f"{times['torch'].median / times['ours'].median:.2f}x"
                  if args.torch else "- | -")
        line = (f"| {op} | {str(dtype)[6:]} | {n} | {batch} | {path} | "
                f"{_ms(times['ours'])} | {theirs} |")
        if args.copy:
            line += (f" {_ms(times['copy'])} | "
                     f"{times['ours'].median / times['copy'].median:.2f}x |")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
