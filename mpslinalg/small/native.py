"""Building and loading the small path's native CPU library (the generated C++ of
`mpslinalg.small.cpu_simd`), without ever making a call wait for the compiler.

The library is built once per (source, flags, compiler), with the compiler and cache directory
the emulator uses (``$CXX``; ``$MPSLINALG_CACHE_DIR``, else the user cache), atomically, so
concurrent processes are safe.
`start` runs the build on a daemon thread; it is started when `mpslinalg` is
imported (``MPSLINALG_NATIVE=0`` turns it off), so with a warm cache the library is loaded
within milliseconds and with a cold one within the compile time (about 7 s of CPU), while calls
in the meantime take torch.linalg. A library that is not there warns once, saying why, and the
small path then runs without it. Why it is not there is one of two different things, which
`NativeLibrary.require` tells apart: no C++ compiler on this machine (or the build switched
off), `NativeUnavailableError`; or a compiler that ran and failed, `NativeBuildError`, carrying
its messages.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import pathlib
import subprocess
import threading
import warnings
from collections.abc import Callable

from ..emulator.build import build_once, cache_dir, find_compiler  # one compiler, cache, lock

log = logging.getLogger("mpslinalg.small")

#: Environment switch: "0" disables building the native library (the small path then uses
#: whole-batch tensor ops or torch.linalg on CPU).
ENABLE_VAR = "MPSLINALG_NATIVE"


class NativeUnavailableError(RuntimeError):
    """The library cannot be built here: no C++ compiler, or ``MPSLINALG_NATIVE=0``."""


class NativeBuildError(RuntimeError):
    """The compiler ran and the build failed (or its library did not load): a defect, not a
    property of the machine. The message holds the compiler's."""


def build(source: str, flags: list[str], cxx: str, name: str) -> pathlib.Path:
    """Compile one self-contained C++ source into a shared library in the cache (or return the
    cached one). Raises `NativeBuildError` with the compiler's messages when compilation
    fails."""
    key = hashlib.sha256(json.dumps([source, flags, os.path.basename(cxx)]).encode()).hexdigest()

    def compile_into(tmp: pathlib.Path) -> pathlib.Path:
        src, so = tmp / f"{name}.cpp", tmp / f"{name}.so"
        src.write_text(source)
        try:
            proc = subprocess.run([cxx, *flags, str(src), "-o", str(so)], capture_output=True)
        except OSError as exc:  # found, but cannot be run: a broken $CXX
            raise NativeBuildError(f"{cxx} could not be run: {exc}") from exc
        if proc.returncode != 0:
            raise NativeBuildError(f"{cxx} failed (exit status {proc.returncode}):\n"
                                   + proc.stderr.decode(errors="replace")[:2000])
        return so

    # one build per library across processes and threads (the emulator's cache discipline)
    return build_once(cache_dir() / "native" / f"{name}-{key[:24]}.so", compile_into)


class NativeLibrary:
    """One library built in the background: ``get()`` never waits, ``wait()`` does."""

    def __init__(self, name: str, make_source: Callable[[], str], flags: list[str],
                 bind: Callable[[ctypes.CDLL], None]) -> None:
        self.name = name
        self._make_source, self._flags, self._bind = make_source, flags, bind
        #: The loaded library, or None (read directly by code that torch.compile traces).
        self.loaded: ctypes.CDLL | None = None
        self._done = threading.Event()
        self._started = False
        self._lock = threading.Lock()
        self.status = "not started"
        #: Why the library is not loaded once the build has finished without it: a
        #: `NativeUnavailableError` or a `NativeBuildError` (None otherwise).
        self.error: NativeUnavailableError | NativeBuildError | None = None

    def start(self) -> None:
        """Build (or load from the cache) on a daemon thread, once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        if os.environ.get(ENABLE_VAR) == "0":
            self._finish(None, NativeUnavailableError(f"disabled by {ENABLE_VAR}=0"))
            return
        self.status = "building"
        threading.Thread(target=self._build, name=f"mpslinalg-{self.name}", daemon=True).start()

    def _build(self) -> None:
        cxx = find_compiler()
        if cxx is None:
            self._finish(None, NativeUnavailableError(
                "no C++ compiler ($CXX, c++, g++ or clang++)"), warn=True)
            return
        try:
            lib = ctypes.CDLL(str(build(self._make_source(), self._flags, cxx, self.name)))
            self._bind(lib)
        except NativeBuildError as exc:
            self._finish(None, exc, warn=True)
            return
        except (OSError, AttributeError) as exc:  # built, but it does not load or bind
            self._finish(None, NativeBuildError(f"the built library does not load: {exc}"),
                         warn=True)
            return
        except Exception as exc:  # the source's generator: a defect, and wait() must return
            self._finish(None, NativeBuildError(f"generating the source failed: {exc!r}"),
                         warn=True)
            return
        self._finish(lib, None)

    def _finish(self, lib: ctypes.CDLL | None,
                error: NativeUnavailableError | NativeBuildError | None,
                warn: bool = False) -> None:
        self.loaded, self.error = lib, error
        if error is None:
            self.status = "ready"
        elif isinstance(error, NativeBuildError):
            self.status = f"the build failed: {error}"
        else:
            self.status = str(error)
        log.debug("native library %s: %s", self.name, self.status)
        if warn:
            warnings.warn(f"mpslinalg: the native small-matrix CPU kernels are not available "
                          f"({self.status}); torch.linalg serves those calls instead",
                          RuntimeWarning, stacklevel=2)
        self._done.set()

    def get(self) -> ctypes.CDLL | None:
        """The library if it is loaded, else None (and the build is started)."""
        if self.loaded is None and not self._started:
            self.start()
        return self.loaded

    def wait(self, timeout: float | None = None) -> ctypes.CDLL | None:
        """The library, waiting for the build (None if it failed or timed out)."""
        self.start()
        self._done.wait(timeout)
        return self.loaded

    def require(self) -> ctypes.CDLL:
        """The library, waiting for the build; raises `NativeUnavailableError` where it cannot
        be built here (no compiler, or switched off) and `NativeBuildError`, with the
        compiler's messages, where the build failed."""
        lib = self.wait()
        if lib is None:
            raise self.error  # set before the build's end is signalled
        return lib
