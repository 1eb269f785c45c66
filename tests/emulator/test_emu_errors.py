"""Metal's undefined behaviour and non-MSL source become Python exceptions with
clear messages: never a hang, never a crash of the process."""

import re

import pytest
import torch
from emu_helpers import raises

from mpslinalg import emulator as emu

SRC = r"""
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void sanity(device float* out [[buffer(0)]],
                   uint i [[thread_position_in_grid]],
                   uint t [[thread_index_in_threadgroup]]) {
    threadgroup float sh[1024];
    sh[t] = float(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = sh[t] + 1.0f;
}

kernel void early_exit_barrier(device float* out [[buffer(0)]],
                               uint i [[thread_position_in_grid]],
                               uint t [[thread_index_in_threadgroup]]) {
    if (t % 10 == 3) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // @EXIT_BARRIER
    out[i] = 1.0f;
}

kernel void two_barriers(device float* out [[buffer(0)]],
                         uint i [[thread_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]]) {
    if (t < 48) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // @BARRIER_A
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // @BARRIER_B
    }
    out[i] = 2.0f;
}

kernel void barrier_in_divergent_loop(device float* out [[buffer(0)]],
                                      uint i [[thread_position_in_grid]],
                                      uint t [[thread_index_in_threadgroup]]) {
    for (uint k = 0; k < t % 3; ++k) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[i] = 3.0f;
}

kernel void nonuniform_shuffle_down(device float* out [[buffer(0)]],
                                    uint i [[thread_position_in_grid]],
                                    ushort lane [[thread_index_in_simdgroup]]) {
    out[i] = simd_shuffle_down(out[i], ushort(lane % 2 + 1));  // @SHUFFLE
}

kernel void nonuniform_shuffle_xor(device float* out [[buffer(0)]],
                                   uint i [[thread_position_in_grid]],
                                   ushort lane [[thread_index_in_simdgroup]]) {
    out[i] = simd_shuffle_xor(out[i], ushort(lane & 3));
}

kernel void nonuniform_broadcast(device float* out [[buffer(0)]],
                                 uint i [[thread_position_in_grid]],
                                 ushort lane [[thread_index_in_simdgroup]]) {
    out[i] = simd_broadcast(out[i], ushort(lane / 8));
}

kernel void nonuniform_sg_load(device const float* a [[buffer(0)]],
                               device float* out [[buffer(1)]],
                               ushort lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, a + (lane % 2), 8);
    simdgroup_store(m, out, 8);
}

kernel void nonuniform_sg_store(device const float* a [[buffer(0)]],
                                device float* out [[buffer(1)]],
                                ushort lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, a, 8);
    simdgroup_store(m, out, 8 + (lane / 16));
}

kernel void tg_exactly_32k(device float* out [[buffer(0)]],
                           uint i [[thread_position_in_grid]],
                           uint t [[thread_index_in_threadgroup]]) {
    threadgroup float big[8192];
    big[t * 8] = float(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = big[t * 8];
}

kernel void scalar_float(device float* out [[buffer(0)]],
                         constant float& alpha [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
    out[i] = alpha;
}

kernel void scalar_int(device int* out [[buffer(0)]],
                       constant int& count [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    out[i] = count;
}

kernel void scalar_long(device long* out [[buffer(0)]],
                        constant long& big [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    out[i] = big;
}

kernel void float_array(device float* out [[buffer(0)]],
                        constant float* coeffs [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    out[i] = coeffs[0];
}

kernel void with_barrier(device float* out [[buffer(0)]],
                         uint i [[thread_position_in_grid]]) {
    threadgroup_barrier(mem_flags::mem_none);
    out[i] = 0.0f;
}

// Words that are C++-only constructs appear here only in comments and inside
// identifiers: double, long double, std::vector, new, delete, virtual, throw,
// try, catch, goto, thread_local, typeid, dynamic_cast.
struct renewal { float doubled; int newest; };
kernel void keyword_lookalikes(device float* out [[buffer(0)]],
                               uint i [[thread_position_in_grid]]) {
    renewal r;
    r.doubled = 2.0f;
    r.newest = 3;
    float delete_me = 1.0f, virtually = 4.0f, std_dev = 5.0f, trying = 6.0f;
    out[i] = r.doubled + float(r.newest) + delete_me + virtually + std_dev + trying;
}
"""

DEBUG_SRC = r"""
#include <metal_stdlib>
using namespace metal;

kernel void oob_read(device const float* x [[buffer(0)]],
                     device float* y [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    y[i] = x[i + 1];
}

kernel void oob_write(device float* out_buf [[buffer(0)]],
                      uint i [[thread_position_in_grid]]) {
    out_buf[i + 3] = 1.0f;
}

kernel void oob_list(device long* out [[buffer(0)]],
                     constant long* shape [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = shape[i];
}

kernel void tg_array_oob(device float* out [[buffer(0)]],
                         constant int& k [[buffer(1)]],
                         uint i [[thread_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]]) {
    threadgroup float sh[32];
    thread float local[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    sh[t] = local[(t + uint(k)) % 4];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = sh[(t + uint(k)) % 64];        // k = 32 reads past sh in lane 0
}

kernel void in_bounds(device const float* x [[buffer(0)]],
                      device float* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    y[i] = x[i] * 2.0f;
}
"""


def line_of(src, marker):
    for k, line in enumerate(src.splitlines(), start=1):
        if marker in line:
            return k
    raise LookupError(marker)


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


@pytest.fixture(scope="module")
def dbg():
    return emu.compile_shader(DEBUG_SRC, debug=True)


@pytest.fixture
def still_works(lib):
    """After the error under test, the emulator must still run kernels correctly."""
    yield
    out = torch.zeros(300)
    lib.sanity(out, group_size=100)
    assert torch.equal(out, torch.arange(300, dtype=torch.float32) + 1)


# ------------------------------------------------------------------ barriers


@pytest.mark.usefixtures("still_works")
def test_barrier_divergence_lanes_returned(lib):
    out = torch.zeros(256)
    line = line_of(SRC, "@EXIT_BARRIER")
    with raises(Exception, r"barrier", r"returned|exited|diverg", rf"\b{line}\b"):
        lib.early_exit_barrier(out, group_size=128)


@pytest.mark.usefixtures("still_works")
def test_barrier_divergence_not_strict_treats_exited_lanes_as_arrived(lib):
    out = torch.zeros(256)
    lib.early_exit_barrier(out, group_size=128, strict=False)
    t = torch.arange(256) % 128
    assert torch.equal(out, torch.where(t % 10 == 3, 0.0, 1.0))


@pytest.mark.usefixtures("still_works")
def test_lanes_at_different_barriers(lib):
    out = torch.zeros(128)
    a, b = line_of(SRC, "@BARRIER_A"), line_of(SRC, "@BARRIER_B")
    with raises(Exception, r"barrier", rf"\b{a}\b", rf"\b{b}\b"):
        lib.two_barriers(out, group_size=128)


@pytest.mark.usefixtures("still_works")
def test_barrier_in_lane_dependent_loop(lib):
    out = torch.zeros(64)
    with raises(Exception, r"barrier"):
        lib.barrier_in_divergent_loop(out, group_size=64)


@pytest.mark.usefixtures("still_works")
def test_uniform_single_lane_groups_are_fine(lib):
    # With one lane per group every barrier is trivially uniform.
    out = torch.zeros(64)
    lib.barrier_in_divergent_loop(out, group_size=1)
    assert torch.all(out == 3.0)


# ------------------------------------------------------------------ SIMD operands


@pytest.mark.usefixtures("still_works")
def test_nonuniform_shuffle_delta(lib):
    out = torch.zeros(64)
    line = line_of(SRC, "@SHUFFLE")
    with raises(Exception, r"uniform", r"simd_shuffle_down", rf"\b{line}\b"):
        lib.nonuniform_shuffle_down(out, group_size=64)


@pytest.mark.usefixtures("still_works")
def test_nonuniform_shuffle_xor_mask(lib):
    with raises(Exception, r"uniform", r"simd_shuffle_xor"):
        lib.nonuniform_shuffle_xor(torch.zeros(32), group_size=32)


@pytest.mark.usefixtures("still_works")
def test_nonuniform_broadcast_lane(lib):
    with raises(Exception, r"uniform", r"simd_broadcast"):
        lib.nonuniform_broadcast(torch.zeros(32), group_size=32)


@pytest.mark.usefixtures("still_works")
def test_nonuniform_simdgroup_load(lib):
    a = torch.zeros(80)
    with raises(Exception, r"uniform", r"simdgroup_load"):
        lib.nonuniform_sg_load(a, torch.zeros(64), threads=32, group_size=32)


@pytest.mark.usefixtures("still_works")
def test_nonuniform_simdgroup_store(lib):
    a = torch.zeros(64)
    with raises(Exception, r"uniform", r"simdgroup_store"):
        lib.nonuniform_sg_store(a, torch.zeros(128), threads=32, group_size=32)


# ------------------------------------------------------------------ limits


def test_exactly_32k_of_threadgroup_memory_is_allowed(lib):
    assert lib.tg_exactly_32k.static_thread_group_memory_length == 32768
    out = torch.zeros(256)
    lib.tg_exactly_32k(out, group_size=128)
    assert torch.equal(out, torch.arange(256, dtype=torch.float32))


@pytest.mark.parametrize(
    "decl",
    ["threadgroup float big[8193];", "threadgroup float a[5000];\n    threadgroup int big[4000];"],
)
def test_threadgroup_memory_over_32k(decl):
    src = f"""
#include <metal_stdlib>
using namespace metal;
kernel void too_big(device float* out [[buffer(0)]],
                    uint i [[thread_position_in_grid]],
                    uint t [[thread_index_in_threadgroup]]) {{
    {decl}
    big[t] = float(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = big[t];
}}
"""
    # Metal fails when the pipeline is built; the emulator may fail at compile
    # time, at lookup or at launch, but it must fail with a clear message.
    with raises(Exception, r"threadgroup", r"32768|32 ?KiB|32 ?KB"):
        lib = emu.compile_shader(src)
        lib.too_big(torch.zeros(64), group_size=64)


def test_group_size_over_limit(lib):
    with raises(ValueError, r"Threadgroup size exceeds"):
        lib.with_barrier(torch.zeros(4096), group_size=2048)
    with raises(ValueError, r"Threadgroup size exceeds"):
        lib.with_barrier(torch.zeros(4096), threads=[64, 64, 1], group_size=[32, 32, 2])


@pytest.mark.parametrize(
    "threads,group", [([64, 2], [32]), ([64], [32, 1]), (64, [8, 8, 1]), ([8, 8, 8], [8, 8])]
)
def test_group_size_of_wrong_dimensionality(lib, threads, group):
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        lib.with_barrier(torch.zeros(4096), threads=threads, group_size=group)


def test_threads_undefined_without_tensor(lib):
    with pytest.raises((RuntimeError, ValueError)):
        lib.scalar_float(1.0)


def test_bad_threads_and_arguments(lib):
    out = torch.zeros(4)
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        lib.scalar_float(out, 1.0, threads=[1, 2, 3, 4])
    with raises((RuntimeError, ValueError, TypeError), r"empty"):
        lib.float_array(out, [])
    for bad in (None, "abc", object()):
        with pytest.raises((RuntimeError, ValueError, TypeError)):
            lib.scalar_float(out, bad)


# ------------------------------------------------------------------ argument kinds


@pytest.mark.usefixtures("still_works")
def test_python_int_for_float_parameter(lib):
    out = torch.zeros(4)
    with raises(
        (TypeError, ValueError, RuntimeError), r"alpha|buffer\(?1|index 1|argument 1", r"float"
    ):
        lib.scalar_float(out, 3)
    lib.scalar_float(out, 3.0)
    assert torch.all(out == 3.0)


def test_python_float_for_int_parameter(lib):
    out = torch.zeros(4, dtype=torch.int32)
    with raises((TypeError, ValueError, RuntimeError), r"count|buffer\(?1|index 1|argument 1"):
        lib.scalar_int(out, 2.0)


def test_too_few_bytes_for_parameter(lib):
    out = torch.zeros(4, dtype=torch.int64)
    # A float is 4 bytes; the kernel reads 8.
    with raises((TypeError, ValueError, RuntimeError), r"big|buffer\(?1|index 1|argument 1"):
        lib.scalar_long(out, 2.5)
    # "int32" cast gives 4 bytes for a long parameter.
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        lib.scalar_long(out, 2, arg_casts={1: "int32"})


def test_int_list_for_float_array(lib):
    out = torch.zeros(4)
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        lib.float_array(out, [1, 2, 3])
    lib.float_array(out, [1.5, 2.0])
    assert torch.all(out == 1.5)


# ------------------------------------------------------------------ debug bounds checks


def test_oob_read_names_buffer_index_and_thread(dbg):
    x = torch.zeros(100)
    y = torch.zeros(100)
    with raises(Exception, r"\bx\b", r"\b100\b", r"\b99\b", r"bound|range"):
        dbg.oob_read(x, y)


def test_oob_write(dbg):
    with raises(Exception, r"out_buf", r"\b50\b|\b52\b", r"bound|range"):
        dbg.oob_write(torch.zeros(50))


def test_oob_on_list_argument(dbg):
    out = torch.zeros(4, dtype=torch.int64)
    with raises(Exception, r"shape", r"\b3\b", r"bound|range"):
        dbg.oob_list(out, [5, 6, 7])


def test_oob_on_view_extent(dbg):
    base = torch.zeros(200)
    x = base[10:60]  # 50 elements; storage continues past them
    y = torch.zeros(50)
    with raises(Exception, r"\bx\b", r"\b50\b", r"bound|range"):
        dbg.oob_read(x, y)


def test_threadgroup_array_oob_in_debug_build(dbg):
    out = torch.zeros(32)
    dbg.tg_array_oob(out, 0, arg_casts={1: "int32"})
    assert torch.equal(out, torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat(8))
    with raises(RuntimeError, r"tg_array_oob"):
        dbg.tg_array_oob(out, 32, arg_casts={1: "int32"})


def test_release_build_checks_buffer_bounds_too():
    rel = emu.compile_shader(DEBUG_SRC)
    with raises(RuntimeError, r"\bx\b", r"\b100\b", r"bound|range"):
        rel.oob_read(torch.zeros(100), torch.zeros(100))
    y = torch.zeros(10)
    rel.in_bounds(torch.ones(10), y)
    assert torch.all(y == 2.0)


FAULTS_CHILD = r'''
import torch
from mpslinalg import emulator as emu
SRC = """
#include <metal_stdlib>
using namespace metal;
kernel void null_write(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    thread int* p = (thread int*)(out[0] == 12345 ? 0x20 : 0x10);
    *p = int(i);
    out[i] = 1;
}
kernel void div_zero(device int* out [[buffer(0)]], constant int& d [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = 100 / (d - 1);
}
kernel void big_stack(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    thread float big[400000];
    for (int k = 0; k < 400000; ++k) big[k] = float(k + int(i));
    threadgroup_barrier(mem_flags::mem_none);
    out[i] = big[out[i] > 0.0f ? 399999 : 7];
}
kernel void ok(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup_barrier(mem_flags::mem_none);
    out[i] = 5.0f;
}
"""
lib = emu.compile_shader(SRC)
for name, args in [("null_write", (torch.zeros(4, dtype=torch.int32),)),
                   ("div_zero", (torch.zeros(4, dtype=torch.int32), 1)),
                   ("big_stack", (torch.zeros(2),))]:
    try:
        kw = {"arg_casts": {1: "int32"}} if name == "div_zero" else {}
        getattr(lib, name)(*args, group_size=args[0].numel(), **kw)
        print(name, "NO ERROR")
    except RuntimeError as e:
        print(name, "RuntimeError", str(e).replace("\\n", " ")[:300])
out = torch.zeros(64)
lib.ok(out, group_size=64)
print("ok", bool(torch.all(out == 5.0)))
'''


def test_faults_in_kernels_do_not_kill_the_process(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    script = tmp_path / "faults.py"
    script.write_text(FAULTS_CHILD)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip()}
    for name in ("null_write", "div_zero", "big_stack"):
        assert "RuntimeError" in lines[name] and name in lines[name], lines[name]
    assert re.search(r"stack", lines["big_stack"], re.IGNORECASE), lines["big_stack"]
    assert re.search(r"divi|zero|SIGFPE|arithmetic", lines["div_zero"], re.IGNORECASE)
    assert lines["ok"] == "ok True"


def test_debug_build_runs_correct_kernels(dbg):
    x = torch.arange(77, dtype=torch.float32)
    y = torch.zeros(77)
    dbg.in_bounds(x, y)
    assert torch.equal(y, x * 2)
    base = torch.arange(200, dtype=torch.float32)
    dbg.in_bounds(base[10:60], y[:50])
    assert torch.equal(y[:50], torch.arange(10, 60, dtype=torch.float32) * 2)


# ------------------------------------------------------------------ not MSL


def test_keyword_lookalikes_compile(lib):
    out = torch.zeros(3)
    lib.keyword_lookalikes(out)
    assert torch.all(out == 21.0)


NOT_MSL = {
    "double": ("double d = double(i);", r"double"),
    "long_double": ("long double d = 1;", r"double"),
    "std": ("float d = std::max(1.0f, 2.0f);", r"std"),
    "new": ("int* p = new int[4];", r"\bnew\b"),
    "delete": ("thread int* p = nullptr; delete p;", r"\bdelete\b"),
    "throw": ("if (i > 100) throw 1;", r"throw|exception"),
    "try": ("try { out[i] = 1.0f; } catch (...) { }", r"\btry\b|exception"),
    "goto": ("goto done; done: out[i] = 0.0f;", r"goto"),
    "thread_local": ("static thread_local int counter = 0;", r"thread_local"),
    "non_ascii": ("float d = 1.0f; // caf\u00e9", r"ASCII"),
}


@pytest.mark.parametrize("kind", sorted(NOT_MSL))
def test_cpp_but_not_msl_is_rejected(kind):
    stmt, pattern = NOT_MSL[kind]
    src = (
        "#include <metal_stdlib>\n"
        "using namespace metal;\n"
        "kernel void k(device float* out [[buffer(0)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        f"    {stmt}\n"
        "    out[i] = 0.0f;\n"
        "}\n"
    )
    with raises(SyntaxError, pattern, r":5\b"):
        emu.compile_shader(src)


NOT_MSL_TOP = {
    "virtual": ("struct S { virtual float f() { return 1.0f; } };", r"virtual"),
    "recursion": ("int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }", r"recurs"),
    "include": ("#include <vector>", r"include"),
    "dynamic_cast": (
        "struct A { int a; }; float g(thread A* p) "
        "{ return float(dynamic_cast<thread A*>(p)->a); }",
        r"dynamic_cast",
    ),
    "typeid": ("struct B { int b; }; int h() { return int(sizeof(typeid(B))); }", r"typeid"),
}


@pytest.mark.parametrize("kind", sorted(NOT_MSL_TOP))
def test_cpp_declarations_not_msl_are_rejected(kind):
    decl, pattern = NOT_MSL_TOP[kind]
    src = (
        "#include <metal_stdlib>\n"
        "using namespace metal;\n"
        "\n"
        f"{decl}\n"
        "kernel void k(device float* out [[buffer(0)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        "    out[i] = 0.0f;\n"
        "}\n"
    )
    with raises(SyntaxError, pattern, r":4\b"):
        emu.compile_shader(src)


def test_metal_headers_are_accepted():
    src = (
        "#include <metal_stdlib>\n#include <metal_math>\n#include <metal_atomic>\n"
        "#include <metal_simdgroup>\n#include <metal_simdgroup_matrix>\n"
        "#include <metal_compute>\n#include <metal_integer>\n"
        "using namespace metal;\n"
        "kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "    out[i] = sqrt(4.0f);\n}\n"
    )
    lib = emu.compile_shader(src)
    out = torch.zeros(2)
    lib.k(out)
    assert torch.all(out == 2.0)


CPP17 = {
    "structured_binding": (
        "struct P { float a; float b; };\n"
        "inline float f(P p) {\n"
        "    auto [x, y] = p;\n"
        "    return x + y;\n"
        "}\n",
        r"structured",
        5,
    ),
    "fold_expression": (
        "template <typename... T>\ninline float f(T... v) {\n    return (v + ... + 0.0f);\n}\n",
        r"fold",
        5,
    ),
}

CPP17_KERNEL = (
    "kernel void k(device float* out [[buffer(0)]],\n"
    "              uint i [[thread_position_in_grid]]) {\n"
    "    out[i] = 1.0f;\n"
    "}\n"
)


@pytest.mark.parametrize("kind", sorted(CPP17))
def test_cpp17_syntax_needs_metal4(kind):
    body, pattern, line = CPP17[kind]
    src = "#include <metal_stdlib>\nusing namespace metal;\n" + body + CPP17_KERNEL
    with raises(SyntaxError, pattern, rf":{line}\b"):
        emu.compile_shader(src, metal_version=320)
    lib = emu.compile_shader(src, metal_version=400)
    out = torch.zeros(2)
    lib.k(out)
    assert torch.all(out == 1.0)


def test_header_the_compiler_still_finds_is_named_at_the_source_line(tmp_path):
    """A distribution's compiler may find C++ headers despite -nostdinc (g++ 13 on the H200
    image did): the error still names the source's own include line, not the header's."""
    from mpslinalg.emulator import translate
    from mpslinalg.emulator.build import find_compiler

    headers = tmp_path / "inc"
    headers.mkdir()
    (headers / "vector").write_text('#include "features_not_here.h"\n')
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\nexec "{find_compiler()}" "$@" -isystem "{headers}"\n')
    wrapper.chmod(0o755)
    src = ("#include <metal_stdlib>\nusing namespace metal;\n\n#include <vector>\n"
           "kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) "
           "{ o[i] = 0.0f; }\n")
    with pytest.raises(translate.TranslateError, match=r"^program_source:4: error: #include "
                       r"of 'vector' is not available"):
        translate.preprocess(translate.check_raw(src), str(wrapper), 310)
