"""Helpers shared by the emulator tests."""

import re

import pytest


def raises(exc, *patterns):
    """Context manager: `exc` whose message matches every regex (case-insensitive)."""
    return _Raises(exc, patterns)


class _Raises:
    def __init__(self, exc, patterns):
        self.cm = pytest.raises(exc)
        self.patterns = patterns

    def __enter__(self):
        self.info = self.cm.__enter__()
        return self.info

    def __exit__(self, *a):
        suppressed = self.cm.__exit__(*a)
        msg = str(self.info.value)
        for p in self.patterns:
            assert re.search(p, msg, re.IGNORECASE), f"{p!r} not in message:\n{msg}"
        return suppressed
