"""Every kernel builtin, on non-uniform 1-, 2- and 3-D grids, against a NumPy model.

Each variant exists twice: sync-free (runs as a plain loop) and with a barrier
(runs on fibers), because the two execution paths compute builtins separately.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpslinalg import emulator as emu

NREC = 27  # values recorded per thread

SRC = r"""
#include <metal_stdlib>
using namespace metal;

#define NREC 27
#define NO_SYNC ((void)0)
#define SYNC threadgroup_barrier(mem_flags::mem_none)

#define X3(v) (uint)(v).x, (uint)(v).y, (uint)(v).z
#define X2(v) (uint)(v).x, (uint)(v).y, 0u
#define X1(v) (uint)(v), 0u, 0u

// Writes the 27 recorded values; `idx` is the thread's linear grid index.
#define RECORD(XN, pg, tgp, ptg, tpt, dtpt, tpg, tgpg, tiitg, tiisg, sgiitg, tpsg, tew, sgptg) \
    do {                                                                      \
        uint vals[NREC] = {XN(pg), XN(tgp), XN(ptg), XN(tpt), XN(dtpt),        \
                           XN(tpg), XN(tgpg), (uint)(tiitg), (uint)(tiisg),     \
                           (uint)(sgiitg), (uint)(tpsg), (uint)(tew),         \
                           (uint)(sgptg)};                                    \
        for (int k = 0; k < NREC; ++k) out[NREC * idx + k] = vals[k];         \
    } while (0)

#define KERNEL(NAME, V, S, XN, LINEAR, BODY_SYNC)                              \
kernel void NAME(device uint* out [[buffer(0)]],                              \
                 V pg [[thread_position_in_grid]],                            \
                 V tgp [[threadgroup_position_in_grid]],                      \
                 V ptg [[thread_position_in_threadgroup]],                    \
                 V tpt [[threads_per_threadgroup]],                           \
                 V dtpt [[dispatch_threads_per_threadgroup]],                 \
                 V tpg [[threads_per_grid]],                                  \
                 V tgpg [[threadgroups_per_grid]],                            \
                 S tiitg [[thread_index_in_threadgroup]],                     \
                 S tiisg [[thread_index_in_simdgroup]],                       \
                 S sgiitg [[simdgroup_index_in_threadgroup]],                 \
                 S tpsg [[threads_per_simdgroup]],                            \
                 S tew [[thread_execution_width]],                            \
                 S sgptg [[simdgroups_per_threadgroup]]) {                    \
    uint idx = LINEAR;                                                        \
    BODY_SYNC;                                                                \
    RECORD(XN, pg, tgp, ptg, tpt, dtpt, tpg, tgpg, tiitg, tiisg, sgiitg,      \
           tpsg, tew, sgptg);                                                 \
}

#define LIN3 (((uint)pg.z * (uint)tpg.y + (uint)pg.y) * (uint)tpg.x + (uint)pg.x)
#define LIN2 ((uint)pg.y * (uint)tpg.x + (uint)pg.x)
#define LIN1 ((uint)pg)

KERNEL(b3_uint,          uint3,   uint,   X3, LIN3, NO_SYNC)
KERNEL(b3_uint_sync,     uint3,   uint,   X3, LIN3, SYNC)
KERNEL(b3_ushort,        ushort3, ushort, X3, LIN3, NO_SYNC)
KERNEL(b3_ushort_sync,   ushort3, ushort, X3, LIN3, SYNC)
KERNEL(b2_uint,          uint2,   uint,   X2, LIN2, NO_SYNC)
KERNEL(b2_uint_sync,     uint2,   uint,   X2, LIN2, SYNC)
KERNEL(b2_ushort,        ushort2, ushort, X2, LIN2, NO_SYNC)
KERNEL(b1_uint,          uint,    uint,   X1, LIN1, NO_SYNC)
KERNEL(b1_uint_sync,     uint,    uint,   X1, LIN1, SYNC)
KERNEL(b1_ushort,        ushort,  ushort, X1, LIN1, NO_SYNC)
KERNEL(b1_ushort_sync,   ushort,  ushort, X1, LIN1, SYNC)

// Only a subset of builtins, in another parameter order, with a buffer after them.
kernel void subset(uint2 tgp [[threadgroup_position_in_grid]],
                   device uint* out [[buffer(1)]],
                   uint2 pg [[thread_position_in_grid]],
                   constant uint& width [[buffer(0)]],
                   ushort lane [[thread_index_in_simdgroup]]) {
    uint idx = pg.y * width + pg.x;
    out[3 * idx + 0] = tgp.x;
    out[3 * idx + 1] = tgp.y;
    out[3 * idx + 2] = lane;
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def model(threads, group):
    """Expected records, shape (prod(threads), 27), rows in linear grid order."""
    T = np.array(list(threads) + [1] * (3 - len(threads)))
    G = np.array(list(group) + [1] * (3 - len(group)))
    ndim = len(threads)
    z, y, x = np.meshgrid(np.arange(T[2]), np.arange(T[1]), np.arange(T[0]), indexing="ij")
    p = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    g = p // G
    l = p % G
    tpt = np.minimum(G, T - g * G)
    tgpg = -(-T // G)
    tid = l[:, 0] + l[:, 1] * tpt[:, 0] + l[:, 2] * tpt[:, 0] * tpt[:, 1]
    nthreads = tpt.prod(axis=1)
    n = p.shape[0]

    def vec(a):
        a = np.broadcast_to(a, (n, 3)).copy()
        a[:, ndim:] = 0
        return a

    cols = [
        vec(p),
        vec(g),
        vec(l),
        vec(tpt),
        vec(G),
        vec(T),
        vec(tgpg),
        tid[:, None],
        (tid % 32)[:, None],
        (tid // 32)[:, None],
        np.full((n, 1), 32),
        np.full((n, 1), 32),
        (-(-nthreads // 32))[:, None],
    ]
    return np.concatenate(cols, axis=1).astype(np.uint32)


NAMES = (
    ["thread_position_in_grid"] * 3
    + ["threadgroup_position_in_grid"] * 3
    + ["thread_position_in_threadgroup"] * 3
    + ["threads_per_threadgroup"] * 3
    + ["dispatch_threads_per_threadgroup"] * 3
    + ["threads_per_grid"] * 3
    + ["threadgroups_per_grid"] * 3
    + [
        "thread_index_in_threadgroup",
        "thread_index_in_simdgroup",
        "simdgroup_index_in_threadgroup",
        "threads_per_simdgroup",
        "thread_execution_width",
        "simdgroups_per_threadgroup",
    ]
)


def run_and_check(lib, name, threads, group, **kw):
    n = int(np.prod(threads))
    out = torch.full((n * NREC,), -1, dtype=torch.int32)
    if group is None:
        getattr(lib, name)(out, threads=list(threads), **kw)
        group = [min(threads[0], 1024)] if len(threads) == 1 else [1024] + [1] * (len(threads) - 1)
    else:
        getattr(lib, name)(out, threads=list(threads), group_size=list(group), **kw)
    got = out.numpy().view(np.uint32).reshape(n, NREC)
    exp = model(threads, group)
    bad = np.argwhere(got != exp)
    if bad.size:
        r, c = bad[0]
        raise AssertionError(
            f"{name} threads={threads} group={group}: {len(bad)} mismatches; first at "
            f"grid index {r}, {NAMES[c]} (col {c}): got {got[r, c]}, expected {exp[r, c]}; "
            f"row got {got[r].tolist()} expected {exp[r].tolist()}"
        )


GRIDS_3D = [
    ((7, 6, 5), (4, 4, 2)),
    ((9, 5, 3), (3, 5, 3)),
    ((33, 2, 2), (32, 1, 2)),
    ((5, 4, 3), (8, 8, 8)),
]
GRIDS_2D = [((37, 23), (8, 4)), ((19, 11), (5, 7)), ((40, 3), (40, 1)), ((3, 70), (1, 64))]
GRIDS_1D = [((250,), (100,)), ((1000,), (96,)), ((45,), (45,)), ((5,), (64,)), ((70,), (32,))]


@pytest.mark.parametrize("name", ["b3_uint", "b3_uint_sync", "b3_ushort", "b3_ushort_sync"])
@pytest.mark.parametrize("threads,group", GRIDS_3D)
def test_builtins_3d(lib, name, threads, group):
    run_and_check(lib, name, threads, group)


@pytest.mark.parametrize("name", ["b2_uint", "b2_uint_sync", "b2_ushort"])
@pytest.mark.parametrize("threads,group", GRIDS_2D)
def test_builtins_2d(lib, name, threads, group):
    run_and_check(lib, name, threads, group)


@pytest.mark.parametrize("name", ["b1_uint", "b1_uint_sync", "b1_ushort", "b1_ushort_sync"])
@pytest.mark.parametrize("threads,group", GRIDS_1D)
def test_builtins_1d(lib, name, threads, group):
    run_and_check(lib, name, threads, group)


@pytest.mark.parametrize(
    "name,threads",
    [
        ("b1_uint", (3000,)),
        ("b1_uint_sync", (1500,)),
        ("b1_uint", (70001,)),
        ("b2_uint", (37, 5)),
        ("b2_uint_sync", (1100, 2)),
        ("b3_uint", (3, 4, 5)),
    ],
)
def test_builtins_default_group(lib, name, threads):
    run_and_check(lib, name, threads, None)


@pytest.mark.parametrize("order", ["reverse", "random"])
def test_builtins_independent_of_order(lib, order):
    run_and_check(lib, "b3_uint_sync", (9, 5, 3), (3, 5, 3), order=order)
    run_and_check(lib, "b1_uint", (250,), (100,), order=order)


def test_builtins_in_debug_build():
    dbg = emu.compile_shader(SRC, debug=True)
    run_and_check(dbg, "b2_uint_sync", (19, 11), (5, 7))
    run_and_check(dbg, "b3_ushort", (7, 6, 5), (4, 4, 2))


def test_builtin_subset_and_parameter_order(lib):
    w, h = 21, 6
    out = torch.full((w * h * 3,), -1, dtype=torch.int32)
    lib.subset(w, out, threads=[w, h], group_size=[8, 4], arg_casts={0: "int32"})
    rec = out.numpy().reshape(h, w, 3)
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    np.testing.assert_array_equal(rec[..., 0], xs // 8)
    np.testing.assert_array_equal(rec[..., 1], ys // 4)
    tpt_x = np.minimum(8, w - (xs // 8) * 8)
    tid = (xs % 8) + (ys % 4) * tpt_x
    np.testing.assert_array_equal(rec[..., 2], tid % 32)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), ndim=st.integers(1, 3), sync=st.booleans())
def test_property_random_grids(lib, data, ndim, sync):
    threads = [data.draw(st.integers(1, 40)) for _ in range(ndim)]
    group = [data.draw(st.integers(1, 40)) for _ in range(ndim)]
    while int(np.prod(group)) > 1024:
        group[int(np.argmax(group))] //= 2
    name = {1: "b1_uint", 2: "b2_uint", 3: "b3_uint"}[ndim] + ("_sync" if sync else "")
    run_and_check(lib, name, tuple(threads), tuple(group))
