"""The outcomes of building the native small-matrix library (`mpslinalg.small.native`): no
C++ compiler on the machine is a property of the machine (the tests of the native path skip,
saying so); a compiler that runs and fails is a defect (those tests fail, with its messages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from native_gate import require_native

from mpslinalg.small import native

ROOT = Path(__file__).resolve().parent.parent.parent
_SOURCE = 'extern "C" int mpsl_native_build_test() { return 7; }\n'
_FLAGS = ["-shared", "-fPIC"]
# The warning a missing library gives users (and the tests below provoke on purpose).
_QUIET = pytest.mark.filterwarnings("ignore:mpslinalg. the native small-matrix:RuntimeWarning")


def _failing_compiler(tmp_path: Path, script: str) -> str:
    cxx = tmp_path / "fake-c++"
    cxx.write_text("#!/bin/sh\n" + script)
    cxx.chmod(0o755)
    return str(cxx)


def _library(monkeypatch, tmp_path: Path, cxx: str,
             make_source=lambda: _SOURCE) -> native.NativeLibrary:
    monkeypatch.setenv("CXX", cxx)
    monkeypatch.setenv("MPSLINALG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(native.ENABLE_VAR, raising=False)
    return native.NativeLibrary("build_test", make_source, _FLAGS, lambda lib: None)


@_QUIET
def test_no_compiler_is_unavailable_and_skips(monkeypatch, tmp_path):
    library = _library(monkeypatch, tmp_path, str(tmp_path / "no-such-c++"))
    with pytest.raises(native.NativeUnavailableError, match="no C\\+\\+ compiler"):
        library.require()
    assert library.loaded is None and library.status.startswith("no C++ compiler")
    with pytest.raises(pytest.skip.Exception, match="build_test cannot be built here: no C"):
        require_native(library)


@_QUIET
@pytest.mark.parametrize("script,message", [
    ("echo 'fake-c++: error: this compiler always fails' >&2\nexit 3",
     r"exit status 3\):\nfake-c\+\+: error: this compiler always fails"),
    ('while [ "$1" != "-o" ]; do shift; done\necho "not a library" > "$2"\n',
     "the built library does not load"),
], ids=["exits non-zero", "writes no library"])
def test_failed_build_fails_with_the_compilers_message(monkeypatch, tmp_path, script, message):
    library = _library(monkeypatch, tmp_path, _failing_compiler(tmp_path, script))
    with pytest.raises(native.NativeBuildError, match=message):
        library.require()
    assert library.status.startswith("the build failed: ")
    with pytest.raises(native.NativeBuildError, match=message):  # not a skip
        require_native(library)


@_QUIET
def test_a_failing_source_generator_ends_the_wait(monkeypatch, tmp_path):
    """A defect of the generator fails the build (the thread died and wait() hung before)."""
    def broken() -> str:
        raise ValueError("no such kernel")

    library = _library(monkeypatch, tmp_path, sys.executable, broken)
    library.wait(timeout=30)  # bounds the wait of a build thread that died without a word
    assert isinstance(library.error, native.NativeBuildError), library.status
    with pytest.raises(native.NativeBuildError, match="ValueError..no such kernel"):
        library.require()


def test_disabled_is_unavailable(monkeypatch, tmp_path):
    library = _library(monkeypatch, tmp_path, sys.executable)
    monkeypatch.setenv(native.ENABLE_VAR, "0")
    with pytest.raises(native.NativeUnavailableError, match="MPSLINALG_NATIVE=0"):
        library.require()


@pytest.mark.parametrize("compiler,outcome", [("missing", "1 skipped"), ("failing", "1 error")])
def test_the_native_paths_tests_under_each_outcome(tmp_path, compiler, outcome):
    """One test of the native QR path, run in a fresh process whose compiler is missing (it
    skips, saying there is no compiler) or exits non-zero (it fails with the compiler's
    message: a failed build is never reported as a missing compiler)."""
    cxx = (str(tmp_path / "no-such-c++") if compiler == "missing" else _failing_compiler(
        tmp_path, "echo 'fake-c++: error: this compiler always fails' >&2\nexit 3"))
    env = {**os.environ, "CXX": cxx, "MPSLINALG_CACHE_DIR": str(tmp_path / "cache"),
           "MPSLINALG_TEST_BACKENDS": "torch"}
    env.pop(native.ENABLE_VAR, None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/small/test_small_qr.py::test_rank_deficient_and_zero_columns"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = proc.stdout.strip().splitlines()[-1]
    assert outcome in summary, proc.stdout[-3000:]
    if compiler == "missing":
        assert "small_cpu_orth cannot be built here: no C++ compiler" in proc.stdout
    else:
        assert "fake-c++: error: this compiler always fails" in proc.stdout


def test_concurrent_processes_build_a_library_once(tmp_path):
    """Four processes that need the same library while none is cached run the compiler once:
    the others wait on the build's lock and load what it wrote (before, each started its own
    compiler: on a loaded 2-core machine, minutes of CPU per process)."""
    log = tmp_path / "compiler-runs"
    cxx = _failing_compiler(tmp_path, (
        f'echo run >> "{log}"\nsleep 1\n'
        'while [ "$1" != "-o" ]; do shift; done\necho library > "$2"\n'))
    script = ("import sys; from mpslinalg.small import native; "
              f"print(native.build({_SOURCE!r}, {_FLAGS!r}, sys.argv[1], name='once'))")
    env = dict(os.environ, MPSLINALG_CACHE_DIR=str(tmp_path / "cache"), MPSLINALG_NATIVE="0",
               PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", script, cxx], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1 and Path(paths.pop()).read_text() == "library\n"
    assert log.read_text().count("run") == 1


def test_threads_build_a_library_once(monkeypatch, tmp_path):
    import threading

    log = tmp_path / "compiler-runs"
    cxx = _failing_compiler(tmp_path, (
        f'echo run >> "{log}"\nsleep 0.5\n'
        'while [ "$1" != "-o" ]; do shift; done\necho library > "$2"\n'))
    monkeypatch.setenv("MPSLINALG_CACHE_DIR", str(tmp_path / "cache"))
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(
        native.build(_SOURCE, _FLAGS, cxx, name="once"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(paths) == 4 and len(set(paths)) == 1
    assert log.read_text().count("run") == 1
