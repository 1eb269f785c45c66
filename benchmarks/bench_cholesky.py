"""The Cholesky family on the torch backend: mpslinalg.cholesky / cholesky_ex /
solve_triangular / cholesky_solve / cholesky_inverse vs torch's own functions (the drop-in
cost of the public call), and optionally the Metal kernels (``--metal``: the emulator on CPU
tensors, the CUDA executor with ``MPSLINALG_METAL_ON_CUDA=1`` on CUDA tensors).

Self-contained: ``python benchmarks/bench_cholesky.py [--device cpu|cuda] [--shapes
1x3,100x3,1x64,64x64,1x512] [--rounds 7] [--calls 20] [--metal]``. Prints one line per
(function, batch x n): per-call milliseconds min / median / max of ours and of torch's, timed
interleaved in one loop (the harness of ``python -m mpslinalg bench``), and the ratio of
medians ``ours / torch`` (the drop-in cost; < 1: ours is faster). Inputs: Hermitian positive
definite float32 (random Q diag(s) Q^T, condition 100), 4 right-hand sides.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg._core.timing import busy_warning, machine_header, time_interleaved  # noqa: E402


def _ms(t) -> str:
    return f"{t.min * 1e3:.4f} / {t.median * 1e3:.4f} / {t.max * 1e3:.4f}"


def _hpd(batch: int, n: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=gen, dtype=torch.float64))
    s = 100.0 ** (-torch.arange(n, dtype=torch.float64) / max(n - 1, 1))
    return ((Q * s) @ Q.mT).float().to(device)


def _contenders(batch: int, n: int, device: torch.device):
    A = _hpd(batch, n, device)
    L = torch.linalg.cholesky(A)
    B = torch.randn(batch, n, 4, device=device)
    return {
        "cholesky": (lambda: mpslinalg.cholesky(A), lambda: torch.linalg.cholesky(A)),
        "cholesky_ex": (lambda: mpslinalg.cholesky_ex(A), lambda: torch.linalg.cholesky_ex(A)),
        "solve_triangular": (lambda: mpslinalg.solve_triangular(L, B, upper=False),
                             lambda: torch.linalg.solve_triangular(L, B, upper=False)),
        "cholesky_solve": (lambda: mpslinalg.cholesky_solve(B, L),
                           lambda: torch.cholesky_solve(B, L)),
        "cholesky_inverse": (lambda: mpslinalg.cholesky_inverse(L),
                             lambda: torch.cholesky_inverse(L)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shapes", default="1x3,100x3,1x64,64x64,1x512",
                        help="comma-separated batch x n")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--metal", action="store_true",
                        help="ours on the metal backend (the kernels) instead of the torch one")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print("\n".join(machine_header(device)))
    warning = busy_warning()
    if warning:
        print(warning)
    print(f"ours: the {'metal' if args.metal else 'torch'} backend")
    print("| function | batch x n | ours ms (min / median / max) | "
          "torch ms (min / median / max) | ours / torch |")
    print("|---|---|---|---|---|")
    backend = mpslinalg.use_backend("metal") if args.metal else contextlib.nullcontext()
    with backend:
        for shape in args.shapes.split(","):
            batch, n = (int(x) for x in shape.split("x"))
            for name, (ours, theirs) in _contenders(batch, n, device).items():
                times = time_interleaved({"ours": ours, "torch": theirs}, device, args.rounds,
                                         calls=args.calls)
                print(f"| {name} | {batch}x{n} | {_ms(times['ours'])} | "
                      f"{_ms(times['torch'])} | "
                      f"{times['ours'].median / times['torch'].median:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
