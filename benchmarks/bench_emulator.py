#!/usr/bin/env python3
"""Speed figures of the Metal emulator (mpslinalg.emulator).

Standalone script, not a test: it prints the median of several runs of

* a raw fiber switch (the emulator's own switch routine, timed in C++), and the
  cost per lane-barrier measured through a kernel;
* 64 threadgroup barriers x 1000 threadgroups x 256 lanes;
* a 1024x1024 elementwise kernel (1-D and 2-D grids);
* the first compile of a typical .metal source (fresh, empty cache directory);
* a cached load of the same source in a new process;
* the race detector's cost (compile_shader(race_check=True)) on the barrier and
  elementwise kernels, as a factor over the build without it (which contains no
  trace of it).

Targets (issue 3, on a 2-core machine): switch <= 20 ns, barriers <= 1.5 s,
elementwise <= 50 ms, first compile <= 1.5 s, cached load <= 50 ms.

Usage: python benchmarks/bench_emulator.py [--runs N]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from mpslinalg import emulator as emu  # noqa: E402

BARRIER_SRC = r"""
#include <metal_stdlib>
using namespace metal;
kernel void barriers64(device float* out [[buffer(0)]],
                       uint i [[thread_position_in_grid]],
                       uint t [[thread_index_in_threadgroup]]) {
    float acc = float(t);
    for (int k = 0; k < 64; ++k) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc += 1.0f;
    }
    out[i] = acc;
}
kernel void barriers_many(device float* out [[buffer(0)]],
                          constant int& rounds [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) {
    float acc = 0.0f;
    for (int k = 0; k < rounds; ++k) {
        threadgroup_barrier(mem_flags::mem_none);
        acc += 1.0f;
    }
    out[i] = acc;
}
kernel void axpb(device const float* x [[buffer(0)]],
                 device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    y[i] = a * x[i] + 1.0f;
}
kernel void axpb2d(device const float* x [[buffer(0)]],
                   device float* y [[buffer(1)]],
                   constant float& a [[buffer(2)]],
                   uint2 p [[thread_position_in_grid]],
                   uint2 n [[threads_per_grid]]) {
    uint i = p.y * n.x + p.x;
    y[i] = a * x[i] + 1.0f;
}
"""

# A "typical" library file: templates with host_name instantiations, threadgroup
# memory, barriers, SIMD-group reductions and simdgroup_matrix.
TYPICAL_SRC = r"""
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

constant constexpr uint kBlock = 256;

template <typename T>
inline T group_sum(T v, threadgroup T* scratch, ushort lane, ushort sg, ushort nsg) {
    T s = simd_sum(v);
    if (lane == 0) scratch[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        T r = simd_sum(lane < nsg ? scratch[lane] : T(0));
        if (lane == 0) scratch[32] = r;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return scratch[32];
}

template <typename T>
kernel void row_norm(device const T* a [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     constant uint& cols [[buffer(2)]],
                     uint row [[threadgroup_position_in_grid]],
                     ushort t [[thread_index_in_threadgroup]],
                     ushort n [[threads_per_threadgroup]],
                     ushort lane [[thread_index_in_simdgroup]],
                     ushort sg [[simdgroup_index_in_threadgroup]],
                     ushort nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[33];
    float acc = 0.0f;
    for (uint c = t; c < cols; c += n) {
        float v = float(a[row * cols + c]);
        acc += v * v;
    }
    float s = group_sum(acc, scratch, lane, sg, nsg);
    if (t == 0) out[row] = sqrt(s);
}
template [[host_name("row_norm_float")]] kernel void row_norm<float>(
    device const float*, device float*, constant uint&, uint,
    ushort, ushort, ushort, ushort, ushort);
template [[host_name("row_norm_half")]] kernel void row_norm<half>(
    device const half*, device float*, constant uint&, uint,
    ushort, ushort, ushort, ushort, ushort);

kernel void lu_step(device float2* a [[buffer(0)]],
                    constant uint& n [[buffer(1)]],
                    constant uint& k [[buffer(2)]],
                    uint t [[thread_index_in_threadgroup]],
                    uint nt [[threads_per_threadgroup]]) {
    threadgroup float2 pivot_row[kBlock];
    for (uint j = t; j < n; j += nt) pivot_row[j] = a[k * n + j];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float2 p = pivot_row[k];
    float d = dot(p, p);
    for (uint i = k + 1 + t; i < n; i += nt) {
        float2 l = a[i * n + k];
        float2 m = float2(l.x * p.x + l.y * p.y, l.y * p.x - l.x * p.y) / d;
        a[i * n + k] = m;
        for (uint j = k + 1; j < n; ++j) {
            float2 u = pivot_row[j];
            a[i * n + j] -= float2(m.x * u.x - m.y * u.y, m.x * u.y + m.y * u.x);
        }
    }
}

kernel void gemm8(device const float* A [[buffer(0)]],
                  device const float* B [[buffer(1)]],
                  device float* C [[buffer(2)]],
                  constant uint& N [[buffer(3)]],
                  constant uint& K [[buffer(4)]],
                  uint tile [[threadgroup_position_in_grid]]) {
    uint tm = tile / (N / 8), tn = tile % (N / 8);
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k = 0; k < K; k += 8) {
        simdgroup_float8x8 a, b;
        simdgroup_load(a, A + tm * 8 * K + k, K);
        simdgroup_load(b, B + k * N + tn * 8, N);
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    simdgroup_store(acc, C + tm * 8 * N + tn * 8, N);
}

template <typename T>
kernel void axpby(device T* y [[buffer(0)]],
                  device const T* x [[buffer(1)]],
                  constant float& a [[buffer(2)]],
                  constant float& b [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    y[i] = T(a * float(x[i]) + b * float(y[i]));
}
template [[host_name("axpby_float")]] kernel void axpby<float>(
    device float*, device const float*, constant float&, constant float&, uint);
template [[host_name("axpby_half")]] kernel void axpby<half>(
    device half*, device const half*, constant float&, constant float&, uint);
template [[host_name("axpby_bfloat")]] kernel void axpby<bfloat>(
    device bfloat*, device const bfloat*, constant float&, constant float&, uint);
"""

SWITCH_CPP = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include "emu_fiber.h"

#ifdef EMU_DEFINE_FIBER_ASM
EMU_DEFINE_FIBER_ASM()  // the switch routine is emitted once per library
#endif

static void* main_sp;
static void* fib_sp;
static long n_iter;

static void body(void*) {
    for (;;) emu::fiber_switch(&fib_sp, main_sp);
}

int main(int argc, char** argv) {
    n_iter = atol(argv[1]);
    emu::StackPool pool;
    char* stack = (char*)pool.get();
    fib_sp = emu::fiber_init(stack + emu::kStackSize, body, nullptr);
    emu::fiber_switch(&main_sp, fib_sp);  // warm up: enter the fiber once
    auto t0 = std::chrono::steady_clock::now();
    for (long k = 0; k < n_iter; ++k) emu::fiber_switch(&main_sp, fib_sp);
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    printf("%.3f\n", ns / (2.0 * n_iter));  // two switches per round trip
    return 0;
}
"""

CHILD = textwrap.dedent(r"""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    src = open(sys.argv[2]).read()
    from mpslinalg import emulator as emu
    import torch
    t0 = time.perf_counter()
    lib = emu.compile_shader(src)
    k = lib.axpby_float
    t1 = time.perf_counter()
    y = torch.ones(16)
    k(y, torch.ones(16), 2.0, 3.0)
    assert torch.all(y == 5.0)
    print(t1 - t0)
""")


def median_time(fn, runs, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def raw_switch_ns(runs):
    """Time the emulator's own fiber switch in a tiny C++ program."""
    inc = REPO / "mpslinalg" / "emulator" / "include"
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx or not (inc / "emu_fiber.h").exists():
        return None
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "switch.cpp"
        exe = Path(d) / "switch"
        src.write_text(SWITCH_CPP)
        r = subprocess.run(
            [cxx, "-O2", "-std=c++17", f"-I{inc}", str(src), "-o", str(exe)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            print(
                "  (raw switch benchmark did not build: "
                f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else '?'})"
            )
            return None
        vals = []
        for _ in range(runs):
            out = subprocess.run([str(exe), "20000000"], capture_output=True, text=True)
            vals.append(float(out.stdout.strip()))
        return statistics.median(vals)


def compile_times(runs):
    first, cached = [], []
    with tempfile.TemporaryDirectory() as d:
        src_path = Path(d) / "typical.metal"
        src_path.write_text(TYPICAL_SRC)
        script = Path(d) / "child.py"
        script.write_text(CHILD)
        for r in range(runs):
            cache = Path(d) / f"cache{r}"
            env = dict(os.environ, MPSLINALG_CACHE_DIR=str(cache))
            for bucket in (first, cached):
                out = subprocess.run(
                    [sys.executable, str(script), str(REPO), str(src_path)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                bucket.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(first), statistics.median(cached)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per figure (median reported)")
    args = ap.parse_args()
    runs = args.runs

    print(
        f"mpslinalg.emulator benchmark: {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"median of {runs} runs"
    )
    rows = []

    sw = raw_switch_ns(runs)
    rows.append(
        (
            "fiber switch (raw, emulator's switch routine)",
            f"{sw:.1f} ns" if sw is not None else "n/a",
            "<= 20 ns",
        )
    )

    lib = emu.compile_shader(BARRIER_SRC)

    # Per lane-barrier cost inside a kernel: one group of 32 lanes, many barriers.
    rounds = 20000
    out = torch.zeros(32)
    t = median_time(
        lambda: lib.barriers_many(out, rounds, group_size=32, arg_casts={1: "int32"}), runs
    )
    rows.append(
        ("lane-barrier (32 lanes x 20000 barriers)", f"{t / (32 * rounds) * 1e9:.1f} ns", "")
    )

    out = torch.zeros(1000 * 256)
    t = median_time(lambda: lib.barriers64(out, group_size=256), runs)
    assert torch.all(out[:256] == torch.arange(256, dtype=torch.float32) + 64)
    rows.append(("64 barriers x 1000 groups x 256 lanes", f"{t:.3f} s", "<= 1.5 s"))

    x = torch.rand(1024 * 1024)
    y = torch.empty_like(x)
    t = median_time(lambda: lib.axpb(x, y, 2.0), max(runs, 11))
    assert torch.equal(y, 2.0 * x + 1.0)
    rows.append(("1024x1024 elementwise (1-D grid)", f"{t * 1e3:.1f} ms", "<= 50 ms"))
    t = median_time(
        lambda: lib.axpb2d(x, y, 3.0, threads=[1024, 1024], group_size=[32, 32]), max(runs, 11)
    )
    assert torch.equal(y, 3.0 * x + 1.0)
    rows.append(("1024x1024 elementwise (2-D grid, 32x32 groups)", f"{t * 1e3:.1f} ms", ""))

    first, cached = compile_times(runs)
    rows.append(("first compile of a typical .metal (empty cache)", f"{first:.2f} s", "<= 1.5 s"))
    rows.append(
        ("cached load of the same source (new process)", f"{cached * 1e3:.1f} ms", "<= 50 ms")
    )

    # race detector: the same kernels from a race-check build
    race = emu.compile_shader(BARRIER_SRC, race_check=True)
    out = torch.zeros(100 * 256)
    t_off = median_time(lambda: lib.barriers64(out, group_size=256), runs)
    t_on = median_time(lambda: race.barriers64(out, group_size=256), runs)
    rows.append(
        (
            "race check: 64 barriers x 100 groups x 256 lanes",
            f"{t_on:.3f} s",
            f"x{t_on / t_off:.1f}",
        )
    )
    t_off = median_time(lambda: lib.axpb(x, y, 2.0), runs)
    t_on = median_time(lambda: race.axpb(x, y, 2.0), runs)
    rows.append(
        ("race check: 1024x1024 elementwise", f"{t_on * 1e3:.1f} ms", f"x{t_on / t_off:.1f}")
    )

    w = max(len(r[0]) for r in rows)
    for name, val, target in rows:
        print(f"  {name:<{w}}  {val:>10}  {target}")


if __name__ == "__main__":
    main()
