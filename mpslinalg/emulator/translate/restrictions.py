"""Pass 3, the restrictions: Metal's rules that a C++ compiler would accept, checked in one pass
over the `Unit` before anything is rewritten.

`RESTRICTIONS` is the table of the rules the emulator enforces, each with the section of the
Metal Shading Language Specification that states it (or, where Metal's specification has no
such construct at all, what else rules it out) and a smallest source the check rejects (the
unit tests run every one). `check` runs them in source order within each family of rules, the
first violation raising `TranslateError` at its line. `CUDA_UNMAPPED` lists what the CUDA
executor cannot map on top of that, and `check_address_space_overloads` finds the overloads that
an executor's erasure of address spaces would make resolve differently from Metal (`check_cuda`
runs both for the CUDA executor, `check_cpu` the latter for the CPU emulator, which erases only
``thread`` vs ``threadgroup`` and ``device``/``constant`` references).
"""

from __future__ import annotations

import dataclasses
import re

from .errors import CudaUnsupportedError, TranslateError
from .lowering import runtime_dispatched_overloads, wrapped_pointer
from .structure import ADDRESS_SPACES, KEYWORDS, SYNC_NAMES

__all__ = [
    "Restriction",
    "RESTRICTIONS",
    "CUDA_UNMAPPED",
    "HOST_RUNTIME_SYMBOLS",
    "host_call_message",
    "check",
    "check_cuda",
    "check_cpu",
    "check_address_space_overloads",
]

_MSL = "Metal Shading Language Specification"
SPEC_RESTRICTIONS = f"{_MSL}, section 1.5.4 'Restrictions'"
SPEC_CXX = f"{_MSL}, section 1.5 'Metal and C++' (MSL 3.2 is based on C++14, MSL 4.0 on C++17)"
SPEC_SCALARS = f"{_MSL}, section 2.1 'Scalar Data Types'"
SPEC_CONSTANT = f"{_MSL}, section 4.2 'constant Address Space'"
SPEC_THREADGROUP = f"{_MSL}, section 4.4 'threadgroup Address Space'"
SPEC_ARGUMENTS = f"{_MSL}, section 5.2.1 'Locating Buffer, Texture, and Sampler Arguments'"
NOT_MSL = "not part of MSL (an extension of the host's C++ compiler)"
NO_LINKING = "torch.mps.compile_shader builds one self-contained library (nothing is linked in)"
COMPILE_SHADER = "torch.mps.compile_shader binds buffers and scalars only"
ONE_LIBRARY = "a library's kernels are looked up by host name"


@dataclasses.dataclass(frozen=True)
class Restriction:
    """One rule: what it rejects, where Metal states it, and a source that breaks it."""

    construct: str
    spec: str
    example: str  # a smallest source the check rejects
    match: str  # a regular expression its message matches
    metal_version: int = 320


RESTRICTIONS = (
    Restriction("double", SPEC_SCALARS, "double f(double x) { return x; }",
                r"'double' is not supported"),
    Restriction("long double literals", SPEC_SCALARS, "float f() { return 1.0L; }",
                r"long double literal 1\.0L"),
    Restriction("new and delete", SPEC_RESTRICTIONS, "void f() { int* p = new int; }",
                r"'new' is not available"),
    Restriction("exceptions", SPEC_RESTRICTIONS, "void f() { throw 1; }",
                r"exceptions \(try/catch/throw\)"),
    Restriction("virtual functions", SPEC_RESTRICTIONS, "struct S { virtual void f() {} };",
                r"virtual functions"),
    Restriction("goto", SPEC_RESTRICTIONS, "void f() { a: goto a; }", r"'goto'"),
    Restriction("thread_local", SPEC_RESTRICTIONS, "thread_local int x;", r"'thread_local'"),
    Restriction("dynamic_cast", SPEC_RESTRICTIONS,
                "struct S {}; void f(S* p) { dynamic_cast<S*>(p); }", r"'dynamic_cast'"),
    Restriction("typeid", SPEC_RESTRICTIONS, "void f() { typeid(int); }", r"'typeid' \(RTTI\)"),
    Restriction("the C++ standard library", SPEC_RESTRICTIONS,
                "float f(float x) { return std::abs(x); }", r"standard library \(std::\)"),
    Restriction("derived classes", SPEC_RESTRICTIONS, "struct A {}; struct B : A {};",
                r"derived classes \(inheritance\)"),
    Restriction("lambda expressions", SPEC_RESTRICTIONS,
                "void f() { auto g = [](int x) { return x; }; }", r"lambda expressions"),
    Restriction("function pointers", SPEC_RESTRICTIONS, "void g(); void f() { void (*p)() = 0; }",
                r"function pointers"),
    Restriction("taking a function's address", SPEC_RESTRICTIONS,
                "void g() {} void f() { auto p = &g; }", r"address of function 'g'"),
    Restriction("recursion", SPEC_RESTRICTIONS, "int f(int n) { return n ? f(n - 1) : 0; }",
                r"'f' calls itself"),
    Restriction("'if constexpr' before MSL 4.0", SPEC_CXX,
                "void f() { if constexpr (true) {} }", r"'if constexpr' is C\+\+17"),
    Restriction("structured bindings before MSL 4.0", SPEC_CXX,
                "struct P { int a, b; }; void f(P p) { auto [a, b] = p; }",
                r"structured bindings"),
    Restriction("fold expressions before MSL 4.0", SPEC_CXX,
                "template <int... N> int f() { return (N + ...); }", r"fold expressions"),
    Restriction("mutable program-scope variables", SPEC_CONSTANT, "int counter;",
                r"program scope variable 'counter' must reside in constant address space"),
    Restriction("mutable static data members", SPEC_CONSTANT, "struct S { static int n; };",
                r"static data member 'n' must reside in constant"),
    Restriction("mutable static local variables", SPEC_CONSTANT,
                "void f() { static int n = 0; }", r"static local variable must reside"),
    Restriction("threadgroup variables with initializers", SPEC_THREADGROUP,
                "kernel void k() { threadgroup float x = 0; }",
                r"threadgroup variables cannot have initializers"),
    Restriction("buffer indices beyond 30", SPEC_ARGUMENTS,
                "kernel void k(device float* a [[buffer(31)]]) {}",
                r"buffer index 31 out of range \(Metal allows 0\.\.30\)"),
    Restriction("threadgroup, stage_in, texture and sampler parameters", COMPILE_SHADER,
                "kernel void k(threadgroup float* a [[threadgroup(0)]]) {}",
                r"\[\[threadgroup\(\.\.\.\)\]\] cannot be bound"),
    Restriction("function constants", COMPILE_SHADER,
                "kernel void k(device float* a, bool b [[function_constant(0)]]) {}",
                r"\[\[function_constant\]\] is not reachable"),
    Restriction("linkage to host code", NO_LINKING, 'extern "C" int getpid();',
                r'extern "C" \(linkage to host code\)'),
    Restriction("functions declared but not defined", NO_LINKING,
                "int g(int); int f(int x) { return g(x); }", r"'g' is declared but not defined"),
    Restriction("host (C library) functions", NO_LINKING,
                "void f(device char* p) { memset(p, 0, 4); }", r"'memset' is a host"),
    Restriction("the host compiler's builtins", NOT_MSL,
                "int f(int x) { return __builtin_popcount(x); }", r"'__builtin_popcount' is a"),
    Restriction("inline assembly", NOT_MSL, 'void f() { asm("nop"); }', r"inline assembly"),
    Restriction("code run at load time", NOT_MSL,
                "__attribute__((constructor)) void f() {}", r"__attribute__\(\(constructor\)\)"),
    Restriction("duplicate host names", ONE_LIBRARY,
                'kernel void a() {} [[host_name("a")]] kernel void b() {}',
                r"duplicate kernel host name 'a'"),
    Restriction("instantiations of non-kernels", ONE_LIBRARY,
                'template <typename T> void f(T x) {} '
                'template [[host_name("f_float")]] kernel void f<float>(float x);',
                r"explicit instantiation of 'f', which is not a kernel template"),
)


_STATIC_RULE = (
    f"variables with static storage are shared by every thread, so Metal allows them only in "
    f"the constant address space ({SPEC_CONSTANT})"
)
_NO_LINKING = (
    "Metal links no host or library code into a kernel: it can only call functions defined in "
    "its source and Metal's standard library"
)
_NO_FUNCTION_POINTERS = (
    "Metal does not support function pointers here (only [[visible]] functions through visible "
    f"function tables, which torch.mps.compile_shader cannot link; {SPEC_RESTRICTIONS})"
)
_LOAD_TIME_ATTRS = frozenset(("constructor", "destructor", "init_priority"))
_NOT_VARIABLES = frozenset(
    "using typedef template static_assert namespace friend public private protected".split()
)
_TYPE_WORDS = frozenset(
    "bool char short int long float half uint ushort uchar void unsigned signed auto const".split()
)
_FORBIDDEN_WORDS = {
    "double": "'double' is not supported in Metal (use float)",
    "new": "'new' is not available in Metal",
    "try": "exceptions (try/catch/throw) are not available in Metal",
    "catch": "exceptions (try/catch/throw) are not available in Metal",
    "throw": "exceptions (try/catch/throw) are not available in Metal",
    "virtual": "virtual functions are not available in Metal",
    "goto": "'goto' is not available in Metal",
    "thread_local": "'thread_local' is not available in Metal",
    "dynamic_cast": "'dynamic_cast' is not available in Metal",
    "typeid": "'typeid' (RTTI) is not available in Metal",
}
# binary operators that can stand next to `...` in a fold expression
_FOLD_OPS = frozenset(
    "+ - * / % ^ & | << >> && || == != < > <= >= = += -= *= /= ,".split()
)
_DECL_LIKE = frozenset({",", "<", ">", "*", "&", "&&"})
_LONG_DOUBLE_LIT_RE = re.compile(r"^(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+[eE])[0-9eE+\-]*[lL]$")
# Host functions a kernel must not call, caught by name in the source. The functions the
# emulator's runtime itself links against must be: a kernel's call of one would pass the check of
# the built library's undefined symbols (build.check_host_symbols). The others would be caught
# there too, but here the message can name the line.
HOST_RUNTIME_SYMBOLS = frozenset(
    """
    memset memcpy memmove mmap mprotect munmap pthread_create pthread_join raise sigaction
    sigaltstack sigemptyset siglongjmp sigsetjmp signal snprintf vsnprintf strcmp syscall
    timer_create timer_settime dladdr
    printf fprintf puts abort exit _exit malloc free calloc realloc
    """.split()
)


def host_call_message(name):
    return f"'{name}' is a host (C library) function, not part of Metal: {_NO_LINKING}"


def _load_time_message(attr):
    return (
        f"__attribute__(({attr})) is not available in Metal: no code runs when a Metal library is "
        "loaded or unloaded"
    )


def check(unit) -> None:
    """Every rule of `RESTRICTIONS`; raises `TranslateError` at the first violation."""
    _check_kernel_parameters(unit)
    _check_forbidden(unit)
    _check_tokens(unit)
    protos = _check_declarations(unit)
    _check_recursion(unit)
    _check_calls(unit, protos)
    _check_threadgroup_initializers(unit)
    _check_entries(unit)


def _check_kernel_parameters(unit):
    for kd in unit.kernels:
        for j, attr in kd.unbindable:
            if attr == "function_constant":
                unit.err(j, "[[function_constant]] is not reachable through compile_shader")
            unit.err(
                j,
                f"kernel parameters with [[{attr}(...)]] cannot be bound through "
                "torch.mps.compile_shader; declare threadgroup arrays in the kernel body",
            )
        for p, j in zip(kd.params, kd.param_tokens, strict=True):
            if p.attr == "buffer" and not 0 <= p.buffer <= 30:
                unit.err(j, f"buffer index {p.buffer} out of range (Metal allows 0..30)")


def _check_forbidden(u):
    mv = u.metal_version
    for i, tok in enumerate(u.toks):
        if u.in_attr[i]:
            continue
        if tok.k == "id":
            s = tok.t
            if s in _FORBIDDEN_WORDS:
                u.err(i, _FORBIDDEN_WORDS[s])
            elif s == "delete" and u.t(i - 1) != "=":
                u.err(i, "'delete' is not available in Metal")
            elif s == "std" and u.t(i + 1) == "::":
                u.err(
                    i,
                    "the C++ standard library (std::) is not available in Metal; use metal:: "
                    "equivalents",
                )
            elif s in ("struct", "class") and u.t(i - 1) != "enum":
                j = i + 1
                while u.k(j) == "id" or u.t(j) == "::":
                    j += 1
                if u.t(j) == "<" and u.k(i + 1) == "id":
                    e = u.angle_end(j)
                    j = e + 1 if e > 0 else j
                if u.t(j) == "final":
                    j += 1
                if u.t(j) == ":" and u.scope[i] in ("ns", "class") and j > i + 1:
                    u.err(i, "derived classes (inheritance) are not available in Metal")
            elif s == "if" and u.t(i + 1) == "constexpr" and mv < 400:
                u.err(
                    i,
                    f"'if constexpr' is C++17 and needs Metal 4.0 (__METAL_VERSION__ >= 400; "
                    f"compiling for {mv}); use overloads, enable_if or tag dispatch",
                )
            elif s == "auto" and mv < 400:
                j = i + 1
                while u.t(j) in ("&", "&&", "const"):
                    j += 1
                if u.t(j) == "[" and u.scope[i] in ("func", "block"):
                    u.err(
                        i,
                        f"structured bindings are C++17 and need Metal 4.0 (compiling for {mv})",
                    )
        elif tok.k == "num":
            if _is_long_double_literal(tok.t):
                u.err(i, f"long double literal {tok.t} is not supported in Metal")
        elif tok.t == "..." and mv < 400:
            # `pack op ...` / `... op pack` (pack expansions have `...` after a name, `)` or
            # `>`, or before `)`)
            prev, nxt = u.t(i - 1), u.t(i + 1)
            if (
                (prev in _FOLD_OPS - _DECL_LIKE and u.k(i - 1) == "punct")
                or (prev == "(" and nxt in _FOLD_OPS - {","})
                or (nxt in _FOLD_OPS - _DECL_LIKE - {"="} and prev in _FOLD_OPS)
            ):
                u.err(i, f"fold expressions are C++17 and need Metal 4.0 (compiling for {mv})")


def _is_long_double_literal(text):
    return bool(_LONG_DOUBLE_LIT_RE.match(text)) and not text.lower().startswith("0x")


def _check_tokens(u):
    """Lambdas, function pointers, linkage to host code, load-time code and inline assembly."""
    defined = {f.name for f in u.funcs}
    for i, tok in enumerate(u.toks):
        s = tok.t
        if tok.k == "id" and not u.in_attr[i]:
            if s == "extern" and u.k(i + 1) == "str":
                u.err(
                    i,
                    f"extern {u.t(i + 1)} (linkage to host code) is not "
                    f"available in Metal: {_NO_LINKING}",
                )
            elif s in ("asm", "__asm__", "__asm"):
                u.err(i, "inline assembly is not available in Metal")
            elif s == "__attribute__" and u.t(i + 1) == "(":
                for j in range(i + 2, u.match[i + 1]):
                    if u.t(j) in _LOAD_TIME_ATTRS:
                        u.err(j, _load_time_message(u.t(j)))
            elif (
                s in defined
                and u.t(i - 1) == "&"
                and u.k(i - 2) not in ("id", "num")
                and u.t(i - 2) not in (")", "]")
                and u.t(i + 1) not in ("(", "::", "<")
            ):
                u.err(i, f"taking the address of function '{s}': {_NO_FUNCTION_POINTERS}")
        elif tok.k == "punct" and s == "[" and not u.in_attr[i]:
            prev = u.t(i - 1)
            after = u.t(u.match[i] + 1)
            unary_context = (u.k(i - 1) == "punct" and prev not in (")", "]")) or prev in (
                "return",
                "co_return",
            )
            if unary_context and after in ("(", "{", "mutable", "->", "<", "constexpr"):
                u.err(i, f"Metal does not support lambda expressions ({SPEC_RESTRICTIONS})")
        elif tok.k == "punct" and s == "(" and not u.in_attr[i]:
            _check_function_pointer(u, i)
    for a, b in u.attr_spans:
        for nm, _ in u.attr_items(a, b):
            if nm in _LOAD_TIME_ATTRS:
                u.err(a, _load_time_message(nm))


def _check_function_pointer(u, i):
    """`R (*name)(args)` and `R (&name)(args)`: the declarator of a pointer or reference to a
    function (or to a member function, `(S::*name)`), in a declaration, cast or type-id."""
    prev = u.t(i - 1)
    if not (
        (u.k(i - 1) == "id" and (prev not in KEYWORDS or prev in _TYPE_WORDS))
        or prev in (">", "*", "&", "(", ",", "<")
    ):
        return
    j = i + 1
    while u.k(j) == "id" and u.t(j + 1) == "::":
        j += 2
    if u.t(j) not in ("*", "&", "^"):
        return
    j += 1
    while u.t(j) in ("const", "volatile") or (u.k(j) == "id" and u.t(j) not in KEYWORDS):
        j += 1
    if u.t(j) == "[":
        j = u.match[j] + 1
    if u.t(j) == ")" and u.t(j + 1) == "(" and u.t(i + 1) != "this":
        u.err(i, _NO_FUNCTION_POINTERS)


def _check_declarations(u):
    """Variables with static storage must be `constant`; returns the function prototypes at
    namespace scope, name -> (first token, ';')."""
    protos = {}
    for scope, a, b in u.decls:
        idx = [j for j in range(a, b) if not u.in_attr[j] and u.k(j) != "pp"]
        words = [u.t(j) for j in idx]
        if not words or words[0] in _NOT_VARIABLES:
            continue
        if words[0] in ("struct", "class", "union", "enum") and (
            len(words) == 2
            or (words[0] == "enum" and words[1] in ("class", "struct"))
            and len(words) == 3
        ):
            continue  # a forward declaration
        eq = paren = None
        j = a
        while j < b:
            sj = u.t(j)
            if sj == "=" and eq is None:
                eq = j
            elif sj == "(" and not u.in_attr[j]:
                if paren is None:
                    paren = j
                j = u.match[j]
            elif sj in ("[", "{"):
                j = u.match[j]
            j += 1
        is_function = paren is not None and (eq is None or paren < eq) and ("constant" not in words)
        if is_function:
            if scope == "ns" and u.k(paren - 1) == "id" and u.t(paren - 1) not in KEYWORDS:
                protos.setdefault(u.t(paren - 1), (a, b))
            continue
        if "constant" in words or (scope == "class" and "static" not in words):
            continue  # a constant, or an ordinary data member
        end = eq if eq is not None else b
        name = next(
            (
                j
                for j in range(end - 1, a - 1, -1)
                if u.k(j) == "id" and u.t(j) not in KEYWORDS and not u.in_attr[j]
            ),
            a,
        )
        if scope == "class":
            u.err(
                name,
                f"static data member '{u.t(name)}' must reside in constant "
                f"address space: {_STATIC_RULE}",
            )
        u.err(
            name,
            f"program scope variable '{u.t(name)}' must reside in constant "
            f"address space: Metal allows only `constant` variables at program scope "
            f"({SPEC_CONSTANT}); a mutable global would be shared by every thread",
        )
    # static variables in function bodies
    for i, tok in enumerate(u.toks):
        if tok.t != "static" or tok.k != "id" or u.scope[i] not in ("func", "block"):
            continue
        j = i
        while j < len(u.toks) and u.t(j) != ";":
            j = u.match[j] + 1 if u.t(j) in ("(", "[", "{") else j + 1
        if not any(u.t(x) == "constant" for x in range(i, j)):
            u.err(i, f"static local variable must reside in constant address space: {_STATIC_RULE}")
    return protos


def _check_recursion(u):
    """No cycle in the call graph (direct or mutual recursion). The graph's nodes are the
    non-template free functions with a single definition: templates are left alone (Apple's
    compiler accepts e.g. c10's `if (x < 0) return -f(-x);`, which it can inline away) and
    calls of overloaded names cannot be resolved without types."""
    counts = {}
    for f in u.funcs:
        counts[f.name] = counts.get(f.name, 0) + 1
    nodes = {
        f.name: f
        for f in u.funcs
        if f.free
        and counts[f.name] == 1
        and f.name not in ("?", "operator")
        and u.t(f.start) != "template"
    }
    calls = {}
    for name, f in nodes.items():
        first = {}
        for j in range(f.open + 1, f.close):
            nm = u.call_name(j)
            if nm in nodes:
                first.setdefault(nm, j)
        calls[name] = first
    state = {}  # 1: on the current path, 2: finished
    for root in sorted(nodes, key=lambda nm: nodes[nm].start):
        if root in state:
            continue
        path, stack = [root], [iter(calls[root].items())]
        state[root] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            callee, j = step
            if state.get(callee) == 1:
                cycle = path[path.index(callee) :] + [callee]
                how = (
                    f"'{callee}' calls itself"
                    if len(cycle) == 2
                    else "mutual recursion " + " -> ".join(cycle)
                )
                u.err(
                    j,
                    f"recursion ({how}): Metal does not support recursive function "
                    f"calls ({SPEC_RESTRICTIONS})",
                )
            if callee not in state:
                state[callee] = 1
                path.append(callee)
                stack.append(iter(calls[callee].items()))


def _check_calls(u, protos):
    """Calls of the host compiler's builtins and of host functions; uses of functions that are
    declared but not defined."""
    for nm, j in sorted(u.undefined_calls.items(), key=lambda item: item[1]):
        if nm.startswith("__") and nm != "__attribute__":
            u.err(
                j,
                f"'{nm}' is a compiler builtin of the emulator's host compiler, not part of Metal",
            )
        if nm in HOST_RUNTIME_SYMBOLS:
            u.err(j, host_call_message(nm))
    defined = {f.name for f in u.funcs}
    for name, (a, b) in protos.items():
        if name in defined:
            continue
        use = next(
            (
                j
                for j in range(len(u.toks))
                if not a <= j <= b
                and u.toks[j].k == "id"
                and u.toks[j].t == name
                and u.t(j - 1) not in (".", "->", "::")
            ),
            None,
        )
        if use is not None:
            u.err(use, f"'{name}' is declared but not defined in this source; " + _NO_LINKING)


def _check_threadgroup_initializers(u):
    for decl in u.threadgroup_declarations():
        for d in () if decl.pointer else decl.declarators:
            if any(u.t(x) == "=" for x in d):
                u.err(d[0], "threadgroup variables cannot have initializers in Metal")


def _check_entries(u):
    seen = set()
    for e in u.entries:
        if e.kernel is None:
            u.err(
                e.token,
                f"explicit instantiation of '{e.name}', which is not a kernel template defined "
                "in this source",
            )
    for e in u.entries:
        if e.host in seen:
            u.err(e.token, f"duplicate kernel host name '{e.host}'")
        seen.add(e.host)


# Metal constructs with no CUDA mapping here, and why.
CUDA_UNMAPPED = {
    **{
        name: "quad-group functions are not mapped by the CUDA executor"
        for name in SYNC_NAMES
        if name.startswith("quad_")
    },
    "simd_shuffle_and_fill_up": "simd_shuffle_and_fill_up is not mapped by the CUDA executor",
    "simd_shuffle_and_fill_down": "simd_shuffle_and_fill_down is not mapped by the CUDA executor",
    **{
        name: "textures and samplers are not available through compile_shader nor the CUDA "
        "executor"
        for name in (
            "texture1d",
            "texture2d",
            "texture3d",
            "texture2d_array",
            "texturecube",
            "depth2d",
            "sampler",
        )
    },
    "imageblock": "imageblocks (tile memory) have no CUDA counterpart",
    "visible_function_table": "function tables have no CUDA counterpart here",
    "intersection_function_table": "ray tracing has no CUDA counterpart here",
}


def check_cuda(u) -> None:
    """The constructs of `CUDA_UNMAPPED`, then overloads that only address spaces tell apart
    (`check_address_space_overloads`); raises `CudaUnsupportedError` at the first."""
    for i, tok in enumerate(u.toks):
        if tok.k == "id" and tok.t in CUDA_UNMAPPED and not u.in_attr[i]:
            raise CudaUnsupportedError(
                f"{tok.file}:{tok.line}: error: '{tok.t}': {CUDA_UNMAPPED[tok.t]}"
            )
    check_address_space_overloads(u)


def check_cpu(u) -> None:
    """What the CPU emulator cannot run like Metal on top of `check`: overloads that only
    ``thread`` vs ``threadgroup`` (or ``device``/``constant`` references) tell apart where its
    run-time dispatch does not (`check_address_space_overloads` with ``target="cpu"``); raises
    `TranslateError`."""
    check_address_space_overloads(u, target="cpu")


# -- overloads told apart by address spaces alone --

_ERASED_SPACES = {
    "cuda": (
        "the CUDA executor erases Metal's address spaces (a device, constant, threadgroup or "
        "thread pointer is a plain CUDA pointer, ::emu::dptr<T> is T*), so CUDA would resolve "
        "calls of these overloads differently from Metal (a silent wrong call where a template "
        "and a non-template meet); dispatch must not depend on the address space: use a tag "
        "type or a template parameter (e.g. the pointer type) instead"
    ),
    "cpu": (
        "the CPU emulator erases thread vs threadgroup (both are plain C++ pointers and "
        "references, and so are device and constant references; device and constant pointers "
        "keep types of their own, ::emu::dptr and ::emu::cptr) and dispatches at run time only "
        "between two free overloads alike but for thread vs threadgroup on a parameter's own "
        "pointer or reference, which it tests; inside template arguments, or between a "
        "template and a non-template, it would call another overload than Metal (or fail to "
        "compile); dispatch must not depend on the address space: use a tag type or a template "
        "parameter (e.g. the pointer type) instead"
    ),
}
_ERRORS = {"cuda": CudaUnsupportedError, "cpu": TranslateError}
# (the lexer's '>>' is two '>' tokens, so angle brackets pair like the others)
_OPENERS = {"<": ">", "(": ")", "[": "]"}
_CLOSERS = frozenset(_OPENERS.values())
_SEP = ("|",)  # between parameters: no template parameter stands for a run across it


def check_address_space_overloads(u, target: str = "cuda") -> None:
    """Two definitions of one function (same scope, name and number of parameters) whose
    parameters mention different address spaces at some position (anywhere in the parameter,
    template arguments included: ``EigWork<T, threadgroup T*>&``) but take the same types once
    the address spaces are erased, the template parameters of either standing for any type:
    Metal tells them apart, CUDA does not. ``const`` is erased with them (a qualification
    conversion makes either viable for the other's arguments), except where the two differ only
    in ``device`` vs ``constant`` (``constant T*`` is ``const T*`` on CUDA, so ``device T*``
    stays apart). The pairs that the lowering dispatches at run time (free overloads alike but
    for ``thread`` vs ``threadgroup``, `lowering.runtime_dispatched_overloads`) are left to it
    where the difference is on the parameter's own pointer or reference, the one it tests.
    Raises `CudaUnsupportedError` naming both definitions.

    ``target="cpu"``: the same for the CPU emulator, which erases fewer address spaces: only
    ``thread`` and ``threadgroup`` and the ``device``/``constant`` keywords the lowering drops
    (references, ``auto*``, ``void*``; `lowering.wrapped_pointer`). Its ``device`` and
    ``constant`` pointers are types of their own (``::emu::dptr<T>``, ``::emu::cptr<T>``), so
    they stay in the erased parameters (as ``device*`` / ``constant*`` tokens, which no template
    parameter's run crosses) and a difference in them alone is no collision. Raises
    `TranslateError`."""
    if target not in _ERASED_SPACES:
        raise ValueError(f"target must be one of {tuple(_ERASED_SPACES)}, got {target!r}")
    kept = _kept_pointers(u, target)
    named = {}
    for f in u.funcs:
        if f.paren >= 0 and f.name not in ("?", "operator"):
            named.setdefault(f.name, []).append(f)
    candidates = [f for fs in named.values() if len(fs) > 1 for f in fs]
    groups = {}
    for f in candidates:
        j, qual = f.paren - 1, []
        while u.t(j - 1) == "::" and u.k(j - 2) == "id":
            qual.insert(0, u.t(j - 2))
            j -= 2
        params = u.split_params(f.paren)
        # a class's functions by its body; a namespace's by its name (it may be reopened)
        scope = -1 if u.scope[f.start] == "ns" else _enclosing_brace(u, f.start)
        key = (f.ns, scope, tuple(qual), f.name, len(params))
        groups.setdefault(key, []).append((f, params))
    dispatched = {
        (f1.start, f2.start)
        for f1, _, f2, _, _ in runtime_dispatched_overloads(u)
        if _nested_spaces_alike(u, f1, f2)
    }
    found = []
    for members in groups.values():
        for x, (f1, p1) in enumerate(members):
            for f2, p2 in members[x + 1 :]:
                if (f1.start, f2.start) in dispatched or (f2.start, f1.start) in dispatched:
                    continue
                hit = _collide(u, f1, p1, f2, p2, kept)
                if hit is not None:
                    found.append((max(f1.start, f2.start), hit))
    if found:
        _, (a, b, k, pa, pb) = min(found, key=lambda item: item[0])
        ta, tb = u.toks[a.paren - 1], u.toks[b.paren - 1]
        raise _ERRORS[target](
            f"{tb.file}:{tb.line}: error: overloads of '{b.name}' are told apart only by "
            f"address spaces: parameter {k + 1} `{_param_text(u, pb[k])}` here and "
            f"`{_param_text(u, pa[k])}` of the overload at {ta.file}:{ta.line}; "
            f"{_ERASED_SPACES[target]}"
        )


def _kept_pointers(u, target):
    """The address-space keywords ``target`` keeps as types of their own, each mapped to the
    index of its pointer's ``*``: none on CUDA, the wrapped ``device``/``constant`` pointers on
    the CPU."""
    if target == "cuda":
        return {}
    kept = {}
    for j, tok in enumerate(u.toks):
        if tok.k == "id" and tok.t in ("device", "constant") and not u.in_attr[j]:
            star = wrapped_pointer(u, j)
            if star >= 0:
                kept[j] = star
    return kept


def _enclosing_brace(u, i):
    """The '{' of the class (or other brace scope) token ``i`` is in, -1 at file scope (bodies
    before it are skipped whole)."""
    j = i - 1
    while j >= 0:
        tok = u.toks[j]
        if tok.k == "punct" and tok.t == "}":
            j = u.match[j] - 1
            continue
        if tok.k == "punct" and tok.t == "{":
            return j
        j -= 1
    return -1


def _nested_spaces_alike(u, f1, f2):
    """Whether the address spaces inside the template arguments of the parameters are the same
    (then the run-time dispatch, which tests the parameter's own pointer, is right)."""
    return all(
        _spaces(u, a, nested=True) == _spaces(u, b, nested=True)
        for a, b in zip(u.split_params(f1.paren), u.split_params(f2.paren), strict=True)
    )


def _spaces(u, p, nested=False, kept=()):
    """The address spaces a parameter mentions, in order (``nested``: only those inside its
    template arguments; the keywords at the indices ``kept`` left out). In order, not as a set:
    ``thread W<thread float*>&`` is not ``thread W<P>&``, whose ``P`` may be a device pointer."""
    out, depth = [], 0
    for j in p:
        s = u.t(j)
        if s == "<":
            depth += 1
        elif s == ">":
            depth -= 1
        elif (
            s in ADDRESS_SPACES
            and not u.in_attr[j]
            and (depth > 0 or not nested)
            and j not in kept
        ):
            out.append(s)
    return tuple(out)


def _collide(u, f1, p1, f2, p2, kept):
    """``(f1, f2, position, p1, p2)`` where the two definitions differ in erased address spaces
    (those not in ``kept``, `_kept_pointers`) and take the same types once they are erased;
    else None."""
    sp1 = [_spaces(u, p, kept=kept) for p in p1]
    sp2 = [_spaces(u, p, kept=kept) for p in p2]
    diff = [k for k, (a, b) in enumerate(zip(sp1, sp2, strict=True)) if a != b]
    if not diff:
        return None
    strict = all(
        sp1[k] and sp2[k] and set(sp1[k] + sp2[k]) <= {"device", "constant"} for k in diff
    )
    a = _erased(u, f1, p1, 1, strict, kept)
    b = _erased(u, f2, p2, 2, strict, kept)
    if not _unify(a, b, {}):
        return None
    return (f1, f2, diff[0], p1, p2)


def _template_params(u, f):
    if u.t(f.start) == "template" and u.t(f.start + 1) == "<":
        e = u.angle_end(f.start + 1)
        if e > 0:
            return {nm.rstrip(".") for nm in u.template_param_names(f.start + 2, e)}
    return set()


def _erased(u, f, params, side, strict, kept):
    """The parameters' tokens without attributes, default arguments, names and address spaces
    (``strict``: ``constant`` kept as ``const``; else no ``const`` either), joined by `_SEP`;
    the function's template parameters become variables ``("?", side, name)``. The keywords
    ``kept`` (index -> its pointer's ``*``) are not erased: their ``*`` becomes one token
    ``device*`` / ``constant*``."""
    tvars = _template_params(u, f)
    stars = {star: u.t(j) + "*" for j, star in kept.items()}
    out = []
    for x, p in enumerate(params):
        if x:
            out.extend(_SEP)
        words, depth = [], 0
        for j in p:
            s = u.t(j)
            if u.in_attr[j] or u.k(j) == "pp":
                continue
            if s in _OPENERS:
                depth += 1
            elif s in _CLOSERS:
                depth -= 1
            elif s == "=" and depth == 0:
                break  # a default argument
            if j in kept:
                continue
            words.append((stars.get(j, s), u.k(j)))
        # the declarator's name: an identifier after the type, before the end, '[' or ')'
        for y in range(len(words) - 1, 0, -1):
            s, k = words[y]
            nxt = words[y + 1][0] if y + 1 < len(words) else ""
            if k == "id" and s not in KEYWORDS and nxt in ("", "[", ")"):
                if words[y - 1][0] != "::" and s not in tvars:
                    del words[y]
                break
        for s, _ in words:
            if s in ("device", "thread", "threadgroup", "volatile"):
                continue
            if s == "constant":
                s = "const"
            if s == "const" and (not strict or (out and out[-1] == "const")):
                continue
            out.append(("?", side, s) if s in tvars else s)
    return tuple(out)


def _runs(seq):
    """The lengths of the prefixes of ``seq`` a template parameter can stand for: balanced in
    brackets, without a separator at their own level, not starting with a declarator's
    punctuation."""
    if (
        not seq
        or seq[0] in ("*", "device*", "constant*", "&", "&&", ",", "...", "[", "|")
        or seq[0] in _CLOSERS
    ):
        return
    depth = 0
    for n, s in enumerate(seq, start=1):
        if s in _OPENERS:
            depth += 1
        elif s in _CLOSERS:
            depth -= 1
            if depth < 0:
                return
        elif depth == 0 and s in (",", "|"):
            return
        if depth == 0:
            yield n


def _is_var(s):
    return isinstance(s, tuple)


def _occurs(var, seq, env):
    return any(s == var or (_is_var(s) and s in env and _occurs(var, env[s], env)) for s in seq)


def _unify(a, b, env, depth=0):
    """Whether token tuples ``a`` and ``b`` are equal for some values of their variables
    (``env``: those bound so far, each to a token tuple)."""
    if depth > 200:
        return False  # a pathological source: no claim of a collision
    if a and _is_var(a[0]) and a[0] in env:
        return _unify(env[a[0]] + a[1:], b, env, depth + 1)
    if b and _is_var(b[0]) and b[0] in env:
        return _unify(a, env[b[0]] + b[1:], env, depth + 1)
    if not a or not b:
        return not a and not b
    if a[0] == b[0]:
        return _unify(a[1:], b[1:], env, depth + 1)
    for x, y in ((a, b), (b, a)):
        if _is_var(x[0]):
            for n in _runs(y):
                run = y[:n]
                if not _occurs(x[0], run, env) and _unify(
                    x[1:], y[n:], {**env, x[0]: run}, depth + 1
                ):
                    return True
    return False


def _param_text(u, p):
    """A parameter as written (its whitespace collapsed)."""
    toks = [j for j in p if not u.in_attr[j] and u.k(j) != "pp"]
    return "".join(
        (" " if x and u.toks[j].ws else "") + u.t(j) for x, j in enumerate(toks)
    ).strip()
