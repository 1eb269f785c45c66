"""Fixtures of the small path's tests: the native libraries their modules need."""

from __future__ import annotations

import pytest
from native_gate import require_native

from mpslinalg.small import cpu_simd


@pytest.fixture
def native_small_cpu():
    """The inverse / solve / det library of `mpslinalg.small.cpu_simd` (see `require_native`)."""
    return require_native(cpu_simd.LIBRARY)


@pytest.fixture
def native_orth():
    """The QR / SVD / eigh library of `mpslinalg.small.cpu_simd` (see `require_native`)."""
    return require_native(cpu_simd.ORTH_LIBRARY)


@pytest.fixture
def native_expm():
    """The matrix-exponential library of `mpslinalg.small.cpu_simd` (see `require_native`)."""
    return require_native(cpu_simd.EXPM_LIBRARY)


@pytest.fixture
def native_chol():
    """The Cholesky-family library of `mpslinalg.small.cpu_simd` (see `require_native`)."""
    return require_native(cpu_simd.CHOL_LIBRARY)


@pytest.fixture
def native_eig():
    """The eig library of `mpslinalg.small.cpu_simd` (see `require_native`)."""
    return require_native(cpu_simd.EIG_LIBRARY)
