import re

import pytest
import torch

from mpslinalg._core import metal as _metal

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
