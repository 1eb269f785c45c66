"""Loading and launching the project's Metal sources.

Host code is written once against the ``torch.mps.compile_shader`` calling convention; the
executor is chosen by the tensor's device: the Apple GPU for MPS tensors, the CPU emulator for CPU
tensors. torch inlines only its own headers, so our ``#include "..."`` lines are inlined here,
with ``#line`` markers so that diagnostics point at ``metal/<file>:<line>``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\b")

#: Metal spelling of each torch dtype in kernel host names (mirrors the .metal instantiations).
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.complex64: "complex64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.int64: "int64",
    # storage widths of the bit-moving kernels (ops/padding.metal)
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.complex128: "complex128",
    torch.uint16: "uint16",
    torch.uint32: "uint32",
    torch.uint64: "uint64",
}

#: What the linear-algebra kernels (metal/linalg: lu, triangular, qr, svd, eigh, the n <= 4
#: kernels) are instantiated for: Metal has no float64 (the families' Metal dtype policy).
LINALG_DTYPES = (torch.float32, torch.complex64)

#: Lanes of a SIMD-group on Apple GPUs, the emulator and the CUDA executor (``kSimdWidth`` of
#: metal/common/defines.h).
SIMD_WIDTH = 32

#: Largest grid of the grid-stride kernels (copy, elementwise, pad), which loop over the rest:
#: 4 Mi threads fill any Apple GPU many times over, so a larger grid buys no parallelism, and
#: thread positions stay far inside the 32-bit ``uint`` the kernels index the grid with.
MAX_GRID = 1 << 22


def grid_stride_threads(numel: int) -> int:
    """Threads of a grid-stride kernel over ``numel`` elements (at most `MAX_GRID`)."""
    return min(numel, MAX_GRID)


def metal_root() -> Path:
    """The directory holding the ``.metal`` sources: inside the installed wheel
    (``mpslinalg/metal``) or, in a source checkout / editable install, ``<repo>/metal``."""
    for candidate in (_PACKAGE_DIR / "metal", _PACKAGE_DIR.parent / "metal"):
        if (candidate / "common" / "defines.h").is_file():
            return candidate
    raise FileNotFoundError(
        f"mpslinalg: Metal sources not found next to {_PACKAGE_DIR}; the installation is broken"
    )


def kernel_name(op: str, dtype: torch.dtype, **params: int | bool) -> str:
    """Host name of an instantiated kernel: ``<op>_<dtype>[_<param><value>...]``, parameters in
    the order given (the same order as in the ``MPSL_KERNEL_P`` line that instantiates it)."""
    name = f"{op}_{DTYPE_NAMES[dtype]}"
    for key, value in params.items():
        name += f"_{key}{int(value)}"
    return name


def load_source(path: str) -> str:
    """The ASCII text of ``metal/<path>`` with our own ``#include "..."`` headers inlined once
    each (like ``#pragma once``), Metal's ``<...>`` includes left to the compiler."""
    root = metal_root()
    seen: set[Path] = set()
    out: list[str] = []

    def emit(file: Path) -> None:
        rel = file.relative_to(root).as_posix()
        raw = file.read_bytes()
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise SyntaxError(
                f"metal/{rel}:{line}: non-ASCII byte in a Metal source (Metal reads sources as "
                "ASCII)"
            ) from None
        out.append(f'#line 1 "metal/{rel}"')
        for lineno, line in enumerate(text.splitlines(), start=1):
            match = _INCLUDE.match(line)
            if match:
                target = (file.parent / match.group(1)).resolve()
                if not target.is_file():
                    raise FileNotFoundError(
                        f"metal/{rel}:{lineno}: #include \"{match.group(1)}\" not found"
                    )
                if target not in seen:
                    seen.add(target)
                    emit(target)
                out.append(f'#line {lineno + 1} "metal/{rel}"')
            elif _PRAGMA_ONCE.match(line):
                out.append("")
            else:
                out.append(line)

    start = (root / path).resolve()
    seen.add(start)
    emit(start)
    return "\n".join(out) + "\n"


#: Opt-in: the metal backend accepts CUDA tensors and runs the Metal kernels through the CUDA
#: executor (`mpslinalg.emulator.cuda`), to test them under real concurrency on a GPU.
METAL_ON_CUDA_VAR = "MPSLINALG_METAL_ON_CUDA"


def metal_on_cuda() -> bool:
    """Whether ``$MPSLINALG_METAL_ON_CUDA`` is ``1``."""
    return os.environ.get(METAL_ON_CUDA_VAR) == "1"


def _compiler_for(device: torch.device, fn: str) -> tuple[str, Any]:
    if device.type == "mps":
        compile_fn = getattr(torch.mps, "compile_shader", None) or getattr(
            torch.mps, "_compile_shader", None
        )
        if compile_fn is None:
            raise RuntimeError(
                f"mpslinalg.{fn}: this torch ({torch.__version__}) cannot compile Metal shaders; "
                "torch >= 2.6 is required"
            )
        return "mps", compile_fn
    if device.type == "cpu":
        from .. import emulator

        return "emulator", emulator.compile_shader
    if device.type == "cuda" and metal_on_cuda():
        from ..emulator import cuda

        return "cuda", cuda.compile_shader
    raise RuntimeError(
        f"mpslinalg.{fn}: the metal backend runs on MPS tensors (Apple GPU) or CPU tensors "
        f"(the emulator), got a tensor on {device.type!r}; use the torch backend for it"
    )


_libraries: dict[tuple[str, str], Any] = {}
_kernels: dict[tuple[str, str, str, int | None], Any] = {}
#: Host name of each kernel object `kernel` returned, by id (torch's MPS kernels carry no name;
#: the objects are kept in `_kernels` for the process, so an id is never reused).
_host_names: dict[int, str] = {}
_lock = threading.Lock()


def library(path: str, device: torch.device, fn: str = "metal") -> Any:
    """The compiled library of ``metal/<path>`` for the executor serving ``device``; compiled
    once per (source, executor) and process."""
    executor, compile_fn = _compiler_for(device, fn)
    key = (path, executor)
    lib = _libraries.get(key)
    if lib is None:
        with _lock:
            lib = _libraries.get(key)
            if lib is None:
                lib = _libraries[key] = compile_fn(load_source(path))
    return lib


def kernel(path: str, op: str, dtype: torch.dtype, device: torch.device, *,
           fn: str = "metal", **params: int | bool) -> Any:
    """The kernel ``kernel_name(op, dtype, **params)`` from ``metal/<path>``."""
    name = kernel_name(op, dtype, **params)
    executor, _ = _compiler_for(device, fn)
    # A CUDA executor's kernel is bound to the GPU it was looked up on: one per device index.
    index = device.index
    if executor == "cuda" and index is None:
        index = torch.cuda.current_device()
    key = (path, executor, name, index)
    k = _kernels.get(key)
    if k is None:
        lib = library(path, device, fn)
        if executor == "cuda":
            with torch.cuda.device(index):
                k = getattr(lib, name)
        else:
            k = getattr(lib, name)
        _host_names[id(k)] = name
        _kernels[key] = k
    return k


def host_name(kernel: Any) -> str:
    """The host name of a kernel object (from `kernel`, else its own ``name``)."""
    return _host_names.get(id(kernel)) or getattr(kernel, "name", repr(kernel))


def group_width(kernel: Any, wanted: int) -> int:
    """``wanted`` threads a group, cut to the pipeline's ``max_threads_per_threadgroup`` (which
    register use may put below 1024) in whole simdgroups: for kernels whose results do not
    depend on their width."""
    limit = max(SIMD_WIDTH, kernel.max_threads_per_threadgroup // SIMD_WIDTH * SIMD_WIDTH)
    return min(wanted, limit)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


#: Test hook: the lane order forwarded as ``order=`` to the emulator's kernels (e.g.
#: ``"reverse"``), so tests can show results do not depend on it. Never passed on MPS.
LANE_ORDER: str | None = None


@dataclass(frozen=True)
class StreamHooks:
    """How launches and host reads of CPU tensors reach the emulator's streams
    (`mpslinalg.ops.streams` registers them with `set_stream_hooks` once a stream exists).

    ``submit(kernel, args, kwargs)`` runs a launch on the calling thread's current stream
    (queued, or at once on the default stream); ``wait_for_host_read(x)`` returns once the host
    may read ``x``: the work queued so far on the current stream is complete."""

    submit: Callable[[Any, tuple, dict], None]
    wait_for_host_read: Callable[[torch.Tensor], None]


#: None until `set_stream_hooks`: launches run in the calling thread, reads need no wait.
_stream_hooks: StreamHooks | None = None


def set_stream_hooks(*, submit: Callable[[Any, tuple, dict], None],
                     wait_for_host_read: Callable[[torch.Tensor], None]) -> None:
    """Route every later launch and host read of CPU tensors through the emulator's streams
    (see `StreamHooks`)."""
    global _stream_hooks
    _stream_hooks = StreamHooks(submit, wait_for_host_read)


#: Callbacks told of every launch, with the kernel's host name, when it is submitted
#: (`mpslinalg.testing.count_launches` listens), on every executor.
launch_listeners: list[Callable[[str], None]] = []


def launch(kernel: Any, *args: Any, threads: Any, group_size: Any) -> None:
    """Run ``kernel(*args, threads=, group_size=)``: the one way host code starts a kernel.

    The launch is told to `launch_listeners`; on the emulator (CPU tensors) it runs in the
    lane order of `LANE_ORDER`, on the thread's current stream (see `set_stream_hooks`); MPS
    and the CUDA executor queue it on the device's current stream themselves."""
    for listener in launch_listeners:
        listener(host_name(kernel))
    kwargs = {"threads": threads, "group_size": group_size}
    if args[0].device.type == "cpu":
        if LANE_ORDER is not None:
            kwargs["order"] = LANE_ORDER
        if _stream_hooks is not None:
            _stream_hooks.submit(kernel, args, kwargs)
            return
    kernel(*args, **kwargs)


def bind(kernel: Any, *args: Any, after: tuple = ()) -> Any:
    """``go(params, threads=, group_size=)``: `launch` of ``kernel(*args, params, *after)``, for
    a loop of launches on the same tensors that differ only in the packed parameter struct
    ``params`` (a list of int64 words) and the grid. The CUDA executor packs the tensors once
    (its host cost per launch is a large part of the time of the factorizations that launch
    once per column or block); every other device launches as `launch` does, and the launch
    listeners hear of every launch."""
    fast = getattr(kernel, "bind", None)
    bound = (fast(*args, after=after) if fast is not None and args
             and isinstance(args[0], torch.Tensor) and args[0].device.type == "cuda" else None)
    if bound is None:
        def go(params: list[int], *, threads: Any, group_size: Any) -> None:
            launch(kernel, *args, params, *after, threads=threads, group_size=group_size)
        return go
    name = host_name(kernel)

    def go_bound(params: list[int], *, threads: Any, group_size: Any) -> None:
        for listener in launch_listeners:
            listener(name)
        bound(params, threads, group_size)
    return go_bound


def wait_for_host_read(x: torch.Tensor) -> None:
    """Return once the host may read ``x``: on the emulator, the work queued so far on the
    thread's current stream is complete (as a device-to-host copy on a GPU's current stream
    waits for it). Elsewhere torch's own read waits."""
    if _stream_hooks is not None and x.device.type == "cpu":
        _stream_hooks.wait_for_host_read(x)
