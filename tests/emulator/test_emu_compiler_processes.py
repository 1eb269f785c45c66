"""A compiler the emulator starts never outlives the process that started it: not when that
process is killed mid-build (SIGKILL runs no cleanup), not when its wait is interrupted."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mpslinalg.emulator import build

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the emulator runs on Linux; reads /proc"
)

# A compiler whose compile step never ends, with a child of its own like g++'s cc1plus (the
# preprocessor and the flag probes are the real compiler's).
FAKE_CXX = """#!/bin/sh
case " $* " in
  *" -E "*|*" -fsyntax-only "*|*-print-file-name*) exec {real} "$@" ;;
esac
sleep 600 &
echo $! > {pids}/grandchild.tmp && mv {pids}/grandchild.tmp {pids}/grandchild
echo $$ > {pids}/compiler.tmp && mv {pids}/compiler.tmp {pids}/compiler
wait
"""

SOURCE = """
kernel void fill(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i] = float(i) + 0.25f;
}
"""


def fake_compiler(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    cxx = tmp_path / "slow-c++"
    cxx.write_text(FAKE_CXX.format(real=build.find_compiler(), pids=pids))
    cxx.chmod(0o755)
    return cxx, pids


def alive(pid):
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def started_compiler(pids, waiting, deadline_s=120):
    """The pids of the fake compiler and its child once both run; ``waiting`` is the process
    that starts it (a failure of it ends the wait)."""
    t0 = time.monotonic()
    while not ((pids / "compiler").exists() and (pids / "grandchild").exists()):
        assert waiting(), "the compiler was never started"
        assert time.monotonic() - t0 < deadline_s, "the compiler was not started in time"
        time.sleep(0.05)
    return [int((pids / name).read_text()) for name in ("compiler", "grandchild")]


def wait_gone(procs, deadline_s=30):
    t0 = time.monotonic()
    while any(alive(p) for p in procs) and time.monotonic() - t0 < deadline_s:
        time.sleep(0.05)
    return [p for p in procs if alive(p)]


def kill_left(procs):
    for p in procs:
        if alive(p):
            os.kill(p, signal.SIGKILL)


def test_a_builder_killed_mid_build_leaves_no_compiler(tmp_path):
    cxx, pids = fake_compiler(tmp_path)
    # (MPSLINALG_NATIVE=0: the n <= 4 library's build at import is not the emulator's)
    env = dict(os.environ, CXX=str(cxx), MPSLINALG_CACHE_DIR=str(tmp_path / "cache"),
               MPSLINALG_NATIVE="0")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    builder = subprocess.Popen(
        [sys.executable, "-c",
         f"from mpslinalg.emulator import compile_shader; compile_shader({SOURCE!r})"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    procs = []
    try:
        procs = started_compiler(pids, lambda: builder.poll() is None)
        builder.kill()  # SIGKILL: the builder runs no cleanup of its own
        builder.wait()
        assert wait_gone(procs) == [], "the compiler outlived the process that started it"
    finally:
        if builder.poll() is None:
            builder.kill()
        builder.communicate()
        kill_left(procs)


def test_an_interrupted_wait_stops_the_compiler(tmp_path):
    cxx, pids = fake_compiler(tmp_path)
    procs = []
    interrupted = threading.Event()

    def interrupt():
        try:
            procs.extend(started_compiler(pids, lambda: not interrupted.is_set()))
        finally:
            os.kill(os.getpid(), signal.SIGALRM)

    def on_alarm(signum, frame):
        interrupted.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, on_alarm)
    watcher = threading.Thread(target=interrupt)
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            build.run_compiler([cxx, "-c", "kernels.cpp"])
        watcher.join()
        assert len(procs) == 2
        assert wait_gone(procs) == [], "the compiler outlived the interrupted wait"
    finally:
        signal.signal(signal.SIGALRM, previous)
        kill_left(procs)


def test_run_compiler_is_subprocess_run():
    cxx = build.find_compiler()
    r = build.run_compiler([cxx, "-x", "c++", "-E", "-"], input=b"int x = __LINE__;\n")
    assert r.returncode == 0 and b"int x = 1;" in r.stdout
    bad = build.run_compiler([cxx, "-x", "c++", "-fsyntax-only", "-"], input=b"int x = ;\n")
    assert bad.returncode != 0 and b"error" in bad.stderr
