"""The orthogonal polynomials of `torch.special`, named as there: Chebyshev T / U / V / W
and their shifted forms, Hermite H and He, Laguerre L, Legendre P, for tensor ``x`` and ``n``.

Ops ``mpslinalg::special_<name>``: on the metal backend one launch of
``metal/ops/special.metal`` (three-term recurrences in float, with torch's edge-case rules;
x and n read in place at their broadcast strides; float16 / bfloat16 read and written in their
own type). On the torch backend, torch.special; float16 / bfloat16, which torch's CPU kernels
lack, are computed in float32 and cast back.

Torch's rules, kept on both backends: ``n`` is truncated to an integer and a negative, NaN or
infinite ``n`` gives 0; at ``|x| = 1`` Chebyshev and Legendre take their closed-form values;
Chebyshev uses ``cos(n acos x)``-type closed forms inside (-1, 1) above a small degree; Hermite
degrees above 128 give NaN in float32 (512 in float64). One difference, for bounded kernel time:
a degree above 65536 that would need the recurrence gives NaN (on the torch backend for Laguerre
and Legendre, whose torch kernels would run for hours, and without end on CUDA at n = +inf).
"""

from __future__ import annotations

import functools
import math
import numbers

import torch
from torch import Tensor

from .._core import checks, elementwise
from .._core import metal as _metal
from .._core.declare import Declaration, Operand, Result
from .._core.op import ITERATOR_CAST, cast_back, write_out

#: Function name -> kernel code (mirrors the k* constants of metal/ops/special.h).
POLYNOMIALS = {
    "chebyshev_polynomial_t": 0,
    "chebyshev_polynomial_u": 1,
    "chebyshev_polynomial_v": 2,
    "chebyshev_polynomial_w": 3,
    "shifted_chebyshev_polynomial_t": 4,
    "shifted_chebyshev_polynomial_u": 5,
    "shifted_chebyshev_polynomial_v": 6,
    "shifted_chebyshev_polynomial_w": 7,
    "hermite_polynomial_h": 8,
    "hermite_polynomial_he": 9,
    "laguerre_polynomial_l": 10,
    "legendre_polynomial_p": 11,
}
__all__ = sorted(POLYNOMIALS)

_PATH = "ops/special.metal"
#: dtypes the kernels read and write.
METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _metal_forward(name: str):
    code = POLYNOMIALS[name]

    def forward(x: Tensor, n: Tensor) -> Tensor:
        shape, (vx, vn) = elementwise.broadcast_views(name, x, n)
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
        numel = out.numel()
        if numel == 0:
            return out
        kernel = _metal.kernel(_PATH, "special_polynomial", x.dtype, x.device, fn=name, kind=code)
        sizes, x_strides, n_strides = elementwise.layout(shape, vx, vn)
        _metal.launch(kernel, vx, vn, out, sizes, x_strides, n_strides, len(sizes), numel,
                      threads=_metal.grid_stride_threads(numel), group_size=None)
        return out

    return forward


#: mirrors kMaxRecurrenceDegree of metal/ops/special.h.
MAX_RECURRENCE_DEGREE = 65536
#: The polynomials whose torch kernels run the recurrence up to n inside the interval (no closed
#: form, no early exit: hours at n = 1e12, and no end at n = +inf on CUDA, which reads it as
#: 2^63 - 1), and the x at which a closed form answers every degree.
_LONG_RECURRENCES = {"laguerre_polynomial_l": lambda x: x == 0,
                     "legendre_polynomial_p": lambda x: x.abs() == 1}


def _largest(n: Tensor) -> float:
    """The largest degree of a CPU tensor, NaN if any is NaN (read by the caller as possibly
    out of bounds): one reduction and one read, a third of a comparison's cost."""
    count = n.numel()
    if count == 1:
        return float(n)
    return n.max().item() if count else -math.inf


@functools.cache
def _torch_polynomial(name: str):
    """torch.special's function, with the metal backend's degree bound where its recurrence
    would run without bound: n = +inf is read as torch's CPU kernels read it (degree 0 of
    their rule for negative n), and a degree above `MAX_RECURRENCE_DEGREE` gives NaN unless
    a closed form answers."""
    torch_fn = getattr(torch.special, name)
    closed_form = _LONG_RECURRENCES.get(name)
    if closed_form is None:
        return torch_fn
    compiling = torch.compiler.is_compiling

    def bounded(x: Tensor, n: Tensor | float, *, out: Tensor | None = None) -> Tensor:
        # Degrees within the bound (NaN included) are torch's own call: known at once for a
        # number, with one reduction on the CPU; on other devices (no host read) and under
        # torch.compile the bound is applied branch-free below.
        if isinstance(n, Tensor):
            within = n.is_cpu and not compiling() and _largest(n) <= MAX_RECURRENCE_DEGREE
        else:
            within = not n > MAX_RECURRENCE_DEGREE
            n = n if within else torch.as_tensor(n, device=x.device)
        if within:  # (torch parses keywords slowly: out passed only when given)
            return torch_fn(x, n) if out is None else torch_fn(x, n, out=out)
        if not n.is_floating_point():  # (integers promote no floating dtype)
            n = n.to(x.dtype)
        # Each step is a kernel launch (~5 us on CUDA), so few steps. A degree above the bound
        # is replaced by 2 or 3, of its parity (fmod(n, 2) in [0, 2): truncated, as torch
        # truncates degrees, it is the parity of trunc(n)), which gives the closed forms' value.
        n = torch.where(n == math.inf, -1.0, n)
        high = n > MAX_RECURRENCE_DEGREE
        value = torch_fn(x, torch.where(high, torch.fmod(n, 2) + 2, n))
        nan = high > closed_form(x)  # high and no closed form
        value = value.masked_fill_(nan, math.nan)  # (torch's fresh result)
        # out= as torch's elementwise kernels take it (any dtype the result casts to), which
        # torch.where(..., out=) would not
        return value if out is None else write_out(name, out, value, ITERATOR_CAST)

    bounded.__name__ = name
    return bounded


def _torch_forward(name: str):
    torch_fn = _torch_polynomial(name)

    def forward(x: Tensor, n: Tensor) -> Tensor:
        wide = checks.UPCAST_DTYPES.get(x.dtype)
        if wide is None:  # torch computes it
            return torch_fn(x, n)
        return cast_back(torch_fn(x.to(wide), n.to(wide)), x.dtype)

    return forward


def _special_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype policy: the kernels' dtypes on metal; on torch every floating dtype (the torch
    forward computes float16 / bfloat16 in float32, which torch's CPU kernels lack)."""
    if backend == "metal" and dtype not in METAL_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: the metal backend supports float32, float16 and "
                        f"bfloat16, got {str(dtype).removeprefix('torch.')}; Metal has no "
                        "64-bit floating point: use the torch backend "
                        "(mpslinalg.use_backend('torch')) for float64")
    return dtype


#: One declaration per polynomial: ``mpslinalg::special_<name>(x, n)``, x and n of one
#: floating dtype, elementwise (core rank 0: the output has their broadcast shape). Not
#: differentiable, so the torch backend calls the torch forward without the op's dispatch.
DECLARATIONS = {name: Declaration(
    f"special_{name}", [Operand("x", 0), Operand("n", 0)], [Result("output")],
    forward={"torch": _torch_forward(name), "metal": _metal_forward(name)},
    dtypes=_special_dtype, torch_direct=True) for name in POLYNOMIALS}
OPS = {name: declaration.op for name, declaration in DECLARATIONS.items()}


def _prepare(call: None, input: object, n: object, *, fn: str) -> tuple[Tensor, Tensor]:
    """The op's arguments (the op's first tensor is made here, so the call has no context
    yet: the dtype policy refuses after)."""
    return _operands(fn, input, n)


def _operands(fn: str, x: object, n: object) -> tuple[Tensor, Tensor]:
    """x and n as tensors of one floating dtype (torch's promotion; integers and bool compute
    in the default dtype), broadcastable, on one device."""
    for arg, what in ((x, "input"), (n, "n")):
        if not isinstance(arg, (Tensor, numbers.Real)):
            raise TypeError(f"mpslinalg.{fn}: {what} must be a torch.Tensor or a real number, "
                            f"got {type(arg).__name__}")
    if not isinstance(x, Tensor) and not isinstance(n, Tensor):
        raise TypeError(f"mpslinalg.{fn}: input or n must be a torch.Tensor")
    like = x if isinstance(x, Tensor) else n
    same = isinstance(x, Tensor) and isinstance(n, Tensor) and x.dtype == n.dtype
    dtype = x.dtype if same else torch.result_type(x, n)  # (not traceable: only when needed)
    if dtype.is_complex:
        raise NotImplementedError(f"mpslinalg.{fn}: not implemented for complex input, got "
                                  f"{str(dtype).removeprefix('torch.')}")
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    tensors = []
    for arg in (x, n):
        if isinstance(arg, Tensor):
            if arg.device != like.device and arg.dim() > 0 and like.dim() > 0:
                raise RuntimeError(f"mpslinalg.{fn}: expected all tensors on one device, got "
                                   f"input on {x.device} and n on {n.device}")
            tensors.append(arg.to(device=like.device, dtype=dtype))
        else:
            tensors.append(torch.tensor(arg, dtype=dtype, device=like.device))
    elementwise.broadcast_views(fn, *tensors)
    return tensors[0], tensors[1]


_TITLES = {
    "chebyshev_polynomial_t": "Chebyshev polynomial of the first kind ``T_n(x)``",
    "chebyshev_polynomial_u": "Chebyshev polynomial of the second kind ``U_n(x)``",
    "chebyshev_polynomial_v": "Chebyshev polynomial of the third kind ``V_n(x)``",
    "chebyshev_polynomial_w": "Chebyshev polynomial of the fourth kind ``W_n(x)``",
    "shifted_chebyshev_polynomial_t": "Shifted Chebyshev polynomial of the first kind "
                                      "``T_n(2x - 1)``",
    "shifted_chebyshev_polynomial_u": "Shifted Chebyshev polynomial of the second kind "
                                      "``U_n(2x - 1)``",
    "shifted_chebyshev_polynomial_v": "Shifted Chebyshev polynomial of the third kind "
                                      "``V_n(2x - 1)``",
    "shifted_chebyshev_polynomial_w": "Shifted Chebyshev polynomial of the fourth kind "
                                      "``W_n(2x - 1)``",
    "hermite_polynomial_h": "Physicists' Hermite polynomial ``H_n(x)``",
    "hermite_polynomial_he": "Probabilists' Hermite polynomial ``He_n(x)``",
    "laguerre_polynomial_l": "Laguerre polynomial ``L_n(x)``",
    "legendre_polynomial_p": "Legendre polynomial ``P_n(x)``",
}
#: Value at x = 0.5, n = 3 of each, as the doctest prints it.
_AT_HALF = {
    "chebyshev_polynomial_t": "-1.", "chebyshev_polynomial_u": "-1.",
    "chebyshev_polynomial_v": "-1.", "chebyshev_polynomial_w": "-1.",
    "shifted_chebyshev_polynomial_t": "-0.", "shifted_chebyshev_polynomial_u": "-0.",
    "shifted_chebyshev_polynomial_v": "1.", "shifted_chebyshev_polynomial_w": "-1.",
    "hermite_polynomial_h": "-5.", "hermite_polynomial_he": "-1.3750",
    "laguerre_polynomial_l": "-0.1458", "legendre_polynomial_p": "-0.4375",
}


def _make(fn: str):
    def function(input: Tensor | float, n: Tensor | float, *, out: Tensor | None = None) -> Tensor:
        """(The docstring, set below.)"""

    function.__name__ = function.__qualname__ = fn
    function.__module__ = __name__
    function.__doc__ = f"""{_TITLES[fn]}; like `torch.special.{fn}`.

    Parameters
    ----------
    input : Tensor or float
        The argument ``x``.
    n : Tensor or float
        The degree, broadcastable with ``input``; truncated to an integer, and a negative, NaN
        or infinite degree gives 0 (torch's rules).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        In the promoted floating dtype of ``input`` and ``n`` (the default dtype for integer
        inputs). Not differentiable (nor is torch's).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> ops.{fn}(torch.tensor([0.5]), 3)
    tensor([{_AT_HALF[fn]}])
    """
    return DECLARATIONS[fn].public(_torch_polynomial(fn), torch_name=f"special.{fn}",
                                   prepare=functools.partial(_prepare, fn=fn),
                                   casting=ITERATOR_CAST)(function)


chebyshev_polynomial_t = _make("chebyshev_polynomial_t")
chebyshev_polynomial_u = _make("chebyshev_polynomial_u")
chebyshev_polynomial_v = _make("chebyshev_polynomial_v")
chebyshev_polynomial_w = _make("chebyshev_polynomial_w")
shifted_chebyshev_polynomial_t = _make("shifted_chebyshev_polynomial_t")
shifted_chebyshev_polynomial_u = _make("shifted_chebyshev_polynomial_u")
shifted_chebyshev_polynomial_v = _make("shifted_chebyshev_polynomial_v")
shifted_chebyshev_polynomial_w = _make("shifted_chebyshev_polynomial_w")
hermite_polynomial_h = _make("hermite_polynomial_h")
hermite_polynomial_he = _make("hermite_polynomial_he")
laguerre_polynomial_l = _make("laguerre_polynomial_l")
legendre_polynomial_p = _make("legendre_polynomial_p")
