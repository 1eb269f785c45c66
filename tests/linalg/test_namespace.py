"""Every public function of torch.linalg exists in mpslinalg with torch's signature."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import mpslinalg

#: torch.linalg's names that mpslinalg lacks (none since the Cholesky / triangular family): the
#: test fails once one of them exists, so the list only shrinks.
NOT_YET: set[str] = set()


def _torch_linalg_functions() -> list[str]:
    return sorted(n for n in dir(torch.linalg)
                  if not n.startswith("_") and callable(getattr(torch.linalg, n))
                  and n != "LinAlgError")


def test_every_torch_linalg_function_exists():
    missing = [n for n in _torch_linalg_functions() if not hasattr(mpslinalg, n)]
    assert sorted(missing) == sorted(NOT_YET & set(_torch_linalg_functions())), missing


def test_not_yet_is_only_what_is_missing():
    assert not [n for n in NOT_YET if hasattr(mpslinalg, n)], "remove them from NOT_YET"


#: torch's builtins have no introspectable signature: their documented one (the first line of
#: the docstring) is the reference.
@pytest.mark.parametrize("name", [n for n in _torch_linalg_functions()
                                  if n not in NOT_YET and n != "vander"])
def test_signature_is_torchs(name):
    ours = inspect.signature(getattr(mpslinalg, name))
    doc = getattr(torch.linalg, name).__doc__ or ""
    head = doc.strip().splitlines()[0]
    start = head.index("(") + 1
    depth, end = 1, start
    while depth:  # the argument list's closing parenthesis (defaults hold tuples)
        depth += {"(": 1, ")": -1}.get(head[end], 0)
        end += 1
    documented = head[start:end - 1]
    names = [p.split("=")[0].split()[-1] for p in re.split(r",(?![^()]*\))", documented)
             if p.strip()]
    keyword_only = names[names.index("*") + 1:] if "*" in names else []
    positional = [n for n in names if n != "*" and n not in keyword_only]
    params = ours.parameters
    got_positional = [p.name for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    # torch's documented positional arguments first (legacy positional ones may follow:
    # matrix_rank's tol, pinv's rcond), each documented keyword accepted by keyword
    assert got_positional[:len(positional)] == positional, (name, head)
    assert all(n in params and params[n].kind in (inspect.Parameter.KEYWORD_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for n in keyword_only), (name, head)


def test_api_page_lists_every_function():
    """docs/api.rst's table names each function of torch.linalg, the missing ones too."""
    import pathlib

    api = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.rst").read_text()
    table = api[api.index("Every function of torch.linalg"):api.index("Errors and backends")]
    assert [n for n in _torch_linalg_functions() if f"``{n}``" not in table] == []


def test_vander_takes_n_by_keyword_as_torch_does():
    """torch's docstring shows ``vander(x, N=None)``, but its N is keyword-only."""
    x = torch.tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        torch.linalg.vander(x, 3)
    with pytest.raises(TypeError):
        mpslinalg.vander(x, 3)
    assert torch.equal(mpslinalg.vander(x, N=3), torch.linalg.vander(x, N=3))


@pytest.mark.parametrize("name", ("svd_lowrank", "pca_lowrank"))
def test_lowrank_signatures_are_torchs(name):
    """torch's top-level randomized decompositions (Python functions: exact signatures)."""
    ours = inspect.signature(getattr(mpslinalg, name))
    theirs = inspect.signature(getattr(torch, name))
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()]
