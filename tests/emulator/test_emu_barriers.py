"""threadgroup_barrier / simdgroup_barrier, threadgroup memory and atomics."""

import numpy as np
import pytest
import torch

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
using namespace metal;

// Tree reduction that is correct for any threadgroup size (not only powers of two).
kernel void tree_sum(device const int* x [[buffer(0)]],
                     device int* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint n [[threads_per_threadgroup]],
                     uint g [[threadgroup_position_in_grid]]) {
    threadgroup int sh[1024];
    sh[tid] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint p = 1;
    while (p < n) p <<= 1;
    for (uint s = p / 2; s > 0; s >>= 1) {
        if (tid < s && tid + s < n) sh[tid] += sh[tid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) out[g] = sh[0];
}

// Same in float: compared with a tolerance.
kernel void tree_sum_f(device const float* x [[buffer(0)]],
                       device float* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint n [[threads_per_threadgroup]],
                       uint g [[threadgroup_position_in_grid]]) {
    threadgroup float sh[1024];
    sh[tid] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 512; s > 0; s >>= 1) {
        if (tid < s && tid + s < n) sh[tid] += sh[tid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) out[g] = sh[0];
}

// Hillis-Steele inclusive scan over the whole threadgroup (double-buffered).
kernel void group_scan(device const int* x [[buffer(0)]],
                       device int* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint n [[threads_per_threadgroup]]) {
    threadgroup int buf[2][1024];
    uint cur = 0;
    buf[0][tid] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint off = 1; off < n; off <<= 1) {
        int v = buf[cur][tid];
        if (tid >= off) v += buf[cur][tid - off];
        buf[1 - cur][tid] = v;
        cur = 1 - cur;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[i] = buf[cur][tid];
}

// 2-D groups: each (clipped) tile is flipped along both axes through a
// threadgroup tile of structs.
struct Cell { float v; int tag; };

kernel void tile_flip(device const float* a [[buffer(0)]],
                      device float* b [[buffer(1)]],
                      device int* tags [[buffer(2)]],
                      constant uint& cols [[buffer(3)]],
                      uint2 p [[thread_position_in_grid]],
                      uint2 l [[thread_position_in_threadgroup]],
                      uint2 t [[threads_per_threadgroup]]) {
    threadgroup Cell tile[16][16];
    tile[l.y][l.x].v = a[p.y * cols + p.x];
    tile[l.y][l.x].tag = int(p.y * cols + p.x);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    Cell c = tile[t.y - 1 - l.y][t.x - 1 - l.x];
    b[p.y * cols + p.x] = c.v;
    tags[p.y * cols + p.x] = c.tag;
}

// Reads threadgroup memory before writing it: must see poison (NaN bytes),
// never another threadgroup's data.
kernel void poison_probe(device uint* first_u [[buffer(0)]],
                         device float* first_f [[buffer(1)]],
                         device half* first_h [[buffer(2)]],
                         device uint* neighbour [[buffer(3)]],
                         uint i [[thread_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint n [[threads_per_threadgroup]],
                         uint g [[threadgroup_position_in_grid]]) {
    threadgroup uint su[64];
    threadgroup float sf[64];
    threadgroup half sh[64];
    first_u[i] = su[tid];
    first_f[i] = sf[tid];
    first_h[i] = sh[tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    su[tid] = g + 1;
    sf[tid] = float(g + 1);
    sh[tid] = half(1.0h);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    neighbour[i] = su[(tid + 1) % n];
}

// Device memory written before a barrier is visible to other lanes after it.
kernel void device_exchange(device int* scratch [[buffer(0)]],
                            device int* out [[buffer(1)]],
                            uint i [[thread_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]],
                            uint base [[threadgroup_position_in_grid]],
                            uint d [[dispatch_threads_per_threadgroup]]) {
    scratch[i] = int(i) * 3;
    threadgroup_barrier(mem_flags::mem_device);
    uint j = base * d + (tid + n - 1) % n;
    out[i] = scratch[j];
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    scratch[i] = 0;
}

// Exchange inside a simdgroup, ordered by simdgroup_barrier.
kernel void simd_exchange(device const float* x [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          uint i [[thread_position_in_grid]],
                          ushort tid [[thread_index_in_threadgroup]],
                          ushort lane [[thread_index_in_simdgroup]],
                          ushort sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sh[1024];
    sh[tid] = x[i];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = sh[sg * 32 + (lane + 7) % 32];
}

kernel void atomics(device const int* x [[buffer(0)]],
                    device atomic_int* total [[buffer(1)]],
                    device atomic_uint* hist [[buffer(2)]],
                    device int* per_group [[buffer(3)]],
                    device atomic_float* fsum [[buffer(4)]],
                    device atomic_int* dmin [[buffer(5)]],
                    uint i [[thread_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint g [[threadgroup_position_in_grid]]) {
    threadgroup atomic_int count;
    threadgroup atomic_int maxv;
    threadgroup atomic_uint bits;
    if (tid == 0) {
        atomic_store_explicit(&count, 0, memory_order_relaxed);
        atomic_store_explicit(&maxv, -2147483647 - 1, memory_order_relaxed);
        atomic_store_explicit(&bits, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    int v = x[i];
    atomic_fetch_add_explicit(&count, v, memory_order_relaxed);
    atomic_fetch_max_explicit(&maxv, v, memory_order_relaxed);
    atomic_fetch_or_explicit(&bits, 1u << (uint(v) & 31u), memory_order_relaxed);
    atomic_fetch_add_explicit(total, v, memory_order_relaxed);
    atomic_fetch_sub_explicit(total, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hist[uint(v) & 7u], 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(fsum, float(v), memory_order_relaxed);
    // Atomic minimum through a compare-exchange loop.
    int expected = atomic_load_explicit(dmin, memory_order_relaxed);
    while (v < expected &&
           !atomic_compare_exchange_weak_explicit(dmin, &expected, v,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        per_group[3 * g + 0] = atomic_load_explicit(&count, memory_order_relaxed);
        per_group[3 * g + 1] = atomic_load_explicit(&maxv, memory_order_relaxed);
        per_group[3 * g + 2] = int(atomic_exchange_explicit(&bits, 0u, memory_order_relaxed));
    }
}

// Many barriers in a loop with a uniform, data-dependent trip count.
kernel void ping_pong(device const int* rounds [[buffer(0)]],
                      device int* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint n [[threads_per_threadgroup]]) {
    threadgroup int a[256];
    a[tid] = int(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    int r = rounds[0];
    for (int k = 0; k < r; ++k) {
        int v = a[(tid + 1) % n];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        a[tid] = v;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[i] = a[tid];
}
"""

ORDERS = ["forward", "reverse", "random"]


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def group_slices(n, group):
    return [slice(s, min(s + group, n)) for s in range(0, n, group)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("group", [1, 3, 37, 100, 255, 256, 1000, 1024])
def test_tree_reduction_any_group_size(lib, group, order):
    n = 3 * group + group // 2 + 1  # partial last group
    rng = np.random.default_rng(group)
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    ngroups = -(-n // group)
    out = torch.full((ngroups,), -1, dtype=torch.int32)
    lib.tree_sum(torch.from_numpy(x), out, threads=n, group_size=group, order=order)
    exp = [x[s].sum() for s in group_slices(n, group)]
    np.testing.assert_array_equal(out.numpy(), exp)


@pytest.mark.parametrize("group", [100, 1024, 513])
def test_float_tree_reduction(lib, group):
    n = 2 * group + 17
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n).astype(np.float32)
    out = torch.zeros(-(-n // group))
    lib.tree_sum_f(torch.from_numpy(x), out, threads=n, group_size=group)
    exp = [x[s].astype(np.float64).sum() for s in group_slices(n, group)]
    np.testing.assert_allclose(out.numpy(), exp, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("group", [1, 2, 31, 33, 96, 1000])
def test_group_scan(lib, group, order):
    n = 2 * group + 5
    x = (np.arange(n) % 13 - 6).astype(np.int32)
    out = torch.zeros(n, dtype=torch.int32)
    lib.group_scan(torch.from_numpy(x), out, threads=n, group_size=group, order=order)
    exp = np.concatenate([np.cumsum(x[s]) for s in group_slices(n, group)])
    np.testing.assert_array_equal(out.numpy(), exp)


@pytest.mark.parametrize(
    "rows,cols,gx,gy", [(23, 37, 8, 4), (16, 16, 16, 16), (10, 7, 3, 5), (5, 33, 16, 2)]
)
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_tile_flip_2d_partial_tiles(lib, rows, cols, gx, gy, order):
    a = torch.arange(rows * cols, dtype=torch.float32) * 0.5
    b = torch.zeros(rows * cols)
    tags = torch.zeros(rows * cols, dtype=torch.int32)
    lib.tile_flip(
        a,
        b,
        tags,
        cols,
        threads=[cols, rows],
        group_size=[gx, gy],
        arg_casts={3: "int32"},
        order=order,
    )
    A = a.numpy().reshape(rows, cols)
    E = np.empty_like(A)
    for y0 in range(0, rows, gy):
        for x0 in range(0, cols, gx):
            blk = A[y0 : y0 + gy, x0 : x0 + gx]
            E[y0 : y0 + gy, x0 : x0 + gx] = blk[::-1, ::-1]
    np.testing.assert_array_equal(b.numpy().reshape(rows, cols), E)
    np.testing.assert_array_equal(tags.numpy().reshape(rows, cols), (E * 2).astype(np.int32))


def test_threadgroup_memory_is_poisoned_per_group(lib):
    group, n = 64, 64 * 4 + 10
    fu = torch.zeros(n, dtype=torch.int32)
    ff = torch.zeros(n)
    fh = torch.zeros(n, dtype=torch.float16)
    nb = torch.zeros(n, dtype=torch.int32)
    lib.poison_probe(fu, ff, fh, nb, threads=n, group_size=group)
    fu_np = fu.numpy().view(np.uint32)
    # Uninitialised reads never show a value written by an earlier group.
    assert not np.isin(fu_np, np.arange(1, 6)).any(), np.unique(fu_np)
    assert torch.isnan(ff).all()
    assert torch.isnan(fh).all()
    # After the barrier, the group's own writes are visible.
    gids = np.arange(n) // group + 1
    np.testing.assert_array_equal(nb.numpy(), gids)


@pytest.mark.parametrize("group", [64, 50, 7])
def test_device_memory_barrier(lib, group):
    n = 3 * group + 2
    scratch = torch.zeros(n, dtype=torch.int32)
    out = torch.full((n,), -1, dtype=torch.int32)
    lib.device_exchange(scratch, out, threads=n, group_size=group, order="reverse")
    exp = []
    for s in group_slices(n, group):
        idx = np.arange(s.start, s.stop)
        exp.append(np.roll(idx, 1) * 3)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(exp))
    assert torch.all(scratch == 0)


@pytest.mark.parametrize("order", ORDERS)
def test_simdgroup_barrier_exchange(lib, order):
    n = 256
    x = torch.randn(n)
    out = torch.zeros(n)
    lib.simd_exchange(x, out, group_size=128, order=order)
    lanes = torch.arange(n)
    src = (lanes // 32) * 32 + (lanes % 32 + 7) % 32
    assert torch.equal(out, x[src])


@pytest.mark.parametrize("group", [64, 100, 1])
def test_atomics_device_and_threadgroup(lib, group):
    n = 5 * group + 3
    rng = np.random.default_rng(group)
    x = rng.integers(-500, 500, n).astype(np.int32)
    total = torch.zeros(1, dtype=torch.int32)
    hist = torch.zeros(8, dtype=torch.int32)
    ngroups = -(-n // group)
    per_group = torch.zeros(3 * ngroups, dtype=torch.int32)
    fsum = torch.zeros(1)
    dmin = torch.full((1,), 2**31 - 1, dtype=torch.int32)
    lib.atomics(
        torch.from_numpy(x), total, hist, per_group, fsum, dmin, threads=n, group_size=group
    )
    assert total.item() == x.sum() - n
    np.testing.assert_array_equal(hist.numpy(), np.bincount(x.view(np.uint32) & 7, minlength=8))
    assert fsum.item() == float(x.sum())
    assert dmin.item() == x.min()
    pg = per_group.numpy().reshape(ngroups, 3)
    for k, s in enumerate(group_slices(n, group)):
        v = x[s]
        assert pg[k, 0] == v.sum() and pg[k, 1] == v.max()
        bits = 0
        for e in v.view(np.uint32):
            bits |= 1 << int(e & 31)
        assert pg[k, 2] == np.uint32(bits).view(np.int32)


@pytest.mark.parametrize("rounds", [0, 1, 5, 64])
def test_barriers_in_data_dependent_loop(lib, rounds):
    group = 100
    n = 2 * group
    out = torch.zeros(n, dtype=torch.int32)
    lib.ping_pong(
        torch.tensor([rounds], dtype=torch.int32), out, threads=n, group_size=group, order="random"
    )
    tid = np.arange(n) % group
    np.testing.assert_array_equal(out.numpy(), (tid + rounds) % group)
