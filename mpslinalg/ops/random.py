"""Random sampling: ``log_normal_`` (in place, like `torch.Tensor.log_normal_`) and its
functional form ``log_normal``.

Op ``mpslinalg::log_normal_`` writes into its argument. On the metal backend one launch of
``metal/ops/random.metal``: Philox4x32-10 keyed by a 64-bit seed, counter = the element's
row-major index / 4, so a seed gives the same numbers whatever the launch geometry and the
tensor's strides (views are filled in place, at their strides). The seed is drawn from
``generator`` (torch's default CPU generator when None), so ``torch.manual_seed`` makes calls
reproducible and successive calls differ. On the torch backend the call is torch's own (its
numbers, from the generator torch would use) when ``generator`` is None or on the input's
device; a generator of another device seeds a generator of the input's device, as on the metal
backend: reproducible too, but a different stream than the kernel's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core import elementwise, metal_params
from .._core import metal as _metal
from .._core.backend import resolve_backend
from .._core.declare import Declaration, Operand, Param
from .._core.seed import draw_seed

__all__ = ["log_normal", "log_normal_"]

_PATH = "ops/random.metal"
#: dtypes with a Metal kernel.
METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Mirrors kNormalsPerBlock in metal/ops/random.h: elements per Philox call (one thread's work).
NORMALS_PER_BLOCK = 4


def launch_log_normal(x: Tensor, mean: float, std: float, seed: int, *,
                      max_threads: int = _metal.MAX_GRID,
                      group_size: int | None = None) -> None:
    """Fill ``x`` (any view) in place on the metal backend; ``max_threads`` and ``group_size``
    choose the launch geometry (the numbers do not depend on it)."""
    numel = x.numel()
    if numel == 0:
        return
    kernel = _metal.kernel(_PATH, "log_normal", x.dtype, x.device, fn="log_normal_")
    sizes, strides = elementwise.layout(x.shape, x)
    blocks = -(-numel // NORMALS_PER_BLOCK)
    threads = min(blocks, max_threads)
    params = metal_params.pack("ops/random.h", "LogNormalParams", ndim=len(sizes), numel=numel,
                               seed=seed, mean=mean, std_dev=std)
    _metal.launch(kernel, x, sizes, strides, params,
                  threads=threads, group_size=None if group_size is None
                  else min(group_size, threads))


def _torch_log_normal(x: Tensor, mean: float, std: float, seed: int) -> None:
    generator = torch.Generator(device=x.device).manual_seed(seed)
    x.log_normal_(mean, std, generator=generator)


def _metal_log_normal(x: Tensor, mean: float, std: float, seed: int) -> None:
    launch_log_normal(x, mean, std, seed)


#: Fill ``x`` (any shape) in place with log-normal numbers of the given seed; no results.
log_normal_decl = Declaration(
    "log_normal_", [Operand("x", None, mutable=True), Param("mean", "float"),
                    Param("std", "float"), Param("seed", "int")], [],
    forward={"torch": _torch_log_normal, "metal": _metal_log_normal})
log_normal_op = log_normal_decl.op


def _check(fn: str, x: object, mean: object, std: object) -> str:
    if not isinstance(x, Tensor):
        raise TypeError(f"mpslinalg.{fn}: input must be a torch.Tensor, got {type(x).__name__}")
    for name, value in (("mean", mean), ("std", std)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"mpslinalg.{fn}: {name} must be a float, got {type(value).__name__}")
    if not std > 0.0:
        raise RuntimeError(f"mpslinalg.{fn}: log_normal_ expects std > 0.0, but found std={std}")
    if not x.is_floating_point():
        raise NotImplementedError(f"mpslinalg.{fn}: not implemented for "
                                  f"{str(x.dtype).removeprefix('torch.')} tensors (floating "
                                  "point only)")
    backend = resolve_backend(x.device, fn)
    if backend == "metal" and x.dtype not in METAL_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: the metal backend supports float32, float16 and "
                        f"bfloat16, got {str(x.dtype).removeprefix('torch.')}; use the torch "
                        "backend (mpslinalg.use_backend('torch')) for float64")
    return backend


def _fill(fn: str, x: Tensor, mean: float, std: float, generator, backend: str) -> None:
    if backend == "torch" and (generator is None or (isinstance(generator, torch.Generator)
                                                     and generator.device == x.device)):
        x.log_normal_(mean, std, generator=generator)  # torch's call, torch's numbers
        return
    log_normal_op(x, float(mean), float(std), draw_seed(fn, generator), backend, False, "")


def log_normal_(input: Tensor, mean: float = 1.0, std: float = 2.0, *,
                generator: torch.Generator | None = None) -> Tensor:
    r"""Fill ``input`` in place with numbers ``exp(mu + sigma z)``, ``z`` standard
    normal; like `torch.Tensor.log_normal_`.

    Parameters
    ----------
    input : Tensor
        float32, float16 or bfloat16 (float64 on the torch backend); any view, filled at its
        strides.
    mean : float, optional
        ``mu``, the mean of the underlying normal distribution.
    std : float, optional
        ``sigma > 0``, its standard deviation.
    generator : torch.Generator, optional
        Where the 64-bit seed is drawn from; torch's default generator when None. The numbers
        depend on the seed and on each element's row-major position only. On the torch backend
        a generator of ``input``'s device (or None) is torch's call's own: torch's numbers.

    Returns
    -------
    Tensor
        ``input``.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> g = torch.Generator().manual_seed(0)
    >>> x = ops.log_normal_(torch.empty(1000), 0.0, 0.25, generator=g)
    >>> bool((x > 0).all()), round(float(x.log().std()), 2)
    (True, 0.25)
    """
    backend = _check("log_normal_", input, mean, std)
    if input.requires_grad and torch.is_grad_enabled() and input.is_leaf:
        raise RuntimeError("mpslinalg.log_normal_: a leaf Variable that requires grad is being "
                           "used in an in-place operation.")
    _fill("log_normal_", input, mean, std, generator, backend)
    return input


def log_normal(input: Tensor, mean: float = 1.0, std: float = 2.0, *,
               generator: torch.Generator | None = None) -> Tensor:
    r"""A new tensor of ``input``'s shape, dtype and device filled like `log_normal_`
    (``input``'s values are not read).

    Parameters
    ----------
    input : Tensor
        Gives the shape, dtype and device.
    mean : float, optional
        ``mu``.
    std : float, optional
        ``sigma > 0``.
    generator : torch.Generator, optional
        Where the seed is drawn from; torch's default generator when None (on the torch
        backend, one of ``input``'s device, or None, is torch's call's own).

    Returns
    -------
    Tensor
        Contiguous; not differentiable.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> g = torch.Generator()
    >>> a = ops.log_normal(torch.empty(2, 3), generator=g.manual_seed(1))
    >>> b = ops.log_normal(torch.empty(2, 3), generator=g.manual_seed(1))
    >>> torch.equal(a, b), a.shape
    (True, torch.Size([2, 3]))
    """
    backend = _check("log_normal", input, mean, std)
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    _fill("log_normal", out, mean, std, generator, backend)
    return out
