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
  trsm_diag panel  the first panel's solve of an n x n factorization (n - 32 rows, right side):
                   the wider blocks' launch (cholesky_metal.BLOCK = 64), timed at 32 columns
  chol_update      the first trailing update (rows and columns [32, n), depth 32): the product
                   alone (the wider blocks' launch)
  chol_step w = 0  the default path's first launch: the first diagonal block factored and the
                   first panel solved (n / 32 threadgroups, one tile column)
  chol_step k0 = 0 the default path's second launch, every later one's shape: chol_update's
                   product, plus the next diagonal block's product and potf2 and the next
                   panel's solve in the first tile column; against chol_update, the price of
                   the fusion, which replaces trsm_diag + chol_update (the two launches before
                   chol_step) by one
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
    update = _metal.kernel(_chol._SOURCE, "chol_update", dt, torch.device(dev))
    step = _metal.kernel(_chol._SOURCE, "chol_step", dt, torch.device(dev))
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
    w, s = _chol.NEXT_BLOCK, _chol.NEXT_BLOCK
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
    rows.append((f"chol_update ({n - s}^2 lower, depth {w})", _graph_us(
        lambda: launch(update, work, info, _chol._params(n, 0, w),
                       **gemm_metal.gemm_grid(n - s, n - s, 1)),
        solved, work, args.reps, args.rounds)))

    # chol_step: the first launch on A, the second on its result (slot 0 of the workspace then
    # holds the first block's factor, which the second copies into place).
    slots = _chol.step_workspace(n, 1, dt, dev)
    rows.append((f"chol_step w = 0 (block 0 factored, its {n - s}-row panel solved)", _graph_us(
        lambda: launch(step, work, info, _chol._params(n, 0, 0), slots,
                       **gemm_metal.gemm_grid(n, w, 1)),
        A, work, args.reps, args.rounds)))
    first = A.clone()
    launch(step, first, info, _chol._params(n, 0, 0), slots, **gemm_metal.gemm_grid(n, w, 1))
    rows.append((f"chol_step k0 = 0 ({n - s}^2 update, block 1 factored, its panel solved)",
                 _graph_us(lambda: launch(step, work, info, _chol._params(n, 0, w), slots,
                                          **gemm_metal.gemm_grid(n - s, n - s, 1)),
                           first, work, args.reps, args.rounds)))

    torch.cuda.synchronize()
    print(f"| kernel (float32, n = {n}) | device us per launch, median [min, max] |")
    print("| --- | ---: |")
    for name, ts in rows:
        print(f"| {name} | {statistics.median(ts):.2f} [{min(ts):.2f}, {max(ts):.2f}] |")


if __name__ == "__main__":
    main()
