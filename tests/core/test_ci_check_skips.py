""".ci/check_skips.py: every skip of a run is printed with its reason, and one that the
allow-list does not name fails the check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / ".ci" / "check_skips.py"

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" skipped="3">
  <testcase classname="tests.linalg.test_svd" name="test_generic_upcast[torch-svd]">
    <skipped type="pytest.skip" message="svd opts out of the generic upcast test: float16">
      tests/opdb.py:841: svd opts out</skipped></testcase>
  <testcase classname="tests.linalg.test_svd" name="test_generic_upcast[emulator-svd]">
    <skipped type="pytest.skip" message="svd opts out of the generic upcast test: float16"/>
  </testcase>
  <testcase classname="tests.small.test_small_triton" name="test_fused[2]">
    <skipped type="pytest.skip" message="triton is not installed"/></testcase>
  <testcase classname="tests.linalg.test_svd" name="test_passes"/>
</testsuite></testsuites>
"""


def _run(tmp_path: Path, allow_list: str) -> subprocess.CompletedProcess:
    (tmp_path / "junit.xml").write_text(_JUNIT)
    (tmp_path / "allowed.txt").write_text(allow_list)
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "junit.xml"),
                           str(tmp_path / "allowed.txt")], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_every_skip_allowed_passes_and_prints_the_reasons(tmp_path):
    proc = _run(tmp_path, "# comment\n\n"
                "tests/linalg/test_svd.py::test_generic_upcast[*-svd] | svd opts out of the "
                "generic upcast test: * | opt-out: float16 products\n"
                "tests/small/test_small_triton.py::* | triton is not installed | no Triton\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 3 skipped tests, by reason" in proc.stdout
    assert "[2] svd opts out of the generic upcast test: float16" in proc.stdout
    assert "    tests/linalg/test_svd.py::test_generic_upcast[emulator-svd]" in proc.stdout
    assert "[1] triton is not installed\n    tests/small/test_small_triton.py::test_fused[2]" \
        in proc.stdout


def test_an_unlisted_skip_fails_listing_it(tmp_path):
    proc = _run(tmp_path, "tests/linalg/test_svd.py::test_generic_upcast[torch-svd] | svd opts "
                "out of the generic upcast test: * | opt-out, torch backend only\n"
                "tests/small/*::* | no Triton GPU | a pattern for another reason\n")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "== 2 skips not on" in proc.stderr
    assert ("tests/linalg/test_svd.py::test_generic_upcast[emulator-svd]: svd opts out of the "
            "generic upcast test: float16") in proc.stderr
    assert "tests/small/test_small_triton.py::test_fused[2]: triton is not installed" in proc.stderr
    assert "allowed.txt:2 allowed no skip of this run" in proc.stdout


@pytest.mark.parametrize("line", ["tests/*::* | no reason given", "tests/*::* |  | ",
                                  "tests/*::*"])
def test_a_malformed_allow_list_fails(tmp_path, line):
    proc = _run(tmp_path, line + "\n")
    assert proc.returncode == 2 and "allowed.txt:1: expected" in proc.stderr, proc.stderr


def test_brackets_are_literal_in_patterns(tmp_path):
    """``[torch-svd]`` in a pattern is the test id's text, not a character class."""
    proc = _run(tmp_path, "tests/linalg/test_svd.py::test_generic_upcast[t] | * | wrong id\n"
                "tests/*::* | triton is not installed | no Triton\n")
    assert proc.returncode == 1 and "== 2 skips not on" in proc.stderr, proc.stderr
