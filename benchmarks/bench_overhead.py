"""Drop-in cost: every public function on the torch backend against the matching torch call.

Self-contained: ``python benchmarks/bench_overhead.py [--device cpu|cuda] [--rounds R]
[--calls C] [--markdown]``. For each (function, shape, dtype) the two contenders run
interleaved: each round times ``C`` calls of mpslinalg, then ``C`` calls of torch (the order
alternates between rounds), and the table reports, over ``R`` rounds, the min / median / max of
the per-call time of each and the ratio of the medians (ours / torch: the goal is <= 1.25).
Shapes: one 3x3, one 64x64, a batch of 100 3x3 and 64x64, and a batch of 4 192x192 (where
torch's own CPU LU is wrong and mpslinalg routes around it); float32 and complex64. The checking
forms (inv, solve, lu_factor) are timed on the same inputs as torch's, which check too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg._core.timing import (  # noqa: E402
    Timing,
    busy_warning,
    machine_header,
    time_interleaved,
)


def _first(A: torch.Tensor) -> torch.Tensor:
    """The first matrix of a batch (or the matrix), for the functions of 2-D operands."""
    return A.reshape(-1, *A.shape[-2:])[0]


#: (public name, mpslinalg call, torch call); each takes (A, B).
CASES: list[tuple[str, Callable, Callable]] = [
    ("solve", mpslinalg.solve, torch.linalg.solve),
    ("solve_ex", mpslinalg.solve_ex, torch.linalg.solve_ex),
    ("inv", lambda A, B: mpslinalg.inv(A), lambda A, B: torch.linalg.inv(A)),
    ("inv_ex", lambda A, B: mpslinalg.inv_ex(A), lambda A, B: torch.linalg.inv_ex(A)),
    ("det", lambda A, B: mpslinalg.det(A), lambda A, B: torch.linalg.det(A)),
    ("slogdet", lambda A, B: mpslinalg.slogdet(A), lambda A, B: torch.linalg.slogdet(A)),
    ("logdet", lambda A, B: mpslinalg.logdet(A), lambda A, B: torch.logdet(A)),
    ("lu_factor", lambda A, B: mpslinalg.lu_factor(A), lambda A, B: torch.linalg.lu_factor(A)),
    ("lu_factor_ex", lambda A, B: mpslinalg.lu_factor_ex(A),
     lambda A, B: torch.linalg.lu_factor_ex(A)),
    ("lu", lambda A, B: mpslinalg.lu(A), lambda A, B: torch.linalg.lu(A)),
    ("lu_solve", None, None),  # filled in per input below (needs the factors)
    # A is not symmetric: both read the lower triangle only
    ("ldl_factor", lambda A, B: mpslinalg.ldl_factor(A), lambda A, B: torch.linalg.ldl_factor(A)),
    ("ldl_factor_ex", lambda A, B: mpslinalg.ldl_factor_ex(A),
     lambda A, B: torch.linalg.ldl_factor_ex(A)),
    ("ldl_solve", None, None),  # filled in per input below (needs the factors)
    ("qr", lambda A, B: mpslinalg.qr(A), lambda A, B: torch.linalg.qr(A)),
    ("lstsq", mpslinalg.lstsq, torch.linalg.lstsq),
    ("svd", lambda A, B: mpslinalg.svd(A), lambda A, B: torch.linalg.svd(A)),
    ("svdvals", lambda A, B: mpslinalg.svdvals(A), lambda A, B: torch.linalg.svdvals(A)),
    ("pinv", lambda A, B: mpslinalg.pinv(A), lambda A, B: torch.linalg.pinv(A)),
    ("matrix_rank", lambda A, B: mpslinalg.matrix_rank(A),
     lambda A, B: torch.linalg.matrix_rank(A)),
    # A is not Hermitian: both read the lower triangle only
    ("eigh", lambda A, B: mpslinalg.eigh(A), lambda A, B: torch.linalg.eigh(A)),
    ("eigvalsh", lambda A, B: mpslinalg.eigvalsh(A), lambda A, B: torch.linalg.eigvalsh(A)),
    # eigvals pays a finiteness check torch's eigvals lacks (docs/known_issues.rst)
    ("eig", lambda A, B: mpslinalg.eig(A), lambda A, B: torch.linalg.eig(A)),
    ("eigvals", lambda A, B: mpslinalg.eigvals(A), lambda A, B: torch.linalg.eigvals(A)),
    ("matrix_norm", lambda A, B: mpslinalg.matrix_norm(A),
     lambda A, B: torch.linalg.matrix_norm(A)),
    ("matrix_norm ord=2", lambda A, B: mpslinalg.matrix_norm(A, 2),
     lambda A, B: torch.linalg.matrix_norm(A, 2)),
    ("norm", lambda A, B: mpslinalg.norm(A), lambda A, B: torch.linalg.norm(A)),
    ("vector_norm", lambda A, B: mpslinalg.vector_norm(A),
     lambda A, B: torch.linalg.vector_norm(A)),
    ("cond", lambda A, B: mpslinalg.cond(A), lambda A, B: torch.linalg.cond(A)),
    ("cond p=1", lambda A, B: mpslinalg.cond(A, 1), lambda A, B: torch.linalg.cond(A, 1)),
    ("matrix_power 3", lambda A, B: mpslinalg.matrix_power(A, 3),
     lambda A, B: torch.linalg.matrix_power(A, 3)),
    ("matrix_power -1", lambda A, B: mpslinalg.matrix_power(A, -1),
     lambda A, B: torch.linalg.matrix_power(A, -1)),
    ("matmul", mpslinalg.matmul, torch.linalg.matmul),
    ("vecdot", lambda A, B: mpslinalg.vecdot(A, A), lambda A, B: torch.linalg.vecdot(A, A)),
    ("cross", lambda A, B: mpslinalg.cross(A[..., :3], A[..., :3]),
     lambda A, B: torch.linalg.cross(A[..., :3], A[..., :3])),
    ("diagonal", lambda A, B: mpslinalg.diagonal(A), lambda A, B: torch.linalg.diagonal(A)),
    ("vander", lambda A, B: mpslinalg.vander(A), lambda A, B: torch.linalg.vander(A)),
    # 2-D operands: the first matrix of the batch
    ("multi_dot", lambda A, B: mpslinalg.multi_dot([_first(A)] * 3),
     lambda A, B: torch.linalg.multi_dot([_first(A)] * 3)),
    ("tensorinv", lambda A, B: mpslinalg.tensorinv(_first(A), 1),
     lambda A, B: torch.linalg.tensorinv(_first(A), 1)),
    ("tensorsolve", lambda A, B: mpslinalg.tensorsolve(_first(A), _first(A)[0]),
     lambda A, B: torch.linalg.tensorsolve(_first(A), _first(A)[0])),
]

#: (batch, n); (4,) x 192 x 192 is a batch torch's CPU LU gets wrong, which mpslinalg factors
#: one matrix at a time (docs/known_issues.rst): its row shows what the route costs.
SHAPES = [((), 3), ((), 64), ((100,), 3), ((100,), 64), ((4,), 192)]
DTYPES = [torch.float32, torch.complex64]


def measure(ours: Callable[[], object], theirs: Callable[[], object], rounds: int, calls: int,
            device: torch.device) -> tuple[Timing, Timing]:
    """Per-call time of each contender, interleaved (the shared harness: round-robin, the first
    contender alternating between rounds), after warm-up calls (caches, first-call costs)."""
    t = time_interleaved({"ours": ours, "theirs": theirs}, device, rounds, calls=calls,
                         warmup=max(3, calls // 10))
    return t["ours"], t["theirs"]


def _inputs(batch: tuple, n: int, dtype: torch.dtype, device: torch.device):
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(*batch, n, n, generator=gen, dtype=dtype) + n * torch.eye(n, dtype=dtype)
    B = torch.randn(*batch, n, 2, generator=gen, dtype=dtype)
    return A.to(device), B.to(device)


def format_us(t: Timing) -> str:
    return f"{t.min * 1e6:.1f} / {t.median * 1e6:.1f} / {t.max * 1e6:.1f}"


def run(device: torch.device, rounds: int, calls: int, names: set[str] | None,
        shapes: list[tuple[tuple, int]] = SHAPES) -> list[list[str]]:
    rows = []
    for name, ours_fn, torch_fn in CASES:
        if names and name not in names:
            continue
        for dtype in DTYPES:
            for batch, n in shapes:
                A, B = _inputs(batch, n, dtype, device)
                if name in ("lu_solve", "ldl_solve"):
                    factor = torch.linalg.lu_factor if name == "lu_solve" else \
                        torch.linalg.ldl_factor
                    LU, piv = factor(A)
                    mine, torchs = getattr(mpslinalg, name), getattr(torch.linalg, name)

                    def ours(LU=LU, piv=piv, B=B, f=mine):
                        return f(LU, piv, B)

                    def theirs(LU=LU, piv=piv, B=B, f=torchs):
                        return f(LU, piv, B)
                else:
                    def ours(A=A, B=B, f=ours_fn):
                        return f(A, B)

                    def theirs(A=A, B=B, f=torch_fn):
                        return f(A, B)
                scale = max(1, calls // (1 if n < 64 else 10))
                a, b = measure(ours, theirs, rounds, scale, device)
                ratio = a.median / b.median
                shape = f"({', '.join(map(str, (*batch, n, n)))})"
                rows.append([name, shape, str(dtype).removeprefix("torch."), format_us(a),
                             format_us(b), f"{ratio:.2f}"])
    return rows


def print_table(title: str, device: torch.device, method: str, column: str,
                rows) -> None:
    """The markdown report: title, the machine's header, ``method``, a warning when the machine
    is busy, and the table of ``rows`` (printed as they come) under its ``column`` heading."""
    print(f"# {title}\n")
    print("\n".join(f"    {line}" for line in machine_header(device)))
    print(f"\n{method}\n")
    warning = busy_warning()
    if warning:
        print(f"**{warning}**\n")
    print(f"| function | shape | {column} | mpslinalg us/call min / median / max | "
          "torch us/call min / median / max | ratio of medians |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only", default="", help="comma-separated function names")
    parser.add_argument("--n", default="", help="only the shapes of these n (comma-separated)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    names = {n for n in args.only.split(",") if n} or None
    sizes = {int(n) for n in args.n.split(",") if n}
    shapes = [s for s in SHAPES if not sizes or s[1] in sizes]
    print_table("Drop-in cost on the torch backend", device,
                f"{args.rounds} interleaved rounds of {args.calls} calls "
                f"(64x64: {max(1, args.calls // 10)})", "dtype",
                run(device, args.rounds, args.calls, names, shapes))


if __name__ == "__main__":
    main()
