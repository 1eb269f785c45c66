"""Run Metal Shading Language compute kernels on the CPU with Metal's semantics.

``compile_shader(source)`` mirrors ``torch.mps.compile_shader``: the returned library exposes
each kernel by host name, and kernels are called with torch's exact argument marshalling and
``dispatchThreads`` geometry. CPU tensors stand in for MPS tensors. Importing this module
compiles nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading

from .build import cache_dir, clear_cache, find_compiler
from .marshal import launch_counts, reset_launch_counts, total_launches
from .runtime import DataRaceError

__all__ = [
    "compile_shader",
    "launch_counts",
    "total_launches",
    "reset_launch_counts",
    "cache_dir",
    "clear_cache",
    "find_compiler",
    "DataRaceError",
]

_memo: dict = {}
_memo_lock = threading.Lock()
_key_locks: dict = {}


def _index_key(source, debug, metal_version, cxx, race_check):
    from . import build

    blob = json.dumps(
        [
            source,
            debug,
            metal_version,
            build.compile_flags(debug, race_check, cxx),
            build.EMULATOR_VERSION,
            build.shim_hash(),
            build.translator_hash(),
            cxx,
        ]
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def race_check_default() -> bool:
    """Whether ``$MPSLINALG_EMULATOR_RACECHECK`` asks for race-check builds by default."""
    return os.environ.get("MPSLINALG_EMULATOR_RACECHECK", "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )


def compile_shader(
    source: str, *, debug: bool = False, metal_version: int = 320, race_check: bool | None = None
):
    """Compile MSL ``source`` for the CPU emulator.

    Compile errors raise SyntaxError with ``metal/<file>:line`` diagnostics, as torch does.
    device/constant pointer accesses are bounds-checked in every build; ``debug=True`` (a separate
    cached build) also checks indices into fixed-size threadgroup and thread arrays.
    ``metal_version`` is ``__METAL_VERSION__``: 320 (MSL 3.2, C++14 rules) or 400 (MSL 4.0,
    C++17). ``race_check=True`` (a separate cached build; the default comes from
    ``$MPSLINALG_EMULATOR_RACECHECK``) makes every launch check for data races on threadgroup and
    device memory and raise `DataRaceError` on the first one.
    """
    from . import build, runtime, translate

    if not isinstance(source, str):
        raise TypeError(f"compile_shader expects str source, got {type(source).__name__}")
    if metal_version not in (310, 320, 400):
        raise ValueError(f"metal_version must be 310, 320 or 400, got {metal_version!r}")
    cxx = build.require_emulator()
    race = race_check_default() if race_check is None else bool(race_check)
    why_not = build.race_check_unsupported(cxx) if race else None
    if why_not is not None:
        if race_check is not None:
            raise build.EmulatorUnavailableError(why_not)
        race = False  # the environment's default applies where the compiler can build it
    mkey = (source, bool(debug), metal_version, cxx, race)
    with _memo_lock:
        lib = _memo.get(mkey)
        if lib is not None:
            return lib
        lock = _key_locks.setdefault(mkey, threading.Lock())
    with lock:
        with _memo_lock:
            lib = _memo.get(mkey)
            if lib is not None:
                return lib
        # A source seen before (by any process) maps straight to its library without re-translating.
        index = (
            build.cache_dir()
            / "index"
            / f"{_index_key(source, bool(debug), metal_version, cxx, race)}.json"
        )
        lib = None
        try:
            meta = json.loads(index.read_text())
            so = build.cache_dir() / "lib" / meta["so"]
            if so.is_file():
                kernels = [
                    translate.KernelInfo(
                        k["host_name"],
                        k["function"],
                        [translate.ParamInfo(**p) for p in k["params"]],
                        k["sync"],
                    )
                    for k in meta["kernels"]
                ]
                lib = runtime.Library(so, kernels, debug, race)
        except (OSError, ValueError, KeyError, TypeError):
            lib = None
        if lib is None:
            tr = translate.translate(source, cxx, metal_version=metal_version)
            so = build.build_library(tr, bool(debug), cxx, race)
            lib = runtime.Library(so, tr.kernels, debug, race)
            meta = {
                "so": so.name,
                "kernels": [
                    {
                        "host_name": k.host_name,
                        "function": k.function,
                        "sync": k.sync,
                        "params": [
                            {"name": p.name, "attr": p.attr, "buffer": p.buffer} for p in k.params
                        ],
                    }
                    for k in tr.kernels
                ],
            }
            try:
                build.atomic_write(index, json.dumps(meta).encode())
            except OSError:
                pass
        with _memo_lock:
            _memo[mkey] = lib
        return lib
