"""simdgroup_matrix 8x8: load/store (stride, origin, transpose), multiply,
multiply_accumulate, filled and diagonal constructors; GEMM in float/half/bfloat."""

import pytest
import torch

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

// One simdgroup computes one 8x8 tile of C = A * B (row-major, M x K times K x N).
template <typename T>
kernel void sg_gemm(device const T* A [[buffer(0)]],
                    device const T* B [[buffer(1)]],
                    device T* C [[buffer(2)]],
                    constant uint& N [[buffer(3)]],
                    constant uint& K [[buffer(4)]],
                    uint tg [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint dtpg [[dispatch_threads_per_threadgroup]]) {
    uint t = tg * (dtpg / 32) + sg;   // a partial last group has fewer simdgroups
    uint tm = t / (N / 8), tn = t % (N / 8);
    simdgroup_matrix<T, 8, 8> acc = make_filled_simdgroup_matrix<T, 8, 8>(T(0));
    for (uint k = 0; k < K; k += 8) {
        simdgroup_matrix<T, 8, 8> a;
        simdgroup_matrix<T, 8, 8> b;
        simdgroup_load(a, A + tm * 8 * K + k, K);
        simdgroup_load(b, B + k * N + tn * 8, N);
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    simdgroup_store(acc, C + tm * 8 * N + tn * 8, N);
}
template [[host_name("sg_gemm_float")]] kernel void sg_gemm<float>(
    device const float*, device const float*, device float*, constant uint&, constant uint&,
    uint, uint, uint);
template [[host_name("sg_gemm_half")]] kernel void sg_gemm<half>(
    device const half*, device const half*, device half*, constant uint&, constant uint&,
    uint, uint, uint);
template [[host_name("sg_gemm_bfloat")]] kernel void sg_gemm<bfloat>(
    device const bfloat*, device const bfloat*, device bfloat*, constant uint&, constant uint&,
    uint, uint, uint);

// The same GEMM staged through threadgroup memory, with matrix origins.
kernel void sg_gemm_tg(device const float* A [[buffer(0)]],
                       device const float* B [[buffer(1)]],
                       device float* C [[buffer(2)]],
                       constant uint& N [[buffer(3)]],
                       constant uint& K [[buffer(4)]],
                       uint tg [[threadgroup_position_in_grid]],
                       ushort lane [[thread_index_in_simdgroup]]) {
    threadgroup float As[8 * 16];
    threadgroup float Bs[16 * 8];
    uint tm = tg / (N / 8), tn = tg % (N / 8);
    simdgroup_float8x8 acc(0.0f);
    for (uint k = 0; k < K; k += 16) {
        for (uint e = lane; e < 128; e += 32) {
            As[e] = A[(tm * 8 + e / 16) * K + k + e % 16];
            Bs[e] = B[(k + e / 8) * N + tn * 8 + e % 8];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 a0, a1, b0, b1;
        simdgroup_load(a0, As, 16, ulong2(0, 0));
        simdgroup_load(a1, As, 16, ulong2(8, 0));
        simdgroup_load(b0, Bs, 8, ulong2(0, 0));
        simdgroup_load(b1, Bs, 8, ulong2(0, 8));
        simdgroup_multiply_accumulate(acc, a0, b0, acc);
        simdgroup_multiply_accumulate(acc, a1, b1, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    simdgroup_store(acc, C + tm * 8 * N + tn * 8, N);
}

kernel void sg_variants(device const float* M16 [[buffer(0)]],
                        device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, M16, 16, ulong2(2, 3));                 // x = column 2, y = row 3
    simdgroup_store(m, out + 0, 8);
    simdgroup_float8x8 t;
    simdgroup_load(t, M16, 16, ulong2(0, 0), true);           // transposed load
    simdgroup_store(t, out + 64, 8);
    simdgroup_float8x8 d = simdgroup_float8x8(3.0f);          // diagonal
    simdgroup_store(d, out + 128, 8);
    simdgroup_float8x8 f = make_filled_simdgroup_matrix<float, 8, 8>(1.5f);
    simdgroup_store(f, out + 192, 8);
    simdgroup_float8x8 p;
    simdgroup_multiply(p, m, d);                              // m * 3I
    simdgroup_store(p, out + 256, 8);
    simdgroup_store(m, out + 320, 16, ulong2(8, 0));          // right half of an 8x16 block
    simdgroup_store(m, out + 448, 8, ulong2(0, 0), true);     // transposed store
    simdgroup_float8x8 q;
    simdgroup_multiply_accumulate(q, m, t, f);                // m * t + f
    simdgroup_store(q, out + 512, 8);
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def gemm_inputs(M, N, K, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(dtype)
    B = torch.randn(K, N, generator=g).to(dtype)
    return A, B


@pytest.mark.parametrize(
    "M,N,K,group", [(32, 24, 40, 32), (8, 8, 8, 32), (16, 64, 24, 64), (40, 16, 8, 96)]
)
def test_float_gemm(lib, M, N, K, group):
    A, B = gemm_inputs(M, N, K, torch.float32)
    C = torch.full((M, N), float("nan"))
    tiles = (M // 8) * (N // 8)
    lib.sg_gemm_float(
        A, B, C, N, K, threads=32 * tiles, group_size=group, arg_casts={3: "int32", 4: "int32"}
    )
    ref = (A.double() @ B.double()).float()
    torch.testing.assert_close(C, ref, rtol=1e-5, atol=1e-5 * K)


def test_float_gemm_exact_on_integers(lib):
    M, N, K = 16, 16, 32
    g = torch.Generator().manual_seed(1)
    A = torch.randint(-8, 8, (M, K), generator=g).float()
    B = torch.randint(-8, 8, (K, N), generator=g).float()
    C = torch.zeros(M, N)
    lib.sg_gemm_float(
        A, B, C, N, K, threads=32 * 4, group_size=32, arg_casts={3: "int32", 4: "int32"}
    )
    assert torch.equal(C, A @ B)


@pytest.mark.parametrize(
    "name,dtype,tol",
    [("sg_gemm_half", torch.float16, 2e-2), ("sg_gemm_bfloat", torch.bfloat16, 1e-1)],
)
def test_narrow_gemm(lib, name, dtype, tol):
    M, N, K = 16, 24, 32
    A, B = gemm_inputs(M, N, K, dtype, seed=2)
    C = torch.zeros(M, N, dtype=dtype)
    getattr(lib, name)(
        A,
        B,
        C,
        N,
        K,
        threads=32 * (M // 8) * (N // 8),
        group_size=64,
        arg_casts={3: "int32", 4: "int32"},
    )
    ref = A.double() @ B.double()
    err = (C.double() - ref).abs().max() / ref.abs().max()
    assert err < tol, float(err)


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_gemm_through_threadgroup_memory(lib, order):
    M, N, K = 24, 16, 48
    A, B = gemm_inputs(M, N, K, torch.float32, seed=3)
    C = torch.zeros(M, N)
    lib.sg_gemm_tg(
        A,
        B,
        C,
        N,
        K,
        threads=32 * (M // 8) * (N // 8),
        group_size=32,
        arg_casts={3: "int32", 4: "int32"},
        order=order,
    )
    torch.testing.assert_close(C, (A.double() @ B.double()).float(), rtol=1e-5, atol=1e-4)


def test_load_store_variants(lib):
    M16 = torch.arange(256, dtype=torch.float32).reshape(16, 16) / 8
    out = torch.full((576,), -1.0)
    lib.sg_variants(M16, out, threads=32, group_size=32)
    m = M16[3:11, 2:10]
    t = M16[:8, :8].T
    d = torch.eye(8) * 3
    f = torch.full((8, 8), 1.5)
    assert torch.equal(out[0:64].view(8, 8), m)
    assert torch.equal(out[64:128].view(8, 8), t)
    assert torch.equal(out[128:192].view(8, 8), d)
    assert torch.equal(out[192:256].view(8, 8), f)
    assert torch.equal(out[256:320].view(8, 8), m * 3)
    blk = out[320:448].view(8, 16)
    assert torch.equal(blk[:, 8:], m)
    assert torch.all(blk[:, :8] == -1.0)  # untouched
    assert torch.equal(out[448:512].view(8, 8), m.T)
    q = (m.double() @ t.double() + 1.5).float()
    torch.testing.assert_close(out[512:576].view(8, 8), q, rtol=1e-6, atol=1e-5)
