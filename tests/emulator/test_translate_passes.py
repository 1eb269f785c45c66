"""One test (or a few) per pass of the translator, on token streams made without the C
preprocessor (`tokenize` of a source that needs no macro), plus the rules between the two back
ends' modules."""

import ast
import re
from pathlib import Path

import pytest

from mpslinalg._core import metal
from mpslinalg.emulator import build, cuda, library, runtime, translate
from mpslinalg.emulator.translate import emission, lowering, restrictions, source, structure
from mpslinalg.emulator.translate.lexer import single_precision, tokenize

PACKAGE = Path(translate.__file__).resolve().parents[1]
DOC = Path(__file__).resolve().parents[2] / "docs" / "emulator.rst"


def unit(text, metal_version=320):
    return structure.Unit(tokenize(text), metal_version)


# -- pass 0: the source --

def test_source_checks_the_raw_text():
    assert source.check_raw("#include <metal_stdlib>\nfloat x;") == "\nfloat x;"
    with pytest.raises(translate.TranslateError, match=r"^program_source:2: error: non-ASCII"):
        source.check_raw("float x;\n// \u00e9\n")
    with pytest.raises(translate.TranslateError, match=r"#include of '/etc/hosts' is not allowed"):
        source.check_raw('#include "/etc/hosts"\n')


def test_source_refuses_a_file_the_preprocessor_entered():
    toks = tokenize('# 1 "program_source"\n# 1 "secret.h" 1\nint x;\n')
    with pytest.raises(translate.TranslateError, match=r"#include of 'secret.h' is not available"):
        source.check_entered_files(toks)


# -- pass 1: the lexer --

def test_lexer_keeps_the_text_and_the_lines():
    text = '# 7 "metal/a.metal"\nfloat f(float x) { // twice\n  return x * 2.0; /* a\n b */ }\n'
    toks = tokenize(text)
    assert "".join(t.ws + t.t for t in toks) == text
    assert [t.k for t in toks[:4]] == ["pp", "id", "id", "punct"]
    two = next(t for t in toks if t.t == "2.0")
    assert (two.k, two.file, two.line) == ("num", "metal/a.metal", 8)
    assert (toks[-2].t, toks[-2].line) == ("}", 9)
    with pytest.raises(translate.TranslateError, match=r"^program_source:1: error: unexpected"):
        tokenize("int a = 1 \x01;")


@pytest.mark.parametrize("text, single", [("1.5", "1.5f"), ("1e3", "1e3f"), (".5", ".5f"),
                                          ("2", "2"), ("1.5f", "1.5f"), ("0x1p3", "0x1p3")])
def test_lexer_single_precision_literals(text, single):
    assert single_precision(tokenize(text)[0]) == single


# -- pass 2: the structure --

STRUCTURED = """
namespace ns {
struct Pair { float xy; int n; };
inline void helper(threadgroup float* t) { threadgroup_barrier(mem_flags::mem_threadgroup); }
template <typename T>
kernel void scale(device T* out [[buffer(1)]], constant float& s [[buffer(0)]],
                  uint i [[thread_position_in_grid]]) {
  threadgroup float tile[32], other[4];
  helper(tile);
  out[i] = T(s) * undefined_here(i);
}
template [[host_name("scale_float")]] kernel void scale<float>(device float*, constant float&,
                                                               uint);
}
[[kernel, max_total_threads_per_threadgroup(64)]] void plain(device int* a [[buffer(0)]]) {}
"""


def test_structure_finds_functions_kernels_and_host_names():
    u = unit(STRUCTURED)
    assert [f.name for f in u.funcs] == ["helper", "scale", "plain"]
    scale, plain = u.kernels
    assert (scale.name, scale.ns, scale.template) == ("scale", ("ns",), "typename T")
    assert scale.params == [
        structure.ParamInfo("out", "buffer", 1, device=True),
        structure.ParamInfo("s", "buffer", 0),
        structure.ParamInfo("i", "thread_position_in_grid", -1),
    ]
    assert (plain.max_threads, plain.params) == (
        "64", [structure.ParamInfo("a", "buffer", 0, device=True)])
    assert [(e.host, e.name, e.template_args) for e in u.entries] == [
        ("scale_float", "scale", "float"), ("plain", "plain", None)]
    assert [(i.host, i.args) for i in u.instantiations] == [("scale_float", "float")]
    assert {"threadgroup_barrier", "undefined_here"} <= set(u.undefined_calls)
    assert "helper" not in u.undefined_calls and "scale" not in u.undefined_calls


def test_structure_scopes_swizzle_members_and_sync():
    u = unit(STRUCTURED)
    scope = {u.toks[i].t: u.scope[i] for i in range(len(u.toks))
             if u.toks[i].t in ("struct", "xy", "tile", "threadgroup_barrier")}
    assert scope == {"struct": "ns", "xy": "class", "tile": "func",
                     "threadgroup_barrier": "func"}
    assert [sorted(names) for names in u.swizzle_members.values()] == [["xy"]]
    assert u.reaches_sync("scale") and u.reaches_sync("helper") and not u.reaches_sync("plain")


def test_kernels_reaching_a_simdgroup_matrix_product_are_marked():
    # the CUDA executor gives these (and only these) their per-warp scratch
    u = unit("""
inline void mac(thread simdgroup_float8x8& c, simdgroup_float8x8 a) {
  simdgroup_multiply_accumulate(c, a, a, c);
}
inline void twice(thread simdgroup_float8x8& c) { mac(c, c); }
kernel void through_helpers(device float* x [[buffer(0)]]) {
  simdgroup_float8x8 c; simdgroup_load(c, x); twice(c); simdgroup_store(c, x);
}
kernel void product(device float* x [[buffer(0)]]) {
  simdgroup_float8x8 c; simdgroup_load(c, x); simdgroup_multiply(c, c, c);
}
kernel void load_store(device float* x [[buffer(0)]]) {
  simdgroup_float8x8 c; simdgroup_load(c, x); simdgroup_store(c, x);
}
""")
    assert [(i.host_name, i.sync, i.matrix) for i in emission.kernel_infos(u)] == [
        ("through_helpers", True, True), ("product", True, True), ("load_store", True, False)]


def test_structure_parses_threadgroup_declarations():
    u = unit(STRUCTURED)
    decl, = u.threadgroup_declarations()  # the pointer parameter of helper is no declaration
    assert not decl.pointer
    assert [u.text(d[0], d[-1]) for d in decl.declarators] == ["tile [ 32 ]", "other [ 4 ]"]
    assert u.text(decl.type_tokens[0], decl.type_tokens[-1]) == "float"


def test_structure_refuses_what_it_cannot_parse():
    with pytest.raises(translate.TranslateError, match=r"program_source:1: error: unbalanced"):
        unit("void f() { ) }")
    with pytest.raises(translate.TranslateError, match=r"host_name expects string literals"):
        unit("[[host_name(x)]] kernel void k() {}")


# -- pass 3: the restrictions --

@pytest.mark.parametrize("rule", restrictions.RESTRICTIONS, ids=lambda r: r.construct)
def test_restrictions_reject_every_rule_of_the_table(rule):
    assert rule.spec
    u = unit(rule.example, rule.metal_version)
    with pytest.raises(translate.TranslateError, match=r"^program_source:\d+: error: ") as e:
        restrictions.check(u)
    assert re.search(rule.match, str(e.value)), str(e.value)


def test_restrictions_accept_a_clean_source_and_metal_4():
    restrictions.check(unit(STRUCTURED))
    restrictions.check(unit("void f() { if constexpr (true) {} }", 400))


def test_restrictions_of_the_cuda_executor():
    with pytest.raises(translate.CudaUnsupportedError, match=r"'quad_sum': quad-group"):
        restrictions.check_cuda(unit("float f(float x) { return quad_sum(x); }"))


_WORK = "template <typename T, typename P> struct W { P a; };\n"


@pytest.mark.parametrize("text", [
    # metal/linalg/eig.h's eig_schur_any before its tag dispatch, both of its collisions
    _WORK + "int f(thread W<float, device float*>& w, int n) { return 0; }\n"
    "template <typename T> int f(thread W<T, threadgroup T*>& w, int n) { return 1; }",
    _WORK + "template <typename T> int f(thread W<T, threadgroup T*>& w) { return 1; }\n"
    "int f(thread W<float2, device float2*>& w) { return 0; }",
    "void f(threadgroup float* p) {}\ntemplate <typename T> void f(device T* p) {}",
    "template <typename T> void f(device T* p) {}\n"
    "template <typename U> void f(threadgroup U* q) {}",
    "template <typename T> void f(threadgroup T* p) {}\nvoid f(device float2* p) {}",
    # a qualification conversion makes both viable on CUDA, where the other is exact
    "void f(threadgroup float* p) {}\nvoid f(device const float* p) {}",
    "void f(device float* p, thread const int& n) {}\n"
    "void f(threadgroup float* p, thread int& n) {}",
    # `device const T*` and `constant T*` are both `const T*` on CUDA
    "void f(device const float* p) {}\ntemplate <typename T> void f(constant T* p) {}",
    # a namespace reopened
    "namespace n { void f(device float* p) {} }\n"
    "namespace n { template <typename T> void f(threadgroup T* p) {} }",
    # members, and out-of-class definitions
    "struct S {\n  void f(device float* p) {}\n"
    "  template <typename T> void f(threadgroup T* p) {}\n};",
    "struct S { void f(device float* p); void f(threadgroup float* p); };\n"
    "void S::f(device float* p) {}\nvoid S::f(threadgroup float* p) {}",
    # a template parameter that stands for a pointer of any address space
    _WORK + "template <typename P> void f(thread W<float, P>& w) {}\n"
    "void f(thread W<float, thread float*>& w) {}",
    "template <typename P> void f(P p) {}\nvoid f(threadgroup float* p) {}",
    # thread vs threadgroup the run-time dispatch of the lowering does not handle: a template
    # against a non-template, or inside template arguments (it would test the struct's address)
    "void f(thread float* p) {}\ntemplate <typename T> void f(threadgroup T* p) {}",
    _WORK + "void f(thread W<float, thread float*>& w) {}\n"
    "void f(thread W<float, threadgroup float*>& w) {}",
])
def test_cuda_refuses_overloads_told_apart_only_by_address_spaces(text):
    with pytest.raises(translate.CudaUnsupportedError,
                       match=r"^program_source:\d+: error: overloads of 'f' are told apart only by "
                             r"address spaces: parameter \d `.*` here and `.*` of the overload at "
                             r"program_source:\d+; the CUDA executor erases"):
        restrictions.check_cuda(unit(text))


@pytest.mark.parametrize("text", [
    # tag dispatch (what eig.h does now)
    _WORK + "struct Dev {}; struct Grp {};\n"
    "int f(thread W<float, device float*>& w, Dev) { return 0; }\n"
    "template <typename T> int f(thread W<T, threadgroup T*>& w, Grp) { return 1; }",
    # apart on CUDA too: other element types, other scopes, another number of parameters
    _WORK + "int f(thread W<float, device float*>& w) { return 0; }\n"
    "int f(thread W<float2, device float2*>& w) { return 0; }",
    "void f(device float* p) {}\nvoid f(threadgroup int* p) {}",
    "namespace a { void f(device float* p) {} }\nnamespace b { void f(threadgroup float* p) {} }",
    "struct A { void f(device float* p) {} };\nstruct B { void f(threadgroup float* p) {} };",
    "void f(device float* p) {}\nvoid f(threadgroup float* p, int n) {}",
    "void f(device float* p) {}\nvoid f(device int* p) {}",
    # `device T*` is T*, `constant T*` const T*: each argument still finds Metal's overload
    "void f(device float* p) {}\nvoid f(constant float* p) {}",
    # thread vs threadgroup on the parameter itself: dispatched at run time (`__isShared` on CUDA)
    "float f(threadgroup const float* p) { return p[0]; }\n"
    "float f(thread const float* p) { return p[0]; }",
])
def test_cuda_accepts_overloads_apart_without_address_spaces(text):
    restrictions.check_cuda(unit(text))


_CPU_ERASES = (r"^program_source:\d+: error: overloads of 'f' are told apart only by address "
               r"spaces: parameter \d `.*` here and `.*` of the overload at program_source:\d+; "
               r"the CPU emulator erases thread vs threadgroup .*inside template arguments.*"
               r"tag type or a template parameter")


@pytest.mark.parametrize("text", [
    # thread vs threadgroup inside template arguments: the run-time dispatch would test the
    # struct (a reference does not compile, a pointer to it is always in thread memory)
    _WORK + "void f(thread W<float, thread float*>& w) {}\n"
    "void f(thread W<float, threadgroup float*>& w) {}",
    _WORK + "void f(thread W<float, thread float*>* w) {}\n"
    "void f(thread W<float, threadgroup float*>* w) {}",
    # a template against a non-template: not renamed, C++ prefers the non-template
    _WORK + "void f(thread W<float, thread float*>& w) {}\n"
    "template <typename T> void f(thread W<T, threadgroup T*>& w) {}",
    "void f(thread float* p) {}\ntemplate <typename T> void f(threadgroup T* p) {}",
    "template <typename P> void f(P p) {}\nvoid f(threadgroup float* p) {}",
    _WORK + "template <typename P> void f(thread W<float, P>& w) {}\n"
    "void f(thread W<float, thread float*>& w) {}",
    # device and constant references are plain references on the CPU too
    "template <typename T> void f(device T& x) {}\nvoid f(thread float& x) {}",
    # a qualification conversion: `float*` is exact for a thread argument on the CPU
    "void f(threadgroup float* p) {}\nvoid f(thread const float* p) {}",
    # members are not dispatched at run time
    "struct S {\n  void f(thread float* p) {}\n  void f(threadgroup float* p) {}\n};",
])
def test_cpu_refuses_overloads_only_thread_vs_threadgroup_tells_apart(text):
    with pytest.raises(translate.TranslateError, match=_CPU_ERASES) as error:
        restrictions.check_cpu(unit(text))
    assert not isinstance(error.value, translate.CudaUnsupportedError)
    with pytest.raises(translate.CudaUnsupportedError):  # the CUDA executor refuses them too
        restrictions.check_cuda(unit(text))


@pytest.mark.parametrize("text", [
    # thread vs threadgroup on the parameter's own pointer: dispatched at run time
    "float f(threadgroup const float* p) { return p[0]; }\n"
    "float f(thread const float* p) { return p[0]; }",
    "template <typename T> T f(threadgroup T* p) { return p[0]; }\n"
    "template <typename T> T f(thread T* p) { return p[0]; }",
    # device and constant pointers are ::emu::dptr / ::emu::cptr on the CPU, types of their own
    "void f(device float* p) {}\nvoid f(threadgroup float* p) {}",
    "template <typename T> void f(device T* p) {}\nvoid f(threadgroup float* p) {}",
    "template <typename T> void f(thread T* p) {}\nvoid f(device float* p) {}",
    "void f(device float* p) {}\ntemplate <typename T> void f(constant T* p) {}",
    "template <typename P> void f(P p) {}\nvoid f(device float* p) {}",
    _WORK + "int f(thread W<float, device float*>& w, int n) { return 0; }\n"
    "template <typename T> int f(thread W<T, threadgroup T*>& w, int n) { return 1; }",
    _WORK + "template <typename P> void f(thread W<float, P>& w) {}\n"
    "void f(thread W<float, device float*>& w) {}",
    # `device float&` and `constant float&` are `float&` and `const float&`
    "void f(device float& x) {}\nvoid f(constant float& x) {}",
    # tag dispatch
    _WORK + "struct Own {}; struct Grp {};\n"
    "int f(thread W<float, thread float*>& w, Own) { return 0; }\n"
    "int f(thread W<float, threadgroup float*>& w, Grp) { return 1; }",
])
def test_cpu_accepts_overloads_it_keeps_apart(text):
    restrictions.check_cpu(unit(text))


def test_address_space_overloads_targets():
    with pytest.raises(ValueError, match=r"target must be one of \('cuda', 'cpu'\)"):
        restrictions.check_address_space_overloads(unit("void f() {}"), target="metal")


@pytest.mark.parametrize("path", sorted(
    p.relative_to(metal.metal_root()).as_posix() for p in metal.metal_root().rglob("*.metal")))
def test_every_library_source_translates_for_the_cpu(path):
    assert translate.translate(metal.load_source(path), build.require_compiler()).kernels


def test_restrictions_table_is_the_documented_one():
    text = DOC.read_text()
    for rule in restrictions.RESTRICTIONS:
        assert f"   * - {rule.construct}\n" in text, rule.construct


# -- pass 4: the lowering --

def lowered(text, target="cpu"):
    u = unit(text)
    restrictions.check(u)
    return lowering.lower(u, target).text()


def test_lowering_address_spaces():
    out = lowered("void f(device const float* a, constant int* b, device float& c, "
                  "thread float* d) {}")
    assert re.sub(r"\s+", " ", out).strip() == (
        "inline void f(::emu::dptr<const float> a, ::emu::cptr<int> b, float& c, float* d) {}")


def test_lowering_threadgroup_declarations_and_companions():
    out = lowered("kernel void k() { threadgroup float tile[32], other[4]; }")
    assert "auto& tile = ::emu::tg_alloc<0, float[32]>(); auto& other = ::emu::tg_alloc<1, " \
           "float[4]>();" in out
    assert "((sizeof(float[32]) + 15ul) & ~15ul) + ((sizeof(float[4]) + 15ul) & ~15ul)" in out
    assert "maxt() { return 1024; }" in out and "kernel" not in out.split("struct")[0]


def test_lowering_swizzles_and_half_literals():
    out = lowered("void f(float4 v, half h) { v.xy = v.zw; h = 1.5h + 2h; }")
    assert "v.template swzw<0,1>() = v.template swz<2,3>();" in out
    assert "h = ((half)(1.5f)) + ((half)(2.0f));" in out


def test_lowering_targets():
    text = ("void bar() { threadgroup_barrier(mem_flags::mem_none); }\n"
            "kernel void k() { bar(); }\n"
            "template <typename T> kernel void t(device T* a) {}\n"
            'template [[host_name("t_int")]] kernel void t<int>(device int*);\n')
    cpu, gpu = lowered(text, "cpu"), lowered(text, "cuda")
    assert cpu.count("\n") == gpu.count("\n") == text.count("\n")
    assert "inline void bar()" in cpu and "(::emu::Frame(::emu::here()), bar())" in cpu
    assert "inline" not in gpu and "Frame" not in gpu
    assert "t<int>" not in cpu and "t<int>" not in gpu  # the instantiation is the launcher's
    with pytest.raises(ValueError, match="target must be one of"):
        lowering.lower(unit(text), "metal")


# -- pass 5: the emission --

def test_emission_cpu_launchers():
    u = unit(STRUCTURED)
    snippets, table = emission.cpu_launchers(u)
    assert len(snippets) == 2
    assert "::ns::scale<float>(::emu::bind<::emu::arg_t<F0,0>>(R, 1), " \
           "::emu::bind<::emu::arg_t<F0,1>>(R, 0), ::emu::builtin<::emu::arg_t<F0,2>>(L.tid))" \
           in snippets[0]
    assert '::ns::__emu_ki_0<float>::tg(), "scale_float"}' in snippets[0]
    assert "int emu_kernel_count() { return 2; }" in table
    assert [(k.host_name, k.sync) for k in emission.kernel_infos(u)] == [
        ("scale_float", True), ("plain", False)]


def test_emission_cuda_wrappers():
    u = unit("kernel void k(device float4* a [[buffer(0)]], uint i [[thread_index_in_simdgroup]])"
             " { a[i] = float4(1.0); }")
    out = emission.cuda_source(u, lowering.lower(u, "cuda").text())
    assert "mtl_float4(1.0f)" in out
    assert ('extern "C" __global__ void __launch_bounds__(EMU_LAUNCH_BOUND((::__emu_ki_0::maxt())))'
            ' emu_k0_k(') in out
    # the executor compiles one wrapper alone, for a smaller launch bound, with -D
    assert "#if !defined(EMU_ONLY_KERNEL) || EMU_ONLY_KERNEL == 0\n" in out
    assert "k(::emu::bind_device<::emu::arg_t<F0, 0>>(A, 0), " \
           "::emu::builtin<::emu::arg_t<F0, 1>>(::emu::U(C.lidx & 31u)));" in out
    assert emission.entry_name(3, "a.b-c") == "emu_k3_a_b_c"


def test_emission_maps_every_builtin_on_both_back_ends():
    assert set(emission.CPU_BUILTINS) == set(emission.CUDA_BUILTINS) == \
        structure.BUILTIN_ATTRIBUTES


# -- both back ends --

def test_both_executors_reject_the_same_sources():
    """The CUDA executor runs the whole front end (before, it skipped Metal's rules on
    declarations, recursion and host calls)."""
    for src in ("int f(int n) { return n ? f(n - 1) : 0; }\nkernel void k() {}\n",
                "int counter;\nkernel void k() {}\n",
                "kernel void k(device char* p) { memset(p, 0, 4); }\n"):
        with pytest.raises(translate.TranslateError) as cpu_error:
            translate.translate(src, build.require_compiler())
        with pytest.raises(translate.TranslateError) as cuda_error:
            cuda.translate_to_cuda(src)
        assert str(cuda_error.value) == str(cpu_error.value)


def test_one_kernel_and_library_model():
    assert issubclass(runtime.Kernel, library.Kernel) and issubclass(cuda.Kernel, library.Kernel)
    assert issubclass(runtime.Library, library.Library)
    assert issubclass(cuda.Library, library.Library)


def _private_uses(path):
    """``module._name`` and ``from .module import _name`` of the emulator's own modules."""
    siblings = {p.stem for p in PACKAGE.glob("*.py")} | {"translate"}
    tree = ast.parse(path.read_text())
    uses = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in siblings):
            uses.append(f"{node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            uses += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return uses


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_no_module_uses_another_modules_private_names(module):
    assert _private_uses(PACKAGE / module) == []
