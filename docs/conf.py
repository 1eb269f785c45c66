"""Sphinx configuration for mpslinalg's documentation."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import mpslinalg  # noqa: E402

project = "mpslinalg"
author = "the mpslinalg developers"
copyright = "2026, the mpslinalg developers"
release = version = mpslinalg.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.intersphinx"]
autodoc_member_order = "alphabetical"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_preprocess_types = True
napoleon_type_aliases = {"Tensor": "torch.Tensor", "dtype": "torch.dtype",
                         "device": "torch.device", "Generator": "torch.Generator"}
# Docstrings use single backticks for references (`torch.linalg.solve`): links here, and plain
# enough in help(); double backticks for literal code. Sphinx roles are kept out of docstrings.
default_role = "py:obj"
# Offline: the inventories are committed (docs/_intersphinx/, made by make_inventories.py there),
# so the build never reaches the network; the links point at each project's online docs.
_INVENTORIES = pathlib.Path(__file__).resolve().parent / "_intersphinx"
intersphinx_mapping = {
    name: (url, str(_INVENTORIES / f"{name}.inv"))
    for name, url in [("torch", "https://docs.pytorch.org/docs/stable/"),
                      ("numpy", "https://numpy.org/doc/stable/"),
                      ("scipy", "https://docs.scipy.org/doc/scipy/"),
                      ("python", "https://docs.python.org/3/")]
}
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
