"""The gate of the tests that need the native small-matrix libraries
(`mpslinalg.small.native`), and the compiler of test-only variants of their sources."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pathlib
import subprocess

import pytest

from mpslinalg.emulator.build import build_once, cache_dir, find_compiler
from mpslinalg.small import native


def require_native(library: native.NativeLibrary) -> ctypes.CDLL:
    """``library``. Where this installation has none (built without a C++ compiler, a checkout
    never installed, or ``MPSLINALG_NATIVE=0``) the test is skipped, saying so, except in CI
    (``CI=true``), whose install builds it: there the test fails. Where the installed file does
    not load, `native.NativeBuildError` propagates and the test fails with the loader's
    message."""
    try:
        return library.require()
    except native.NativeUnavailableError as why:
        message = f"the native library {library.name} is not loaded: {why}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI installs the package with its build backend, which "
                        "must have built it)", pytrace=False)
        pytest.skip(message)


def build_test_library(source: str, flags: list[str], name: str) -> pathlib.Path:
    """A test-only variant of a native source (an instrumented kernel, say), compiled into a
    shared library in the emulator's cache with the emulator's compiler (the package's own
    libraries are built by the build backend, never like this)."""
    cxx = find_compiler()
    if cxx is None:
        pytest.skip("no C++ compiler for a test-only build ($CXX, c++, g++ or clang++)")

    def compile_into(tmp: pathlib.Path) -> pathlib.Path:
        src, so = tmp / f"{name}.cpp", tmp / f"{name}.so"
        src.write_text(source)
        proc = subprocess.run([cxx, *flags, "-shared", "-fPIC", str(src), "-o", str(so)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{cxx} failed on the test-only {name}:\n{proc.stderr}"
        return so

    key = hashlib.sha256(json.dumps([source, flags, os.path.basename(cxx)]).encode())
    return build_once(cache_dir() / "native-test" / f"{name}-{key.hexdigest()[:24]}.so",
                      compile_into)
