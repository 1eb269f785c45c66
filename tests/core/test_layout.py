"""The package's layout: no module shadows a public function, and the emulator imports nothing
of the rest of the library."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import mpslinalg
import mpslinalg.ops


def test_no_module_shadows_a_public_function():
    for package in (mpslinalg, mpslinalg.ops):
        for name in package.__all__:
            obj = getattr(package, name)
            if callable(obj) and not isinstance(obj, type):
                spec = importlib.util.find_spec(f"{package.__name__}.{name}")
                assert spec is None, f"module {package.__name__}.{name} shadows the function"


def test_emulator_imports_nothing_of_the_library():
    root = pathlib.Path(mpslinalg.__file__).parent / "emulator"
    for path in root.rglob("*.py"):
        text = path.read_text()
        # a relative import of more dots than the file is deep below emulator/ leaves it
        outside = r"\." * (len(path.relative_to(root).parts) + 1)
        assert not re.search(rf"^\s*from {outside}|^\s*import mpslinalg(?!\.emulator)|"
                             r"from mpslinalg(?!\.emulator)", text, re.M), path
