"""The checked-in files generated from the n <= 4 descriptions of `mpslinalg.small.codegen`.

Generated sources live in the repository (and in the sdist) so that neither a build nor an
import has to run the generators: the build backend compiles the C++ as it finds it, Metal reads
its headers as it finds them. `GENERATED` maps each file (relative to the repository root) to
the function that writes its text; ``python -m mpslinalg.small.generated`` rewrites every stale
file and ``--check`` only lists them (exit status 1), which is what the test suite runs.

Examples
--------
>>> from mpslinalg.small import generated
>>> all(isinstance(path, str) and callable(make) for path, make in generated.GENERATED.items())
True
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
from collections.abc import Callable

#: Repository root: the generated files are written relative to it.
ROOT = pathlib.Path(__file__).resolve().parents[2]

#: The modules that register generated files (imported by `targets`, never at package import).
PRODUCERS: tuple[str, ...] = ("mpslinalg.small.cpu_simd", "mpslinalg.small.metal_kernels")

#: Repository-relative path -> the function returning the file's text.
GENERATED: dict[str, Callable[[], str]] = {}


def generates(path: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    """Register ``make`` as the writer of the generated file ``path``."""

    def register(make: Callable[[], str]) -> Callable[[], str]:
        if path in GENERATED and GENERATED[path] is not make:
            raise ValueError(f"mpslinalg.small.generated: {path} has two writers")
        GENERATED[path] = make
        return make

    return register


def targets() -> dict[str, Callable[[], str]]:
    """Every registered generated file, after importing the producer modules."""
    for module in PRODUCERS:
        importlib.import_module(module)
    return dict(GENERATED)


def stale(root: pathlib.Path = ROOT) -> list[str]:
    """The generated files whose checked-in text differs from what their writer produces."""
    out = []
    for path, make in sorted(targets().items()):
        file = root / path
        if not file.is_file() or file.read_text() != make():
            out.append(path)
    return out


def regenerate(root: pathlib.Path = ROOT) -> list[str]:
    """Rewrite every stale generated file; returns their paths."""
    written = stale(root)
    for path in written:
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(GENERATED[path]())
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpslinalg.small.generated",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only list the stale files (exit status 1 if there are any)")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the tree holding the generated files (default: this checkout)")
    args = parser.parse_args(argv)
    paths = stale(args.root) if args.check else regenerate(args.root)
    for path in paths:
        print(("stale: " if args.check else "wrote: ") + path)
    return 1 if args.check and paths else 0


if __name__ == "__main__":
    # Through the imported module: the producers register with mpslinalg.small.generated, not
    # with this __main__ copy of it.
    from mpslinalg.small import generated as _registry

    sys.exit(_registry.main())
