"""More than one process: batch-sharded inv / svd / eigh and a row-sharded TSQR, on 1, 2, 4 ranks.

``python benchmarks/bench_distributed.py [--sizes 1,2,4] [--batch 1e7] [--rows 4e6] [--cols 32]
[--rounds 3] [--backend gloo|nccl] [--threads 1]``

Every world of ``--sizes`` is started at once (one process per rank; ``--backend nccl``: one per
GPU, rank r on ``cuda:r``) and the worlds take turns, round by round, so that the process counts
are compared on the same machine state (interleaved, as every benchmark here is). In a turn each
world times each case once: a (batch, 3, 3) float32 DTensor sharded on its batch (``inv``,
``svd``, ``eigh``: each rank makes its own shard, nothing is scattered) and a (rows, cols)
float32 DTensor sharded by rows (``qr``, which runs TSQR). The time of a case is the slowest
rank's, between two barriers. The table gives min / median / max over the rounds and the ratio
of each world's median to the one-process world's (the speed-up).

Each process uses ``--threads`` intra-op threads (1 by default: a world of p processes then
uses p cores, so the speed-up measures the split, not torch's threading).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = ("inv", "svd", "eigh", "qr")


def _shard(total: int, parts: int, rank: int) -> int:
    """Rows of ``rank`` when ``total`` rows are split as DTensor's Shard splits them."""
    chunk = -(-total // parts)
    return max(min(chunk, total - chunk * rank), 0)


def _worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import mpslinalg

    rank, size = args.rank, args.size
    torch.set_num_threads(args.threads)
    device = "cpu"
    if args.backend == "nccl":
        device = f"cuda:{rank}"
        torch.cuda.set_device(rank)
    dist.init_process_group(args.backend, init_method=f"file://{args.init}", rank=rank,
                            world_size=size)
    mesh = init_device_mesh("cuda" if args.backend == "nccl" else "cpu", (size,))
    batch, rows, cols = int(float(args.batch)), int(float(args.rows)), args.cols
    local = _shard(batch, size, rank)
    cases = args.cases.split(",")

    def inputs(case: str):
        # made in the world's turn and freed after it: one world's data in memory at a time
        g = torch.Generator(device=device).manual_seed(rank)
        if case == "qr":
            T = torch.randn(_shard(rows, size, rank), cols, generator=g, device=device)
            return DTensor.from_local(T, mesh, [Shard(0)], run_check=False,
                                      shape=(rows, cols), stride=(cols, 1))
        A = torch.randn(local, 3, 3, generator=g, device=device) + 3 * torch.eye(3,
                                                                                 device=device)
        if case == "eigh":
            A = A @ A.mT
        return DTensor.from_local(A, mesh, [Shard(0)], run_check=False, shape=(batch, 3, 3),
                                  stride=(9, 3, 1))

    calls = {"inv": mpslinalg.inv, "svd": mpslinalg.svd, "eigh": mpslinalg.eigh,
             "qr": mpslinalg.qr}
    tick = torch.zeros(1, device=device)
    for case in cases:  # warm-up (first calls: imports, kernels) on small inputs
        small = DTensor.from_local(torch.randn(8, 3, 3, device=device) + 3 * torch.eye(
            3, device=device), mesh, [Shard(0)])
        calls[case](small if case != "qr" else DTensor.from_local(
            torch.randn(64, cols, device=device), mesh, [Shard(0)]))
    for turn in range(args.rounds):
        go = Path(f"{args.init}.go{turn}")
        while not go.exists():
            time.sleep(0.05)
        dist.barrier()
        times = {}
        for case in cases:
            x = inputs(case)
            dist.barrier()
            if device != "cpu":
                torch.cuda.synchronize()
            start = time.perf_counter()
            result = calls[case](x)
            if device != "cpu":
                torch.cuda.synchronize()
            tick.fill_(time.perf_counter() - start)
            dist.all_reduce(tick, op=dist.ReduceOp.MAX)
            times[case] = tick.item()
            del result, x
        if rank == 0:
            Path(f"{args.init}.done{turn}").write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


def _format(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4")
    parser.add_argument("--batch", default="1e7")
    parser.add_argument("--rows", default="4e6")
    parser.add_argument("--cols", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--worker", nargs=3, metavar=("RANK", "SIZE", "INIT"))
    args = parser.parse_args(argv)
    if args.worker:
        args.rank, args.size, args.init = int(args.worker[0]), int(args.worker[1]), args.worker[2]
        _worker(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = args.cases.split(",")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    deadline = time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory() as tmp:
        inits = {p: f"{tmp}/world{p}" for p in sizes}
        processes = [subprocess.Popen([sys.executable, __file__, *passed, "--worker", str(r),
                                       str(p), inits[p]], env=env)
                     for p in sizes for r in range(p)]
        results: dict[int, list[dict]] = {p: [] for p in sizes}
        try:
            for turn in range(args.rounds):
                for p in sizes:  # the worlds take turns
                    Path(f"{inits[p]}.go{turn}").touch()
                    done = Path(f"{inits[p]}.done{turn}")
                    while not done.exists():
                        if time.monotonic() > deadline or any(
                                q.poll() not in (None, 0) for q in processes):
                            raise RuntimeError("a rank failed or the deadline passed")
                        time.sleep(0.05)
                    results[p].append(json.loads(done.read_text()))
            for q in processes:
                q.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            for q in processes:
                if q.poll() is None:
                    q.kill()
    import torch

    print(f"# bench_distributed: {args.backend}, batch {int(float(args.batch))} x 3 x 3 "
          f"float32, TSQR {int(float(args.rows))} x {args.cols} float32, {args.threads} "
          f"thread(s) per process, {os.cpu_count()} CPUs, torch {torch.__version__}\n")
    print("| case | processes | seconds min / median / max | speed-up (median, vs 1) |")
    print("|---|---|---|---|")
    for case in cases:
        base = statistics.median(r[case] for r in results[sizes[0]])
        for p in sizes:
            values = [r[case] for r in results[p]]
            print(f"| {case} | {p} | {_format(values)} | {base / statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
