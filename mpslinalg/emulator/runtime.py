"""The CPU back end of `mpslinalg.emulator.library`: a compiled kernel library loaded with
ctypes, its kernels' parameter descriptions (checked against the arguments beyond what torch
checks), and the launch on the emulator's runtime (``emu_launch``)."""

from __future__ import annotations

import ctypes
import os
import random
import re
import shutil
import subprocess
import threading

from . import library, marshal
from .build import usable_cpus
from .marshal import BF16, CODE_NAMES, FLOAT, HALF, I8, I64, INT_RANGE, U8

__all__ = ["Library", "Kernel", "DataRaceError"]

class _ParamDesc(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("code", ctypes.c_int),
        ("lanes", ctypes.c_int),
        ("size", ctypes.c_uint64),
        ("is_const", ctypes.c_int),
        ("name", ctypes.c_char_p),
    ]


class _KernelDesc(ctypes.Structure):
    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("sync", ctypes.c_int),
        ("nparams", ctypes.c_int),
        ("params", ctypes.POINTER(_ParamDesc)),
        ("max_threads", ctypes.c_uint64),
        ("tg_mem", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
    ]


class _Launch(ctypes.Structure):
    _fields_ = [
        ("bufs", ctypes.POINTER(ctypes.c_void_p)),
        ("sizes", ctypes.POINTER(ctypes.c_uint64)),
        ("nbufs", ctypes.c_int),
        ("order", ctypes.c_int),
        ("strict", ctypes.c_int),
        ("pad_", ctypes.c_int),
        ("grid", ctypes.c_uint64 * 3),
        ("group", ctypes.c_uint64 * 3),
        ("seed", ctypes.c_uint64),
        ("timeout", ctypes.c_double),
    ]


_tls = threading.local()
_active = 0  # launches in progress in this process
_active_lock = threading.Lock()


def _threads():
    """OS threads for large launches of barrier-free kernels ($MPSLINALG_EMULATOR_THREADS, default:
    the CPUs this process may use, at most 8)."""
    env = os.environ.get("MPSLINALG_EMULATOR_THREADS")
    if env:
        return max(1, int(env))
    return min(usable_cpus(), 8)


def _err_buffer():
    buf = getattr(_tls, "err", None)
    if buf is None:
        buf = _tls.err = ctypes.create_string_buffer(4096)
    return buf


def _default_timeout():
    return float(os.environ.get("MPSLINALG_EMULATOR_TIMEOUT", "300"))


class DataRaceError(RuntimeError):
    """Two threads of a launch accessed the same memory without ordering, at least one of them
    writing (race-check builds only). The message names both threads and both source lines."""


_PC_RE = re.compile(r"@@PC:([0-9a-f]+)@@")


def _source_lines(so_path: str, message: str) -> str:
    """Replace the race detector's code addresses by source lines (``metal/<file>:<line>``): the
    outermost inlined frame outside the emulator's own headers, through the library's line
    tables."""
    pcs = sorted(set(_PC_RE.findall(message)))
    addr2line = shutil.which("addr2line")
    where = {}
    if pcs and addr2line:
        shim = set(os.listdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")))
        for pc in pcs:
            proc = subprocess.run(
                [addr2line, "-i", "-e", so_path, "0x" + pc], capture_output=True, text=True
            )
            for frame in proc.stdout.splitlines():
                path = frame.strip().split(" (discriminator")[0]
                path = path.removeprefix(os.getcwd() + os.sep)
                while path.startswith("./"):
                    path = path[2:]
                file = path.rsplit(":", 1)[0]
                if file and not file.startswith(("?", "<")) and os.path.basename(file) not in shim:
                    where[pc] = path
                    break
    return _PC_RE.sub(lambda m: where.get(m.group(1), "an unknown line"), message)


_ORDERS = {"forward": 0, "reverse": 1, "random": 2}


class Kernel(library.Kernel):
    """A compute pipeline of the CPU runtime, called like torch's MetalKernel.

    ``kernel(*args, threads=, group_size=, arg_casts=)``, and the emulator's options: the order
    lanes are scheduled in (``order``: "forward", "reverse", "random" with ``seed``), ``strict``,
    ``timeout`` (seconds) and ``cpu_threads``.
    """

    executor = "emulator"

    def __init__(self, lib, index, info):
        desc = lib._cdll.emu_kernel_desc(index).contents
        # the scheduler holds at most 1024 lanes
        super().__init__(info, min(int(desc.max_threads), marshal.DEFAULT_MAX_THREADS),
                         int(desc.tg_mem))
        self._lib = lib
        self._index = index
        self._params = [desc.params[i] for i in range(desc.nparams)]
        self._by_buf = {p.buf: p for p in self._params}

    @property
    def written_buffers(self) -> frozenset:
        """Buffer indices of the kernel's non-const device pointers (what it may write); not
        part of torch's MetalKernel, used by mpslinalg's stream race checks."""
        return frozenset(p.buf for p in self._params if p.kind == 1 and not p.is_const)

    def __repr__(self):
        return f"<emulated Metal kernel {self.name!r}>"

    def _err(self, p, msg, exc=TypeError):
        return exc(f"kernel '{self.name}': parameter '{p.name.decode()}' (buffer {p.buf}): {msg}")

    def _check(self, p, b):
        """Validation torch does not do: catch bindings that would read garbage on the GPU."""
        if p.kind == 1:  # device/constant pointer; char/uchar pointers view any buffer as bytes
            if p.code not in (I8, U8) and not marshal.compatible(p.code, b.code):
                pt = CODE_NAMES.get(p.code, "?") + (str(p.lanes) if p.lanes > 1 else "")
                hint = ""
                if b.code == I64 and b.is_list:
                    hint = f"; pass arg_casts={{{p.buf}: 'int32'}} for an int32 array"
                raise self._err(p, f"points to {pt} but got {b.what}{hint}")
        elif p.kind in (2, 3):  # constant T& / by value
            if b.is_float_scalar and p.code not in (FLOAT, 0):
                raise self._err(
                    p,
                    f"is {CODE_NAMES.get(p.code)} but got {b.what}; use arg_casts for half/bfloat "
                    "or pass the right Python type",
                )
            if b.int_value is not None and p.code in (FLOAT, HALF, BF16):
                raise self._err(
                    p,
                    f"is {CODE_NAMES[p.code]} but got {b.what}, which the GPU would read as "
                    "garbage; pass a Python float",
                )
            if (not b.is_float_scalar and b.int_value is None
                    and not marshal.compatible(p.code, b.code)):
                raise self._err(p, f"is {CODE_NAMES.get(p.code)} but got {b.what}")
            if b.int_value is not None and p.code in INT_RANGE and p.lanes == 1:
                lo, hi = INT_RANGE[p.code]
                if not lo <= b.int_value <= hi:
                    raise self._err(
                        p, f"value {b.int_value} does not fit in {CODE_NAMES[p.code]}", ValueError
                    )
        if b.size < p.size and p.kind != 1:
            raise self._err(p, f"needs {p.size} bytes but got {b.what} with {b.size} bytes")
        if p.kind == 1 and b.size < p.size and b.size > 0 and p.code != 0 and not b.is_buffer:
            raise self._err(
                p, f"needs at least one {p.size}-byte element but got {b.what} with {b.size} bytes"
            )

    def _options(self, order="forward", strict=True, seed=None, timeout=None, cpu_threads=None):
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {sorted(_ORDERS)}, got {order!r}")
        return order, strict, seed, timeout, cpu_threads

    def _bind(self, args, casts):
        import torch

        bound = []
        for i, a in enumerate(args):
            cast = None if isinstance(a, torch.Tensor) else casts[i]
            bound.append(marshal.marshal(i, a, cast, self._by_buf.get(i)))
        for p in self._params:
            if p.buf >= len(bound):
                raise self._missing_buffer(p.name.decode(), p.buf, len(bound))
            self._check(p, bound[p.buf])
        return bound

    def _launch(self, bound, grid, group, options):
        order, strict, seed, timeout, cpu_threads = options
        n = max(len(bound), 1)
        ptrs = (ctypes.c_void_p * n)(*[b.ptr for b in bound]) if bound else (ctypes.c_void_p * 1)()
        sizes = (
            (ctypes.c_uint64 * n)(*[b.size for b in bound]) if bound else (ctypes.c_uint64 * 1)()
        )
        la = _Launch(
            ptrs,
            sizes,
            len(bound),
            _ORDERS[order],
            int(bool(strict)),
            0,
            (ctypes.c_uint64 * 3)(*grid),
            (ctypes.c_uint64 * 3)(*group),
            seed if seed is not None else random.getrandbits(63),
            float(timeout if timeout is not None else _default_timeout()),
        )
        err = _err_buffer()
        global _active
        with _active_lock:
            _active += 1
            # launches running at once (e.g. from a thread pool) share the CPUs
            threads = max(1, (cpu_threads or _threads()) // _active)
        try:
            rc = self._lib._cdll.emu_launch(self._index, ctypes.byref(la), err, len(err), threads)
        finally:
            with _active_lock:
                _active -= 1
        if rc == 2:
            raise DataRaceError(_source_lines(self._lib._so, err.value.decode(errors="replace")))
        if rc != 0:
            raise RuntimeError(err.value.decode(errors="replace"))


class Library(library.Library):
    """What ``compile_shader`` returns: kernels as attributes, ``dir()`` lists the host names."""

    description = "emulated Metal library"
    read_only = "emulated Metal libraries are read-only"

    def __init__(self, so_path, kernels, debug=False, race_check=False):
        super().__init__(kernels)
        cdll = ctypes.CDLL(str(so_path))
        cdll.emu_kernel_desc.restype = ctypes.POINTER(_KernelDesc)
        cdll.emu_kernel_desc.argtypes = [ctypes.c_int]
        cdll.emu_launch.restype = ctypes.c_int
        cdll.emu_launch.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(_Launch),
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_int,
        ]
        cdll.emu_kernel_count.restype = ctypes.c_int
        self._set(_cdll=cdll, _so=str(so_path), _debug=debug, _race_check=race_check)
        if cdll.emu_kernel_count() != len(kernels):
            raise RuntimeError(
                f"emulator cache entry {so_path} does not match its metadata; clear_cache()"
            )

    def _load(self, index, info, key):
        return Kernel(self, index, info)
