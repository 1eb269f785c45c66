"""Pass 5, the emission: the code around the lowered source that makes its kernels callable.

For the CPU runtime: per kernel host name a launcher (``lane<h>`` binds each parameter from the
launch's buffers or builtins and calls the kernel; ``params<h>`` describes the buffers for the
runtime's argument checks; ``emu_kd<h>`` is its `KernelDesc`), then the exported table
(``emu_kernel_count``, ``emu_kernel_desc``, ``emu_launch``); `assemble` spreads the launchers
over translation units that compile in parallel. For the CUDA executor: per host name an
``extern "C" __global__`` wrapper ``emu_k<h>_<host>`` (`entry_name`), and Metal's type names
spelled as the CUDA prelude's (``float4`` -> ``mtl_float4``).
"""

from __future__ import annotations

import re

from .lexer import single_precision, tokenize
from .structure import MATRIX_PRODUCT_NAMES, KernelInfo

__all__ = [
    "CPU_BUILTINS",
    "CUDA_BUILTINS",
    "kernel_infos",
    "cpu_launchers",
    "assemble",
    "cuda_source",
    "entry_name",
]

# Metal builtin attributes -> the CPU launcher's values (emu::Lane L, emu::Runtime R).
CPU_BUILTINS = {
    "thread_position_in_grid": "L.tid",
    "thread_position_in_threadgroup": "L.lid",
    "threadgroup_position_in_grid": "R.tgid",
    "threads_per_threadgroup": "R.tpg",
    "dispatch_threads_per_threadgroup": "R.dtpg",
    "threads_per_grid": "R.grid",
    "grid_size": "R.grid",
    "threadgroups_per_grid": "R.ngroups",
    "thread_index_in_threadgroup": "::emu::U(L.lidx)",
    "thread_index_in_simdgroup": "::emu::U(L.slane)",
    "simdgroup_index_in_threadgroup": "::emu::U(L.sgid)",
    "threads_per_simdgroup": "::emu::U(32)",
    "thread_execution_width": "::emu::U(32)",
    "simdgroups_per_threadgroup": "::emu::U(R.nsg)",
    "dispatch_simdgroups_per_threadgroup": "::emu::U(R.dnsg)",
    "thread_index_in_quadgroup": "::emu::U(L.slane & 3u)",
    "quadgroup_index_in_threadgroup": "::emu::U(L.lidx >> 2)",
    "quadgroups_per_threadgroup": "::emu::U((R.nlanes + 3u) / 4u)",
    "grid_origin": "::emu::U(0)",
}
# Metal builtin attributes -> the CUDA wrapper's values (emu::Ctx C, see cuda_prelude.cuh).
CUDA_BUILTINS = {
    "thread_position_in_grid": "C.tid",
    "thread_position_in_threadgroup": "C.lid",
    "threadgroup_position_in_grid": "C.tgid",
    "threads_per_threadgroup": "C.tpg",
    "dispatch_threads_per_threadgroup": "C.dtpg",
    "threads_per_grid": "C.grid",
    "grid_size": "C.grid",
    "threadgroups_per_grid": "C.ngroups",
    "thread_index_in_threadgroup": "::emu::U(C.lidx)",
    "thread_index_in_simdgroup": "::emu::U(C.lidx & 31u)",
    "simdgroup_index_in_threadgroup": "::emu::U(C.lidx >> 5)",
    "threads_per_simdgroup": "::emu::U(32u)",
    "thread_execution_width": "::emu::U(32u)",
    "simdgroups_per_threadgroup": "::emu::U(C.nsg)",
    "dispatch_simdgroups_per_threadgroup": "::emu::U(C.dnsg)",
    "thread_index_in_quadgroup": "::emu::U(C.lidx & 3u)",
    "quadgroup_index_in_threadgroup": "::emu::U(C.lidx >> 2)",
    "quadgroups_per_threadgroup": "::emu::U((C.nlanes + 3u) / 4u)",
    "grid_origin": "::emu::U(0u)",
}

_EXPORT = 'extern "C" __attribute__((visibility("default")))'


def _function_name(kd, args):
    q = "::" + "::".join(kd.ns + (kd.name,)) if kd.ns else kd.name
    return f"{q}<{args}>" if args is not None else q


def kernel_infos(unit) -> list:
    """`KernelInfo` per host name, in the order of the launchers and wrappers."""
    return [
        KernelInfo(e.host, e.kernel.name, e.kernel.params, unit.reaches_sync(e.kernel.name),
                   unit.reaches(e.kernel.name, MATRIX_PRODUCT_NAMES))
        for e in unit.entries
    ]


def cpu_launchers(unit) -> tuple:
    """Per kernel: the C++ that binds its arguments and describes it; plus the exported table."""
    snippets = []
    for h, (e, info) in enumerate(zip(unit.entries, kernel_infos(unit), strict=True)):
        kd, args = e.kernel, e.template_args
        fn = _function_name(kd, args)
        ki = (
            f"::__emu_ki_{kd.index}"
            if not kd.ns
            else "::" + "::".join(kd.ns) + f"::__emu_ki_{kd.index}"
        )
        ki = f"{ki}<{args}>" if args is not None else ki
        call = []
        pdescs = []
        for k, p in enumerate(kd.params):
            if p.attr == "buffer":
                call.append(f"::emu::bind<::emu::arg_t<F{h},{k}>>(R, {p.buffer})")
                pdescs.append(f'::emu::pdesc<::emu::arg_t<F{h},{k}>>({p.buffer}, "{p.name}")')
            else:
                call.append(f"::emu::builtin<::emu::arg_t<F{h},{k}>>({CPU_BUILTINS[p.attr]})")
        snippets.append(
            "\n".join(
                [
                    f"namespace emu_gen {{ using F{h} = decltype(&{fn});",
                    f"static void lane{h}(::emu::Lane& L) {{ "
                    "::emu::Runtime& R = *L.rt; (void)R; "
                    f"{fn}({', '.join(call)}); }}",
                    f"static const ::emu::ParamDesc params{h}[] = "
                    f"{{ {', '.join(pdescs + ['{}'])} }}; }}",
                    f"extern const ::emu::KernelDesc emu_kd{h} = "
                    f"{{&emu_gen::lane{h}, {int(info.sync)}, {len(pdescs)}, "
                    f'emu_gen::params{h}, {ki}::maxt(), {ki}::tg(), "{e.host}"}};',
                ]
            )
        )
    n = len(unit.entries)
    table = "\n".join(
        [
            "EMU_DEFINE_FIBER_ASM()",
            "".join(f"extern const ::emu::KernelDesc emu_kd{h};\n" for h in range(n)),
            "static const ::emu::KernelDesc* const emu_kdescs[] = { "
            + ", ".join([f"&emu_kd{h}" for h in range(n)] + ["nullptr"])
            + " };",
            f"{_EXPORT} int emu_kernel_count() {{ return {n}; }}",
            f"{_EXPORT} const ::emu::KernelDesc* emu_kernel_desc(int i) "
            "{ return emu_kdescs[i]; }",
            f"{_EXPORT} int emu_launch(int i, const ::emu::Launch* la, "
            "char* err, int n, int threads) "
            "{ return ::emu::launch(emu_kdescs[i], la, err, n, threads); }",
        ]
    )
    return snippets, table


def assemble(tr, parts: int) -> list:
    """Split a translation into `parts` C++ sources that compile in parallel; kernels are spread
    over them (every part sees the whole Metal source: free functions were made inline, templates
    instantiate on use)."""
    parts = max(1, min(parts, len(tr.snippets) or 1))
    head = '#include "emu_shim.h"\n' + tr.body + '\n#line 1 "<emulator-launchers>"\n'
    out = []
    for p in range(parts):
        mine = tr.snippets[p::parts]
        out.append(head + "\n".join(mine) + "\n" + (tr.table + "\n" if p == 0 else ""))
    return out


def entry_name(index: int, host: str) -> str:
    """The CUDA wrapper of kernel `index`: unique, and named after the host name so that
    profilers show which Metal kernel ran."""
    return f"emu_k{index}_" + re.sub(r"[^A-Za-z0-9_]", "_", host)


# MSL vector/matrix/16-bit type names; NVRTC predefines CUDA structs with some of these names.
_TYPE_NAME_RE = re.compile(
    r"^(?:(?:packed_)?(?:float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)[234]"
    r"|(?:float|half)[234]x[234]|half|bfloat)$"
)


def cuda_tokens(text: str) -> str:
    """The CUDA spelling of the rewritten source, token by token: Metal's type names become the
    prelude's ``mtl_`` types and unsuffixed floating literals become ``float`` literals."""
    out = []
    toks = tokenize(text)
    for i, tok in enumerate(toks):
        out.append(tok.ws)
        s = single_precision(tok)
        if tok.k == "id" and _TYPE_NAME_RE.match(s):
            prev = toks[i - 1].t if i else ""
            if prev not in (".", "->"):
                s = "mtl_" + s
        out.append(s)
    return "".join(out)


def cuda_source(unit, body: str) -> str:
    """The CUDA C++ of a unit whose lowered source is ``body``: the source, then one
    ``__global__`` wrapper per host name, in CUDA's spelling of Metal's types.

    Each wrapper's launch bound is its kernel's thread limit, or less where the program is
    compiled with ``-DEMU_GROUP_BOUND=<threads>`` (``EMU_LAUNCH_BOUND`` in cuda_prelude.cuh);
    ``-DEMU_ONLY_KERNEL=<i>`` keeps wrapper ``i`` alone: the CUDA executor compiles a kernel
    again that way for the group size it is launched with. (The bound is parenthesised: the
    template arguments of a kernel's companion struct may hold commas.)"""
    wrappers = []
    for h, e in enumerate(unit.entries):
        kd, args = e.kernel, e.template_args
        fn = _function_name(kd, args)
        ki = "::" + "::".join(kd.ns + (f"__emu_ki_{kd.index}",))
        ki = f"{ki}<{args}>" if args is not None else ki
        call = []
        for k, p in enumerate(kd.params):
            if p.attr == "buffer":
                bind = "bind_device" if p.device else "bind"
                call.append(f"::emu::{bind}<::emu::arg_t<F{h}, {k}>>(A, {p.buffer})")
            else:
                call.append(f"::emu::builtin<::emu::arg_t<F{h}, {k}>>({CUDA_BUILTINS[p.attr]})")
        wrapper = cuda_tokens(
            f"using F{h} = decltype(&{fn});\n"
            f'extern "C" __global__ void __launch_bounds__(EMU_LAUNCH_BOUND(({ki}::maxt()))) '
            f"{entry_name(h, e.host)}(const __grid_constant__ ::emu::Args A) {{\n"
            f"  ::emu::Ctx C;\n  if (!::emu::setup(A, C)) return;\n"
            f"  {fn}({', '.join(call)});\n}}\n"
        )
        wrappers.append(f"#if !defined(EMU_ONLY_KERNEL) || EMU_ONLY_KERNEL == {h}\n{wrapper}"
                        "#endif\n")
    return cuda_tokens(body) + '\n#line 1 "<cuda-launchers>"\n' + "".join(wrappers)
