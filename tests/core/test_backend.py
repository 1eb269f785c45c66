import os
import subprocess
import sys
import threading

import pytest
import torch

import mpslinalg
from mpslinalg._core import backend as _backend


@pytest.fixture(autouse=True)
def _restore_global_backend(monkeypatch):
    monkeypatch.setattr(_backend, "_global_backend", None)
    monkeypatch.delenv(_backend.ENV_VAR, raising=False)
    _backend.read_environment()
    yield
    monkeypatch.undo()
    _backend.read_environment()


def test_default_is_auto():
    assert mpslinalg.get_backend() == "auto"


def test_set_backend_and_unknown_name():
    mpslinalg.set_backend("torch")
    assert mpslinalg.get_backend() == "torch"
    with pytest.raises(ValueError,
                       match=r"set_backend: unknown backend 'cuda'.*'auto', 'torch', 'metal'"):
        mpslinalg.set_backend("cuda")
    assert mpslinalg.get_backend() == "torch"


def test_use_backend_nests_and_restores_on_exception():
    with mpslinalg.use_backend("metal"):
        assert mpslinalg.get_backend() == "metal"
        with mpslinalg.use_backend("torch"):
            assert mpslinalg.get_backend() == "torch"
        assert mpslinalg.get_backend() == "metal"
        with pytest.raises(KeyError), mpslinalg.use_backend("torch"):
            raise KeyError("boom")
        assert mpslinalg.get_backend() == "metal"
    assert mpslinalg.get_backend() == "auto"
    with pytest.raises(ValueError, match="use_backend: unknown backend"):
        with mpslinalg.use_backend("gpu"):
            pass


def test_environment_variable(monkeypatch):
    monkeypatch.setenv(_backend.ENV_VAR, "metal")
    _backend.read_environment()  # read once, at import
    assert mpslinalg.get_backend() == "metal"
    mpslinalg.set_backend("torch")  # an explicit choice wins over the environment
    assert mpslinalg.get_backend() == "torch"
    monkeypatch.setattr(_backend, "_global_backend", None)
    monkeypatch.setenv(_backend.ENV_VAR, "vulkan")
    with pytest.raises(ValueError, match=r"^mpslinalg: \$MPSLINALG_BACKEND: unknown backend "
                                         r"'vulkan'; valid backends are 'auto', 'torch', 'metal'$"):
        _backend.read_environment()
    assert mpslinalg.get_backend() == "metal"  # the last valid reading stays


def test_environment_variable_in_fresh_process():
    env = dict(os.environ, MPSLINALG_BACKEND="torch")
    out = subprocess.run([sys.executable, "-c", "import mpslinalg; print(mpslinalg.get_backend())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "torch"


def test_unknown_environment_backend_fails_the_import():
    """The variable is read at import (as documented), so a misspelt one stops the import
    with the valid names, before any call could run on a backend nobody chose."""
    env = dict(os.environ, MPSLINALG_BACKEND="gpu")
    out = subprocess.run([sys.executable, "-c", "import mpslinalg"], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == (
        "ValueError: mpslinalg: $MPSLINALG_BACKEND: unknown backend 'gpu'; valid backends are "
        "'auto', 'torch', 'metal'")


def test_use_backend_is_thread_local():
    barrier = threading.Barrier(2)
    seen = {}

    def worker(name):
        with mpslinalg.use_backend(name):
            barrier.wait()  # both threads are inside their own block at once
            seen[name] = mpslinalg.get_backend()
            barrier.wait()
        seen[name + "-after"] = mpslinalg.get_backend()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("torch", "metal")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"torch": "torch", "metal": "metal", "torch-after": "auto",
                    "metal-after": "auto"}
    assert mpslinalg.get_backend() == "auto"


@pytest.mark.parametrize(
    "choice, device, expected",
    [("auto", "cpu", "torch"), ("auto", "mps", "metal"), ("auto", "cuda", "torch"),
     ("metal", "cpu", "metal"), ("metal", "mps", "metal"), ("torch", "mps", "torch")],
)
def test_resolve_backend(choice, device, expected):
    with mpslinalg.use_backend(choice):
        assert _backend.resolve_backend(torch.device(device), "solve") == expected


def test_metal_backend_rejects_cuda_tensors():
    with mpslinalg.use_backend("metal"):
        with pytest.raises(RuntimeError, match=r"mpslinalg.solve: the metal backend .* 'cuda'"):
            _backend.resolve_backend(torch.device("cuda"), "solve")
