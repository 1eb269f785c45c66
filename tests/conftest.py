"""Backend fixture and hypothesis profiles shared by every test module.

The ``backend`` fixture runs a test on each available executor: ``torch`` (torch.linalg),
``emulator`` (the Metal kernels on CPU tensors through mpslinalg.emulator) and ``mps`` (the Metal
kernels on the Apple GPU, when present). Narrow it with ``--backends torch,emulator`` or
``MPSLINALG_TEST_BACKENDS``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, settings

import mpslinalg
from mpslinalg._core import platform as _platform
from mpslinalg.emulator import build as _emulator_build

# Every Metal kernel the tests launch runs under the emulator's race detector (kernels that are
# racy on purpose, in the emulator's own lane-order tests, opt out per compile).
os.environ.setdefault("MPSLINALG_EMULATOR_RACECHECK", "1")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=8,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "dev")
)

ALL_BACKENDS = ("torch", "emulator", "mps", "cuda", "cuda-metal")
#: Run only when asked for by name: the torch backend on CUDA tensors, and the Metal kernels on
#: CUDA tensors through the CUDA executor (mpslinalg.emulator.cuda, $MPSLINALG_METAL_ON_CUDA).
ON_REQUEST = ("cuda", "cuda-metal")


@dataclass(frozen=True)
class Backend:
    """One executor a test runs on: the mpslinalg backend name and the device of its tensors."""

    name: str
    backend: str
    device: torch.device

    @property
    def is_metal(self) -> bool:
        return self.backend == "metal"

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.device)


def pytest_addoption(parser):
    parser.addoption(
        "--backends",
        default=None,
        help="comma-separated subset of torch,emulator,mps,cuda,cuda-metal (default: torch, "
        "emulator and mps where available; env MPSLINALG_TEST_BACKENDS)",
    )


def _selected_backends(config) -> list[str]:
    raw = config.getoption("--backends") or os.environ.get("MPSLINALG_TEST_BACKENDS")
    names = [n.strip() for n in raw.split(",") if n.strip()] if raw else list(ALL_BACKENDS)
    unknown = sorted(set(names) - set(ALL_BACKENDS))
    if unknown:
        raise pytest.UsageError(f"unknown backends {unknown}; choose from {ALL_BACKENDS}")
    if not raw:
        names = [n for n in names if n not in ON_REQUEST]
        if _platform.mps_unavailable_reasons():
            names.remove("mps")  # not requested explicitly and not present
        if _platform.emulator_unavailable_reasons():
            names.remove("emulator")  # (off Linux, or no compiler)
    return names


def _emulator_skip_reason(excinfo: pytest.ExceptionInfo | None) -> str | None:
    """Why a test that raised ``excinfo`` is a skip, or None: only for the cause
    `EmulatorUnavailableError` exists for, an operating system the emulator's runtime cannot
    run on (off Linux). Raised for any other cause (an explicit race check under clang), or
    with another message, it stays a failure."""
    if excinfo is None or not excinfo.errisinstance(_emulator_build.EmulatorUnavailableError):
        return None
    reason = _emulator_build.unsupported_platform()
    return reason if reason is not None and str(excinfo.value) == reason else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that reaches the emulator where it cannot run (off Linux) is reported skipped with
    the reason, not failed: the emulator's own tests are deselected there, and the Metal paths
    run on the Apple GPU backend instead."""
    outcome = yield
    report = outcome.get_result()
    reason = _emulator_skip_reason(call.excinfo)
    if reason is not None:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


def _parametrized_by_test(metafunc, name: str) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0]
        names = argnames.split(",") if isinstance(argnames, str) else argnames
        if name in (n.strip() for n in names):
            return True
    return False


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames and not _parametrized_by_test(metafunc, "backend"):
        metafunc.parametrize("backend", _selected_backends(metafunc.config), indirect=True)
    if "metal_backend" in metafunc.fixturenames:
        metal = [n for n in _selected_backends(metafunc.config) if n not in ("torch", "cuda")]
        metafunc.parametrize("metal_backend", metal, indirect=True)


@pytest.fixture
def metal_backend(request):
    """Like ``backend``, for properties of the Metal path alone (launch counts, host syncs,
    dtype limits): the emulator and, when present, the Apple GPU."""
    yield from _enter_backend(request.param)


@pytest.fixture
def backend(request):
    yield from _enter_backend(request.param)


def _enter_backend(name: str):
    if name == "mps" and _platform.mps_unavailable_reasons():
        pytest.fail("the mps backend was requested but MPS is not usable: "
                    + "; ".join(_platform.mps_unavailable_reasons()))
    if name == "emulator" and _platform.emulator_unavailable_reasons():
        pytest.fail("the emulator backend was requested but cannot run here: "
                    + "; ".join(_platform.emulator_unavailable_reasons()))
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(f"the {name} backend was requested but torch sees no CUDA device")
    chosen = {
        "torch": Backend("torch", "torch", torch.device("cpu")),
        "emulator": Backend("emulator", "metal", torch.device("cpu")),
        "mps": Backend("mps", "metal", torch.device("mps")),
        "cuda": Backend("cuda", "torch", torch.device("cuda")),
        "cuda-metal": Backend("cuda-metal", "metal", torch.device("cuda")),
    }[name]
    previous = os.environ.get("MPSLINALG_METAL_ON_CUDA")
    if name == "cuda-metal":
        os.environ["MPSLINALG_METAL_ON_CUDA"] = "1"
    try:
        with mpslinalg.use_backend(chosen.backend):
            yield chosen
    finally:
        if name == "cuda-metal":
            if previous is None:
                os.environ.pop("MPSLINALG_METAL_ON_CUDA", None)
            else:
                os.environ["MPSLINALG_METAL_ON_CUDA"] = previous
