"""The calling convention of torch.mps.compile_shader, mirrored by the emulator."""

import re

import numpy as np
import pytest
import torch

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
using namespace metal;

kernel void fill_index(device float* out [[buffer(0)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = float(i);
}

// Buffer indices are given out of parameter order: Python position = index.
kernel void reordered(constant float& scale [[buffer(2)]],
                      device float* out [[buffer(0)]],
                      device const float* x [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    out[i] = x[i] * scale;
}

// No [[buffer(n)]]: indices are assigned in parameter order.
kernel void implicit_index(device const float* x,
                           device float* out,
                           constant float& add,
                           uint i [[thread_position_in_grid]]) {
    out[i] = x[i] + add;
}

kernel void read_long(device long* out [[buffer(0)]],
                      constant long& v [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_int(device int* out [[buffer(0)]],
                     constant int& v [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_float(device float* out [[buffer(0)]],
                       constant float& v [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_half(device half* out [[buffer(0)]],
                      constant half& v [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_bfloat(device bfloat* out [[buffer(0)]],
                        constant bfloat& v [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_short(device short* out [[buffer(0)]],
                       constant short& v [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_char(device char* out [[buffer(0)]],
                      constant char& v [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_uchar(device uchar* out [[buffer(0)]],
                       constant uchar& v [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v;
}

kernel void read_bool(device int* out [[buffer(0)]],
                      constant bool& v [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = v ? 1 : 0;
}

kernel void copy_longs(device long* out [[buffer(0)]],
                       constant long* v [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = v[i];
}

kernel void copy_floats(device float* out [[buffer(0)]],
                        constant float* v [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    out[i] = v[i];
}

kernel void copy_ints(device int* out [[buffer(0)]],
                      constant int* v [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    out[i] = v[i];
}

kernel void copy_halfs(device half* out [[buffer(0)]],
                       constant half* v [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = v[i];
}

// Two scalars of different casts in one call.
kernel void mixed_casts(device float* out [[buffer(0)]],
                        constant half& h [[buffer(1)]],
                        constant int& n [[buffer(2)]],
                        constant float& f [[buffer(3)]],
                        uint i [[thread_position_in_grid]]) {
    if (i == 0) { out[0] = float(h); out[1] = float(n); out[2] = f; }
}

// Strided access to a non-contiguous view: the kernel receives the stride.
kernel void strided_scale(device float* x [[buffer(0)]],
                          constant long& stride [[buffer(1)]],
                          constant float& s [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
    x[i * stride] *= s;
}

kernel void dtypes(device half* h [[buffer(0)]],
                   device bfloat* b [[buffer(1)]],
                   device float2* c [[buffer(2)]],
                   device bool* flags [[buffer(3)]],
                   device long* l [[buffer(4)]],
                   device uchar* u8 [[buffer(5)]],
                   device short* s16 [[buffer(6)]],
                   uint i [[thread_position_in_grid]]) {
    h[i] = h[i] * 2.0h;
    b[i] = b[i] + b[i];
    c[i] = float2(-c[i].y, c[i].x);     // multiply by 1j
    flags[i] = !flags[i];
    l[i] = l[i] * 3 + 1;
    u8[i] = u8[i] + 200;                 // wraps modulo 256
    s16[i] = -s16[i];
}

// Records the dispatch geometry seen by every thread.
kernel void geometry1(device uint* tpt [[buffer(0)]],
                      device uint* dtpt [[buffer(1)]],
                      device uint* tgs [[buffer(2)]],
                      uint i [[thread_position_in_grid]],
                      uint t [[threads_per_threadgroup]],
                      uint d [[dispatch_threads_per_threadgroup]],
                      uint g [[threadgroups_per_grid]]) {
    tpt[i] = t;
    dtpt[i] = d;
    tgs[i] = g;
}

kernel void geometry2(device uint* out [[buffer(0)]],
                      constant uint& width [[buffer(1)]],
                      uint2 p [[thread_position_in_grid]],
                      uint2 t [[threads_per_threadgroup]],
                      uint2 d [[dispatch_threads_per_threadgroup]],
                      uint2 g [[threadgroups_per_grid]]) {
    device uint* o = out + 6 * (p.y * width + p.x);
    o[0] = t.x; o[1] = t.y; o[2] = d.x; o[3] = d.y; o[4] = g.x; o[5] = g.y;
}

[[max_total_threads_per_threadgroup(256)]]
kernel void capped(device uint* tpt [[buffer(0)]],
                   uint i [[thread_position_in_grid]],
                   uint t [[threads_per_threadgroup]]) {
    tpt[i] = t;
}

kernel void uses_tg_memory(device float* out [[buffer(0)]],
                           uint i [[thread_position_in_grid]],
                           uint l [[thread_position_in_threadgroup]]) {
    threadgroup float a[64];
    threadgroup int b[32];
    a[l % 64] = float(i);
    b[l % 32] = int(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = a[l % 64] + float(b[l % 32]) * 0.0f;
}

// Not a kernel: must not be listed in dir(library).
inline float helper_not_a_kernel(float x) { return x + 1.0f; }

template <typename T>
kernel void axpy(device T* y [[buffer(0)]],
                 device const T* x [[buffer(1)]],
                 constant float& a [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    y[i] = static_cast<T>(a * float(x[i]) + float(y[i]));
}

template [[host_name("axpy_float")]] kernel void axpy<float>(
    device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
    constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]);
template [[host_name("axpy_half")]] kernel void axpy<half>(
    device half*, device const half*, constant float&, uint);

// Buffer indices with a gap: Python positions 1 and 2 are bound but unused.
kernel void gapped(device float* out [[buffer(0)]],
                   constant float& v [[buffer(3)]],
                   uint i [[thread_position_in_grid]]) {
    out[i] = v;
}

// Many arguments of mixed kinds (Metal allows 31 buffers).
kernel void many_args(device float* out [[buffer(0)]],
                      constant float& a1 [[buffer(1)]], constant long& a2 [[buffer(2)]],
                      constant float& a3 [[buffer(3)]], constant long& a4 [[buffer(4)]],
                      constant float& a5 [[buffer(5)]], constant long& a6 [[buffer(6)]],
                      constant float& a7 [[buffer(7)]], constant long& a8 [[buffer(8)]],
                      constant float& a9 [[buffer(9)]], constant long& a10 [[buffer(10)]],
                      constant float& a11 [[buffer(11)]], constant long& a12 [[buffer(12)]],
                      constant float& a13 [[buffer(13)]], constant long& a14 [[buffer(14)]],
                      constant float& a15 [[buffer(15)]], constant long& a16 [[buffer(16)]],
                      constant float& a17 [[buffer(17)]], constant long& a18 [[buffer(18)]],
                      constant float& a19 [[buffer(19)]], constant long& a20 [[buffer(20)]],
                      constant float& a21 [[buffer(21)]], constant long& a22 [[buffer(22)]],
                      constant float& a23 [[buffer(23)]], constant long& a24 [[buffer(24)]],
                      constant float& a25 [[buffer(25)]], constant long& a26 [[buffer(26)]],
                      constant float& a27 [[buffer(27)]], constant long& a28 [[buffer(28)]],
                      constant float* a29 [[buffer(29)]],
                      device const long* a30 [[buffer(30)]],
                      uint i [[thread_position_in_grid]]) {
    float f = a1 + a3 + a5 + a7 + a9 + a11 + a13 + a15 + a17 + a19 + a21 + a23 + a25 + a27;
    long l = a2 + a4 + a6 + a8 + a10 + a12 + a14 + a16 + a18 + a20 + a22 + a24 + a26 + a28;
    out[i] = f + float(l) * 100.0f + a29[i] * 10000.0f + float(a30[i]) * 1000000.0f;
}

// Vector-typed constant references filled from Python lists.
kernel void vec_refs(device float* out [[buffer(0)]],
                     constant float4& f [[buffer(1)]],
                     constant int3& n [[buffer(2)]],
                     constant long2& l [[buffer(3)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = f[i] + float(n[i % 3]) * 10.0f + float(l[i % 2]) * 100.0f;
}

// Byte access to a tensor of any dtype (as torch allows).
kernel void flip_sign_bytes(device uchar* bytes [[buffer(0)]],
                            uint i [[thread_position_in_grid]]) {
    if (i % 4 == 3) bytes[i] ^= uchar(0x80);
}

kernel void version_probe(device int* out [[buffer(0)]],
                          uint i [[thread_position_in_grid]]) {
    out[i] = __METAL_VERSION__;
}
"""

HOST_NAMES = {
    "fill_index",
    "reordered",
    "implicit_index",
    "read_long",
    "read_int",
    "read_float",
    "read_half",
    "read_bfloat",
    "read_short",
    "read_char",
    "read_uchar",
    "read_bool",
    "copy_longs",
    "copy_floats",
    "copy_ints",
    "copy_halfs",
    "mixed_casts",
    "strided_scale",
    "dtypes",
    "geometry1",
    "geometry2",
    "capped",
    "uses_tg_memory",
    "axpy_float",
    "axpy_half",
    "version_probe",
    "gapped",
    "many_args",
    "flip_sign_bytes",
    "vec_refs",
}


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


# ---------------------------------------------------------------- library object


def test_dir_lists_exactly_the_host_names(lib):
    names = set(dir(lib))
    assert HOST_NAMES <= names
    assert "helper_not_a_kernel" not in names
    assert "axpy" not in names  # only instantiations have host names


def test_unknown_kernel_raises_runtime_error_naming_it(lib):
    with pytest.raises(RuntimeError) as ei:
        _ = lib.no_such_kernel_xyz
    assert "no_such_kernel_xyz" in str(ei.value)
    # Documented extension: the error is also an AttributeError, so hasattr works.
    assert not hasattr(lib, "no_such_kernel_xyz")
    assert hasattr(lib, "fill_index")


def test_kernel_properties(lib):
    k = lib.fill_index
    assert k.thread_execution_width == 32
    assert k.max_threads_per_threadgroup == 1024
    assert k.static_thread_group_memory_length == 0
    assert lib.capped.max_threads_per_threadgroup == 256
    assert lib.uses_tg_memory.static_thread_group_memory_length == 64 * 4 + 32 * 4


def test_call_returns_none_and_fills(lib):
    out = torch.full((37,), -1.0)
    assert lib.fill_index(out) is None
    assert torch.equal(out, torch.arange(37, dtype=torch.float32))


def test_kernel_objects_are_reusable(lib):
    k = lib.fill_index
    a, b = torch.zeros(5), torch.zeros(9)
    k(a)
    k(b)
    assert torch.equal(a, torch.arange(5.0)) and torch.equal(b, torch.arange(9.0))


def test_compile_shader_without_kernels_lists_nothing():
    lib = emu.compile_shader("#include <metal_stdlib>\ninline int f(int x) { return x; }\n")
    assert [n for n in dir(lib) if not n.startswith("_")] == []


# ---------------------------------------------------------------- argument binding


def test_position_is_buffer_index(lib):
    x = torch.arange(10, dtype=torch.float32)
    out = torch.zeros(10)
    lib.reordered(out, x, 2.5)
    assert torch.equal(out, x * 2.5)


def test_implicit_buffer_indices_follow_parameter_order(lib):
    x = torch.arange(6, dtype=torch.float32)
    out = torch.zeros(6)
    lib.implicit_index(x, out, 0.5)
    assert torch.equal(out, x + 0.5)


@pytest.mark.parametrize("value", [0, 1, -1, 2**40 + 5, -(2**62), 2**63 - 1])
def test_python_int_is_bound_as_int64(lib, value):
    out = torch.zeros(1, dtype=torch.int64)
    lib.read_long(out, value)
    assert out.item() == value


def test_python_int_read_as_int_uses_low_four_bytes(lib):
    # Little-endian: a constant int& sees the low half of the int64.
    out = torch.zeros(1, dtype=torch.int32)
    lib.read_int(out, 123456)
    assert out.item() == 123456
    lib.read_int(out, -7)
    assert out.item() == -7


def test_bool_is_bound_as_int64(lib):
    out = torch.zeros(1, dtype=torch.int64)
    lib.read_long(out, True)
    assert out.item() == 1
    lib.read_long(out, False)
    assert out.item() == 0
    flag = torch.zeros(1, dtype=torch.int32)
    lib.read_bool(flag, True)  # first byte of int64 1 reads as true
    assert flag.item() == 1


@pytest.mark.parametrize("value", [0.1, -3.75, 1e30, 1.0 / 3.0, np.float64(2.2)])
def test_python_float_is_rounded_to_float32(lib, value):
    out = torch.zeros(1)
    lib.read_float(out, value)
    assert out.numpy()[0] == np.float32(value)


def test_list_of_ints_is_int64_array(lib):
    vals = [3, -1, 2**40, 7, 0]
    out = torch.zeros(5, dtype=torch.int64)
    lib.copy_longs(out, vals)
    assert out.tolist() == vals
    out2 = torch.zeros(3, dtype=torch.int64)
    lib.copy_longs(out2, (4, 5, 6))  # tuples too
    assert out2.tolist() == [4, 5, 6]


def test_list_of_floats_is_float32_array(lib):
    vals = [0.1, 2.5, -1e-3, 7.0]
    out = torch.zeros(4)
    lib.copy_floats(out, vals)
    np.testing.assert_array_equal(out.numpy(), np.array(vals, dtype=np.float32))


def test_float_list_converts_later_ints(lib):
    out = torch.zeros(3)
    lib.copy_floats(out, [1.5, 2, 3])
    assert out.tolist() == [1.5, 2.0, 3.0]


def test_zero_dim_tensors_are_bound_by_value(lib):
    out = torch.zeros(1)
    lib.read_float(out, torch.tensor(1.25, dtype=torch.float32))
    assert out.item() == 1.25
    outi = torch.zeros(1, dtype=torch.int32)
    lib.read_int(outi, torch.tensor(-42, dtype=torch.int32))
    assert outi.item() == -42
    outh = torch.zeros(1, dtype=torch.float16)
    lib.read_half(outh, torch.tensor(0.333, dtype=torch.float16))
    assert outh.item() == torch.tensor(0.333, dtype=torch.float16).item()


def test_zero_dim_tensor_bound_to_pointer_is_a_buffer(lib):
    # An MPS 0-dim tensor is a device buffer: writes through a pointer are visible.
    out = torch.full((), -1.0)
    lib.fill_index(out, threads=1)
    assert out.item() == 0.0
    out = torch.full((), 5.0)
    lib.read_float(out, 2.5)
    assert out.item() == 2.5
    assert out.dim() == 0


def test_first_tensor_after_a_scalar_sets_default_threads(lib):
    # reordered: buffer 0 is `out`; the first *tensor* argument decides threads.
    x = torch.arange(12, dtype=torch.float32)
    out = torch.zeros(12)
    lib.reordered(out, x, 1.0)
    assert torch.equal(out, x)


def test_default_threads_is_numel_of_first_tensor(lib):
    out = torch.full((3, 5), -1.0)
    lib.fill_index(out)
    assert torch.equal(out.flatten(), torch.arange(15.0))


def test_explicit_threads_limit_the_grid(lib):
    out = torch.full((20,), -1.0)
    lib.fill_index(out, threads=7)
    assert torch.equal(out[:7], torch.arange(7.0))
    assert torch.all(out[7:] == -1.0)
    out[:] = -1
    lib.fill_index(out, threads=[9])
    assert torch.equal(out[:9], torch.arange(9.0)) and torch.all(out[9:] == -1)


def test_buffer_index_gaps(lib):
    out = torch.zeros(4)
    lib.gapped(out, 111, [1.0, 2.0], 2.5)
    assert torch.all(out == 2.5)


def test_thirty_one_buffers(lib):
    out = torch.zeros(3)
    scalars = []
    for k in range(1, 29):
        scalars.append(float(k) * 0.5 if k % 2 else k)
    lib.many_args(out, *scalars, [1.0, 2.0, 3.0], torch.tensor([4, 5, 6]))
    f = sum(float(k) * 0.5 for k in range(1, 29, 2))
    l = sum(range(2, 29, 2))
    exp = [f + l * 100 + a * 10000 + b * 1000000 for a, b in ((1, 4), (2, 5), (3, 6))]
    np.testing.assert_array_equal(out.numpy(), np.array(exp, np.float32))


def test_threads_and_group_as_tuples_and_ints(lib):
    tpt, dtpt, tgs = (torch.zeros(50, dtype=torch.int32) for _ in range(3))
    lib.geometry1(tpt, dtpt, tgs, threads=(50,), group_size=16)
    assert torch.all(tgs == 4) and torch.all(dtpt == 16)
    lib.geometry1(tpt, dtpt, tgs, threads=50, group_size=(25,))
    assert torch.all(tgs == 2) and torch.all(tpt == 25)


# ---------------------------------------------------------------- arg_casts


@pytest.mark.parametrize(
    "cast,kernel,dtype,value,expected",
    [
        ("fp16", "read_half", torch.float16, 0.1, torch.tensor(0.1, dtype=torch.float16).item()),
        ("fp16", "read_half", torch.float16, 3, 3.0),  # int -> half goes through float
        (
            "bf16",
            "read_bfloat",
            torch.bfloat16,
            0.1,
            torch.tensor(0.1, dtype=torch.bfloat16).item(),
        ),
        ("int32", "read_int", torch.int32, 2.7, 2),  # float -> int truncates
        ("int32", "read_int", torch.int32, -2.7, -2),
        ("int32", "read_int", torch.int32, -123456, -123456),
        ("int16", "read_short", torch.int16, -300, -300),
        ("int8", "read_char", torch.int8, -5, -5),
        ("uint8", "read_uchar", torch.uint8, 250, 250),
    ],
)
def test_arg_casts_string(lib, cast, kernel, dtype, value, expected):
    out = torch.zeros(1, dtype=dtype)
    getattr(lib, kernel)(out, value, arg_casts=cast)
    assert out.item() == expected


def test_arg_casts_dict_per_index(lib):
    out = torch.zeros(3)
    lib.mixed_casts(out, 0.1, 7, 0.1, arg_casts={1: "fp16", 2: "int32"})
    assert out[0].item() == float(np.float32(np.float16(0.1)))
    assert out[1].item() == 7.0
    assert out[2].item() == float(np.float32(0.1))


def test_arg_casts_apply_to_lists_elementwise(lib):
    out = torch.zeros(4, dtype=torch.int32)
    lib.copy_ints(out, [1, -2, 3, 2**20], arg_casts="int32")
    assert out.tolist() == [1, -2, 3, 2**20]
    outh = torch.zeros(3, dtype=torch.float16)
    lib.copy_halfs(outh, [0.1, 1.5, -2.0], arg_casts={1: "fp16"})
    assert outh.tolist() == torch.tensor([0.1, 1.5, -2.0], dtype=torch.float16).tolist()


def test_arg_casts_ignored_for_tensor_positions(lib):
    out = torch.zeros(1, dtype=torch.int32)
    lib.read_int(out, 9, arg_casts={0: "fp16", 1: "int32"})
    assert out.item() == 9


def test_unsupported_cast_is_rejected(lib):
    out = torch.zeros(1)
    with pytest.raises((RuntimeError, ValueError, TypeError), match=r"(?i)cast"):
        lib.read_float(out, 1.0, arg_casts="fp64")


# ---------------------------------------------------------------- tensor bindings


def test_storage_offset_view_is_bound_at_its_first_element(lib):
    base = torch.arange(100, dtype=torch.float32)
    x = base[10:60]
    out_base = torch.full((80,), -1.0)
    out = out_base[5:55]
    lib.reordered(out, x, 2.0)
    assert torch.equal(out, torch.arange(10, 60, dtype=torch.float32) * 2)
    assert torch.all(out_base[:5] == -1) and torch.all(out_base[55:] == -1)
    assert torch.equal(base, torch.arange(100, dtype=torch.float32))


def test_non_contiguous_view_binds_data_ptr(lib):
    m = torch.arange(40, dtype=torch.float32).reshape(8, 5)
    col = m[:, 2]  # storage offset 2, stride 5
    expected = m.clone()
    expected[:, 2] *= -1
    lib.strided_scale(col, col.stride(0), -1.0)
    assert torch.equal(m, expected)


def test_tensor_dtypes_map_to_metal_types(lib):
    n = 11
    h = torch.linspace(-3, 3, n, dtype=torch.float16)
    b = torch.linspace(-3, 3, n, dtype=torch.bfloat16)
    c = torch.randn(n, dtype=torch.complex64)
    flags = torch.arange(n) % 3 == 0
    lng = torch.arange(n, dtype=torch.int64) * (2**33)
    u8 = torch.arange(n, dtype=torch.uint8) * 20
    s16 = torch.arange(n, dtype=torch.int16) - 5
    h0, b0, c0, f0, l0, u0, s0 = (t.clone() for t in (h, b, c, flags, lng, u8, s16))
    lib.dtypes(h, b, c, flags, lng, u8, s16)
    assert torch.equal(h, h0 * 2)
    assert torch.equal(b, b0 + b0)
    assert torch.equal(c, c0 * 1j)
    assert torch.equal(flags, ~f0)
    assert torch.equal(lng, l0 * 3 + 1)
    assert torch.equal(u8, u0 + 200)  # uint8 wraps like uchar
    assert torch.equal(s16, -s0)


def test_vector_constant_references_from_lists(lib):
    out = torch.zeros(4)
    # int3 occupies 16 bytes: four int32 values (the fourth is padding).
    lib.vec_refs(out, [1.0, 2.0, 3.0, 4.0], [1, 2, 3, 0], [5, 6], arg_casts={2: "int32"})
    assert out.tolist() == [1 + 10 + 500, 2 + 20 + 600, 3 + 30 + 500, 4 + 10 + 600]
    # Without the cast the ints are int64: the wrong layout for an int3.
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"(?i)\bn\b|buffer.?2"):
        lib.vec_refs(out, [1.0, 2.0, 3.0, 4.0], [1, 2, 3], [5, 6])
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"(?i)\bf\b|buffer.?1"):
        lib.vec_refs(out, [1.0, 2.0, 3.0], [1, 2, 3, 0], [5, 6], arg_casts={2: "int32"})


def test_any_tensor_can_be_bound_as_bytes(lib):
    x = torch.tensor([1.5, -2.0, 0.0, 3.25])
    lib.flip_sign_bytes(x, threads=16)
    assert x.tolist() == [-1.5, 2.0, -0.0, -3.25]
    c = torch.tensor([1 + 2j], dtype=torch.complex64)
    lib.flip_sign_bytes(c, threads=8)
    assert c.item() == -1 - 2j


def test_template_instantiations_by_host_name(lib):
    y = torch.arange(8, dtype=torch.float32)
    x = torch.ones(8)
    lib.axpy_float(y, x, 3.0)
    assert torch.equal(y, torch.arange(8.0) + 3)
    yh = torch.arange(8, dtype=torch.float16)
    lib.axpy_half(yh, torch.ones(8, dtype=torch.float16), 0.5)
    assert torch.equal(yh, torch.arange(8, dtype=torch.float16) + 0.5)


# ---------------------------------------------------------------- dispatch geometry


def _geometry1(lib, threads, group_size=None, kernel="geometry1"):
    n = threads
    tpt = torch.zeros(n, dtype=torch.int32)
    dtpt = torch.zeros(n, dtype=torch.int32)
    tgs = torch.zeros(n, dtype=torch.int32)
    kw = {} if group_size is None else {"group_size": group_size}
    lib.geometry1(tpt, dtpt, tgs, threads=threads, **kw)
    return tpt.numpy(), dtpt.numpy(), tgs.numpy()


def test_default_group_1d_small_grid(lib):
    tpt, dtpt, tgs = _geometry1(lib, 100)
    assert np.all(tpt == 100) and np.all(dtpt == 100) and np.all(tgs == 1)


def test_default_group_1d_large_grid_has_partial_last_group(lib):
    n = 2500
    tpt, dtpt, tgs = _geometry1(lib, n)
    expected = np.where(np.arange(n) < 2048, 1024, n - 2048)
    np.testing.assert_array_equal(tpt, expected)
    assert np.all(dtpt == 1024) and np.all(tgs == 3)


def test_explicit_group_1d_partial_edge(lib):
    tpt, dtpt, tgs = _geometry1(lib, 50, group_size=16)
    np.testing.assert_array_equal(tpt, np.where(np.arange(50) < 48, 16, 2))
    assert np.all(dtpt == 16) and np.all(tgs == 4)
    tpt, dtpt, tgs = _geometry1(lib, 50, group_size=[7])
    np.testing.assert_array_equal(tpt, np.where(np.arange(50) < 49, 7, 1))


def test_default_group_respects_kernel_max(lib):
    n = 600
    tpt = torch.zeros(n, dtype=torch.int32)
    lib.capped(tpt)
    np.testing.assert_array_equal(tpt.numpy(), np.where(np.arange(n) < 512, 256, 88))


def test_default_group_2d_is_max_by_one(lib):
    w, h = 5, 7
    out = torch.zeros(h * w * 6, dtype=torch.int32)
    lib.geometry2(out, w, threads=(w, h), arg_casts={1: "int32"})
    rec = out.numpy().reshape(h, w, 6)
    # group (1024, 1) clipped to the 5-wide grid; 7 groups along y.
    np.testing.assert_array_equal(rec[..., 0], 5)
    np.testing.assert_array_equal(rec[..., 1], 1)
    np.testing.assert_array_equal(rec[..., 2], 1024)
    np.testing.assert_array_equal(rec[..., 3], 1)
    np.testing.assert_array_equal(rec[..., 4], 1)
    np.testing.assert_array_equal(rec[..., 5], 7)


def test_explicit_group_2d_partial_edges(lib):
    w, h, gx, gy = 13, 10, 4, 3
    out = torch.zeros(h * w * 6, dtype=torch.int32)
    lib.geometry2(out, w, threads=[w, h], group_size=[gx, gy], arg_casts={1: "int32"})
    rec = out.numpy().reshape(h, w, 6)
    xs, ys = np.meshgrid(np.arange(w), np.arange(h))
    np.testing.assert_array_equal(rec[..., 0], np.minimum(gx, w - (xs // gx) * gx))
    np.testing.assert_array_equal(rec[..., 1], np.minimum(gy, h - (ys // gy) * gy))
    np.testing.assert_array_equal(rec[..., 2], gx)
    np.testing.assert_array_equal(rec[..., 3], gy)
    np.testing.assert_array_equal(rec[..., 4], 4)
    np.testing.assert_array_equal(rec[..., 5], 4)


def test_group_larger_than_max_is_value_error(lib):
    out = torch.zeros(2048)
    with pytest.raises(ValueError, match="Threadgroup size exceeds"):
        lib.fill_index(out, threads=2048, group_size=1025)
    with pytest.raises(ValueError, match="Threadgroup size exceeds"):
        lib.capped(torch.zeros(600, dtype=torch.int32), group_size=257)
    w = torch.zeros(64 * 64 * 6, dtype=torch.int32)
    with pytest.raises(ValueError, match="Threadgroup size exceeds"):
        lib.geometry2(w, 64, threads=[64, 64], group_size=[64, 32], arg_casts={1: "int32"})


def test_group_at_max_is_accepted(lib):
    tpt, dtpt, tgs = _geometry1(lib, 2048, group_size=1024)
    assert np.all(tpt == 1024) and np.all(tgs == 2)
    tpt = torch.zeros(256, dtype=torch.int32)
    lib.capped(tpt, group_size=256)
    assert torch.all(tpt == 256)


# ---------------------------------------------------------------- launch counters


def test_launch_counters(lib):
    emu.reset_launch_counts()
    assert emu.total_launches() == 0
    assert emu.launch_counts().get("fill_index", 0) == 0
    out = torch.zeros(4)
    for _ in range(3):
        lib.fill_index(out)
    lib.read_float(out, 1.0)
    counts = emu.launch_counts()
    assert counts["fill_index"] == 3
    assert counts["read_float"] == 1
    assert emu.total_launches() == 4
    assert sum(counts.values()) == 4
    emu.reset_launch_counts()
    assert emu.total_launches() == 0
    assert sum(emu.launch_counts().values()) == 0


def test_failed_launch_is_not_counted(lib):
    emu.reset_launch_counts()
    with pytest.raises(ValueError):
        lib.fill_index(torch.zeros(4), threads=4, group_size=2000)
    assert emu.total_launches() == 0


def test_zero_group_size_is_refused_and_not_counted(lib):
    emu.reset_launch_counts()
    with pytest.raises(ValueError, match=r"kernel 'fill_index': group_size must be positive"):
        lib.fill_index(torch.zeros(4), threads=4, group_size=0)
    assert emu.total_launches() == 0


# ---------------------------------------------------------------- language version


def test_metal_version_macro(lib):
    out = torch.zeros(1, dtype=torch.int32)
    lib.version_probe(out)
    assert out.item() == 320


IF_CONSTEXPR_SRC = r"""
#include <metal_stdlib>
using namespace metal;
template <typename T>
T pick(T x) {
    if constexpr (sizeof(T) == 4) { return x + T(1); } else { return x; }
}
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i] = pick(out[i]);
    out[i] += float(__METAL_VERSION__);
}
"""


def test_if_constexpr_rejected_at_320():
    with pytest.raises(SyntaxError) as ei:
        emu.compile_shader(IF_CONSTEXPR_SRC, metal_version=320)
    msg = str(ei.value)
    assert "constexpr" in msg
    assert re.search(r"\S+:6\b", msg), msg  # points at the line of `if constexpr`


def test_if_constexpr_accepted_at_400():
    lib = emu.compile_shader(IF_CONSTEXPR_SRC, metal_version=400)
    out = torch.zeros(3)
    lib.k(out)
    assert out.tolist() == [401.0] * 3


# ---------------------------------------------------------------- compile errors


def test_compile_error_is_syntax_error_with_line():
    src = "\n".join(
        [
            "#include <metal_stdlib>",
            "using namespace metal;",
            "",
            "kernel void broken(device float* out [[buffer(0)]],",
            "                   uint i [[thread_position_in_grid]]) {",
            "    float a = 1.0f;",
            "    out[i] = a + undeclared_thing;",
            "}",
        ]
    )
    with pytest.raises(SyntaxError) as ei:
        emu.compile_shader(src)
    msg = str(ei.value)
    assert "undeclared_thing" in msg
    assert re.search(r"\S+:7(:\d+)?\b", msg), msg
    # The message must not expose the generated C++ instead of the user's source.
    assert ".cpp:" not in msg and ".cc:" not in msg


def test_off_linux_the_emulator_says_it_runs_on_linux_only(monkeypatch, capsys):
    """Its runtime uses Linux's per-thread POSIX timers and real-time signals: elsewhere (macOS)
    compile_shader raises a clear error, `info` says why the emulator is not usable, and the test
    suite's default backends leave it out."""
    import sys

    from mpslinalg import cli
    from mpslinalg.emulator import build

    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(build.EmulatorUnavailableError, match="runs on Linux only.*'mps'"):
        emu.compile_shader("kernel void k(device float* x [[buffer(0)]]) {}")
    assert cli.main(["info"]) == 0
    assert "metal in the emulator  not usable: runs on Linux only" in capsys.readouterr().out
    from mpslinalg._core import platform

    assert platform.emulator_unavailable_reasons()  # what tests/conftest.py asks
