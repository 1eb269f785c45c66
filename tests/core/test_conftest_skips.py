"""tests/conftest.py turns `EmulatorUnavailableError` into a skip only for the cause it exists
for: an operating system the emulator cannot run on. Checked in a fresh pytest process that
uses the suite's conftest."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

_TESTS = '''
import pytest
from mpslinalg.emulator import build


def test_off_linux(monkeypatch):
    monkeypatch.setattr(build, "unsupported_platform", lambda: "runs on Linux only (test)")
    raise build.EmulatorUnavailableError("runs on Linux only (test)")


def test_another_cause():
    raise build.EmulatorUnavailableError("the emulator's race detector needs g++ (test)")


def test_another_message_off_linux(monkeypatch):
    monkeypatch.setattr(build, "unsupported_platform", lambda: "runs on Linux only (test)")
    raise build.EmulatorUnavailableError("the emulator's race detector needs g++ (test)")
'''


def test_emulator_unavailable_is_a_skip_only_off_linux(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_cases.py").write_text(_TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPSLINALG_TEST_BACKENDS": "torch"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           "test_cases.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout
    assert re.search(r"SKIPPED \[1\] test_cases.py:\d+: runs on Linux only \(test\)", out), out
    assert "FAILED test_cases.py::test_another_cause" in out, out
    assert "FAILED test_cases.py::test_another_message_off_linux" in out, out
    assert "1 skipped" in out.splitlines()[-1] and "2 failed" in out.splitlines()[-1], out
