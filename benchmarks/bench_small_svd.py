"""Batched SVD and symmetric eigendecomposition of n <= 4 matrices: mpslinalg's small path
(``mpslinalg.small.small_svd`` / ``small_eigh``) vs torch.linalg.svd / eigh vs a copy.

Self-contained: ``python benchmarks/bench_small_svd.py [--device cpu|cuda] [--out FILE]``.
Interleaved rounds, min / median / max in ms, ratios of medians (timing as
benchmarks/bench_small_qr.py: CUDA events on CUDA). torch failing on a size (cuSOLVER's batched
eigh on large batches) is reported in its cell.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from bench_small_qr import header, interleaved, spread  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg.small import cpu_simd, orthogonal  # noqa: E402


def _torch_or_error(fn):
    """fn, or None with the error's first line when torch cannot run it for this size."""
    try:
        fn()
    except (RuntimeError, torch.OutOfMemoryError) as error:
        return None, str(error).splitlines()[0][:80]
    return fn, ""


def measure(op: str, A: torch.Tensor, device: torch.device, repeats: int) -> str:
    if op == "svd":
        ours = lambda: orthogonal.small_svd(A, True, True)  # noqa: E731
        ref, error = _torch_or_error(lambda: torch.linalg.svd(A))
    elif op == "svdvals":
        ours = lambda: orthogonal.small_svd(A, False, False)  # noqa: E731
        ref, error = _torch_or_error(lambda: torch.linalg.svdvals(A))
    else:
        S = A + A.mT
        ours = lambda: orthogonal.small_eigh(S, False, True)  # noqa: E731
        ref, error = _torch_or_error(lambda: torch.linalg.eigh(S))
    fns = {"small": ours, "copy": lambda: A.clone()}
    if ref is not None:
        fns["torch"] = ref
    with mpslinalg.use_backend("torch"):
        t = interleaved(fns, device, repeats)
    med = {k: statistics.median(v) for k, v in t.items()}
    n = A.shape[-1]
    torch_cell = spread(t["torch"]) if ref is not None else f"fails: {error}"
    ratio = f"{med['torch'] / med['small']:.1f}x" if ref is not None else "-"
    row = [op, f"{A.shape[-2]}x{n}", str(A.shape[0]), spread(t["small"]), torch_cell,
           spread(t["copy"]), ratio, f"{med['small'] / med['copy']:.1f}x"]
    return "| " + " | ".join(row) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ops", default="svd,svdvals,eigh")
    parser.add_argument("--shapes", default="3x3")
    parser.add_argument("--batches", default="1000,100000,1000000")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu_simd.ORTH_LIBRARY.wait()
    lines = header(device, dtype, args.repeats, "svd: full_matrices=True; eigh of A + A^T")
    probe = torch.zeros(2, 3, 3, dtype=dtype, device=device)
    lines += [f"small path: {orthogonal.torch_path(probe)}", ""]
    cols = ["op", "m x n", "batch", "small path", "torch.linalg", "copy", "torch/small",
            "small/copy"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    print("\n".join(lines), flush=True)
    gen = torch.Generator().manual_seed(0)
    for op in args.ops.split(","):
        for shape in args.shapes.split(","):
            m, n = (int(x) for x in shape.split("x"))
            if op == "eigh" and m != n:
                continue
            for batch in (int(b) for b in args.batches.split(",")):
                A = torch.randn(batch, m, n, generator=gen, dtype=dtype).to(device)
                repeats = args.repeats if batch <= 200_000 else max(3, args.repeats // 2)
                line = measure(op, A, device, repeats)
                lines.append(line)
                print(line, flush=True)
                del A
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
