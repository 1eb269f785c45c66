"""First call in a fresh process: every family of mpslinalg against torch.linalg's own.

Self-contained: ``python benchmarks/bench_first_call.py [--rounds R] [--ops solve,qr]``, from
this checkout's root (the processes import the mpslinalg found there). Every measurement is a
new process with an empty cache directory (``MPSLINALG_CACHE_DIR`` pointing at a fresh folder)
that times ``import mpslinalg`` and the first call; mpslinalg and torch alternate between rounds.
The processes are forked from one that has imported torch and done nothing else, so that each
costs its measurement rather than another ``import torch`` (seconds on a loaded 2-core machine).
Every call runs in float32 and complex64, on a batch of 3x3 matrices and on a medium batch. The
goal: mpslinalg's first call costs at most torch.linalg's first call + 0.3 s, imports neither
sympy nor torch._dynamo, and never waits for a compiler (the native CPU kernels are compiled
when the package is installed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Reads one job (JSON) a line, forks a child that runs it, prints the child's result.
FORK_SERVER = r"""
import json, os, sys, time
import torch

def first_call(lib, op, dtype, shape, threads):
    if threads:
        torch.set_num_threads(threads)
    t1 = time.perf_counter()
    if lib == "mpslinalg":
        import mpslinalg
        fn = getattr(mpslinalg, op)
    else:
        fn = getattr(torch.linalg, op)
    t2 = time.perf_counter()
    dtype = getattr(torch, dtype)
    A = torch.randn(*shape, dtype=dtype) + 4 * torch.eye(shape[-1], dtype=dtype)
    if op == "eigh":
        A = A + A.mH
    args = (A, A[..., :1]) if op in ("solve", "lstsq") else (A,)
    t3 = time.perf_counter()
    fn(*args)
    t4 = time.perf_counter()
    return {"import": t2 - t1, "first call": t4 - t3,
            "sympy": "sympy" in sys.modules, "dynamo": "torch._dynamo" in sys.modules}

for line in sys.stdin:
    job = json.loads(line)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.environ["MPSLINALG_CACHE_DIR"] = job.pop("cache")
        os.write(write, json.dumps(first_call(**job)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        result = f.read()
    os.waitpid(pid, 0)
    print(result, flush=True)
"""

OPS = ["lu_factor", "solve", "inv", "det", "slogdet", "qr", "svd", "eigh", "lstsq", "pinv"]
DTYPES = ["float32", "complex64"]
SHAPES = [[1000, 3, 3], [8, 64, 64]]


def measure(server: subprocess.Popen, lib: str, op: str, dtype: str, shape: list[int],
            threads: int | None) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        job = {"lib": lib, "op": op, "dtype": dtype, "shape": shape, "threads": threads,
               "cache": cache}
        server.stdin.write(json.dumps(job) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} (min {min(values):.4f}, max {max(values):.4f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default=",".join(OPS),
                        help="comma-separated, of " + ", ".join(OPS))
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in each process (default: torch's own); 1 keeps "
                        "a loaded machine's descheduled OpenMP threads out of the figures")
    args = parser.parse_args()
    print("| call | dtype | shape | mpslinalg import (s) | mpslinalg first call (s) "
          "| torch first call (s) | first-call difference (s) | sympy or torch._dynamo imported |")
    print("|---|---|---|---|---|---|---|---|")
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for op in args.ops.split(","):
        for dtype in DTYPES:
            for shape in SHAPES:
                ours, theirs = [], []
                for r in range(args.rounds):
                    pair = [("mpslinalg", ours), ("torch", theirs)]
                    for lib, sink in (pair if r % 2 == 0 else pair[::-1]):
                        sink.append(measure(server, lib, op, dtype, shape, args.threads))
                a = [m["first call"] for m in ours]
                b = [m["first call"] for m in theirs]
                imported = any(m["sympy"] or m["dynamo"] for m in ours)
                print(f"| {op} | {dtype} | {tuple(shape)} "
                      f"| {statistics.median(m['import'] for m in ours):.3f} | {spread(a)} "
                      f"| {spread(b)} | {statistics.median(a) - statistics.median(b):+.4f} "
                      f"| {imported} |", flush=True)
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
