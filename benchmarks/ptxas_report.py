"""Registers, stack and spills of Metal kernels as the CUDA executor's code would get them, from
ptxas alone: no GPU needed.

    python benchmarks/ptxas_report.py linalg/eig.metal [--kernels device] [--bounds 1024,512]
        [--root DIR] [--ptxas PATH]

The source is translated and compiled to PTX the executor's way (`mpslinalg.emulator.cuda.
compile_ptx`, NVRTC), each kernel's thread bound (``.maxntid``, the executor's launch bound:
Metal's 1024, or one of the smaller bounds it compiles a spilling kernel again for) set to each
of ``--bounds``, and assembled by a local ``ptxas -v`` for sm_90. A ptxas older than NVRTC
refuses the PTX's ``.version``; the script lowers it to the one ptxas names, which is harmless
while the PTX uses nothing newer (it has been so with NVRTC 13.5 and ptxas 13.0). The driver's
assembler on the GPU machine may allocate a little differently, so this is a check to run before
a device call, not a measurement: a kernel whose change adds spill stores in a hot loop will run
slower (round 14: eig_device's left updates, 216 -> 2708 bytes of spill stores, 27% slower at
1024^2 on the H200). ``--root DIR`` reads the ``.metal`` sources of another tree (``DIR/metal``),
to compare two versions of a kernel.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from mpslinalg._core import metal as _metal  # noqa: E402
from mpslinalg.emulator import cuda  # noqa: E402

_UNSUPPORTED = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'")
_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def assemble(ptx: str, ptxas: str) -> str:
    """``ptxas -v`` output for ``ptx`` (sm_90), its ``.version`` lowered if ptxas asks."""
    for _ in range(2):
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(ptx)
            done = subprocess.run([ptxas, "-arch=sm_90", "-v", os.fspath(src), "-o",
                                   os.fspath(Path(tmp) / "k.cubin")],
                                  capture_output=True, text=True, check=False)
        log = done.stdout + done.stderr
        if done.returncode == 0:
            return log
        old = _UNSUPPORTED.search(log)
        if old is None:
            raise RuntimeError(f"ptxas failed:\n{log}")
        ptx = ptx.replace(f".version {old.group(1)}", f".version {old.group(2)}", 1)
    raise RuntimeError(f"ptxas failed:\n{log}")


def report(log: str, pattern: str) -> list[tuple[str, int, int, int, int]]:
    """(kernel, registers, stack bytes, spill stores, spill loads) for the kernels matching
    ``pattern``, from a ``ptxas -v`` log."""
    rows = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        entry = _ENTRY.search(line)
        if entry is None or not re.search(pattern, entry.group(1)):
            continue
        tail = "\n".join(lines[i + 1:i + 4])
        frame, regs = _FRAME.search(tail), _REGS.search(tail)
        if frame and regs:
            rows.append((entry.group(1), int(regs.group(1)), *map(int, frame.groups())))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description="Registers, stack and spills of Metal kernels, "
                                 "as ptxas gives them for the CUDA executor (no GPU)")
    ap.add_argument("source", help="a .metal file under metal/, e.g. linalg/eig.metal")
    ap.add_argument("--kernels", default=".", help="regular expression on the kernels' names")
    ap.add_argument("--bounds", default="1024", help="thread bounds, comma-separated")
    ap.add_argument("--root", help="a tree whose metal/ to read instead of this one's")
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "ptxas")
    args = ap.parse_args()
    if args.root:
        root = Path(args.root).resolve() / "metal"
        _metal.metal_root = lambda: root
    ptx = cuda.compile_ptx(_metal.load_source(args.source))
    print(f"{args.source} ({_metal.metal_root()}), ptxas sm_90")
    print("| kernel | bound | registers | stack bytes | spill stores | spill loads |")
    print("|---|---|---|---|---|---|")
    for bound in (int(b) for b in args.bounds.split(",")):
        bounded = re.sub(r"\.maxntid \d+, 1, 1", f".maxntid {bound}, 1, 1", ptx)
        for name, regs, stack, stores, loads in report(assemble(bounded, args.ptxas),
                                                       args.kernels):
            print(f"| {name} | {bound} | {regs} | {stack} | {stores} | {loads} |")


if __name__ == "__main__":
    main()
