import collections
import re

import pytest
import torch

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg.testing import count_launches

from opdb import metal_constant

ROOT = _metal.metal_root()
METAL_FILES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.metal"))
_DTYPE_BY_NAME = {name: dtype for dtype, name in _metal.DTYPE_NAMES.items()}
_HOST_NAME = re.compile(
    r"^(?P<op>[a-z][a-z0-9_]*?)_(?P<dtype>" + "|".join(_DTYPE_BY_NAME) + r")"
    r"(?P<params>(?:_[a-z]+-?\d+)*)$"
)


def rebuilt_name(host_name: str) -> str | None:
    """The host name as mpslinalg._core.metal.kernel_name would spell it, or None if it breaks the
    <op>_<dtype>[_<param><value>...] rule."""
    match = _HOST_NAME.match(host_name)
    if not match:
        return None
    params = {}
    for piece in filter(None, match.group("params").split("_")):
        key = re.match(r"[a-z]+", piece).group(0)
        params[key] = int(piece[len(key):])
    return _metal.kernel_name(match.group("op"), _DTYPE_BY_NAME[match.group("dtype")], **params)


def test_sources_are_found_in_the_checkout():
    assert (ROOT / "common" / "defines.h").is_file()
    assert "common/copy.metal" in METAL_FILES


def test_load_source_inlines_our_headers_once_with_line_markers():
    text = _metal.load_source("common/copy.metal")
    assert '#include "' not in text
    assert text.count("#define MPSL_KERNEL(") == 1
    assert '#line 1 "metal/common/copy.metal"' in text
    assert '#line 1 "metal/common/defines.h"' in text
    assert "#pragma once" not in text
    assert "#include <metal_stdlib>" in text  # Metal's own headers stay for the compiler
    text.encode("ascii")


def test_all_sources_are_ascii():
    for path in list(ROOT.rglob("*.metal")) + list(ROOT.rglob("*.h")):
        path.read_bytes().decode("ascii")


def test_non_ascii_and_missing_includes_are_reported(tmp_path, monkeypatch):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "defines.h").write_text("#pragma once\n")
    (tmp_path / "bad.metal").write_bytes(b"// ok\n// caf\xc3\xa9\n")
    (tmp_path / "missing.metal").write_text('\n#include "nothere.h"\n')
    monkeypatch.setattr(_metal, "metal_root", lambda: tmp_path)
    with pytest.raises(SyntaxError, match=r"metal/bad.metal:2: non-ASCII"):
        _metal.load_source("bad.metal")
    with pytest.raises(FileNotFoundError, match=r'metal/missing.metal:2: #include "nothere.h"'):
        _metal.load_source("missing.metal")


def test_kernel_name_rule():
    assert _metal.kernel_name("lu_panel", torch.complex64, bs=32) == "lu_panel_complex64_bs32"
    assert _metal.kernel_name("small_inv", torch.float32, n=4, left=True) == \
        "small_inv_float32_n4_left1"
    assert _metal.kernel_name("copy_strided", torch.int32) == "copy_strided_int32"


def test_cuda_tensors_are_refused_by_the_loader():
    with pytest.raises(RuntimeError, match="mpslinalg.solve: the metal backend"):
        _metal.library("common/copy.metal", torch.device("cuda"), "solve")


@pytest.mark.parametrize("path", METAL_FILES)
def test_every_metal_file_compiles_in_the_emulator_and_follows_the_naming_rule(path):
    names = dir(_metal.library(path, torch.device("cpu")))
    assert names, f"{path} instantiates no kernel"
    assert all(rebuilt_name(name) == name for name in names), names


def test_compilation_is_cached_per_source_and_executor():
    device = torch.device("cpu")
    assert _metal.library("common/copy.metal", device) is _metal.library("common/copy.metal",
                                                                         device)
    k1 = _metal.kernel("common/copy.metal", "copy_strided", torch.float32, device)
    k2 = _metal.kernel("common/copy.metal", "copy_strided", torch.float32, device)
    assert k1 is k2


# ---------------------------------------------------------------- the tables


def test_simd_width_mirrors_the_header():
    assert int(metal_constant("common/defines.h", "kSimdWidth")) == _metal.SIMD_WIDTH


def test_the_linalg_kernels_are_instantiated_for_the_linalg_dtypes():
    """Every metal/linalg source instantiates its floating-point kernels for exactly
    LINALG_DTYPES (the checks' Metal dtype policy and the families' contract checks read it)."""
    for path in (p for p in METAL_FILES if p.startswith("linalg/")):
        dtypes = {_DTYPE_BY_NAME[_HOST_NAME.match(name).group("dtype")]
                  for name in dir(_metal.library(path, torch.device("cpu")))}
        floating = {d for d in dtypes if d.is_floating_point or d.is_complex}
        assert floating == set(_metal.LINALG_DTYPES), path


# ---------------------------------------------------------------- the one launch function


def _calls():
    A = torch.randn(3, 6, 6) + 6 * torch.eye(6)
    small = torch.randn(5, 3, 3) + 3 * torch.eye(3)
    return [
        lambda: mpslinalg.inv_ex(small.mT),  # n <= 4 kernel after a gather
        lambda: mpslinalg.det(small),
        lambda: mpslinalg.solve(A, torch.randn(3, 6, 2)),
        lambda: mpslinalg.qr(A),
        lambda: mpslinalg.svd(A),
        lambda: mpslinalg.eigh(A + A.mT),
        lambda: mpslinalg.ops.pad(A, (1, 1)),
    ]


def test_every_launch_goes_through_launch():
    """What the emulator ran is what went through `launch`, kernel for kernel (a kernel called
    directly would be missing from count_launches, and from the streams, the lane order and
    the race check)."""
    with mpslinalg.use_backend("metal"):
        for call in _calls():
            emulator.reset_launch_counts()
            with count_launches() as launches:
                call()
            assert collections.Counter(launches.names) == emulator.launch_counts()
            assert launches.names


def test_launch_listeners_are_told_of_each_launch_and_removed_after():
    with mpslinalg.use_backend("metal"), count_launches() as outer:
        mpslinalg.ops.pad(torch.ones(3), (1, 1))
        with count_launches() as inner:
            mpslinalg.inv_ex(torch.eye(2).repeat(4, 1, 1))
    assert inner.names == ["small_inv_float32_n2"]
    assert outer.names == ["pad_int32_wide0", "small_inv_float32_n2"]
    assert _metal.launch_listeners == []
