"""The one model of a compiled Metal library and its kernels, behind torch's
``_mps_ShaderLibrary`` / ``_mps_MetalKernel`` calling convention, with two back ends: the CPU
runtime (`mpslinalg.emulator.runtime`) and the CUDA executor (`mpslinalg.emulator.cuda`).

`Library` finds kernels by host name (as attributes; ``dir()`` lists them) and is read-only;
`Kernel.__call__` is the launch of both executors: torch's argument casts, the back end's binding
of the arguments (through `mpslinalg.emulator.marshal`), torch's ``dispatchThreads`` geometry,
Apple's threadgroup memory limit, the launch counters, then the back end's launch.
"""

from __future__ import annotations

import threading

from . import marshal

__all__ = ["Library", "Kernel", "KernelNotFoundError"]


class KernelNotFoundError(RuntimeError, AttributeError):
    """torch raises RuntimeError for an unknown kernel name; also an AttributeError so that
    hasattr() and introspection tools behave."""


class Kernel:
    """A compute pipeline, called like torch's MetalKernel:
    ``kernel(*args, threads=, group_size=, arg_casts=)`` plus the back end's own options.

    A back end sets ``executor`` (for messages) and implements `_options`, `_bind` and
    `_launch`.
    """

    executor = ""

    def __init__(self, info, max_threads: int, tg_memory: int):
        self._info = info
        self._max = max_threads
        self._tg = tg_memory
        self.name = info.host_name

    @property
    def max_threads_per_threadgroup(self) -> int:
        return self._max

    @property
    def thread_execution_width(self) -> int:
        return marshal.SIMD_WIDTH

    @property
    def static_thread_group_memory_length(self) -> int:
        return self._tg

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None, error_buf_idx=None,
                 **options):
        if error_buf_idx is not None:
            raise NotImplementedError(f"error_buf_idx is not supported by the {self.executor}")
        launch_options = self._options(**options)
        bound = self._bind(args, marshal.casts_for(arg_casts, len(args)))
        grid, group = marshal.dispatch_geometry(self.name, self._max, args, threads, group_size)
        if self._tg > marshal.TG_MEMORY_LIMIT:
            raise RuntimeError(
                f"kernel '{self.name}': threadgroup memory use {self._tg} bytes exceeds the "
                f"{marshal.TG_MEMORY_LIMIT}-byte limit of Apple GPUs"
            )
        if 0 in group and 0 not in grid:  # an empty grid runs nothing, whatever its groups
            raise ValueError(
                f"kernel '{self.name}': group_size must be positive, got {group_size!r}"
            )
        self._geometry_checked(threads, group_size, grid, group)
        marshal.count_launch(self.name)
        if 0 in grid:
            return None
        self._launch(bound, grid, group, launch_options)
        return None

    def _geometry_checked(self, threads, group_size, grid, group):
        """Told of every geometry that passed the checks (the CUDA executor keeps them)."""

    def _options(self, **options):
        """The back end's launch options, checked (none by default)."""
        if options:
            raise TypeError(
                f"{type(self).__name__}.__call__() got an unexpected keyword argument "
                f"{next(iter(options))!r}"
            )
        return None

    def _bind(self, args, casts):
        """The arguments as the back end passes them, checked against the kernel's parameters."""
        raise NotImplementedError

    def _launch(self, bound, grid, group, options):
        """Run the kernel on the bound arguments (``grid`` and ``group`` have three non-zero
        dimensions)."""
        raise NotImplementedError

    def _missing_buffer(self, name, buffer, nargs):
        return RuntimeError(
            f"kernel '{self.name}': parameter '{name}' (buffer {buffer}): the kernel reads buffer "
            f"{buffer} but only {nargs} arguments were passed"
        )


class Library:
    """What ``compile_shader`` returns: kernels as attributes, ``dir()`` lists the host names.

    A back end sets ``description`` (for ``repr``) and ``read_only`` (the message of an
    assignment), and implements `_load` (and `_kernel_key` where one name has several kernels).
    """

    description = "Metal library"
    read_only = "Metal libraries are read-only"

    def __init__(self, kernels):
        self._set(
            _infos={k.host_name: (i, k) for i, k in enumerate(kernels)},
            _kernels={},
            _lock=threading.Lock(),
        )

    def _set(self, **attributes):
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    def _kernel_key(self, name):
        """The key of the loaded kernel ``name`` (the CUDA executor's is per device)."""
        return name

    def _load(self, index, info, key):
        """The back end's `Kernel` number ``index`` of the library."""
        raise NotImplementedError

    def __getattr__(self, name):
        infos = self.__dict__.get("_infos")
        if infos is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        entry = infos.get(name)
        if entry is None:
            avail = ", ".join(sorted(self._infos)) or "(none)"
            raise KernelNotFoundError(
                f"Failed to create function state object for: {name} (available kernels: {avail})"
            )
        key = self._kernel_key(name)
        k = self._kernels.get(key)
        if k is not None:
            return k
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = self._load(entry[0], entry[1], key)
                self._kernels[key] = k
            return k

    def __setattr__(self, name, value):
        raise AttributeError(self.read_only)

    def __dir__(self):
        return sorted(self._infos)

    def __repr__(self):
        return f"<{self.description}: {', '.join(sorted(self._infos))}>"
