"""What this machine can run: the facts behind ``python -m mpslinalg info``."""

from __future__ import annotations

import platform
import re
import sys

import torch

MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 6)
MIN_MACOS = (15,)


def _version_tuple(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "2.6.0a0+git" -> (2, 6, 0)."""
    match = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def torch_at_least(*version: int) -> bool:
    """Whether the torch imported is at least ``version`` (e.g. 2, 13), pre-releases included."""
    return _version_tuple(torch.__version__)[:len(version)] >= version


def mps_unavailable_reasons() -> list[str]:
    """Every reason, in plain words, why the Apple GPU cannot run mpslinalg's kernels here
    (empty when it can)."""
    reasons = []
    system = platform.system()
    if system != "Darwin":
        reasons.append(f"this is not macOS (the operating system is {system or 'unknown'})")
    else:
        mac = platform.mac_ver()[0]
        if mac and _version_tuple(mac) < MIN_MACOS:
            reasons.append(f"macOS {mac} is older than 15 (Metal Shading Language 3.2 is needed)")
    if sys.version_info[:2] < MIN_PYTHON:
        reasons.append(f"Python {platform.python_version()} is older than 3.11")
    if _version_tuple(torch.__version__) < MIN_TORCH:
        reasons.append(f"torch {torch.__version__} is older than 2.6 (no compile_shader)")
    if not torch.backends.mps.is_built():
        reasons.append(f"torch {torch.__version__} was built without MPS support")
    elif not torch.backends.mps.is_available():
        reasons.append("no Metal device is available at runtime")
    return reasons


def emulator_unavailable_reasons() -> list[str]:
    """Why the emulator (the metal backend on CPU tensors) cannot run here: empty if it can."""
    from ..emulator.build import unsupported_platform

    reason = unsupported_platform()
    if reason is not None:
        return [reason.removeprefix("mpslinalg.emulator ")]
    if find_cxx() is None:
        return ["no C++ compiler found (set $CXX or install g++ or clang++)"]
    return []


def find_cxx() -> str | None:
    """The C++ compiler the emulator would use ($CXX, else c++, g++, clang++), or None."""
    from ..emulator import find_compiler

    return find_compiler()


def default_device() -> torch.device:
    return torch.device("mps") if not mps_unavailable_reasons() else torch.device("cpu")
