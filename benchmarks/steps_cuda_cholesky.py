"""Device time of each kernel of the blocked Cholesky factorization alone, through the CUDA
executor on an NVIDIA GPU (not an Apple GPU): where a 1024 x 1024 call's chain of launches
spends its time.

Each kernel runs R times inside one CUDA graph, every run preceded by a copy that restores its
input (the kernels work in place); a graph of the R copies alone is subtracted, so a figure is
the kernel's device time plus one dependent launch's gap inside a graph, which is what a kernel
adds to the chain. A trivial kernel gives that floor. Median [min, max] of ``--rounds`` replays.

    python benchmarks/steps_cuda_cholesky.py [--n 1024] [--reps 50] [--rounds 7]

Kernels (float32):
  floor            bench_cuda_executor's trivial kernel (one 32-thread group)
  chol_potf2 32    chol_potf2_simd: the diagonal block of 32 columns of one matrix (32 steps,
                   one simdgroup)
  chol_potf2 64    an order-64 matrix (64 steps, 512 threads), batch 1 and 64
  trsm_diag panel  the first panel's solve of an n x n factorization (n - 32 rows, right side)
  chol_update      the first trailing update (rows and columns [32, n), depth 32), next = 0
                   (the product alone) and next = 32 (then the next diagonal block factored by
                   the first simdgroup of its tile's threadgroup): their difference is the
                   fused potf2's share
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

os.environ.setdefault("MPSLINALG_METAL_ON_CUDA", "1")

from bench_cuda_executor import _NOP, _hpd  # noqa: E402 - its trivial kernel, its matrices

from mpslinalg._core import metal as _metal  # noqa: E402
from mpslinalg._core.metal import launch  # noqa: E402
from mpslinalg.emulator import cuda  # noqa: E402
from mpslinalg.linalg import cholesky_metal as _chol  # noqa: E402
from mpslinalg.linalg import gemm_metal, triangular_metal  # noqa: E402


def _graph_us(step, state: torch.Tensor, work: torch.Tensor, reps: int, rounds: int):
    """Device microseconds of ``step`` (which reads and writes ``work``): R runs each after
    work.copy_(state), minus R copies, per run."""
    def body(with_step):
        for _ in range(reps):
            work.copy_(state)
            if with_step:
                step()

    graphs = []
    for with_step in (True, False):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body(with_step)  # warm: kernels compiled, geometry cached outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body(with_step)
        graphs.append(graph)
    out = []
    for _ in range(rounds):
        t = []
        for graph in graphs:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            t.append(start.elapsed_time(end) * 1e3)
        out.append((t[0] - t[1]) / reps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    n, dev, dt = args.n, "cuda", torch.float32
    update = _metal.kernel(_chol._SOURCE, "chol_update", dt, torch.device(dev),
                           tile=gemm_metal.TILE_M)
    panel = _metal.kernel(_chol._TRIANGULAR_SOURCE, "trsm_diag", dt, torch.device(dev))
    bump = cuda.compile_shader(_NOP).bump
    no_pivots = torch.zeros(1, dtype=torch.int32, device=dev)
    rows = []

    scratch = torch.zeros(32, device=dev)
    rows.append(("floor (bump: one 32-thread group)", _graph_us(
        lambda: bump(scratch, 32, threads=32), scratch.clone(), scratch, args.reps,
        args.rounds)))

    for batch, order in ((1, 32), (1, 64), (64, 64)):
        A = torch.tril(_hpd(batch, order, dt, 3, dev).reshape(batch, order, order)).contiguous()
        work, info = A.clone(), torch.zeros(batch, dtype=torch.int32, device=dev)
        rows.append((f"chol_potf2 {batch}x({order}x{order})", _graph_us(
            lambda work=work, info=info, b=batch, o=order: _chol._potf2(work, info, o, 0, o, b),
            A, work, args.reps, args.rounds)))

    # The first block of an n x n factorization: L11 factored (chol_potf2), then the panel.
    A = torch.tril(_hpd(1, n, dt, 3, dev)).contiguous()
    info = torch.zeros(1, dtype=torch.int32, device=dev)
    w = s = _chol.BLOCK
    factored = A.clone()
    _chol._potf2(factored, info, n, 0, w, 1)
    panel_params = triangular_metal.block_params(n, n - s, lower=0, unit=0, trans=1, swaps=0,
                                                 i0=0, bs=w, right=1, ldx=n, x_offset=s * n,
                                                 x_batch=n * n)
    work = factored.clone()
    rows.append((f"trsm_diag panel ({n - s} x {w}, right side)", _graph_us(
        lambda: launch(panel, work, no_pivots, work, panel_params, no_pivots,
                       **triangular_metal.diag_grid(n - s, 1)),
        factored, work, args.reps, args.rounds)))
    solved = factored.clone()
    launch(panel, solved, no_pivots, solved, panel_params, no_pivots,
           **triangular_metal.diag_grid(n - s, 1))
    for fused in (0, w):
        rows.append((f"chol_update ({n - s}^2 lower, depth {w}), next = {fused}", _graph_us(
            lambda fused=fused: launch(update, work, info, _chol._params(n, 0, w, fused, n - s),
                                       **gemm_metal.gemm_grid(n - s, n - s, 1)),
            solved, work, args.reps, args.rounds)))

    torch.cuda.synchronize()
    print(f"| kernel (float32, n = {n}) | device us per launch, median [min, max] |")
    print("| --- | ---: |")
    for name, ts in rows:
        print(f"| {name} | {statistics.median(ts):.2f} [{min(ts):.2f}, {max(ts):.2f}] |")


if __name__ == "__main__":
    main()
