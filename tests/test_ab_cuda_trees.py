"""benchmarks/ab_cuda_trees.py's plumbing on the emulator (its timings there mean nothing): each
tree's child imports that tree's mpslinalg, editable install or not, and the table has a row
per case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("given", ["commit", "tree"])
def test_ab_cuda_trees_runs_both_trees(tmp_path, given):
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the script extracts the base tree with git archive")
    if given == "commit":
        base = ["--base", "HEAD"]
    else:  # extracted beforehand, as where there is no git history
        tree = tmp_path / "base"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "mpslinalg",
                                  "metal"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        base = ["--base-tree", str(tree)]
    out = tmp_path / "ab.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "ab_cuda_trees.py"), *base,
                    "--device", "cpu", "--cases", "lu:8,gemm:9", "--rounds", "1", "--reps", "1",
                    "--out", str(out)], check=True, capture_output=True, timeout=600)
    rows = [line for line in out.read_text().splitlines() if line.startswith("| lu:8 |")
            or line.startswith("| gemm:9 |")]
    assert len(rows) == 2, out.read_text()
