"""Batched n <= 4 inverse: mpslinalg's small path vs torch.linalg.inv (and NumPy on CPU).

Self-contained: ``python benchmarks/bench_small_inverse.py [--device cpu|cuda|mps]``. Prints a
markdown table of median times (synchronised) and ratios ``torch / ours`` (> 1: ours is faster),
measured side by side (interleaved by the harness of ``python -m mpslinalg bench``), for batch
sizes 1 .. 1e6 and n = 2, 3, 4. The column
``public inv_ex`` times ``mpslinalg.inv_ex`` itself, which falls back to torch.linalg where the
small path would be slower (``use_small_path``), and ``public inv`` times ``mpslinalg.inv`` (the
checking form: ``inv_ex`` plus one read of ``info``), the figure quoted in the README.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg._core.timing import busy_warning, machine_header, time_interleaved  # noqa: E402
from mpslinalg.small import dispatch as si  # noqa: E402


def _inv_or_nan(A: torch.Tensor) -> torch.Tensor | None:
    try:
        return mpslinalg.inv(A)
    except mpslinalg.LinAlgError:  # a numerically singular matrix in a random batch
        return None


def measure(A: torch.Tensor, device: torch.device, repeats: int) -> list[str]:
    """One table row: small path, torch.linalg.inv, public mpslinalg.inv_ex and inv (NumPy on
    CPU), timed interleaved by the shared harness; medians in ms."""
    n, batch = A.shape[-1], A.shape[0]
    contenders = {
        "small path": lambda: si.small_inv_ex(A),
        "torch": lambda: torch.linalg.inv(A),
        # inv_ex: random float32 batches of 1e6 contain a few numerically singular matrices (a
        # pivot that rounds to exactly 0, implementation-dependent), on which inv would raise.
        "public inv_ex": lambda: mpslinalg.inv_ex(A),
        "public inv": lambda: _inv_or_nan(A),
    }
    if device.type == "cpu":
        a = A.numpy()
        contenders["numpy"] = lambda: np.linalg.inv(a)
    ms = {name: t.median * 1e3 for name, t in time_interleaved(contenders, device, repeats).items()}
    ours, ref, checked = ms["small path"], ms["torch"], ms["public inv"]
    row = [str(n), str(batch), f"{ours:.3f}", f"{ref:.3f}", f"{ref / ours:.2f}x",
           f"{ms['public inv_ex']:.3f}", f"{checked:.3f}", f"{ref / checked:.2f}x"]
    if device.type == "cpu":
        row += [f"{ms['numpy']:.3f}", f"{ms['numpy'] / ours:.2f}x"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", default="2,3,4")
    parser.add_argument("--batches", default="1,100,10000,100000,1000000")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine())
    print("\n".join(machine_header(device)))
    print(f"device {device} ({name}), {args.dtype}, median of {args.repeats} interleaved rounds, "
          "ms")
    warning = busy_warning()
    if warning:
        print(warning)
    probe = torch.zeros(1, 4, 4, dtype=dtype, device=device)
    path = si.torch_path(probe)
    if path == "triton":
        import triton

        from mpslinalg.small import triton_kernels

        path += (f" {triton.__version__} (fused kernel, load={triton_kernels._LOAD}, "
                 f"BLOCK={triton_kernels._BLOCK}, num_warps={triton_kernels._WARPS})")
    print(f"small path: {path}")
    print()
    cols = ["n", "batch", "small path", "torch.linalg.inv", "torch/ours", "public inv_ex",
            "public inv", "torch/public inv"]
    if device.type == "cpu":
        cols += ["numpy.linalg.inv", "numpy/ours"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        for batch in batches:
            repeats = args.repeats if batch * n * n <= 4_000_000 else max(3, args.repeats // 3)
            A = torch.randn(batch, n, n, generator=gen, dtype=dtype).to(device)
            print("| " + " | ".join(measure(A, device, repeats)) + " |", flush=True)
            del A
    return 0


if __name__ == "__main__":
    sys.exit(main())
