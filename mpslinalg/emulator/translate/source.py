"""Pass 0, the source: checks of the raw text and the C preprocessor.

The raw Metal source is checked before anything reads it (ASCII only; no directive that could read
a file outside the source's own tree; Metal's own headers are blanked out, the shim provides
them), then run through the C preprocessor (macros such as the project's instantiation macro must
be expanded before kernels can be found), in an empty directory and without the environment's
include paths. Line markers are kept, and no later pass adds or removes newlines, so every
diagnostic of the C++ compiler points at the original ``metal/<file>:<line>``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

from ..build import run_compiler
from .errors import TranslateError

__all__ = ["check_raw", "preprocess_command", "preprocess", "check_entered_files"]

_METAL_HEADER_RE = re.compile(r"^metal_[a-z_]+$")
# directives that read a file; `#line` only names one, but the C++ compiler quotes the named
# file's lines in its diagnostics, so its name is held to the same rule
# `# 12 "file"` is GCC's spelling of `#line 12 "file"`
_FILE_DIRECTIVE_RE = re.compile(
    r"^\s*#\s*(?:(include_next|include|import|embed|line)\b|(?=\d))\s*(.*)$", re.S
)
_LINE_DIRECTIVE_RE = re.compile(r'^\s*#\s*line\s+(\d+)(?:\s+"([^"]*)")?')
_INLINE_COMMENT_RE = re.compile(r"/\*.*?\*/")


def _raw_lines(source: str):
    """(file, line, text) for every logical raw source line, following #line directives.

    Backslash-continued lines are joined (the preprocessor joins them before it sees a directive);
    the line number is that of the first physical line.
    """
    file, line = "program_source", 1
    phys = source.split("\n")
    k = 0
    while k < len(phys):
        text, span = phys[k], 1
        while text.endswith("\\") and k + span < len(phys):
            text = text[:-1] + phys[k + span]
            span += 1
        k += span
        m = _LINE_DIRECTIVE_RE.match(text)
        if m:
            yield file, line, text
            line = int(m.group(1))
            if m.group(2):
                file = m.group(2)
            continue
        yield file, line, text
        line += span


def _escapes_tree(path: str) -> bool:
    """An absolute path, or a relative one that climbs out of its directory with '..'."""
    if path.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:", path):
        return True
    depth = 0
    for part in re.split(r"[/\\]+", path):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _check_file_directive(file, line, text):
    """Reject directives that could read files outside the source's own tree.

    Returns True for Metal's own headers, which the shim provides. Nothing is ever read from a
    rejected path, and the messages quote only the path, never the file.
    """
    m = _FILE_DIRECTIVE_RE.match(_INLINE_COMMENT_RE.sub(" ", text))
    if not m:
        return False
    what, operand = m.group(1) or "line", m.group(2).strip()
    where = f"{file}:{line}: error:"
    if what == "line":
        lm = re.match(r'^\d+\s+"((?:\\.|[^"\\])*)"', operand)
        if lm and _escapes_tree(lm.group(1)):
            raise TranslateError(
                f"{where} #line names '{lm.group(1)}', outside the source's own tree (an absolute "
                "path or one escaping with '..'); the emulator does not accept it"
            )
        return False
    if what != "include":
        raise TranslateError(
            f"{where} #{what} is not supported: Metal sources may only #include Metal's headers"
        )
    if not operand.startswith(("<", '"')):
        raise TranslateError(
            f"{where} computed #include ('{operand}') is not supported by the emulator: name the "
            "header literally"
        )
    close = ">" if operand[0] == "<" else '"'
    end = operand.find(close, 1)
    path = operand[1:end] if end > 0 else operand[1:]
    if operand[0] == "<" and _METAL_HEADER_RE.match(path.strip()):
        return True
    if _escapes_tree(path.strip()):
        raise TranslateError(
            f"{where} #include of '{path.strip()}' is not allowed: an absolute path or one "
            "escaping with '..' reaches outside the source's own tree (the file was not read); a "
            "Metal source given to compile_shader may only include Metal's own headers"
        )
    return False


def check_raw(source: str) -> str:
    """Reject non-ASCII text and file directives that reach outside the source's own tree; blank
    out Metal's own includes (the shim provides them).

    Other includes are left to the preprocessor, so that includes in inactive `#if` branches (the
    `#ifndef __METAL__ #include <array>` idiom of torch's c10/metal headers) are harmless; it runs
    in an empty directory, so an include that is not a Metal header finds nothing.
    """
    out = []
    for file, line, text in _raw_lines(source):
        bad = next((c for c in text if ord(c) > 127), None)
        if bad is not None:
            raise TranslateError(
                f"{file}:{line}: error: non-ASCII character {bad!r} (U+{ord(bad):04X}); "
                "Metal sources must be "
                "ASCII (torch hands them to Metal as an ASCII string)"
            )
        if _check_file_directive(file, line, text):
            out.append("")
            continue
        out.append(text)
    return "\n".join(out)


def preprocess_command(cxx: str, metal_version: int) -> list:
    return [
        cxx,
        "-E",
        "-x",
        "c++",
        "-std=c++17",
        "-undef",
        "-nostdinc",
        # g++ >= 13 keeps its C++ library directories under -nostdinc alone
        "-nostdinc++",
        f"-D__METAL_VERSION__={int(metal_version)}",
        "-D__METAL__=1",
        "-D__METAL_MACOS__=1",
        "-D__HAVE_BFLOAT__=1",
        "-D__HAVE_SIMDGROUP_MATRIX__=1",
        "-",
    ]


# a source that makes the preprocessor read a device or a huge file must not hang compile_shader
_PREPROCESS_TIMEOUT_S = 60


# Include directories that reach the preprocessor through the environment, past -nostdinc (CUDA
# images set CPATH): a source must find no header but Metal's, whatever the shell exports.
_INCLUDE_PATH_VARS = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH",
                      "OBJCPLUS_INCLUDE_PATH")


def _included_name(source: str, line: int) -> str | None:
    """The header named by the ``#include`` on ``line`` (1-based) of ``source``, if any."""
    lines = source.splitlines()
    if not 0 < line <= len(lines):
        return None
    m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', lines[line - 1])
    return m.group(1) if m else None


def preprocess(source: str, cxx: str, metal_version: int) -> str:
    text = '#line 1 "program_source"\n' + source
    # an empty working directory: a quoted include has no tree to search but the source's own
    # (which, for a source string, is empty)
    with tempfile.TemporaryDirectory(prefix="emu-pp-") as empty:
        try:
            proc = run_compiler(
                preprocess_command(cxx, metal_version),
                input=text.encode(),
                cwd=empty,
                env={k: v for k, v in os.environ.items() if k not in _INCLUDE_PATH_VARS},
                timeout=_PREPROCESS_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise TranslateError(
                f"program_source: error: preprocessing did not finish within "
                f"{_PREPROCESS_TIMEOUT_S} s"
            ) from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").replace("<stdin>", "program_source").strip()
        m = re.search(
            r"^(.*?:\d+):\d+: (?:fatal )?error: (?:no include path in which to search for (\S+)"
            r"|(.*?): No such file or directory|'(.*?)' file not found)",  # g++, g++, clang
            err,
            re.M,
        )
        if m:
            where, header = m.group(1), m.group(2) or m.group(3) or m.group(4)
            # a header the compiler's own configuration still finds (a distribution's g++ may)
            # fails inside itself: name the source's include line instead
            chain = re.findall(r"(?:In file included from|^\s+from) ([^/\s][^:\s]*):(\d+)", err,
                               re.M)
            if chain and where.startswith("/"):
                file, line = chain[-1]
                where = f"{file}:{line}"
                header = _included_name(source, int(line)) or header
            raise TranslateError(
                f"{where}: error: #include of '{header}' is not available: "
                "only Metal's own "
                "headers (<metal_stdlib>, <metal_simdgroup>, ...) may remain after the loader has "
                "inlined the project's headers"
            )
        raise TranslateError(err)
    return proc.stdout.decode()


_ENTER_MARKER_RE = re.compile(r'#\s*\d+\s+"((?:\\.|[^"\\])*)"((?:\s+\d+)*)\s*$')


# The preprocessor's own predefinitions, which clang's line markers enter like files.
_PSEUDO_FILES = frozenset({"<built-in>", "<command line>", "<command-line>"})


def check_entered_files(toks) -> None:
    """No file may have been read by the preprocessor: Metal's headers were blanked out and others
    are not available (a safety net behind `check_raw`, for includes it cannot see, e.g. behind a
    comment spanning lines). A line marker with flag 1 means a file was entered."""
    for tok in toks:
        if tok.k != "pp":
            continue
        m = _ENTER_MARKER_RE.match(tok.t.strip())
        if m and "1" in m.group(2).split() and m.group(1) not in _PSEUDO_FILES:
            raise TranslateError(
                f"{tok.file}:{tok.line}: error: #include of '{m.group(1)}' is not available: only "
                "Metal's own headers may be included"
            )

