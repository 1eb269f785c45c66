"""C++ compiler discovery, compilation and the on-disk cache of compiled kernel libraries."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

try:  # POSIX; elsewhere concurrent builders of one library each build it (same bytes)
    import fcntl
except ImportError:  # pragma: no cover - the emulator runs on Linux and macOS
    fcntl = None

__all__ = [
    "EMULATOR_VERSION",
    "find_compiler",
    "cache_dir",
    "clear_cache",
    "compile_flags",
    "build_library",
    "build_once",
    "compiler_process",
    "run_compiler",
    "stop_compiler",
    "atomic_write",
    "shim_hash",
    "translator_hash",
    "CompilerNotFoundError",
    "EmulatorUnavailableError",
]

EMULATOR_VERSION = "0.1.0"
INCLUDE_DIR = pathlib.Path(__file__).resolve().parent / "include"
_BASE_FLAGS = [
    "-std=c++17",
    "-O2",
    "-shared",
    "-fPIC",
    "-ffp-contract=off",
    "-fwrapv",
    "-fno-math-errno",
    "-fno-exceptions",
    "-fno-rtti",
    "-fno-strict-aliasing",
    "-fvisibility=hidden",
    "-w",
]
# GCC's flags that other compilers (clang) lack; each is kept where the compiler accepts it.
_OPTIONAL_FLAGS = (
    # complete peeling of small constant loops keeps per-thread arrays (a 4x4 matrix) in
    # registers, as the Metal compiler does: halves register-resident kernels, no compile cost
    ("-fpeel-loops",),
    # MSL's unsuffixed floating literals are float: the translation suffixes the kernels' own
    # (translate.single_precision_literals); this covers the emulator's headers under GCC
    ("-fsingle-precision-constant",),
    # large thread-private arrays probe page by page, so they hit the lane stack's guard page
    ("-fstack-clash-protection",),
)


# Between the emulator and each compiler it starts, a supervisor (a second Python, without site
# packages) that dies with the thread that started it (Linux's PR_SET_PDEATHSIG; elsewhere it
# watches its parent's pid) and then kills the compiler's whole process tree (the driver and its
# cc1plus, as and ld: one process group). A compiler therefore never outlives the emulator, even
# one killed with SIGKILL, which runs no cleanup of its own.
_SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys, threading, time
parent, child, stopping = int(sys.argv[1]), None, []
def stop(signum, frame=None):
    stopping.append(signum)
    if child is not None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        os._exit(128 + signum)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, stop)
try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=watch, daemon=True).start()
if os.getppid() != parent:
    sys.exit(1)
child = subprocess.Popen(sys.argv[2:], start_new_session=True)
if stopping:
    stop(stopping[0])
rc = child.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def compiler_process(cmd: list, **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen_kwargs)`` for a compiler (or another tool the emulator
    starts), under the supervisor that ends its process tree when this process ends or
    `stop_compiler` stops it."""
    if not sys.executable:  # an embedded interpreter that cannot start a Python of its own
        return subprocess.Popen(list(map(str, cmd)), **popen_kwargs)
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(os.getpid()), *map(str, cmd)],
        **popen_kwargs,
    )


def stop_compiler(proc: subprocess.Popen) -> None:
    """End a `compiler_process` and its compiler's process tree, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_compiler(cmd: list, *, input: bytes | None = None, timeout: float | None = None,
                 **popen_kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, input=, timeout=, capture_output=True)`` through
    `compiler_process`: on a timeout, an interrupt or any other exception while it waits, the
    compiler is stopped before the exception propagates."""
    proc = compiler_process(
        cmd,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen_kwargs,
    )
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:
        stop_compiler(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class CompilerNotFoundError(RuntimeError):
    pass


def find_compiler() -> str | None:
    """The C++ compiler the emulator uses: $CXX, else the first of c++, g++, clang++ on PATH.

    None if there is none.
    """
    env = os.environ.get("CXX")
    if env:
        path = shutil.which(env)
        return path or (env if os.path.isfile(env) else None)
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    return None


class EmulatorUnavailableError(RuntimeError):
    """The emulator cannot run on this operating system."""


def unsupported_platform() -> str | None:
    """Why the emulator's runtime cannot run here, or None (Linux)."""
    if sys.platform.startswith("linux"):
        return None
    return (f"mpslinalg.emulator runs on Linux only (its runtime uses Linux's per-thread POSIX "
            f"timers and real-time signals; this is {sys.platform}); on a Mac, run the Metal "
            "kernels on the GPU (tensors on 'mps')")


_is_clang: dict = {}


def race_check_unsupported(cxx: str) -> str | None:
    """Why ``cxx`` cannot build the race detector, or None: it needs GCC's ThreadSanitizer
    instrumentation (clang's also instruments the emulator's own runtime and reports races of
    its bookkeeping)."""
    with _shim_lock:
        if cxx not in _is_clang:
            probe = run_compiler([cxx, "-x", "c++", "-dM", "-E", "-"], input=b"")
            _is_clang[cxx] = b"__clang__" in probe.stdout
    if _is_clang[cxx]:
        return (f"the emulator's race detector needs g++ (GCC's ThreadSanitizer instrumentation); "
                f"{cxx} is clang: set $CXX to g++")
    return None


def require_emulator() -> str:
    """The compiler the emulator uses, after checking that the emulator can run here."""
    reason = unsupported_platform()
    if reason is not None:
        raise EmulatorUnavailableError(reason)
    return require_compiler()


def require_compiler() -> str:
    cxx = find_compiler()
    if cxx is None:
        where = (
            f"$CXX={os.environ['CXX']!r} was not found"
            if os.environ.get("CXX")
            else "none of c++, g++, clang++ is on PATH"
        )
        raise CompilerNotFoundError(
            f"mpslinalg.emulator needs a C++17 compiler to run Metal kernels on the CPU, but "
            f"{where}. "
            "Install g++ or clang++ (e.g. `apt-get install g++`) or set $CXX."
        )
    return cxx


def cache_dir() -> pathlib.Path:
    env = os.environ.get("MPSLINALG_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "mpslinalg" / "emulator"


def clear_cache() -> None:
    d = cache_dir()
    if d.is_dir():
        shutil.rmtree(d, ignore_errors=True)


_hashes: dict = {}
_shim_lock = threading.Lock()


def _files_hash(kind: str, files: list) -> str:
    with _shim_lock:
        if kind not in _hashes:
            h = hashlib.sha256()
            for p in files:
                h.update(p.name.encode())
                h.update(p.read_bytes())
            _hashes[kind] = h.hexdigest()
        return _hashes[kind]


def shim_hash() -> str:
    """Fingerprint of the shim headers: a compiled library is only valid for the headers it was
    compiled with (its key holds the translated C++ itself, so the translator need not be in
    it: a change of the translator that leaves the C++ alone reuses the library)."""
    return _files_hash("shim", sorted(INCLUDE_DIR.glob("*.h")))


def translator_hash() -> str:
    """Fingerprint of the translator's passes: the index from a Metal source to its library
    (which skips the translation) is only valid for the translator that made it."""
    package = pathlib.Path(__file__).resolve().parent / "translate"
    return _files_hash("translator", sorted(package.glob("*.py")))


# race check: the compiler instruments every memory access with calls of the __tsan_* hooks that
# emu_race.h defines (the ThreadSanitizer runtime is not linked); line tables map the hooks' return
# addresses to source lines
_RACE_FLAGS = [
    "-DEMU_RACECHECK=1",
    "-fsanitize=thread",
    "-g1",
]
# GCC's: no calls of the (empty) function entry and exit hooks
_RACE_OPTIONAL_FLAGS = (("--param=tsan-instrument-func-entry-exit=0",),)


# Metal rounds every half operation to half. GCC >= 13 and clang >= 16 evaluate _Float16 in float
# by default on x86 (excess precision, C++23 FLT_EVAL_METHOD) unless told otherwise; older
# compilers round per operation already and reject these flags.
_HALF_ROUNDING_CANDIDATES = (["-fexcess-precision=16"], ["-ffloat16-excess-precision=none"])


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one: Linux; else all)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


#: Libraries the kernels link against beyond the C and C++ runtimes (librt: Linux only).
_SYSTEM_LIBS = ["-lrt"] if sys.platform.startswith("linux") else []

_accepted: dict = {}


def compiler_accepts(cxx: str, flags: tuple) -> bool:
    """Whether ``cxx`` compiles a ``_Float16`` function with ``flags``, warnings as errors
    (an unknown or unsupported flag is at least a warning); probed once per compiler."""
    with _shim_lock:
        if (cxx, flags) not in _accepted:
            probe = run_compiler(
                [cxx, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Werror", *flags, "-"],
                input=b"_Float16 h(_Float16 a, _Float16 b) { return a * b + a; }\n",
            )
            _accepted[cxx, flags] = probe.returncode == 0
        return _accepted[cxx, flags]


def half_rounding_flags(cxx: str | None) -> list:
    """The flag (if any) that makes ``cxx`` round each ``_Float16`` operation to half, as Metal
    does."""
    if cxx is None:
        return []
    for flags in _HALF_ROUNDING_CANDIDATES:
        if compiler_accepts(cxx, tuple(flags)):
            return list(flags)
    return []


def _optional(cxx: str | None, candidates: tuple) -> list:
    return [f for flags in candidates if cxx is not None and compiler_accepts(cxx, flags)
            for f in flags]


def compile_flags(debug: bool, race_check: bool = False, cxx: str | None = None) -> list:
    # debug: also check indices into fixed-size arrays (threadgroup and thread-private); a
    # violation calls the handler of emu_sched.h, which raises with the index and the line (no
    # sanitizer runtime is linked)
    return (
        _BASE_FLAGS
        + _optional(cxx, _OPTIONAL_FLAGS)
        + half_rounding_flags(cxx)
        + (["-DEMU_DEBUG=1", "-fsanitize=bounds", "-fno-sanitize-recover=bounds"] if debug else [])
        + (_RACE_FLAGS + _optional(cxx, _RACE_OPTIONAL_FLAGS) if race_check else [])
    )


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write a cache entry: readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextlib.contextmanager
def _exclusive(lock: pathlib.Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``lock`` (threads and processes alike:
    each holder opens the file itself, and flock locks belong to the open file)."""
    with open(lock, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(out: pathlib.Path, build: Callable[[pathlib.Path], pathlib.Path]) -> pathlib.Path:
    """``out``, building it with ``build(tmp)`` (which returns the built file inside the scratch
    directory ``tmp``) if it is not in the cache yet. Concurrent callers, in this process or
    others, wait for one build under a lock file next to ``out`` instead of each running the
    compiler: the first builds, the others find the library when the lock is theirs."""
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(out.parent / f".{out.name}.lock"):
        if out.is_file():  # built by the holder we waited for
            return out
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
            built = build(pathlib.Path(tmp))
            os.replace(built, out)  # atomic: readers never see a partial library
    return out


def build_library(tr, debug: bool, cxx: str, race_check: bool = False) -> pathlib.Path:
    """Compile a translation to a shared library in the cache (or return the cached one).

    Kernels are spread over one translation unit per CPU (at most 4), compiled in parallel and
    linked.
    """
    from .translate import assemble

    flags = compile_flags(debug, race_check, cxx)
    nparts = max(1, min(usable_cpus(), 4, len(tr.kernels)))
    sources = assemble(tr, nparts)
    key = hashlib.sha256(
        json.dumps([sources, flags, EMULATOR_VERSION, shim_hash(), os.path.basename(cxx)]).encode()
    )
    key = key.hexdigest()
    out = cache_dir() / "lib" / f"{key}.so"
    incs = ["-I", str(INCLUDE_DIR)]
    if race_check:
        # source lines of race reports relative to the working directory, as in diagnostics (not
        # part of the cache key: it changes no code)
        incs += [f"-fdebug-prefix-map={os.getcwd()}=."]

    def build(tmp: pathlib.Path) -> pathlib.Path:
        so = tmp / "kernels.so"
        srcs = []
        for i, text in enumerate(sources):
            src = tmp / f"kernels{i}.cpp"
            src.write_text(text)
            srcs.append(src)
        # linking with -fsanitize=thread would pull in the ThreadSanitizer runtime, which cannot be
        # loaded into a running Python: race-check builds compile and link separately
        if len(srcs) == 1 and not race_check:
            _run([[cxx] + flags + incs + [str(srcs[0]), "-o", str(so)] + _SYSTEM_LIBS], srcs)
        else:
            objs = [s.with_suffix(".o") for s in srcs]
            cflags = [f for f in flags if f != "-shared"]
            _run(
                [
                    [cxx] + cflags + incs + ["-c", str(s), "-o", str(o)]
                    for s, o in zip(srcs, objs, strict=True)
                ],
                srcs,
            )
            _run(
                [[cxx, "-shared", "-fPIC", *map(str, objs), "-o", str(so), *_SYSTEM_LIBS]],
                srcs,
            )
        check_host_symbols(so, tr, cxx)
        return so

    return build_once(out, build)


@functools.cache
def _libm_symbols(cxx: str) -> frozenset:
    """The functions of the C math library (pure functions the shim's math builds on)."""
    nm = shutil.which("nm")
    path = run_compiler([cxx, "-print-file-name=libm.so.6"]).stdout.decode().strip()
    if not nm or not os.path.isabs(path):
        return frozenset()
    out = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True, text=True)
    return frozenset(ln.split()[-1].split("@")[0] for ln in out.stdout.splitlines() if ln.strip())


def _allowed_symbol(name: str, libm: frozenset) -> bool:
    from .translate import HOST_RUNTIME_SYMBOLS

    return (
        name in HOST_RUNTIME_SYMBOLS
        or name in libm
        # compiler runtime (half conversions, 128-bit division), C++ ABI and the runtime's own
        # aligned operator new; a kernel cannot name them (`__` names and `new` are rejected)
        or name.startswith(("__", "_ITM_", "operator new", "operator delete"))
    )


def check_host_symbols(so: pathlib.Path, tr, cxx: str) -> None:
    """Every function a kernel library imports must be one the runtime or the shim's math needs:
    a function the kernel source itself calls that comes from the host (getpid, system, a
    declared but undefined function) is a host call that Metal cannot make. Skipped where there
    is no `nm` (binutils)."""
    from .translate import TranslateError, host_call_message

    nm = shutil.which("nm")
    if nm is None:
        return
    out = subprocess.run(
        [nm, "-D", "--undefined-only", "--demangle", str(so)], capture_output=True, text=True
    )
    libm = _libm_symbols(cxx)
    if not libm:  # without the math library's symbols every math call would look foreign
        return
    for line in out.stdout.splitlines():
        # "    U getpid@GLIBC_2.2.5", "    w __gmon_start__"; demangled names contain no '@'
        fields = line.split(None, 1)
        sym = fields[1].split("@")[0].strip() if len(fields) == 2 else ""
        if not sym or _allowed_symbol(sym, libm):
            continue
        name = sym.split("(", 1)[0].rsplit("::", 1)[-1].strip()
        if name not in tr.calls:
            # the runtime's own import, which differs by compiler and C library (gcc 13 on
            # Ubuntu 24.04 turns the runtime's diagnostics into fputc calls): not the kernel's
            continue
        raise TranslateError(f"{tr.calls[name]}: error: {host_call_message(name)}")


def _run(cmds, srcs):
    procs = [compiler_process(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
    errors = []
    try:
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                errors.append(err.decode(errors="replace"))
    except BaseException:  # an interrupt: no compiler may go on without its builder
        for p in procs:
            stop_compiler(p)
        raise
    if errors:
        raise SyntaxError(_format_errors(errors[0], [str(s) for s in srcs]))


# the emulator's C++ spellings of Metal types in compiler diagnostics
_WRAPPER_RE = re.compile(r"(?:::)?\b(?:emu::)?(dptr|cptr)<|(?:::)?\bmetal::(vec|packed_vec)<")


def metal_type_names(text: str) -> str:
    """Compiler diagnostics in the user's types: ``emu::dptr<const T>`` -> ``device const T*``,
    ``emu::cptr<T>`` -> ``constant T*``, ``metal::vec<float, 4>`` -> ``float4``."""
    return _wrapper_names(text.replace("_Float16", "half"))


def _wrapper_names(text: str) -> str:
    m = _WRAPPER_RE.search(text)
    if m is None:
        return text
    depth, close = 1, m.end()
    while close < len(text) and depth:
        depth += {"<": 1, ">": -1}.get(text[close], 0)
        close += 1
    if depth:  # not a complete type (a truncated line): leave the rest alone
        return text
    inner = _wrapper_names(text[m.end() : close - 1]).strip()
    if m.group(1) == "cptr":
        name = f"constant {inner}*"
    elif m.group(1) == "dptr":
        name = f"device {inner}*"
    else:
        elem, _, n = inner.rpartition(",")
        name = f"{'packed_' if m.group(2) == 'packed_vec' else ''}{elem.strip()}{n.strip()}"
    return text[: m.start()] + name + _wrapper_names(text[close:])


# g++: "static assertion failed: MSG"; clang: "static assertion failed due to requirement 'R': MSG"
_STATIC_ASSERT_RE = re.compile(r"static assertion failed(?: due to requirement '.*?')?: ")


def _in_emulator(line: str) -> bool:
    return line.startswith((str(INCLUDE_DIR), "<emulator-"))


def _at_user_line(error: str, before: list, after: list) -> str:
    """An error inside the emulator's headers (a static_assert that enforces a Metal rule) is
    reported at the user's line that instantiated it: g++ names it in the last "required from
    here" line before the error, clang in an "in instantiation of ... requested here" note
    after it (``after``: the lines up to the next error)."""
    if not _in_emulator(error):
        return error
    origins = [ln for ln in reversed(before) if ln.endswith("required from here")]
    origins += [ln for ln in after if ln.endswith("requested here")]
    for line in origins:
        if not _in_emulator(line):
            where = line.split(": ", 1)[0].strip()
            msg = _STATIC_ASSERT_RE.sub("", error.split(": error: ", 1)[1], count=1)
            return f"{where}: error: {msg}"
    return error


# the first line of a diagnostic (then come the quoted source and caret lines, g++ and clang)
_DIAGNOSTIC_RE = re.compile(r"[^\s:][^:]*:\d+:(?:\d+:)? (?:fatal error|error|warning|note): "
                            r"|\d+ errors? generated|In ")


def _without_emulator_notes(lines: list) -> list:
    """The diagnostics without the notes located in the emulator's own headers, and the source
    lines they quote: they describe its C++ (clang lists every constructor of the pointer
    wrappers it tried), not the user's Metal."""
    shown, hiding = [], False
    for line in lines:
        if _DIAGNOSTIC_RE.match(line):
            hiding = _in_emulator(line) and ": note: " in line
        if not hiding:
            shown.append(line)
    return shown


# clang's "'T' (aka 'U')" where both spellings became the same Metal type
_SAME_AKA_RE = re.compile(r"'([^']*)' \(aka '\1'\)")


def _format_errors(stderr: str, srcs: list) -> str:
    lines = []
    for line in _SAME_AKA_RE.sub(r"'\1'", metal_type_names(stderr)).splitlines():
        for src in srcs:
            line = line.replace(src, "<emulator-translation>")
        if "In file included from" in line or line.startswith("compilation terminated"):
            continue
        lines.append(line)
    starts = [k for k, ln in enumerate(lines) if ": error:" in ln]
    errs = [_at_user_line(lines[k], lines[:k], lines[k + 1 : end])
            for k, end in zip(starts, [*starts[1:], len(lines)], strict=True)]
    head = "Metal kernel compilation failed (emulator):\n"
    text = "\n".join(errs[:20]) + "\n\n" + "\n".join(_without_emulator_notes(lines)[:80])
    return head + text
