"""The LU launch-geometry choices of mpslinalg.linalg.lu_metal / triangular_metal measured
through the CUDA executor on an NVIDIA GPU (not an Apple GPU): for each variant of the host
constants, wall time (CUDA events, median [min, max] of interleaved rounds), device time per
kernel (the executor's profiling mode) and agreement with torch (pivots, residual).

    python benchmarks/sweep_cuda_lu.py [--sizes 1024,2048,4096,8192] [--reps 5]

The choices it compares are those docs/lu.rst names: PANEL_LEAF (columns per one-threadgroup
launch inside a panel; PANEL_WIDTH = the whole panel), PANEL_THREADS (lu_panel's threads),
lu_small (allowed up to 128 columns) against the panel path for batched small matrices, and
trsv's TRSV_MIN_N.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics

import torch

os.environ.setdefault("MPSLINALG_METAL_ON_CUDA", "1")

from mpslinalg.emulator import cuda  # noqa: E402
from mpslinalg.linalg import lu_metal as _lu  # noqa: E402
from mpslinalg.linalg import triangular_metal as _tri  # noqa: E402


@contextlib.contextmanager
def _patched(module, values):
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def _wall(fn, reps):
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return out


def _device(fn):
    with cuda.profile() as prof:
        fn()
    return {k: (n, us) for k, (n, us) in prof.kernels().items()}


def _fmt(ts):
    return f"{statistics.median(ts):.0f} [{min(ts):.0f}, {max(ts):.0f}]"


def _run(label, variants, fn_of, check, reps):
    """Variants interleaved: one call of each per round."""
    fns = {}
    for name, patch in variants.items():
        with _patched(*patch):
            fns[name] = fn_of()
    for name, fn in fns.items():
        with _patched(*variants[name]):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            with _patched(*variants[name]):
                times[name] += _wall(fn, 1)
    for name, fn in fns.items():
        with _patched(*variants[name]):
            dev = _device(fn)
            agree = check(fn())
        total = sum(us for _, us in dev.values())
        kern = ", ".join(f"{k} {n}x {us:.0f}" for k, (n, us) in
                         sorted(dev.items(), key=lambda kv: -kv[1][1]))
        print(f"| {label} | {name} | {_fmt(times[name])} | {total:.0f} | {kern} | {agree} |",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--leaves", default="32,16,8,4")
    ap.add_argument("--threads", default="1024,256")
    ap.add_argument("--trsv", default="32,128", help="TRSV_MIN_N values")
    args = ap.parse_args()
    torch.manual_seed(0)
    print("| case | variant | wall us median [min, max] | device us | kernels (launches, us) "
          "| agreement |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        A = torch.randn(n, n, device="cuda")
        _, ref_piv = torch.linalg.lu_factor(A)

        def check(out, A=A, ref_piv=ref_piv):
            LU, piv, _ = out
            P, L, U = torch.lu_unpack(LU, piv)
            res = ((P @ L @ U - A).abs().amax() / A.abs().amax()).item()
            return f"{int((piv != ref_piv).sum())} pivots differ, res {res:.1e}"

        variants = {}
        for leaf in [int(s) for s in args.leaves.split(",")]:
            for th in [int(s) for s in args.threads.split(",")]:
                variants[f"leaf {leaf}, {th} threads"] = (_lu, {"PANEL_LEAF": leaf,
                                                               "PANEL_THREADS": th})
        _run(f"lu_factor {n}² f32", variants,
             lambda A=A: (lambda: _lu.lu_factor_metal(A)), check, args.reps)

    for batch, n, dtype in ((64, 64, torch.complex64), (256, 128, torch.float32)):
        A = torch.randn(batch, n, n, device="cuda", dtype=dtype)
        B = torch.randn(batch, n, 1, device="cuda", dtype=dtype)
        _, ref_piv = torch.linalg.lu_factor(A)

        def check(out, A=A, ref_piv=ref_piv):
            LU, piv, _ = out
            P, L, U = torch.lu_unpack(LU, piv)
            res = ((P @ L @ U - A).abs().amax() / A.abs().amax()).item()
            return f"{int((piv != ref_piv).sum())} pivots differ, res {res:.1e}"

        variants = {"lu_small": (_lu, {"SMALL_MAX_COLS": 128}),
                    "panel path": (_lu, {"small_chunks": lambda m, n: 0})}
        label = f"lu_factor {batch}x({n}²) {str(dtype)[6:]}"
        _run(label, variants, lambda A=A: (lambda: _lu.lu_factor_metal(A)), check, args.reps)
        ts = _wall(lambda A=A: torch.linalg.lu_factor(A), args.reps)
        print(f"| {label} | torch | {_fmt(ts)} | | | |")

        def scheck(X, A=A, B=B):
            res = (A @ X - B).abs().amax() / (A.abs().amax() * X.abs().amax())
            return f"res {res.item():.1e}"

        LU, piv, _ = _lu.lu_factor_metal(A)
        variants = {f"trsv from n >= {t}": (_tri, {"TRSV_MIN_N": t})
                    for t in [int(s) for s in args.trsv.split(",") if s]}
        label = f"lu_solve {batch}x({n}²) {str(dtype)[6:]}, 1 rhs"
        _run(label, variants, lambda LU=LU, piv=piv, B=B: (lambda: _lu.lu_solve_metal(LU, piv, B)),
             scheck, args.reps)
        ts = _wall(lambda A=A, B=B: torch.linalg.solve(A, B), args.reps)
        print(f"| solve {batch}x({n}²) | torch.linalg.solve | {_fmt(ts)} | | | |")


if __name__ == "__main__":
    main()
