"""Every public function's Examples section runs as a doctest and prints what it shows."""

from __future__ import annotations

import doctest
import inspect

import pytest
import torch

import mpslinalg
import mpslinalg.testing
from mpslinalg._core import backend as _backend


def _public_objects():
    for name in mpslinalg.__all__:
        yield f"mpslinalg.{name}", getattr(mpslinalg, name)
    for name, obj in vars(mpslinalg.testing).items():
        if not name.startswith("_") and inspect.isfunction(obj) and \
                obj.__module__ == "mpslinalg.testing":
            yield f"mpslinalg.testing.{name}", obj
    yield "mpslinalg.testing", mpslinalg.testing


PUBLIC = dict(_public_objects())


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_examples(name):
    obj = PUBLIC[name]
    if not inspect.ismodule(obj) and not callable(obj):
        pytest.skip(f"{name} is not a function")
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    examples = [t for t in tests if t.examples]
    if inspect.isfunction(obj) or inspect.ismodule(obj):
        assert examples, f"{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    saved = _backend._global_backend  # set_backend's example changes the process-wide choice
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            for test in examples:
                runner.run(test)
    finally:
        _backend._global_backend = saved
    assert runner.failures == 0, f"{name}: {runner.failures} failing example(s), see the output"
