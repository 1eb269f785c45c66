"""C++ that Metal rejects is rejected at compile time, naming Metal's rule and the line; includes
cannot reach outside the source; compiler diagnostics and fault messages speak Metal."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from emu_helpers import raises

from mpslinalg import emulator as emu

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def kernel(body):
    return (
        "kernel void k(device float* out [[buffer(0)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        f"    {body}\n"
        "}\n"
    )


# name -> (declarations before the kernel, kernel body, message pattern, line of the error)
REJECTED = {
    "mutual_recursion": (
        "int odd(int n);\n"
        "int even(int n) { return n == 0 ? 1 : odd(n - 1); }\n"
        "int odd(int n) { return n == 0 ? 0 : even(n - 1); }\n",
        "out[i] = float(even(int(i)));",
        r"recursion.*even -> odd -> even|recursion.*odd -> even -> odd",
        5,
    ),
    "three_way_recursion": (
        "int c(int n);\n"
        "int a(int n) { return n ? c(n - 1) : 0; }\n"
        "int b(int n) { return a(n); }\n"
        "int c(int n) { return b(n); }\n",
        "out[i] = float(a(3));",
        r"mutual recursion a -> c -> b -> a.*Restrictions",
        5,
    ),
    "function_pointer": (
        "float twice(float x) { return 2.0f * x; }\n",
        "float (*fp)(float) = twice; out[i] = fp(1.0f);",
        r"function pointers",
        6,
    ),
    "function_pointer_type": (
        "typedef float (*unary)(float);\n",
        "out[i] = 1.0f;",
        r"function pointers",
        3,
    ),
    "address_of_function": (
        "float twice(float x) { return 2.0f * x; }\n",
        "auto fp = &twice; out[i] = fp(1.0f);",
        r"address of function 'twice'.*function pointers",
        6,
    ),
    "mutable_global": (
        "int counter = 0;\n",
        "out[i] = float(counter++);",
        r"program scope variable 'counter' must reside in constant address space",
        3,
    ),
    "device_global": (
        "device float* saved;\n",
        "out[i] = 1.0f;",
        r"program scope variable 'saved' must reside in constant address space",
        3,
    ),
    "static_local": (
        "",
        "static int counter = 0; out[i] = float(counter++);",
        r"static local variable must reside in constant address space",
        5,
    ),
    "static_data_member": (
        "struct S { static int shared; };\n",
        "out[i] = 1.0f;",
        r"static data member 'shared' must reside in constant address space",
        3,
    ),
    "lambda": (
        "",
        "auto f = [](float x) { return x * 2.0f; }; out[i] = f(1.0f);",
        r"lambda expressions.*Restrictions",
        5,
    ),
    "lambda_capture": (
        "",
        "float y = 2.0f; auto f = [&] { return y; }; out[i] = f();",
        r"lambda",
        5,
    ),
    "extern_c": (
        'extern "C" int getpid();\n',
        "out[i] = float(getpid());",
        r'extern "C".*host code',
        3,
    ),
    "extern_c_block": (
        'extern "C" { int getpid(); }\n',
        "out[i] = float(getpid());",
        r'extern "C"',
        3,
    ),
    "declared_not_defined": (
        "float helper(float x);\n",
        "out[i] = helper(1.0f);",
        r"'helper' is declared but not defined",
        6,
    ),
    "getpid": ("", "out[i] = float(getpid());", r"'getpid' is a host", 5),
    "abort": ("", "if (i > 1000000) abort(); out[i] = 1.0f;", r"'abort' is a host", 5),
    "exit": ("", "if (i > 1000000) exit(1); out[i] = 1.0f;", r"'exit' is a host", 5),
    "memset": ("", "float a[4]; memset(a, 0, 16); out[i] = a[0];", r"'memset' is a host", 5),
    "constructor": (
        "__attribute__((constructor)) void at_load() { }\n",
        "out[i] = 1.0f;",
        r"constructor.*no code runs when a Metal library is loaded",
        3,
    ),
    "destructor": (
        "__attribute__((destructor)) void at_unload() { }\n",
        "out[i] = 1.0f;",
        r"destructor",
        3,
    ),
    "gnu_constructor": (
        "[[gnu::constructor]] void at_load() { }\n",
        "out[i] = 1.0f;",
        r"construct",
        3,
    ),
    "compiler_builtin": (
        "",
        "if (i > 1000000) __builtin_trap(); out[i] = 1.0f;",
        r"'__builtin_trap' is a compiler builtin",
        5,
    ),
    "inline_asm": ("", 'asm("nop"); out[i] = 1.0f;', r"inline assembly", 5),
}


@pytest.mark.parametrize("kind", sorted(REJECTED))
def test_construct_rejected_with_metal_rule(kind):
    decls, body, pattern, line = REJECTED[kind]
    with raises(SyntaxError, pattern, rf"program_source:{line}\b"):
        emu.compile_shader(HEAD + decls + kernel(body))


def test_system_is_not_reachable():
    # not declared by any header a kernel sees: a plain compile error, never a call
    with raises(SyntaxError, r"system"):
        emu.compile_shader(HEAD + kernel('if (i > 1000000) system("true"); out[i] = 1.0f;'))


ACCEPTED = (
    "constant float kScale = 2.0f;\n"
    "constant constexpr int kN = 3;\n"
    "constant float kTable[2] = {1.0f, 2.0f};\n"
    "struct S { static constant constexpr int v = 1; float f() const; };\n"
    "float S::f() const { return 1.0f; }\n"
    "float helper(float x);\n"  # declared, defined below: fine
    "float helper(float x) { return x + 1.0f; }\n"
    "template <typename T> T fact(T n) { return n <= 1 ? T(1) : n * fact(n - 1); }\n"
    "inline float over(float x) { return x; }\n"
    "inline float over(half x) { return over(float(x)); }\n"  # overload forwarding, not recursion
    "struct Functor { float operator()(float x) const { return x * 2.0f; } };\n"
)


def test_metal_constructs_near_the_rules_are_accepted():
    body = (
        "static constant constexpr float kLocal = 0.5f;\n"
        "    float a[2] = {1.0f, 2.0f};\n"
        "    Functor f;\n"
        "    out[i] = kScale * kN * S::v * kTable[1] * kLocal + a[i % 2] - a[(i + 1) % 2]"
        " + f(0.0f) + over(half(0.0f)) + helper(0.0f) - 1.0f + fact(3.0f) - 6.0f + S().f() - 1.0f;"
    )
    lib = emu.compile_shader(HEAD + ACCEPTED + kernel(body))
    out = torch.zeros(2)
    lib.k(out)
    assert torch.equal(out, torch.tensor([5.0, 7.0]))


# ------------------------------------------------------------------ includes


SECRET = "mpslinalg-emulator-test-secret-line"


@pytest.fixture()
def secret_file(tmp_path):
    p = tmp_path / "secret.h"
    p.write_text(SECRET + "\n")
    return p


@pytest.mark.parametrize(
    "directive, pattern",
    [
        ('#include "{abs}"', r"absolute path or one escaping"),
        ("#include <{abs}>", r"absolute path or one escaping"),
        ('#include "{rel}"', r"absolute path or one escaping"),
        ('#include \\\n  "{abs}"', r"absolute path or one escaping"),
        ('/* hidden */ #include "{abs}"', r"absolute path or one escaping"),
        ('#define HEADER "{abs}"\n#include HEADER', r"computed #include"),
        ('#include_next "{abs}"', r"#include_next is not supported"),
        ('#line 1 "{abs}"', r"#line names"),
        ('# 1 "{abs}"', r"#line names"),
    ],
)
def test_includes_cannot_leave_the_source_and_are_never_echoed(secret_file, directive, pattern):
    rel = "../" * 16 + str(secret_file).lstrip("/")  # climbs to / from any directory
    text = directive.format(abs=secret_file, rel=rel)
    src = HEAD + text + "\n" + kernel("out[i] = 1.0f;")
    line = HEAD.count("\n") + 1 + (text.count("\n") if "HEADER" in text else 0)
    with raises(SyntaxError, pattern, rf"program_source:{line}\b") as info:
        emu.compile_shader(src)
    assert SECRET not in str(info.value)


def test_relative_include_finds_nothing_outside_the_source(tmp_path, monkeypatch):
    (tmp_path / "local.h").write_text(SECRET + "\n")
    monkeypatch.chdir(tmp_path)  # the process's directory is not the source's tree
    with raises(SyntaxError, r"'local\.h' is not available") as info:
        emu.compile_shader(HEAD + '#include "local.h"\n' + kernel("out[i] = 1.0f;"))
    assert SECRET not in str(info.value)


# ------------------------------------------------------------------ diagnostics in Metal's types


def test_pointer_type_errors_name_metal_types():
    src = HEAD + (
        "kernel void k(device float4* out [[buffer(0)]], constant half* c [[buffer(1)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        "    device int* p = c;\n"
        "    device float4* q = p;\n"
        "    out[i] = q[0];\n"
        "}\n"
    )
    with raises(SyntaxError, r"constant half\*", r"device int\*", r"device float4\*") as info:
        emu.compile_shader(src)
    assert not re.search(r"dptr|cptr|emu::|_Float16|metal::vec", str(info.value))


@pytest.mark.parametrize(
    "cast, pattern",
    [
        ("reinterpret_cast<device float*>(c)", r"cannot cast a constant pointer to a device"),
        ("static_cast<device float*>(c)", r"cannot cast a constant pointer to a device"),
        (
            "(device float*)(constant float*)reinterpret_cast<constant float*>(o)",
            r"cannot cast a device pointer to a constant",
        ),
    ],
)
def test_casts_between_device_and_constant_are_rejected(cast, pattern):
    src = HEAD + (
        "kernel void k(device float* o [[buffer(0)]], constant half* c [[buffer(1)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        f"    device float* p = {cast};\n"
        "    o[i] = p[0];\n"
        "}\n"
    )
    with raises(SyntaxError, pattern, r"program_source:5:\d+: error"):
        emu.compile_shader(src)


def test_casts_within_an_address_space_are_accepted():
    src = HEAD + (
        "kernel void k(device float* o [[buffer(0)]], constant uint* c [[buffer(1)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        "    constant float* f = reinterpret_cast<constant float*>(c);\n"
        "    device uint* u = (device uint*)o;\n"
        "    u[i] = as_type<uint>(f[i]) + 1u;\n"
        "}\n"
    )
    c = torch.tensor([1.0, 2.0]).view(torch.int32)
    o = torch.zeros(2)
    emu.compile_shader(src).k(o, c)
    assert torch.equal(o.view(torch.int32), c + 1)


def test_metal_type_names_rewrites_nested_types():
    from mpslinalg.emulator.build import metal_type_names

    assert (
        metal_type_names("‘void f(emu::dptr<const metal::vec<float, 4> >, ::emu::cptr<T>)’")
        == "‘void f(device const float4*, constant T*)’"
    )
    assert metal_type_names("dptr<metal::packed_vec<_Float16, 3>>") == "device packed_half3*"


# ------------------------------------------------------------------ fault messages


FAULT_CHILD = r'''
import torch
from mpslinalg import emulator as emu
SRC = """
#include <metal_stdlib>
using namespace metal;
kernel void null_write(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    thread int* p = (thread int*)(out[0] == 12345 ? 0x20 : 0x10);
    *p = int(i);
}
kernel void wild_write(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    thread int* p = (thread int*)(out[0] == 12345 ? 0x7f0000001000 : 0x7f0000002000);
    *p = int(i);
}
kernel void div_zero(device int* out [[buffer(0)]], constant int& d [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = 100 / (d - 1);
}
"""
lib = emu.compile_shader(SRC)
for name, args in [("null_write", (torch.zeros(4, dtype=torch.int32),)),
                   ("wild_write", (torch.zeros(4, dtype=torch.int32),)),
                   ("div_zero", (torch.zeros(4, dtype=torch.int32), 1))]:
    try:
        kw = {"arg_casts": {1: "int32"}} if name == "div_zero" else {}
        getattr(lib, name)(*args, **kw)
        print(name, "NO ERROR")
    except RuntimeError as e:
        print(name, str(e).replace("\\n", " "))
'''


def test_fault_messages_say_what_happened(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    script = tmp_path / "faults.py"
    script.write_text(FAULT_CHILD)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip()}
    assert re.search(r"SIGSEGV.*null", lines["null_write"]), lines["null_write"]
    assert re.search(r"SIGSEGV.*outside every buffer", lines["wild_write"]), lines["wild_write"]
    assert re.search(r"division by zero.*SIGFPE", lines["div_zero"]), lines["div_zero"]
    for line in lines.values():  # only the debug build's bounds check may say so
        assert "out-of-bounds index" not in line, line


def test_debug_bounds_check_names_index_array_and_line():
    src = HEAD + (
        "kernel void k(device float* out [[buffer(0)]], constant int& k [[buffer(1)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        "    thread float pv[3] = {1.0f, 2.0f, 3.0f};\n"
        "    out[i] = pv[k];\n"
        "}\n"
    )
    lib = emu.compile_shader(src, debug=True)
    out = torch.zeros(4)
    lib.k(out, 2, arg_casts={1: "int32"})
    assert torch.all(out == 3.0)
    # the array's type as the compiler spells it: "float [3]" (g++) or "float[3]" (clang)
    with raises(RuntimeError, r"out-of-bounds index -1\b", r"float ?\[3\]", r"program_source:6\b"):
        lib.k(out, -1, arg_casts={1: "int32"})
