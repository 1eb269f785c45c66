"""The torch.linalg op families, one module each (public functions, ops, derivative rules), and
the host side of their Metal kernels (``<kernel family>_metal.py`` for
``metal/linalg/<kernel family>.metal``). The public functions are exported from
`mpslinalg`; this package deliberately re-exports nothing, so that no module name is
shadowed by a function of the same name.
"""
