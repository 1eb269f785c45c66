"""Argument marshalling shared by both executors (the CPU runtime and the CUDA executor):
Python arguments turned into the bytes Metal would see, exactly as ``torch.mps.compile_shader``
does it (`marshal`, `casts_for`), torch's ``dispatchThreads`` geometry (`dispatch_geometry`),
the scalar type codes of the runtime's parameter descriptions, and the launch counters."""

from __future__ import annotations

import ctypes
import operator
import struct
import threading

__all__ = [
    "TG_MEMORY_LIMIT",
    "DEFAULT_MAX_THREADS",
    "SIMD_WIDTH",
    "FLOAT", "HALF", "BF16", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL",
    "CASTS",
    "CODE_NAMES",
    "INT_RANGE",
    "Bound",
    "marshal",
    "casts_for",
    "dtype_code",
    "compatible",
    "dispatch_geometry",
    "count_launch",
    "launch_counts",
    "total_launches",
    "reset_launch_counts",
]

TG_MEMORY_LIMIT = 32768
DEFAULT_MAX_THREADS = 1024
SIMD_WIDTH = 32

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


def count_launch(name):
    """One more launch of kernel ``name`` (either executor)."""
    with _count_lock:
        _counts[name] = _counts.get(name, 0) + 1


# ---- scalar type codes shared with emu_runtime.h (scal<T>::code); 0 is a struct ----
FLOAT, HALF, BF16, I8, U8, I16, U16, I32, U32, I64, U64, BOOL = range(1, 13)
CODE_NAMES = {
    0: "struct",
    FLOAT: "float",
    HALF: "half",
    BF16: "bfloat",
    I8: "char",
    U8: "uchar",
    I16: "short",
    U16: "ushort",
    I32: "int",
    U32: "uint",
    I64: "long",
    U64: "ulong",
    BOOL: "bool",
}
INT_RANGE = {
    I8: (-(2**7), 2**7 - 1),
    U8: (0, 2**8 - 1),
    I16: (-(2**15), 2**15 - 1),
    U16: (0, 2**16 - 1),
    I32: (-(2**31), 2**31 - 1),
    U32: (0, 2**32 - 1),
    I64: (-(2**63), 2**63 - 1),
    U64: (0, 2**64 - 1),
    BOOL: (0, 1),
}
_SAME_SIZE = {
    I8: U8,
    U8: I8,
    I16: U16,
    U16: I16,
    I32: U32,
    U32: I32,
    I64: U64,
    U64: I64,
}
CASTS = {
    "fp16": ("float16", HALF),
    "bf16": ("bfloat16", BF16),
    "int32": ("int32", I32),
    "int16": ("int16", I16),
    "int8": ("int8", I8),
    "uint8": ("uint8", U8),
}


_DTYPE_CODES: dict = {}


def dtype_code(dtype):
    if not _DTYPE_CODES:
        _DTYPE_CODES.update(_dtype_table())
    return _DTYPE_CODES.get(dtype)


def _dtype_table():
    import torch

    table = {
        torch.float32: FLOAT,
        torch.float16: HALF,
        torch.bfloat16: BF16,
        torch.int8: I8,
        torch.uint8: U8,
        torch.int16: I16,
        torch.int32: I32,
        torch.int64: I64,
        torch.bool: BOOL,
        torch.complex64: FLOAT,
        torch.float64: FLOAT,
        torch.complex128: FLOAT,
    }
    for name, code in (("uint16", U16), ("uint32", U32), ("uint64", U64)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    return table


def compatible(pcode, vcode):
    if pcode == 0 or vcode is None or pcode == vcode:
        return True
    if _SAME_SIZE.get(pcode) == vcode:
        return True
    return {pcode, vcode} <= {BOOL, U8, I8}


class Bound:
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
    return Bound(ctypes.addressof(buf), len(data), buf, what, code, **kw)


def _cast_values(values, is_float, cast):
    import torch

    tname, code = CASTS[cast]
    t = torch.tensor(values, dtype=torch.float32 if is_float else torch.int64).to(
        getattr(torch, tname)
    )
    return t.contiguous().view(torch.uint8).numpy().tobytes(), code


def marshal(idx, arg, cast, param=None):
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
            return _blob(data, f"a 0-dim {t.dtype} tensor (bound by value)", dtype_code(t.dtype))
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
        return Bound(
            arg.data_ptr(), max(nbytes, 0), arg, what, dtype_code(arg.dtype), is_buffer=True
        )
    if isinstance(arg, float):
        if cast:
            data, code = _cast_values([arg], True, cast)
            return _blob(data, f"a Python float cast to {cast}", code)
        return _blob(
            struct.pack("<f", arg),
            "a Python float (bound as 4-byte float32)",
            FLOAT,
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
                int_value=None if code in (HALF, BF16) else int(arg),
            )
        return _blob(
            struct.pack("<q", int(arg)),
            "a Python int (bound as 8-byte int64)",
            I64,
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
                FLOAT,
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
            return _blob(struct.pack(f"<{len(vals)}q", *vals), what, I64, is_list=True)
        raise TypeError(f"argument {idx}: Unsupported argument type {type(first).__name__} in list")
    raise TypeError(f"argument {idx}: Unsupported argument type {type(arg).__name__}")


def casts_for(arg_casts, nargs):
    """The cast of each of ``nargs`` arguments from torch's ``arg_casts`` (None, a cast name for
    all, or argument index -> cast name)."""
    if arg_casts is None:
        return [None] * nargs
    if isinstance(arg_casts, str):
        if arg_casts not in CASTS:
            raise ValueError(f"Unsupported cast instruction {arg_casts}")
        return [arg_casts] * nargs
    if isinstance(arg_casts, dict):
        out = [None] * nargs
        for k, v in arg_casts.items():
            if not isinstance(k, int):
                raise TypeError(f"arg_casts keys must be ints, got {type(k).__name__}")
            if v not in CASTS:
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


