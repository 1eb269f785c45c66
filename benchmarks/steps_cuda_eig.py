"""Where eig_device spends its time, stage by stage, through the CUDA executor on an NVIDIA GPU
(not an Apple GPU): the kernel stopped after each stage of metal/linalg/eig.h, cumulative
times of one float32 standard normal matrix, and eigvals alone.

The stops are text edits of the kernel's source (a ``#define EIG_STOP k`` and a test of it
before each stage), compiled as separate libraries; every variant runs once before the timed
rounds, which interleave the variants. A stage's time is the difference of two cumulative
medians, so a stage much shorter than the rounds' spread reads as noise (it can come out
negative). Stages:

  1  load, exact scaling, balancing
  2  + Hessenberg reduction and Q
  3  + Schur form (the QR sweeps)
  4  + X, the eigenvectors of T (back-substitution)
  5  + V = Z X
  6  + the balancing undone and the normalisation: the whole kernel

    MPSLINALG_METAL_ON_CUDA=1 python benchmarks/steps_cuda_eig.py [--sizes 256,1024]
        [--rounds 3] [--device cuda]

``--device cpu`` runs the same variants through the emulator (for checking the edits; its
times say nothing of a GPU's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mpslinalg._core import metal as _metal  # noqa: E402
from mpslinalg.linalg import eig_metal  # noqa: E402

STAGES = {1: "scale + balance", 2: "+ Hessenberg and Q", 3: "+ Schur form", 4: "+ X (trevc)",
          5: "+ V = Z X", 6: "+ normalise (whole kernel)"}

#: (text of eig.h, the same text testing the stop): each must occur once.
EDITS = [
    ("    eig_hessenberg(w, ilo, ihi);\n",
     "    if (EIG_STOP > 1) eig_hessenberg(w, ilo, ihi);\n"),
    ("    status = eig_schur_by(Schur(), w, ilo, ihi, wb);\n",
     "    if (EIG_STOP > 2) status = eig_schur_by(Schur(), w, ilo, ihi, wb);\n"),
    ("    if (status == 0 && w.vectors) {\n",
     "    if (EIG_STOP > 3 && status == 0 && w.vectors) {\n"),
    ("  eig_sync();\n  // V = Z X", "  eig_sync();\n  if (EIG_STOP <= 4) return;\n  // V = Z X"),
    ("  eig_sync();\n  // The balancing undone",
     "  eig_sync();\n  if (EIG_STOP <= 5) return;\n  // The balancing undone"),
]

_load_source = _metal.load_source


def _staged_source(path: str) -> str:
    """`mpslinalg._core.metal.load_source`, with ``<path>#stop<k>`` giving the kernel stopped
    after stage k."""
    if "#stop" not in path:
        return _load_source(path)
    base, stop = path.split("#stop")
    text = _load_source(base)
    for old, new in EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"steps_cuda_eig: the kernel's text changed; not once: {old!r}")
        text = text.replace(old, new)
    return f"#define EIG_STOP {stop}\n" + text


def run(A: torch.Tensor, stop: int | None, vectors: bool = True) -> None:
    eig_metal._SOURCE = "linalg/eig.metal" + ("" if stop is None else f"#stop{stop}")
    try:
        eig_metal.eig_metal(A, vectors=vectors)
    finally:
        eig_metal._SOURCE = "linalg/eig.metal"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        os.environ.setdefault(_metal.METAL_ON_CUDA_VAR, "1")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    _metal.load_source = _staged_source
    gen = torch.Generator().manual_seed(0)
    warm = torch.randn(1, 70, 70, generator=gen).to(device)  # the device kernel (n > 63)
    for stop in (*STAGES, None):
        run(warm, stop)
    run(warm, None, vectors=False)
    sync()
    print(f"eig_device by stage, {device}, float32, medians of {args.rounds} interleaved rounds, "
          "cumulative ms (stage: the difference)")
    print("| n | stage | cumulative | stage |\n|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        A = torch.randn(1, n, n, generator=gen).to(device)
        times: dict[object, list[float]] = {key: [] for key in (*STAGES, "eigvals")}
        for _ in range(args.rounds):
            for key in times:
                sync()
                start = time.perf_counter()
                if key == "eigvals":
                    run(A, None, vectors=False)
                else:
                    run(A, key)
                sync()
                times[key].append((time.perf_counter() - start) * 1e3)
        before = 0.0
        for stop, name in STAGES.items():
            median = statistics.median(times[stop])
            print(f"| {n} | {name} | {median:.2f} | {median - before:.2f} |")
            before = median
        print(f"| {n} | eigvals (the whole kernel, no vectors) | "
              f"{statistics.median(times['eigvals']):.2f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
