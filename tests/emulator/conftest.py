"""Fixtures shared by the emulator test suite.

Each test module compiles its kernels once (module-scoped fixtures), because
every distinct source costs a C++ compiler run on a cold cache.
"""

import faulthandler
import os
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


def _have_cuda_device() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken CUDA install means no device to test on
        return False


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a GPU: where there is none they are deselected (not skipped),
    so a CPU-only run reports only what it really ran. Off Linux, where the emulator cannot run,
    this directory's tests are deselected too (the translator and CUDA tests with them)."""
    from mpslinalg.emulator.build import unsupported_platform

    if unsupported_platform() is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        mine = [item for item in items if str(item.path).startswith(here + os.sep)]
        if mine:
            config.hook.pytest_deselected(items=mine)
            chosen = {id(item) for item in mine}
            items[:] = [item for item in items if id(item) not in chosen]
    if _have_cuda_device():
        return
    deselected = [item for item in items if item.get_closest_marker("cuda") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker("cuda") is None]
