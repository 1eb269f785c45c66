"""Kernel parameter structs: the host's layout of every ``*Params`` struct (read from its
header by `mpslinalg._core.metal_params`) is the compiled one, and every kernel with more than
two scalar arguments takes such a struct."""

from __future__ import annotations

import re

import pytest
import torch

from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg._core import metal_params

_STRUCTS = metal_params.all_param_structs()

#: Fields of every size in an order that needs padding: the compiled layout shows the host
#: follows Metal's alignment rules, which the headers' structs (longs, then floats) do not test.
_MIXED_SOURCE = """
#include <metal_stdlib>
namespace mpsl {
struct MixedParams {
  long a;
  float b;  // packed after the long
  int c[3];
  bool d, e;
  short g;
  long f;  // aligned up to 8
  uint h;
};
}  // namespace mpsl
"""
_MIXED = metal_params._layout("(test)", "MixedParams",
                              _MIXED_SOURCE.split("{")[2].split("};")[0], _MIXED_SOURCE)
_CASES = [(s, _metal.load_source(s.header)) for s in _STRUCTS] + [(_MIXED, _MIXED_SOURCE)]


def _probe(s: metal_params.ParamStruct, source: str) -> str:
    """A kernel writing sizeof the struct, then per field its offset, its size and its (last)
    entry as read by name from the bound struct."""
    lines = [f"  out[0] = long(sizeof(mpsl::{s.name}));"]
    for k, f in enumerate(s.fields):
        first = f"p.{f.name}" if f.count is None else f"p.{f.name}[0]"
        last = f"p.{f.name}" if f.count is None else f"p.{f.name}[{f.count - 1}]"
        lines += [f"  out[{3 * k + 1}] = long((constant char*)&{first} - (constant char*)&p);",
                  f"  out[{3 * k + 2}] = long(sizeof(p.{f.name}));",
                  f"  out[{3 * k + 3}] = long({last});"]
    body = "\n".join(lines)
    return source + f"""
[[kernel]] void layout_probe(constant mpsl::{s.name}& p [[buffer(0)]],
                             device long* out [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {{
{body}
}}
"""


def _distinct_values(s: metal_params.ParamStruct) -> dict:
    """Field k holds k + 1 (in every entry but the last of an array, which holds k + 2);
    true for a bool."""
    values = {}
    for k, f in enumerate(s.fields):
        scalar = (lambda v: v != 0) if f.type == "bool" else (float if f.type == "float" else int)
        values[f.name] = (scalar(k + 1) if f.count is None
                          else [scalar(k + 1)] * (f.count - 1) + [scalar(k + 2)])
    return values


@pytest.mark.parametrize("s, source", _CASES, ids=[f"{s.header}:{s.name}" for s, _ in _CASES])
def test_host_layout_is_the_compiled_layout(s, source):
    out = torch.full((1 + 3 * len(s.fields),), -1, dtype=torch.int64)
    emulator.compile_shader(_probe(s, source)).layout_probe(s.pack(**_distinct_values(s)), out,
                                                            threads=1)
    expected = [s.size]
    for k, f in enumerate(s.fields):
        echo = 1 if f.type == "bool" else (k + 1 if f.count is None else k + 2)
        expected += [f.offset, f.size, echo]
    assert out.tolist() == expected


def test_every_header_with_a_params_struct_is_covered():
    declared = {(path.relative_to(_metal.metal_root()).as_posix(), m.group(1))
                for path in _metal.metal_root().rglob("*.h")
                for m in re.finditer(r"^struct (\w+Params) \{", path.read_text(), re.M)}
    assert declared == {(s.header, s.name) for s in _STRUCTS}


def test_fields_follow_metals_alignment():
    assert [(f.name, f.offset) for f in _MIXED.fields] == [
        ("a", 0), ("b", 8), ("c", 12), ("d", 24), ("e", 25), ("g", 26), ("f", 32), ("h", 40)]
    assert _MIXED.size == 48
    words = _MIXED.pack(a=-1, b=1.5, c=[1, 2, 3], d=True, e=False, g=-2, f=7, h=9)
    assert len(words) == 6 and words[0] == -1 and words[4] == 7


@pytest.mark.parametrize("body, match", [
    ("  long a;\n  float* b;\n", "not a field of Metal scalars"),
    ("  long a;\n  half b;\n", "not a field of Metal scalars"),
    ("  long a[kMissing];\n", "array bound kMissing"),
    ("", "declares no fields"),
])
def test_the_parser_refuses_what_it_does_not_know(body, match):
    with pytest.raises(SyntaxError, match=match):
        metal_params._layout("x.h", "BadParams", body, "")


def test_pack_names_missing_unknown_and_misshapen_fields():
    s = metal_params.param_struct("ops/convolution.h", "Conv1dParams")
    values = {f.name: 0 for f in s.fields} | {"x_strides": [1, 2, 3], "w_strides": [1, 2, 3]}
    assert len(s.pack(**values)) == s.size // 8
    with pytest.raises(TypeError, match=r"missing fields \['batch'\], unknown fields \['bogus'\]"):
        s.pack(**{k: v for k, v in values.items() if k != "batch"}, bogus=1)
    with pytest.raises(ValueError, match=r"Conv1dParams.x_strides holds 3 entries, got 2"):
        s.pack(**values | {"x_strides": [1, 2]})
    with pytest.raises(ValueError, match=r"Conv1dParams.stride \(long\) cannot hold 2.0"):
        s.pack(**values | {"stride": 2.0})
    with pytest.raises(ValueError, match=r"Conv1dParams.batch \(long\) cannot hold 9223372036"):
        s.pack(**values | {"batch": 2**63})


_SCALAR_ARGUMENT = re.compile(r"constant\s+(?:bool|char|uchar|short|ushort|int|uint|long|ulong|"
                              r"half|float)\s*&")


def test_kernels_with_more_than_two_scalars_take_a_params_struct():
    crowded = []
    for path in sorted(_metal.metal_root().rglob("*.h")):
        text = path.read_text()
        for m in re.finditer(r"\[\[kernel\]\]\s+void\s+(\w+)\s*\((.*?)\)\s*\{", text, re.S):
            if len(_SCALAR_ARGUMENT.findall(m.group(2))) > 2:
                crowded.append(f"{path.name}:{m.group(1)}")
    assert crowded == []
