"""The native small-matrix libraries as the build backend makes them and the package loads them
(`mpslinalg.small.native`): the library in the installed package is the one loaded; every call
takes the same path, with the same bits, from the first one on; ``import mpslinalg`` starts no
compiler and no thread; where the library is absent every call takes the fallback and the tests
that need it skip (in CI they fail); an installed file that does not load is a defect."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from native_gate import require_native

import mpslinalg
from mpslinalg.small import cpu_simd, generated, native

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
# The warning a missing library gives users (the tests below provoke it on purpose).
_QUIET = pytest.mark.filterwarnings("ignore:mpslinalg. the native n <= 4:RuntimeWarning")


def _python(script: str, tmp_path: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter of this one, with an empty cache directory."""
    full = {**os.environ, "MPSLINALG_CACHE_DIR": str(tmp_path / "cache")}
    full.pop(native.ENABLE_VAR, None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=300)


def test_the_library_in_the_package_is_the_one_loaded(native_small_cpu, native_orth):
    """Each library is loaded from ``_native`` of a directory of the package's ``__path__``
    (site-packages in a wheel; the install tree of an editable install), and that file is
    what the process has mapped."""
    package_dirs = [pathlib.Path(entry).resolve() for entry in mpslinalg.__path__]
    mapped = pathlib.Path("/proc/self/maps")
    for library in cpu_simd.LIBRARIES.values():
        path = library.path.resolve()
        assert path.name == f"{library.name}.so" and path.parent.name == native.SUBDIR
        assert path.parent.parent in package_dirs, (path, package_dirs)
        assert library.status == f"loaded from {library.path}"
        if mapped.is_file():
            assert str(path) in mapped.read_text()


_FIRST_CALLS = """
import json, torch, mpslinalg
from mpslinalg.small import cpu_simd, dispatch, orthogonal
gen = torch.Generator().manual_seed(3)
A, B = torch.randn(2048, 3, 3, generator=gen), torch.randn(300, 3, 3, generator=gen)
with mpslinalg.use_backend("torch"):
    paths = [dispatch.torch_path(A) if dispatch.use_small_path(A) else "torch.linalg",
             orthogonal.torch_path(B) if orthogonal.use_small_qr(B) else "torch.linalg"]
    first = [mpslinalg.inv(A), mpslinalg.qr(B).Q, mpslinalg.svd(B).S]
    later = [mpslinalg.inv(A), mpslinalg.qr(B).Q, mpslinalg.svd(B).S]
print(json.dumps({"paths": paths,
                  "later": [torch.equal(a, b) for a, b in zip(first, later)]}))
if cpu_simd.ORTH_LIBRARY.loaded is not None:
    kernels = [cpu_simd.small_inv_ex(A)[0], cpu_simd.small_qr(B)[0], cpu_simd.small_svd(B)[1]]
    print(json.dumps([torch.equal(a, b) for a, b in zip(first, kernels)]))
"""


def test_the_first_call_takes_the_native_path_with_the_same_bits(
        native_small_cpu, native_orth, tmp_path):
    """In a fresh process with an empty cache, the first inv / qr / svd of a batch of 3x3
    already run the native kernels: the same bits as the later calls and as the kernels
    called directly (before, the library was still building and the first calls took tensor
    ops or torch.linalg: qr's Q differed in the last bits)."""
    proc = _python(_FIRST_CALLS, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert json.loads(lines[0]) == {"paths": ["simd kernel on CPU"] * 2, "later": [True] * 3}
    assert json.loads(lines[1]) == [True] * 3  # the bits of the kernels called directly


def test_import_starts_no_compiler_and_no_thread(tmp_path):
    """``import mpslinalg`` and a small-path call run no C++ compiler (every name one could be
    found by records being run) and leave no thread of ours (before, the import started a
    build thread that ran g++ with an empty cache)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "compiler-runs"
    bin_dir.mkdir()
    for name in ("c++", "g++", "clang++", "cc", "gcc"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 1\n')
        script.chmod(0o755)
    proc = _python(
        "import threading, torch, mpslinalg\n"
        "from mpslinalg.small import cpu_simd\n"
        "with mpslinalg.use_backend('torch'):\n"
        "    mpslinalg.inv(torch.eye(3).expand(300, 3, 3))\n"
        "cpu_simd.LIBRARY.wait(), cpu_simd.ORTH_LIBRARY.wait()\n"
        "print([t.name for t in threading.enumerate()])",
        tmp_path, CXX=str(bin_dir / "c++"), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert not log.exists(), log.read_text()
    assert proc.stdout.strip() == "['MainThread']"


def test_switched_off_is_the_fallback_from_the_first_call(tmp_path):
    """``MPSLINALG_NATIVE=0``: the first call already takes the tensor-op / torch.linalg path,
    no warning is given (it was asked for), and ``info`` says why."""
    proc = _python(_FIRST_CALLS, tmp_path, **{native.ENABLE_VAR: "0"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"paths": ["torch.linalg"] * 2, "later": [True] * 3}
    assert "RuntimeWarning" not in proc.stderr, proc.stderr
    info = _python("from mpslinalg import cli; cli.main(['info'])", tmp_path,
                   **{native.ENABLE_VAR: "0"})
    assert info.returncode == 0, info.stderr
    for what in ("inv/solve/det", "QR/SVD/eigh"):
        assert (f"native CPU kernels, {what}: not used: disabled by {native.ENABLE_VAR}=0"
                in info.stdout), info.stdout


def _library(directory: pathlib.Path, name: str = "small_cpu",
             bind=cpu_simd._bind) -> native.NativeLibrary:
    return native.NativeLibrary(name, bind, directories=[directory])


def test_an_absent_library_is_unavailable_and_warns_once(tmp_path, monkeypatch):
    """A library the installation lacks (built without a compiler; the loader pointed at an
    empty directory here): not loaded, the status says where it was looked for and why it may
    be missing, `require` raises `NativeUnavailableError`, and one warning names every library
    missing."""
    monkeypatch.delenv(native.ENABLE_VAR, raising=False)
    libraries = [_library(tmp_path, name) for name in ("small_cpu", "small_cpu_orth")]
    for library in libraries:
        assert library.loaded is None and library.wait() is None
        assert library.status.startswith(f"not in this installation (no {library.name}.so in "
                                         f"{tmp_path})")
        with pytest.raises(native.NativeUnavailableError, match="built where CMake found no"):
            library.require()
    with pytest.warns(RuntimeWarning) as caught:
        native.warn_absent(libraries)
    assert len(caught) == 1
    assert "(small_cpu, small_cpu_orth) are not loaded: not in this installation" in str(
        caught[0].message)


@pytest.mark.parametrize("ci", ["true", None])
def test_the_gate_skips_an_absent_library_and_fails_it_in_ci(tmp_path, monkeypatch, ci):
    monkeypatch.delenv(native.ENABLE_VAR, raising=False)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
        with pytest.raises(pytest.skip.Exception, match="small_cpu is not loaded: not in this"):
            require_native(_library(tmp_path))
    else:
        monkeypatch.setenv("CI", ci)
        with pytest.raises(pytest.fail.Exception, match="small_cpu is not loaded: .*CI installs"):
            require_native(_library(tmp_path))


def test_an_installed_file_that_does_not_load_is_a_defect(native_small_cpu, tmp_path,
                                                          monkeypatch):
    """A file that is no library for this machine, or a library without the kernels bound:
    `NativeBuildError` with the loader's message, and the tests of the native path fail with
    it (never a skip)."""
    monkeypatch.delenv(native.ENABLE_VAR, raising=False)
    (tmp_path / "small_cpu.so").write_text("not a library\n")
    broken = _library(tmp_path)
    assert broken.loaded is None and broken.status.startswith(f"{tmp_path / 'small_cpu.so'} "
                                                              "does not load: ")
    with pytest.raises(native.NativeBuildError, match="does not load"):
        require_native(broken)
    other = tmp_path / "other"
    other.mkdir()
    (other / "small_cpu_orth.so").write_bytes(cpu_simd.LIBRARY.path.read_bytes())
    unbound = _library(other, "small_cpu_orth", cpu_simd._bind_orth)
    with pytest.raises(native.NativeBuildError, match="mpsl_small_qr_m1_n1_f32"):
        require_native(unbound)


@pytest.mark.parametrize("ci,outcome", [(None, "1 skipped"), ("true", "1 error")])
def test_the_native_paths_tests_without_the_library(tmp_path, ci, outcome):
    """One test of the native QR path in a fresh process without the library
    (``MPSLINALG_NATIVE=0``): it skips, saying so, and in CI it fails."""
    env = {**os.environ, native.ENABLE_VAR: "0", "MPSLINALG_TEST_BACKENDS": "torch",
           "MPSLINALG_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CI", None)
    if ci:
        env["CI"] = ci
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/small/test_small_qr.py::test_rank_deficient_and_zero_columns"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = proc.stdout.strip().splitlines()[-1]
    assert outcome in summary, proc.stdout[-3000:]
    assert (f"small_cpu_orth is not loaded: not used: disabled by {native.ENABLE_VAR}=0"
            in proc.stdout), proc.stdout[-3000:]


#: The checked-in files the build compiles, and the CMake list of the libraries and their flags.
_SOURCES = tuple(f"native/{lib.name}.cpp" for lib in cpu_simd.LIBRARIES.values())
_NATIVE_FILES = (*_SOURCES, "native/libraries.cmake")


def test_the_checked_in_native_sources_are_current():
    """The C++ the build compiles is what the generators write now (run
    ``python -m mpslinalg.small.generated`` after changing them), on any machine: the AVX2
    variants are behind ``#if defined(__x86_64__)``, not chosen when generating."""
    writers = generated.targets()
    for path in _NATIVE_FILES:
        assert (ROOT / path).read_text() == writers[path](), f"{path} is stale"
    for path in _SOURCES:
        source = (ROOT / path).read_text()
        assert source.count("\nnamespace avx2_") == source.count(
            "#if defined(__x86_64__)\nnamespace avx2_") > 0


def test_the_build_compiles_with_the_generated_flags():
    """CMakeLists.txt builds every library of native/libraries.cmake with exactly its flags:
    no FMA contraction (it would round products differently from the emulator), no fast-math,
    no -march (the instruction set is chosen at run time)."""
    cmake = (ROOT / "native/libraries.cmake").read_text()
    flags = dict(re.findall(r"^set\(MPSL_FLAGS_(\w+) (.*)\)$", cmake, re.M))
    assert flags == {name: " ".join(f) for name, f in cpu_simd._LIBRARY_FLAGS.items()}
    for line in flags.values():
        assert "-ffp-contract=off" in line.split() and "-O3" in line.split()
        assert "fast-math" not in line and "march" not in line
    lists = (ROOT / "CMakeLists.txt").read_text()
    assert "target_compile_options(${name} PRIVATE ${MPSL_FLAGS_${name}})" in lists
    assert 'set(CMAKE_CXX_FLAGS "")' in lists  # no $CXXFLAGS, no build-type flags


@pytest.mark.filterwarnings("ignore:'mpslinalg.small.generated' found in sys.modules")
def test_the_generated_command_checks_the_native_sources(monkeypatch, capsys):
    """``python -m mpslinalg.small.generated --check`` sees the native sources, whose writers
    register when the package is imported (before, run as __main__ it consulted a registry of
    its own that no producer filled, and called every file current)."""
    import runpy

    monkeypatch.setitem(generated.GENERATED, "native/small_cpu.cpp", lambda: "changed\n")
    monkeypatch.setattr(sys, "argv", ["generated", "--check"])
    with pytest.raises(SystemExit) as exit_status:
        runpy.run_module("mpslinalg.small.generated", run_name="__main__")
    assert exit_status.value.code == 1
    assert "stale: native/small_cpu.cpp" in capsys.readouterr().out.splitlines()
