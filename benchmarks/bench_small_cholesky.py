"""Batched n <= 4 Cholesky family: the small path (`mpslinalg.small.cholesky`) vs torch.

Self-contained: ``python benchmarks/bench_small_cholesky.py [--device cpu|cuda]
[--ops cholesky,solve_triangular,cholesky_solve] [--batches 100000] [--orders 3,4]
[--dtypes float32,complex64] [--rounds 7] [--calls 1] [--copy]``. Prints one line per (op,
dtype, n, batch): per-call milliseconds min / median / max of the small path's entry point on
the torch backend (``small_cholesky_ex`` / ``small_solve_triangular`` / ``small_cholesky_solve``:
the path its table chooses, torch's own function where no row serves the dtype) and of torch's
function (``torch.linalg.cholesky``, ``torch.linalg.solve_triangular``,
``torch.cholesky_solve``), timed interleaved (the harness of ``python -m mpslinalg bench``), and
the ratio of medians ``torch / ours`` (> 1: ours is faster). ``--copy`` adds a contender that
copies A (``A.clone()``: the memory-bound floor the issue's targets compare with) and the ratio
``ours / copy``. Inputs: X X^H / n + I (SPD), its factor for the solves, B with 1
right-hand side. The defaults are the CPU figures; on the H200: ``--device cuda --batches
1000000``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mpslinalg._core.timing import busy_warning, machine_header, time_interleaved  # noqa: E402
from mpslinalg.small import cholesky as small_chol  # noqa: E402


def _ms(t) -> str:
    return f"{t.min * 1e3:.3f} / {t.median * 1e3:.3f} / {t.max * 1e3:.3f}"


def contenders(op: str, A: torch.Tensor, L: torch.Tensor, B: torch.Tensor) -> dict:
    """ours / torch for ``op`` on SPD ``A``, its lower factor ``L`` and right-hand sides B."""
    if op == "cholesky":
        return {"ours": lambda: small_chol.small_cholesky_ex(A, False, "torch"),
                "torch": lambda: torch.linalg.cholesky(A)}
    if op == "solve_triangular":
        return {"ours": lambda: small_chol.small_solve_triangular(L, B, False, True, False,
                                                                  "torch"),
                "torch": lambda: torch.linalg.solve_triangular(L, B, upper=False)}
    return {"ours": lambda: small_chol.small_cholesky_solve(B, L, False, "torch"),
            "torch": lambda: torch.cholesky_solve(B, L)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", default="cholesky")
    parser.add_argument("--batches", default="100000")
    parser.add_argument("--orders", default="3,4")
    parser.add_argument("--dtypes", default="float32,complex64")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--copy", action="store_true")
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
    for op in args.ops.split(","):
        for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
            for n in (int(x) for x in args.orders.split(",")):
                for batch in (int(x) for x in args.batches.split(",")):
                    X = torch.randn(batch, n, n, dtype=dtype, generator=gen)
                    A = (X @ X.mH / n + torch.eye(n, dtype=dtype)).to(device)
                    L = torch.linalg.cholesky(A)
                    B = torch.randn(batch, n, 1, dtype=dtype, generator=gen).to(device)
                    fns = contenders(op, A, L, B)
                    if args.copy:
                        fns["copy"] = A.clone
                    path = small_chol.paths.choose(op, A, "torch")
                    times = time_interleaved(fns, device, args.rounds, calls=args.calls)
                    line = (f"| {op} | {str(dtype)[6:]} | {n} | {batch} | {path} | "
                            f"{_ms(times['ours'])} | {_ms(times['torch'])} | "
                            f"{times['torch'].median / times['ours'].median:.2f}x |")
                    if args.copy:
                        line += (f" {_ms(times['copy'])} | "
                                 f"{times['ours'].median / times['copy'].median:.2f}x |")
                    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
