"""The committed notebooks carry their executed outputs: every code cell run once, in order,
without an error, and each with a figure. (.ci/run executes them again and fails on any error.)"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_with_outputs_in_order_without_errors(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1)), \
        f"{path.name}: not executed top to bottom in one run (python notebooks/run_notebooks.py)"
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} has no figure"


#: The modules the API pages document; anything else of mpslinalg is internal.
PUBLIC_MODULES = {"mpslinalg", "mpslinalg.ops", "mpslinalg.ops.streams", "mpslinalg.testing",
                  "mpslinalg.emulator"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_use_only_the_public_api(path):
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code")
    imported = set(re.findall(r"^\s*(?:from|import) (mpslinalg[\w.]*)", code, re.M))
    assert imported <= PUBLIC_MODULES, f"{path.name} imports {sorted(imported - PUBLIC_MODULES)}"
    assert not re.findall(r"mpslinalg(?:\.\w+)*\._(?!_)", code), f"{path.name} uses a private name"
