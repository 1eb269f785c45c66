"""Lane and threadgroup order: a correct kernel gives bit-identical results in
every order; a racy one does not."""

import numpy as np
import pytest
import torch

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
using namespace metal;

// Correct: two-level reduction + scan with barriers between every phase.
kernel void correct(device const float* x [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    device float* totals [[buffer(2)]],
                    uint i [[thread_position_in_grid]],
                    uint t [[thread_index_in_threadgroup]],
                    uint n [[threads_per_threadgroup]],
                    uint g [[threadgroup_position_in_grid]],
                    ushort lane [[thread_index_in_simdgroup]],
                    ushort sg [[simdgroup_index_in_threadgroup]],
                    ushort nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float partial[32];
    threadgroup float sh[1024];
    float v = x[i];
    float incl = simd_prefix_inclusive_sum(v);
    if (lane == simd_max(lane)) partial[sg] = incl;
    sh[t] = v * v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float base = 0.0f;
    for (ushort k = 0; k < sg; ++k) base += partial[k];
    out[i] = base + incl + sh[(t + 1) % n];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
        float s = 0.0f;
        for (ushort k = 0; k < nsg; ++k) s += partial[k];
        totals[g] = s;
    }
}

// Racy: reads a neighbour's slot and overwrites its own without a barrier in
// between (write-after-read race).
kernel void racy(device const float* x [[buffer(0)]],
                 device float* out [[buffer(1)]],
                 uint i [[thread_position_in_grid]],
                 uint t [[thread_index_in_threadgroup]],
                 uint n [[threads_per_threadgroup]]) {
    threadgroup float sh[256];
    sh[t] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = sh[(t + 1) % n];
    sh[t] = v * 2.0f;               // missing barrier before this write
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = sh[t];
}

// Racy without any barrier: reads a slot another lane writes (sync-free path).
kernel void racy_no_barrier(device const float* x [[buffer(0)]],
                            device float* out [[buffer(1)]],
                            uint i [[thread_position_in_grid]],
                            uint t [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]]) {
    threadgroup float sh[256];
    sh[t] = x[i];
    out[i] = sh[(t + 1) % n] == sh[(t + 1) % n] ? 1.0f : 0.0f;   // poison is NaN
}

// Racy across threadgroups: reads what an earlier group may have written.
kernel void racy_groups(device int* flags [[buffer(0)]],
                        device int* seen [[buffer(1)]],
                        uint g [[threadgroup_position_in_grid]],
                        uint t [[thread_index_in_threadgroup]],
                        uint ng [[threadgroups_per_grid]]) {
    if (t == 0) {
        seen[g] = g > 0 ? flags[g - 1] : -1;
        flags[g] = 1;
    }
}
"""

ORDERS = ["forward", "reverse", "random"]


@pytest.fixture(scope="module")
def lib():
    # racy on purpose: these tests are about lane orders, so the race detector stays off even
    # when $MPSLINALG_EMULATOR_RACECHECK turns it on for the rest of the suite
    return emu.compile_shader(SRC, race_check=False)


def run_correct(lib, x, group, order):
    n = x.numel()
    out = torch.zeros(n)
    totals = torch.zeros(-(-n // group))
    lib.correct(x, out, totals, group_size=group, order=order)
    return out, totals


@pytest.mark.parametrize("group", [256, 100, 45])
def test_correct_kernel_identical_in_every_order(lib, group):
    g = torch.Generator().manual_seed(group)
    x = torch.randn(3 * group + 11, generator=g)
    ref_out, ref_tot = run_correct(lib, x, group, "forward")
    for order in ORDERS[1:] + ["random", "random"]:
        out, tot = run_correct(lib, x, group, order)
        assert torch.equal(out.view(torch.int32), ref_out.view(torch.int32)), order
        assert torch.equal(tot.view(torch.int32), ref_tot.view(torch.int32)), order
    # And the forward result is right.
    xs = x.double()
    exp = []
    for s in range(0, x.numel(), group):
        blk = xs[s : s + group]
        exp.append(torch.cumsum(blk, 0) + torch.roll(blk * blk, -1))
    torch.testing.assert_close(ref_out.double(), torch.cat(exp), rtol=1e-5, atol=1e-4)


def test_racy_kernel_differs_between_orders(lib):
    n, group = 256, 128
    x = torch.arange(n, dtype=torch.float32) + 1
    res = {}
    for order in ("forward", "reverse"):
        out = torch.zeros(n)
        lib.racy(x, out, group_size=group, order=order)
        res[order] = out
    assert not torch.equal(res["forward"], res["reverse"])
    # A random permutation of 128 lanes is almost never one of the two fixed orders.
    outs = []
    for _ in range(3):
        out = torch.zeros(n)
        lib.racy(x, out, group_size=group, order="random")
        outs.append(out)
    assert any(
        not torch.equal(o, res["forward"]) and not torch.equal(o, res["reverse"]) for o in outs
    )


def test_racy_sync_free_kernel_differs_between_orders(lib):
    n = 64
    x = torch.ones(n)
    outs = {}
    for order in ("forward", "reverse"):
        out = torch.full((n,), -1.0)
        lib.racy_no_barrier(x, out, group_size=n, order=order)
        outs[order] = out
    # Forward: lane t reads slot t+1 before lane t+1 wrote it (poison, NaN).
    assert not torch.equal(outs["forward"], outs["reverse"])
    assert (outs["forward"] == 0).sum() >= n - 1
    assert (outs["reverse"] == 1).sum() >= n - 1


def test_threadgroup_order_is_permuted_too(lib):
    ng, group = 16, 32
    res = {}
    for order in ("forward", "reverse"):
        flags = torch.zeros(ng, dtype=torch.int32)
        seen = torch.full((ng,), 7, dtype=torch.int32)
        lib.racy_groups(flags, seen, threads=ng * group, group_size=group, order=order)
        res[order] = seen
        assert torch.all(flags == 1)
    assert res["forward"][1:].tolist() == [1] * (ng - 1)
    assert res["reverse"][1:].tolist() == [0] * (ng - 1)


def test_invalid_order_is_rejected(lib):
    with pytest.raises((ValueError, TypeError)):
        lib.racy(torch.zeros(8), torch.zeros(8), order="sideways")


def test_random_order_varies_between_launches(lib):
    # The random order must not be one fixed permutation: over several launches
    # of the racy kernel, at least two distinct results appear.
    n, group = 256, 256
    x = torch.arange(n, dtype=torch.float32) + 1
    results = set()
    for _ in range(6):
        out = torch.zeros(n)
        lib.racy(x, out, group_size=group, order="random")
        results.add(tuple(np.asarray(out).tolist()))
    assert len(results) >= 2


def test_seed_reproduces_a_random_order(lib):
    n = 256
    x = torch.arange(n, dtype=torch.float32) + 1

    def run(seed):
        out = torch.zeros(n)
        lib.racy(x, out, group_size=n, order="random", seed=seed)
        return out

    a, b = run(1234), run(1234)
    assert torch.equal(a, b)
    assert any(not torch.equal(run(s), a) for s in (1, 2, 3))
