"""The small path's Triton kernels run by Triton's interpreter on the CPU, in a child process:
the interpreter is chosen by ``TRITON_INTERPRET=1`` before triton is first imported."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent.parent

_NO_TRITON = ("triton is not installed: it comes with the test-cuda extra "
              "(pip install -e '.[test-cuda]')")
_HAS_TRITON = importlib.util.find_spec("triton") is not None

#: Skips a module when triton is absent, naming the extra that brings it.
REQUIRES_TRITON = pytest.mark.skipif(not _HAS_TRITON, reason=_NO_TRITON)


def run_cases(tmp_path_factory, label: str, cases: dict, script: str,
              timeout: float = 600) -> tuple[dict, dict]:
    """(cases, outputs): ``script`` (reading argv[1], writing argv[2] with torch.save) run on
    ``cases`` in a child process under the interpreter (skipped without triton)."""
    if not _HAS_TRITON:
        pytest.skip(_NO_TRITON)
    tmp = tmp_path_factory.mktemp(label)
    torch.save(cases, tmp / "in.pt")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", script, str(tmp / "in.pt"), str(tmp / "out.pt")],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return cases, torch.load(tmp / "out.pt")
