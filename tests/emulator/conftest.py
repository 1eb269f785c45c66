"""Fixtures shared by the emulator test suite.

Each test module compiles its kernels once (module-scoped fixtures), because
every distinct source costs a C++ compiler run on a cold cache.
"""

import faulthandler
import sys

import pytest

# A hang in the emulator must become a failure, not a stuck CI job: dump the
# Python stacks and exit if a single test runs far longer than any test here.
_HANG_LIMIT_S = 300


@pytest.fixture(autouse=True)
def _hang_guard():
    faulthandler.dump_traceback_later(_HANG_LIMIT_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
