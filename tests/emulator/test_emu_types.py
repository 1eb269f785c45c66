"""Scalar types (half/bfloat bit-exact against torch CPU), literals, vectors,
swizzles, packed vectors and as_type."""

import numpy as np
import pytest
import torch

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void arith(device const T* a [[buffer(0)]],
                  device const T* b [[buffer(1)]],
                  device const T* c [[buffer(2)]],
                  device T* out [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    T x = a[i], y = b[i], z = c[i];
    out[6 * i + 0] = x + y;
    out[6 * i + 1] = x - y;
    out[6 * i + 2] = x * y;
    out[6 * i + 3] = x / y;
    out[6 * i + 4] = x * y + z;          // two roundings, never an fma
    out[6 * i + 5] = -x;
}
template [[host_name("arith_half")]] kernel void arith<half>(
    device const half*, device const half*, device const half*, device half*, uint);
template [[host_name("arith_bfloat")]] kernel void arith<bfloat>(
    device const bfloat*, device const bfloat*, device const bfloat*, device bfloat*, uint);
template [[host_name("arith_float")]] kernel void arith<float>(
    device const float*, device const float*, device const float*, device float*, uint);

template <typename T>
kernel void horner(device const T* x [[buffer(0)]],
                   device const T* coef [[buffer(1)]],
                   device T* out [[buffer(2)]],
                   uint i [[thread_position_in_grid]]) {
    T p = coef[0];
    for (int k = 1; k < 16; ++k) {
        p = p * x[i] + coef[k];
    }
    out[i] = p;
}
template [[host_name("horner_half")]] kernel void horner<half>(
    device const half*, device const half*, device half*, uint);
template [[host_name("horner_bfloat")]] kernel void horner<bfloat>(
    device const bfloat*, device const bfloat*, device bfloat*, uint);

kernel void half_sqrt(device const half* a [[buffer(0)]],
                      device half* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    out[i] = sqrt(a[i]);
}

kernel void to_narrow(device const float* f [[buffer(0)]],
                      device half* h [[buffer(1)]],
                      device bfloat* b [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
    h[i] = half(f[i]);
    b[i] = bfloat(f[i]);
}

kernel void from_narrow(device const half* h [[buffer(0)]],
                        device const bfloat* b [[buffer(1)]],
                        device float* fh [[buffer(2)]],
                        device float* fb [[buffer(3)]],
                        uint i [[thread_position_in_grid]]) {
    fh[i] = float(h[i]);
    fb[i] = static_cast<float>(b[i]);
}

kernel void mixed_precision(device const half* h [[buffer(0)]],
                            device const float* f [[buffer(1)]],
                            device float* out [[buffer(2)]],
                            uint i [[thread_position_in_grid]]) {
    // half op float -> float (usual arithmetic conversions)
    out[i] = h[i] * f[i];
}

kernel void literals(device const float* x [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     device half* hout [[buffer(2)]],
                     device uint* uout [[buffer(3)]],
                     uint i [[thread_position_in_grid]]) {
    float v = x[i];
    out[4 * i + 0] = v * 0.1;           // 0.1 is a float literal in MSL
    out[4 * i + 1] = v / 3.0 + 1.0 / 3.0;
    out[4 * i + 2] = v * 1e-3f + 2.5e1;
    out[4 * i + 3] = sqrt(v * 0.7);
    hout[i] = half(v) * 1.5h + 0.1h;
    uout[i] = 4000000000u + 0x10u + 7u * uint(i);
}

kernel void int_semantics(device const int* a [[buffer(0)]],
                          device const int* b [[buffer(1)]],
                          device int* out [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
    int x = a[i], y = b[i];
    uint ux = uint(x), uy = uint(y);
    out[10 * i + 0] = x / y;
    out[10 * i + 1] = x % y;
    out[10 * i + 2] = int(ux * uy);                 // wraps
    out[10 * i + 3] = int(ux >> (uy & 31u));
    out[10 * i + 4] = x >> (y & 31);                 // arithmetic shift
    out[10 * i + 5] = int(ushort(x) + ushort(y));    // promoted to int
    out[10 * i + 6] = int(char(x));                  // truncates
    out[10 * i + 7] = int(uchar(x) * uchar(y));
    out[10 * i + 8] = x * y + x;                    // signed overflow wraps
    out[10 * i + 9] = -x;
}

// Up to 48 float results per thread.
#define PUT(k, v) out[48 * i + (k)] = (v)

kernel void vectors(device const float4* a [[buffer(0)]],
                    device const float4* b [[buffer(1)]],
                    device float* out [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
    float4 v = a[i];
    float4 u = b[i];
    float2 xy = v.xy;
    float3 zyx = v.zyx;
    float4 wzyx = v.wzyx;
    float4 xxyy = v.xxyy;
    PUT(0, xy.x); PUT(1, xy.y);
    PUT(2, zyx.x); PUT(3, zyx.y); PUT(4, zyx.z);
    PUT(5, wzyx[0]); PUT(6, wzyx[1]); PUT(7, wzyx[2]); PUT(8, wzyx[3]);
    PUT(9, xxyy.y); PUT(10, xxyy.z);
    float4 w = v;
    w.xy = float2(7.0f, 8.0f);
    w.zw += float2(1.0f, 2.0f);
    w.y *= 3.0f;
    PUT(11, w.x); PUT(12, w.y); PUT(13, w.z); PUT(14, w.w);
    float4 c = float4(v.zw, xy);
    float3 d = float3(v.x, v.yz);
    float4 s = float4(2.5f);
    PUT(15, c.x); PUT(16, c.y); PUT(17, c.z); PUT(18, c.w);
    PUT(19, d.x); PUT(20, d.y); PUT(21, d.z); PUT(22, s.w);
    float4 e = v * u + 2.0f * v - u / 4.0f;
    PUT(23, e.x); PUT(24, e.y); PUT(25, e.z); PUT(26, e.w);
    bool4 lt = v < u;
    PUT(27, float(lt.x) + 2.0f * float(lt.y) + 4.0f * float(lt.z) + 8.0f * float(lt.w));
    PUT(28, all(v < u + 100.0f) ? 1.0f : 0.0f);
    PUT(29, any(v > u) ? 1.0f : 0.0f);
    float4 sel = select(v, u, v > u);          // picks u where v > u: componentwise min
    PUT(30, sel.x); PUT(31, sel.y); PUT(32, sel.z); PUT(33, sel.w);
    PUT(34, dot(v, u));
    PUT(35, length(v.xyz));
    float3 cr = cross(v.xyz, u.xyz);
    PUT(36, cr.x); PUT(37, cr.y); PUT(38, cr.z);
    float2 nz = normalize(v.xy + float2(1.0f, 0.0f));
    PUT(39, nz.x); PUT(40, nz.y);
    PUT(41, distance(v.xy, u.xy));
    float4 m = max(v, u) - min(v, u);
    PUT(42, m.x + m.y + m.z + m.w);
    v[2] = -1.0f;
    PUT(43, v.z);
    float4 neg = -u;
    PUT(44, neg.w);
    float2 zw = a[i].zw;                       // swizzle of a device element
    PUT(45, zw.x);
    PUT(46, zw.y);
    v.zw = v.xy;                               // swizzle assignment from a swizzle
    PUT(47, v.w);
}

kernel void int_vectors(device const int4* a [[buffer(0)]],
                        device int4* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    int4 v = a[i];
    uint4 u = uint4(v);
    out[4 * i + 0] = (v & 0xF) | (v << 4);
    out[4 * i + 1] = int4(u >> 1u);
    out[4 * i + 2] = v.wzyx % int4(7) + int4(float4(v) * 0.5f);
    int2 p = v.xy * v.zw;
    ushort2 s = ushort2(v.xy);
    out[4 * i + 3] = int4(p, int(s.x), int(s.y));
}

kernel void half_vectors(device const half4* a [[buffer(0)]],
                         device half4* out [[buffer(1)]],
                         device float4* fout [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
    half4 v = a[i];
    out[i] = v * v.wzyx + half4(1.0h);
    fout[i] = float4(v) * 2.0f;
}

kernel void sizes(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    if (i != 0) return;
    out[0] = sizeof(float3);
    out[1] = alignof(float3);
    out[2] = sizeof(packed_float3);
    out[3] = sizeof(half3);
    out[4] = sizeof(float2);
    out[5] = sizeof(int3);
    out[6] = sizeof(half);
    out[7] = sizeof(bfloat);
    out[8] = sizeof(long);
    out[9] = sizeof(bool);
    out[10] = sizeof(uchar4);
    out[11] = sizeof(packed_half3);
    out[12] = sizeof(ushort2);
    out[13] = sizeof(float4);
}

// float3 buffers use a 16-byte stride; packed_float3 a 12-byte stride.
kernel void float3_layout(device const packed_float3* p [[buffer(0)]],
                          device float3* f3 [[buffer(1)]],
                          device packed_float3* q [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
    float3 v = p[i];
    f3[i] = v * 2.0f;
    q[i] = packed_float3(v.zyx);
}

kernel void as_types(device const float* f [[buffer(0)]],
                     device const half* h [[buffer(1)]],
                     device uint* out [[buffer(2)]],
                     device float* fout [[buffer(3)]],
                     uint i [[thread_position_in_grid]]) {
    out[4 * i + 0] = as_type<uint>(f[i]);
    out[4 * i + 1] = uint(as_type<ushort>(h[i]));
    half2 hh = as_type<half2>(as_type<uint>(f[i]));
    out[4 * i + 2] = uint(as_type<ushort>(hh.y));
    out[4 * i + 3] = as_type<uint2>(float2(f[i], -f[i])).y;
    fout[i] = as_type<float>(as_type<uint>(f[i]) ^ 0x80000000u);
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def rand_narrow(n, dtype, seed, lo=-4.0, hi=4.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=g) * (hi - lo) + lo).to(dtype)


def bits(t):
    return t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t


@pytest.mark.parametrize(
    "name,dtype", [("arith_half", torch.float16), ("arith_bfloat", torch.bfloat16)]
)
def test_narrow_arithmetic_bit_exact(lib, name, dtype):
    n = 4096
    a = rand_narrow(n, dtype, 1)
    b = rand_narrow(n, dtype, 2)
    b[b == 0] = 1
    c = rand_narrow(n, dtype, 3, -100, 100)
    # Include large/small magnitudes to reach overflow and subnormals.
    a[:64] = (
        torch.tensor([6.0e4, -6.0e4, 1e-6, -1e-6] * 16).to(dtype)
        if dtype == torch.float16
        else torch.tensor([3e38, -3e38, 1e-38, -1e-38] * 16).to(dtype)
    )
    out = torch.zeros(6 * n, dtype=dtype)
    getattr(lib, name)(a, b, c, out)
    got = out.view(n, 6)
    exp = [a + b, a - b, a * b, a / b, a * b + c, -a]
    for k, e in enumerate(exp):
        mism = (bits(got[:, k]) != bits(e)) & ~(torch.isnan(got[:, k]) & torch.isnan(e))
        assert not mism.any(), (
            name,
            k,
            int(mism.sum()),
            a[mism][:3],
            b[mism][:3],
            got[:, k][mism][:3],
            e[mism][:3],
        )


def test_float_arithmetic_exact(lib):
    n = 1000
    g = torch.Generator().manual_seed(4)
    a, b, c = (torch.randn(n, generator=g) for _ in range(3))
    out = torch.zeros(6 * n)
    lib.arith_float(a, b, c, out)
    got = out.view(n, 6)
    for k, e in enumerate([a + b, a - b, a * b, a / b, a * b + c, -a]):
        assert torch.equal(got[:, k], e), k


@pytest.mark.parametrize(
    "name,dtype", [("horner_half", torch.float16), ("horner_bfloat", torch.bfloat16)]
)
def test_horner_loop_bit_exact(lib, name, dtype):
    n = 2048
    x = rand_narrow(n, dtype, 11, -1.2, 1.2)
    coef = rand_narrow(16, dtype, 12, -1, 1)
    out = torch.zeros(n, dtype=dtype)
    getattr(lib, name)(x, coef, out)
    p = coef[0].expand(n).clone()
    for k in range(1, 16):
        p = p * x + coef[k]
    assert torch.equal(bits(out), bits(p))


def test_half_sqrt_correctly_rounded(lib):
    h = torch.arange(0, 0x7C00, dtype=torch.int32).to(torch.int16).view(torch.float16)
    out = torch.zeros_like(h)
    lib.half_sqrt(h, out)
    assert torch.equal(bits(out), bits(torch.sqrt(h)))


def special_floats():
    vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65520.0,
        65519.99,
        1e10,
        -1e10,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        1e-9,
        3.4e38,
        -3.4e38,
        float("inf"),
        float("-inf"),
        1.0009765625,
        1.00048828125,
        1.00146484375,
        1.00390625,
        1.001953125,
        1.005859375,
        1e-40,
        -1e-45,
    ]
    return np.array(vals, dtype=np.float32)


def test_float_to_half_and_bfloat_rounding(lib):
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # Values in the normal half range and exact ties of both formats.
    mid = (rng.standard_normal(50_000) * 100).astype(np.float32)
    ties_h = (np.arange(1, 2049, dtype=np.float32) + 0.5) * np.float32(2.0**-10) + 1
    ties_b = np.float32(1) + (np.arange(1, 257, dtype=np.float32) + 0.5) * np.float32(2.0**-7)
    f = np.concatenate([special_floats(), raw, mid, ties_h, ties_b]).astype(np.float32)
    f = f[~np.isnan(f)]
    ft = torch.from_numpy(f)
    h = torch.zeros(len(f), dtype=torch.float16)
    b = torch.zeros(len(f), dtype=torch.bfloat16)
    lib.to_narrow(ft, h, b)
    assert torch.equal(bits(h), bits(ft.half()))
    assert torch.equal(bits(b), bits(ft.bfloat16()))


def test_float_nan_to_narrow_is_nan(lib):
    f = torch.tensor([float("nan"), -float("nan")])
    h = torch.zeros(2, dtype=torch.float16)
    b = torch.zeros(2, dtype=torch.bfloat16)
    lib.to_narrow(f, h, b)
    assert torch.isnan(h).all() and torch.isnan(b).all()


def test_every_half_and_bfloat_widens_exactly(lib):
    pat = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    h = pat.view(torch.float16)
    b = pat.view(torch.bfloat16)
    fh = torch.zeros(2**16)
    fb = torch.zeros(2**16)
    lib.from_narrow(h, b, fh, fb)
    for got, src in ((fh, h), (fb, b)):
        e = src.float()
        nan = torch.isnan(e)
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got[~nan].view(torch.int32), e[~nan].view(torch.int32))


def test_half_times_float_is_float(lib):
    h = rand_narrow(100, torch.float16, 5)
    f = torch.randn(100)
    out = torch.zeros(100)
    lib.mixed_precision(h, f, out)
    assert torch.equal(out, h.float() * f)


def test_literals_are_single_precision(lib):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20_000) * 1000).astype(np.float32)
    x = np.abs(x) + np.float32(0.5)
    out = torch.zeros(4 * len(x))
    hout = torch.zeros(len(x), dtype=torch.float16)
    uout = torch.zeros(len(x), dtype=torch.int32)
    lib.literals(torch.from_numpy(x), out, hout, uout)
    got = out.numpy().reshape(-1, 4)
    F = np.float32
    np.testing.assert_array_equal(got[:, 0], x * F(0.1))
    np.testing.assert_array_equal(got[:, 1], x / F(3.0) + F(1.0) / F(3.0))
    np.testing.assert_array_equal(got[:, 2], x * F(1e-3) + F(25.0))
    np.testing.assert_array_equal(got[:, 3], np.sqrt(x * F(0.7)))
    xh = torch.from_numpy(x).half()
    eh = xh * torch.tensor(1.5, dtype=torch.float16) + torch.tensor(0.1, dtype=torch.float16)
    assert torch.equal(bits(hout), bits(eh))
    eu = (np.uint64(4000000016) + 7 * np.arange(len(x), dtype=np.uint64)) % 2**32
    np.testing.assert_array_equal(uout.numpy().view(np.uint32), eu.astype(np.uint32))


def test_integer_semantics(lib):
    rng = np.random.default_rng(8)
    n = 5000
    a = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    a[:100] = rng.integers(-300, 300, 100)
    b[:100] = rng.integers(-40, 40, 100)
    b[b == 0] = 3
    b[(a == -(2**31)) & (b == -1)] = 5
    out = torch.zeros(10 * n, dtype=torch.int32)
    lib.int_semantics(torch.from_numpy(a), torch.from_numpy(b), out)
    got = out.numpy().reshape(n, 10)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    # truncating division, computed exactly
    q = np.sign(a64) * np.sign(b64) * (np.abs(a64) // np.abs(b64))
    np.testing.assert_array_equal(got[:, 0], q)
    np.testing.assert_array_equal(got[:, 1], a64 - q * b64)
    ua, ub = a.view(np.uint32).astype(np.uint64), b.view(np.uint32).astype(np.uint64)
    np.testing.assert_array_equal(got[:, 2].view(np.uint32), ((ua * ub) % 2**32).astype(np.uint32))
    np.testing.assert_array_equal(got[:, 3].view(np.uint32), (ua >> (ub & 31)).astype(np.uint32))
    np.testing.assert_array_equal(got[:, 4], a64 >> (b64 & 31))
    np.testing.assert_array_equal(got[:, 5], (ua % 2**16) + (ub % 2**16))
    np.testing.assert_array_equal(got[:, 6], a.astype(np.int8))
    np.testing.assert_array_equal(got[:, 7], (ua % 256) * (ub % 256))
    wrap = ((a64 * b64 + a64) % 2**32).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(got[:, 8], wrap)
    np.testing.assert_array_equal(got[:, 9], ((-a64) % 2**32).astype(np.uint32).view(np.int32))


def test_vectors_and_swizzles(lib):
    n = 64
    g = torch.Generator().manual_seed(9)
    a = torch.randn(n, 4, generator=g)
    b = torch.randn(n, 4, generator=g)
    out = torch.zeros(n * 48)
    lib.vectors(a, b, out, threads=n)
    got = out.view(n, 48).numpy().astype(np.float64)
    A, B = a.numpy(), b.numpy()
    x, y, z, w = A.T
    e = np.zeros((n, 48), np.float64)
    e[:, 0:2] = A[:, [0, 1]]
    e[:, 2:5] = A[:, [2, 1, 0]]
    e[:, 5:9] = A[:, [3, 2, 1, 0]]
    e[:, 9], e[:, 10] = x, y
    e[:, 11], e[:, 12], e[:, 13], e[:, 14] = 7, 24, z + 1, w + 2
    e[:, 15:19] = np.stack([z, w, x, y], 1)
    e[:, 19:22] = A[:, :3]
    e[:, 22] = 2.5
    e[:, 23:27] = A * B + 2 * A - B / 4
    lt = A < B
    e[:, 27] = lt @ np.array([1, 2, 4, 8])
    e[:, 28] = np.all(A < B + 100, axis=1)
    e[:, 29] = np.any(A > B, axis=1)
    e[:, 30:34] = np.minimum(A, B)
    e[:, 34] = (A.astype(np.float64) * B).sum(1)
    e[:, 35] = np.linalg.norm(A[:, :3].astype(np.float64), axis=1)
    e[:, 36:39] = np.cross(A[:, :3], B[:, :3])
    v2 = A[:, :2].astype(np.float64) + [1, 0]
    e[:, 39:41] = v2 / np.linalg.norm(v2, axis=1, keepdims=True)
    e[:, 41] = np.linalg.norm(A[:, :2].astype(np.float64) - B[:, :2], axis=1)
    e[:, 42] = np.abs(A - B).sum(1)
    e[:, 43] = -1
    e[:, 44] = -B[:, 3]
    e[:, 45], e[:, 46] = z, w
    e[:, 47] = y
    exact = list(range(0, 34)) + [43, 44, 45, 46, 47]
    np.testing.assert_array_equal(got[:, exact], e[:, exact].astype(np.float32))
    approx = [34, 35, 36, 37, 38, 39, 40, 41, 42]
    np.testing.assert_allclose(got[:, approx], e[:, approx], rtol=1e-5, atol=1e-5)


def test_int_vectors(lib):
    n = 50
    rng = np.random.default_rng(10)
    a = rng.integers(-1000, 1000, (n, 4)).astype(np.int32)
    out = torch.zeros(n * 16, dtype=torch.int32)
    lib.int_vectors(torch.from_numpy(a), out, threads=n)
    got = out.numpy().reshape(n, 4, 4).astype(np.int64)
    A = a.astype(np.int64)
    u = a.view(np.uint32).astype(np.uint64)
    np.testing.assert_array_equal(got[:, 0], ((A & 0xF) | (A << 4)).astype(np.int32))
    np.testing.assert_array_equal(got[:, 1], (u >> 1).astype(np.uint32).view(np.int32))
    R = A[:, ::-1]
    mod = R - np.sign(R) * (np.abs(R) // 7) * 7
    half_ = np.trunc(a.astype(np.float32) * np.float32(0.5)).astype(np.int64)
    np.testing.assert_array_equal(got[:, 2], mod + half_)
    np.testing.assert_array_equal(got[:, 3, :2], A[:, :2] * A[:, 2:])
    np.testing.assert_array_equal(got[:, 3, 2:], A[:, :2].astype(np.uint16))


def test_half_vectors(lib):
    n = 40
    a = rand_narrow(4 * n, torch.float16, 21).view(n, 4)
    out = torch.zeros(n, 4, dtype=torch.float16)
    fout = torch.zeros(n, 4)
    lib.half_vectors(a, out, fout, threads=n)
    e = a * a.flip(1) + torch.tensor(1.0, dtype=torch.float16)
    assert torch.equal(bits(out), bits(e))
    assert torch.equal(fout, a.float() * 2)


def test_type_sizes(lib):
    out = torch.full((14,), -1, dtype=torch.int32)
    lib.sizes(out)
    assert out.tolist() == [16, 16, 12, 8, 8, 16, 2, 2, 8, 1, 4, 6, 4, 16]


def test_float3_and_packed_float3_layout(lib):
    n = 10
    p = torch.arange(3 * n, dtype=torch.float32)
    f3 = torch.full((n, 4), -9.0)
    q = torch.zeros(3 * n)
    lib.float3_layout(p, f3, q, threads=n)
    P = p.view(n, 3)
    assert torch.equal(f3[:, :3], P * 2)
    assert torch.equal(f3[:, 3], torch.full((n,), -9.0))  # padding lane untouched
    assert torch.equal(q.view(n, 3), P.flip(1))


def test_as_type(lib):
    n = 100
    f = torch.randn(n)
    f[0] = -0.0
    f[1] = float("inf")
    h = rand_narrow(n, torch.float16, 30)
    out = torch.zeros(4 * n, dtype=torch.int32)
    fout = torch.zeros(n)
    lib.as_types(f, h, out, fout)
    got = out.numpy().view(np.uint32).reshape(n, 4)
    fb = f.numpy().view(np.uint32)
    np.testing.assert_array_equal(got[:, 0], fb)
    np.testing.assert_array_equal(got[:, 1], h.view(torch.int16).numpy().view(np.uint16))
    np.testing.assert_array_equal(got[:, 2], fb >> 16)
    np.testing.assert_array_equal(got[:, 3], (-f).numpy().view(np.uint32))
    assert torch.equal(fout.view(torch.int32), (-f).view(torch.int32))
