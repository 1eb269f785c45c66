"""MSL language features used by library kernels: templates, structs, program
scope constants, address-space overloads, math/relational/integer functions."""

import math

import numpy as np
import pytest
import torch

from mpslinalg import emulator as emu
from mpslinalg.emulator.translate import TranslateError

SRC = r"""
#include <metal_stdlib>
using namespace metal;

constant float kWeights[5] = {0.5f, 1.0f, 2.0f, 4.0f, 8.0f};
constant constexpr int kCount = 5;
static constant constexpr const float kScale = 3.0f;

struct Complex {
    float re, im;
    Complex operator*(Complex o) const { return {re * o.re - im * o.im, re * o.im + im * o.re}; }
    Complex operator+(Complex o) const { return {re + o.re, im + o.im}; }
    float norm1() const { return fabs(re) + fabs(im); }
};

struct Params {
    uint n;
    float alpha;
    int2 shape;
};

static_assert(sizeof(Params) == 16, "Params layout");
static_assert(sizeof(Complex) == 8, "Complex layout");

enum class Mode : int { Add = 0, Mul = 1 };

METAL_FUNC float twice(float x) { return 2.0f * x; }

// Overloads on the address space of a pointer.
inline float load_one(device const float* p, uint i) { return p[i] + 1000.0f; }
inline float load_one(threadgroup const float* p, uint i) { return p[i] + 2000.0f; }
inline float load_one(constant float* p, uint i) { return p[i] + 3000.0f; }

inline void bump(thread float& x) { x += 1.0f; }

template <typename T, int N>
struct Acc {
    T v[N];
    void clear() { for (int k = 0; k < N; ++k) v[k] = T(0); }
    T total() const { T s = T(0); for (int k = 0; k < N; ++k) s += v[k]; return s; }
};

template <typename T>
inline T apply(T a, T b, Mode m) { return m == Mode::Add ? a + b : a * b; }

template <typename T, typename U>
struct same { static constant constexpr bool value = metal::is_same_v<T, U>; };

// Named-parameter instantiations of a templated kernel with a non-type parameter.
template <typename T, int BLOCK>
kernel void block_sum(device const T* x [[buffer(0)]],
                      device T* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    Acc<T, BLOCK> acc;
    acc.clear();
    _Pragma("clang loop unroll(full)")
    for (int k = 0; k < BLOCK; ++k) acc.v[k] = x[i * BLOCK + k];
    out[i] = acc.total();
}
template [[host_name("block_sum_float_4")]] kernel void block_sum<float, 4>(
    device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
    uint i [[thread_position_in_grid]]);
template [[host_name("block_sum_int_3")]] kernel void block_sum<int, 3>(
    device const int*, device int*, uint);

// Instantiation through a macro, one line per dtype (the project's convention).
#define INSTANTIATE_SCALE(T) \
    template [[host_name("scale_" #T)]] kernel void scale_by<T>( \
        device T*, constant Params&, uint);

template <typename T>
kernel void scale_by(device T* x [[buffer(0)]],
                     constant Params& p [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    if (i < p.n) x[i] = static_cast<T>(float(x[i]) * p.alpha + float(p.shape.x * p.shape.y));
}
INSTANTIATE_SCALE(float)
INSTANTIATE_SCALE(half)

// `[[kernel]]` attribute spelling, and instantiation through decltype of the
// specialisation (no signature repeated), with non-type template parameters.
template <typename T, int K>
[[kernel]] void add_k(device T* x [[buffer(0)]],
                      constant T& bias [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    x[i] = x[i] + bias + T(K);
}
#define DECLTYPE_INST(name, ...) \
    template [[host_name(name)]] [[kernel]] decltype(add_k<__VA_ARGS__>) add_k<__VA_ARGS__>;
DECLTYPE_INST("add_k_float32_k3", float, 3)
DECLTYPE_INST("add_k_int32_k10", int, 10)

namespace userns {
constant constexpr int kOffset = 7;
[[kernel]] void in_namespace(device int* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i] += kOffset;
}
}  // namespace userns

kernel void features(device const float* x [[buffer(0)]],
                     constant float* table [[buffer(1)]],
                     device float* out [[buffer(2)]],
                     uint i [[thread_position_in_grid]],
                     uint t [[thread_index_in_threadgroup]]) {
    threadgroup float sh[64];
    sh[t] = x[i] * 10.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = x[i];
    out[10 * i + 0] = kWeights[i % kCount] * kScale;
    Complex a = {v, 1.0f};
    Complex b = {2.0f, -v};
    Complex c = a * b + a;
    out[10 * i + 1] = c.re;
    out[10 * i + 2] = c.im + c.norm1();
    out[10 * i + 3] = twice(v);
    out[10 * i + 4] = load_one(x, i);
    out[10 * i + 5] = load_one(sh, t);
    out[10 * i + 6] = load_one(table, 0);
    float w = v;
    bump(w);
    out[10 * i + 7] = w;
    out[10 * i + 8] = apply(v, 2.0f, Mode::Add) + apply(v, 3.0f, Mode::Mul);
    out[10 * i + 9] = (same<float, float>::value ? 1.0f : 0.0f) +
                      (same<float, half>::value ? 10.0f : 0.0f) +
                      float(numeric_limits<half>::max() == HALF_MAX) * 100.0f;
}

#define M(k, e) out[24 * i + (k)] = (e)
kernel void math_fns(device const float* x [[buffer(0)]],
                     device const float* y [[buffer(1)]],
                     device float* out [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
    float a = x[i], b = y[i];
    M(0, sqrt(fabs(a)));
    M(1, rsqrt(fabs(a) + 1.0f));
    M(2, fma(a, b, 1.0f));
    M(3, clamp(a, -0.5f, 0.5f));
    M(4, mix(a, b, 0.25f));
    M(5, floor(a) + ceil(b));
    M(6, round(a) + trunc(b));
    M(7, fract(a));
    M(8, fmod(a, 0.75f));
    M(9, exp(a * 0.5f));
    M(10, log(fabs(a) + 1.0f));
    M(11, pow(fabs(a) + 0.5f, 1.5f));
    M(12, sin(a) + cos(b));
    M(13, atan2(a, b));
    M(14, tanh(a));
    M(15, precise::sqrt(fabs(b)));
    M(16, fast::exp(b * 0.25f));
    M(17, copysign(2.0f, b));
    M(18, sign(a));
    M(19, step(0.0f, a) + saturate(b));
    M(20, smoothstep(-1.0f, 1.0f, a));
    M(21, max(a, b) - min(a, b));
    M(22, fmax(a, NAN) + fmin(NAN, b));
    M(23, M_PI_F + exp2(1.0f) + log2(8.0f));
}

kernel void relational(device const float* x [[buffer(0)]],
                       device int* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    float a = x[i];
    out[5 * i + 0] = isnan(a) ? 1 : 0;
    out[5 * i + 1] = isinf(a) ? 1 : 0;
    out[5 * i + 2] = isfinite(a) ? 1 : 0;
    out[5 * i + 3] = signbit(a) ? 1 : 0;
    out[5 * i + 4] = int(select(1.0f, 2.0f, a > 0.0f));
}

kernel void int_fns(device const uint* x [[buffer(0)]],
                    device const uint* y [[buffer(1)]],
                    device uint* out [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
    uint a = x[i], b = y[i];
    out[8 * i + 0] = popcount(a);
    out[8 * i + 1] = clz(a);
    out[8 * i + 2] = ctz(a);
    out[8 * i + 3] = mulhi(a, b);
    out[8 * i + 4] = extract_bits(a, 4, 8);
    out[8 * i + 5] = reverse_bits(a);
    out[8 * i + 6] = uint(abs(int(a)));
    out[8 * i + 7] = min(a, b) + max(a, b) / 2u;
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def test_templates_with_non_type_parameters(lib):
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(10)
    lib.block_sum_float_4(x, out, threads=10)
    assert torch.equal(out, x.view(10, 4).sum(1))
    xi = torch.arange(30, dtype=torch.int32)
    outi = torch.zeros(10, dtype=torch.int32)
    lib.block_sum_int_3(xi, outi, threads=10)
    assert torch.equal(outi, xi.view(10, 3).sum(1).int())


def test_decltype_instantiations_and_namespaces(lib):
    assert {"add_k_float32_k3", "add_k_int32_k10", "in_namespace"} <= set(dir(lib))
    x = torch.arange(5, dtype=torch.float32)
    lib.add_k_float32_k3(x, 0.5)
    assert torch.equal(x, torch.arange(5, dtype=torch.float32) + 3.5)
    xi = torch.arange(5, dtype=torch.int32)
    lib.add_k_int32_k10(xi, 2, arg_casts="int32")
    assert torch.equal(xi, torch.arange(5, dtype=torch.int32) + 12)
    lib.in_namespace(xi)
    assert torch.equal(xi, torch.arange(5, dtype=torch.int32) + 19)


def params_tensor(n, alpha, shape):
    buf = np.zeros(4, np.int32)
    buf[0] = n
    buf[1] = np.float32(alpha).view(np.int32)
    buf[2:4] = shape
    return torch.from_numpy(buf)


def test_macro_instantiations_and_struct_parameter(lib):
    # A struct parameter is passed as a tensor holding its bytes.
    x = torch.arange(12, dtype=torch.float32)
    lib.scale_float(x, params_tensor(10, 0.5, (2, 3)))
    exp = torch.arange(12, dtype=torch.float32)
    exp[:10] = exp[:10] * 0.5 + 6
    assert torch.equal(x, exp)
    xh = torch.arange(12, dtype=torch.float16)
    lib.scale_half(xh, params_tensor(12, 2.0, (1, 1)))
    assert torch.equal(xh, torch.arange(12, dtype=torch.float16) * 2 + 1)


def test_language_features(lib):
    n = 64
    x = torch.linspace(-3, 3, n)
    table = [0.25, 9.0]
    out = torch.zeros(10 * n)
    lib.features(x, table, out, group_size=64)
    got = out.view(n, 10).double()
    v = x.double()
    w = torch.tensor([0.5, 1, 2, 4, 8], dtype=torch.float64)[torch.arange(n) % 5] * 3
    torch.testing.assert_close(got[:, 0], w)
    re = v * 2 + v + v  # (v + i)(2 - iv) + (v + i)
    im = -v * v + 2 + 1
    tol = {"rtol": 1e-6, "atol": 1e-5}
    torch.testing.assert_close(got[:, 1], re, **tol)
    torch.testing.assert_close(got[:, 2], im + re.abs() + im.abs(), **tol)
    torch.testing.assert_close(got[:, 3], 2 * v, **tol)
    torch.testing.assert_close(got[:, 4], v + 1000, **tol)
    torch.testing.assert_close(got[:, 5], v * 10 + 2000, **tol)
    torch.testing.assert_close(got[:, 6], torch.full((n,), 3000.25, dtype=torch.float64))
    torch.testing.assert_close(got[:, 7], v + 1, **tol)
    torch.testing.assert_close(got[:, 8], (v + 2) + v * 3, **tol)
    assert torch.all(got[:, 9] == 101)


def test_math_functions(lib):
    g = torch.Generator().manual_seed(0)
    n = 500
    x = torch.randn(n, generator=g) * 3
    y = torch.randn(n, generator=g) * 3
    out = torch.zeros(24 * n)
    lib.math_fns(x, y, out)
    got = out.view(n, 24).numpy().astype(np.float64)
    a = x.numpy().astype(np.float64)
    b = y.numpy().astype(np.float64)
    F = np.float32
    af, bf = x.numpy(), y.numpy()
    exact = {
        0: np.sqrt(np.abs(af)),
        3: np.clip(af, F(-0.5), F(0.5)),
        5: np.floor(af) + np.ceil(bf),
        6: np.where(np.abs(af - np.trunc(af)) == 0.5, np.trunc(af) + np.sign(af), np.round(af))
        + np.trunc(bf),  # round: half away from zero
        15: np.sqrt(np.abs(bf)),
        17: np.copysign(F(2), bf),
        18: np.sign(af),
        21: np.abs(af - bf),
        22: af + bf,  # NaN operands are ignored
    }
    for k, e in exact.items():
        np.testing.assert_array_equal(
            got[:, k], np.asarray(e, F).astype(np.float64), err_msg=f"column {k}"
        )
    approx = {
        1: 1 / np.sqrt(np.abs(a) + 1),
        2: a * b + 1,
        4: a + (b - a) * 0.25,
        7: a - np.floor(a),
        8: np.fmod(a, 0.75),
        9: np.exp(a * 0.5),
        10: np.log(np.abs(a) + 1),
        11: (np.abs(a) + 0.5) ** 1.5,
        12: np.sin(a) + np.cos(b),
        13: np.arctan2(a, b),
        14: np.tanh(a),
        16: np.exp(b * 0.25),
        19: (a >= 0) + np.clip(b, 0, 1),
        20: (lambda t: t * t * (3 - 2 * t))(np.clip((a + 1) / 2, 0, 1)),
        23: math.pi + 2 + 3,
    }
    for k, e in approx.items():
        np.testing.assert_allclose(got[:, k], e, rtol=2e-5, atol=2e-5, err_msg=f"column {k}")


def test_relational_functions(lib):
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan"), 1e-45])
    out = torch.zeros(5 * len(x), dtype=torch.int32)
    lib.relational(x, out)
    got = out.view(-1, 5).tolist()
    xs = x.numpy()
    for k, v in enumerate(xs):
        assert got[k][:4] == [
            int(np.isnan(v)),
            int(np.isinf(v)),
            int(np.isfinite(v)),
            int(np.signbit(v)),
        ], (k, v, got[k])
        assert got[k][4] == (2 if v > 0 else 1)


def test_integer_functions(lib):
    rng = np.random.default_rng(1)
    n = 1000
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[:5] = [0, 1, 0x80000001, 0xFFFFFFFF, 0x40000000]
    out = torch.zeros(8 * n, dtype=torch.int32)
    lib.int_fns(torch.from_numpy(a.view(np.int32)), torch.from_numpy(b.view(np.int32)), out)
    got = out.numpy().view(np.uint32).reshape(n, 8).astype(np.int64)
    for k in range(n):
        v, w = int(a[k]), int(b[k])
        exp = [
            bin(v).count("1"),
            32 if v == 0 else 32 - v.bit_length(),
            32 if v == 0 else (v & -v).bit_length() - 1,
            (v * w) >> 32,
            (v >> 4) & 0xFF,
            int(f"{v:032b}"[::-1], 2),
            abs(np.int32(np.uint32(v).view(np.int32)).astype(np.int64)) % 2**32,
            (min(v, w) + max(v, w) // 2) % 2**32,
        ]
        assert got[k].tolist() == exp, (k, hex(v), hex(w), got[k].tolist(), exp)


# Separate sources: each construct compiles on its own.

MEMBER_NAMED_LIKE_SWIZZLE = r"""
#include <metal_stdlib>
using namespace metal;
struct Seg { float xy; };
kernel void k(device float4* v [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    Seg s;
    s.xy = 1.0f;
    float4 w = v[i];
    w.xy = float2(s.xy, 2.0f);
    v[i] = w;
}
"""


def test_struct_member_named_like_a_swizzle():
    lib = emu.compile_shader(MEMBER_NAMED_LIKE_SWIZZLE)
    v = torch.full((2, 4), 7.0)
    lib.k(v, threads=2)
    assert v.tolist() == [[1.0, 2.0, 7.0, 7.0]] * 2


THREAD_VS_THREADGROUP_OVERLOADS = r"""
#include <metal_stdlib>
using namespace metal;
inline float first(threadgroup const float* p) { return p[0] + 100.0f; }
inline float first(thread const float* p) { return p[0] + 200.0f; }
kernel void k(device float* out [[buffer(0)]],
              uint i [[thread_position_in_grid]],
              uint t [[thread_index_in_threadgroup]]) {
    threadgroup float sh[64];
    sh[t] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    thread float loc[1] = {2.0f};
    out[i] = first(&sh[t]) + first(loc);
}
"""


def test_thread_vs_threadgroup_pointer_overloads():
    lib = emu.compile_shader(THREAD_VS_THREADGROUP_OVERLOADS)
    out = torch.zeros(8)
    lib.k(out)
    assert torch.all(out == 303.0)


# Overloads told apart by address spaces inside a struct's template arguments. The CPU emulator
# keeps device pointers apart (::emu::dptr): Metal's overload is called. It erases thread vs
# threadgroup, and its run-time dispatch tests a parameter's own pointer only: refused.
_WORK_HEAD = r"""
#include <metal_stdlib>
using namespace metal;
template <typename P> struct W { P a; };
"""
_WORK_KERNEL = r"""
kernel void k(device float* out [[buffer(0)]], device float* src [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {
    threadgroup float sh[4];
    sh[t] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    thread float loc[1] = {2.0f};
    W<threadgroup float*> g{sh + t};
    W<thread float*> l{loc};
    W<device float*> d{src + t};
    out[i] = f(g) + 1000.0f * OTHER;
}
"""


@pytest.mark.parametrize("defs, other, expected", [
    ("inline float f(thread W<device float*>& w) { return w.a[0] + 100.0f; }\n"
     "template <typename T>\n"
     "inline float f(thread W<threadgroup T*>& w) { return w.a[0] + 200.0f; }\n",
     "f(d)", 201.0 + 1000.0 * 105.0),
    ("inline float f(device const float* p) { return p[0] + 100.0f; }\n"
     "template <typename T> inline float f(threadgroup T* p) { return p[0] + 200.0f; }\n"
     "inline float f(thread W<threadgroup float*>& w) { return f(w.a); }\n"
     "inline float f(thread W<device float*>& w) { return f(w.a); }\n",
     "f(d)", 201.0 + 1000.0 * 105.0),
    ("inline float f(threadgroup const float* p) { return p[0] + 200.0f; }\n"
     "inline float f(thread const float* p) { return p[0] + 100.0f; }\n"
     "inline float f(thread W<threadgroup float*>& w) { return f(w.a); }\n",
     "f(loc)", 201.0 + 1000.0 * 102.0),
])
def test_overloads_the_cpu_emulator_keeps_apart(defs, other, expected):
    src = _WORK_HEAD + defs + _WORK_KERNEL.replace("OTHER", other)
    out = torch.zeros(4)
    emu.compile_shader(src).k(out, torch.full((4,), 5.0), threads=4, group_size=4)
    assert out.tolist() == [expected] * 4


@pytest.mark.parametrize("defs", [
    "inline float f(thread W<thread float*>& w) { return w.a[0] + 100.0f; }\n"
    "inline float f(thread W<threadgroup float*>& w) { return w.a[0] + 200.0f; }\n",
    "inline float f(thread W<thread float*>& w) { return w.a[0] + 100.0f; }\n"
    "template <typename T>\n"
    "inline float f(thread W<threadgroup T*>& w) { return w.a[0] + 200.0f; }\n",
])
def test_overloads_only_thread_vs_threadgroup_inside_template_arguments_are_refused(defs):
    src = _WORK_HEAD + defs + _WORK_KERNEL.replace("OTHER", "f(l)")
    last = 7 if "template" in defs else 6
    with pytest.raises(TranslateError,
                       match=rf"^program_source:{last}: error: overloads of 'f' are told apart "
                             r"only by address spaces: parameter 1 `thread W<threadgroup \w+\*>& "
                             r"w` here and `thread W<thread float\*>& w` of the overload at "
                             r"program_source:5; the CPU emulator erases thread vs threadgroup "
                             r".*inside template arguments.*tag type"):
        emu.compile_shader(src)
