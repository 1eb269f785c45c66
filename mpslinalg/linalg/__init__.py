"""The torch.linalg op families, one module each (declarations, public functions, derivative
rules), and the host side of their Metal kernels (``<kernel family>_metal.py`` for
``metal/linalg/<kernel family>.metal``).

`FAMILIES` is the registration: `mpslinalg` exports the ``__all__`` of each module it names.
This package itself re-exports nothing, so that no module name is shadowed by a function of
the same name.
"""

#: The op families, in import order (a family may build on an earlier one's ops).
FAMILIES = ("lu", "inverse", "solve", "det", "qr", "svd", "eigh", "eig", "norms", "products",
            "tensors", "lowrank",
            "matrix_exp", "ldl", "cholesky")
