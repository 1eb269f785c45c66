"""Library/kernel objects mirroring torch's ``_mps_ShaderLibrary``/``_mps_MetalKernel``, argument
marshalling
exactly as ``torch.mps.compile_shader`` does it, and the ctypes launch."""

from __future__ import annotations

import ctypes
import operator
import os
import random
import re
import shutil
import struct
import subprocess
import threading

from .build import usable_cpus

__all__ = [
    "Library",
    "Kernel",
    "DataRaceError",
    "launch_counts",
    "total_launches",
    "reset_launch_counts",
]

TG_MEMORY_LIMIT = 32768
DEFAULT_MAX_THREADS = 1024
SIMD_WIDTH = 32


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


# ---- launch counters ----
_count_lock = threading.Lock()
_counts: dict = {}


def launch_counts() -> dict:
    """Launches per kernel host name since the last reset."""
    with _count_lock:
        return dict(_counts)


def total_launches() -> int:
    with _count_lock:
        return sum(_counts.values())


def reset_launch_counts() -> None:
    with _count_lock:
        _counts.clear()


def _count(name):
    with _count_lock:
        _counts[name] = _counts.get(name, 0) + 1


# ---- scalar type codes shared with emu_runtime.h (scal<T>::code) ----
_FLOAT, _HALF, _BF16, _I8, _U8, _I16, _U16, _I32, _U32, _I64, _U64, _BOOL = range(1, 13)
_CODE_NAMES = {
    0: "struct",
    _FLOAT: "float",
    _HALF: "half",
    _BF16: "bfloat",
    _I8: "char",
    _U8: "uchar",
    _I16: "short",
    _U16: "ushort",
    _I32: "int",
    _U32: "uint",
    _I64: "long",
    _U64: "ulong",
    _BOOL: "bool",
}
_INT_RANGE = {
    _I8: (-(2**7), 2**7 - 1),
    _U8: (0, 2**8 - 1),
    _I16: (-(2**15), 2**15 - 1),
    _U16: (0, 2**16 - 1),
    _I32: (-(2**31), 2**31 - 1),
    _U32: (0, 2**32 - 1),
    _I64: (-(2**63), 2**63 - 1),
    _U64: (0, 2**64 - 1),
    _BOOL: (0, 1),
}
_SAME_SIZE = {
    _I8: _U8,
    _U8: _I8,
    _I16: _U16,
    _U16: _I16,
    _I32: _U32,
    _U32: _I32,
    _I64: _U64,
    _U64: _I64,
}
_CASTS = {
    "fp16": ("float16", _HALF),
    "bf16": ("bfloat16", _BF16),
    "int32": ("int32", _I32),
    "int16": ("int16", _I16),
    "int8": ("int8", _I8),
    "uint8": ("uint8", _U8),
}


_DTYPE_CODES: dict = {}


def _dtype_code(dtype):
    if not _DTYPE_CODES:
        _DTYPE_CODES.update(_dtype_table())
    return _DTYPE_CODES.get(dtype)


def _dtype_table():
    import torch

    table = {
        torch.float32: _FLOAT,
        torch.float16: _HALF,
        torch.bfloat16: _BF16,
        torch.int8: _I8,
        torch.uint8: _U8,
        torch.int16: _I16,
        torch.int32: _I32,
        torch.int64: _I64,
        torch.bool: _BOOL,
        torch.complex64: _FLOAT,
        torch.float64: _FLOAT,
        torch.complex128: _FLOAT,
    }
    for name, code in (("uint16", _U16), ("uint32", _U32), ("uint64", _U64)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    return table


def _compatible(pcode, vcode):
    if pcode == 0 or vcode is None or pcode == vcode:
        return True
    if _SAME_SIZE.get(pcode) == vcode:
        return True
    return {pcode, vcode} <= {_BOOL, _U8, _I8}


class _Bound:
    """One Python argument turned into the bytes Metal would see."""

    __slots__ = (
        "ptr",
        "size",
        "keep",
        "what",
        "code",
        "is_float_scalar",
        "int_value",
        "is_buffer",
        "is_list",
    )

    def __init__(
        self,
        ptr,
        size,
        keep,
        what,
        code,
        is_float_scalar=False,
        int_value=None,
        is_buffer=False,
        is_list=False,
    ):
        self.ptr, self.size, self.keep, self.what, self.code = ptr, size, keep, what, code
        self.is_float_scalar, self.int_value = is_float_scalar, int_value
        self.is_buffer, self.is_list = is_buffer, is_list  # a tensor's storage / a list of values


def _blob(data: bytes, what, code, **kw):
    buf = ctypes.create_string_buffer(data, len(data))
    return _Bound(ctypes.addressof(buf), len(data), buf, what, code, **kw)


def _cast_values(values, is_float, cast):
    import torch

    tname, code = _CASTS[cast]
    t = torch.tensor(values, dtype=torch.float32 if is_float else torch.int64).to(
        getattr(torch, tname)
    )
    return t.contiguous().view(torch.uint8).numpy().tobytes(), code


def _marshal(idx, arg, cast, param=None):
    """torch's OptionalArgCaster::setValue, as bytes."""
    import torch

    if isinstance(arg, torch.Tensor):
        # A 0-dim CPU tensor stands for a 0-dim MPS tensor when the kernel takes a pointer (or a
        # writable
        # reference): bind its storage so writes are visible. For `constant T&` torch's CPU-scalar
        # rule applies.
        as_buffer = param is not None and (
            param.kind == 1 or (param.kind == 2 and not param.is_const)
        )
        if arg.dim() == 0 and not as_buffer:
            t = arg.detach().cpu()
            if t.dtype == torch.float64:
                t = t.to(torch.float32)
            elif t.dtype == torch.complex128:
                t = t.to(torch.complex64)
            data = t.reshape(1).contiguous().view(torch.uint8).numpy().tobytes()
            return _blob(data, f"a 0-dim {t.dtype} tensor (bound by value)", _dtype_code(t.dtype))
        if arg.device.type != "cpu":
            raise TypeError(
                f"argument {idx}: the Metal emulator runs on the CPU and needs CPU tensors (the "
                f"stand-in for MPS tensors), got a tensor on {arg.device}"
            )
        if arg.is_contiguous():
            nbytes = arg.numel() * arg.element_size()  # the view's extent: reading past it is a bug
        else:
            nbytes = arg.untyped_storage().nbytes() - arg.storage_offset() * arg.element_size()
        what = f"a {arg.dtype} tensor"
        return _Bound(
            arg.data_ptr(), max(nbytes, 0), arg, what, _dtype_code(arg.dtype), is_buffer=True
        )
    if isinstance(arg, float):
        if cast:
            data, code = _cast_values([arg], True, cast)
            return _blob(data, f"a Python float cast to {cast}", code)
        return _blob(
            struct.pack("<f", arg),
            "a Python float (bound as 4-byte float32)",
            _FLOAT,
            is_float_scalar=True,
        )
    if isinstance(arg, int):
        if not -(2**63) <= int(arg) < 2**63:
            raise TypeError(f"argument {idx}: Python int {arg} does not fit in int64")
        if cast:
            data, code = _cast_values([int(arg)], False, cast)
            return _blob(
                data,
                f"a Python int cast to {cast}",
                code,
                int_value=None if code in (_HALF, _BF16) else int(arg),
            )
        return _blob(
            struct.pack("<q", int(arg)),
            "a Python int (bound as 8-byte int64)",
            _I64,
            int_value=int(arg),
        )
    if isinstance(arg, (list, tuple)):
        if len(arg) == 0:
            raise RuntimeError("Empty list/tuple can not be an argument to metal kernel")
        first = arg[0]
        if isinstance(first, torch.Tensor):
            addrs = [t.data_ptr() for t in arg]
            return _blob(
                struct.pack(f"<{len(addrs)}Q", *addrs),
                "a list of tensors (bound as 8-byte addresses)",
                0,
            )
        if isinstance(first, (list, tuple)):
            raise RuntimeError("Unexpected argument types")
        if isinstance(first, float):
            vals = [float(v) for v in arg]
            if cast:
                data, code = _cast_values(vals, True, cast)
                return _blob(data, f"a list of floats cast to {cast}", code, is_list=True)
            return _blob(
                struct.pack(f"<{len(vals)}f", *vals),
                "a list of floats (bound as float32 array)",
                _FLOAT,
                is_list=True,
            )
        if isinstance(first, int):
            for v in arg:
                if isinstance(v, float) or not isinstance(v, int):
                    raise TypeError(
                        f"argument {idx}: a list starting with an int must contain only ints, "
                        f"got {type(v).__name__}"
                    )
            vals = [int(v) for v in arg]
            if cast:
                data, code = _cast_values(vals, False, cast)
                return _blob(data, f"a list of ints cast to {cast}", code, is_list=True)
            what = "a list of ints (bound as int64 array)"
            return _blob(struct.pack(f"<{len(vals)}q", *vals), what, _I64, is_list=True)
        raise TypeError(f"argument {idx}: Unsupported argument type {type(first).__name__} in list")
    raise TypeError(f"argument {idx}: Unsupported argument type {type(arg).__name__}")


def _casts_for(arg_casts, nargs):
    if arg_casts is None:
        return [None] * nargs
    if isinstance(arg_casts, str):
        if arg_casts not in _CASTS:
            raise ValueError(f"Unsupported cast instruction {arg_casts}")
        return [arg_casts] * nargs
    if isinstance(arg_casts, dict):
        out = [None] * nargs
        for k, v in arg_casts.items():
            if not isinstance(k, int):
                raise TypeError(f"arg_casts keys must be ints, got {type(k).__name__}")
            if v not in _CASTS:
                raise ValueError(f"Unsupported cast instruction {v}")
            if 0 <= k < nargs:
                out[k] = v
        return out
    raise TypeError(f"Unexpected caster arg type {type(arg_casts).__name__}")


def _as_int(v):
    """An int or anything with __index__ (numpy/torch integer scalars), as pybind takes; no bool."""
    if isinstance(v, bool):
        raise TypeError("bool")
    return operator.index(v)


def _dims(value, what):
    seq = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        dims = [_as_int(d) for d in seq]
    except TypeError:
        raise TypeError(
            f"{what} must be an int or a list/tuple of 1 to 3 ints, got {value!r}"
        ) from None
    if not 0 < len(dims) < 4:
        raise RuntimeError(f"{what} must have 1 to 3 integer dimensions, got {value!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} must be non-negative, got {value!r}")
    return dims


def dispatch_geometry(name: str, max_threads: int, args, threads, group_size):
    """(grid, group), each padded to three dimensions, as torch's
    MetalKernelFunction::dispatch computes them (dispatchThreads semantics); shared by every
    executor. A zero-sized group is left for the caller to refuse (an empty grid runs nothing)."""
    import torch

    if threads is None:
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None:
            raise RuntimeError("Number of threads is undefined or has wrong dimension")
        grid = [first.numel()]
    else:
        grid = _dims(threads, "threads")
    if group_size is None:
        group = ([min(grid[0], max_threads)] if len(grid) == 1
                 else [max_threads] + [1] * (len(grid) - 1))
    else:
        group = _dims(group_size, "group_size")
        if len(group) != len(grid):
            raise RuntimeError(
                f"kernel '{name}': group_size {group_size!r} has {len(group)} dimensions "
                f"but threads {threads!r} has {len(grid)}; they must match"
            )
    prod = 1
    for g in group:
        prod *= g
    if prod > max_threads:
        raise ValueError(f"Threadgroup size exceeds {max_threads} limit")
    return grid + [1] * (3 - len(grid)), group + [1] * (3 - len(group))


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


class KernelNotFoundError(RuntimeError, AttributeError):
    """torch raises RuntimeError for an unknown kernel name; also an AttributeError so that
    hasattr() and
    introspection tools behave."""


class Kernel:
    """A compute pipeline, called like torch's MetalKernel.

    ``kernel(*args, threads=, group_size=, arg_casts=)``
    """

    def __init__(self, library, index, info):
        self._lib = library
        self._index = index
        self._info = info
        desc = library._cdll.emu_kernel_desc(index).contents
        self._max = min(
            int(desc.max_threads), DEFAULT_MAX_THREADS
        )  # the scheduler holds at most 1024 lanes
        self._tg = int(desc.tg_mem)
        self._params = [desc.params[i] for i in range(desc.nparams)]
        self._by_buf = {p.buf: p for p in self._params}
        self.name = info.host_name

    @property
    def max_threads_per_threadgroup(self) -> int:
        return self._max

    @property
    def thread_execution_width(self) -> int:
        return SIMD_WIDTH

    @property
    def static_thread_group_memory_length(self) -> int:
        return self._tg

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
            if p.code not in (_I8, _U8) and not _compatible(p.code, b.code):
                pt = _CODE_NAMES.get(p.code, "?") + (str(p.lanes) if p.lanes > 1 else "")
                hint = ""
                if b.code == _I64 and b.is_list:
                    hint = f"; pass arg_casts={{{p.buf}: 'int32'}} for an int32 array"
                raise self._err(p, f"points to {pt} but got {b.what}{hint}")
        elif p.kind in (2, 3):  # constant T& / by value
            if b.is_float_scalar and p.code not in (_FLOAT, 0):
                raise self._err(
                    p,
                    f"is {_CODE_NAMES.get(p.code)} but got {b.what}; use arg_casts for half/bfloat "
                    "or pass the right Python type",
                )
            if b.int_value is not None and p.code in (_FLOAT, _HALF, _BF16):
                raise self._err(
                    p,
                    f"is {_CODE_NAMES[p.code]} but got {b.what}, which the GPU would read as "
                    "garbage; pass a Python float",
                )
            if not b.is_float_scalar and b.int_value is None and not _compatible(p.code, b.code):
                raise self._err(p, f"is {_CODE_NAMES.get(p.code)} but got {b.what}")
            if b.int_value is not None and p.code in _INT_RANGE and p.lanes == 1:
                lo, hi = _INT_RANGE[p.code]
                if not lo <= b.int_value <= hi:
                    raise self._err(
                        p, f"value {b.int_value} does not fit in {_CODE_NAMES[p.code]}", ValueError
                    )
        if b.size < p.size and p.kind != 1:
            raise self._err(p, f"needs {p.size} bytes but got {b.what} with {b.size} bytes")
        if p.kind == 1 and b.size < p.size and b.size > 0 and p.code != 0 and not b.is_buffer:
            raise self._err(
                p, f"needs at least one {p.size}-byte element but got {b.what} with {b.size} bytes"
            )

    def __call__(
        self,
        *args,
        threads=None,
        group_size=None,
        arg_casts=None,
        order="forward",
        strict=True,
        seed=None,
        timeout=None,
        cpu_threads=None,
        error_buf_idx=None,
    ):
        import torch

        if error_buf_idx is not None:
            raise NotImplementedError("error_buf_idx is not supported by the emulator")
        casts = _casts_for(arg_casts, len(args))
        bound = []
        for i, a in enumerate(args):
            cast = None if isinstance(a, torch.Tensor) else casts[i]
            bound.append(_marshal(i, a, cast, self._by_buf.get(i)))
        for p in self._params:
            if p.buf >= len(bound):
                raise self._err(
                    p,
                    f"the kernel reads buffer {p.buf} but only {len(bound)} arguments were passed",
                    RuntimeError,
                )
            self._check(p, bound[p.buf])
        grid, group = dispatch_geometry(self.name, self._max, args, threads, group_size)
        if self._tg > TG_MEMORY_LIMIT:
            raise RuntimeError(
                f"kernel '{self.name}': threadgroup memory use {self._tg} bytes exceeds the "
                f"{TG_MEMORY_LIMIT}-byte limit of Apple GPUs"
            )
        orders = {"forward": 0, "reverse": 1, "random": 2}
        if order not in orders:
            raise ValueError(f"order must be one of {sorted(orders)}, got {order!r}")
        _count(self.name)
        if 0 in grid:
            return None
        if 0 in group:
            raise ValueError(
                f"kernel '{self.name}': group_size must be positive, got {group_size!r}"
            )
        n = max(len(bound), 1)
        ptrs = (ctypes.c_void_p * n)(*[b.ptr for b in bound]) if bound else (ctypes.c_void_p * 1)()
        sizes = (
            (ctypes.c_uint64 * n)(*[b.size for b in bound]) if bound else (ctypes.c_uint64 * 1)()
        )
        la = _Launch(
            ptrs,
            sizes,
            len(bound),
            orders[order],
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
        del bound
        if rc == 2:
            raise DataRaceError(_source_lines(self._lib._so, err.value.decode(errors="replace")))
        if rc != 0:
            raise RuntimeError(err.value.decode(errors="replace"))
        return None


class Library:
    """What ``compile_shader`` returns: kernels as attributes, ``dir()`` lists the host names."""

    def __init__(self, so_path, kernels, debug=False, race_check=False):
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
        object.__setattr__(self, "_cdll", cdll)
        object.__setattr__(self, "_so", str(so_path))
        object.__setattr__(self, "_debug", debug)
        object.__setattr__(self, "_race_check", race_check)
        object.__setattr__(self, "_infos", {k.host_name: (i, k) for i, k in enumerate(kernels)})
        object.__setattr__(self, "_kernels", {})
        object.__setattr__(self, "_lock", threading.Lock())
        if cdll.emu_kernel_count() != len(kernels):
            raise RuntimeError(
                f"emulator cache entry {so_path} does not match its metadata; clear_cache()"
            )

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        with self._lock:
            k = self._kernels.get(name)
            if k is None:
                entry = self._infos.get(name)
                if entry is None:
                    avail = ", ".join(sorted(self._infos)) or "(none)"
                    raise KernelNotFoundError(
                        f"Failed to create function state object for: {name} "
                        f"(available kernels: {avail})"
                    )
                k = Kernel(self, entry[0], entry[1])
                self._kernels[name] = k
            return k

    def __setattr__(self, name, value):
        raise AttributeError("emulated Metal libraries are read-only")

    def __dir__(self):
        return sorted(self._infos)

    def __repr__(self):
        return f"<emulated Metal library: {', '.join(sorted(self._infos))}>"
