"""Write the intersphinx inventories of torch, NumPy, SciPy and Python that the docs link to.

The docs build runs offline (CI has no network), so ``conf.py`` reads inventories committed here
instead of fetching each project's ``objects.inv``. These are not copies of the projects' own
inventories: they list only the objects mpslinalg's docs reference, with the page each project's
documentation keeps them on (its usual layout: one ``generated/<name>.html`` page per function).
Regenerate after referencing a new object: ``python docs/_intersphinx/make_inventories.py``;
the file format is Sphinx's inventory version 2, read back with ``sphinx.util.inventory`` to
check it.
"""

from __future__ import annotations

import pathlib
import zlib

HERE = pathlib.Path(__file__).resolve().parent

_TORCH_LINALG = ["det", "householder_product", "inv", "inv_ex", "lstsq", "lu", "lu_factor",
                 "lu_factor_ex", "lu_solve", "qr", "slogdet", "solve", "solve_ex", "svd", "eigh",
                 "eigvalsh", "eig", "eigvals", "svdvals", "pinv", "matrix_rank", "cholesky",
                 "vector_norm", "matrix_norm", "norm", "cond", "cross", "diagonal", "matmul",
                 "matrix_power", "multi_dot", "tensorinv", "tensorsolve", "vander", "vecdot",
                 "matrix_exp", "ldl_factor", "ldl_factor_ex", "ldl_solve", "cholesky_ex",
                 "solve_triangular"]
_TORCH_TOP = ["bucketize", "eq", "ge", "geqrf", "gt", "le", "logdet", "lt", "maximum", "minimum",
              "ne", "searchsorted", "lu_unpack", "det", "inverse", "matmul", "tensordot",
              "svd_lowrank", "pca_lowrank", "cholesky_solve", "cholesky_inverse"]
_TORCH_F = ["conv1d", "grouped_mm", "linear", "pad", "scaled_dot_product_attention", "scaled_mm"]
_TORCH_SPECIAL = [f"{kind}_polynomial_{letter}" for kind, letters in
                  [("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw")] for letter in letters]
_TORCH_SPECIAL += ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                   "legendre_polynomial_p"]


def _torch() -> list[tuple[str, str, str]]:
    """(name, role, page#anchor) for torch's documentation."""
    def generated(name: str) -> str:
        return f"generated/{name}.html#{name}"

    items = [(f"torch.linalg.{n}", "function", generated(f"torch.linalg.{n}"))
             for n in _TORCH_LINALG]
    items += [(f"torch.{n}", "function", generated(f"torch.{n}")) for n in _TORCH_TOP]
    items += [(f"torch.nn.functional.{n}", "function", generated(f"torch.nn.functional.{n}"))
              for n in _TORCH_F]
    items += [(f"torch.special.{n}", "function", f"special.html#torch.special.{n}")
              for n in _TORCH_SPECIAL]
    items += [
        ("torch.special", "module", "special.html#module-torch.special"),
        ("torch.linalg", "module", "linalg.html#module-torch.linalg"),
        ("torch.linalg.LinAlgError", "exception", "linalg.html#torch.linalg.LinAlgError"),
        ("torch.Tensor", "class", "tensors.html#torch.Tensor"),
        ("torch.Tensor.log_normal_", "method", generated("torch.Tensor.log_normal_")),
        ("torch.dtype", "class", "tensor_attributes.html#torch.dtype"),
        ("torch.device", "class", "tensor_attributes.html#torch.device"),
        ("torch.Generator", "class", generated("torch.Generator")),
        ("torch.mps.compile_shader", "function", generated("torch.mps.compile_shader")),
        ("torch.autograd.gradcheck", "function", generated("torch.autograd.gradcheck")),
        ("torch.compile", "function", generated("torch.compile")),
    ]
    return items


def _numpy() -> list[tuple[str, str, str]]:
    names = ["numpy.linalg.solve", "numpy.linalg.inv", "numpy.linalg.det", "numpy.linalg.slogdet",
             "numpy.linalg.qr", "numpy.linalg.lstsq", "numpy.linalg.svd", "numpy.linalg.eigh",
             "numpy.vander"]
    items = [(n, "function", f"reference/generated/{n}.html#{n}") for n in names]
    items.append(("numpy.ndarray", "class", "reference/generated/numpy.ndarray.html"
                                             "#numpy.ndarray"))
    return items


def _scipy() -> list[tuple[str, str, str]]:
    names = ["lu_factor", "lu_solve", "lu", "solve", "inv", "det", "qr", "lstsq", "svd", "eigh",
             "solve_triangular", "ldl"]
    return [(f"scipy.linalg.{n}", "function",
             f"reference/generated/scipy.linalg.{n}.html#scipy.linalg.{n}") for n in names]


def _python() -> list[tuple[str, str, str]]:
    items = [("collections.abc.Iterator", "class",
              "library/collections.abc.html#collections.abc.Iterator")]
    items += [(e, "exception", f"library/exceptions.html#{e}")
              for e in ("ValueError", "TypeError", "RuntimeError", "NotImplementedError")]
    return items


PROJECTS = {"torch": ("PyTorch", "2.13", _torch), "numpy": ("NumPy", "2.4", _numpy),
            "scipy": ("SciPy", "1.17", _scipy), "python": ("Python", "3.11", _python)}


def write(name: str) -> pathlib.Path:
    project, version, entries = PROJECTS[name]
    header = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
              "# The remainder of this file is compressed using zlib.\n")
    # name domain:role priority uri dispname ("-": the display name is the name)
    body = "".join(f"{obj} py:{role} 1 {uri} -\n" for obj, role, uri in sorted(entries()))
    path = HERE / f"{name}.inv"
    path.write_bytes(header.encode() + zlib.compress(body.encode(), 9))
    return path


def check(path: pathlib.Path, base: str) -> int:
    from sphinx.util.inventory import InventoryFile

    with path.open("rb") as f:
        inv = InventoryFile.load(f, base, lambda base, uri: base + uri)
    return sum(len(objs) for objs in getattr(inv, "data", inv).values())


if __name__ == "__main__":
    for name in PROJECTS:
        path = write(name)
        print(f"{path.name}: {check(path, 'https://example/')} objects")
