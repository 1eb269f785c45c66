"""The CUDA executor (mpslinalg.emulator.cuda): Metal sources translated to CUDA by the
emulator's front end, compiled with NVRTC, launched on CUDA tensors.

Tests without the ``cuda`` marker need only NVRTC (no GPU) and run in CI; ``cuda`` tests run
each kernel on the GPU and compare with the CPU emulator on the same inputs. The conftest
deselects them where torch sees no CUDA device.
"""

from __future__ import annotations

import pathlib
import re
import struct

import pytest
import torch

from mpslinalg._core import metal as _metal
from mpslinalg.emulator import compile_shader as cpu_compile_shader
from mpslinalg.emulator import cuda, translate

try:
    cuda._load_nvrtc()
except cuda.NvrtcNotFoundError as exc:  # the test-cuda extra installs it on Linux
    pytest.skip(f"NVRTC is not available (the test-cuda extra installs it: pip install -e "
                f"'.[test-cuda]'): {exc}", allow_module_level=True)

SOURCES = sorted(p.relative_to(_metal.metal_root()).as_posix()
                 for p in _metal.metal_root().rglob("*.metal"))
#: Sources NVRTC needs more than five minutes for on the 2-core CI machine (the 8,500 generated
#: lines of the n <= 4 eig kernels): translated here (test_slow_sources_translate), compiled to
#: PTX only where a GPU's tests run.
SLOW_FOR_NVRTC = ["linalg/small_eig.metal"]


# ---------------------------------------------------------------- translation and NVRTC (no GPU)

@pytest.mark.parametrize("path", SLOW_FOR_NVRTC)
def test_slow_sources_translate(path):
    assert path in SOURCES
    assert cuda.translate_to_cuda(_metal.load_source(path)).kernels


@pytest.mark.parametrize("path", [s for s in SOURCES if s not in SLOW_FOR_NVRTC])
def test_every_library_source_compiles_to_ptx(path):
    src = _metal.load_source(path)
    ptx = cuda.compile_ptx(src)
    kernels = cuda.translate_to_cuda(src).kernels
    assert kernels
    for h, k in enumerate(kernels):
        assert f".entry emu_k{h}_{k.host_name}(" in ptx
    # Metal has no double: nothing of the translation may compute in double precision. (CUDA's
    # own sinf/cosf reduce huge arguments in double inside libdevice; the float result is still
    # correctly rounded, so kernels calling them are allowed that.)
    if re.search(r"\bmetal::(sin|cos|tan)\(", src):
        assert "double" not in cuda.translate_to_cuda(src).source
    else:
        assert ".f64" not in ptx


def test_library_kernel_names_match_the_emulator():
    for path in SOURCES:
        src = _metal.load_source(path)
        names = [k.host_name for k in cuda.translate_to_cuda(src).kernels]
        assert names == [k.host_name for k in translate.translate(
            src, cuda.build.require_compiler()).kernels]


_LANGUAGE = r"""
#include <metal_stdlib>
using namespace metal;
struct Pair { float2 a; int n; };
template <typename T> T twice(T x) { return x + x; }
kernel void lang(device float4* out [[buffer(0)]], device half* h [[buffer(1)]],
                 device bfloat* b [[buffer(2)]], constant Pair& p [[buffer(3)]],
                 device atomic_int* counter [[buffer(4)]],
                 uint2 gid [[thread_position_in_grid]], ushort lane [[thread_index_in_simdgroup]],
                 uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[lane] = float(gid.x) * 0.5;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float4 v = float4(tile[lane ^ 1u], simd_sum(1.0f), simd_prefix_exclusive_sum(float(lane)),
                    float(ulong(simd_ballot(lane < 3u))));
  v.xy = v.yx + twice(p.a);
  v.z += float(simd_shuffle_down(int(lane), 1u)) + simd_max(v.w) + float(sg);
  out[gid.x] = v;
  h[gid.x] = half(v.x) * 1.5h;
  b[gid.x] = bfloat(v.y);
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(1.0f), r;
  simdgroup_multiply(r, m, m);
  simdgroup_store(r, &tile[0], 8);
}
"""


def test_translation_renames_metal_types_and_single_precision_literals():
    src = cuda.translate_to_cuda(_LANGUAGE).source
    assert "mtl_float4(" in src and "mtl_half(" in src
    assert "float(gid.x) * 0.5f" in src.replace("  ", " ")
    assert "1.5h" not in src
    ptx = cuda.compile_ptx(_LANGUAGE)
    assert ".entry emu_k0_lang(" in ptx and ".f64" not in ptx


@pytest.mark.parametrize("construct, body", [
    ("quad_sum", "out[0] = quad_sum(out[0]);"),
    ("simd_shuffle_and_fill_up", "out[0] = simd_shuffle_and_fill_up(out[0], 0.0f, 1u);"),
    ("texture2d", "texture2d<float> t;"),
])
def test_unmapped_construct_is_named(construct, body):
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void k(device float* out [[buffer(0)]]) {\n  " + body + "\n}\n")
    with pytest.raises(cuda.CudaUnsupportedError, match=rf"program_source:4: error: '{construct}'"):
        cuda.translate_to_cuda(src)


# metal/linalg/eig.h's eig_schur_any before its tag dispatch: a non-template overload for device
# pointers inside a struct's template arguments and a template for threadgroup ones. Metal calls
# the template for a threadgroup work struct; with the address spaces erased both take
# Work<float, float*>& on CUDA, where the non-template wins (eig_group ran eig_device's sweeps).
_ADDRESS_SPACE_OVERLOADS = r"""
#include <metal_stdlib>
using namespace metal;
template <typename T, typename P> struct Work { P a; int n; };
inline float pick(thread Work<float, device float*>& w) { return w.a[0] + 100.0f; }
template <typename T>
inline float pick(thread Work<T, threadgroup T*>& w) { return w.a[0] + 200.0f; }
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  threadgroup float tile[4];
  tile[i & 3u] = 1.0f;
  Work<float, threadgroup float*> w{tile + (i & 3u), 4};
  out[i] = pick(w);
}
"""
# The same dispatch by a tag type, which survives the erasure.
_TAGGED_OVERLOADS = r"""
#include <metal_stdlib>
using namespace metal;
template <typename T, typename P> struct Work { P a; int n; };
struct OnDevice {};
struct InGroup {};
inline float pick(thread Work<float, device float*>& w, OnDevice) { return w.a[0] + 100.0f; }
template <typename T>
inline float pick(thread Work<T, threadgroup T*>& w, InGroup) { return w.a[0] + 200.0f; }
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  threadgroup float tile[4];
  tile[i & 3u] = 1.0f;
  Work<float, threadgroup float*> w{tile + (i & 3u), 4};
  out[i] = pick(w, InGroup());
}
"""


def test_overloads_told_apart_only_by_address_spaces_are_refused():
    with pytest.raises(cuda.CudaUnsupportedError,
                       match=r"^program_source:7: error: overloads of 'pick' are told apart "
                             r"only by address spaces: parameter 1 "
                             r"`thread Work<T, threadgroup T\*>& w` here and "
                             r"`thread Work<float, device float\*>& w` of the overload at "
                             r"program_source:5; .*erases Metal's address spaces.*tag type"):
        cuda.translate_to_cuda(_ADDRESS_SPACE_OVERLOADS)
    # the CPU emulator keeps device pointers apart (::emu::dptr) and calls Metal's overload
    out = torch.zeros(4)
    cpu_compile_shader(_ADDRESS_SPACE_OVERLOADS).k(out, threads=4, group_size=4)
    assert out.tolist() == [201.0] * 4
    # dispatch by a tag type is accepted
    assert ".entry emu_k0_k(" in cuda.compile_ptx(_TAGGED_OVERLOADS)


def test_nvrtc_errors_point_at_the_metal_source():
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void k(device float* out [[buffer(0)]]) {\n"
           "  out[0] = metal::not_a_function(out[0]);\n}\n")
    with pytest.raises(SyntaxError, match=r"program_source:4: error: .*not_a_function"):
        cuda.compile_ptx(src)


def test_extra_nvrtc_options(monkeypatch):
    """$MPSLINALG_NVRTC_OPTIONS reaches NVRTC and the cache key: -lineinfo adds the line table
    compute-sanitizer reads, on a source compiled without it before."""
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void k(device float* out [[buffer(0)]]) {\n  out[0] = 2.0f * out[0];\n}\n")
    monkeypatch.delenv("MPSLINALG_NVRTC_OPTIONS", raising=False)
    assert ".loc" not in cuda.compile_ptx(src)
    monkeypatch.setenv("MPSLINALG_NVRTC_OPTIONS", "-lineinfo")
    assert ".loc" in cuda.compile_ptx(src)


def test_compile_shader_memo_follows_the_build_inputs(monkeypatch):
    """The in-process memo of compile_shader is keyed like the on-disk cache: the same source
    compiled with other NVRTC options or another include directory (prelude) is compiled again,
    not served the library built before."""
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void memo_k(device float* out [[buffer(0)]]) {\n  out[0] += 3.0f;\n}\n")
    monkeypatch.delenv("MPSLINALG_NVRTC_OPTIONS", raising=False)
    first = cuda.compile_shader(src)
    assert cuda.compile_shader(src) is first
    monkeypatch.setenv("MPSLINALG_NVRTC_OPTIONS", "-lineinfo")
    assert cuda.compile_shader(src) is not first


def test_metal_rules_are_the_emulators():
    src = "kernel void k(device double* out [[buffer(0)]]) { out[0] = 1; }\n"
    with pytest.raises(SyntaxError, match="'double' is not supported in Metal"):
        cuda.translate_to_cuda(src)


_REDUCTIONS = r"""
#include <metal_stdlib>
using namespace metal;
kernel void scalar(device const float* x [[buffer(0)]], device const int* active [[buffer(1)]],
                   device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (active[i] == 0) return;  // a partial simdgroup
  out[i] = simd_sum(x[i]);
}
kernel void mixed(device const float* x [[buffer(0)]], device const int* active [[buffer(1)]],
                  device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  const float v = x[i];
  float4 r = float4(simd_max(v), simd_min(v), simd_product(v), float(simd_and(int(v))));
  if (active[i] != 0) {
    r += simd_sum(float4(v, v, 1.0f, 2.0f));
    r.x += simd_prefix_inclusive_sum(v) + simd_prefix_exclusive_product(v);
    r.y += float(simd_all(v > 0.0f)) + simd_shuffle_xor(v, ushort(1));
  }
  out[i] = r.x + r.y + r.z + r.w;
}
"""


def test_simd_reductions_need_no_local_memory():
    # On an Apple GPU a SIMD-group reduction is a few shuffles in registers; the executor's, for
    # partial simdgroups too, must not keep per-lane slots in local memory (a stack frame in
    # every kernel that reduces): one shuffle per butterfly offset, on each of its two paths
    # (full and partial warp).
    ptx = cuda.compile_ptx(_REDUCTIONS)
    entries = dict(re.findall(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S))
    assert set(entries) == {"emu_k0_scalar", "emu_k1_mixed"}
    for name, body in entries.items():
        assert ".local" not in body, name
    assert len(re.findall(r"\bshfl\.sync\b", entries["emu_k0_scalar"])) == 2 * 5


# ---------------------------------------------------------------- on the GPU, against the emulator

def _both(source, name, make_args, **launch):
    """Run kernel `name` on CPU tensors (emulator) and CUDA tensors (CUDA executor) built by
    make_args(device); returns the argument lists after the launches, CUDA ones moved to CPU."""
    cpu_args = make_args("cpu")
    cuda_args = make_args("cuda")
    getattr(cpu_compile_shader(source), name)(*cpu_args, **launch)
    getattr(cuda.compile_shader(source), name)(*cuda_args, **launch)
    torch.cuda.synchronize()
    return cpu_args, [a.cpu() if isinstance(a, torch.Tensor) else a for a in cuda_args]


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.dtype.is_floating_point:
        a = a.view({2: torch.int16, 4: torch.int32}[a.element_size()])
        b = b.view(a.dtype)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


_GEOMETRY = r"""
#include <metal_stdlib>
using namespace metal;
kernel void geometry(device uint* out [[buffer(0)]], constant long& nx [[buffer(1)]],
                     constant long& ny [[buffer(2)]],
                     uint2 tid [[thread_position_in_grid]],
                     uint2 lid [[thread_position_in_threadgroup]],
                     uint2 tg [[threadgroup_position_in_grid]],
                     uint2 tpg [[threads_per_threadgroup]],
                     uint2 dtpg [[dispatch_threads_per_threadgroup]],
                     uint lidx [[thread_index_in_threadgroup]],
                     ushort lane [[thread_index_in_simdgroup]],
                     ushort sg [[simdgroup_index_in_threadgroup]],
                     ushort nsg [[simdgroups_per_threadgroup]],
                     uint2 grid [[threads_per_grid]]) {
  device uint* o = out + (long(tid.y) * nx + long(tid.x)) * 14;
  o[0] = tid.x; o[1] = tid.y; o[2] = lid.x; o[3] = lid.y; o[4] = tg.x; o[5] = tg.y;
  o[6] = tpg.x; o[7] = tpg.y; o[8] = dtpg.x * 1000u + dtpg.y; o[9] = lidx; o[10] = lane;
  o[11] = sg; o[12] = nsg; o[13] = grid.x * 1000u + grid.y + uint(ny) * 0u;
}
"""


@pytest.mark.cuda
@pytest.mark.parametrize("threads, group",
                         [((37, 5), (8, 4)), ((70, 3), (64, 1)), ((33, 1), (32, 1))])
def test_dispatch_geometry_with_partial_groups(threads, group):
    nx, ny = threads

    def args(dev):
        return [torch.full((nx * ny * 14,), 0xFFFFFFFF, dtype=torch.int64, device=dev)
                .to(torch.int32), nx, ny]

    cpu, gpu = _both(_GEOMETRY, "geometry", args, threads=list(threads), group_size=list(group))
    _same_bits(cpu[0], gpu[0])


_SIMD = r"""
#include <metal_stdlib>
using namespace metal;
kernel void simd(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 device int* iout [[buffer(2)]],
                 uint i [[thread_position_in_grid]], ushort lane [[thread_index_in_simdgroup]],
                 uint lidx [[thread_index_in_threadgroup]],
                 uint tpg [[threads_per_threadgroup]]) {
  float v = x[i];
  device float* o = out + i * 8;
  // lanes of this simdgroup (the last one of a group may be partial): shuffles from lanes past
  // them read undefined values, which the test does not compare
  const uint live = min(32u, tpg - (lidx & ~31u));
  o[0] = simd_sum(v); o[1] = simd_max(v); o[2] = simd_min(v);
  o[3] = simd_prefix_inclusive_sum(v); o[4] = simd_prefix_exclusive_sum(v);
  o[5] = simd_broadcast(v, ushort(2));
  const float x5 = simd_shuffle_xor(v, ushort(5));
  o[6] = (lane ^ 5u) < live ? x5 : 0.0f;
  o[7] = simd_shuffle_up(v, ushort(3));
  device int* io = iout + i * 4;
  io[0] = int(uint(uint64_t(simd_ballot(v > 0.0f))));
  io[1] = simd_all(v > -10.0f) ? 1 : 0;
  io[2] = simd_any(v > 1.5f) ? 1 : 0;
  io[3] = simd_sum(int(lane));
  if (lane % 3u == 0u) {  // a divergent branch: the collectives see a third of the lanes
    o[0] = simd_sum(v) + simd_prefix_inclusive_sum(v);
    io[1] = int(uint(ulong(simd_active_threads_mask())));
  }
}
"""


@pytest.mark.cuda
@pytest.mark.parametrize("n, group", [(64, 64), (70, 70), (45, 32), (45, 45)])
def test_simd_functions_match_emulator_bits(n, group):
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=gen)

    def args(dev):
        return [x.to(dev), torch.zeros(n * 8, device=dev), torch.zeros(n * 4, dtype=torch.int32,
                                                                       device=dev)]

    cpu, gpu = _both(_SIMD.replace("uint64_t", "ulong"), "simd", args, threads=n,
                     group_size=group)
    # column by column, so that a failure names the function
    for col, what in enumerate(["ballot", "all / divergent-branch mask", "any", "int sum"]):
        c, g = cpu[2].view(-1, 4)[:, col], gpu[2].view(-1, 4)[:, col]
        assert torch.equal(c, g), f"{what}: emulator {c.tolist()} CUDA {g.tolist()}"
    for col, what in enumerate(["sum (divergent lanes: sum + prefix)", "max", "min",
                                "inclusive prefix", "exclusive prefix", "broadcast",
                                "shuffle_xor", "shuffle_up"]):
        c, g = cpu[1].view(-1, 8)[:, col].contiguous(), gpu[1].view(-1, 8)[:, col].contiguous()
        assert torch.equal(c.view(torch.int32), g.view(torch.int32)), \
            f"{what}: emulator {c.tolist()} CUDA {g.tolist()}"


_PARTIAL = r"""
#include <metal_stdlib>
using namespace metal;
kernel void partial(device const float* x [[buffer(0)]], device const float* y [[buffer(1)]],
                    device const int* active [[buffer(2)]], device float* out [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  if (active[i] == 0) return;
  const float v = x[i], w = y[i];
  device float* o = out + i * 6;
  o[0] = simd_sum(v); o[1] = simd_product(1.0f + v / 64.0f);
  o[2] = simd_max(w); o[3] = simd_min(w);
  o[4] = simd_prefix_inclusive_sum(v); o[5] = simd_prefix_exclusive_sum(v);
}
"""


@pytest.mark.cuda
def test_reductions_of_partial_warps_match_emulator_bits():
    # One activity mask per simdgroup (edge cases, then random ones of every density); sums whose
    # bits depend on the order; max / min ignoring NaNs (never a simdgroup of NaNs only, whose
    # NaN bits are the platform's).
    gen = torch.Generator().manual_seed(3)
    full = 2**32 - 1
    masks = [full, 1, 1 << 31, full ^ 1, full ^ (1 << 31), 0xFFFF, 0xFFFF0000, 0x55555555,
             0x80000001, 0x00010001, 0x11111111]
    rand = torch.randint(1, 2**32, (2, 37), generator=gen, dtype=torch.int64).tolist()
    masks += rand[0] + [a & b or 1 for a, b in zip(*rand, strict=True)]
    n = 32 * len(masks)
    active = torch.tensor([m >> lane & 1 for m in masks for lane in range(32)], dtype=torch.int32)
    x = torch.randn(n, generator=gen) * 2.0 ** torch.randint(-12, 12, (n,), generator=gen)
    y = torch.randn(n, generator=gen)
    y[torch.rand(n, generator=gen) < 0.2] = float("nan")
    for s, m in enumerate(masks):
        y[32 * s + (m & -m).bit_length() - 1] = 1.0  # the first active lane's

    def args(dev):
        return [x.to(dev), y.to(dev), active.to(dev), torch.zeros(n * 6, device=dev)]

    cpu, gpu = _both(_PARTIAL, "partial", args, threads=n, group_size=1024)
    on = active.bool()
    for col, what in enumerate(["sum", "product", "max", "min", "inclusive prefix",
                                "exclusive prefix"]):
        c, g = cpu[3].view(-1, 6)[on, col], gpu[3].view(-1, 6)[on, col]
        bad = (c.view(torch.int32) != g.view(torch.int32)).nonzero().flatten()[:4].tolist()
        assert not bad, f"{what}: lanes {bad}: emulator {c[bad].tolist()} CUDA {g[bad].tolist()}"


_MARSHAL = r"""
#include <metal_stdlib>
using namespace metal;
kernel void marshal(device float* out [[buffer(0)]], constant long& i64 [[buffer(1)]],
                    constant float& f32 [[buffer(2)]], constant long* ints [[buffer(3)]],
                    constant float* floats [[buffer(4)]], constant int& i32 [[buffer(5)]],
                    constant float& scalar_tensor [[buffer(6)]],
                    device const float* view [[buffer(7)]], uint i [[thread_position_in_grid]]) {
  out[i] = float(i64) + f32 + float(ints[i % 3]) + floats[i % 2] + float(i32) + scalar_tensor
           + view[i];
}
"""


@pytest.mark.cuda
def test_argument_marshalling():
    base = torch.arange(20, dtype=torch.float32)

    def args(dev):
        return [torch.zeros(5, device=dev), 7, 0.25, [1, 2, 3], [0.5, 1.5], 11,
                torch.tensor(100.0), base.to(dev)[10:15]]  # a view: bound at its storage offset

    cpu, gpu = _both(_MARSHAL, "marshal", args, threads=5, arg_casts={5: "int32"})
    _same_bits(cpu[0], gpu[0])


_SCALARS = r"""
#include <metal_stdlib>
using namespace metal;
kernel void axpb(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                 constant long& a [[buffer(2)]], constant float& b [[buffer(3)]],
                 uint2 i [[thread_position_in_grid]], uint2 n [[threads_per_grid]]) {
  const uint k = i.y * n.x + i.x;
  y[k] = float(a) * x[k] + b;
}
struct Affine { long scale, shift, unused; };
kernel void affine(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                   constant Affine& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = float(p.scale) * x[i] + float(p.shift);
}
"""


@pytest.mark.cuda
def test_repeated_launches_take_the_fast_path_with_the_same_results():
    # The first launch of a geometry takes the checked path, later ones the cached plan; both
    # must bind every argument kind alike, and a change of kind falls back to the checked path.
    lib = cuda.compile_shader(_SCALARS)
    k = lib.axpb
    x = torch.randn(6, 10, device="cuda")
    for _ in range(3):
        for a, b, threads, group in [(3, 0.5, [10, 6], [4, 2]), (-2**40, -1.25, (10, 6), None),
                                     (7, 2.0, [10, 6], [10, 1])]:
            y = torch.full_like(x, float("nan"))
            k(y, x, a, b, threads=threads, group_size=group)
            torch.testing.assert_close(y, float(a) * x + b, rtol=1e-6, atol=0)
    assert lib.axpb is k  # the lookup is per device and cached
    y = torch.zeros_like(x)
    k(y, x, 2, 1.0, threads=[10, 6], group_size=[4, 2], arg_casts={2: "int32"})  # not the plan
    with pytest.raises(TypeError, match="CUDA tensors"):
        k(y, x.cpu(), 2, 1.0, threads=[10, 6], group_size=[4, 2])
    with pytest.raises(RuntimeError, match="reads buffer 3 but only 3 arguments"):
        k(y, x, 2, threads=[10, 6], group_size=[4, 2])
    with pytest.raises(ValueError, match="group_size must be positive"):
        k(y, x, 2, 1.0, threads=[10, 6], group_size=[0, 2])
    before = cuda.marshal.launch_counts().get("axpb", 0)
    k(y, x, 2, 1.0, threads=[0, 6], group_size=[4, 2])  # an empty grid runs nothing
    k(y, x, 2, 1.0, threads=[0, 6], group_size=[4, 2])
    assert cuda.marshal.launch_counts()["axpb"] == before + 2


def test_device_parameters_are_global_unless_compiled_generic():
    # A tensor is bound to a `device` parameter, and the compiler is told so (global loads and
    # stores, which may pass threadgroup stores as on Metal); `constant` parameters stay generic
    # (bytes live in the parameter block). EMU_GENERIC_DEVICE, taken where bytes are bound to a
    # `device` parameter, assumes nothing.
    tr = cuda.translate_to_cuda(_SCALARS)
    axpb = next(k for k in tr.kernels if k.host_name == "axpb")
    assert [p.device for p in axpb.params] == [True, True, False, False, False, False]
    for defines, space in [((), "global"), (("EMU_GENERIC_DEVICE",), "")]:
        ptx = cuda._compiled(tr, cuda.DEFAULT_PTX_ARCH, defines).rstrip(b"\0").decode()
        body = re.search(r"\.entry emu_k\d+_axpb\((.*?)\n}\n", ptx, re.S).group(1)
        loads = re.findall(r"\bld((?:\.\w+)*)\.f32", body)
        stores = re.findall(r"\bst((?:\.\w+)*)\.f32", body)
        assert len(stores) == 1 and (".global" in stores[0]) == (space == "global"), stores
        assert sum(".global" in q for q in loads) == (1 if space else 0), loads


@pytest.mark.cuda
def test_bytes_bound_to_a_device_parameter_take_the_generic_compilation():
    # a source of its own: libraries are cached by source, and other tests check _bounded
    k = cuda.compile_shader(_SCALARS + "\n// bytes bound to a device parameter\n").axpb
    xs = [0.5 * i - 3.0 for i in range(12)]
    for _ in range(2):  # the checked path, then the same geometry again
        y = torch.full((2, 6), float("nan"), device="cuda")
        k(y, xs, 3, 0.25, threads=[6, 2], group_size=[3, 2])
        torch.testing.assert_close(y.cpu(), 3 * torch.tensor(xs).view(2, 6) + 0.25)
    assert (None, True) in k._bounded
    x = torch.tensor(xs, device="cuda").view(2, 6)
    k(y, x, 2, 1.0, threads=[6, 2], group_size=[3, 2])  # a tensor: the global compilation
    torch.testing.assert_close(y, 2 * x + 1.0)


@pytest.mark.cuda
def test_parameter_structs_as_int_lists_take_the_fast_path():
    # A packed parameter struct (a list of ints, as metal_params packs one) binds as an int64
    # array on both paths; a list the fast path cannot take falls back to the checked one.
    k = cuda.compile_shader(_SCALARS).affine
    x = torch.randn(40, device="cuda")
    for scale, shift in [(3, -1), (-2, 5), (7, 0)] * 2:
        y = torch.full_like(x, float("nan"))
        k(y, x, [scale, shift, 2**62], threads=[40], group_size=[8])
        torch.testing.assert_close(y, scale * x + shift, rtol=1e-6, atol=0)
    with pytest.raises(TypeError, match="must contain only ints"):
        k(y, x, [3, 1.5, 0], threads=[40], group_size=[8])
    with pytest.raises((OverflowError, struct.error, RuntimeError, ValueError)):
        k(y, x, [3, 2**63, 0], threads=[40], group_size=[8])


@pytest.mark.cuda
def test_bound_launches_pack_the_tensors_once_with_the_same_results():
    # _metal.bind: the tensors' pointers packed once, the struct and the grid per launch; a
    # geometry not seen yet takes the checked path (which caches it), the launch counts and
    # listeners see every launch, and kernels the fast path cannot take launch as `launch` does.
    k = cuda.compile_shader(_SCALARS + "\n// bound launches\n").affine
    x = torch.randn(40, device="cuda")
    y = torch.full_like(x, float("nan"))
    heard = []
    _metal.launch_listeners.append(heard.append)
    try:
        go = _metal.bind(k, y, x)
        before = cuda.marshal.launch_counts().get("affine", 0)
        for scale, shift, n in [(3, -1, 40), (-2, 5, 24), (7, 0, 40), (1, 1, 8)] * 2:
            y.fill_(float("nan"))
            go([scale, shift, 0], threads=[n], group_size=[8])
            torch.testing.assert_close(y[:n], scale * x[:n] + shift, rtol=1e-6, atol=0)
            assert y[n:].isnan().all()
        assert cuda.marshal.launch_counts()["affine"] == before + 8
        assert heard.count("affine") == 8
        with pytest.raises((OverflowError, struct.error, RuntimeError, ValueError)):
            go([3, 2**63, 0], threads=[40], group_size=[8])
    finally:
        _metal.launch_listeners.remove(heard.append)
    assert k.bind(y, x.cpu()) is None  # not a tensor of this device: no fast path
    assert k.bind(y, [1.0] * 40) is None
    # tensors after the struct (`after`): the struct's slot between them
    lib = cuda.compile_shader(_AFTER)
    z = torch.randn(40, device="cuda")
    go = _metal.bind(lib.affine_after, y, after=(x, z))
    for scale, shift in [(2, 1), (-3, 4)] * 2:
        go([scale, shift], threads=[40], group_size=[8])
        torch.testing.assert_close(y, scale * x + shift * z, rtol=1e-6, atol=1e-6)


_AFTER = r"""
#include <metal_stdlib>
using namespace metal;
struct Pair { long scale, shift; };
kernel void affine_after(device float* y [[buffer(0)]], constant Pair& p [[buffer(1)]],
                         device const float* x [[buffer(2)]], device const float* z [[buffer(3)]],
                         uint i [[thread_position_in_grid]]) {
  y[i] = float(p.scale) * x[i] + float(p.shift) * z[i];
}
"""


@pytest.mark.cuda
def test_profile_times_each_kernel_on_the_device():
    lib = cuda.compile_shader(_SCALARS)
    x = torch.randn(64, 64, device="cuda")
    y = torch.empty_like(x)
    with cuda.profile() as prof:
        for _ in range(3):
            lib.axpb(y, x, 2, 0.5, threads=[64, 64], group_size=[64, 1])
        with pytest.raises(RuntimeError, match="do not nest"):
            with cuda.profile():
                pass
    launches, us = prof.kernels()["axpb"]
    assert launches == 3 and 0 < us < 1e6
    assert prof.total_us() == us
    torch.testing.assert_close(y, 2 * x + 0.5)


_TG = r"""
#include <metal_stdlib>
using namespace metal;
kernel void tg_reverse(device float* x [[buffer(0)]], device half* h [[buffer(1)]],
                       device bfloat* b [[buffer(2)]], device atomic_uint* count [[buffer(3)]],
                       uint i [[thread_position_in_grid]], uint l [[thread_index_in_threadgroup]],
                       uint n [[threads_per_threadgroup]]) {
  threadgroup float t[256];
  t[l] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = t[n - 1 - l] * 3.0 + 0.1;
  h[i] = half(x[i]) * half(0.3);
  b[i] = bfloat(x[i]) / bfloat(7.0f);
  atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
}
"""


@pytest.mark.cuda
def test_threadgroup_memory_barrier_half_bfloat_atomics():
    n = 1000
    x = torch.randn(n, generator=torch.Generator().manual_seed(3))

    def args(dev):
        return [x.to(dev), torch.zeros(n, dtype=torch.float16, device=dev),
                torch.zeros(n, dtype=torch.bfloat16, device=dev),
                torch.zeros(1, dtype=torch.int32, device=dev)]

    cpu, gpu = _both(_TG, "tg_reverse", args, threads=n, group_size=256)
    for c, g in zip(cpu, gpu, strict=True):
        _same_bits(c, g)
    assert int(gpu[3]) == n


_MATRIX = r"""
#include <metal_stdlib>
using namespace metal;
kernel void mm(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
               device float* c [[buffer(2)]], uint sg [[simdgroup_index_in_threadgroup]]) {
  simdgroup_float8x8 x, y, z = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
  simdgroup_load(x, a + sg * 64, 8);
  simdgroup_load(y, b + sg * 64, 8, ulong2(0, 0), true);
  simdgroup_multiply_accumulate(z, x, y, z);
  simdgroup_store(z, c + sg * 64, 8);
}
"""


@pytest.mark.cuda
def test_simdgroup_matrix_8x8():
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(128, generator=gen), torch.randn(128, generator=gen)

    def args(dev):
        return [a.to(dev), b.to(dev), torch.zeros(128, device=dev)]

    cpu, gpu = _both(_MATRIX, "mm", args, threads=64, group_size=64)
    _same_bits(cpu[2], gpu[2])
    ref = a.view(2, 8, 8) @ b.view(2, 8, 8).transpose(1, 2) + 0.5
    torch.testing.assert_close(gpu[2].view(2, 8, 8), ref, rtol=1e-5, atol=1e-5)


_MATRIX_KERNELS = (pathlib.Path(__file__).parent / "simdgroup_matrix.metal").read_text()


def test_simdgroup_matrix_is_distributed_over_the_lanes():
    # Each lane holds its two elements (Apple's layout), never the whole tile. A tile loaded
    # from memory also keeps the lane's operands of a product (its row, its two columns), so a
    # product of loaded tiles is 16 fmas a lane with no exchange; a product's result used as a
    # factor has no such copy, and its operands come through the warp's scratch in dynamic
    # shared memory (float4 reads of a row of A and two rows of B^T), or by warp shuffles where
    # a launch gave no scratch.
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "static_assert(sizeof(simdgroup_float8x8) < 32 * sizeof(float), \"not the tile\");\n"
           + _MATRIX)
    ptx = cuda.compile_ptx(src)
    assert len(re.findall(r"fma\.rn\.f32", ptx)) == 16
    assert "%dynamic_smem_size" not in ptx and "shfl.sync" not in ptx
    assert ".local" not in ptx  # no per-lane tile spilled to local memory
    chained = _MATRIX.replace("simdgroup_multiply_accumulate(z, x, y, z);",
                              "simdgroup_multiply_accumulate(z, x, y, z);\n"
                              "  simdgroup_multiply_accumulate(z, z, y, z);")
    ptx = cuda.compile_ptx(chained)
    assert "%dynamic_smem_size" in ptx
    assert len(re.findall(r"ld\.shared\.v4\.f32", ptx)) == 6
    assert "shfl.sync.idx" in ptx
    assert ".local" not in ptx
    # thread_elements() is mapped: Apple's layout is the executor's own
    assert re.search(r"\.entry emu_k\d+_sg_elements\(", cuda.compile_ptx(_MATRIX_KERNELS))


def test_gemm_h_products_need_no_exchange_between_lanes():
    # gemm.h multiplies tiles it loaded from its threadgroup stages, so through the executor its
    # products are the lanes' own fmas: neither the scratch exchange nor the shuffles are left.
    # Both output blocks of float32 (32 x 32 and the wide 64 x 64) and complex64's.
    ptx = cuda.compile_ptx(_metal.load_source("common/gemm.metal"))
    for name in ("float32_tile32", "float32_tile64", "complex64_tile32"):
        body = re.search(rf"\.entry emu_k\d+_gemm_{name}\(.*?\n\}}\n", ptx, re.S).group(0)
        assert "fma.rn.f32" in body
        assert "%dynamic_smem_size" not in body and "shfl.sync" not in body, name
        assert ".local" not in body, name


def _gemm_args(M, N, K, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    A, B = torch.randn(M, K, generator=gen).to(dtype), torch.randn(K, N, generator=gen).to(dtype)

    def args(dev):
        return [A.to(dev), B.to(dev), torch.full((M, N), float("nan"), dtype=dtype, device=dev),
                N, K]
    return args


def _without_scratch(source, monkeypatch):
    """``source`` as a library of its own whose products exchange operands by warp shuffles
    (no scratch given to its launches)."""
    monkeypatch.setattr(cuda, "_MATRIX_SCRATCH_PER_WARP", 0)
    return source + "\n// the warp-shuffle path\n"


@pytest.mark.cuda
@pytest.mark.parametrize("name, dtype", [("sg_gemm_float", torch.float32),
                                         ("sg_gemm_half", torch.float16),
                                         ("sg_gemm_bfloat", torch.bfloat16),
                                         ("sg_gemm_tg", torch.float32)])
@pytest.mark.parametrize("M, N, K, group", [(32, 24, 48, 32), (16, 64, 32, 64), (40, 16, 16, 96)])
@pytest.mark.parametrize("exchange", ["scratch", "shuffles"])
def test_simdgroup_gemm_matches_emulator_bits(name, dtype, M, N, K, group, exchange, monkeypatch):
    if name == "sg_gemm_tg":
        group = 32  # one simdgroup per group: it uses thread_index_in_simdgroup as its index
    source = _MATRIX_KERNELS
    if exchange == "shuffles":
        source = _without_scratch(source, monkeypatch)
    cpu, gpu = _both(source, name, _gemm_args(M, N, K, dtype, M + N + K),
                     threads=32 * (M // 8) * (N // 8), group_size=group,
                     arg_casts={3: "int32", 4: "int32"})
    assert getattr(cuda.compile_shader(source), name)._matrix
    _same_bits(cpu[2], gpu[2])
    ref = cpu[0].double() @ cpu[1].double()
    assert float((gpu[2].double() - ref).abs().max() / ref.abs().max()) < {
        torch.float32: 1e-6, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]


@pytest.mark.cuda
def test_simdgroup_matrix_load_store_variants_match_emulator_bits():
    M16 = torch.randn(16, 16, generator=torch.Generator().manual_seed(7))

    def args(dev):
        return [M16.to(dev), torch.full((576,), -1.0, device=dev)]

    cpu, gpu = _both(_MATRIX_KERNELS, "sg_variants", args, threads=32, group_size=32)
    _same_bits(cpu[1], gpu[1])
    out = gpu[1]
    m = M16[3:11, 2:10]  # origin (x, y) = (2, 3)
    assert torch.equal(out[0:64].view(8, 8), m)
    assert torch.equal(out[64:128].view(8, 8), M16[:8, :8].T)
    assert torch.equal(out[128:192].view(8, 8), torch.eye(8) * 3)
    assert torch.equal(out[320:448].view(8, 16)[:, 8:], m)
    assert torch.all(out[320:448].view(8, 16)[:, :8] == -1.0)
    assert torch.equal(out[448:512].view(8, 8), m.T)


_PRODUCTS = r"""
#include <metal_stdlib>
using namespace metal;
// Every lane's products with operands of all its simdgroup's lanes, in a group of several
// simdgroups (each has its own scratch), chained so that a stale operand would show.
kernel void chain(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                  uint sg [[simdgroup_index_in_threadgroup]],
                  uint tg [[threadgroup_position_in_grid]],
                  uint nsg [[simdgroups_per_threadgroup]]) {
  const uint t = tg * nsg + sg;
  simdgroup_float8x8 x, y, z;
  simdgroup_load(x, a + t * 128, 8);
  simdgroup_load(y, a + t * 128 + 64, 8);
  simdgroup_multiply(z, x, y);
  for (int i = 0; i < 3; ++i) {
    simdgroup_multiply_accumulate(z, y, z, x);
    simdgroup_multiply_accumulate(y, z, x, y);
  }
  simdgroup_store(z, out + t * 128, 8);
  simdgroup_store(y, out + t * 128 + 64, 8);
}
"""


@pytest.mark.cuda
@pytest.mark.parametrize("exchange", ["scratch", "shuffles"])
@pytest.mark.parametrize("group", [32, 96, 1024])
def test_chained_products_in_many_simdgroups_match_emulator_bits(group, exchange, monkeypatch):
    groups = 3
    n = groups * group // 32 * 128
    a = torch.randn(n, generator=torch.Generator().manual_seed(group)) / 4
    source = _PRODUCTS if exchange == "scratch" else _without_scratch(_PRODUCTS, monkeypatch)

    def args(dev):
        return [a.to(dev), torch.full((n,), float("nan"), device=dev)]

    cpu, gpu = _both(source, "chain", args, threads=groups * group, group_size=group)
    _same_bits(cpu[1], gpu[1])
    assert torch.isfinite(gpu[1]).all()


@pytest.mark.cuda
def test_kernel_compiled_again_for_its_group_size_gives_the_same_bits():
    # A kernel short of registers at Metal's 1024-thread bound is compiled again, alone, for the
    # bound of the groups it is launched with; the arithmetic is the same.
    source = _PRODUCTS + "\n// compiled again\n"
    k = cuda.compile_shader(source).chain
    k._short_of_registers = True  # as the driver reports for LU's panel at 1024 threads
    x = torch.randn(4 * 128, generator=torch.Generator().manual_seed(11)) / 4

    def args(dev):
        return [x.to(dev), torch.full_like(x, float("nan"), device=dev)]

    cpu, gpu = _both(source, "chain", args, threads=128, group_size=64)
    assert set(k._bounded) == {None, 128}
    _same_bits(cpu[1], gpu[1])
    cpu, gpu = _both(source, "chain", args, threads=128, group_size=128)  # same bound
    assert set(k._bounded) == {None, 128}
    _same_bits(cpu[1], gpu[1])
    big = torch.randn(32 * 128, device="cuda") / 4
    k(big, torch.empty_like(big), threads=1024, group_size=1024)  # the library's compilation
    assert set(k._bounded) == {None, 128}


@pytest.mark.cuda
def test_a_kernel_that_fits_its_registers_is_not_compiled_again():
    k = cuda.compile_shader(_SCALARS).axpb  # a few registers, no local memory
    assert not k._short_of_registers
    x = torch.randn(6, 10, device="cuda")
    y = torch.empty_like(x)
    k(y, x, 2, 0.5, threads=[10, 6], group_size=[10, 1])
    assert list(k._bounded) == [None]
    torch.testing.assert_close(y, 2 * x + 0.5)


def test_a_kernel_compiles_alone_for_a_smaller_launch_bound():
    tr = cuda.translate_to_cuda(_MATRIX_KERNELS)
    full = cuda._compiled(tr, cuda.DEFAULT_PTX_ARCH).decode(errors="replace")
    one = cuda._compiled(tr, cuda.DEFAULT_PTX_ARCH,
                         ("EMU_ONLY_KERNEL=3", "EMU_GROUP_BOUND=128")).decode(errors="replace")
    assert len(re.findall(r"\.entry ", full)) == len(tr.kernels) > 1
    assert re.findall(r"\.entry (\w+)\(", one) == ["emu_k3_" + tr.kernels[3].host_name]
    assert re.search(r"\.maxntid 1024, 1, 1", full)
    assert re.search(r"\.maxntid 128, 1, 1", one)


@pytest.mark.cuda
def test_simdgroup_matrix_thread_elements_and_mixed_types_match_emulator_bits():
    M = torch.randn(8, 8, generator=torch.Generator().manual_seed(8))

    def elements(dev):
        return [M.to(dev), torch.full((64,), -1.0, device=dev), torch.zeros(128, device=dev)]

    cpu, gpu = _both(_MATRIX_KERNELS, "sg_elements", elements, threads=32, group_size=32)
    _same_bits(cpu[1], gpu[1])
    _same_bits(cpu[2], gpu[2])
    first = [(4 * ((lane >> 4) & 1) + ((lane >> 1) & 3), 4 * ((lane >> 3) & 1) + 2 * (lane & 1))
             for lane in range(32)]
    assert torch.equal(gpu[1].view(32, 2)[:, 0], torch.stack([M[r, c] for r, c in first]))
    # a tile changed through thread_elements() is multiplied with its new elements
    torch.testing.assert_close(gpu[2][64:].view(8, 8), (2 * M) @ M)
    gen = torch.Generator().manual_seed(9)
    A, B = torch.randn(8, 8, generator=gen).half(), torch.randn(10, 16, generator=gen).half()
    C = torch.randn(8, 8, generator=gen)

    def mixed(dev):
        return [A.to(dev), B.to(dev), C.to(dev), torch.full((9, 12), -7.0, device=dev)]

    cpu, gpu = _both(_MATRIX_KERNELS, "sg_mixed", mixed, threads=32, group_size=32)
    _same_bits(cpu[3], gpu[3])


@pytest.mark.cuda
def test_kernel_properties_and_errors():
    lib = cuda.compile_shader(_TG)
    k = lib.tg_reverse
    assert k.thread_execution_width == 32
    assert k.max_threads_per_threadgroup == 1024
    assert k.static_thread_group_memory_length >= 1024
    assert dir(lib) == ["tg_reverse"]
    with pytest.raises(RuntimeError, match="Failed to create function state object for: nope"):
        lib.nope  # noqa: B018
    bufs = [torch.zeros(4, device="cuda"), torch.zeros(4, dtype=torch.float16, device="cuda"),
            torch.zeros(4, dtype=torch.bfloat16, device="cuda"),
            torch.zeros(1, dtype=torch.int32, device="cuda")]
    with pytest.raises(ValueError, match="Threadgroup size exceeds 1024 limit"):
        k(*bufs, threads=4, group_size=2048)
    with pytest.raises(RuntimeError, match="reads buffer 1 but only 1 arguments"):
        k(bufs[0], threads=4)
    with pytest.raises(TypeError, match="CUDA tensors"):
        k(torch.zeros(4), *bufs[1:], threads=4)


# ---------------------------------------------------------------- the library's kernels

@pytest.fixture
def cuda_metal(monkeypatch):
    """mpslinalg's metal host code running CUDA tensors through the CUDA executor (the
    opt-in $MPSLINALG_METAL_ON_CUDA)."""
    monkeypatch.setenv(_metal.METAL_ON_CUDA_VAR, "1")


def _matrices(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
    return torch.randn(shape, generator=gen)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 64, 64), (2, 100, 70), (1, 130, 130),
                                   (64, 64, 64), (1, 300, 300)])
def test_lu_factor_matches_emulator(cuda_metal, shape, dtype):
    from mpslinalg.linalg import lu_metal as _lu_metal

    A = _matrices(shape, dtype, sum(shape))
    ref = _lu_metal.lu_factor_metal(A)
    got = [t.cpu() for t in _lu_metal.lu_factor_metal(A.cuda())]
    _same_bits(ref[1], got[1])  # pivots
    _same_bits(ref[2], got[2])  # info
    torch.testing.assert_close(ref[0], got[0], rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("n, k", [(5, 3), (40, 1), (130, 2), (130, 40), (300, 1)])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_matches_emulator(cuda_metal, n, k, dtype, adjoint):
    from mpslinalg.linalg import lu_metal as _lu_metal

    A = _matrices((2, n, n), dtype, n) + 4 * torch.eye(n)
    B = _matrices((2, n, k), dtype, n + k)
    LU, piv, _ = _lu_metal.lu_factor_metal(A)
    ref = _lu_metal.lu_solve_metal(LU, piv, B, adjoint=adjoint)
    got = _lu_metal.lu_solve_metal(LU.cuda(), piv.cuda(), B.cuda(), adjoint=adjoint).cpu()
    torch.testing.assert_close(ref, got, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("n", [40, 100, 300])
def test_cholesky_matches_emulator(cuda_metal, n, dtype):
    """The Cholesky kernels on the executor (n > 64: chol_potf2, the right-side trsm_diag of
    the panel, chol_update, which also factors the next diagonal block; cholesky_inverse: the
    triangular inverse, chol_lauum) give the
    emulator's results, info and NaN of a failing minor included."""
    from mpslinalg.linalg import cholesky_metal

    X = _matrices((2, n, n), dtype, n)
    A = X @ X.mH / n + torch.eye(n)
    A[1, n // 2, n // 2] = -1.0  # the leading minor of order n // 2 + 1 fails
    ref = cholesky_metal.cholesky_metal(A, False)
    got = [t.cpu() for t in cholesky_metal.cholesky_metal(A.cuda(), False)]
    _same_bits(ref[1], got[1])  # info
    torch.testing.assert_close(ref[0], got[0], rtol=1e-5, atol=1e-5, equal_nan=True)
    L = ref[0][:1]
    inverse = cholesky_metal.cholesky_inverse_metal(L.cuda(), False).cpu()
    torch.testing.assert_close(cholesky_metal.cholesky_inverse_metal(L, False), inverse,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_double_float_selftest_on_the_gpu(cuda_metal):
    """The error terms of metal/common/double_float.h survive NVRTC's compilation."""
    from mpslinalg.linalg import refine_metal

    rows = refine_metal.selftest(torch.device("cuda"))
    assert all(r.ok for r in rows), [r for r in rows if not r.ok]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_refined_solve_matches_emulator(cuda_metal, dtype):
    from mpslinalg.linalg import refine_metal
    from mpslinalg.testing import matrix_with_spread

    A = matrix_with_spread(40, 1e5, dtype, batch=(2,), seed=3)
    B = _matrices((2, 40, 3), torch.complex64 if dtype.is_complex else torch.float32, 5)
    ref = refine_metal.solve_refined(A, B.to(dtype))
    got = refine_metal.solve_refined(A.cuda(), B.to(dtype).cuda())
    _same_bits(ref.info, got.info.cpu())
    torch.testing.assert_close(ref.X, got.X.cpu(), rtol=1e-13, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_small_kernels_match_emulator(cuda_metal, n, dtype):
    from mpslinalg.small import dispatch as si

    A = _matrices((1000, n, n), dtype, n)
    A[0] = 0  # a singular matrix: info and the zero-pivot paths
    B = _matrices((1000, n, 3), dtype, n + 1)
    for op, args in [(si._metal_inv, (A,)), (si._metal_solve, (A, B)), (si._metal_det, (A,)),
                     (si._metal_slogdet, (A,))]:
        ref = op(*args)
        got = op(*(a.cuda() for a in args))
        ref = ref if isinstance(ref, tuple) else (ref,)
        got = got if isinstance(got, tuple) else (got,)
        for r, g in zip(ref, got, strict=True):
            torch.testing.assert_close(r, g.cpu(), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("shape", [(1000, 3, 3), (4, 32, 32), (1, 64, 64), (1, 100, 100)])
def test_eig_accurate_on_the_cuda_executor(cuda_metal, shape, dtype):
    """The eig kernels under real concurrency (both kernels: 64 and 100 take device memory):
    converged, the LAPACK ratios of the emulator's tests, exact conjugate pairs, and the
    eigenvalues-only run giving the same bits as the full one, as in the emulator."""
    from mpslinalg.cases.eig import conjugate_pairs_exact, eig_ratios
    from mpslinalg.linalg import eig_metal as _eig_metal

    A = _matrices(shape, dtype, sum(shape))
    w, V, info = (t.cpu() for t in _eig_metal.eig_metal(A.cuda(), vectors=True))
    assert (info == 0).all()
    assert conjugate_pairs_exact(A, w, V)
    assert max(eig_ratios(A, w, V).values()) < 30
    _same_bits(w, _eig_metal.eig_metal(A.cuda(), vectors=False)[0].cpu())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int32])
def test_copy_strided_matches_emulator(cuda_metal, dtype):
    from mpslinalg._core.copy import contiguous

    x = _matrices((6, 7, 5), torch.float32, 1).to(dtype) if dtype != torch.complex64 else \
        _matrices((6, 7, 5), dtype, 1)
    view = x.transpose(0, 2)[:, 1:6:2]
    _same_bits(contiguous(view), contiguous(view.cuda()).cpu())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("m, n, k, op_a, op_b", [(70, 45, 40, "N", "N"), (33, 64, 17, "T", "C")])
def test_shared_gemm_matches_emulator_bits(cuda_metal, m, n, k, op_a, op_b, dtype):
    # metal/common/gemm.h: simdgroup products on tiles staged in threadgroup memory, in groups of
    # 128 threads (the executor compiles the kernel again for them where it was short of
    # registers at 1024); every element summed in the emulator's order
    from mpslinalg.linalg import gemm_metal as _gemm

    A = _matrices((2, *((m, k) if op_a == "N" else (k, m))), dtype, m)
    B = _matrices((2, *((k, n) if op_b == "N" else (n, k))), dtype, n)
    C = _matrices((2, m, n), dtype, k)
    ref = _gemm.gemm_metal(A, B, C, op_a=op_a, op_b=op_b, alpha=-1.0, beta=1.0)
    got = _gemm.gemm_metal(A.cuda(), B.cuda(), C.cuda(), op_a=op_a, op_b=op_b, alpha=-1.0,
                           beta=1.0)
    _same_bits(ref, got.cpu())


@pytest.mark.cuda
def test_pivots_to_permutation_matches_emulator(cuda_metal):
    from mpslinalg.linalg import lu_metal as _lu_metal

    _, piv, _ = _lu_metal.lu_factor_metal(_matrices((300, 9, 7), torch.float32, 2))
    ref = _lu_metal.pivots_to_permutation_metal(piv, 9)
    _same_bits(ref, _lu_metal.pivots_to_permutation_metal(piv.cuda(), 9).cpu())


def test_parameter_block_layout():
    # cuda_prelude.cuh static_asserts the same numbers for emu::Args
    assert (cuda._ARGS_SIZE, cuda._IN_BLOB_OFFSET, cuda._BLOB_OFFSET) == (2336, 248, 288)
