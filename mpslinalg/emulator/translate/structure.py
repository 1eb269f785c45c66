"""Pass 2, the structure: what the tokens declare.

`Unit` is the translation unit, built once from the tokens: matching brackets, attribute spans
(``[[...]]``), the kind of brace scope of every token (namespace, class, function body, block,
initializer), the function definitions, the kernels with their parameters (buffer indices and
builtin attributes), the explicit instantiations of kernel templates, the kernels' host names
(`Unit.entries`), the statements at namespace and class scope, the names called but not defined,
and which functions can reach a barrier or SIMD-group function. Everything later passes read is
set up in `Unit.__init__`; the only errors raised here are sources the scan cannot make sense of
(unbalanced brackets, an unparsable instantiation, a malformed kernel parameter attribute).
"""

from __future__ import annotations

import dataclasses
import re

from .errors import TranslateError

__all__ = [
    "ParamInfo",
    "KernelInfo",
    "Func",
    "KernelDef",
    "Instantiation",
    "Entry",
    "ThreadgroupDecl",
    "Unit",
    "KEYWORDS",
    "ADDRESS_SPACES",
    "SYNC_NAMES",
    "MATRIX_PRODUCT_NAMES",
    "BUILTIN_ATTRIBUTES",
    "SWIZZLE_RE",
    "swizzle_indices",
]

KEYWORDS = frozenset(
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
ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")
# Barriers and SIMD-group functions: a kernel that reaches one runs its lanes as fibers.
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
# The simdgroup_matrix products: the CUDA executor gives a kernel that reaches one a scratch area
# per warp (cuda_prelude.cuh).
MATRIX_PRODUCT_NAMES = frozenset({"simdgroup_multiply", "simdgroup_multiply_accumulate"})
# The builtin attributes of kernel parameters (each back end maps them to its own values).
BUILTIN_ATTRIBUTES = frozenset(
    """
    thread_position_in_grid thread_position_in_threadgroup threadgroup_position_in_grid
    threads_per_threadgroup dispatch_threads_per_threadgroup threads_per_grid grid_size
    threadgroups_per_grid thread_index_in_threadgroup thread_index_in_simdgroup
    simdgroup_index_in_threadgroup threads_per_simdgroup thread_execution_width
    simdgroups_per_threadgroup dispatch_simdgroups_per_threadgroup thread_index_in_quadgroup
    quadgroup_index_in_threadgroup quadgroups_per_threadgroup grid_origin""".split()
)
SWIZZLE_RE = re.compile(r"^(?:[xyzw]{2,4}|[rgba]{2,4})$")


def swizzle_indices(name):
    """``"yx"`` -> ``"1,0"``: the component indices of a swizzle."""
    return ",".join(str("xyzw".find(c) if c in "xyzw" else "rgba".find(c)) for c in name)


def _unescape(lit):
    body = lit[lit.index('"') + 1 : -1]
    return bytes(body, "ascii").decode("unicode_escape")


@dataclasses.dataclass
class ParamInfo:
    """A kernel parameter: its name, ``attr`` ("buffer" or the builtin attribute's name) and,
    for a buffer, its index and whether it is a pointer or reference to ``device`` memory
    (``device``: where a tensor is bound, which the CUDA executor tells its compiler)."""

    name: str
    attr: str  # "buffer" or the builtin attribute name
    buffer: int = -1
    device: bool = False


@dataclasses.dataclass
class KernelInfo:
    """A kernel of a library, by host name: the function it runs, its parameters, whether it
    can reach a barrier or SIMD-group function (then its lanes run as fibers), and whether it
    can reach a simdgroup_matrix product."""

    host_name: str
    function: str
    params: list
    sync: bool
    matrix: bool = False


@dataclasses.dataclass
class Func:
    """A function definition."""

    name: str
    start: int  # first token of the statement
    open: int  # index of '{'
    close: int  # index of matching '}'
    free: bool  # defined at namespace scope
    ns: tuple
    paren: int = -1  # '(' of the parameter list (the name is the token before it)


@dataclasses.dataclass
class KernelDef:
    """A kernel function definition (a template when ``template`` is not None)."""

    name: str
    ns: tuple
    template: str | None  # text between template < ... > or None
    params: list
    func: Func
    max_threads: str | None
    host_name: str | None
    index: int = 0
    param_tokens: list = dataclasses.field(default_factory=list)  # first token of each param
    # (token, attribute) of parameters with an attribute compile_shader cannot bind
    unbindable: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ThreadgroupDecl:
    """``threadgroup T a[N][M], b;`` in a function body (tokens ``start..end``, the ';'):
    ``declarators`` are token lists from each name on; ``pointer`` when it declares pointers or
    references to threadgroup memory, not allocations."""

    start: int
    end: int
    type_tokens: list
    declarators: list
    pointer: bool


@dataclasses.dataclass
class Instantiation:
    """``template [[host_name("h")]] kernel void k<args>(...);``: tokens ``start..end``."""

    host: str
    name: str
    args: str
    start: int
    end: int


@dataclasses.dataclass
class Entry:
    """A kernel of the library by host name: ``kernel`` is None where an instantiation names no
    kernel template of the source (the restrictions pass rejects it)."""

    host: str
    name: str
    kernel: KernelDef | None
    template_args: str | None
    token: int


class Unit:
    """The translation unit: the tokens and their structure, set up once (see the module)."""

    def __init__(self, toks, metal_version):
        n = len(toks)
        self.toks = toks
        self.metal_version = metal_version
        self.match = [-1] * n  # index of the matching bracket
        self.attr_spans = []  # (start, end) inclusive token indices of [[...]]
        self.attr_at = {}  # start -> end of each [[...]]
        self.in_attr = bytearray(n)
        self.scope = [None] * n  # kind of innermost brace scope per token
        self.funcs = []
        self.kernels = []  # KernelDef, in source order
        self.kernels_by_name = {}
        self.instantiations = []
        # '{' of a class body -> data members named like swizzles (xy, rgb, ...)
        self.swizzle_members = {}
        self.decls = []  # (scope kind, first token, ';') of statements at namespace and class scope
        self.undefined_calls = {}  # name -> token of its first call, for names not defined here
        self.entries = []  # Entry per host name, instantiations first
        self._pair_brackets()
        self._find_attributes()
        self._scan()
        self._find_undefined_calls()
        self._find_entries()
        # the call graph by name, for `reaches`: overloads -> the names each body mentions
        self._by_name = {}
        for f in self.funcs:
            self._by_name.setdefault(f.name, []).append(
                {self.toks[j].t for j in range(f.open + 1, f.close) if self.toks[j].k == "id"}
            )
        self._reaches = {}

    # -- reading tokens --
    def err(self, i, msg):
        t = self.toks[min(i, len(self.toks) - 1)]
        raise TranslateError(f"{t.file}:{t.line}: error: {msg}")

    def t(self, i):
        return self.toks[i].t if 0 <= i < len(self.toks) else ""

    def k(self, i):
        return self.toks[i].k if 0 <= i < len(self.toks) else "eof"

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

    def call_name(self, j):
        """The name called at token j by an unqualified call `name(...)`, else None."""
        tok = self.toks[j]
        if (
            tok.k != "id"
            or self.t(j + 1) != "("
            or self.in_attr[j]
            or tok.t in KEYWORDS
            or self.t(j - 1) in (".", "->", "::")
        ):
            return None
        return tok.t

    def split_params(self, paren):
        """The parameters of the list opened at ``paren``, each a list of token indices."""
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
        """The names of the template parameters in tokens ``a..b`` (a pack's with ``...``)."""
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
                ids = [x for x in cur[:eq] if self.k(x) == "id" and self.t(x) not in KEYWORDS]
                pack = any(self.t(x) == "..." for x in cur[:eq])
                if ids:
                    names.append(self.t(ids[-1]) + ("..." if pack else ""))
                cur = []
            else:
                cur.append(j)
        return names

    def reaches_sync(self, name):
        """Whether a function called ``name`` can reach a barrier or SIMD-group function."""
        return self.reaches(name, SYNC_NAMES)

    def reaches(self, name, targets):
        """Whether a function called ``name`` can reach a call of one of ``targets`` (a
        frozenset of names), by name: every overload, through every function its body names."""
        memo = self._reaches.setdefault(targets, {})
        if name in memo:
            return memo[name]
        memo[name] = False
        by_name = self._by_name
        seen, todo = {name}, [name]
        while todo:
            nm = todo.pop()
            for ids in by_name.get(nm, ()):
                if ids & targets:
                    memo[name] = True
                    return True
                for x in ids:
                    if x in by_name and x not in seen:
                        seen.add(x)
                        todo.append(x)
        return False

    def is_member_qualifier(self, i):
        """Whether the address-space keyword at ``i`` qualifies a member function
        (`T get() const device`, `Frag() threadgroup = default;`)."""
        prev = self.t(i - 1)
        return prev == ")" or (prev == "const" and self.t(i - 2) == ")")

    def threadgroup_declaration(self, i):
        """The `ThreadgroupDecl` whose ``threadgroup`` keyword is token ``i``, or None where the
        keyword does not start a declaration in a function body."""
        if (
            self.t(i) != "threadgroup"
            or self.is_member_qualifier(i)
            or self.t(i - 1) not in (";", "{", "}", ")", ":")
            or self.scope[i] not in ("func", "block")
            or self.t(i + 1) == "*"
        ):
            return None
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
        pointer = any(self.t(x) in ("*", "&") for x in first[:name_pos])
        return ThreadgroupDecl(i, end, first[:name_pos], [first[name_pos:]] + parts[1:], pointer)

    def threadgroup_declarations(self):
        """Every `ThreadgroupDecl` of the source, in order."""
        for i, tok in enumerate(self.toks):
            if tok.k == "id" and tok.t == "threadgroup" and not self.in_attr[i]:
                decl = self.threadgroup_declaration(i)
                if decl is not None:
                    yield decl

    # -- the scan --
    def _pair_brackets(self):
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

    def _find_attributes(self):
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
        for a, b in self.attr_spans:
            for j in range(a, b + 1):
                self.in_attr[j] = 1
        self.attr_at.update((a, b) for a, b in self.attr_spans)

    def _scan(self):
        """Brace scopes, function bodies, kernels and explicit instantiations."""
        toks = self.toks
        stack = []  # (kind, ns-name or None, index of '{')
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
                and SWIZZLE_RE.match(s)
                and self.t(i + 1) in (";", ",", "=", "[", "{")
                and self.t(i - 1) not in (".", "->", "::")
            ):
                self.swizzle_members.setdefault(stack[-1][2], set()).add(s)
            if s == ";" and tok.k == "punct":
                if cur in ("ns", "class"):
                    self.decls.append((cur, stmt, i))
                    self._statement(stmt, i)
                stmt = i + 1
            elif s == "{":
                kind = self._brace_kind(stmt, i, cur)
                if kind == "func":
                    self._function(stmt, i, stack)
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

    def _brace_kind(self, stmt, i, cur):
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
            if w not in ("const", "noexcept", "override", "final", "mutable") + ADDRESS_SPACES
        ]
        if tail and tail[-1] == ")":
            return "func"
        if any(w in ("struct", "class", "union", "enum") for w in words):
            return "class"
        return "init"

    def _function(self, stmt, brace, stack):
        name = None
        j = stmt
        while j < brace:
            if self.t(j) == "(" and not self.in_attr[j]:
                prev = self.t(j - 1)
                if self.k(j - 1) == "id" and prev not in KEYWORDS | {"__attribute__"}:
                    name = prev
                    break
                if self.t(j - 2) == "operator" or prev == "operator":
                    name = "operator"
                    break
                j = self.match[j]
            j += 1
        cur = stack[-1][0] if stack else "ns"
        ns = tuple(nm for kind, nm, _ in stack if kind == "ns" and nm)
        paren = j if name and name != "operator" else -1
        f = Func(name or "?", stmt, brace, self.match[brace], cur == "ns", ns, paren)
        self.funcs.append(f)
        items = self._kernel_markers(stmt, brace)
        if items is not None:
            self._kernel_def(f, stmt, j, items)

    def _kernel_markers(self, a, b):
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

    def _host_name_of(self, items):
        for nm, rng in items:
            if nm == "host_name" and rng:
                parts = []
                for j in range(rng[0], rng[1] + 1):
                    if self.k(j) != "str":
                        self.err(j, "host_name expects string literals")
                    parts.append(_unescape(self.t(j)))
                return "".join(parts)
        return None

    def _kernel_def(self, f, stmt, paren, items):
        template = None
        if self.t(stmt) == "template" and self.t(stmt + 1) == "<":
            e = self.angle_end(stmt + 1)
            template = self.text(stmt + 2, e - 1) if e > 0 else None
        max_threads = None
        for nm, rng in items:
            if nm == "max_total_threads_per_threadgroup" and rng:
                max_threads = self.text(rng[0], rng[1])
        params, tokens, unbindable = self._parse_params(paren, self.match[paren])
        kd = KernelDef(f.name, f.ns, template, params, f, max_threads, self._host_name_of(items),
                       len(self.kernels), tokens, unbindable)
        self.kernels.append(kd)
        self.kernels_by_name.setdefault(f.name, kd)

    def _parse_params(self, a, b):
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
        out, tokens, unbindable = [], [], []
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
                        elif nm in BUILTIN_ATTRIBUTES:
                            attr = nm
                        elif nm in ("threadgroup", "stage_in", "texture", "sampler",
                                    "function_constant"):
                            unbindable.append((j, nm))
            ids = [
                j
                for j in p
                if self.k(j) == "id" and not self.in_attr[j] and self.t(j) not in KEYWORDS
            ]
            if ids:
                name = self.t(ids[-1])
            if self.t(p[0]) == "void" and len(p) == 1:
                continue
            if attr == "buffer":
                if buf is None:
                    buf = nbuf
                nbuf = max(nbuf, buf + 1)
            words = [self.t(j) for j in p if not self.in_attr[j]]
            device = attr == "buffer" and "device" in words and ("*" in words or "&" in words)
            out.append(ParamInfo(name or f"arg{len(out)}", attr, buf if attr == "buffer" else -1,
                                 device))
            tokens.append(p[0])
        return out, tokens, unbindable

    def _statement(self, a, b):
        """A ';'-terminated statement at namespace scope; records explicit kernel instantiations."""
        if self.t(a) != "template" or self.t(a + 1) == "<":
            return
        items = self._kernel_markers(a, b)
        host = None
        if items is not None or any(j in self.attr_at for j in range(a, b)):
            allitems = []
            for j in range(a, b):
                if j in self.attr_at:
                    allitems.extend(self.attr_items(j, self.attr_at[j]))
            host = self._host_name_of(allitems)
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
            if self.k(j) == "id" and self.t(j + 1) == "<" and self.t(j) not in KEYWORDS:
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
        self.instantiations.append(Instantiation(host, name, args, a, b))

    def _find_undefined_calls(self):
        defined = {f.name for f in self.funcs}
        for j in range(len(self.toks)):
            nm = self.call_name(j)
            if nm is not None and nm not in defined:
                self.undefined_calls.setdefault(nm, j)

    def _find_entries(self):
        for inst in self.instantiations:
            kd = self.kernels_by_name.get(inst.name)
            self.entries.append(Entry(inst.host, inst.name, kd, inst.args, inst.start))
        for kd in self.kernels:
            if kd.template is None:
                host = kd.host_name or kd.name
                self.entries.append(Entry(host, kd.name, kd, None, kd.func.start))
