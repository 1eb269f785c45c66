"""Loading the small path's native CPU libraries (the generated C++ of
`mpslinalg.small.cpu_simd`), which the build backend compiled when the package was built or
installed.

``CMakeLists.txt`` compiles ``native/<name>.cpp`` into ``mpslinalg/_native/<name>.so`` inside
the package (the wheel, or the install tree of an editable install, which is on the package's
``__path__``). A `NativeLibrary` loads it with ctypes when it is created, that is when
`mpslinalg` is imported: nothing is compiled at run time, no thread is started, and every call
takes the same path from the first one on. Where the library is not there, every call takes the
fallback (whole-batch tensor ops or torch.linalg) from the first one on, and ``status`` says
why: switched off (``MPSLINALG_NATIVE=0``), or not in this installation (built where CMake found
no C++ compiler, or a source checkout that was never installed), both `NativeUnavailableError`;
or there but not loadable (another architecture's file, a broken build), `NativeBuildError`, a
defect. `warn_absent` warns once for all of them; ``python -m mpslinalg info`` prints the
status.

Examples
--------
>>> from mpslinalg.small import cpu_simd
>>> cpu_simd.LIBRARY.wait() is cpu_simd.LIBRARY.loaded  # loaded (or not) at import: no wait
True
"""

from __future__ import annotations

import ctypes
import logging
import os
import pathlib
import sys
import warnings
from collections.abc import Callable, Iterable

log = logging.getLogger("mpslinalg.small")

#: Environment switch: "0": the native libraries are not loaded (the small path then uses
#: whole-batch tensor ops or torch.linalg on CPU).
ENABLE_VAR = "MPSLINALG_NATIVE"

#: Where the build installs the libraries, relative to each directory of the package's
#: ``__path__`` (see CMakeLists.txt).
SUBDIR = "_native"


class NativeUnavailableError(RuntimeError):
    """The library is not in this installation (built without a C++ compiler, or never built),
    or ``MPSLINALG_NATIVE=0``."""


class NativeBuildError(RuntimeError):
    """The installed library does not load or lacks a kernel: a defect, not a property of the
    machine. The message holds the loader's."""


def package_directories() -> list[pathlib.Path]:
    """The directories the libraries are looked for in: ``_native`` of every directory of the
    package's ``__path__`` (one in a wheel; the install tree, then the source tree, in an
    editable install)."""
    package = sys.modules[__name__.split(".")[0]]
    return [pathlib.Path(entry) / SUBDIR for entry in package.__path__]


class NativeLibrary:
    """One installed library, loaded (or found absent) when it is created.

    ``loaded`` is the `ctypes.CDLL` or None (read directly by code that torch.compile traces),
    ``path`` the file loaded, ``status`` one line saying which, ``error`` why it is not loaded
    (a `NativeUnavailableError` or a `NativeBuildError`; None when loaded).
    """

    def __init__(self, name: str, bind: Callable[[ctypes.CDLL], None],
                 directories: Iterable[pathlib.Path] | None = None) -> None:
        self.name = name
        self.loaded: ctypes.CDLL | None = None
        self.path: pathlib.Path | None = None
        self.error: NativeUnavailableError | NativeBuildError | None = None
        if os.environ.get(ENABLE_VAR) == "0":
            self._absent(NativeUnavailableError(f"not used: disabled by {ENABLE_VAR}=0"))
            return
        searched = list(package_directories() if directories is None else directories)
        found = [d / f"{name}.so" for d in searched if (d / f"{name}.so").is_file()]
        if not found:
            where = ", ".join(str(d) for d in searched) or "no directory"
            self._absent(NativeUnavailableError(
                f"not in this installation (no {name}.so in {where}): the package was built "
                "where CMake found no C++ compiler, or this source checkout was never "
                "installed (pip install -e . builds it)"))
            return
        self.path = found[0]
        try:
            lib = ctypes.CDLL(str(self.path))
            bind(lib)
        except (OSError, AttributeError) as exc:  # another platform's file, or a stale build
            self._absent(NativeBuildError(f"{self.path} does not load: {exc}"))
            return
        self.loaded = lib
        self.status = f"loaded from {self.path}"
        log.debug("native library %s: %s", name, self.status)

    def _absent(self, error: NativeUnavailableError | NativeBuildError) -> None:
        self.error = error
        self.status = str(error)
        log.debug("native library %s: %s", self.name, self.status)

    def wait(self) -> ctypes.CDLL | None:
        """The library or None, at once: it was loaded (or found absent) when created."""
        return self.loaded

    def require(self) -> ctypes.CDLL:
        """The library; raises `NativeUnavailableError` where it is not installed (or switched
        off) and `NativeBuildError` where the installed file does not load."""
        if self.loaded is None:
            raise self.error
        return self.loaded


def warn_absent(libraries: Iterable[NativeLibrary]) -> None:
    """One warning naming the libraries that are not loaded and why the first is not (one
    installation's libraries miss for one reason), unless switched off on purpose
    (``MPSLINALG_NATIVE=0``); nothing where all are loaded."""
    if os.environ.get(ENABLE_VAR) == "0":
        return
    missing = [lib for lib in libraries if lib.loaded is None]
    if missing:
        warnings.warn(f"mpslinalg: the native n <= 4 CPU kernels "
                      f"({', '.join(lib.name for lib in missing)}) are not loaded: "
                      f"{missing[0].status}; tensor ops or torch.linalg serve those calls "
                      f"(python -m mpslinalg info says more; {ENABLE_VAR}=0 silences this)",
                      RuntimeWarning, stacklevel=2)
