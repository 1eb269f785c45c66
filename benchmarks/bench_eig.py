"""eig of real matrices: mpslinalg on the torch backend and on the metal backend (the Metal
kernels: the emulator for CPU tensors, the CUDA executor for CUDA tensors with
MPSLINALG_METAL_ON_CUDA=1) vs torch.linalg.eig, interleaved.

Self-contained: ``python benchmarks/bench_eig.py [--device cpu|cuda] [--cases ...] [--host-cpu]
[--without-aed] [--out FILE]``; ``--host-cpu`` adds torch.linalg.eig on the host's CPU (the bar
for large n, where torch's CUDA eig is a CPU hybrid) and the metal column's ratio to it;
``--without-aed`` adds the metal backend with eig_device's aggressive early deflation turned off
(``eig_metal.AGGRESSIVE_EARLY_DEFLATION``), its A/B.
On CUDA run it as ``MPSLINALG_METAL_ON_CUDA=1 python benchmarks/bench_eig.py --device cuda``
for the "metal" column (without the variable that column is left out there). Interleaved
rounds, min / median / max in ms (CUDA: synchronised wall time per call, as
`mpslinalg._core.timing.time_interleaved`), ratios of medians. The default cases are the
issue's: (1e5, 3, 3), 64 x (32 x 32), 256 x 256, 1024 x 1024 on a GPU; on the CPU smaller ones
(the emulator runs the Metal kernels for correctness, not speed: its times say nothing of a
GPU's).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import mpslinalg  # noqa: E402
from mpslinalg._core.timing import machine_header, time_interleaved  # noqa: E402
from mpslinalg.linalg import eig_metal  # noqa: E402

#: (batch, n) per device kind.
CASES = {"cpu": "1000x3,8x32,1x64,1x128", "cuda": "100000x3,64x32,1x256,1x1024"}


def spread(t) -> str:
    return f"{t.min * 1e3:.3g} / {t.median * 1e3:.3g} / {t.max * 1e3:.3g}"


HOST_CPU = "torch.linalg.eig (host CPU)"
METAL = "mpslinalg (metal backend)"
METAL_NO_AED = "mpslinalg (metal, no AED)"


def measure(batch: int, n: int, device: torch.device, rounds: int, metal: bool,
            host_cpu: bool, without_aed: bool = False) -> tuple[str, list[str]]:
    gen = torch.Generator().manual_seed(0)
    A_host = torch.randn(batch, n, n, generator=gen)
    A = A_host.to(device)
    fns = {"torch.linalg.eig": lambda: torch.linalg.eig(A)}
    if host_cpu:  # torch's CUDA eig is a CPU hybrid: the host's own LAPACK is the bar at scale
        fns[HOST_CPU] = lambda: torch.linalg.eig(A_host)

    def ours(backend):
        def run():
            with mpslinalg.use_backend(backend):
                return mpslinalg.eig(A)
        return run

    fns["mpslinalg (torch backend)"] = ours("torch")
    if metal:
        fns[METAL] = ours("metal")
    if metal and without_aed:
        metal_run = ours("metal")

        def no_aed():
            eig_metal.AGGRESSIVE_EARLY_DEFLATION = False
            try:
                return metal_run()
            finally:
                eig_metal.AGGRESSIVE_EARLY_DEFLATION = True
        fns[METAL_NO_AED] = no_aed
    t = time_interleaved(fns, device, rounds)
    base = t["torch.linalg.eig"].median
    cells = [f"{batch} x ({n}x{n})"]
    for name in fns:
        cells.append(spread(t[name]))
    for name in list(fns)[1:]:
        cells.append(f"{t[name].median / base:.2f}")
    names = list(fns)
    if host_cpu and metal:
        cells.append(f"{t[METAL].median / t[HOST_CPU].median:.2f}")
        names.append(f"{METAL} / host CPU")
    return "| " + " | ".join(cells) + " |", names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", default=None, help="comma-separated BATCHxN")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-metal", action="store_true", help="leave the metal column out")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--host-cpu", action="store_true",
                        help="on a GPU, also time torch.linalg.eig on the host CPU")
    parser.add_argument("--without-aed", action="store_true",
                        help="also time the metal backend without aggressive early deflation")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    metal = not args.no_metal and (device.type in ("cpu", "mps")
                                   or os.environ.get("MPSLINALG_METAL_ON_CUDA") == "1")
    cases = args.cases or CASES.get(device.type, CASES["cuda"])
    lines = machine_header(device) + [
        "", "eig of standard normal float32 matrices; times min / median / max in ms per call, "
        f"{args.rounds} interleaved rounds; ratio = median / torch.linalg.eig's median", ""]
    header_done = False
    for case in cases.split(","):
        batch, n = (int(x) for x in case.split("x"))
        row, names = measure(batch, n, device, args.rounds, metal,
                             args.host_cpu and device.type != "cpu", args.without_aed)
        if not header_done:
            timed = [name for name in names if "/" not in name]
            cols = ["case", *timed, *[f"{name} / torch" for name in timed[1:]],
                    *[name for name in names if "/" in name]]
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            print("\n".join(lines), flush=True)
            header_done = True
        lines.append(row)
        print(row, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
