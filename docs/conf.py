"""Sphinx configuration for mpslinalg's documentation."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import mpslinalg  # noqa: E402

project = "mpslinalg"
author = "the mpslinalg developers"
release = version = mpslinalg.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.intersphinx"]
autodoc_member_order = "alphabetical"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
intersphinx_mapping = {}
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
