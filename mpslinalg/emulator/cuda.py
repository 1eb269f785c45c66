"""A second executor for the same Metal sources: translated to CUDA C++, compiled with NVRTC and
launched on CUDA tensors, behind ``torch.mps.compile_shader``'s calling convention.

``compile_shader(source)`` returns a library like `mpslinalg.emulator.compile_shader`'s:
kernels by host name, ``dir()``, the kernel properties, and ``kernel(*args, threads=,
group_size=, arg_casts=)`` with torch's argument marshalling (Python int -> int64, float ->
float32, lists -> arrays, tensors bound at their storage offset) and ``dispatchThreads``
geometry. CUDA tensors stand in for MPS tensors; launches go on torch's current stream.

The front end is the emulator's (`mpslinalg.emulator.translate`: the C preprocessor, the
structure and the restrictions passes), so both executors accept and reject the same sources;
the translator's CUDA lowering and emission give the source and one ``__global__`` wrapper per
kernel host name (Metal's vector type names, single-precision literals). This module adds NVRTC
(``libnvrtc`` through ctypes, from the ``nvidia-cuda-nvrtc`` wheel or the system), the CUDA
driver API (``libcuda`` through ctypes) and the CUDA back end of `mpslinalg.emulator.library`'s
kernels. NVRTC needs no GPU, so `compile_ptx` works on any Linux machine.

Mapping: threadgroup -> block (one 1-D block per group, threads numbered like Metal's so warps
are simdgroups), simdgroup -> warp, threadgroup memory -> ``__shared__``, threadgroup_barrier
-> ``__syncthreads``, SIMD-group functions -> warp shuffles/votes over the active mask, 8x8
simdgroup_matrix -> two elements per lane in Apple's layout, multiplied through a per-warp
scratch in shared memory and per-lane FMAs, atomics -> CUDA atomics, half/bfloat -> 16-bit
structs rounded with PTX ``cvt.rn``, precise math without contraction (``-fmad=false``); a kernel
that spilled at Metal's 1024-thread bound is compiled again for the smaller groups it is launched
with (`_GROUP_BOUNDS`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import pathlib
import re
import struct
import threading

from . import build, library, marshal, translate
from .translate.emission import entry_name as _wrapper_name

__all__ = [
    "compile_shader",
    "compile_ptx",
    "translate_to_cuda",
    "nvrtc_version",
    "is_available",
    "profile",
    "Profile",
    "CudaUnsupportedError",
    "NvrtcNotFoundError",
]

PRELUDE = build.INCLUDE_DIR / "cuda_prelude.cuh"
# The PTX target of compile_ptx when no GPU says otherwise (Hopper; any sm_70+ has the warp
# intrinsics and __grid_constant__ the wrappers use).
DEFAULT_PTX_ARCH = "compute_90"
_BLOB_BYTES = 2048  # emu::kBlobBytes in cuda_prelude.cuh
_MAX_BUFFERS = 31
# Dynamic shared memory per warp for the simdgroup_matrix products (detail::kMmaScratchBytes in
# cuda_prelude.cuh), given to the kernels that reach one; 0 makes them use warp shuffles (the same
# bits, slower: tests compare the two).
_MATRIX_SCRATCH_PER_WARP = 512
_MAX_WARPS = 32
# Launch bounds a kernel is compiled again for when it is launched with groups of at most that
# many threads (below its own limit) and its first compilation was short of registers (it used
# local memory; see Kernel.__init__): compiled for Metal's 1024 threads, ptxas holds
# a kernel to 64 registers per thread, and LU's panel and complex GEMM update spilled there even
# when launched with 64-512 threads. 128: ptxas gave the complex update 116 registers without
# spills there, against 128 with spills for a bound of 256 (sm_90). A kernel that fitted in 64
# registers without local memory keeps them: more would only lower its occupancy (LU's real
# update ran 9-20% slower compiled for 128 threads on an H200). Compiled on first use (the one
# kernel alone), cached on disk like the library. () compiles every kernel once.
_GROUP_BOUNDS = (128, 512)


CudaUnsupportedError = translate.CudaUnsupportedError


class NvrtcNotFoundError(RuntimeError):
    pass


class CudaTranslation:
    def __init__(self, source: str, kernels: list):
        self.source = source  # CUDA C++ without the prelude (that is included by name)
        self.kernels = kernels  # KernelInfo, in the order of the wrappers emu_k0, emu_k1, ...


def translate_to_cuda(source: str, *, metal_version: int = 320) -> CudaTranslation:
    """Metal source -> CUDA C++ (kernel i's wrapper is ``extern "C" emu_k<i>_<host name>``)."""
    if not isinstance(source, str):
        raise TypeError(f"compile_shader expects str source, got {type(source).__name__}")
    cxx = build.require_compiler()  # its preprocessor is the emulator's front end
    return CudaTranslation(*translate.translate_cuda(source, cxx, metal_version=metal_version))


# ------------------------------------------------------------------------------------------------
# NVRTC


def _nvrtc_candidates():
    env = os.environ.get("MPSLINALG_NVRTC")
    if env:
        yield env
    try:
        import nvidia  # the nvidia-cuda-nvrtc wheel's namespace package
    except ImportError:
        nvidia = None
    if nvidia is not None:
        for base in map(pathlib.Path, list(getattr(nvidia, "__path__", []))):
            for sub in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib"):
                d = base / sub
                if d.is_dir():
                    libs = d.glob("libnvrtc.so.*")
                    yield from sorted(str(p) for p in libs if "builtins" not in p.name)
    found = ctypes.util.find_library("nvrtc")
    if found:
        yield found
    yield from ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


_nvrtc = None
_nvrtc_lock = threading.Lock()


def _load_nvrtc():
    global _nvrtc
    with _nvrtc_lock:
        if _nvrtc is not None:
            return _nvrtc
        tried = []
        for cand in _nvrtc_candidates():
            # libnvrtc dlopens libnvrtc-builtins by name at compile time; a wheel's copy beside
            # it is not on the loader's path, so it is loaded first (global) from there.
            for b in sorted(pathlib.Path(cand).parent.glob("libnvrtc-builtins.so.*")):
                if "alt" not in b.name and os.path.isabs(cand):
                    try:
                        ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
                    except OSError:
                        pass
            try:
                lib = ctypes.CDLL(cand)
            except OSError:
                tried.append(cand)
                continue
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            _nvrtc = lib
            return lib
        raise NvrtcNotFoundError(
            "the CUDA executor needs NVRTC: pip install nvidia-cuda-nvrtc (or set "
            f"$MPSLINALG_NVRTC to libnvrtc.so); tried {', '.join(tried) or 'nothing'}"
        )


def nvrtc_version() -> tuple:
    lib = _load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return (major.value, minor.value)


def _nvrtc_options(arch: str) -> list:
    return [
        f"--gpu-architecture={arch}",
        "--std=c++17",
        "--device-as-default-execution-space",  # every Metal function is a device function
        "--fmad=false",  # no contraction: the emulator compiles with -ffp-contract=off
        "--prec-div=true",
        "--prec-sqrt=true",
        "--ftz=false",
        f"--include-path={build.INCLUDE_DIR}",
        "--pre-include=cuda_prelude.cuh",
        "--diag-suppress=177,550,2361",  # unused variables/functions of generic headers
        # extra options for a diagnosis, e.g. "-lineinfo" so that compute-sanitizer names the
        # line of the translated source; part of the cache key like the rest
        *os.environ.get("MPSLINALG_NVRTC_OPTIONS", "").split(),
    ]


_NVRTC_ERR_RE = re.compile(r"^(.*?)\((\d+)\): (error|catastrophic error): (.*)$", re.M)


def _compile(cuda_src: str, arch: str, defines: tuple = ()) -> bytes:
    """PTX (arch compute_XY) or a cubin (sm_XY) of ``cuda_src`` with the macros ``defines``
    (``NAME=value`` strings); SyntaxError on failure."""
    lib = _load_nvrtc()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(
        ctypes.byref(prog), cuda_src.encode(), b"program_source.cu", 0, None, None
    )
    if rc != 0:
        raise RuntimeError(f"nvrtcCreateProgram failed: {lib.nvrtcGetErrorString(rc).decode()}")
    try:
        opts = _nvrtc_options(arch) + [f"-D{d}" for d in defines]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if rc != 0:
            text = log.value.decode(errors="replace")
            errors = [
                f"{m.group(1)}:{m.group(2)}: error: {m.group(4)}"
                for m in _NVRTC_ERR_RE.finditer(text)
            ]
            hint = (
                "\n(a name the Metal standard library has but the CUDA executor's prelude "
                "lacks is reported as undefined: that construct is not mapped yet)"
                if "is undefined" in text
                else ""
            )
            raise translate.TranslateError(
                "NVRTC could not compile the translated Metal source:\n"
                + ("\n".join(errors[:20]) if errors else text.strip())
                + hint
            )
        cubin = arch.startswith("sm_")
        get_size = lib.nvrtcGetCUBINSize if cubin else lib.nvrtcGetPTXSize
        get = lib.nvrtcGetCUBIN if cubin else lib.nvrtcGetPTX
        n = ctypes.c_size_t()
        get_size(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        get(prog, buf)
        return buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _cache_key(cuda_src: str, arch: str, defines: tuple = ()) -> str:
    blob = json.dumps(
        [cuda_src, arch, _nvrtc_options(arch), list(defines), PRELUDE.read_text(),
         list(nvrtc_version())]
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _compiled(tr: CudaTranslation, arch: str, defines: tuple = ()) -> bytes:
    """The compiled image, from the on-disk cache when this translation was built before."""
    path = build.cache_dir() / "cuda" / f"{_cache_key(tr.source, arch, defines)}.{arch}"
    try:
        return path.read_bytes()
    except OSError:
        pass
    image = _compile(tr.source, arch, defines)
    try:
        build.atomic_write(path, image)
    except OSError:
        pass
    return image


def compile_ptx(source: str, *, arch: str = DEFAULT_PTX_ARCH, metal_version: int = 320) -> str:
    """Translate and compile ``source`` to PTX with NVRTC; needs no GPU."""
    tr = translate_to_cuda(source, metal_version=metal_version)
    return _compiled(tr, arch).rstrip(b"\0").decode()


# ------------------------------------------------------------------------------------------------
# CUDA driver


class _Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError(
                f"the CUDA executor needs the CUDA driver (libcuda.so.1): {exc}"
            ) from None
        # cuLaunchKernel is called without argtypes (their conversions cost more than the rest
        # of a launch): its pointers are passed as c_void_p objects, its unsigned dimensions as
        # Python ints below 2**31, which ctypes passes as C ints of the same bits.
        self.launch = self.lib.cuLaunchKernel
        self.check(self.lib.cuInit(0), "cuInit")
        self.ctx = {}

    def check(self, rc, what):
        if rc != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(s))
            raise RuntimeError(f"{what} failed: CUDA error {rc} ({(s.value or b'?').decode()})")

    def context(self, index: int):
        """torch's (primary) context of device `index`, made current on this thread."""
        ctx = self.ctx.get(index)
        if ctx is None:
            dev = ctypes.c_int()
            self.check(self.lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
            ctx = ctypes.c_void_p()
            rc = self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
            self.check(rc, "cuDevicePrimaryCtxRetain")
            self.ctx[index] = ctx
        cur = ctypes.c_void_p()
        self.lib.cuCtxGetCurrent(ctypes.byref(cur))
        if cur.value != ctx.value:
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx


_driver = None
_driver_lock = threading.Lock()


def _get_driver() -> _Driver:
    global _driver
    with _driver_lock:
        if _driver is None:
            _driver = _Driver()
        return _driver


def is_available() -> bool:
    """Whether kernels can run: torch sees a CUDA device and NVRTC loads."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        _load_nvrtc()
        return True
    except (ImportError, RuntimeError, OSError):
        return False


# ------------------------------------------------------------------------------------------------
# library and kernels


class _Args(ctypes.Structure):
    _fields_ = [
        ("addr", ctypes.c_uint64 * _MAX_BUFFERS),
        ("in_blob", ctypes.c_uint32),
        ("grid", ctypes.c_uint32 * 3),
        ("group", ctypes.c_uint32 * 3),
        ("ngroups", ctypes.c_uint32 * 3),
        ("blob", ctypes.c_char * _BLOB_BYTES),
    ]


# emu::Args (cuda_prelude.cuh static_asserts the same numbers).
_ARGS_SIZE = ctypes.sizeof(_Args)
_IN_BLOB_OFFSET = _Args.in_blob.offset
_BLOB_OFFSET = _Args.blob.offset
assert (_ARGS_SIZE, _IN_BLOB_OFFSET, _BLOB_OFFSET) == (2336, 248, 288)
_pack_into = struct.pack_into
_INT64S: dict = {}


def _int64s(count: int) -> struct.Struct:
    """The packer of ``count`` little-endian int64s (a list of ints bound by value)."""
    packer = _INT64S.get(count)
    if packer is None:
        packer = _INT64S[count] = struct.Struct(f"<{count}q")
    return packer
_GEOMETRY = struct.Struct("<I9I")  # in_blob, then grid, group, ngroups
_CU_ERROR_INVALID_CONTEXT = 201
_CU_ERROR_INVALID_HANDLE = 400


class _Block(threading.local):
    """The calling thread's parameter block and the one-entry ``kernelParams`` array pointing
    at it: cuLaunchKernel copies the block before it returns, so one per thread serves every
    launch (ctypes releases the GIL during the call, hence not one per process)."""

    def __init__(self):
        self.buf = ctypes.create_string_buffer(_ARGS_SIZE)
        self.params = (ctypes.c_void_p * 1)(ctypes.addressof(self.buf))


_block = _Block()
_streams: dict = {}  # raw CUstream -> its c_void_p, made once


def _stream_arg(raw: int):
    s = _streams.get(raw)
    if s is None:
        if len(_streams) > 1024:
            _streams.clear()
        s = _streams[raw] = ctypes.c_void_p(raw)
    return s


def _raw_stream(index: int) -> int:
    """torch's current stream on device `index` (the raw CUstream); replaced by torch's own
    function at the first call."""
    global _raw_stream
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = raw or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _raw_stream(index)


def _current_stream(index: int) -> int:
    return _raw_stream(index)


# ---- the profiling mode: device time per kernel from CUDA events around each launch ----
_profiling = None  # the active Profile, or None


class Profile:
    """Device time of every launch of the CUDA executor while it is active (`profile`): a pair
    of CUDA events recorded on the launch's stream around each launch, read at the end. No
    CUPTI is needed; the events add a little host time per launch, so time wall clocks apart."""

    def __init__(self):
        self._events = []  # (host name, start event, end event)
        self._times = None

    def _record(self, name, launch):
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        self._events.append((name, start, end))

    def _finish(self):
        import torch

        torch.cuda.synchronize()
        times = {}
        for name, start, end in self._events:
            n, us = times.get(name, (0, 0.0))
            times[name] = (n + 1, us + start.elapsed_time(end) * 1e3)
        self._times = times
        self._events = []

    def kernels(self) -> dict:
        """Host name -> (launches, total device microseconds)."""
        if self._times is None:
            raise RuntimeError("the profile is read once its `with` block has ended")
        return dict(self._times)

    def total_us(self) -> float:
        return sum(us for _, us in self.kernels().values())


class profile:  # noqa: N801 - a context manager named like a function, as torch.profiler's
    """``with cuda.profile() as p: ...`` times every CUDA-executor launch of the block on the
    device; ``p.kernels()`` gives host name -> (launches, device microseconds). Not nested."""

    def __enter__(self) -> Profile:
        global _profiling
        if _profiling is not None:
            raise RuntimeError("cuda.profile() blocks do not nest")
        self._p = _profiling = Profile()
        return self._p

    def __exit__(self, *exc):
        global _profiling
        _profiling = None
        self._p._finish()
        return False


_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# geometries kept per kernel: a host loop over a few sizes fits; a size per call starts over
_GEOMETRY_CACHE_SIZE = 256
TG_LIMIT = marshal.TG_MEMORY_LIMIT


def _allow_matrix_scratch(func):
    """Let ``func`` take the simdgroup_matrix scratch of 32 warps beside Metal's 32 KiB of
    threadgroup memory (past CUDA's default 48 KiB per block)."""
    drv = _get_driver()
    drv.check(drv.lib.cuFuncSetAttribute(func, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         _MAX_WARPS * _MATRIX_SCRATCH_PER_WARP),
              "cuFuncSetAttribute")


class Kernel(library.Kernel):
    """One kernel host name on one device, called like torch's MetalKernel."""

    executor = "CUDA executor"

    def __init__(self, lib, index, info, func, device_index):
        import torch

        drv = _get_driver()
        v = ctypes.c_int()
        drv.check(
            drv.lib.cuFuncGetAttribute(
                ctypes.byref(v), _CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func
            ),
            "cuFuncGetAttribute",
        )
        # __launch_bounds__ holds every kernel to Metal's limit (1024 or its own attribute)
        max_threads = min(v.value, marshal.DEFAULT_MAX_THREADS)
        drv.check(
            drv.lib.cuFuncGetAttribute(ctypes.byref(v), _CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func),
            "cuFuncGetAttribute",
        )
        super().__init__(info, max_threads, v.value)
        local = ctypes.c_int()
        drv.check(drv.lib.cuFuncGetAttribute(ctypes.byref(local),
                                              _CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, func),
                  "cuFuncGetAttribute")
        # whether ptxas ran short of registers at the kernel's own launch bound: local memory
        # (spills, or arrays indexed at run time). Not only where every register of the bound
        # is used: ptxas can stop short of it and spill (sm_90, 1024 threads: lu_panel_float32
        # with 32 of its 64 registers and 792 bytes of stack, twice the device time of its
        # compilation for 256 threads; trsm_diag_complex64 with 32 and 256 bytes); the kernels
        # with local memory that use all 64 took this path before.
        self._short_of_registers = local.value > 0
        self._lib, self._index = lib, index
        self._func, self._device = func, device_index
        self._matrix = info.matrix
        if info.matrix:
            _allow_matrix_scratch(func)
        # launch bound -> the kernel compiled for it (None: the library's own compilation)
        self._bounded = {None: func}
        self._nbufs = max((p.buffer + 1 for p in info.params if p.attr == "buffer"), default=0)
        # the buffers the kernel reads as global memory (`device` parameters): bytes bound to
        # one take the generic compilation (`_function`)
        self._device_buffers = sum(1 << p.buffer for p in info.params
                                   if p.attr == "buffer" and p.device)
        self._tensor = torch.Tensor
        self._cu_launch = drv.launch
        _current_stream(device_index)  # resolves _raw_stream
        # (threads, group_size) -> (blocks, threads per block, grid/group/ngroups as 9 uint32,
        # function, dynamic shared memory bytes): the launches seen, checked once.
        self._geometry = {}

    def __repr__(self):
        return f"<Metal kernel {self.name!r} on cuda:{self._device} (CUDA executor)>"

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None, error_buf_idx=None,
                 **options):
        """The launch: the common case (CUDA tensors of this device, Python ints and floats
        without casts, a geometry launched before) packs the parameter block in place and calls
        cuLaunchKernel; anything else takes the shared path of `library.Kernel`, which checks and
        raises as torch does."""
        if arg_casts is not None or error_buf_idx is not None or options or threads is None:
            return super().__call__(*args, threads=threads, group_size=group_size,
                                    arg_casts=arg_casts, error_buf_idx=error_buf_idx, **options)
        try:
            geometry = self._geometry[(
                tuple(threads) if type(threads) is list else threads,
                tuple(group_size) if type(group_size) is list else group_size,
            )]
        except (KeyError, TypeError):
            return super().__call__(*args, threads=threads, group_size=group_size)
        if len(args) > _MAX_BUFFERS or self._nbufs > len(args) or self._tg > TG_LIMIT:
            return super().__call__(*args, threads=threads, group_size=group_size)
        buf = _block.buf
        tensor, device = self._tensor, self._device
        in_blob = used = 0
        for i, a in enumerate(args):
            kind = type(a)
            if kind is tensor and a.is_cuda and a.get_device() == device:
                _pack_into("<Q", buf, 8 * i, a.data_ptr())  # the view's first element
                continue
            off = (used + 15) & ~15
            if kind is int and -(2**63) <= a < 2**63 and off + 8 <= _BLOB_BYTES:
                _pack_into("<q", buf, _BLOB_OFFSET + off, a)  # torch: int -> int64
                used = off + 8
            elif kind is float and off + 4 <= _BLOB_BYTES:
                _pack_into("<f", buf, _BLOB_OFFSET + off, a)  # torch: float -> float32
                used = off + 4
            elif (kind is list and a and off + 8 * len(a) <= _BLOB_BYTES
                  and all(type(v) is int for v in a)):
                # a packed parameter struct (metal_params): ints -> an int64 array, as the
                # shared marshalling binds it; one out of int64's range takes the shared path
                try:
                    _int64s(len(a)).pack_into(buf, _BLOB_OFFSET + off, *a)
                except struct.error:
                    return super().__call__(*args, threads=threads, group_size=group_size)
                used = off + 8 * len(a)
            else:  # tensors elsewhere, other lists, bools, ...: the shared path checks them
                return super().__call__(*args, threads=threads, group_size=group_size)
            _pack_into("<Q", buf, 8 * i, off)
            in_blob |= 1 << i
        if in_blob & self._device_buffers:  # bytes where a tensor is expected: generic pointers
            return super().__call__(*args, threads=threads, group_size=group_size)
        marshal.count_launch(self.name)
        if geometry is None:  # an empty grid runs nothing
            return None
        nblocks, nthreads, dims, func, smem = geometry
        _GEOMETRY.pack_into(buf, _IN_BLOB_OFFSET, in_blob, *dims)
        if _profiling is not None:
            self._go(func, nblocks, nthreads, smem)
            return None
        # _go's common case inline: a Python call is a tenth of a launch here
        raw = _raw_stream(device)
        stream = _streams.get(raw)
        if stream is None:
            stream = _stream_arg(raw)
        rc = self._cu_launch(func, nblocks, 1, 1, nthreads, 1, 1, smem, stream, _block.params,
                             None)
        if rc:
            self._go(func, nblocks, nthreads, smem)  # the context or the error, handled there
        return None

    def bind(self, *args, after=()):
        """A launcher of this kernel on the CUDA tensors ``args``, one packed parameter struct,
        then the CUDA tensors ``after``, for a sequence of launches that differ only in that
        struct and the grid (a loop over steps): ``go(words, threads, group_size)``. The
        tensors' pointers are packed once, so a launch costs the struct, the geometry and
        cuLaunchKernel. None where the fast path of `__call__` would not serve such a launch."""
        index = len(args)
        count = index + 1 + len(after)
        if (count > _MAX_BUFFERS or self._nbufs > count or self._tg > TG_LIMIT
                or (1 << index) & self._device_buffers):
            return None
        prefix = ctypes.create_string_buffer(8 * count)
        for i, a in enumerate((*args, None, *after)):
            if i == index:
                _pack_into("<Q", prefix, 8 * i, 0)  # the struct at the blob's start
                continue
            if type(a) is not self._tensor or not a.is_cuda or a.get_device() != self._device:
                return None
            _pack_into("<Q", prefix, 8 * i, a.data_ptr())
        size, kernel, in_blob = 8 * count, self, 1 << index

        def go(words, threads, group_size):
            try:
                geometry = kernel._geometry[(tuple(threads), tuple(group_size))]
                packer = _int64s(len(words))
                if 8 * len(words) > _BLOB_BYTES:
                    raise KeyError
            except KeyError:  # a geometry not seen yet, or a struct past the blob: checked
                return kernel(*args, words, *after, threads=threads, group_size=group_size)
            buf = _block.buf
            ctypes.memmove(buf, prefix, size)
            try:
                packer.pack_into(buf, _BLOB_OFFSET, *words)
            except struct.error:  # out of int64's range: the shared path raises as torch does
                return kernel(*args, words, *after, threads=threads, group_size=group_size)
            marshal.count_launch(kernel.name)
            if geometry is None:
                return None
            nblocks, nthreads, dims, func, smem = geometry
            _GEOMETRY.pack_into(buf, _IN_BLOB_OFFSET, in_blob, *dims)
            if _profiling is not None:
                kernel._go(func, nblocks, nthreads, smem)
                return None
            raw = _raw_stream(kernel._device)
            stream = _streams.get(raw)
            if stream is None:
                stream = _stream_arg(raw)
            if kernel._cu_launch(func, nblocks, 1, 1, nthreads, 1, 1, smem, stream,
                                 _block.params, None):
                kernel._go(func, nblocks, nthreads, smem)
            return None

        return go

    def _go(self, func, nblocks, nthreads, smem):
        """cuLaunchKernel on the thread's parameter block, on torch's current stream."""
        stream = _stream_arg(_current_stream(self._device))
        launch = _get_driver().launch
        if _profiling is not None:
            rc = []
            _profiling._record(self.name, lambda: rc.append(launch(
                func, nblocks, 1, 1, nthreads, 1, 1, smem, stream, _block.params, None)))
            rc = rc[0]
        else:
            rc = launch(func, nblocks, 1, 1, nthreads, 1, 1, smem, stream, _block.params, None)
        if rc in (_CU_ERROR_INVALID_CONTEXT, _CU_ERROR_INVALID_HANDLE):
            # another context (or none) is current on this thread: make the device's primary
            # context current and launch again (a refused launch enqueued nothing)
            _get_driver().context(self._device)
            rc = launch(func, nblocks, 1, 1, nthreads, 1, 1, smem, stream, _block.params, None)
        if rc:
            _get_driver().check(rc, f"launch of kernel '{self.name}'")

    def _function(self, nthreads, generic=False):
        """(function, dynamic shared memory bytes) for groups of ``nthreads`` threads: the
        kernel compiled for the smallest bound of `_GROUP_BOUNDS` that holds them where its own
        compilation was short of registers (``generic``: compiled with EMU_GENERIC_DEVICE, for
        a launch binding bytes to a ``device`` parameter), and the simdgroup_matrix scratch of
        its warps."""
        bound = None
        if self._short_of_registers:
            bound = next((b for b in _GROUP_BOUNDS if nthreads <= b < self._max), None)
        key = (bound, True) if generic else bound
        func = self._bounded.get(key)
        if func is None:
            func = self._bounded[key] = self._lib._bounded_function(self, bound, generic)
            if self._matrix:
                _allow_matrix_scratch(func)
        smem = -(-nthreads // 32) * _MATRIX_SCRATCH_PER_WARP if self._matrix else 0
        return func, smem

    def _bind(self, args, casts):
        """The parameter block ``emu::Args``, filled in place in the thread's block for every
        argument kind torch accepts (the shared path)."""
        import torch

        if len(args) > _MAX_BUFFERS:
            raise RuntimeError(f"kernel '{self.name}': at most {_MAX_BUFFERS} arguments")
        buf = _block.buf
        in_blob = 0
        used = 0
        for i, a in enumerate(args):
            kind = type(a)
            if kind is torch.Tensor and (a.dim() > 0 or a.device.type == "cuda"):
                if a.device.type != "cuda":
                    raise TypeError(
                        f"argument {i}: Passed {a.device.type.upper()} tensor to a CUDA-executed "
                        "Metal kernel; kernels of the CUDA executor take CUDA tensors"
                    )
                if a.device.index != self._device:
                    raise RuntimeError(
                        f"argument {i}: tensor on {a.device}, kernel '{self.name}' was loaded "
                        f"for cuda:{self._device}"
                    )
                _pack_into("<Q", buf, 8 * i, a.data_ptr())  # the view's first element
                continue
            off = (used + 15) & ~15
            if kind is int and casts[i] is None and -(2**63) <= a < 2**63:
                data = struct.pack("<q", a)  # torch: int -> int64
            elif kind is float and casts[i] is None:
                data = struct.pack("<f", a)  # torch: float -> float32
            else:
                # lists, casts, bools, 0-dim CPU tensors: the shared marshalling
                b = marshal.marshal(i, a, None if isinstance(a, torch.Tensor) else casts[i])
                data = ctypes.string_at(b.ptr, b.size)
            if off + len(data) > _BLOB_BYTES:
                raise RuntimeError(
                    f"kernel '{self.name}': the scalars and lists passed by value exceed the "
                    f"CUDA executor's {_BLOB_BYTES} bytes; pass large arrays as tensors"
                )
            ctypes.memmove(ctypes.addressof(buf) + _BLOB_OFFSET + off, data, len(data))
            _pack_into("<Q", buf, 8 * i, off)
            in_blob |= 1 << i
            used = off + len(data)
        if self._nbufs > len(args):
            p = next(p for p in self._info.params if p.attr == "buffer" and p.buffer >= len(args))
            raise self._missing_buffer(p.name, p.buffer, len(args))
        return in_blob

    def _launch(self, in_blob, grid, group, options):
        ngroups = [-(-grid[i] // group[i]) for i in range(3)]
        nblocks = ngroups[0] * ngroups[1] * ngroups[2]
        if max(grid) >= 2**32 or nblocks >= 2**31:
            raise ValueError(
                f"kernel '{self.name}': threads {grid[:3]} in {nblocks} threadgroups exceed the "
                "CUDA executor's limits (2^32 - 1 threads per dimension, 2^31 - 1 groups)"
            )
        dims = (*grid, *group, *ngroups)
        nthreads = group[0] * group[1] * group[2]
        func, smem = self._function(nthreads, bool(in_blob & self._device_buffers))
        _GEOMETRY.pack_into(_block.buf, _IN_BLOB_OFFSET, in_blob, *dims)
        self._go(func, nblocks, nthreads, smem)

    def _geometry_checked(self, threads, group_size, grid, group):
        """Keep a checked geometry for the fast path of `__call__`."""
        if threads is None:
            return
        if len(self._geometry) >= _GEOMETRY_CACHE_SIZE:  # sizes that vary call to call: start over
            self._geometry.clear()
        try:
            key = (tuple(threads) if type(threads) is list else threads,
                   tuple(group_size) if type(group_size) is list else group_size)
            hash(key)
        except TypeError:
            return
        if 0 in grid:
            self._geometry[key] = None
            return
        ngroups = [-(-grid[i] // group[i]) for i in range(3)]
        nblocks = ngroups[0] * ngroups[1] * ngroups[2]
        if max(grid) >= 2**32 or nblocks >= 2**31:
            return
        nthreads = group[0] * group[1] * group[2]
        self._geometry[key] = (nblocks, nthreads, (*grid, *group, *ngroups),
                               *self._function(nthreads))


class Library(library.Library):
    """What ``compile_shader`` returns: kernels as attributes, ``dir()`` lists the host names.

    Kernels load on the device of the current CUDA device at lookup; a kernel is bound to the
    device it was loaded for.
    """

    description = "Metal library (CUDA executor)"

    def __init__(self, translation: CudaTranslation, metal_version: int):
        super().__init__(translation.kernels)
        # _modules: (device index, defines) -> CUmodule; _device_of: torch's current-device
        # query
        self._set(_tr=translation, _modules={}, _device_of=None, _module_lock=threading.Lock())

    def _module(self, index: int, defines: tuple = ()):
        """The library compiled with ``defines`` (none: every kernel at its own limit), loaded
        on device ``index``."""
        import torch

        with self._module_lock:
            mod = self._modules.get((index, defines))
            if mod is None:
                major, minor = torch.cuda.get_device_capability(index)
                image = _compiled(self._tr, f"sm_{major}{minor}", defines)
                drv = _get_driver()
                torch.cuda.init()
                drv.context(index)
                mod = ctypes.c_void_p()
                rc = drv.lib.cuModuleLoadData(ctypes.byref(mod), image)
                drv.check(rc, "cuModuleLoadData")
                self._modules[(index, defines)] = mod
            return mod

    def _function_of(self, mod, index: int):
        func = ctypes.c_void_p()
        drv = _get_driver()
        name = _wrapper_name(index, self._tr.kernels[index].host_name).encode()
        drv.check(drv.lib.cuModuleGetFunction(ctypes.byref(func), mod, name),
                  "cuModuleGetFunction")
        return func

    def _bounded_function(self, kernel: Kernel, bound: int | None, generic: bool = False):
        """Kernel ``kernel`` compiled alone with launch bound ``bound`` (None: its own) and,
        where ``generic``, no address space assumed for its ``device`` parameters."""
        defines = (f"EMU_ONLY_KERNEL={kernel._index}",)
        defines += (f"EMU_GROUP_BOUND={bound}",) if bound is not None else ()
        defines += ("EMU_GENERIC_DEVICE",) if generic else ()
        return self._function_of(self._module(kernel._device, defines), kernel._index)

    def _kernel_key(self, name):
        import torch

        if self._device_of is None:  # once: torch.cuda.is_available() costs a device count
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"kernel '{name}': the CUDA executor needs a CUDA device (compile_ptx works "
                    "without one)"
                )
            torch.cuda.init()
            self._set(_device_of=torch._C._cuda_getDevice)
        return name, self._device_of()

    def _load(self, index, info, key):
        device = key[1]
        return Kernel(self, index, info, self._function_of(self._module(device), index), device)


_memo: dict = {}
_memo_lock = threading.Lock()


def compile_shader(source: str, *, metal_version: int = 320) -> Library:
    """Translate MSL ``source`` to CUDA and compile it with NVRTC for the current CUDA device.

    Same calling convention as ``torch.mps.compile_shader`` and
    `mpslinalg.emulator.compile_shader`; kernels take CUDA tensors. Compile errors raise
    SyntaxError (``metal/<file>:line`` where the translation can tell). Without a CUDA device
    the source is still translated and compiled to PTX (so errors surface), and looking up a
    kernel raises RuntimeError.
    """
    if metal_version not in (310, 320, 400):
        raise ValueError(f"metal_version must be 310, 320 or 400, got {metal_version!r}")
    # The source alone does not decide the compiled code: the prelude (found through the include
    # directory) and $MPSLINALG_NVRTC_OPTIONS do too, as in the on-disk cache's key.
    key = (source, metal_version, str(build.INCLUDE_DIR),
           os.environ.get("MPSLINALG_NVRTC_OPTIONS", ""))
    with _memo_lock:
        lib = _memo.get(key)
    if lib is not None:
        return lib
    import torch

    tr = translate_to_cuda(source, metal_version=metal_version)
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        _compiled(tr, f"sm_{major}{minor}")
    else:
        _compiled(tr, DEFAULT_PTX_ARCH)
    lib = Library(tr, metal_version)
    with _memo_lock:
        _memo.setdefault(key, lib)
        return _memo[key]

