"""Kernel parameter structs, declared once in the Metal headers and packed here from that one
declaration.

A kernel that takes more than two scalars takes them as one ``constant XParams&`` struct. The
host does not spell the struct's layout again: `pack` reads the ``struct XParams { ... };``
declaration out of the header, lays its fields out with Metal's rules (each scalar aligned to
its size, the struct to its largest field, its size rounded up to that alignment) and packs
keyword values into the bytes of the struct, handed to the kernel as a list of ``int64`` words
(the :func:`torch.mps.compile_shader` convention for a list of ints, which the emulator
follows). The parser is deliberately strict: a field is ``<type> <name>[, <name>...];`` with
an optional array bound (a literal or a ``constexpr`` integer of the header), of the scalar
types below; anything else in a parameter struct is an error naming the line.
"""

from __future__ import annotations

import functools
import re
import struct as _struct
from collections.abc import Sequence
from dataclasses import dataclass

from . import metal as _metal

#: Metal scalar types a parameter struct may hold: the `struct` module's little-endian code
#: (whose size is Metal's size and alignment of the type).
SCALAR_CODES = {
    "bool": "?", "char": "b", "uchar": "B", "short": "h", "ushort": "H",
    "int": "i", "uint": "I", "long": "q", "ulong": "Q", "float": "f",
}
_WORD = 8  # bytes of one int64 of the packed list

_STRUCT = re.compile(r"^struct\s+(\w+Params)\s*\{(.*?)^\};", re.S | re.M)
_FIELD_LINE = re.compile(r"^(\w+)\s+(\w+(?:\s*\[\s*\w+\s*\])?(?:\s*,\s*\w+(?:\s*\[\s*\w+\s*\])?)*)"
                         r"\s*;$")
_DECLARATOR = re.compile(r"^(\w+)(?:\s*\[\s*(\w+)\s*\])?$")
_CONSTANT = r"constexpr\s+(?:int|uint|long|ulong)\s+{name}\s*=\s*(\d+)\s*;"


@dataclass(frozen=True)
class Field:
    """One member of a parameter struct: its scalar type, byte offset and array length (None
    for a scalar member)."""

    name: str
    type: str
    offset: int
    count: int | None

    @property
    def size(self) -> int:
        return _struct.calcsize(SCALAR_CODES[self.type]) * (self.count or 1)


@dataclass(frozen=True)
class ParamStruct:
    """The layout of ``mpsl::<name>`` as declared in ``metal/<header>``."""

    header: str
    name: str
    fields: tuple[Field, ...]
    size: int

    def __post_init__(self) -> None:
        # One compiled format for the whole struct (padding bytes as "x"), then the same bytes
        # read as int64 words: a launch packs in one call.
        fmt, end = "<", 0
        for f in self.fields:
            fmt += "x" * (f.offset - end) + f"{f.count or 1}{SCALAR_CODES[f.type]}"
            end = f.offset + f.size
        words = -(-self.size // _WORD)
        object.__setattr__(self, "_bytes", _struct.Struct(fmt + "x" * (words * _WORD - end)))
        object.__setattr__(self, "_words", _struct.Struct(f"<{words}q"))
        object.__setattr__(self, "_names", frozenset(f.name for f in self.fields))

    def word(self, name: str) -> int:
        """Index in the packed ``int64`` list of the word holding the 8-byte integer field
        ``name`` (a loop of launches that changes only that field sets that word)."""
        field = next((f for f in self.fields if f.name == name), None)
        if field is None or field.type not in ("long", "ulong") or field.count is not None:
            raise TypeError(f"mpslinalg: {self.name}.{name} is not a long field of "
                            f"metal/{self.header}")
        return field.offset // _WORD

    def pack(self, fill: int | None = None, /,
             **values: int | float | bool | Sequence[int | float]) -> list[int]:
        """The struct holding ``values`` (one per field, an array field a sequence of exactly
        its length; with ``fill``, the fields not given hold it), as ``int64`` words. An
        integer field takes integers and bools only (a float there is a mistake)."""
        if fill is not None:
            values = {f.name: [fill] * f.count if f.count else fill
                      for f in self.fields} | values
        if values.keys() != self._names:
            missing = [f.name for f in self.fields if f.name not in values]
            raise TypeError(f"mpslinalg: {self.name} (metal/{self.header}): missing fields "
                            f"{missing}, unknown fields {sorted(values.keys() - self._names)}")
        flat: list = []
        for f in self.fields:
            value = values[f.name]
            if f.count is None:
                flat.append(value)
            elif len(value) == f.count:
                flat.extend(value)
            else:
                raise ValueError(f"mpslinalg: {self.name}.{f.name} holds {f.count} entries, "
                                 f"got {len(value)}")
        try:
            return list(self._words.unpack(self._bytes.pack(*flat)))
        except _struct.error:
            self._raise_bad_value(values)
            raise

    def _raise_bad_value(self, values: dict) -> None:
        for f in self.fields:
            items = [values[f.name]] if f.count is None else values[f.name]
            try:
                _struct.pack(f"<{len(items)}{SCALAR_CODES[f.type]}", *items)
            except _struct.error as exc:
                raise ValueError(f"mpslinalg: {self.name}.{f.name} ({f.type}) cannot hold "
                                 f"{values[f.name]!r}: {exc}") from None


def _layout(header: str, name: str, body: str, text: str) -> ParamStruct:
    fields = []
    offset = align = 0
    for raw in body.splitlines():
        line = raw.split("//")[0].strip()
        if not line:
            continue
        match = _FIELD_LINE.match(line)
        if match is None or match.group(1) not in SCALAR_CODES:
            raise SyntaxError(f"metal/{header}: {name}: not a field of Metal scalars: {line!r}")
        type_ = match.group(1)
        item = _struct.calcsize(SCALAR_CODES[type_])
        for declarator in match.group(2).split(","):
            field_name, bound = _DECLARATOR.match(declarator.strip()).groups()
            count = None if bound is None else _array_bound(header, name, bound, text)
            offset = -(-offset // item) * item
            fields.append(Field(field_name, type_, offset, count))
            offset += item * (count or 1)
            align = max(align, item)
    if not fields:
        raise SyntaxError(f"metal/{header}: {name} declares no fields")
    return ParamStruct(header, name, tuple(fields), -(-offset // align) * align)


def _array_bound(header: str, name: str, bound: str, text: str) -> int:
    if bound.isdigit():
        return int(bound)
    match = re.search(_CONSTANT.format(name=re.escape(bound)), text)
    if match is None:
        raise SyntaxError(f"metal/{header}: {name}: array bound {bound} is not a constexpr "
                          "integer literal of the header")
    return int(match.group(1))


@functools.cache
def structs_of(header: str) -> dict[str, ParamStruct]:
    """Every parameter struct (``struct <Name>Params``) declared in ``metal/<header>``, by
    name."""
    text = (_metal.metal_root() / header).read_text()
    included = _metal.load_source(header)
    return {m.group(1): _layout(header, m.group(1), m.group(2), included)
            for m in _STRUCT.finditer(text)}


def param_struct(header: str, name: str) -> ParamStruct:
    """The layout of parameter struct ``name`` of ``metal/<header>``."""
    try:
        return structs_of(header)[name]
    except KeyError:
        raise KeyError(f"mpslinalg: no struct {name} in metal/{header}") from None


def pack(header: str, name: str, fill: int | None = None, /,
         **values: int | float | bool | Sequence[int | float]) -> list[int]:
    """The parameter struct ``name`` of ``metal/<header>`` holding ``values`` (and ``fill``
    in the fields not given, when given), as the list of ``int64`` words a launch passes for
    its ``constant <name>&`` argument."""
    return param_struct(header, name).pack(fill, **values)


def all_param_structs() -> list[ParamStruct]:
    """Every parameter struct of every header under ``metal/`` (for the layout test)."""
    root = _metal.metal_root()
    return [s for path in sorted(root.rglob("*.h"))
            for s in structs_of(path.relative_to(root).as_posix()).values()]
