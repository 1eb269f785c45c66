"""MSL -> C++ translation: a token-level rewriter over preprocessed Metal source.

The source is first run through the C preprocessor (macros such as the project's instantiation
macro must be
expanded before kernels can be found); line markers are kept and the rewriter never adds or
removes newlines,
so every diagnostic of the C++ compiler points at the original ``metal/<file>:<line>``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile

__all__ = [
    "TranslateError",
    "Translation",
    "KernelInfo",
    "ParamInfo",
    "translate",
    "assemble",
    "preprocess_command",
]


class TranslateError(SyntaxError):
    """A Metal source the emulator cannot (or must not) accept.

    The message is ``file:line: error: ...``.
    """


@dataclasses.dataclass
class ParamInfo:
    name: str
    attr: str  # "buffer" or the builtin attribute name
    buffer: int = -1


@dataclasses.dataclass
class KernelInfo:
    host_name: str
    function: str
    params: list
    sync: bool


@dataclasses.dataclass
class Translation:
    body: str  # the rewritten Metal source
    snippets: list  # per kernel launcher C++
    table: str  # the exported kernel table
    kernels: list
    # names called but not defined in the source -> "file:line" of the first call
    calls: dict = dataclasses.field(default_factory=dict)

    @property
    def cpp(self) -> str:
        return assemble(self, 1)[0]


# ------------------------------------------------------------------------------------------------
# tokenizer

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>(?:[ \t\r\f\v]|\\\n)+)
   |(?P<nl>\n)
   |(?P<comment>//[^\n]*|/\*.*?\*/)
   |(?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
   |(?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
   |(?P<num>\.?[0-9](?:[eEpP][+-]|[0-9a-zA-Z_.'])*)
   |(?P<id>[A-Za-z_$][A-Za-z_0-9$]*)
   |(?P<punct>::|->|\.\.\.|<<=|>>=|<=|>=|==|!=|&&|\|\||\+\+|--|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<|\#\#
        |[{}()\[\];,.<>?:~!+\-*/%&|^=\#@`\\])
    """,
    re.S | re.X,
)
_MARKER_RE = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:\\.|[^"\\])*)"')


class Tok:
    __slots__ = ("k", "t", "ws", "file", "line")

    def __init__(self, k, t, ws, file, line):
        self.k, self.t, self.ws, self.file, self.line = k, t, ws, file, line

    def __repr__(self):
        return f"Tok({self.k},{self.t!r},{self.file}:{self.line})"


def tokenize(text: str) -> list:
    """Tokens of preprocessed text.

    Whole preprocessor lines (markers, pragmas) become one 'pp' token.
    """
    toks = []
    file, line = "program_source", 1
    ws = ""
    pos, n = 0, len(text)
    at_line_start = True
    while pos < n:
        if at_line_start:
            m = re.compile(r"[ \t]*#").match(text, pos)
            if m:
                end = text.find("\n", pos)
                end = n if end < 0 else end
                directive = text[pos:end]
                mm = _MARKER_RE.match(directive.strip())
                toks.append(Tok("pp", directive, ws, file, line))
                ws = ""
                if mm:
                    file, line = mm.group(2), int(mm.group(1)) - 1
                pos = end
                at_line_start = False
                continue
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise TranslateError(f"{file}:{line}: error: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        s = m.group()
        pos = m.end()
        if kind == "nl":
            ws += s
            line += 1
            at_line_start = True
            continue
        if kind in ("ws", "comment"):
            ws += (
                s if "\n" not in s else s
            )  # comments keep their newlines so line numbers stay right
            line += s.count("\n")
            continue
        at_line_start = False
        toks.append(Tok(kind, s, ws, file, line))
        ws = ""
    toks.append(Tok("eof", "", ws, file, line))
    return toks


# ------------------------------------------------------------------------------------------------
# raw-source checks and preprocessing

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
            proc = subprocess.run(
                preprocess_command(cxx, metal_version),
                input=text.encode(),
                capture_output=True,
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


# ------------------------------------------------------------------------------------------------
# structure scan

_KEYWORDS = frozenset(
    """
    alignas alignof auto bool break case char const constexpr const_cast continue decltype default
    delete do
    else enum explicit extern false float for friend if inline int long mutable namespace noexcept
    nullptr
    operator private protected public return short signed sizeof static static_assert static_cast
    struct switch
    template this true typedef typename union unsigned using void volatile while class
    reinterpret_cast
    device constant threadgroup thread kernel half uint ushort uchar""".split()
)
_ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")
SYNC_NAMES = frozenset(
    """
    threadgroup_barrier simdgroup_barrier simd_sum simd_product simd_max simd_min simd_and simd_or
    simd_xor
    simd_prefix_inclusive_sum simd_prefix_exclusive_sum simd_prefix_inclusive_product
    simd_prefix_exclusive_product
    simd_shuffle simd_shuffle_up simd_shuffle_down simd_shuffle_xor simd_shuffle_rotate_up
    simd_shuffle_rotate_down
    simd_shuffle_and_fill_up simd_shuffle_and_fill_down
    simd_broadcast simd_broadcast_first simd_ballot simd_vote simd_all simd_any simd_is_first
    simd_active_threads_mask
    simdgroup_load simdgroup_store simdgroup_multiply simdgroup_multiply_accumulate
    thread_elements quad_sum quad_product quad_max quad_min quad_and quad_or
    quad_xor quad_shuffle
    quad_shuffle_up quad_shuffle_down quad_shuffle_xor quad_shuffle_rotate_up
    quad_shuffle_rotate_down
    quad_broadcast quad_all quad_any""".split()
)
BUILTINS = {
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
_SWIZZLE_RE = re.compile(r"^(?:[xyzw]{2,4}|[rgba]{2,4})$")
_HALF_LIT_RE = re.compile(r"^((?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)[hH]$")
# An unsuffixed floating literal (MSL: single precision; C++ and CUDA: double).
FLOAT_LITERAL_RE = re.compile(r"^(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))(?:[eE][+-]?[0-9]+)?$")


def single_precision(tok) -> str:
    """A token's text, an unsuffixed floating literal made a ``float`` literal as MSL reads it
    (GCC's -fsingle-precision-constant does that for one compiler; this for any)."""
    if tok.k == "num" and FLOAT_LITERAL_RE.match(tok.t) and not tok.t.lower().startswith("0x"):
        return tok.t + "f"
    return tok.t


def single_precision_literals(text: str) -> str:
    """C++ ``text`` with every unsuffixed floating literal a ``float`` literal."""
    return "".join(tok.ws + single_precision(tok) for tok in tokenize(text))


_LONG_DOUBLE_LIT_RE = re.compile(r"^(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+[eE])[0-9eE+\-]*[lL]$")


_RESTRICTIONS = "Metal Shading Language Specification, section 1.5.4 'Restrictions'"
_CONSTANT_SPACE = "Metal Shading Language Specification, section 4.2 'constant Address Space'"
_STATIC_RULE = (
    f"variables with static storage are shared by every thread, so Metal allows them only in "
    f"the constant address space ({_CONSTANT_SPACE})"
)
_NO_LINKING = (
    "Metal links no host or library code into a kernel: it can only call functions defined in "
    "its source and Metal's standard library"
)
_NO_FUNCTION_POINTERS = (
    "Metal does not support function pointers here (only [[visible]] functions through visible "
    f"function tables, which torch.mps.compile_shader cannot link; {_RESTRICTIONS})"
)
_LOAD_TIME_ATTRS = frozenset(("constructor", "destructor", "init_priority"))
_NOT_VARIABLES = frozenset(
    "using typedef template static_assert namespace friend public private protected".split()
)
_TYPE_WORDS = frozenset(
    "bool char short int long float half uint ushort uchar void unsigned signed auto const".split()
)
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


@dataclasses.dataclass
class _Func:
    name: str
    start: int  # first token of the statement
    open: int  # index of '{'
    close: int  # index of matching '}'
    free: bool  # defined at namespace scope
    ns: tuple
    paren: int = -1  # '(' of the parameter list (the name is the token before it)


@dataclasses.dataclass
class _KernelDef:
    name: str
    ns: tuple
    template: str | None  # text between template < ... > or None
    params: list
    func: _Func
    max_threads: str | None
    host_name: str | None
    index: int = 0
    tg_types: list = dataclasses.field(default_factory=list)
    local_decls: list = dataclasses.field(default_factory=list)


class _Translator:
    def __init__(self, toks, metal_version):
        self.toks = toks
        self.mv = metal_version
        self.out = [t.t for t in toks]
        self.after = {}  # token index -> text appended after the token
        self.before = {}  # token index -> text inserted before the token
        n = len(toks)
        self.match = [-1] * n
        self.scope = [None] * n  # kind of innermost brace scope per token
        self.funcs = []
        self.kdefs = {}
        self.kdef_list = []
        self.insts = []
        # '{' of a class body -> data members named like swizzles (xy, rgb, ...)
        self.swz_members = {}
        self.attr_spans = []  # (start, end) inclusive token indices of [[...]]
        self.dead = bytearray(n)  # tokens removed from the output (explicit instantiations)
        self.tg_site = 0
        self.calls = {}  # name -> token of its first call, for names the source does not define
        self.decls = []  # (scope kind, first token, ';') of statements at namespace and class scope

    # -- helpers --
    def err(self, i, msg):
        t = self.toks[min(i, len(self.toks) - 1)]
        raise TranslateError(f"{t.file}:{t.line}: error: {msg}")

    def t(self, i):
        return self.toks[i].t if 0 <= i < len(self.toks) else ""

    def k(self, i):
        return self.toks[i].k if 0 <= i < len(self.toks) else "eof"

    def blank(self, a, b):
        for j in range(a, b + 1):
            self.out[j] = ""

    def kill(self, a, b):
        self.blank(a, b)
        for j in range(a, b + 1):
            self.dead[j] = 1

    def text(self, a, b):
        return " ".join(self.toks[j].t for j in range(a, b + 1) if self.toks[j].k != "pp")

    def angle_end(self, i):
        """Index of the '>' closing the '<' at i (template argument lists only)."""
        depth = 0
        j = i
        while j < len(self.toks):
            s = self.t(j)
            if s == "<":
                depth += 1
            elif s == ">":
                depth -= 1
                if depth == 0:
                    return j
            elif s in ("(", "[", "{"):
                j = self.match[j]
            elif s in (";", "{", "}", ")"):
                return -1
            j += 1
        return -1

    # -- passes --
    def pair_brackets(self):
        stack = []
        pairs = {")": "(", "]": "[", "}": "{"}
        for i, tok in enumerate(self.toks):
            if tok.k != "punct":
                continue
            if tok.t in "([{":
                stack.append(i)
            elif tok.t in ")]}":
                if not stack or self.toks[stack[-1]].t != pairs[tok.t]:
                    self.err(i, f"unbalanced '{tok.t}'")
                j = stack.pop()
                self.match[i], self.match[j] = j, i
        if stack:
            self.err(stack[-1], f"unclosed '{self.toks[stack[-1]].t}'")

    def find_attributes(self):
        i = 0
        toks = self.toks
        while i < len(toks) - 1:
            if toks[i].t == "[" and toks[i + 1].t == "[" and toks[i].k == "punct":
                end = self.match[i]
                if end > 0 and self.t(end - 1) == "]" and self.match[i + 1] == end - 1:
                    self.attr_spans.append((i, end))
                    i = end + 1
                    continue
            i += 1
        self.in_attr = bytearray(len(toks))
        for a, b in self.attr_spans:
            for j in range(a, b + 1):
                self.in_attr[j] = 1
        self.attr_at = {a: b for a, b in self.attr_spans}

    def attr_items(self, a, b):
        """Attribute list [[x, y(z)]] -> [(name, arg_token_range)]."""
        items = []
        j = a + 2
        while j < b - 1:
            if self.k(j) == "id":
                name = self.t(j)
                if self.t(j + 1) == "(":
                    e = self.match[j + 1]
                    items.append((name, (j + 2, e - 1)))
                    j = e + 1
                else:
                    items.append((name, None))
                    j += 1
            else:
                j += 1
        return items

    def scan_structure(self):
        """Brace scopes, function bodies, kernels and explicit instantiations."""
        toks = self.toks
        stack = []  # (kind, ns-name or None)
        stmt = 0
        i = 0
        n = len(toks)
        while i < n:
            tok = toks[i]
            cur = stack[-1][0] if stack else "ns"
            self.scope[i] = cur
            if tok.k == "pp":
                if stmt == i:
                    stmt = i + 1
                i += 1
                continue
            if i in self.attr_at:
                i = self.attr_at[i] + 1
                continue
            s = tok.t
            if (
                cur == "class"
                and tok.k == "id"
                and _SWIZZLE_RE.match(s)
                and self.t(i + 1) in (";", ",", "=", "[", "{")
                and self.t(i - 1) not in (".", "->", "::")
            ):
                self.swz_members.setdefault(stack[-1][2], set()).add(s)
            if s == ";" and tok.k == "punct":
                if cur in ("ns", "class"):
                    self.decls.append((cur, stmt, i))
                    self.statement(stmt, i, stack)
                stmt = i + 1
            elif s == "{":
                kind = self.brace_kind(stmt, i, cur)
                if kind == "func":
                    self.function(stmt, i, stack)
                ns_name = None
                if kind == "ns":
                    ids = [
                        self.t(j)
                        for j in range(stmt, i)
                        if self.k(j) == "id" and self.t(j) != "namespace"
                    ]
                    ns_name = ids[-1] if ids and self.t(stmt) == "namespace" else ""
                stack.append((kind, ns_name, i))
                if kind in ("ns", "class", "func", "block"):
                    stmt = i + 1
            elif s == "}":
                kind = stack.pop()[0] if stack else "ns"
                if kind in ("ns", "class", "func", "block"):
                    stmt = i + 1
            elif (
                s == ":" and cur == "class" and self.t(i - 1) in ("public", "private", "protected")
            ):
                stmt = i + 1
            i += 1

    def brace_kind(self, stmt, i, cur):
        words = [self.t(j) for j in range(stmt, i) if not self.in_attr[j] and self.k(j) != "pp"]
        if cur == "func" or cur == "block":
            return "block"
        if cur == "init":
            return "init"
        if words[:1] == ["namespace"] or (words[:1] == ["extern"] and len(words) == 2):
            return "ns"
        tail = [
            w
            for w in words
            if w not in ("const", "noexcept", "override", "final", "mutable") + _ADDRESS_SPACES
        ]
        if tail and tail[-1] == ")":
            return "func"
        if any(w in ("struct", "class", "union", "enum") for w in words):
            return "class"
        return "init"

    def ns_path(self, stack):
        return tuple(name for kind, name, _ in stack if kind == "ns" and name)

    def function(self, stmt, brace, stack):
        name = None
        j = stmt
        while j < brace:
            if self.t(j) == "(" and not self.in_attr[j]:
                prev = self.t(j - 1)
                if self.k(j - 1) == "id" and prev not in _KEYWORDS | {"__attribute__"}:
                    name = prev
                    break
                if self.t(j - 2) == "operator" or prev == "operator":
                    name = "operator"
                    break
                j = self.match[j]
            j += 1
        cur = stack[-1][0] if stack else "ns"
        f = _Func(name or "?", stmt, brace, self.match[brace], cur == "ns", self.ns_path(stack))
        if name and name != "operator":
            f.paren = j
        self.funcs.append(f)
        kernel_attr = self.kernel_markers(stmt, brace)
        if kernel_attr is not None:
            self.kernel_def(f, stmt, brace, j, kernel_attr, stack)

    def kernel_markers(self, a, b):
        """None if the statement [a, b) is not a kernel; else its attribute items."""
        is_kernel = False
        items = []
        j = a
        while j < b:
            if j in self.attr_at:
                e = self.attr_at[j]
                its = self.attr_items(j, e)
                items.extend(its)
                if any(nm == "kernel" for nm, _ in its):
                    is_kernel = True
                j = e + 1
                continue
            if self.t(j) == "kernel" and self.k(j) == "id":
                is_kernel = True
            j += 1
        return items if is_kernel else None

    def host_name_of(self, items):
        for nm, rng in items:
            if nm == "host_name" and rng:
                parts = []
                for j in range(rng[0], rng[1] + 1):
                    if self.k(j) != "str":
                        self.err(j, "host_name expects string literals")
                    parts.append(_unescape(self.t(j)))
                return "".join(parts)
        return None

    def kernel_def(self, f, stmt, brace, paren, items, stack):
        template = None
        if self.t(stmt) == "template" and self.t(stmt + 1) == "<":
            e = self.angle_end(stmt + 1)
            template = self.text(stmt + 2, e - 1) if e > 0 else None
        max_threads = None
        for nm, rng in items:
            if nm == "max_total_threads_per_threadgroup" and rng:
                max_threads = self.text(rng[0], rng[1])
        params = self.parse_params(paren, self.match[paren], defining=True)
        kd = _KernelDef(f.name, f.ns, template, params, f, max_threads, self.host_name_of(items))
        kd.index = len(self.kdef_list)
        self.kdef_list.append(kd)
        self.kdefs.setdefault(f.name, kd)

    def parse_params(self, a, b, defining):
        params = []
        cur = []
        depth = 0
        for j in range(a + 1, b):
            s = self.t(j)
            if s == "<" and not self.in_attr[j]:
                depth += 1
            elif s == ">" and not self.in_attr[j]:
                depth -= 1
            elif s in ("(", "[", "{") and not self.in_attr[j]:
                depth += 1
            elif s in (")", "]", "}") and not self.in_attr[j]:
                depth -= 1
            if s == "," and depth == 0 and not self.in_attr[j]:
                params.append(cur)
                cur = []
            else:
                cur.append(j)
        if cur:
            params.append(cur)
        out = []
        nbuf = 0
        for p in params:
            attr = "buffer"
            buf = None
            name = None
            for j in p:
                if j in self.attr_at:
                    for nm, rng in self.attr_items(j, self.attr_at[j]):
                        if nm == "buffer" and rng:
                            try:
                                buf = int(self.text(rng[0], rng[1]).rstrip("uU"), 0)
                            except ValueError:
                                self.err(j, "[[buffer(n)]] needs an integer literal")
                        elif nm in BUILTINS:
                            attr = nm
                        elif nm in ("threadgroup", "stage_in", "texture", "sampler"):
                            self.err(
                                j,
                                f"kernel parameters with [[{nm}(...)]] cannot be bound through "
                                "torch.mps.compile_shader; declare threadgroup arrays in the "
                                "kernel body",
                            )
                        elif nm in ("function_constant",):
                            self.err(
                                j, "[[function_constant]] is not reachable through compile_shader"
                            )
            ids = [
                j
                for j in p
                if self.k(j) == "id" and not self.in_attr[j] and self.t(j) not in _KEYWORDS
            ]
            if ids:
                name = self.t(ids[-1])
            if self.t(p[0]) == "void" and len(p) == 1:
                continue
            if attr == "buffer":
                if buf is None:
                    buf = nbuf
                if not 0 <= buf <= 30:
                    self.err(p[0], f"buffer index {buf} out of range (Metal allows 0..30)")
                nbuf = max(nbuf, buf + 1)
            out.append(ParamInfo(name or f"arg{len(out)}", attr, buf if attr == "buffer" else -1))
        return out

    def statement(self, a, b, stack):
        """A ';'-terminated statement at namespace scope; records explicit kernel instantiations."""
        if self.t(a) != "template" or self.t(a + 1) == "<":
            return
        items = self.kernel_markers(a, b)
        host = None
        if items is not None or any(j in self.attr_at for j in range(a, b)):
            allitems = []
            for j in range(a, b):
                if j in self.attr_at:
                    allitems.extend(self.attr_items(j, self.attr_at[j]))
            host = self.host_name_of(allitems)
        if items is None and host is None:
            return
        # the declarator: last identifier followed by '<' outside attributes and decltype(...)
        name_i = None
        j = a + 1
        while j < b:
            if j in self.attr_at:
                j = self.attr_at[j] + 1
                continue
            if self.t(j) == "decltype" and self.t(j + 1) == "(":
                j = self.match[j + 1] + 1
                continue
            if self.k(j) == "id" and self.t(j + 1) == "<" and self.t(j) not in _KEYWORDS:
                name_i = j
            if self.t(j) == "(" and name_i is not None:
                break
            j += 1
        if name_i is None:
            self.err(a, "explicit kernel instantiation without template arguments is not supported")
        e = self.angle_end(name_i + 1)
        if e < 0:
            self.err(name_i, "cannot parse the template arguments of this instantiation")
        name = self.t(name_i)
        args = self.text(name_i + 2, e - 1)
        if host is None:
            self.err(a, f"explicit instantiation of kernel '{name}' without [[host_name(...)]]")
        self.insts.append((host, name, args, a, b))
        self.kill(a, b)

    # -- checks --
    def check_forbidden(self):
        toks = self.toks
        bad = {
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
        for i, tok in enumerate(toks):
            if self.in_attr[i]:
                continue
            if tok.k == "id":
                s = tok.t
                if s in bad:
                    self.err(i, bad[s])
                elif s == "delete" and self.t(i - 1) != "=":
                    self.err(i, "'delete' is not available in Metal")
                elif s == "std" and self.t(i + 1) == "::":
                    self.err(
                        i,
                        "the C++ standard library (std::) is not available in Metal; use metal:: "
                        "equivalents",
                    )
                elif s in ("struct", "class") and self.t(i - 1) != "enum":
                    j = i + 1
                    while self.k(j) == "id" or self.t(j) == "::":
                        j += 1
                    if self.t(j) == "<" and self.k(i + 1) == "id":
                        e = self.angle_end(j)
                        j = e + 1 if e > 0 else j
                    if self.t(j) == "final":
                        j += 1
                    if self.t(j) == ":" and self.scope[i] in ("ns", "class") and j > i + 1:
                        self.err(i, "derived classes (inheritance) are not available in Metal")
                elif s == "if" and self.t(i + 1) == "constexpr" and self.mv < 400:
                    self.err(
                        i,
                        f"'if constexpr' is C++17 and needs Metal 4.0 (__METAL_VERSION__ >= 400; "
                        f"compiling for {self.mv}); use overloads, enable_if or tag dispatch",
                    )
                elif s == "auto" and self.mv < 400:
                    j = i + 1
                    while self.t(j) in ("&", "&&", "const"):
                        j += 1
                    if self.t(j) == "[" and self.scope[i] in ("func", "block"):
                        self.err(
                            i,
                            "structured bindings are C++17 and need Metal 4.0 "
                            f"(compiling for {self.mv})",
                        )
            elif tok.k == "num":
                if _LONG_DOUBLE_LIT_RE.match(tok.t) and not tok.t.lower().startswith("0x"):
                    self.err(i, f"long double literal {tok.t} is not supported in Metal")
            elif tok.t == "..." and self.mv < 400:
                # `pack op ...` / `... op pack` (pack expansions have `...` after a name, `)` or
                # `>`, or before `)`)
                ops = {
                    "+",
                    "-",
                    "*",
                    "/",
                    "%",
                    "^",
                    "&",
                    "|",
                    "<<",
                    ">>",
                    "&&",
                    "||",
                    "==",
                    "!=",
                    "<",
                    ">",
                    "<=",
                    ">=",
                    "=",
                    "+=",
                    "-=",
                    "*=",
                    "/=",
                    ",",
                }
                decl_like = {",", "<", ">", "*", "&", "&&"}
                prev, nxt = self.t(i - 1), self.t(i + 1)
                if (
                    (prev in ops - decl_like and self.k(i - 1) == "punct")
                    or (prev == "(" and nxt in ops - {","})
                    or (nxt in ops - decl_like - {"="} and prev in ops)
                ):
                    self.err(
                        i,
                        f"fold expressions are C++17 and need Metal 4.0 (compiling for {self.mv})",
                    )

    # -- Metal's language rules that C++ compilers accept (see `check_metal_rules`) --
    def call_name(self, j):
        """The name called at token j by an unqualified call `name(...)`, else None."""
        tok = self.toks[j]
        if (
            tok.k != "id"
            or self.t(j + 1) != "("
            or self.in_attr[j]
            or tok.t in _KEYWORDS
            or self.t(j - 1) in (".", "->", "::")
        ):
            return None
        return tok.t

    def check_metal_rules(self):
        defined = {f.name for f in self.funcs}
        self.check_tokens(defined)
        protos = self.check_declarations()
        self.check_recursion()
        # first call of every name, for the messages of the host-symbol check after linking
        for j in range(len(self.toks)):
            nm = self.call_name(j)
            if nm is None or nm in defined:
                continue
            self.calls.setdefault(nm, j)
            if nm.startswith("__") and nm != "__attribute__":
                self.err(
                    j,
                    f"'{nm}' is a compiler builtin of the emulator's host compiler, not "
                    "part of Metal",
                )
            if nm in HOST_RUNTIME_SYMBOLS:
                self.err(j, host_call_message(nm))
        for name, decl in protos.items():
            if name in defined:
                continue
            a, b = decl
            use = next(
                (
                    j
                    for j in range(len(self.toks))
                    if not a <= j <= b
                    and self.toks[j].k == "id"
                    and self.toks[j].t == name
                    and self.t(j - 1) not in (".", "->", "::")
                ),
                None,
            )
            if use is not None:
                self.err(
                    use, f"'{name}' is declared but not defined in this source; " + _NO_LINKING
                )

    def check_tokens(self, defined):
        """Lambdas, function pointers, linkage to host code, load-time code and inline assembly."""
        toks = self.toks
        for i, tok in enumerate(toks):
            s = tok.t
            if tok.k == "id" and not self.in_attr[i]:
                if s == "extern" and self.k(i + 1) == "str":
                    self.err(
                        i,
                        f"extern {self.t(i + 1)} (linkage to host code) is not "
                        f"available in Metal: {_NO_LINKING}",
                    )
                elif s in ("asm", "__asm__", "__asm"):
                    self.err(i, "inline assembly is not available in Metal")
                elif s == "__attribute__" and self.t(i + 1) == "(":
                    for j in range(i + 2, self.match[i + 1]):
                        if self.t(j) in _LOAD_TIME_ATTRS:
                            self.err(j, _load_time_message(self.t(j)))
                elif (
                    s in defined
                    and self.t(i - 1) == "&"
                    and self.k(i - 2) not in ("id", "num")
                    and self.t(i - 2) not in (")", "]")
                    and self.t(i + 1) not in ("(", "::", "<")
                ):
                    self.err(i, f"taking the address of function '{s}': {_NO_FUNCTION_POINTERS}")
            elif tok.k == "punct" and s == "[" and not self.in_attr[i]:
                prev = self.t(i - 1)
                after = self.t(self.match[i] + 1)
                unary_context = (self.k(i - 1) == "punct" and prev not in (")", "]")) or prev in (
                    "return",
                    "co_return",
                )
                if unary_context and after in ("(", "{", "mutable", "->", "<", "constexpr"):
                    self.err(i, f"Metal does not support lambda expressions ({_RESTRICTIONS})")
            elif tok.k == "punct" and s == "(" and not self.in_attr[i]:
                self.check_function_pointer(i, defined)
        for a, b in self.attr_spans:
            for nm, _ in self.attr_items(a, b):
                if nm in _LOAD_TIME_ATTRS:
                    self.err(a, _load_time_message(nm))

    def check_function_pointer(self, i, defined):
        """`R (*name)(args)` and `R (&name)(args)`: the declarator of a pointer or reference to a
        function (or to a member function, `(S::*name)`), in a declaration, cast or type-id."""
        prev = self.t(i - 1)
        if not (
            (self.k(i - 1) == "id" and (prev not in _KEYWORDS or prev in _TYPE_WORDS))
            or prev in (">", "*", "&", "(", ",", "<")
        ):
            return
        j = i + 1
        while self.k(j) == "id" and self.t(j + 1) == "::":
            j += 2
        if self.t(j) not in ("*", "&", "^"):
            return
        j += 1
        while self.t(j) in ("const", "volatile") or (
            self.k(j) == "id" and self.t(j) not in _KEYWORDS
        ):
            j += 1
        if self.t(j) == "[":
            j = self.match[j] + 1
        if self.t(j) == ")" and self.t(j + 1) == "(" and self.t(i + 1) != "this":
            self.err(i, _NO_FUNCTION_POINTERS)

    def check_declarations(self):
        """Variables with static storage must be `constant`; returns the function prototypes at
        namespace scope, name -> (first token, ';')."""
        protos = {}
        for scope, a, b in self.decls:
            idx = [j for j in range(a, b) if not self.in_attr[j] and self.k(j) != "pp"]
            words = [self.t(j) for j in idx]
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
                sj = self.t(j)
                if sj == "=" and eq is None:
                    eq = j
                elif sj == "(" and not self.in_attr[j]:
                    if paren is None:
                        paren = j
                    j = self.match[j]
                elif sj in ("[", "{"):
                    j = self.match[j]
                j += 1
            is_function = (
                paren is not None and (eq is None or paren < eq) and ("constant" not in words)
            )
            if is_function:
                if (
                    scope == "ns"
                    and self.k(paren - 1) == "id"
                    and self.t(paren - 1) not in _KEYWORDS
                ):
                    protos.setdefault(self.t(paren - 1), (a, b))
                continue
            if "constant" in words or (scope == "class" and "static" not in words):
                continue  # a constant, or an ordinary data member
            end = eq if eq is not None else b
            name = next(
                (
                    j
                    for j in range(end - 1, a - 1, -1)
                    if self.k(j) == "id" and self.t(j) not in _KEYWORDS and not self.in_attr[j]
                ),
                a,
            )
            if scope == "class":
                self.err(
                    name,
                    f"static data member '{self.t(name)}' must reside in constant "
                    f"address space: {_STATIC_RULE}",
                )
            self.err(
                name,
                f"program scope variable '{self.t(name)}' must reside in constant "
                f"address space: Metal allows only `constant` variables at program scope "
                f"({_CONSTANT_SPACE}); a mutable global would be shared by every thread",
            )
        # static variables in function bodies
        for i, tok in enumerate(self.toks):
            if tok.t != "static" or tok.k != "id" or self.scope[i] not in ("func", "block"):
                continue
            j = i
            while j < len(self.toks) and self.t(j) != ";":
                j = self.match[j] + 1 if self.t(j) in ("(", "[", "{") else j + 1
            if not any(self.t(x) == "constant" for x in range(i, j)):
                self.err(
                    i,
                    f"static local variable must reside in constant address space: {_STATIC_RULE}",
                )
        return protos

    def check_recursion(self):
        """No cycle in the call graph (direct or mutual recursion). The graph's nodes are the
        non-template free functions with a single definition: templates are left alone (Apple's
        compiler accepts e.g. c10's `if (x < 0) return -f(-x);`, which it can inline away) and
        calls of overloaded names cannot be resolved without types."""
        counts = {}
        for f in self.funcs:
            counts[f.name] = counts.get(f.name, 0) + 1
        nodes = {
            f.name: f
            for f in self.funcs
            if f.free
            and counts[f.name] == 1
            and f.name not in ("?", "operator")
            and self.t(f.start) != "template"
        }
        calls = {}
        for name, f in nodes.items():
            first = {}
            for j in range(f.open + 1, f.close):
                nm = self.call_name(j)
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
                    self.err(
                        j,
                        f"recursion ({how}): Metal does not support recursive function "
                        f"calls ({_RESTRICTIONS})",
                    )
                if callee not in state:
                    state[callee] = 1
                    path.append(callee)
                    stack.append(iter(calls[callee].items()))

    # -- sync analysis --
    def sync_kernels(self):
        by_name = {}
        for f in self.funcs:
            by_name.setdefault(f.name, []).append(f)
        body_ids = {}
        for f in self.funcs:
            ids = set()
            for j in range(f.open + 1, f.close):
                if self.toks[j].k == "id":
                    ids.add(self.toks[j].t)
            body_ids[id(f)] = ids
        memo = {}

        def reaches_sync(name):
            if name in memo:
                return memo[name]
            memo[name] = False
            seen, todo = {name}, [name]
            while todo:
                nm = todo.pop()
                for f in by_name.get(nm, ()):
                    ids = body_ids[id(f)]
                    if ids & SYNC_NAMES:
                        memo[name] = True
                        return True
                    for x in ids:
                        if x in by_name and x not in seen:
                            seen.add(x)
                            todo.append(x)
            return False

        return reaches_sync

    # -- rewriting --
    def rewrite(self):
        toks = self.toks
        n = len(toks)
        for a, b in self.attr_spans:
            self.blank(a, b)
        kernel_of_tok = {}
        for kd in self.kdef_list:
            f = kd.func
            kernel_of_tok[f.open] = kd
        active_k = []  # kernel defs whose body we are in: (close, kd)
        i = 0
        while i < n:
            tok = toks[i]
            if tok.k == "pp" or self.in_attr[i] or self.dead[i]:
                i += 1
                continue
            if i in kernel_of_tok:
                active_k.append((kernel_of_tok[i].func.close, kernel_of_tok[i]))
            while active_k and i > active_k[-1][0]:
                active_k.pop()
            s = tok.t
            if tok.k == "id":
                if s == "kernel" and not self.in_attr[i]:
                    self.out[i] = ""
                elif s in _ADDRESS_SPACES:
                    i = self.address_space(i, active_k[-1][1] if active_k else None)
                    continue
                elif (
                    s in ("reinterpret_cast", "static_cast", "const_cast") and self.t(i + 1) == "<"
                ):
                    e = self.angle_end(i + 1)
                    if s == "reinterpret_cast" or (
                        e > 0 and any(self.t(j) in ("device", "constant") for j in range(i + 2, e))
                    ):
                        self.out[i] = "::emu::reinterpret_cast_"
                elif s == "volatile":
                    self.out[i] = ""
            elif tok.k == "num":
                m = _HALF_LIT_RE.match(s)
                if m and not s.lower().startswith("0x"):
                    self.out[i] = (
                        f"((half)({m.group(1)}f))"
                        if "." in m.group(1) or "e" in m.group(1).lower()
                        else f"((half)({m.group(1)}.0f))"
                    )
            elif s in (".", "->") and tok.k == "punct":
                nm = self.t(i + 1)
                if self.k(i + 1) == "id" and _SWIZZLE_RE.match(nm) and self.t(i + 2) != "(":
                    idx = _swizzle_indices(nm)
                    write = self.t(i + 2) in ("=", "+=", "-=", "*=", "/=")
                    self.out[i + 1] = f"template swz{'w' if write else ''}<{idx}>()"
                    i += 2
                    continue
            i += 1

    def address_space_overloads(self):
        """Overloads that differ only in `thread` vs `threadgroup` pointers/references collide
        once the
        address spaces are erased; one of them is renamed and the other dispatches to it at run
        time on
        whether the pointer lies in threadgroup memory."""
        groups = {}
        for f in self.funcs:
            if not f.free or f.paren < 0 or self.dead[f.start]:
                continue
            params = self.split_params(f.paren)
            erased = []
            spaces = []
            for p in params:
                words = [self.t(j) for j in p if not self.in_attr[j]]
                names = [j for j in p if self.k(j) == "id" and self.t(j) not in _KEYWORDS]
                name = self.t(names[-1]) if names else None
                is_ref = "&" in words and "*" not in words
                spaces.append(("threadgroup" in words, ("&" if is_ref else "") + (name or "")))
                erased.append(
                    " ".join(w for w in words if w not in ("thread", "threadgroup") and w != name)
                )
            head = " ".join(self.t(j) for j in range(f.start, f.paren - 1))
            key = (f.ns, f.name, head, tuple(erased))
            groups.setdefault(key, []).append((f, spaces))
        for members in groups.values():
            if len(members) != 2:
                continue
            (f1, s1), (f2, s2) = sorted(members, key=lambda m: m[0].start)
            diff = [k for k, (a, b) in enumerate(zip(s1, s2, strict=True)) if a[0] != b[0]]
            if not diff or any(n in ("", "&") for _, n in s2):
                continue
            k = diff[0]
            # the first definition is renamed; the second keeps the name and forwards to the first
            first_is_tg = s1[k][0]
            suffix = "__emu_tg" if first_is_tg else "__emu_thread"
            self.out[f1.paren - 1] = f1.name + suffix
            targs = ""
            if self.t(f2.start) == "template" and self.t(f2.start + 1) == "<":
                e = self.angle_end(f2.start + 1)
                targs = "<" + ", ".join(self.template_param_names(f2.start + 2, e)) + ">"
            args = ", ".join(
                n.lstrip("&") + ("..." if self.is_pack(f2, i) else "")
                for i, (_, n) in enumerate(s2)
            )
            test = "" if first_is_tg else "!"
            call = f"{f1.name}{suffix}{targs}({args})"
            self.after[f2.open] = (
                f" if ({test}::emu::in_threadgroup({s2[k][1]})) return {call}; "
                + self.after.get(f2.open, "")
            )

    def split_params(self, paren):
        params, cur, depth = [], [], 0
        for j in range(paren + 1, self.match[paren]):
            s = self.t(j)
            if s in ("<", "(", "[", "{") and not self.in_attr[j]:
                depth += 1
            elif s in (">", ")", "]", "}") and not self.in_attr[j]:
                depth -= 1
            if s == "," and depth == 0:
                params.append(cur)
                cur = []
            else:
                cur.append(j)
        if cur and not (len(cur) == 1 and self.t(cur[0]) == "void"):
            params.append(cur)
        return params

    def template_param_names(self, a, b):
        names, cur = [], []
        depth = 0
        for j in range(a, b + 1):
            s = self.t(j)
            if s in ("<", "(") and j < b:
                depth += 1
            elif s in (">", ")") and j < b:
                depth -= 1
            if (s == "," and depth == 0) or j == b:
                eq = next((i for i, x in enumerate(cur) if self.t(x) == "="), len(cur))
                ids = [x for x in cur[:eq] if self.k(x) == "id" and self.t(x) not in _KEYWORDS]
                pack = any(self.t(x) == "..." for x in cur[:eq])
                if ids:
                    names.append(self.t(ids[-1]) + ("..." if pack else ""))
                cur = []
            else:
                cur.append(j)
        return names

    def is_pack(self, f, i):
        p = self.split_params(f.paren)[i]
        return any(self.t(j) == "..." for j in p)

    def frame_calls(self, reaches_sync):
        """Wrap calls of user functions that can reach a SIMD-group function or barrier in a frame
        guard, so the
        scheduler knows each lane's call path: `f(x)` -> `(::emu::Frame(::emu::here()), f(x))`.
        Lanes waiting at
        different collectives are ordered by their call paths (program order), which gives SIMT
        reconvergence
        also when a helper is defined after its caller."""
        names = {
            f.name for f in self.funcs if f.name not in ("?", "operator") and reaches_sync(f.name)
        }
        if not names:
            return
        bodies = sorted((f.open, f.close) for f in self.funcs)
        in_body = bytearray(len(self.toks))
        for a, b in bodies:
            for j in range(a + 1, b):
                in_body[j] = 1
        for i, tok in enumerate(self.toks):
            if tok.k != "id" or tok.t not in names or not in_body[i] or self.dead[i]:
                continue
            j = i + 1
            if self.t(j) == "<":
                e = self.angle_end(j)
                if e < 0:
                    continue
                j = e + 1
            if self.t(j) != "(":
                continue
            start = i
            while (
                self.t(start - 1) == "::"
                and self.k(start - 2) == "id"
                and self.t(start - 2) not in _KEYWORDS
            ):
                start -= 2
            if self.t(start - 1) == "::":  # ::metal::f(...)
                start -= 1
            prev = self.t(start - 1)
            if (
                prev in (".", "->")
                or self.k(start - 1) == "id"
                and prev not in ("return", "else", "do", "case")
            ):
                continue  # member call, or a declaration `T f(...)`
            if prev == "(" and self.t(start - 2) in ("decltype", "sizeof", "alignof", "noexcept"):
                continue
            close = self.match[j]
            self.before[start] = "(::emu::Frame(::emu::here()), " + self.before.get(start, "")
            self.after[close] = ")" + self.after.get(close, "")

    def swizzle_members(self):
        """A struct member named like a swizzle (`float xy;`) is reached through the same
        `swz<...>()` call that
        `.xy` is rewritten to, so the rewrite needs no type information."""
        for open_i, names in self.swz_members.items():
            fns = []
            for nm in sorted(names):
                seq = f"::emu::iseq<{_swizzle_indices(nm)}>"
                cond = (
                    f"::std::enable_if_t<::std::is_same<::emu::iseq<I...>, {seq}>::value, int> = 0"
                )
                for fn in ("swz", "swzw"):
                    fns.append(f"template <int... I, {cond}> auto& {fn}() {{ return {nm}; }}")
                    fns.append(
                        f"template <int... I, {cond}> const auto& {fn}() const {{ return {nm}; }}"
                    )
            close = self.match[open_i]
            self.before[close] = " " + " ".join(fns) + " " + self.before.get(close, "")

    def address_space(self, i, kd):
        """Rewrite the address-space keyword at i; returns the next index."""
        s = self.t(i)
        prev = self.t(i - 1)
        # member function qualifiers: `T get() const device`, `Frag() threadgroup = default;`
        if prev == ")" or (prev == "const" and self.t(i - 2) == ")"):
            if s == "thread":
                self.out[i] = ""
                return i + 1
            return self.drop_member(i)
        scope = self.scope[i]
        if (
            s == "threadgroup"
            and prev in (";", "{", "}", ")", ":")
            and scope in ("func", "block")
            and self.t(i + 1) != "*"
        ):
            return self.tg_decl(i, kd)
        if s in ("threadgroup", "thread"):
            self.out[i] = ""  # thread/threadgroup pointers and references stay raw C++ pointers
            return i + 1
        # parse: cv* type cv* (*|&)?
        j = i + 1
        cv = []
        lead_cv = []
        if prev in ("const", "volatile"):
            lead_cv.append(i - 1)
        while self.t(j) in ("const", "volatile"):
            cv.append(j)
            j += 1
        ts = j
        while True:
            if self.k(j) == "id" and self.t(j) not in ("const", "volatile") + _ADDRESS_SPACES:
                j += 1
            elif self.t(j) == "::":
                j += 1
            elif self.t(j) == "<" and j > ts:
                e = self.angle_end(j)
                if e < 0:
                    break
                j = e + 1
            else:
                break
        te = j
        while self.t(j) in ("const", "volatile"):
            cv.append(j)
            j += 1
        is_const = s == "constant" or any(self.t(c) == "const" for c in cv + lead_cv)
        if self.t(j) == "*" and te == ts + 1 and self.t(ts) == "auto":
            self.out[i] = ""
            self.out[j] = ""  # `device auto* p = ...`: let auto deduce the wrapper (or raw) pointer
            return j + 1
        if self.t(j) == "*" and te > ts and self.t(te - 1) != "void":
            typ = self.text(ts, te - 1)
            for c in lead_cv:
                self.out[c] = ""
            self.blank(i, j)
            if s == "constant":
                self.out[i] = f"::emu::cptr<{typ}>"
            else:
                self.out[i] = f"::emu::dptr<{'const ' if is_const else ''}{typ}>"
            return j + 1
        if s == "constant":
            near = [self.t(x) for x in range(max(0, i - 4), i + 5)]
            self.out[i] = "" if "const" in near else "const"
        else:
            self.out[i] = ""
        return i + 1

    def drop_member(self, i):
        """Remove a member function declared for a non-thread address space.

        Only `thread` objects exist in the emulator.
        """
        a = i
        while (
            a > 0
            and self.t(a - 1) not in (";", "{", "}")
            and not (self.t(a - 1) == ":" and self.t(a - 2) in ("public", "private", "protected"))
        ):
            a -= 1
        b = i
        while b < len(self.toks) and self.t(b) not in (";", "{"):
            b += 1
        if self.t(b) == "{":
            b = self.match[b]
        self.blank(a, b)
        return b + 1

    def tg_decl(self, i, kd):
        """`threadgroup T a[N][M], b;` -> references to group-shared allocations."""
        j = i + 1
        end = j
        while end < len(self.toks) and self.t(end) != ";":
            if self.t(end) in ("(", "[", "{"):
                end = self.match[end]
            end += 1
        # declarators split at depth-0 commas; the type is everything before the first declarator
        # name
        parts = []
        cur = []
        depth = 0
        for x in range(j, end):
            sx = self.t(x)
            if sx == "<":
                depth += 1
            elif sx == ">":
                depth -= 1
            if sx in ("(", "[", "{"):
                depth += 1
            elif sx in (")", "]", "}"):
                depth -= 1
            if sx == "," and depth == 0:
                parts.append(cur)
                cur = []
            else:
                cur.append(x)
        parts.append(cur)
        first = parts[0]
        name_pos = None
        for p, x in enumerate(first):
            if self.k(x) == "id" and (p + 1 == len(first) or self.t(first[p + 1]) in ("[", "=")):
                name_pos = p
                break
        if name_pos is None or name_pos == 0:
            self.err(i, "cannot parse this threadgroup declaration")
        if any(self.t(x) in ("*", "&") for x in first[:name_pos]):
            self.out[i] = ""  # a local pointer/reference to threadgroup memory, not an allocation
            return i + 1
        typ = self.text(first[0], first[name_pos - 1])
        decls = [first[name_pos:]] + parts[1:]
        pieces = []
        for d in decls:
            name = self.t(d[0])
            if any(self.t(x) == "=" for x in d):
                self.err(d[0], "threadgroup variables cannot have initializers in Metal")
            dims = "".join(self.t(x) for x in d[1:])
            full = f"{typ}{dims}"
            pieces.append(f"auto& {name} = ::emu::tg_alloc<{self.tg_site}, {full}>();")
            if kd is not None:
                kd.tg_types.append(full)
            self.tg_site += 1
        self.blank(i, end)
        self.out[i] = " ".join(pieces)
        return end + 1

    def local_constexprs(self, kd):
        """Top-level `constexpr`/`using`/`typedef` statements of a kernel body.

        Threadgroup array sizes may use them.
        """
        f = kd.func
        out = []
        j = f.open + 1
        start = j
        while j < f.close:
            s = self.t(j)
            if s in ("(", "[", "{"):
                if s == "{" and self.t(start) not in ("constexpr", "static", "using", "typedef"):
                    j = self.match[j] + 1
                    start = j
                    continue
                j = self.match[j] + 1
                continue
            if s == ";":
                words = [self.t(x) for x in range(start, j)]
                if words and (
                    words[0] in ("constexpr", "using", "typedef")
                    or words[:2] == ["static", "constexpr"]
                ):
                    if words[0] == "static":
                        words = words[1:]
                    txt = " ".join(w for w in words if w)
                    if not any(w in ("device", "constant", "threadgroup", "thread") for w in words):
                        out.append(txt + ";")
                start = j + 1
            j += 1
        return out

    def companions(self):
        for kd in self.kdef_list:
            decls = " ".join(self.local_constexprs(kd))
            tg = " + ".join(f"((sizeof({t}) + 15ul) & ~15ul)" for t in kd.tg_types) or "0ul"
            mt = kd.max_threads or "1024"
            head = f"template <{kd.template}> " if kd.template else ""
            self.after[kd.func.close] = (
                f" {head}struct __emu_ki_{kd.index} {{ static constexpr unsigned long tg() "
                f"{{ {decls} return {tg}; }}"
                f" static constexpr unsigned long maxt() {{ return {mt}; }} }};"
            )

    def inline_free_functions(self):
        """Non-template functions at namespace scope become inline, so that several translation
        units may
        include the same source (and unused kernels are not compiled in every unit)."""
        for f in self.funcs:
            if not f.free or self.dead[f.start]:
                continue
            words = {self.t(j) for j in range(f.start, f.open)}
            if words & {"inline", "static", "METAL_FUNC"}:
                continue
            if self.t(f.start) == "template":
                if self.t(f.start + 1) == "<" and self.t(f.start + 2) == ">":  # full specialization
                    self.before[f.start + 3] = "inline "
                continue
            self.before[f.start] = "inline "

    def emit(self):
        parts = []
        for i, tok in enumerate(self.toks):
            parts.append(tok.ws)
            if tok.k == "pp":
                parts.append(tok.t)
                continue
            if i in self.before:
                parts.append(self.before[i])
            parts.append(self.out[i])
            if i in self.after:
                parts.append(self.after[i])
        return "".join(parts)


_EXPORT = 'extern "C" __attribute__((visibility("default")))'


def _swizzle_indices(name):
    return ",".join(str("xyzw".find(c) if c in "xyzw" else "rgba".find(c)) for c in name)


def _unescape(lit):
    body = lit[lit.index('"') + 1 : -1]
    return bytes(body, "ascii").decode("unicode_escape")


def _launchers(tr: _Translator, reaches_sync) -> tuple:
    """Per kernel: the C++ that binds its arguments and describes it; plus the exported table."""
    hosts = []  # (host, kd, template args or None, token index)
    seen = {}
    for host, name, args, a, _ in tr.insts:
        kd = tr.kdefs.get(name)
        if kd is None:
            tr.err(
                a,
                f"explicit instantiation of '{name}', which is not a kernel template defined "
                "in this source",
            )
        hosts.append((host, kd, args, a))
    for kd in tr.kdef_list:
        if kd.template is None:
            hosts.append((kd.host_name or kd.name, kd, None, kd.func.start))
    for host, _, _, a in hosts:
        if host in seen:
            tr.err(a, f"duplicate kernel host name '{host}'")
        seen[host] = True
    snippets = []
    kernels = []
    for h, (host, kd, args, _) in enumerate(hosts):
        q = "::" + "::".join(kd.ns + (kd.name,)) if kd.ns else kd.name
        fn = f"{q}<{args}>" if args is not None else q
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
                call.append(f"::emu::builtin<::emu::arg_t<F{h},{k}>>({BUILTINS[p.attr]})")
        sync = reaches_sync(kd.name)
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
                    f"{{&emu_gen::lane{h}, {int(sync)}, {len(pdescs)}, "
                    f'emu_gen::params{h}, {ki}::maxt(), {ki}::tg(), "{host}"}};',
                ]
            )
        )
        kernels.append(KernelInfo(host, kd.name, kd.params, sync))
    n = len(hosts)
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
    return snippets, table, kernels


def assemble(tr: Translation, parts: int) -> list:
    """Split a translation into `parts` C++ sources that compile in parallel; kernels are spread
    over them
    (every part sees the whole Metal source: free functions were made inline, templates
    instantiate on use)."""
    parts = max(1, min(parts, len(tr.snippets) or 1))
    head = '#include "emu_shim.h"\n' + tr.body + '\n#line 1 "<emulator-launchers>"\n'
    out = []
    for p in range(parts):
        mine = tr.snippets[p::parts]
        out.append(head + "\n".join(mine) + "\n" + (tr.table + "\n" if p == 0 else ""))
    return out


def translate(source: str, cxx: str, *, metal_version: int = 320) -> Translation:
    if not isinstance(source, str):
        raise TypeError(
            f"compile_shader expects the Metal source as str, got {type(source).__name__}"
        )
    clean = check_raw(source)
    pp = preprocess(clean, cxx, metal_version)
    toks = tokenize(pp)
    check_entered_files(toks)
    tr = _Translator(toks, metal_version)
    tr.pair_brackets()
    tr.find_attributes()
    tr.scan_structure()
    tr.check_forbidden()
    tr.check_metal_rules()
    reaches_sync = tr.sync_kernels()
    tr.address_space_overloads()
    tr.rewrite()
    tr.companions()
    tr.inline_free_functions()
    tr.swizzle_members()
    tr.frame_calls(reaches_sync)
    body = single_precision_literals(tr.emit())
    snippets, table, kernels = _launchers(tr, reaches_sync)
    calls = {nm: f"{toks[j].file}:{toks[j].line}" for nm, j in tr.calls.items()}
    return Translation(body, snippets, table, kernels, calls)
