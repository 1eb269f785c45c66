"""The Metal kernels of two source trees side by side through the CUDA executor on an NVIDIA GPU
(not an Apple GPU): this checkout against an earlier commit, with torch's own op beside both.

Two versions of mpslinalg cannot share a process, so each round runs one child process per tree
(the older tree extracted by ``git archive`` into a temporary directory and put first on
PYTHONPATH), alternating which tree goes first, and each child times every case ``--reps`` times
after its warm-up calls, torch's op interleaved with ours call by call (CUDA events around each
call, the stream synchronised between calls). The table gives min / median / max over all rounds
and the ratios of medians and of minima (minima are steadier on a shared machine). The compiled
kernels are cached on disk (``$MPSLINALG_CACHE_DIR``), so only a tree's first child compiles.

    python benchmarks/ab_cuda_trees.py --base 3f9ed01 [--rounds 4] [--reps 5]
        [--cases cholesky:1024,cholesky:4096,gemm:4096,eigh:256c] [--out ab.md]
    python benchmarks/ab_cuda_trees.py --base HEAD~1 --device cpu --cases cholesky:70
                                       # the plumbing on the emulator: no timing worth reading
    python benchmarks/ab_cuda_trees.py --base-tree DIR ...
                                       # a tree extracted beforehand (git archive REV mpslinalg
                                       # metal | tar -x -C DIR), where there is no git history

A case is ``family:n`` with an optional ``c`` for complex64 (float32 otherwise). Families:
``cholesky`` (cholesky_metal against torch.linalg.cholesky_ex), ``cholesky_inverse``,
``gemm`` (the standalone kernel, n^3), ``geqrf``, ``qr`` (reduced), ``eigh`` (vectors),
``lu`` (lu_factor). Both trees must have the module functions a case calls.
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

REPO = Path(__file__).resolve().parent.parent

FAMILIES = ("cholesky", "cholesky_inverse", "gemm", "geqrf", "qr", "eigh", "lu")


def _parse_case(text: str) -> tuple[str, int, bool]:
    family, _, size = text.partition(":")
    if family not in FAMILIES or not size.rstrip("c").isdigit():
        raise SystemExit(f"ab_cuda_trees: bad case {text!r}: family:n[c], family in {FAMILIES}")
    return family, int(size.rstrip("c")), size.endswith("c")


def _contenders(family: str, n: int, complex_: bool, device: str):
    """(ours, torch's) zero-argument callables of one case, on inputs built once."""
    import torch

    from mpslinalg.linalg import cholesky_metal, eigh, gemm_metal, lu_metal, qr_metal

    dtype = torch.complex64 if complex_ else torch.float32
    gen = torch.Generator(device=device).manual_seed(n)
    X = torch.randn((n, n), generator=gen, device=device, dtype=dtype)
    if family in ("cholesky", "cholesky_inverse"):
        A = X @ X.mH / n + torch.eye(n, device=device, dtype=dtype)
        if family == "cholesky":
            return (lambda: cholesky_metal.cholesky_metal(A, False),
                    lambda: torch.linalg.cholesky_ex(A))
        L = torch.linalg.cholesky(A)
        return (lambda: cholesky_metal.cholesky_inverse_metal(L, False),
                lambda: torch.cholesky_inverse(L))
    if family == "gemm":
        Y = torch.randn((n, n), generator=gen, device=device, dtype=dtype)
        return (lambda: gemm_metal.gemm_metal(X, Y, kernel="tile")), (lambda: X @ Y)
    if family == "geqrf":
        return (lambda: qr_metal.geqrf_metal(X)), (lambda: torch.geqrf(X))
    if family == "qr":
        return (lambda: qr_metal.qr_metal(X)), (lambda: torch.linalg.qr(X))
    if family == "eigh":
        H = (X + X.mH) / 2
        return (lambda: eigh.eigh_metal(H, lower=True, vectors=True),
                lambda: torch.linalg.eigh(H))
    return (lambda: lu_metal.lu_factor_metal(X)), (lambda: torch.linalg.lu_factor(X))


def _child(args) -> None:
    """Time every case in this process (its mpslinalg is the tree on PYTHONPATH): one JSON line
    per case, microseconds."""
    # An editable install (pip install -e .) puts a finder ahead of sys.path that redirects
    # `import mpslinalg` to its checkout whatever PYTHONPATH says; the child's tree must win.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    import torch

    import mpslinalg

    print(json.dumps({"module": mpslinalg.__file__}), flush=True)
    device = args.device
    cuda = device == "cuda"

    def timed(fn) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1e3
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6

    for text in args.cases.split(","):
        ours, theirs = _contenders(*_parse_case(text), device)
        for _ in range(2):  # warm-up: compilation, caches, allocator
            ours()
            theirs()
        times = {"ours": [], "torch": []}
        for _ in range(args.reps):
            times["ours"].append(timed(ours))
            times["torch"].append(timed(theirs))
        print(json.dumps({"case": text, **times}), flush=True)


def _extract(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "mpslinalg", "metal"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def _stats(xs: list[float]) -> str:
    return f"{min(xs):.1f} / {statistics.median(xs):.1f} / {max(xs):.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="the earlier commit (anything git archive takes)")
    ap.add_argument("--base-tree", help="or a directory holding its mpslinalg and metal")
    ap.add_argument("--cases", default="cholesky:1024,cholesky:4096,gemm:2048,eigh:256c")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    if bool(args.base) == bool(args.base_tree):
        raise SystemExit("ab_cuda_trees: give one of --base and --base-tree")
    for text in args.cases.split(","):
        _parse_case(text)
    env = dict(os.environ, MPSLINALG_METAL_ON_CUDA="1")
    results: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.base_tree:
            base_tree = Path(args.base_tree).resolve()
        else:
            base_tree = Path(tmp).resolve()
            _extract(args.base, base_tree)
        trees = {"new": REPO.resolve(), "base": base_tree}
        for r in range(args.rounds):
            for label in (("new", "base") if r % 2 == 0 else ("base", "new")):
                child_env = dict(env, PYTHONPATH=os.pathsep.join(
                    [str(trees[label])] + [p for p in [env.get("PYTHONPATH")] if p]))
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--child", "--cases",
                     args.cases, "--reps", str(args.reps), "--device", args.device],
                    env=child_env, cwd=tmp, check=True, capture_output=True, text=True).stdout
                for line in out.splitlines():
                    row = json.loads(line)
                    if "module" in row:  # the child's mpslinalg must be the tree asked for
                        if not Path(row["module"]).resolve().is_relative_to(trees[label]):
                            raise SystemExit(f"ab_cuda_trees: the {label} child imported "
                                             f"{row['module']}, not {trees[label]}")
                        continue
                    for who in ("ours", "torch"):
                        results.setdefault((row["case"], label, who), []).extend(row[who])
    lines = [f"ab_cuda_trees: this checkout against {args.base or args.base_tree}, "
             f"{args.rounds} rounds x "
             f"{args.reps} reps, device {args.device}; us, min / median / max", "",
             "| case | new | base | torch (both runs) | new / base (median, min) | "
             "new / torch (median) |", "|---|---|---|---|---|---|"]
    for text in args.cases.split(","):
        new, base = results[(text, "new", "ours")], results[(text, "base", "ours")]
        ref = results[(text, "new", "torch")] + results[(text, "base", "torch")]
        med = statistics.median
        lines.append(f"| {text} | {_stats(new)} | {_stats(base)} | {_stats(ref)} | "
                     f"{med(new) / med(base):.2f}, {min(new) / min(base):.2f} | "
                     f"{med(new) / med(ref):.2f} |")
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")


if __name__ == "__main__":
    main()
