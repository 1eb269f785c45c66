"""Backend choice: which implementation runs a call.

``"torch"`` delegates to torch.linalg; ``"metal"`` runs mpslinalg's Metal kernels, on the Apple
GPU for MPS tensors and in `mpslinalg.emulator` for CPU tensors; ``"auto"`` picks metal for
MPS tensors and torch otherwise. The choice is process-wide (``set_backend``, the
``MPSLINALG_BACKEND`` variable) with a thread-local override (``use_backend``).

Every public call reads the backend in force once (``fast_mode or get_backend()``, inlined in
the generated public functions, `mpslinalg._core.op.public`) and hands it down: that read costs
a few hundred nanoseconds (two module globals, and the thread-local stack only while some
thread is inside a ``use_backend`` block); `concrete_backend` turns it into "torch" or "metal"
for the call's device.
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
#: ``$MPSLINALG_BACKEND`` as read when mpslinalg was imported (``read_environment`` again).
_env_backend: str | None = None
#: Number of ``use_backend`` blocks open in any thread; while 0 the thread-local stack is empty
#: everywhere and the process-wide choice decides alone.
_open_blocks = 0
_count_lock = threading.Lock()
#: What the fast path may assume of every thread: "auto" or "torch" when no ``use_backend``
#: block is open anywhere and that is the process-wide choice, else None (ask get_backend).
fast_mode: str | None = "auto"


def _update_fast_mode() -> None:
    global fast_mode
    name = _global_backend or _env_backend or "auto"
    fast_mode = name if _open_blocks == 0 and name in ("auto", "torch") else None


def _validate(name: object, where: str) -> str:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(
            f"{where}: unknown backend {name!r}; valid backends are "
            + ", ".join(repr(b) for b in BACKENDS)
        )
    return name


def set_backend(name: str) -> None:
    """Set the process-wide backend.

    Parameters
    ----------
    name : str
        ``"auto"`` (the default: metal for MPS tensors, torch otherwise), ``"torch"`` or
        ``"metal"``. Overrides ``$MPSLINALG_BACKEND``; ``use_backend`` blocks override it.

    Examples
    --------
    >>> import mpslinalg
    >>> mpslinalg.set_backend("torch")
    >>> mpslinalg.get_backend()
    'torch'
    >>> mpslinalg.set_backend("auto")
    """
    global _global_backend
    _global_backend = _validate(name, "mpslinalg.set_backend")
    _update_fast_mode()


def read_environment() -> None:
    """Read ``$MPSLINALG_BACKEND`` (done once at import; a per-call read would cost more than
    the rest of the backend choice). An unknown name raises ValueError, so that a misspelt
    variable stops the import rather than the first call."""
    global _env_backend
    env = os.environ.get(ENV_VAR, "").strip().lower()
    _env_backend = _validate(env, f"mpslinalg: ${ENV_VAR}") if env else None
    _update_fast_mode()


def _process_backend() -> str:
    return _global_backend or _env_backend or "auto"


def get_backend() -> str:
    """The backend in force for this thread.

    Returns
    -------
    str
        The innermost ``use_backend`` block's, else the process-wide choice
        (``set_backend``), else ``$MPSLINALG_BACKEND``, else ``"auto"``.

    Examples
    --------
    >>> import mpslinalg
    >>> with mpslinalg.use_backend("metal"):
    ...     mpslinalg.get_backend()
    'metal'
    """
    if _open_blocks:
        stack = getattr(_local, "stack", None)
        if stack:
            return stack[-1]
    return _process_backend()


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use ``name`` for the calls this thread makes inside the ``with`` block (nestable).

    Parameters
    ----------
    name : str
        ``"auto"``, ``"torch"`` or ``"metal"``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.eye(3)
    >>> with mpslinalg.use_backend("metal"):   # the Metal kernels, here in the CPU emulator
    ...     mpslinalg.det(A)
    tensor(1.)
    """
    global _open_blocks
    _validate(name, "mpslinalg.use_backend")
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(name)
    with _count_lock:
        _open_blocks += 1
        _update_fast_mode()
    try:
        yield
    finally:
        stack.pop()
        with _count_lock:
            _open_blocks -= 1
            _update_fast_mode()


def concrete_backend(name: str, device: torch.device, fn: str) -> str:
    """The concrete backend ("torch" or "metal") for a call of ``fn`` on a tensor on ``device``
    when ``name`` ("auto", "torch" or "metal") is in force."""
    if name == "auto":
        return "metal" if device.type == "mps" else "torch"
    if name == "metal" and device.type not in ("mps", "cpu", "meta"):
        from .metal import metal_on_cuda

        if not (device.type == "cuda" and metal_on_cuda()):
            raise RuntimeError(
                f"mpslinalg.{fn}: the metal backend runs on MPS tensors (Apple GPU) or CPU "
                f"tensors (the emulator), got a tensor on {device.type!r}; use the torch "
                "backend for it (or set MPSLINALG_METAL_ON_CUDA=1 to run the Metal kernels "
                "through the CUDA executor)")
    return name


def resolve_backend(device: torch.device, fn: str) -> str:
    """`concrete_backend` of the backend in force for this thread."""
    return concrete_backend(get_backend(), device, fn)


#: dtypes torch.linalg computes in natively (the others are upcast by mpslinalg).
TORCH_NATIVE = frozenset((torch.float32, torch.float64, torch.complex64, torch.complex128))
#: Every dtype: the fast path of a function torch computes in any dtype itself (integers,
#: float16 included), whose general path on the torch backend serves its through_op alone.
EVERY_DTYPE = frozenset(d for d in vars(torch).values() if isinstance(d, torch.dtype))


read_environment()
