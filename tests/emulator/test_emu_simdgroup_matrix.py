"""simdgroup_matrix 8x8: load/store (stride, origin, transpose), multiply,
multiply_accumulate, filled and diagonal constructors; GEMM in float/half/bfloat."""

import pathlib

import pytest
import torch

from mpslinalg import emulator as emu

SRC = (pathlib.Path(__file__).parent / "simdgroup_matrix.metal").read_text()


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


def owner_layout():
    """(row, column) of the first of the two elements each lane owns: Apple's layout as
    observed (MLX's BaseMMAFrag::get_coord), which both executors use."""
    return [
        (4 * ((lane >> 4) & 1) + ((lane >> 1) & 3), 4 * ((lane >> 3) & 1) + 2 * (lane & 1))
        for lane in range(32)
    ]


def test_thread_elements_layout(lib):
    M = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    owned = torch.full((64,), -1.0)
    out = torch.zeros(128)
    lib.sg_elements(M, owned, out, threads=32, group_size=32)
    want = torch.tensor([[M[r, c], M[r, c + 1]] for r, c in owner_layout()]).reshape(64)
    assert torch.equal(owned, want)
    assert sorted(owner_layout()) == [(r, c) for r in range(8) for c in range(0, 8, 2)]
    assert torch.equal(out[:64].view(8, 8), 2 * M)
    torch.testing.assert_close(out[64:].view(8, 8), (2 * M) @ M)


def test_mixed_types_transposed_origins(lib):
    g = torch.Generator().manual_seed(4)
    A = torch.randn(8, 8, generator=g).half()
    B = torch.randn(10, 16, generator=g).half()
    C = torch.randn(8, 8, generator=g)
    D = torch.full((9, 12), -7.0)
    lib.sg_mixed(A, B, C, D, threads=32, group_size=32)
    b = B[2:10, 4:12].T  # the transposed load at origin (x, y) = (4, 2)
    ref = (A.double() @ b.double() + C.double()).float()
    got = D[1:9, 3:11].T  # the transposed store at origin (3, 1)
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-5)
    keep = torch.ones_like(D, dtype=torch.bool)
    keep[1:9, 3:11] = False
    assert torch.all(D[keep] == -7.0)


@pytest.mark.parametrize("threads, group", [(40, 40), (16, 16)])
def test_partial_simdgroup_is_refused(lib, threads, group):
    with pytest.raises(RuntimeError, match="need all 32 lanes"):
        lib.sg_partial(torch.zeros(64), torch.zeros(64), threads=threads, group_size=group)


def test_products_chained(lib):
    """Integer inputs keep every product exact, so the chain is compared bit for bit."""
    g = torch.Generator().manual_seed(5)
    M = torch.randint(-3, 4, (8, 8), generator=g).float()
    T = torch.randint(-3, 4, (8, 8), generator=g).float()
    out = torch.full((192,), -1.0)
    lib.sg_chain(M, T, out, threads=32, group_size=32)
    p = M @ T
    q = p @ M + p + 1
    assert torch.equal(out[0:64].view(8, 8), p)
    assert torch.equal(out[64:128].view(8, 8), q.T)
    assert torch.equal(out[128:192].view(8, 8), M @ q + p)
