"""Pass 1, the lexer: preprocessed Metal text -> tokens.

Each token keeps the whitespace and comments before it (``ws``) and its ``file:line`` (line
markers of the preprocessor are followed), so joining ``ws + text`` of every token gives the text
back and every later diagnostic names the original ``metal/<file>:<line>``. Whole preprocessor
lines (markers, pragmas) are one ``pp`` token.
"""

from __future__ import annotations

import re

from .errors import TranslateError

__all__ = ["Tok", "tokenize", "FLOAT_LITERAL_RE", "single_precision", "single_precision_literals"]

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
_DIRECTIVE_START_RE = re.compile(r"[ \t]*#")


class Tok:
    """One token: kind ``k`` (ws-free: id, num, str, chr, punct, pp, eof), text ``t``, the
    whitespace and comments before it ``ws``, and where it is (``file``, ``line``)."""

    __slots__ = ("k", "t", "ws", "file", "line")

    def __init__(self, k, t, ws, file, line):
        self.k, self.t, self.ws, self.file, self.line = k, t, ws, file, line

    def __repr__(self):
        return f"Tok({self.k},{self.t!r},{self.file}:{self.line})"


def tokenize(text: str) -> list:
    """Tokens of preprocessed text, ending with one ``eof`` token.

    Whole preprocessor lines (markers, pragmas) become one 'pp' token.
    """
    toks = []
    file, line = "program_source", 1
    ws = ""
    pos, n = 0, len(text)
    at_line_start = True
    while pos < n:
        if at_line_start:
            m = _DIRECTIVE_START_RE.match(text, pos)
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
            ws += s  # comments keep their newlines so line numbers stay right
            line += s.count("\n")
            continue
        at_line_start = False
        toks.append(Tok(kind, s, ws, file, line))
        ws = ""
    toks.append(Tok("eof", "", ws, file, line))
    return toks


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
