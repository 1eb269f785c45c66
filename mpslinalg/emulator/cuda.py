"""A second executor for the same Metal sources: translated to CUDA C++, compiled with NVRTC and
launched on CUDA tensors, behind ``torch.mps.compile_shader``'s calling convention.

``compile_shader(source)`` returns a library like `mpslinalg.emulator.compile_shader`'s:
kernels by host name, ``dir()``, the kernel properties, and ``kernel(*args, threads=,
group_size=, arg_casts=)`` with torch's argument marshalling (Python int -> int64, float ->
float32, lists -> arrays, tensors bound at their storage offset) and ``dispatchThreads``
geometry. CUDA tensors stand in for MPS tensors; launches go on torch's current stream.

The front end is the emulator's (``translate.py``: C preprocessor, token rewriter, checks), so
both executors accept and reject the same sources. This module adds the CUDA back end: a token
pass over the rewritten source (Metal's vector type names, single-precision literals), one
``__global__`` wrapper per kernel host name, NVRTC (``libnvrtc`` through ctypes, from the
``nvidia-cuda-nvrtc`` wheel or the system) and the CUDA driver API (``libcuda`` through ctypes).
NVRTC needs no GPU, so `compile_ptx` works on any Linux machine.

Mapping: threadgroup -> block (one 1-D block per group, threads numbered like Metal's so warps
are simdgroups), simdgroup -> warp, threadgroup memory -> ``__shared__``, threadgroup_barrier
-> ``__syncthreads``, SIMD-group functions -> warp shuffles/votes over the active mask, 8x8
simdgroup_matrix -> a per-warp emulation, atomics -> CUDA atomics, half/bfloat -> 16-bit structs
rounded with PTX ``cvt.rn``, precise math without contraction (``-fmad=false``).
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

from . import build, runtime, translate

__all__ = [
    "compile_shader",
    "compile_ptx",
    "translate_to_cuda",
    "nvrtc_version",
    "is_available",
    "CudaUnsupportedError",
    "NvrtcNotFoundError",
]

PRELUDE = build.INCLUDE_DIR / "cuda_prelude.cuh"
# The PTX target of compile_ptx when no GPU says otherwise (Hopper; any sm_70+ has the warp
# intrinsics and __grid_constant__ the wrappers use).
DEFAULT_PTX_ARCH = "compute_90"
_BLOB_BYTES = 2048  # emu::kBlobBytes in cuda_prelude.cuh
_MAX_BUFFERS = 31


class CudaUnsupportedError(translate.TranslateError):
    """A Metal construct the CUDA executor cannot map (``file:line: error: ...``)."""


class NvrtcNotFoundError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------------
# back end: from the emulator's rewritten tokens to CUDA C++

# Metal builtin attributes -> the CUDA wrapper's values (emu::Ctx, see cuda_prelude.cuh).
_BUILTINS = {
    "thread_position_in_grid": "C.tid",
    "thread_position_in_threadgroup": "C.lid",
    "threadgroup_position_in_grid": "C.tgid",
    "threads_per_threadgroup": "C.tpg",
    "dispatch_threads_per_threadgroup": "C.dtpg",
    "threads_per_grid": "C.grid",
    "grid_size": "C.grid",
    "threadgroups_per_grid": "C.ngroups",
    "thread_index_in_threadgroup": "::emu::U(C.lidx)",
    "thread_index_in_simdgroup": "::emu::U(C.lidx & 31u)",
    "simdgroup_index_in_threadgroup": "::emu::U(C.lidx >> 5)",
    "threads_per_simdgroup": "::emu::U(32u)",
    "thread_execution_width": "::emu::U(32u)",
    "simdgroups_per_threadgroup": "::emu::U(C.nsg)",
    "dispatch_simdgroups_per_threadgroup": "::emu::U(C.dnsg)",
    "thread_index_in_quadgroup": "::emu::U(C.lidx & 3u)",
    "quadgroup_index_in_threadgroup": "::emu::U(C.lidx >> 2)",
    "quadgroups_per_threadgroup": "::emu::U((C.nlanes + 3u) / 4u)",
    "grid_origin": "::emu::U(0u)",
}

# Metal constructs with no CUDA mapping here, and why.
_UNMAPPED = {
    **{
        name: "quad-group functions are not mapped by the CUDA executor"
        for name in translate.SYNC_NAMES
        if name.startswith("quad_")
    },
    "simd_shuffle_and_fill_up": "simd_shuffle_and_fill_up is not mapped by the CUDA executor",
    "simd_shuffle_and_fill_down": "simd_shuffle_and_fill_down is not mapped by the CUDA executor",
    "thread_elements": "simdgroup_matrix thread_elements() (Apple's per-lane layout) has no "
    "CUDA counterpart",
    **{
        name: "textures and samplers are not available through compile_shader nor the CUDA "
        "executor"
        for name in (
            "texture1d",
            "texture2d",
            "texture3d",
            "texture2d_array",
            "texturecube",
            "depth2d",
            "sampler",
        )
    },
    "imageblock": "imageblocks (tile memory) have no CUDA counterpart",
    "visible_function_table": "function tables have no CUDA counterpart here",
    "intersection_function_table": "ray tracing has no CUDA counterpart here",
}

# MSL vector/matrix/16-bit type names; NVRTC predefines CUDA structs with some of these names.
_TYPE_NAME_RE = re.compile(
    r"^(?:(?:packed_)?(?:float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)[234]"
    r"|(?:float|half)[234]x[234]|half|bfloat)$"
)


def _cuda_tokens(text: str) -> str:
    """The CUDA spelling of the rewritten source, token by token: Metal's type names become the
    prelude's ``mtl_`` types and unsuffixed floating literals become ``float`` literals."""
    out = []
    toks = translate.tokenize(text)
    for i, tok in enumerate(toks):
        out.append(tok.ws)
        s = translate.single_precision(tok)
        if tok.k == "id" and _TYPE_NAME_RE.match(s):
            prev = toks[i - 1].t if i else ""
            if prev not in (".", "->"):
                s = "mtl_" + s
        out.append(s)
    return "".join(out)


def _check_unmapped(tr) -> None:
    for i, tok in enumerate(tr.toks):
        if tok.k == "id" and tok.t in _UNMAPPED and not tr.in_attr[i]:
            t = tr.toks[i]
            raise CudaUnsupportedError(f"{t.file}:{t.line}: error: '{tok.t}': {_UNMAPPED[tok.t]}")


class CudaTranslation:
    def __init__(self, source: str, kernels: list):
        self.source = source  # CUDA C++ without the prelude (that is included by name)
        self.kernels = kernels  # KernelInfo, in the order of the wrappers emu_k0, emu_k1, ...


def _entry_name(index: int, host: str) -> str:
    """The wrapper of kernel `index`: unique, and named after the host name so that profilers
    show which Metal kernel ran."""
    return f"emu_k{index}_" + re.sub(r"[^A-Za-z0-9_]", "_", host)


def translate_to_cuda(source: str, *, metal_version: int = 320) -> CudaTranslation:
    """Metal source -> CUDA C++ (kernel i's wrapper is ``extern "C" emu_k<i>_<host name>``)."""
    if not isinstance(source, str):
        raise TypeError(f"compile_shader expects str source, got {type(source).__name__}")
    cxx = build.require_compiler()  # its preprocessor is the emulator's front end
    # The emulator's front end, pass for pass (translate.translate minus its C++ back end).
    clean = translate.check_raw(source)
    tr = translate._Translator(
        translate.tokenize(translate.preprocess(clean, cxx, metal_version)), metal_version
    )
    tr.pair_brackets()
    tr.find_attributes()
    tr.scan_structure()
    tr.check_forbidden()
    _check_unmapped(tr)
    reaches_sync = tr.sync_kernels()
    tr.address_space_overloads()
    tr.rewrite()
    tr.companions()
    tr.swizzle_members()
    body = tr.emit()
    # Host names, instantiation checks and parameter lists come from the emulator's launchers.
    _, _, kernels = translate._launchers(tr, reaches_sync)
    hosts = [(host, tr.kdefs[name], args) for host, name, args, _, _ in tr.insts]
    hosts += [(kd.host_name or kd.name, kd, None) for kd in tr.kdef_list if kd.template is None]
    wrappers = []
    for h, (host, kd, args) in enumerate(hosts):
        q = "::" + "::".join(kd.ns + (kd.name,)) if kd.ns else kd.name
        fn = f"{q}<{args}>" if args is not None else q
        ki = "::" + "::".join(kd.ns + (f"__emu_ki_{kd.index}",))
        ki = f"{ki}<{args}>" if args is not None else ki
        call = []
        for k, p in enumerate(kd.params):
            if p.attr == "buffer":
                call.append(f"::emu::bind<::emu::arg_t<F{h}, {k}>>(A, {p.buffer})")
            elif p.attr in _BUILTINS:
                call.append(f"::emu::builtin<::emu::arg_t<F{h}, {k}>>({_BUILTINS[p.attr]})")
            else:
                t = tr.toks[kd.func.start]
                raise CudaUnsupportedError(
                    f"{t.file}:{t.line}: error: kernel '{kd.name}': attribute [[{p.attr}]] is "
                    "not mapped by the CUDA executor"
                )
        wrappers.append(
            f"using F{h} = decltype(&{fn});\n"
            f'extern "C" __global__ void __launch_bounds__({ki}::maxt()) '
            f"{_entry_name(h, host)}(const __grid_constant__ ::emu::Args A) {{\n"
            f"  ::emu::Ctx C;\n  if (!::emu::setup(A, C)) return;\n"
            f"  {fn}({', '.join(call)});\n}}\n"
        )
    launchers = '\n#line 1 "<cuda-launchers>"\n' + "".join(wrappers)
    return CudaTranslation(_cuda_tokens(body + launchers), kernels)


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
    ]


_NVRTC_ERR_RE = re.compile(r"^(.*?)\((\d+)\): (error|catastrophic error): (.*)$", re.M)


def _compile(cuda_src: str, arch: str) -> bytes:
    """PTX (arch compute_XY) or a cubin (sm_XY) of ``cuda_src``; SyntaxError on failure."""
    lib = _load_nvrtc()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(
        ctypes.byref(prog), cuda_src.encode(), b"program_source.cu", 0, None, None
    )
    if rc != 0:
        raise RuntimeError(f"nvrtcCreateProgram failed: {lib.nvrtcGetErrorString(rc).decode()}")
    try:
        opts = _nvrtc_options(arch)
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


def _cache_key(cuda_src: str, arch: str) -> str:
    blob = json.dumps(
        [cuda_src, arch, _nvrtc_options(arch), PRELUDE.read_text(), list(nvrtc_version())]
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _compiled(tr: CudaTranslation, arch: str) -> bytes:
    """The compiled image, from the on-disk cache when this translation was built before."""
    path = build.cache_dir() / "cuda" / f"{_cache_key(tr.source, arch)}.{arch}"
    try:
        return path.read_bytes()
    except OSError:
        pass
    image = _compile(tr.source, arch)
    try:
        build._atomic_write(path, image)
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
        self.lib.cuLaunchKernel.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_uint, ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
        ]  # fmt: skip
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


def _current_stream(index: int) -> int:
    """torch's current stream on device `index` (the raw CUstream)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1


class Kernel:
    """One kernel host name on one device, called like torch's MetalKernel."""

    def __init__(self, library, index, info, func, device_index):
        self._lib, self._index, self._info = library, index, info
        self._func, self._device = func, device_index
        drv = _get_driver()
        v = ctypes.c_int()
        drv.check(
            drv.lib.cuFuncGetAttribute(
                ctypes.byref(v), _CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func
            ),
            "cuFuncGetAttribute",
        )
        # __launch_bounds__ holds every kernel to Metal's limit (1024 or its own attribute)
        self._max = min(v.value, runtime.DEFAULT_MAX_THREADS)
        drv.check(
            drv.lib.cuFuncGetAttribute(ctypes.byref(v), _CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func),
            "cuFuncGetAttribute",
        )
        self._tg = v.value
        self.name = info.host_name
        self._nbufs = max((p.buffer + 1 for p in info.params if p.attr == "buffer"), default=0)

    max_threads_per_threadgroup = property(lambda self: self._max)
    thread_execution_width = property(lambda self: runtime.SIMD_WIDTH)
    static_thread_group_memory_length = property(lambda self: self._tg)

    def __repr__(self):
        return f"<Metal kernel {self.name!r} on cuda:{self._device} (CUDA executor)>"

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None, error_buf_idx=None):
        import torch

        if error_buf_idx is not None:
            raise NotImplementedError("error_buf_idx is not supported by the CUDA executor")
        if len(args) > _MAX_BUFFERS:
            raise RuntimeError(f"kernel '{self.name}': at most {_MAX_BUFFERS} arguments")
        casts = runtime._casts_for(arg_casts, len(args))
        # The parameter block is filled in place (struct.pack_into): the host side of a launch
        # is what bounds small kernels, so the common arguments take the shortest path.
        buf = bytearray(_ARGS_SIZE)
        keep = []
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
                keep.append(a)
                continue
            off = (used + 15) & ~15
            if kind is int and casts[i] is None and -(2**63) <= a < 2**63:
                _pack_into("<q", buf, _BLOB_OFFSET + off, a)  # torch: int -> int64
                size = 8
            elif kind is float and casts[i] is None:
                _pack_into("<f", buf, _BLOB_OFFSET + off, a)  # torch: float -> float32
                size = 4
            else:
                # lists, casts, bools, 0-dim CPU tensors: the emulator's marshalling
                b = runtime._marshal(i, a, None if isinstance(a, torch.Tensor) else casts[i])
                size = b.size
                if off + size <= _BLOB_BYTES:
                    buf[_BLOB_OFFSET + off : _BLOB_OFFSET + off + size] = ctypes.string_at(
                        b.ptr, size
                    )
            if off + size > _BLOB_BYTES:
                raise RuntimeError(
                    f"kernel '{self.name}': the scalars and lists passed by value exceed the "
                    f"CUDA executor's {_BLOB_BYTES} bytes; pass large arrays as tensors"
                )
            _pack_into("<Q", buf, 8 * i, off)
            in_blob |= 1 << i
            used = off + size
        if self._nbufs > len(args):
            p = next(p for p in self._info.params if p.attr == "buffer" and p.buffer >= len(args))
            raise RuntimeError(
                f"kernel '{self.name}': parameter '{p.name}' (buffer {p.buffer}): the kernel "
                f"reads buffer {p.buffer} but only {len(args)} arguments were passed"
            )
        grid, group = _geometry(self, args, threads, group_size)
        runtime._count(self.name)
        if 0 in grid:
            return None
        if self._tg > runtime.TG_MEMORY_LIMIT:
            raise RuntimeError(
                f"kernel '{self.name}': threadgroup memory use {self._tg} bytes exceeds the "
                f"{runtime.TG_MEMORY_LIMIT}-byte limit of Apple GPUs"
            )
        ngroups = [-(-grid[i] // group[i]) for i in range(3)]
        nblocks = ngroups[0] * ngroups[1] * ngroups[2]
        if max(grid) >= 2**32 or nblocks >= 2**31:
            raise ValueError(
                f"kernel '{self.name}': threads {grid[:3]} in {nblocks} threadgroups exceed the "
                "CUDA executor's limits (2^32 - 1 threads per dimension, 2^31 - 1 groups)"
            )
        _pack_into("<I9I", buf, _IN_BLOB_OFFSET, in_blob, *grid, *group, *ngroups)
        drv = _get_driver()
        drv.context(self._device)
        block = (ctypes.c_char * _ARGS_SIZE).from_buffer(buf)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(block))
        drv.check(
            drv.lib.cuLaunchKernel(
                self._func, nblocks, 1, 1, group[0] * group[1] * group[2], 1, 1, 0,
                ctypes.c_void_p(_current_stream(self._device)), params, None,
            ),
            f"launch of kernel '{self.name}'",
        )  # fmt: skip
        del block, params
        return None


def _geometry(kernel, args, threads, group_size):
    """dispatchThreads geometry as torch's MetalKernelFunction::dispatch computes it."""
    grid, group = runtime.dispatch_geometry(kernel.name, kernel.max_threads_per_threadgroup, args,
                                            threads, group_size)
    if 0 not in grid and 0 in group:
        raise ValueError(f"kernel '{kernel.name}': group_size must be positive, got {group_size!r}")
    return grid, group


class Library:
    """What ``compile_shader`` returns: kernels as attributes, ``dir()`` lists the host names.

    Kernels load on the device of the current CUDA device at lookup; a kernel is bound to the
    device it was loaded for.
    """

    def __init__(self, translation: CudaTranslation, metal_version: int):
        object.__setattr__(self, "_tr", translation)
        infos = {k.host_name: i for i, k in enumerate(translation.kernels)}
        object.__setattr__(self, "_infos", infos)
        object.__setattr__(self, "_modules", {})  # device index -> CUmodule
        object.__setattr__(self, "_kernels", {})
        object.__setattr__(self, "_lock", threading.Lock())

    def _module(self, index: int):
        import torch

        mod = self._modules.get(index)
        if mod is None:
            major, minor = torch.cuda.get_device_capability(index)
            image = _compiled(self._tr, f"sm_{major}{minor}")
            drv = _get_driver()
            torch.cuda.init()
            drv.context(index)
            mod = ctypes.c_void_p()
            drv.check(drv.lib.cuModuleLoadData(ctypes.byref(mod), image), "cuModuleLoadData")
            self._modules[index] = mod
        return mod

    def __getattr__(self, name):
        import torch

        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        h = self._infos.get(name)
        if h is None:
            avail = ", ".join(sorted(self._infos)) or "(none)"
            raise runtime.KernelNotFoundError(
                f"Failed to create function state object for: {name} (available kernels: {avail})"
            )
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"kernel '{name}': the CUDA executor needs a CUDA device (compile_ptx works "
                "without one)"
            )
        index = torch.cuda.current_device()
        with self._lock:
            k = self._kernels.get((name, index))
            if k is None:
                mod = self._module(index)
                func = ctypes.c_void_p()
                drv = _get_driver()
                drv.check(
                    drv.lib.cuModuleGetFunction(
                        ctypes.byref(func), mod, _entry_name(h, name).encode()
                    ),
                    "cuModuleGetFunction",
                )
                k = Kernel(self, h, self._tr.kernels[h], func, index)
                self._kernels[(name, index)] = k
            return k

    def __setattr__(self, name, value):
        raise AttributeError("Metal libraries are read-only")

    def __dir__(self):
        return sorted(self._infos)

    def __repr__(self):
        return f"<Metal library (CUDA executor): {', '.join(sorted(self._infos))}>"


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
    key = (source, metal_version)
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

