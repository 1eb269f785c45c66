#!/usr/bin/env python3
"""Prints every skipped test of a pytest run, with its reason, and fails on a skip that the
allow-list does not name.

Usage: python .ci/check_skips.py JUNIT_XML [ALLOW_LIST]  (default .ci/allowed_skips.txt)

The run writes JUNIT_XML (``pytest --junitxml=JUNIT_XML``). Each line of the allow-list is
``test id pattern | reason pattern | why it is allowed``; ``#`` starts a comment line. In a
pattern ``*`` matches any text and nothing else is special (test ids hold brackets). A skip is
allowed when some line's two patterns match its test id (``path::name``) and its reason in
full. An expected failure (xfail) counts as a skip. Exit status 1 lists every skip no line
allows (and 2 a malformed allow-list); lines that allowed nothing are listed, for pruning.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Skip:
    test_id: str
    reason: str


@dataclass(frozen=True)
class Allowance:
    line: int
    test_id: re.Pattern
    reason: re.Pattern
    why: str

    def allows(self, skip: Skip) -> bool:
        return bool(self.test_id.fullmatch(skip.test_id) and self.reason.fullmatch(skip.reason))


class AllowListError(ValueError):
    pass


def _glob(pattern: str) -> re.Pattern:
    """``*`` matches any text (newlines too); every other character stands for itself."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def _test_id(classname: str, name: str, root: Path) -> str:
    """pytest's node id from junit's dotted ``classname`` (module path, then classes)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[end:], name])
    return "::".join([classname, name])


def read_skips(junit_xml: Path, root: Path = ROOT) -> list[Skip]:
    skips = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        for skipped in case.findall("skipped"):
            reason = skipped.get("message") or (skipped.text or "").strip()
            test_id = _test_id(case.get("classname", ""), case.get("name", ""), root)
            skips.append(Skip(test_id, reason))
    return skips


def read_allow_list(path: Path) -> list[Allowance]:
    allowances = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        fields = [field.strip() for field in text.split(" | ", 2)]
        if len(fields) != 3 or not all(fields):
            raise AllowListError(f"{path}:{number}: expected 'test id pattern | reason pattern "
                                 f"| why it is allowed', got {text!r}")
        allowances.append(Allowance(number, _glob(fields[0]), _glob(fields[1]), fields[2]))
    return allowances


def check(skips: list[Skip], allowances: list[Allowance]) -> tuple[list[Skip], list[Allowance]]:
    """The skips no allowance allows, and the allowances that allowed none."""
    unlisted = [skip for skip in skips if not any(a.allows(skip) for a in allowances)]
    unused = [a for a in allowances if not any(a.allows(skip) for skip in skips)]
    return unlisted, unused


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    junit_xml = Path(argv[0])
    allow_list = Path(argv[1]) if len(argv) == 2 else ROOT / ".ci" / "allowed_skips.txt"
    try:
        allowances = read_allow_list(allow_list)
    except AllowListError as error:
        print(error, file=sys.stderr)
        return 2
    skips = read_skips(junit_xml)
    print(f"== {len(skips)} skipped tests, by reason")
    by_reason: dict[str, list[str]] = {}
    for skip in skips:
        by_reason.setdefault(skip.reason, []).append(skip.test_id)
    for reason, test_ids in sorted(by_reason.items()):
        print(f"[{len(test_ids)}] {reason}")
        for test_id in sorted(test_ids):
            print(f"    {test_id}")
    unlisted, unused = check(skips, allowances)
    for allowance in unused:
        print(f"note: {allow_list}:{allowance.line} allowed no skip of this run")
    if unlisted:
        print(f"== {len(unlisted)} skips not on {allow_list}:", file=sys.stderr)
        for skip in unlisted:
            print(f"  {skip.test_id}: {skip.reason}", file=sys.stderr)
        return 1
    print(f"== every skip is on {allow_list}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
