"""The race detector: races on threadgroup and device memory are reported with both threads and
both source lines; barriers, atomics and SIMD-group functions order accesses, so correct kernels
are not reported."""

import re

import pytest
import torch
from emu_helpers import raises

from mpslinalg import emulator as emu
from mpslinalg.emulator import build

pytestmark = pytest.mark.skipif(
    build.find_compiler() is not None
    and build.race_check_unsupported(build.find_compiler()) is not None,
    reason="the race detector needs g++ (this $CXX is clang)")

SRC = r"""
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void tg_missing_barrier(device float* out [[buffer(0)]],
                               uint i [[thread_position_in_grid]],
                               uint t [[thread_index_in_threadgroup]],
                               uint n [[threads_per_threadgroup]]) {
    threadgroup float sh[256];
    sh[t] = float(i);                 // @TG_WRITE
    out[i] = sh[(t + 1) % n];         // @TG_READ
}

kernel void tg_reduction(device float* out [[buffer(0)]],
                         device const float* x [[buffer(1)]],
                         uint i [[thread_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]],
                         uint g [[threadgroup_position_in_grid]],
                         uint n [[threads_per_threadgroup]]) {
    threadgroup float sh[256];
    sh[t] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s && t + s < n) sh[t] += sh[t + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t == 0) out[g] = sh[0];
}

kernel void tg_barrier_without_tg_fence(device float* out [[buffer(0)]],
                                        uint i [[thread_position_in_grid]],
                                        uint t [[thread_index_in_threadgroup]],
                                        uint n [[threads_per_threadgroup]]) {
    threadgroup float sh[256];
    sh[t] = float(i);
    threadgroup_barrier(mem_flags::mem_device);   // orders device memory only
    out[i] = sh[(t + 1) % n];
}

kernel void device_neighbour(device float* out [[buffer(0)]],
                             uint i [[thread_position_in_grid]],
                             uint n [[threads_per_grid]]) {
    out[i] = float(i);                          // @DEV_WRITE
    if (out[(i + 1) % n] < 0.0f) out[i] = 0.0f;  // @DEV_READ
}

kernel void device_in_group(device float* out [[buffer(0)]],
                            uint i [[thread_position_in_grid]],
                            uint t [[thread_index_in_threadgroup]],
                            uint g [[threadgroup_position_in_grid]],
                            uint n [[threads_per_threadgroup]],
                            constant int& fence [[buffer(1)]]) {
    out[i] = float(i);
    if (fence) threadgroup_barrier(mem_flags::mem_device);
    else threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = out[g * n + (t + 1) % n];  // @IN_GROUP_READ
    if (fence) threadgroup_barrier(mem_flags::mem_device);
    else threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = v;
}

kernel void atomics(device atomic_int* total [[buffer(0)]],
                    device atomic_uint* maxima [[buffer(1)]],
                    uint i [[thread_position_in_grid]],
                    uint t [[thread_index_in_threadgroup]]) {
    threadgroup atomic_int local;
    if (t == 0) atomic_store_explicit(&local, 0, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&local, 1, memory_order_relaxed);
    atomic_fetch_max_explicit(maxima, i, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) atomic_fetch_add_explicit(total, atomic_load_explicit(&local, memory_order_relaxed),
                                          memory_order_relaxed);
}

kernel void plain_read_of_atomic(device atomic_int* c [[buffer(0)]],
                                 device int* out [[buffer(1)]],
                                 uint i [[thread_position_in_grid]]) {
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    out[i] = *((device int*)c);
}

kernel void simd_functions(device float* out [[buffer(0)]],
                           uint i [[thread_position_in_grid]],
                           ushort lane [[thread_index_in_simdgroup]],
                           ushort sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sh[256];
    sh[sg * 32 + lane] = float(i);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    float v = sh[sg * 32 + (lane ^ 1)];
    out[i] = simd_sum(v) + simd_shuffle_down(v, 1) + simd_broadcast_first(v);
}

kernel void halves(device half* out [[buffer(0)]],
                   device uchar* flags [[buffer(1)]],
                   constant int& clash [[buffer(2)]],
                   uint i [[thread_position_in_grid]]) {
    out[clash ? i & ~1u : i] = half(i);  // neighbours share a 4-byte word, not a byte
    flags[i] = uchar(i);
}

kernel void simd_matrix(device float* out [[buffer(0)]],
                        device const float* a [[buffer(1)]],
                        ushort lane [[thread_index_in_simdgroup]]) {
    threadgroup float tile[64];
    tile[lane] = a[lane];
    tile[lane + 32] = a[lane + 32];
    simdgroup_float8x8 m;
    simdgroup_load(m, tile, 8);
    simdgroup_float8x8 r;
    simdgroup_multiply(r, m, m);
    simdgroup_store(r, out, 8);
}
"""


def src_line(tag):
    return next(n for n, ln in enumerate(SRC.split("\n"), 1) if f"@{tag}" in ln)


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC, race_check=True)


def test_data_race_error_is_a_runtime_error():
    assert issubclass(emu.DataRaceError, RuntimeError)


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_threadgroup_race_reports_threads_and_lines(lib, order):
    out = torch.zeros(64)
    with raises(
        emu.DataRaceError,
        r"kernel 'tg_missing_barrier': data race \((read-after-write|write-after-read) hazard\) "
        r"on threadgroup memory",
        rf"program_source:{src_line('TG_WRITE')}\b",
        rf"program_source:{src_line('TG_READ')}\b",
        r"write by thread_position_in_grid=\(\d+,0,0\)",
        r"read by thread_position_in_grid=\(\d+,0,0\)",
        r"thread_index_in_threadgroup \d+",
        r"no threadgroup_barrier\(mem_flags::mem_threadgroup\)",
    ):
        lib.tg_missing_barrier(out, group_size=32, order=order)


def test_device_race_between_threadgroups(lib):
    out = torch.zeros(64)
    with raises(
        emu.DataRaceError,
        r"data race \(\S+ hazard\) on device memory: buffer 'out' \(buffer 0\), byte offset \d+",
        rf"program_source:{src_line('DEV_WRITE')}\b",
        rf"program_source:{src_line('DEV_READ')}\b",
        r"different threadgroups",
    ) as info:
        lib.device_neighbour(out, group_size=1)
    assert re.search(
        r"threadgroup 0\b.*threadgroup 1\b|threadgroup 1\b.*threadgroup 0\b", str(info.value)
    )


def test_device_race_within_a_group_needs_a_device_fence(lib):
    out = torch.zeros(64)
    with raises(
        emu.DataRaceError,
        r"device memory",
        rf"program_source:{src_line('IN_GROUP_READ')}\b",
        r"no threadgroup_barrier\(mem_flags::mem_device\)",
    ):
        lib.device_in_group(out, 0, group_size=32, arg_casts={1: "int32"})
    lib.device_in_group(out, 1, group_size=32, arg_casts={1: "int32"})
    expect = torch.arange(64, dtype=torch.float32).view(2, 32).roll(-1, 1).reshape(-1)
    assert torch.equal(out, expect)


def test_barrier_without_threadgroup_fence_does_not_order_threadgroup_memory(lib):
    with raises(emu.DataRaceError, r"threadgroup memory"):
        lib.tg_barrier_without_tg_fence(torch.zeros(64), group_size=32)


def test_plain_access_to_an_atomic_is_a_race(lib):
    with raises(emu.DataRaceError, r"atomic write .* read|read .* atomic write"):
        lib.plain_read_of_atomic(
            torch.zeros(1, dtype=torch.int32),
            torch.zeros(64, dtype=torch.int32),
            threads=64,
            group_size=32,
        )


@pytest.mark.parametrize("order", ["forward", "reverse", "random"])
def test_correct_kernels_are_not_reported(lib, order):
    x = torch.arange(3 * 200, dtype=torch.float32)
    out = torch.zeros(3)
    lib.tg_reduction(out, x, threads=600, group_size=200, order=order)
    assert torch.equal(out, x.view(3, 200).sum(1))

    total = torch.zeros(1, dtype=torch.int32)
    maxima = torch.zeros(1, dtype=torch.int32)
    lib.atomics(total, maxima, threads=300, group_size=100, order=order)
    assert total.item() == 300 and maxima.item() == 299

    out = torch.zeros(96)
    lib.simd_functions(out, group_size=96, order=order)
    v = torch.arange(96, dtype=torch.float32).view(3, 32)[:, torch.arange(32) ^ 1]
    expect = v.sum(1, keepdim=True) + torch.cat([v[:, 1:], v[:, -1:]], 1) + v[:, :1]
    assert torch.equal(out, expect.reshape(-1))

    a = torch.randn(64)
    out = torch.zeros(64)
    lib.simd_matrix(out, a, threads=32, group_size=32, order=order)
    m = a.view(8, 8)
    torch.testing.assert_close(out.view(8, 8), m @ m)


def test_neighbouring_small_elements_are_not_a_race(lib):
    out = torch.zeros(64, dtype=torch.float16)
    flags = torch.zeros(64, dtype=torch.uint8)
    lib.halves(out, flags, 0, group_size=1, arg_casts={2: "int32"})
    assert torch.equal(out, torch.arange(64, dtype=torch.float16))
    with raises(emu.DataRaceError, r"buffer 'out' \(buffer 0\), byte offset 0\b"):
        lib.halves(out, flags, 1, group_size=1, arg_casts={2: "int32"})


def test_aliased_views_share_shadow_memory(lib):
    # the same storage bound twice: a race through one view against the other is still one race
    base = torch.zeros(64)
    with raises(emu.DataRaceError, r"device memory"):
        # group 1 writes base[1] (its sum), which a thread of group 0 reads as x[1]
        lib.tg_reduction(base[:2], base, threads=64, group_size=32)


def test_off_by_default_and_on_through_the_environment(monkeypatch):
    src = SRC.replace("tg_missing_barrier", "tg_missing_barrier_env")
    monkeypatch.delenv("MPSLINALG_EMULATOR_RACECHECK", raising=False)
    out = torch.zeros(64)
    emu.compile_shader(src).tg_missing_barrier_env(out, group_size=32)  # not checked
    monkeypatch.setenv("MPSLINALG_EMULATOR_RACECHECK", "1")
    with raises(emu.DataRaceError, r"tg_missing_barrier_env"):
        emu.compile_shader(src).tg_missing_barrier_env(out, group_size=32)
    monkeypatch.setenv("MPSLINALG_EMULATOR_RACECHECK", "0")
    emu.compile_shader(src).tg_missing_barrier_env(out, group_size=32)
    with raises(emu.DataRaceError, r"tg_missing_barrier_env"):
        emu.compile_shader(src, race_check=True).tg_missing_barrier_env(out, group_size=32)


def test_race_check_build_gives_the_same_results():
    x = torch.randn(3 * 200)
    a, b = torch.zeros(3), torch.zeros(3)
    emu.compile_shader(SRC, race_check=False).tg_reduction(a, x, threads=600, group_size=200)
    emu.compile_shader(SRC, race_check=True).tg_reduction(b, x, threads=600, group_size=200)
    assert torch.equal(a, b)
