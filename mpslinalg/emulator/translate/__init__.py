"""MSL -> C++ translation, as a sequence of passes over one translation unit.

0. `source`: checks of the raw text (ASCII, no file outside the source's tree), then the C
   preprocessor (macros must be expanded before kernels can be found);
1. `lexer`: tokens, each with its whitespace and ``file:line``;
2. `structure`: the `Unit` -- brackets, attributes, scopes, functions, kernels, instantiations,
   host names, the call graph -- built once;
3. `restrictions`: Metal's rules a C++ compiler would accept (the table
   `restrictions.RESTRICTIONS`, each rule with its section of the Metal Shading Language
   Specification), checked before anything is rewritten;
4. `lowering`: token edits (address spaces, threadgroup declarations, swizzles, half literals,
   ...) for the CPU or the CUDA target;
5. `emission`: the CPU launchers and exported kernel table, or the CUDA wrappers.

The passes never add or remove newlines, so every diagnostic of the C++ compiler points at the
original ``metal/<file>:<line>``. `translate` runs them for the CPU runtime, `translate_cuda` for
the CUDA executor, each adding the checks of what its lowering cannot run like Metal
(`restrictions.check_cpu`, `restrictions.check_cuda`).
"""

from __future__ import annotations

import dataclasses

from . import emission, lexer, lowering, restrictions, source, structure
from .emission import assemble
from .errors import CudaUnsupportedError, TranslateError
from .lexer import FLOAT_LITERAL_RE, Tok, single_precision, single_precision_literals, tokenize
from .restrictions import HOST_RUNTIME_SYMBOLS, host_call_message
from .source import check_entered_files, check_raw, preprocess, preprocess_command
from .structure import SYNC_NAMES, KernelInfo, ParamInfo, Unit

__all__ = [
    "TranslateError",
    "CudaUnsupportedError",
    "Translation",
    "KernelInfo",
    "ParamInfo",
    "Unit",
    "front_end",
    "translate",
    "translate_cuda",
    "assemble",
    "preprocess_command",
    "check_raw",
    "preprocess",
    "tokenize",
    "Tok",
    "single_precision",
    "single_precision_literals",
    "FLOAT_LITERAL_RE",
    "check_entered_files",
    "SYNC_NAMES",
    "HOST_RUNTIME_SYMBOLS",
    "host_call_message",
    "emission",
    "lexer",
    "lowering",
    "restrictions",
    "source",
    "structure",
]


@dataclasses.dataclass
class Translation:
    """A source translated for the CPU runtime."""

    body: str  # the rewritten Metal source
    snippets: list  # per kernel launcher C++
    table: str  # the exported kernel table
    kernels: list
    # names called but not defined in the source -> "file:line" of the first call
    calls: dict = dataclasses.field(default_factory=dict)

    @property
    def cpp(self) -> str:
        return assemble(self, 1)[0]


def front_end(source: str, cxx: str, metal_version: int) -> Unit:
    """The checked `Unit` of a Metal source (passes 0 to 3), the same for both back ends;
    ``cxx``'s preprocessor expands the macros."""
    toks = tokenize(preprocess(check_raw(source), cxx, metal_version))
    check_entered_files(toks)
    unit = Unit(toks, metal_version)
    restrictions.check(unit)
    return unit


def translate(source: str, cxx: str, *, metal_version: int = 320) -> Translation:
    """Metal source -> the C++ of the CPU runtime."""
    if not isinstance(source, str):
        raise TypeError(
            f"compile_shader expects the Metal source as str, got {type(source).__name__}"
        )
    unit = front_end(source, cxx, metal_version)
    restrictions.check_cpu(unit)
    body = lowering.lower(unit, "cpu").text(single_precision=True)
    snippets, table = emission.cpu_launchers(unit)
    calls = {nm: f"{unit.toks[j].file}:{unit.toks[j].line}"
             for nm, j in unit.undefined_calls.items()}
    return Translation(body, snippets, table, emission.kernel_infos(unit), calls)


def translate_cuda(source: str, cxx: str, *, metal_version: int = 320) -> tuple:
    """Metal source -> (CUDA C++ without the prelude, `KernelInfo` per wrapper ``emu_k<i>``)."""
    unit = front_end(source, cxx, metal_version)
    restrictions.check_cuda(unit)
    body = lowering.lower(unit, "cuda").text()
    return emission.cuda_source(unit, body), emission.kernel_infos(unit)
