"""First call in a fresh process: ``mpslinalg.inv`` / ``solve`` / ``det`` against torch's own.

Self-contained: ``python benchmarks/bench_first_call.py [--rounds R]``. Each measurement is a new
Python process with an empty cache directory (``MPSLINALG_CACHE_DIR`` pointing at a fresh
folder), timing ``import`` and the first call; mpslinalg and torch alternate between rounds. The
goal: mpslinalg's first call costs at most torch.linalg's first call + 0.3 s, and never waits for
a compiler (the native CPU kernels build in the background).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
lib = sys.argv[1]
if lib == "mpslinalg":
    import mpslinalg as m
    fns = {"inv": m.inv, "solve": m.solve, "det": m.det}
else:
    fns = {"inv": torch.linalg.inv, "solve": torch.linalg.solve, "det": torch.linalg.det}
t2 = time.perf_counter()
A = torch.randn(*json.loads(sys.argv[3])) + 4 * torch.eye(json.loads(sys.argv[3])[-1])
op = sys.argv[2]
args = (A, A[..., :1]) if op == "solve" else (A,)
t3 = time.perf_counter()
fns[op](*args)
t4 = time.perf_counter()
print(json.dumps({"import": t2 - t1, "first call": t4 - t3,
                  "dynamo": "torch._dynamo" in sys.modules}))
"""

CASES = [("inv", [100000, 4, 4]), ("inv", [3, 3]), ("solve", [3, 3]), ("det", [100, 3, 3])]


def measure(lib: str, op: str, shape: list[int]) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, MPSLINALG_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", CHILD, lib, op, json.dumps(shape)], env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| call | shape | mpslinalg import (s) | mpslinalg first call (s) | torch first call (s) "
          "| first-call difference (s) | torch._dynamo imported |")
    print("|---|---|---|---|---|---|---|")
    for op, shape in CASES:
        ours, theirs = [], []
        for r in range(args.rounds):
            pair = [("mpslinalg", ours), ("torch", theirs)]
            for lib, sink in (pair if r % 2 == 0 else pair[::-1]):
                sink.append(measure(lib, op, shape))
        imp = statistics.median(m["import"] for m in ours)
        a = [m["first call"] for m in ours]
        b = [m["first call"] for m in theirs]
        print(f"| {op} | {tuple(shape)} | {imp:.3f} | {statistics.median(a):.4f} "
              f"(min {min(a):.4f}, max {max(a):.4f}) | {statistics.median(b):.4f} "
              f"(min {min(b):.4f}, max {max(b):.4f}) | "
              f"{statistics.median(a) - statistics.median(b):+.4f} | "
              f"{any(m['dynamo'] for m in ours)} |", flush=True)


if __name__ == "__main__":
    main()
