"""Check and benchmark cases, one module per op family; importing a module registers its cases."""

import importlib
import pkgutil


def load_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def scipy_per_matrix(name: str, **kwargs):
    """``scipy.linalg.<name>(a, **kwargs)`` over the matrices of a batch: a benchmark contender
    (None when SciPy is not installed)."""
    try:
        import scipy.linalg
    except ImportError:
        return None
    fn = getattr(scipy.linalg, name)

    def run(A):
        return [fn(a, **kwargs) for a in A.reshape(-1, *A.shape[-2:])]

    return run
