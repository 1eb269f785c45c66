"""The documentation tells the truth: result types, readable docstrings, resolvable links."""

from __future__ import annotations

import inspect
import pathlib
import re
import zlib

import pytest
import torch

import mpslinalg
import mpslinalg.ops
import mpslinalg.testing

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def _result_type_rows() -> list[tuple[str, str, tuple[str, ...]]]:
    """(function, result type, fields) from docs/result_types.rst's table."""
    text = (DOCS / "result_types.rst").read_text()
    rows = re.findall(r"\* - `mpslinalg\.(\w+)`\n\s+- ``torch\.return_types\.(\w+)``\n"
                      r"\s+- (.+)\n", text)
    return [(fn, kind, tuple(re.findall(r"``(\w+)``", fields))) for fn, kind, fields in rows]


def _inputs(name: str):
    g = torch.Generator().manual_seed(0)
    A = torch.randn(2, 4, 4, generator=g) + 4 * torch.eye(4)
    B = torch.randn(2, 4, 2, generator=g)
    return (A, B) if name in ("solve_ex", "lstsq") else (A,)


ROWS = _result_type_rows()


def test_the_table_lists_every_function_it_should():
    assert {fn for fn, _, _ in ROWS} >= {"inv_ex", "solve_ex", "lu_factor", "lu_factor_ex", "lu",
                                         "slogdet", "qr", "geqrf", "lstsq"}


@pytest.mark.parametrize("backend", ["torch", "metal"])
@pytest.mark.parametrize("fn, kind, fields", ROWS, ids=[r[0] for r in ROWS])
def test_result_types_are_documented_as_returned(fn, kind, fields, backend):
    with mpslinalg.use_backend(backend):
        result = getattr(mpslinalg, fn)(*_inputs(fn))
    assert type(result).__name__ == kind
    assert type(result).__match_args__ == fields


def _public_docstrings():
    objects = [(f"mpslinalg.{n}", getattr(mpslinalg, n)) for n in mpslinalg.__all__]
    objects += [(f"mpslinalg.ops.{n}", getattr(mpslinalg.ops, n))
                for n in getattr(mpslinalg.ops, "__all__", [])]
    objects += [(f"mpslinalg.testing.{n}", o) for n, o in vars(mpslinalg.testing).items()
                if inspect.isfunction(o) and o.__module__ == "mpslinalg.testing"
                and not n.startswith("_")]
    objects += [("mpslinalg", mpslinalg), ("mpslinalg.ops", mpslinalg.ops),
                ("mpslinalg.testing", mpslinalg.testing)]
    return [(name, inspect.getdoc(obj) or "") for name, obj in objects]


def test_docstrings_read_well_in_help():
    """Policy: `name` (single backticks) for references, which Sphinx links (default_role) and
    help() shows as plain text; ``code`` for literals; no Sphinx roles (:func:`x` reads badly)."""
    role = re.compile(r":(?:py:)?[a-z]+:`")
    offenders = [name for name, doc in _public_docstrings() if role.search(doc)]
    assert not offenders, f"Sphinx roles in the docstrings of {offenders}"


def test_external_references_are_in_the_committed_inventories():
    """Every torch / numpy / scipy name a public docstring references links somewhere: the docs
    build offline from docs/_intersphinx/*.inv (add a missing name to make_inventories.py there
    and run it)."""
    known = set()
    for path in (DOCS / "_intersphinx").glob("*.inv"):
        # Sphinx's inventory version 2: four header lines, then zlib "name domain:role ..." lines
        header, _, body = path.read_bytes().partition(b"compressed using zlib.\n")
        assert header.startswith(b"# Sphinx inventory version 2"), path
        known |= {line.split()[0] for line in zlib.decompress(body).decode().splitlines()}
    referenced = set()
    for _, doc in _public_docstrings():
        referenced |= set(re.findall(r"(?<!`)`((?:torch|numpy|scipy)\.[\w.]+)`(?!`)", doc))
    missing = sorted(r for r in referenced if r not in known and not r.startswith("torch.nn."
                     "functional._"))
    assert not missing, f"not in docs/_intersphinx: {missing}"


def test_testing_page_documents_every_public_helper():
    defined = {n for n, o in vars(mpslinalg.testing).items() if not n.startswith("_")
               and getattr(o, "__module__", None) == "mpslinalg.testing"}
    assert set(mpslinalg.testing.__all__) == defined | {"THRESH"}
    text = (DOCS / "testing.rst").read_text()
    members = re.search(r"automodule:: mpslinalg\.testing\n\s+:members: ([\w,\s]+?)\n\n?$", text)
    assert set(re.findall(r"\w+", members.group(1))) == set(mpslinalg.testing.__all__)


@pytest.mark.parametrize("page", ["index.rst", "api.rst"])
def test_the_list_of_missing_torch_linalg_functions_is_true(page):
    missing = {n for n in dir(torch.linalg) if not n.startswith("_")
               and callable(getattr(torch.linalg, n))} - set(mpslinalg.__all__)
    text = (DOCS / page).read_text()
    listed = re.search(r"Not provided yet \(call `torch\.linalg` for these\): (.*?)\.\n", text,
                       re.S)
    assert set(re.findall(r"``(\w+)``", listed.group(1))) == missing


def test_the_quick_start_installs_what_its_commands_need():
    index = (DOCS / "index.rst").read_text()
    block = re.search(r"Quick start\n-+\n\n\.\. code-block:: bash\n\n(.*?)\n\n", index, re.S)[1]
    extras = set(re.findall(r'pip install -e "\.\[([\w,-]+)\]"', block)[0].split(","))
    assert "test" in extras
    assert "--plot" not in block or "plot" in extras
