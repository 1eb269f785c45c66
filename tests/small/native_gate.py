"""The gate of the tests that need the native small-matrix library
(`mpslinalg.small.native`)."""

from __future__ import annotations

import ctypes

import pytest

from mpslinalg.small import native


def require_native(library: native.NativeLibrary) -> ctypes.CDLL:
    """``library``, waiting for its build. Where this machine has no C++ compiler (or the
    build is switched off) the test is skipped, saying so; where the compiler ran and failed,
    `native.NativeBuildError` propagates and the test fails with the compiler's messages."""
    try:
        return library.require()
    except native.NativeUnavailableError as why:
        pytest.skip(f"the native library {library.name} cannot be built here: {why}")
