"""Backend choice: which implementation runs a call (DESIGN.md section 3).

``"torch"`` delegates to torch.linalg; ``"metal"`` runs mpslinalg's Metal kernels, on the Apple
GPU for MPS tensors and in :mod:`mpslinalg.emulator` for CPU tensors; ``"auto"`` picks metal for
MPS tensors and torch otherwise. The choice is process-wide (``set_backend``, the
``MPSLINALG_BACKEND`` variable) with a thread-local override (``use_backend``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import torch

BACKENDS = ("auto", "torch", "metal")
ENV_VAR = "MPSLINALG_BACKEND"

_local = threading.local()
_global_backend: str | None = None  # None: not set in this process, read the environment


def _validate(name: object, where: str) -> str:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(
            f"mpslinalg.{where}: unknown backend {name!r}; valid backends are "
            + ", ".join(repr(b) for b in BACKENDS)
        )
    return name


def set_backend(name: str) -> None:
    """Set the process-wide backend: ``"auto"`` (default), ``"torch"`` or ``"metal"``."""
    global _global_backend
    _global_backend = _validate(name, "set_backend")


def get_backend() -> str:
    """The backend in force for this thread: the innermost ``use_backend``, else the process-wide
    choice, else ``$MPSLINALG_BACKEND``, else ``"auto"``."""
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    if _global_backend is not None:
        return _global_backend
    env = os.environ.get(ENV_VAR)
    if env:
        return _validate(env.strip().lower(), f"get_backend (from ${ENV_VAR})")
    return "auto"


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use ``name`` for calls made by this thread inside the ``with`` block (nestable)."""
    _validate(name, "use_backend")
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()


def resolve_backend(device: torch.device, fn: str) -> str:
    """The concrete backend ("torch" or "metal") for a call of ``fn`` on a tensor on ``device``."""
    name = get_backend()
    if name == "auto":
        return "metal" if device.type == "mps" else "torch"
    if name == "metal" and device.type not in ("mps", "cpu"):
        raise RuntimeError(
            f"mpslinalg.{fn}: the metal backend runs on MPS tensors (Apple GPU) or CPU tensors "
            f"(the emulator), got a tensor on {device.type!r}; use the torch backend for it"
        )
    return name
