"""SIMD-group functions against a NumPy model of the SIMT active mask.

The model: a threadgroup is cut into simdgroups of 32 consecutive
thread_index_in_threadgroup values (the last one may be partial, and so may the
last threadgroup of the grid); a collective sees exactly the lanes of its
simdgroup that execute the call (the active lanes).
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
using namespace metal;

// One reduction per kernel; only lanes with active[i] != 0 take part.
#define RED_F(NAME, EXPR)                                                     \
kernel void NAME(device const float* x [[buffer(0)]],                         \
                 device const int* active [[buffer(1)]],                      \
                 device float* out [[buffer(2)]],                             \
                 uint i [[thread_position_in_grid]]) {                        \
    if (active[i] == 0) return;                                               \
    float v = x[i];                                                           \
    out[i] = EXPR;                                                            \
}
#define RED_I(NAME, EXPR)                                                     \
kernel void NAME(device const int* x [[buffer(0)]],                           \
                 device const int* active [[buffer(1)]],                      \
                 device int* out [[buffer(2)]],                               \
                 uint i [[thread_position_in_grid]]) {                        \
    if (active[i] == 0) return;                                               \
    int v = x[i];                                                             \
    out[i] = EXPR;                                                            \
}

RED_F(f_sum, simd_sum(v))
RED_F(f_product, simd_product(v))
RED_F(f_max, simd_max(v))
RED_F(f_min, simd_min(v))
RED_F(f_incl_sum, simd_prefix_inclusive_sum(v))
RED_F(f_excl_sum, simd_prefix_exclusive_sum(v))
RED_F(f_incl_product, simd_prefix_inclusive_product(v))
RED_F(f_excl_product, simd_prefix_exclusive_product(v))
RED_F(f_broadcast_first, simd_broadcast_first(v))
RED_F(f_metal_ns_sum, metal::simd_sum(v))
RED_I(i_sum, simd_sum(v))
RED_I(i_max, simd_max(v))
RED_I(i_min, simd_min(v))
RED_I(i_and, simd_and(v))
RED_I(i_or, simd_or(v))
RED_I(i_xor, simd_xor(v))
RED_I(i_incl_sum, simd_prefix_inclusive_sum(v))
RED_I(i_excl_sum, simd_prefix_exclusive_sum(v))
RED_I(i_all, simd_all(v > 0) ? 1 : 0)
RED_I(i_any, simd_any(v > 0) ? 1 : 0)
RED_I(i_is_first, simd_is_first() ? 1 : 0)

kernel void uint_ops(device const uint* x [[buffer(0)]],
                     device uint* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    uint v = x[i];
    out[4 * i + 0] = simd_max(v);
    out[4 * i + 1] = simd_min(v);
    out[4 * i + 2] = simd_sum(v);     // wraps modulo 2^32
    out[4 * i + 3] = simd_or(v);
}

kernel void votes(device const int* x [[buffer(0)]],
                  device const int* active [[buffer(1)]],
                  device ulong* out [[buffer(2)]],
                  uint i [[thread_position_in_grid]]) {
    if (active[i] == 0) return;
    out[2 * i + 0] = static_cast<ulong>(simd_ballot(x[i] > 0));
    out[2 * i + 1] = static_cast<ulong>(simd_active_threads_mask());
}

// Several collectives in one divergent region (used by the property test).
kernel void multi(device const int* x [[buffer(0)]],
                  device const int* active [[buffer(1)]],
                  device int* out [[buffer(2)]],
                  device ulong* vote [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    int v = x[i];
    if (active[i] != 0) {
        out[6 * i + 0] = simd_sum(v);
        out[6 * i + 1] = simd_prefix_exclusive_sum(v);
        out[6 * i + 2] = simd_max(v);
        out[6 * i + 3] = simd_is_first() ? 1 : 0;
        out[6 * i + 4] = simd_broadcast_first(v);
        vote[i] = static_cast<ulong>(simd_ballot(v > 0));
    }
    out[6 * i + 5] = simd_sum(1);   // after reconvergence: every live lane
}

kernel void half_sum(device const half* x [[buffer(0)]],
                     device half* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = simd_sum(x[i]);
}

kernel void vec_ops(device const float4* x [[buffer(0)]],
                    device float4* out [[buffer(1)]],
                    device float2* out2 [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
    out[i] = simd_sum(x[i]);
    out2[i] = simd_shuffle_xor(x[i].xy, ushort(5));
}

kernel void shuffles(device const float* x [[buffer(0)]],
                     device const ushort* src_lane [[buffer(1)]],
                     constant ushort& delta [[buffer(2)]],
                     constant ushort& mask [[buffer(3)]],
                     constant ushort& bcast [[buffer(4)]],
                     device float* out [[buffer(5)]],
                     uint i [[thread_position_in_grid]]) {
    float v = x[i];
    out[7 * i + 0] = simd_shuffle(v, src_lane[i]);
    out[7 * i + 1] = simd_shuffle_up(v, delta);
    out[7 * i + 2] = simd_shuffle_down(v, delta);
    out[7 * i + 3] = simd_shuffle_xor(v, mask);
    out[7 * i + 4] = simd_shuffle_rotate_up(v, delta);
    out[7 * i + 5] = simd_shuffle_rotate_down(v, delta);
    out[7 * i + 6] = simd_broadcast(v, bcast);
}

// Shuffles whose sources are all active lanes of a partial simdgroup.
kernel void shuffles_partial(device const float* x [[buffer(0)]],
                             device const ushort* src_lane [[buffer(1)]],
                             constant ushort& delta [[buffer(2)]],
                             device float* out [[buffer(3)]],
                             uint i [[thread_position_in_grid]]) {
    float v = x[i];
    out[4 * i + 0] = simd_shuffle(v, src_lane[i]);
    out[4 * i + 1] = simd_shuffle_up(v, delta);
    out[4 * i + 2] = simd_shuffle_xor(v, ushort(1));
    out[4 * i + 3] = simd_broadcast(v, ushort(4));
}

// Shuffles and reductions of other element types.
kernel void typed_shuffles(device const half* h [[buffer(0)]],
                           device const int* x [[buffer(1)]],
                           device half* hout [[buffer(2)]],
                           device int* iout [[buffer(3)]],
                           device float* fout [[buffer(4)]],
                           uint i [[thread_position_in_grid]],
                           ushort lane [[thread_index_in_simdgroup]]) {
    hout[2 * i + 0] = simd_shuffle_xor(h[i], ushort(1));
    hout[2 * i + 1] = simd_max(h[i]);
    uint2 u = uint2(uint(x[i]), uint(lane));
    uint2 su = simd_shuffle_down(u, ushort(2));
    iout[3 * i + 0] = int(su.x);
    iout[3 * i + 1] = int(su.y);
    int3 v = int3(x[i], -x[i], int(lane));
    iout[3 * i + 2] = simd_sum(v).y + simd_broadcast(v, ushort(3)).z;
    float3 f = float3(float(lane), 1.0f, 2.0f);
    float3 g = simd_shuffle(f, ushort(31 - lane));
    fout[i] = g.x + g.y * 100.0f + g.z * 1000.0f;
}

kernel void int_shuffle(device const int* x [[buffer(0)]],
                        device int* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]],
                        ushort lane [[thread_index_in_simdgroup]]) {
    // Classic shuffle-down tree reduction over a full simdgroup.
    int v = x[i];
    for (ushort off = 16; off > 0; off >>= 1) v += simd_shuffle_down(v, off);
    out[i] = simd_broadcast(v, ushort(0));
    (void)lane;
}

// if/else each with a collective, reconvergence, then a loop whose trip count
// depends on the lane.
kernel void divergent(device const int* x [[buffer(0)]],
                      device const int* active [[buffer(1)]],
                      device int* out [[buffer(2)]],
                      uint i [[thread_position_in_grid]],
                      ushort lane [[thread_index_in_simdgroup]]) {
    int v = x[i];
    if (active[i] != 0) {
        out[4 * i + 0] = simd_sum(v);
    } else {
        out[4 * i + 0] = simd_max(v) + 100000;
    }
    out[4 * i + 1] = simd_sum(1);
    int acc = 0;
    for (uint k = 0; k < uint(lane % 5); ++k) {
        acc += simd_sum(1);
    }
    out[4 * i + 2] = acc;
    // Nested divergence.
    int r = -1;
    if (lane < 16) {
        if (lane % 2 == 1) {
            r = simd_prefix_exclusive_sum(v);
        } else {
            r = simd_min(v);
        }
    }
    out[4 * i + 3] = r;
}

// Collectives inside a helper function and after a barrier. Simdgroup 0
// combines the per-simdgroup partials: a partial simdgroup may have fewer
// lanes than there are partials.
template <typename T>
T group_total(T v, threadgroup T* scratch, ushort lane, ushort sg, ushort nsg) {
    T s = simd_sum(v);
    if (lane == 0) scratch[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        T t = simd_sum(lane < nsg ? scratch[lane] : T(0));
        if (lane == 0) scratch[32] = t;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return scratch[32];
}

kernel void two_level(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]],
                      ushort lane [[thread_index_in_simdgroup]],
                      ushort sg [[simdgroup_index_in_threadgroup]],
                      ushort nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[33];
    out[i] = group_total(x[i], scratch, lane, sg, nsg);
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


# ------------------------------------------------------------------ model


def simdgroups(n, group):
    """Global indices of each simdgroup, in lane order."""
    out = []
    for start in range(0, n, group):
        size = min(group, n - start)
        for k in range(0, size, 32):
            out.append(np.arange(start + k, start + min(k + 32, size)))
    return out


def model(op, x, active, group):
    n = len(x)
    exp = {}
    for sg in simdgroups(n, group):
        lanes = np.arange(len(sg))
        act = sg[active[sg] != 0]
        act_lanes = lanes[active[sg] != 0]
        v = x[act]
        for j, gi in enumerate(act):
            exp[gi] = op(v, j, act_lanes)
    return exp


def np_float_ops():
    def pf(f):
        return lambda v, j, lanes: f(v, j)

    return {
        "f_sum": pf(lambda v, j: v.sum(dtype=np.float64)),
        "f_metal_ns_sum": pf(lambda v, j: v.sum(dtype=np.float64)),
        "f_product": pf(lambda v, j: np.prod(v, dtype=np.float64)),
        "f_max": pf(lambda v, j: v.max()),
        "f_min": pf(lambda v, j: v.min()),
        "f_incl_sum": pf(lambda v, j: v[: j + 1].sum(dtype=np.float64)),
        "f_excl_sum": pf(lambda v, j: v[:j].sum(dtype=np.float64)),
        "f_incl_product": pf(lambda v, j: np.prod(v[: j + 1], dtype=np.float64)),
        "f_excl_product": pf(lambda v, j: np.prod(v[:j], dtype=np.float64)),
        "f_broadcast_first": pf(lambda v, j: v[0]),
    }


def np_int_ops():
    def pf(f):
        return lambda v, j, lanes: f(v, j)

    red = np.bitwise_and.reduce
    return {
        "i_sum": pf(lambda v, j: v.sum()),
        "i_max": pf(lambda v, j: v.max()),
        "i_min": pf(lambda v, j: v.min()),
        "i_and": pf(lambda v, j: red(v)),
        "i_or": pf(lambda v, j: np.bitwise_or.reduce(v)),
        "i_xor": pf(lambda v, j: np.bitwise_xor.reduce(v)),
        "i_incl_sum": pf(lambda v, j: v[: j + 1].sum()),
        "i_excl_sum": pf(lambda v, j: v[:j].sum()),
        "i_all": pf(lambda v, j: int(np.all(v > 0))),
        "i_any": pf(lambda v, j: int(np.any(v > 0))),
        "i_is_first": pf(lambda v, j: int(j == 0)),
    }


# (n, group) pairs: full simdgroups, partial simdgroups inside a group, a
# partial last group, groups smaller than 32, a single lane.
GEOMETRIES = [(64, 64), (40, 40), (100, 100), (250, 96), (70, 7), (1, 1), (130, 1024)]
ACTIVITY = ["all", "odd", "random", "first_only", "last_only"]


def make_active(kind, n, rng):
    if kind == "all":
        return np.ones(n, np.int32)
    if kind == "odd":
        return (np.arange(n) % 2).astype(np.int32)
    if kind == "random":
        return (rng.random(n) < 0.6).astype(np.int32)
    a = np.zeros(n, np.int32)
    if kind == "first_only":
        a[::32] = 1
    else:
        a[31::32] = 1
    return a


def check(got, exp, sentinel, active, name, rtol=0.0):
    n = len(got)
    for i in range(n):
        if active[i]:
            e = exp[i]
            if rtol:
                assert got[i] == pytest.approx(e, rel=rtol), (name, i, got[i], e)
            else:
                assert got[i] == e, (name, i, got[i], e)
        else:
            assert got[i] == sentinel, (name, i, "inactive lane wrote", got[i])


@pytest.mark.parametrize("activity", ACTIVITY)
@pytest.mark.parametrize("n,group", GEOMETRIES)
def test_float_collectives(lib, n, group, activity):
    rng = np.random.default_rng(n * 31 + group)
    # Small integers make sums exact in any order; products use powers of two.
    x_sum = rng.integers(-50, 50, n).astype(np.float32)
    x_prod = rng.choice(np.array([0.5, 1.0, 2.0, -1.0, -2.0], np.float32), n)
    active = make_active(activity, n, rng)
    for name, op in np_float_ops().items():
        x = x_prod if "product" in name else x_sum
        out = torch.full((n,), -777.0)
        getattr(lib, name)(
            torch.from_numpy(x), torch.from_numpy(active), out, threads=n, group_size=group
        )
        check(out.numpy(), model(op, x, active, group), -777.0, active, name)


@pytest.mark.parametrize("activity", ACTIVITY)
@pytest.mark.parametrize("n,group", GEOMETRIES)
def test_int_collectives(lib, n, group, activity):
    rng = np.random.default_rng(n * 17 + group)
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    x[rng.random(n) < 0.3] = 0  # make all/any/ballot predicates mixed
    active = make_active(activity, n, rng)
    for name, op in np_int_ops().items():
        xs = x
        if name in ("i_and", "i_or", "i_xor"):
            xs = rng.integers(0, 2**31 - 1, n).astype(np.int32)
        out = torch.full((n,), -777, dtype=torch.int32)
        getattr(lib, name)(
            torch.from_numpy(xs), torch.from_numpy(active), out, threads=n, group_size=group
        )
        check(out.numpy(), model(op, xs, active, group), -777, active, name)


def test_float_sum_of_non_integers_is_close(lib):
    rng = np.random.default_rng(0)
    n = 96
    x = rng.standard_normal(n).astype(np.float32)
    active = np.ones(n, np.int32)
    out = torch.zeros(n)
    lib.f_sum(torch.from_numpy(x), torch.from_numpy(active), out, threads=n, group_size=96)
    exp = x.reshape(3, 32).astype(np.float64).sum(axis=1).repeat(32)
    np.testing.assert_allclose(out.numpy(), exp, rtol=0, atol=1e-5)


def test_uint_collectives(lib):
    n = 64
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x[3] = 0xFFFFFFFF  # larger than any int: unsigned comparison
    out = torch.zeros(4 * n, dtype=torch.int32)
    lib.uint_ops(torch.from_numpy(x.view(np.int32)), out, group_size=64, threads=n)
    got = out.numpy().view(np.uint32).reshape(n, 4)
    for s in range(0, n, 32):
        v = x[s : s + 32]
        exp = [
            v.max(),
            v.min(),
            np.uint32(v.astype(np.uint64).sum() % 2**32),
            np.bitwise_or.reduce(v),
        ]
        np.testing.assert_array_equal(got[s : s + 32], np.tile(np.array(exp, np.uint32), (32, 1)))


@pytest.mark.parametrize("n,group", GEOMETRIES)
@pytest.mark.parametrize("activity", ["all", "random", "odd"])
def test_ballot_and_active_mask(lib, n, group, activity):
    rng = np.random.default_rng(n + 3 * group)
    x = rng.integers(-3, 3, n).astype(np.int32)
    active = make_active(activity, n, rng)
    out = torch.full((2 * n,), -1, dtype=torch.int64)
    lib.votes(torch.from_numpy(x), torch.from_numpy(active), out, threads=n, group_size=group)
    got = out.numpy().view(np.uint64).reshape(n, 2)
    for sg in simdgroups(n, group):
        act = active[sg] != 0
        lanes = np.arange(len(sg))
        ballot = sum(1 << int(l) for l in lanes[act & (x[sg] > 0)])
        mask = sum(1 << int(l) for l in lanes[act])
        for gi in sg[act]:
            assert int(got[gi, 0]) == ballot, (gi, hex(int(got[gi, 0])), hex(ballot))
            assert int(got[gi, 1]) == mask, (gi, hex(int(got[gi, 1])), hex(mask))
        for gi in sg[~act]:
            assert int(got[gi, 0]) == 2**64 - 1


def test_half_simd_sum(lib):
    n = 64
    x = (torch.arange(n) % 7 - 3).to(torch.float16) * 0.5
    out = torch.zeros(n, dtype=torch.float16)
    lib.half_sum(x, out, group_size=64)
    exp = x.view(2, 32).float().sum(1).repeat_interleave(32).half()
    assert torch.equal(out, exp)


def test_vector_collectives(lib):
    n = 64
    x = torch.arange(4 * n, dtype=torch.float32).reshape(n, 4) % 13
    out = torch.zeros(n, 4)
    out2 = torch.zeros(n, 2)
    lib.vec_ops(x, out, out2, threads=n, group_size=64)
    exp = x.view(2, 32, 4).sum(1).repeat_interleave(32, dim=0)
    assert torch.equal(out, exp)
    lanes = torch.arange(n)
    src = (lanes // 32) * 32 + ((lanes % 32) ^ 5)
    assert torch.equal(out2, x[src, :2])


@pytest.mark.parametrize(
    "delta,mask,bcast", [(1, 1, 0), (3, 16, 31), (0, 0, 7), (31, 31, 16), (16, 7, 5)]
)
@pytest.mark.parametrize("group", [32, 64, 96])
def test_shuffles_full_simdgroups(lib, delta, mask, bcast, group):
    n = 192
    rng = np.random.default_rng(delta * 100 + mask)
    x = rng.standard_normal(n).astype(np.float32)
    src_lane = rng.integers(0, 32, n).astype(np.int16)
    out = torch.zeros(7 * n)
    lib.shuffles(
        torch.from_numpy(x),
        torch.from_numpy(src_lane),
        delta,
        mask,
        bcast,
        out,
        threads=n,
        group_size=group,
        arg_casts={2: "int16", 3: "int16", 4: "int16"},
    )
    got = out.numpy().reshape(n, 7)
    exp = np.zeros((n, 7), np.float32)
    for base in range(0, n, 32):
        v = x[base : base + 32]
        for l in range(32):
            e = exp[base + l]
            e[0] = v[src_lane[base + l]]
            e[1] = v[l - delta] if l >= delta else v[l]
            e[2] = v[l + delta] if l + delta < 32 else v[l]
            e[3] = v[l ^ mask]
            e[4] = v[(l - delta) % 32]
            e[5] = v[(l + delta) % 32]
            e[6] = v[bcast]
    names = [
        "shuffle",
        "shuffle_up",
        "shuffle_down",
        "shuffle_xor",
        "rotate_up",
        "rotate_down",
        "broadcast",
    ]
    for c, name in enumerate(names):
        np.testing.assert_array_equal(got[:, c], exp[:, c], err_msg=name)


def test_shuffles_in_partial_simdgroup(lib):
    # Lanes below delta keep their value; all sources are active lanes.
    n, delta = 20, 3
    x = np.arange(n, dtype=np.float32) * 1.5
    src_lane = np.arange(n, dtype=np.int16)[::-1].copy()  # lane l reads lane 19-l
    out = torch.zeros(4 * n)
    lib.shuffles_partial(
        torch.from_numpy(x),
        torch.from_numpy(src_lane),
        delta,
        out,
        threads=n,
        group_size=n,
        arg_casts={2: "int16"},
    )
    got = out.numpy().reshape(n, 4)
    l = np.arange(n)
    np.testing.assert_array_equal(got[:, 0], x[19 - l])
    np.testing.assert_array_equal(got[:, 1], np.where(l >= delta, x[np.maximum(l - delta, 0)], x))
    np.testing.assert_array_equal(got[:, 2], x[l ^ 1])
    np.testing.assert_array_equal(got[:, 3], np.full(n, x[4]))


def test_typed_shuffles_and_reductions(lib):
    n = 64
    h = (torch.arange(n) * 0.25 - 3).to(torch.float16)
    x = (torch.arange(n, dtype=torch.int32) * 7) % 23 - 11
    hout = torch.zeros(2 * n, dtype=torch.float16)
    iout = torch.zeros(3 * n, dtype=torch.int32)
    fout = torch.zeros(n)
    lib.typed_shuffles(h, x, hout, iout, fout, group_size=64)
    lanes = torch.arange(n) % 32
    base = torch.arange(n) - lanes
    hh = hout.view(n, 2)
    assert torch.equal(hh[:, 0], h[base + (lanes ^ 1)])
    assert torch.equal(hh[:, 1], h.view(2, 32).max(1).values.repeat_interleave(32))
    ii = iout.view(n, 3)
    src = torch.where(lanes + 2 < 32, torch.arange(n) + 2, torch.arange(n))
    assert torch.equal(ii[:, 0], x[src])
    assert torch.equal(ii[:, 1], lanes[src].int())
    exp2 = -x.view(2, 32).sum(1).repeat_interleave(32) + 3
    assert torch.equal(ii[:, 2], exp2.int())
    assert torch.equal(fout, (31 - lanes).float() + 100 + 2000)


def test_shuffle_down_tree_reduction(lib):
    n = 96
    x = torch.arange(n, dtype=torch.int32) - 40
    out = torch.zeros(n, dtype=torch.int32)
    lib.int_shuffle(x, out, group_size=32)
    exp = x.view(3, 32).sum(1).repeat_interleave(32)
    assert torch.equal(out, exp.to(torch.int32))


@pytest.mark.parametrize("n,group", [(64, 64), (100, 100), (45, 45), (250, 96), (13, 13)])
@pytest.mark.parametrize("activity", ["odd", "random", "first_only", "all"])
@pytest.mark.parametrize("order", ["forward", "random"])
def test_divergent_branches_and_loops(lib, n, group, activity, order):
    rng = np.random.default_rng(group + n)
    x = rng.integers(-100, 100, n).astype(np.int32)
    active = make_active(activity, n, rng)
    out = torch.full((4 * n,), -555, dtype=torch.int32)
    lib.divergent(
        torch.from_numpy(x), torch.from_numpy(active), out, threads=n, group_size=group, order=order
    )
    got = out.numpy().reshape(n, 4)
    for sg in simdgroups(n, group):
        lanes = np.arange(len(sg))
        act = active[sg] != 0
        for j, gi in enumerate(sg):
            exp0 = x[sg[act]].sum() if act[j] else x[sg[~act]].max() + 100000
            assert got[gi, 0] == exp0, ("if/else", gi)
            assert got[gi, 1] == len(sg), ("reconverged", gi)
            trips = lanes % 5
            exp2 = sum(int(np.sum(trips > k)) for k in range(trips[j]))
            assert got[gi, 2] == exp2, ("loop", gi, got[gi, 2], exp2)
            if j < 16:
                sel = (lanes < 16) & (lanes % 2 == j % 2)
                if j % 2 == 1:
                    members = sg[sel]
                    exp3 = x[members[members < gi]].sum()
                else:
                    exp3 = x[sg[sel]].min()
            else:
                exp3 = -1
            assert got[gi, 3] == exp3, ("nested", gi, got[gi, 3], exp3)


@pytest.mark.parametrize("group", [1024, 100, 33, 32, 7, 1])
def test_two_level_reduction_in_helper(lib, group):
    n = 2 * group + 5
    x = (torch.arange(n) % 11 - 5).to(torch.float32)
    out = torch.zeros(n)
    lib.two_level(x, out, threads=n, group_size=group)
    exp = torch.cat([x[s : s + group].sum().repeat(min(group, n - s)) for s in range(0, n, group)])
    assert torch.equal(out, exp)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 160), group=st.integers(1, 160))
def test_property_divergent_collectives(lib, data, n, group):
    active = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.int32)
    x = np.array(data.draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n)), np.int32)
    out = torch.full((6 * n,), -9, dtype=torch.int32)
    vote = torch.full((n,), -1, dtype=torch.int64)
    lib.multi(torch.from_numpy(x), torch.from_numpy(active), out, vote, threads=n, group_size=group)
    got = out.numpy().reshape(n, 6)
    gv = vote.numpy().view(np.uint64)
    for sg in simdgroups(n, group):
        lanes = np.arange(len(sg))
        act = active[sg] != 0
        v = x[sg[act]]
        ballot = sum(1 << int(l) for l in lanes[act & (x[sg] > 0)])
        k = 0
        for j, gi in enumerate(sg):
            assert got[gi, 5] == len(sg)
            if not act[j]:
                assert list(got[gi, :5]) == [-9] * 5 and gv[gi] == 2**64 - 1
                continue
            assert got[gi, 0] == v.sum()
            assert got[gi, 1] == v[:k].sum()
            assert got[gi, 2] == v.max()
            assert got[gi, 3] == int(k == 0)
            assert got[gi, 4] == v[0]
            assert int(gv[gi]) == ballot
            k += 1


LATE_HELPER = r"""
#include <metal_stdlib>
using namespace metal;
float helper(float v);
kernel void k(device float* out [[buffer(0)]],
              uint i [[thread_position_in_grid]],
              ushort lane [[thread_index_in_simdgroup]]) {
    float v = float(lane);
    float r;
    if (lane < 16) {
        r = helper(v);
    } else {
        r = simd_max(v);
    }
    out[2 * i] = r;
    out[2 * i + 1] = simd_sum(1.0f);   // after reconvergence: all 32 lanes
}
float helper(float v) {             // defined below its caller
    return simd_sum(v);
}
"""


def test_collective_in_helper_defined_after_the_kernel():
    lib = emu.compile_shader(LATE_HELPER)
    out = torch.zeros(64)
    lib.k(out, threads=32)
    got = out.view(32, 2)
    lanes = torch.arange(32.0)
    assert torch.equal(got[:, 0], torch.where(lanes < 16, lanes[:16].sum(), 31.0))
    assert torch.equal(got[:, 1], torch.full((32,), 32.0))


# ------------------------------------------------------------------ the order of a reduction
#
# A float reduction's bits depend on the order of its operations. The emulator's is a butterfly
# over 32 slots (op_reduce in emu_simd.h); the CUDA executor computes the same one in every lane
# with one shuffle per offset, partial simdgroups included (detail::reduce in cuda_prelude.cuh),
# which `per_lane_butterfly` models lane by lane: it must give the emulator's bits.


def slot_butterfly(v, mask, f, width=32):
    """op_reduce over `width` slots (lane i active iff bit i of `mask`): for offsets width/2 ..
    1, slot i (bit `off` clear) takes f(v[i], v[i | off]), an empty slot its partner's value;
    slot 0 is the result."""
    has = [bool(mask >> i & 1) for i in range(width)]
    v = [v[i] if has[i] else None for i in range(width)]
    off = width // 2
    while off:
        for i in range(width):
            if i & off:
                continue
            j = i | off
            if has[i] and has[j]:
                v[i] = f(v[i], v[j])
            elif has[j]:
                v[i], has[i] = v[j], True
        off //= 2
    return v[0]


def per_lane_butterfly(v, mask, f, width=32):
    """detail::reduce of the CUDA prelude, lane by lane: {lane: its result} for the active
    lanes. Before offset `off` lane l holds slot l mod 2 off; it takes its partner slot's value
    from the lowest active lane congruent to it, if any (a shuffle from an inactive lane would
    read nothing: asserted never to happen)."""
    x = [v[i] if mask >> i & 1 else None for i in range(width)]
    active = [me for me in range(width) if mask >> me & 1]
    congruent = 1  # one bit per lane congruent to 0 modulo 2 off
    off = width // 2
    while off:
        new = list(x)
        for me in active:
            p = (me & (2 * off - 1)) ^ off
            holders = mask & (congruent << p)
            src = (holders & -holders).bit_length() - 1 if holders else me
            assert mask >> src & 1, (hex(mask), off, me, src)
            if holders:
                new[me] = f(x[src], x[me]) if me & off else f(x[me], x[src])
        x = new
        congruent |= congruent << off
        off //= 2
    return {me: x[me] for me in active}


def _masks(rng, count):
    """Activity masks of a simdgroup: the edge cases, then random ones of every density."""
    full = 2**32 - 1
    edge = [full, 1, 1 << 31, full ^ 1, full ^ (1 << 31), 0x0000FFFF, 0xFFFF0000, 0x55555555,
            0xAAAAAAAA, 0x80000001, 0x00010001, 0x11111111]
    edge += [1 << int(i) for i in rng.integers(1, 31, 4)]
    rand = [int(m) for m in rng.integers(1, 2**32, (2, count), dtype=np.uint64).flat]
    return edge + rand[:count] + [a & b or 1 for a, b in zip(rand[:count], rand[count:],
                                                             strict=True)]


def test_per_lane_butterfly_is_the_emulators_order():
    # Operands as expression trees: equal trees give equal bits for any F, commutative or not.
    tree = lambda a, b: (a, b)  # noqa: E731
    for width in (2, 4, 8):
        for mask in range(1, 2**width):
            ref = slot_butterfly(list(range(width)), mask, tree, width)
            assert set(per_lane_butterfly(list(range(width)), mask, tree, width).values()) \
                == {ref}, (width, bin(mask))
    for mask in _masks(np.random.default_rng(11), 300):
        ref = slot_butterfly(list(range(32)), mask, tree)
        assert set(per_lane_butterfly(list(range(32)), mask, tree).values()) == {ref}, hex(mask)


def test_float_reductions_of_partial_simdgroups_are_the_per_lane_butterflys_bits(lib):
    # One activity mask per simdgroup; values whose sums and products round differently in
    # another order, NaNs (which max and min ignore) and a simdgroup of NaNs only.
    rng = np.random.default_rng(7)
    masks = _masks(rng, 40)
    n = 32 * len(masks)
    active = np.array([m >> lane & 1 for m in masks for lane in range(32)], np.int32)
    f32 = np.float32
    data = {
        "f_sum": (rng.standard_normal(n) * 2.0 ** rng.integers(-12, 12, n), lambda a, b: a + b),
        "f_product": (1 + rng.standard_normal(n) / 64, lambda a, b: a * b),
        "f_max": (np.where(rng.random(n) < 0.2, np.nan, rng.standard_normal(n)), np.fmax),
        "f_min": (np.where(rng.random(n) < 0.2, np.nan, rng.standard_normal(n)), np.fmin),
    }
    for name, (x, f) in data.items():
        x = x.astype(f32)
        if name in ("f_max", "f_min"):
            x[32:64] = np.nan
        out = torch.full((n,), -777.0)
        getattr(lib, name)(torch.from_numpy(x), torch.from_numpy(active), out, threads=n,
                           group_size=1024)
        got = out.numpy()
        for s, mask in enumerate(masks):
            for lane, exp in per_lane_butterfly(list(x[32 * s : 32 * s + 32]), mask, f).items():
                g = f32(got[32 * s + lane])
                same = np.isnan(g) if np.isnan(exp) else g.view(np.int32) == f32(exp).view(np.int32)
                assert same, (name, hex(mask), lane, g, exp)
