"""Pass 4, the lowering: the checked Metal source rewritten into the C++ the emulator's headers
give a meaning to, by edits of single tokens (nothing moves, no newline is added or removed).

- explicit kernel instantiations are removed (the launchers instantiate the kernels);
- address spaces: ``device T*`` -> ``::emu::dptr<T>``, ``constant T*`` -> ``::emu::cptr<T>``
  (bounds-checked pointer wrappers), ``thread``/``threadgroup`` pointers stay raw pointers,
  ``constant`` variables become ``const``, member functions for another address space than
  ``thread`` are dropped, overloads that differ only in ``thread`` vs ``threadgroup`` dispatch at
  run time (`Lowering.address_space_overloads`);
- threadgroup declarations -> references to the launch's group-shared allocations, each kernel's
  sizes gathered in a companion struct ``__emu_ki_<n>`` with its ``max_total_threads``;
- swizzles ``v.xy`` -> ``v.template swz<0,1>()`` (``swzw`` when written), and members named like
  swizzles get the same accessors;
- half literals ``1.5h`` -> ``((half)(1.5f))``, casts to device/constant pointers ->
  ``::emu::reinterpret_cast_``, ``kernel`` and ``volatile`` dropped;
- for the CPU: free functions made ``inline`` (several translation units include the source),
  and calls of functions that can reach a barrier wrapped in a frame guard (the scheduler's call
  paths).
"""

from __future__ import annotations

import re

from .lexer import single_precision_literals
from .structure import ADDRESS_SPACES, KEYWORDS, SWIZZLE_RE, swizzle_indices

__all__ = ["Lowering", "lower", "runtime_dispatched_overloads", "wrapped_pointer"]

_HALF_LIT_RE = re.compile(r"^((?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)[hH]$")
TARGETS = ("cpu", "cuda")


def runtime_dispatched_overloads(unit, dead=None) -> list:
    """The pairs of free overloads that `Lowering.address_space_overloads` rewrites (for both
    targets): two definitions of one name, alike but for `thread` vs `threadgroup` in some
    parameters. Each is ``(f1, s1, f2, s2, k)``: the two `Func` in source order, per parameter
    (whether it mentions ``threadgroup``, its name with ``&`` for a reference), and the first
    parameter where they differ (the one tested at run time)."""
    u = unit
    groups = {}
    for f in u.funcs:
        if not f.free or f.paren < 0 or (dead is not None and dead[f.start]):
            continue
        params = u.split_params(f.paren)
        erased = []
        spaces = []
        for p in params:
            words = [u.t(j) for j in p if not u.in_attr[j]]
            names = [j for j in p if u.k(j) == "id" and u.t(j) not in KEYWORDS]
            name = u.t(names[-1]) if names else None
            is_ref = "&" in words and "*" not in words
            spaces.append(("threadgroup" in words, ("&" if is_ref else "") + (name or "")))
            erased.append(
                " ".join(w for w in words if w not in ("thread", "threadgroup") and w != name)
            )
        head = " ".join(u.t(j) for j in range(f.start, f.paren - 1))
        key = (f.ns, f.name, head, tuple(erased))
        groups.setdefault(key, []).append((f, spaces))
    pairs = []
    for members in groups.values():
        if len(members) != 2:
            continue
        (f1, s1), (f2, s2) = sorted(members, key=lambda m: m[0].start)
        diff = [k for k, (a, b) in enumerate(zip(s1, s2, strict=True)) if a[0] != b[0]]
        if not diff or any(n in ("", "&") for _, n in s2):
            continue
        pairs.append((f1, s1, f2, s2, diff[0]))
    return pairs


def _declarator(u, i):
    """What follows the address-space keyword at ``i``: ``cv* type cv* (*|&)?``, as
    ``(lead_cv, cv, ts, te, j)``: the indices of a ``const``/``volatile`` just before the keyword
    and of those after it, the type's tokens ``[ts, te)`` and the token after them all."""
    j = i + 1
    cv = []
    lead_cv = []
    if u.t(i - 1) in ("const", "volatile"):
        lead_cv.append(i - 1)
    while u.t(j) in ("const", "volatile"):
        cv.append(j)
        j += 1
    ts = j
    while True:
        if u.k(j) == "id" and u.t(j) not in ("const", "volatile") + ADDRESS_SPACES:
            j += 1
        elif u.t(j) == "::":
            j += 1
        elif u.t(j) == "<" and j > ts:
            e = u.angle_end(j)
            if e < 0:
                break
            j = e + 1
        else:
            break
    te = j
    while u.t(j) in ("const", "volatile"):
        cv.append(j)
        j += 1
    return lead_cv, cv, ts, te, j


def wrapped_pointer(unit, i) -> int:
    """Where the ``device`` or ``constant`` keyword at ``i`` starts a pointer that the CPU
    lowering turns into ``::emu::dptr<T>`` / ``::emu::cptr<T>`` (a type of its own): the index of
    its ``*``; else -1 (references, ``auto*`` and ``void*``: the keyword is erased, ``constant``
    leaving ``const``)."""
    _, _, ts, te, j = _declarator(unit, i)
    if unit.t(j) != "*" or te <= ts or unit.t(te - 1) == "void":
        return -1
    return -1 if te == ts + 1 and unit.t(ts) == "auto" else j


def lower(unit, target: str) -> Lowering:
    """The edits of every lowering step for ``target`` ("cpu" or "cuda"), in their order."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    lo = Lowering(unit)
    lo.remove_instantiations()
    lo.address_space_overloads()
    lo.rewrite()
    lo.companions()
    if target == "cpu":
        lo.inline_free_functions()
    lo.swizzle_members()
    if target == "cpu":
        lo.frame_calls()
    return lo


class Lowering:
    """The edits of one `Unit`: per token its new text (``out``), text inserted before and after
    it, and whether it was removed (``dead``); `text` renders them."""

    def __init__(self, unit):
        self.unit = unit
        self.out = [t.t for t in unit.toks]
        self.before = {}  # token index -> text inserted before the token
        self.after = {}  # token index -> text appended after the token
        self.dead = bytearray(len(unit.toks))  # tokens removed (explicit instantiations)
        self.tg_site = 0  # threadgroup allocations so far (each has its own site number)
        self.tg_types = {kd.index: [] for kd in unit.kernels}  # kernel -> its threadgroup types

    def blank(self, a, b):
        for j in range(a, b + 1):
            self.out[j] = ""

    def text(self, *, single_precision: bool = False) -> str:
        """The rewritten source (``single_precision``: unsuffixed floating literals as
        ``float`` literals)."""
        parts = []
        for i, tok in enumerate(self.unit.toks):
            parts.append(tok.ws)
            if tok.k == "pp":
                parts.append(tok.t)
                continue
            if i in self.before:
                parts.append(self.before[i])
            parts.append(self.out[i])
            if i in self.after:
                parts.append(self.after[i])
        body = "".join(parts)
        return single_precision_literals(body) if single_precision else body

    # -- the steps, in the order `lower` runs them --
    def remove_instantiations(self):
        for inst in self.unit.instantiations:
            self.blank(inst.start, inst.end)
            for j in range(inst.start, inst.end + 1):
                self.dead[j] = 1

    def address_space_overloads(self):
        """Overloads that differ only in `thread` vs `threadgroup` pointers/references collide
        once the address spaces are erased; one of them is renamed and the other dispatches to it
        at run time on whether the pointer lies in threadgroup memory."""
        u = self.unit
        for f1, s1, f2, s2, k in runtime_dispatched_overloads(u, self.dead):
            # the first definition is renamed; the second keeps the name and forwards to the first
            first_is_tg = s1[k][0]
            suffix = "__emu_tg" if first_is_tg else "__emu_thread"
            self.out[f1.paren - 1] = f1.name + suffix
            targs = ""
            if u.t(f2.start) == "template" and u.t(f2.start + 1) == "<":
                e = u.angle_end(f2.start + 1)
                targs = "<" + ", ".join(u.template_param_names(f2.start + 2, e)) + ">"
            f2_params = u.split_params(f2.paren)
            args = ", ".join(
                n.lstrip("&") + ("..." if any(u.t(j) == "..." for j in f2_params[i]) else "")
                for i, (_, n) in enumerate(s2)
            )
            test = "" if first_is_tg else "!"
            call = f"{f1.name}{suffix}{targs}({args})"
            self.after[f2.open] = (
                f" if ({test}::emu::in_threadgroup({s2[k][1]})) return {call}; "
                + self.after.get(f2.open, "")
            )

    def rewrite(self):
        """Address spaces, threadgroup declarations, swizzles, half literals, casts."""
        u = self.unit
        toks = u.toks
        n = len(toks)
        for a, b in u.attr_spans:
            self.blank(a, b)
        kernel_of_tok = {kd.func.open: kd for kd in u.kernels}
        active_k = []  # kernel defs whose body we are in: (close, kd)
        i = 0
        while i < n:
            tok = toks[i]
            if tok.k == "pp" or u.in_attr[i] or self.dead[i]:
                i += 1
                continue
            if i in kernel_of_tok:
                active_k.append((kernel_of_tok[i].func.close, kernel_of_tok[i]))
            while active_k and i > active_k[-1][0]:
                active_k.pop()
            s = tok.t
            if tok.k == "id":
                if s == "kernel":
                    self.out[i] = ""
                elif s in ADDRESS_SPACES:
                    i = self._address_space(i, active_k[-1][1] if active_k else None)
                    continue
                elif s in ("reinterpret_cast", "static_cast", "const_cast") and u.t(i + 1) == "<":
                    e = u.angle_end(i + 1)
                    if s == "reinterpret_cast" or (
                        e > 0 and any(u.t(j) in ("device", "constant") for j in range(i + 2, e))
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
                nm = u.t(i + 1)
                if u.k(i + 1) == "id" and SWIZZLE_RE.match(nm) and u.t(i + 2) != "(":
                    idx = swizzle_indices(nm)
                    write = u.t(i + 2) in ("=", "+=", "-=", "*=", "/=")
                    self.out[i + 1] = f"template swz{'w' if write else ''}<{idx}>()"
                    i += 2
                    continue
            i += 1

    def _address_space(self, i, kd):
        """Rewrite the address-space keyword at i; returns the next index."""
        u = self.unit
        s = u.t(i)
        if u.is_member_qualifier(i):
            if s == "thread":
                self.out[i] = ""
                return i + 1
            return self._drop_member(i)
        decl = u.threadgroup_declaration(i)
        if decl is not None:
            return self._threadgroup_decl(decl, kd)
        if s in ("threadgroup", "thread"):
            self.out[i] = ""  # thread/threadgroup pointers and references stay raw C++ pointers
            return i + 1
        lead_cv, cv, ts, te, j = _declarator(u, i)
        is_const = s == "constant" or any(u.t(c) == "const" for c in cv + lead_cv)
        if u.t(j) == "*" and te == ts + 1 and u.t(ts) == "auto":
            self.out[i] = ""
            self.out[j] = ""  # `device auto* p = ...`: let auto deduce the wrapper (or raw) pointer
            return j + 1
        if u.t(j) == "*" and te > ts and u.t(te - 1) != "void":
            typ = u.text(ts, te - 1)
            for c in lead_cv:
                self.out[c] = ""
            self.blank(i, j)
            if s == "constant":
                self.out[i] = f"::emu::cptr<{typ}>"
            else:
                self.out[i] = f"::emu::dptr<{'const ' if is_const else ''}{typ}>"
            return j + 1
        if s == "constant":
            near = [u.t(x) for x in range(max(0, i - 4), i + 5)]
            self.out[i] = "" if "const" in near else "const"
        else:
            self.out[i] = ""
        return i + 1

    def _drop_member(self, i):
        """Remove a member function declared for a non-thread address space.

        Only `thread` objects exist in the emulator.
        """
        u = self.unit
        a = i
        while (
            a > 0
            and u.t(a - 1) not in (";", "{", "}")
            and not (u.t(a - 1) == ":" and u.t(a - 2) in ("public", "private", "protected"))
        ):
            a -= 1
        b = i
        while b < len(u.toks) and u.t(b) not in (";", "{"):
            b += 1
        if u.t(b) == "{":
            b = u.match[b]
        self.blank(a, b)
        return b + 1

    def _threadgroup_decl(self, decl, kd):
        """`threadgroup T a[N][M], b;` -> references to group-shared allocations."""
        u = self.unit
        i = decl.start
        if decl.pointer:
            self.out[i] = ""  # a local pointer/reference to threadgroup memory, not an allocation
            return i + 1
        typ = u.text(decl.type_tokens[0], decl.type_tokens[-1])
        pieces = []
        for d in decl.declarators:
            name = u.t(d[0])
            dims = "".join(u.t(x) for x in d[1:])
            full = f"{typ}{dims}"
            pieces.append(f"auto& {name} = ::emu::tg_alloc<{self.tg_site}, {full}>();")
            if kd is not None:
                self.tg_types[kd.index].append(full)
            self.tg_site += 1
        self.blank(i, decl.end)
        self.out[i] = " ".join(pieces)
        return decl.end + 1

    def _local_constexprs(self, kd):
        """Top-level `constexpr`/`using`/`typedef` statements of a kernel body.

        Threadgroup array sizes may use them.
        """
        u = self.unit
        f = kd.func
        out = []
        j = f.open + 1
        start = j
        while j < f.close:
            s = u.t(j)
            if s in ("(", "[", "{"):
                if s == "{" and u.t(start) not in ("constexpr", "static", "using", "typedef"):
                    j = u.match[j] + 1
                    start = j
                    continue
                j = u.match[j] + 1
                continue
            if s == ";":
                words = [u.t(x) for x in range(start, j)]
                if words and (
                    words[0] in ("constexpr", "using", "typedef")
                    or words[:2] == ["static", "constexpr"]
                ):
                    if words[0] == "static":
                        words = words[1:]
                    txt = " ".join(w for w in words if w)
                    if not any(w in ADDRESS_SPACES for w in words):
                        out.append(txt + ";")
                start = j + 1
            j += 1
        return out

    def companions(self):
        """Per kernel ``struct __emu_ki_<n>``: its threadgroup memory and its thread limit."""
        for kd in self.unit.kernels:
            decls = " ".join(self._local_constexprs(kd))
            tg = " + ".join(
                f"((sizeof({t}) + 15ul) & ~15ul)" for t in self.tg_types[kd.index]
            ) or "0ul"
            mt = kd.max_threads or "1024"
            head = f"template <{kd.template}> " if kd.template else ""
            self.after[kd.func.close] = (
                f" {head}struct __emu_ki_{kd.index} {{ static constexpr unsigned long tg() "
                f"{{ {decls} return {tg}; }}"
                f" static constexpr unsigned long maxt() {{ return {mt}; }} }};"
            )

    def inline_free_functions(self):
        """Non-template functions at namespace scope become inline, so that several translation
        units may include the same source (and unused kernels are not compiled in every unit)."""
        u = self.unit
        for f in u.funcs:
            if not f.free or self.dead[f.start]:
                continue
            words = {u.t(j) for j in range(f.start, f.open)}
            if words & {"inline", "static", "METAL_FUNC"}:
                continue
            if u.t(f.start) == "template":
                if u.t(f.start + 1) == "<" and u.t(f.start + 2) == ">":  # full specialization
                    self.before[f.start + 3] = "inline "
                continue
            self.before[f.start] = "inline "

    def swizzle_members(self):
        """A struct member named like a swizzle (`float xy;`) is reached through the same
        `swz<...>()` call that `.xy` is rewritten to, so the rewrite needs no type information."""
        u = self.unit
        for open_i, names in u.swizzle_members.items():
            fns = []
            for nm in sorted(names):
                seq = f"::emu::iseq<{swizzle_indices(nm)}>"
                cond = (
                    f"::std::enable_if_t<::std::is_same<::emu::iseq<I...>, {seq}>::value, int> = 0"
                )
                for fn in ("swz", "swzw"):
                    fns.append(f"template <int... I, {cond}> auto& {fn}() {{ return {nm}; }}")
                    fns.append(
                        f"template <int... I, {cond}> const auto& {fn}() const {{ return {nm}; }}"
                    )
            close = u.match[open_i]
            self.before[close] = " " + " ".join(fns) + " " + self.before.get(close, "")

    def frame_calls(self):
        """Wrap calls of user functions that can reach a SIMD-group function or barrier in a frame
        guard, so the scheduler knows each lane's call path: `f(x)` ->
        `(::emu::Frame(::emu::here()), f(x))`. Lanes waiting at different collectives are ordered
        by their call paths (program order), which gives SIMT reconvergence also when a helper is
        defined after its caller."""
        u = self.unit
        names = {
            f.name for f in u.funcs if f.name not in ("?", "operator") and u.reaches_sync(f.name)
        }
        if not names:
            return
        in_body = bytearray(len(u.toks))
        for f in u.funcs:
            for j in range(f.open + 1, f.close):
                in_body[j] = 1
        for i, tok in enumerate(u.toks):
            if tok.k != "id" or tok.t not in names or not in_body[i] or self.dead[i]:
                continue
            j = i + 1
            if u.t(j) == "<":
                e = u.angle_end(j)
                if e < 0:
                    continue
                j = e + 1
            if u.t(j) != "(":
                continue
            start = i
            while (
                u.t(start - 1) == "::"
                and u.k(start - 2) == "id"
                and u.t(start - 2) not in KEYWORDS
            ):
                start -= 2
            if u.t(start - 1) == "::":  # ::metal::f(...)
                start -= 1
            prev = u.t(start - 1)
            if (
                prev in (".", "->")
                or u.k(start - 1) == "id"
                and prev not in ("return", "else", "do", "case")
            ):
                continue  # member call, or a declaration `T f(...)`
            if prev == "(" and u.t(start - 2) in ("decltype", "sizeof", "alignof", "noexcept"):
                continue
            close = u.match[j]
            self.before[start] = "(::emu::Frame(::emu::here()), " + self.before.get(start, "")
            self.after[close] = ")" + self.after.get(close, "")
