"""The registration layer under `mpslinalg._core.declare`: `Op` (schema, fake, autograd,
fresh outputs, the raising check), ``out=`` with torch's casting rules, and the torch fast path
of the public functions (`public`).

Families do not call `Op` themselves: a `mpslinalg._core.declare.Declaration` states the op
once and builds its `Op` from:

- the schema of the op's own arguments, e.g. ``"(Tensor A, Tensor B, bool left) -> (Tensor,
  Tensor)"``; `Op` appends ``str backend, bool small, str check`` (which implementation
  runs, and the ``api_name`` to raise `mpslinalg.LinAlgError` with, or ``""``);
- ``forward``: one function per path, ``{"torch": ..., "metal": ..., "small": ...}``; the
  ``"small"`` one (n <= 4) gets the call's backend as keyword ``backend``;
- ``fake``: output shapes and dtypes from input shapes (torch.compile, meta tensors);
- ``backward`` (optional) and ``save``: the derivative rule.

The factory then registers ``mpslinalg::<name>`` with ``torch.library.Library`` (about 20 us per
call and no ``torch._dynamo`` import, against about 38 us and a 2 s first call for
``torch.library.custom_op``), makes every output a fresh contiguous tensor (ops may not return
views of their inputs), raises through ``check_errors`` *inside* the op when ``check`` names
the API (so the checking forms raise under ``torch.compile`` too, where a host read in traced
code would break the graph), and reduces each gradient to the shape of its input (inputs the
family broadcast along batch dimensions inside the op get summed gradients).

For public functions, `public` adds torch's fast path: on the torch backend, in a
dtype torch computes natively, the call goes straight to ``torch.linalg`` (errors reworded to
name mpslinalg), so a drop-in costs what torch costs. `compute_dtype` /
`cast_back` implement the float16/bfloat16 upcast, `write_out` torch's ``out=`` with the
function's `OutCasting` (which dtypes torch's function takes into ``out``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from . import backend as _backend
from . import distributed as _distributed
from .errors import check_errors, translate

_LIBRARY = torch.library.Library("mpslinalg", "DEF")  # noqa: TOR901 - lives as long as the module

#: Arguments the factory appends to every op's schema.
_EXTRA_ARGS = "str backend, bool small, str check"
_N_EXTRA = 3


def fresh(x: Tensor) -> Tensor:
    """An op's output: contiguous from offset 0, with no lazy conjugate / negative bit."""
    x = x.resolve_conj().resolve_neg()
    if x.storage_offset() != 0:
        return x.clone(memory_format=torch.contiguous_format)
    return x.contiguous()


class Op:
    """A registered op ``mpslinalg::<name>``; call it with the schema's arguments followed by
    ``backend``, ``small`` and ``check``.

    Parameters
    ----------
    name : str
        The op's name in the ``mpslinalg`` namespace.
    schema : str
        Its own arguments and results, e.g. ``"(Tensor A) -> (Tensor, Tensor)"``.
    forward : dict of str to callable
        ``"torch"``, ``"metal"`` and optionally ``"small"`` implementations, each taking the
        schema's arguments.
    fake : callable
        Same arguments; returns empty tensors of the outputs' shapes and dtypes (None for an
        op that only writes into a mutable argument, ``Tensor(a!)``, with schema ``-> ()``).
    info : int, optional
        Index of the ``info`` output that ``check`` raises on.
    info_routine : str or callable, optional
        The decomposition whose failure ``info`` reports, when it is not the one the API names
        (`check_errors`' ``routine``); a callable gets the op's arguments.
    save : callable, optional
        ``save(ctx, inputs, outputs)`` keeps what ``backward`` needs (``inputs`` excludes the
        appended arguments; ``ctx.backend`` and ``ctx.small`` are set by the factory).
    backward : callable, optional
        ``backward(ctx, *output_grads)`` returns one gradient (or None) per schema argument.
    check_inputs : callable, optional
        ``check_inputs(*args, api=...)``: validation that needs the inputs' values (one device
        read), run before the forward when ``check`` names the API.
    """

    def __init__(self, name: str, schema: str, *, forward: dict[str, Callable[..., Any]],
                 fake: Callable[..., Any], info: int | None = None,
                 info_routine: str | Callable[..., str | None] | None = None,
                 save: Callable[..., None] | None = None,
                 backward: Callable[..., Sequence[Tensor | None]] | None = None,
                 check_inputs: Callable[..., None] | None = None) -> None:
        args, results = schema.split("->")
        args = args.strip()[1:-1].strip()
        self.name = name
        self.forward = forward
        self.info = info
        self.info_routine = info_routine
        self._check_inputs = check_inputs
        self._fake = fake
        self._save = save
        self._backward = backward
        self.n_args = len(args.split(",")) if args else 0
        _LIBRARY.define(f"{name}({args}, {_EXTRA_ARGS}) -> {results.strip()}")
        _LIBRARY.impl(name, self._run, "CompositeExplicitAutograd")
        qualname = f"mpslinalg::{name}"
        torch.library.register_fake(qualname, self._run_fake, lib=_LIBRARY)
        if backward is not None:
            torch.library.register_autograd(qualname, self._run_backward,
                                            setup_context=self._setup, lib=_LIBRARY)
        self.overload = getattr(torch.ops.mpslinalg, name).default

    def __call__(self, *args: Any) -> Any:
        return self.overload(*args)

    def __repr__(self) -> str:
        return f"Op(mpslinalg::{self.name})"

    def _run(self, *args: Any) -> Any:
        *own, backend, small, check = args
        if check and self._check_inputs is not None:
            self._check_inputs(*own, api=check)
        if small:  # the n <= 4 forward chooses its kernel by the call's backend
            out = self.forward["small"](*own, backend=backend)
        else:
            out = self.forward[backend](*own)
        if out is None:  # an op that writes into a mutable argument (schema "-> ()")
            return None
        out = tuple(map(fresh, out)) if isinstance(out, tuple) else fresh(out)
        if check and self.info is not None:
            routine = self.info_routine
            check_errors(out[self.info], check,
                         routine=routine(*own) if callable(routine) else routine)
        return out

    def _run_fake(self, *args: Any) -> Any:
        return self._fake(*args[:-_N_EXTRA])

    def _setup(self, ctx, inputs, output) -> None:
        own = inputs[:-_N_EXTRA]
        ctx.backend, ctx.small = inputs[-3], inputs[-2]
        ctx.input_shapes = [x.shape if isinstance(x, Tensor) else None for x in own]
        if self._save is not None:
            self._save(ctx, own, output)

    def _run_backward(self, ctx, *grads):
        grads_in = self._backward(ctx, *grads)
        reduced = [
            g if g is None or shape is None or g.shape == shape else g.sum_to_size(shape)
            for g, shape in zip(grads_in, ctx.input_shapes, strict=True)
        ]
        return (*reduced, *([None] * _N_EXTRA))


# ---------------------------------------------------------------- dtype policy and out=

def values_unavailable(*tensors: Tensor) -> bool:
    """True where a derivative rule cannot read values to check them: while torch.compile
    traces (AOTAutograd traces backward rules with fake tensors wrapped in functional ones,
    which `isinstance(x, FakeTensor)` misses) and on meta tensors."""
    return (torch.compiler.is_compiling() or torch._guards.detect_fake_mode(tensors) is not None
            or any(t.device.type == "meta" for t in tensors))


def to_dtype(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x if x.dtype == dtype else x.to(dtype)


def cast_back(x: Tensor, dtype: torch.dtype) -> Tensor:
    """A floating result computed in the upcast dtype, cast back to the input's ``dtype``;
    integer results (pivots, info) as they are."""
    return x.to(dtype) if x.is_floating_point() and x.dtype != dtype else x


#: dtype names as torch's C++ messages spell them: the type of the element in "Expected out
#: tensor to have dtype float" (structured kernels), and the ScalarType in "safely castable
#: from Float dtype" / "result type Float can't be cast" (the casting checks).
_CPP_TYPE = {
    torch.float16: ("c10::Half", "Half"), torch.bfloat16: ("c10::BFloat16", "BFloat16"),
    torch.float32: ("float", "Float"), torch.float64: ("double", "Double"),
    torch.complex64: ("c10::complex<float>", "ComplexFloat"),
    torch.complex128: ("c10::complex<double>", "ComplexDouble"),
    torch.int8: ("signed char", "Char"), torch.int16: ("short int", "Short"),
    torch.int32: ("int", "Int"), torch.int64: ("long int", "Long"),
    torch.uint8: ("unsigned char", "Byte"), torch.uint16: ("short unsigned int", "UInt16"),
    torch.uint32: ("unsigned int", "UInt32"), torch.uint64: ("long unsigned int", "UInt64"),
    torch.bool: ("bool", "Bool"),
}


def _cpp_type(dtype: torch.dtype) -> tuple[str, str]:
    name = str(dtype).removeprefix("torch.")
    return _CPP_TYPE.get(dtype, (name, name))


@dataclass(frozen=True)
class OutCasting:
    """torch's rule for an ``out=`` tensor whose dtype differs from the result's, which differs
    between torch functions: structured kernels require the exact dtype, linalg functions
    written over ``resize_output`` + ``copy_`` and TensorIterator kernels take any dtype the
    result can be cast to safely (`torch.can_cast`), comparisons take every dtype.

    ``wrong_dtype`` and ``wrong_device`` are torch's messages, formatted with ``name`` (the
    out argument's name in torch's message), ``want`` / ``got`` (C++ element types),
    ``want_type`` / ``got_type`` (ScalarType names), ``want_device`` / ``got_device`` and
    ``int32`` (whether the result is int32).
    """

    accepts: Callable[[torch.dtype, torch.dtype], bool]
    wrong_dtype: str
    wrong_device: str = (
        "Expected out tensor to have device {want_device}, but got {got_device} instead")
    #: Names of the outputs in the messages, one per output (the last repeats).
    names: tuple[str, ...] = ("out",)
    #: The message for a dtype the result cannot be cast to safely, where torch checks that
    #: first and refuses the other dtypes with ``wrong_dtype`` (matrix_power).
    uncastable: str = ""

    def named(self, *names: str) -> OutCasting:
        """The same rule, naming the outputs ``names`` in its messages."""
        return replace(self, names=names)

    def check(self, fn: str, index: int, out: Tensor, result: Tensor) -> None:
        """Raise torch's RuntimeError, naming ``mpslinalg.<fn>``, if ``out`` cannot take
        ``result``."""
        if out.dtype != result.dtype and not self.accepts(result.dtype, out.dtype):
            message = (self.uncastable if self.uncastable
                       and not torch.can_cast(result.dtype, out.dtype) else self.wrong_dtype)
        elif out.device != result.device:
            message = self.wrong_device
        else:
            return
        (want, want_type), (got, got_type) = _cpp_type(result.dtype), _cpp_type(out.dtype)
        name = self.names[min(index, len(self.names) - 1)]
        raise RuntimeError(f"mpslinalg.{fn}: " + message.format(
            name=name, want=want, got=got, want_type=want_type, got_type=got_type,
            want_device=result.device, got_device=out.device,
            int32=result.dtype == torch.int32))


#: Structured kernels (most of torch.linalg): the result's dtype exactly.
EXACT = OutCasting(lambda result, out: False,
                   "Expected out tensor to have dtype {want}, but got {got} instead")
#: linalg functions that cast into ``out`` (``checkLinalgCompatibleDtype``: pinv, matrix_rank,
#: householder_product, geqrf): any dtype `torch.can_cast` allows; name the outputs with
#: `OutCasting.named` as torch does.
SAFE_CAST = OutCasting(
    torch.can_cast,
    "Expected {name} to be safely castable from {want_type} dtype, but got {name} with dtype "
    "{got_type}",
    "Expected {name} and input tensors to be on the same device, but got {name} on "
    "{got_device} and input on {want_device}", names=("result",))
#: TensorIterator kernels (elementwise functions): any dtype `torch.can_cast` allows.
ITERATOR_CAST = OutCasting(
    torch.can_cast, "result type {want_type} can't be cast to the desired output type {got_type}")
#: TensorIterator comparisons: every dtype (the booleans are cast into it).
ANY_DTYPE = OutCasting(lambda result, out: True, "")
#: searchsorted / bucketize: the index dtype ``out_int32`` asks for, exactly.
INDEX = OutCasting(
    lambda result, out: False,
    "output tensor's dtype is wrong, it can only be Int(int32) or Long(int64) depending on "
    "whether out_int32 flag is True, but we got output tensor's dtype {got_type} and out_int32 "
    "flag is {int32}")


def write_out(fn: str, out: Tensor | Sequence[Tensor] | None, result: Any,
              casting: OutCasting = EXACT) -> Any:
    """torch's ``out=`` semantics: results copied into the given tensors (resized when their
    shape differs, cast by ``casting``, the rule of the torch function), which are returned in
    place of the results, as the ``torch.return_types`` ``<name>_out`` tuple torch returns."""
    if out is None:
        return result
    single = isinstance(result, Tensor)
    results = (result,) if single else tuple(result)
    outs = (out,) if isinstance(out, Tensor) else tuple(out)
    if len(outs) != len(results) or not all(isinstance(o, Tensor) for o in outs):
        want = "a tensor" if single else f"a tuple of {len(results)} tensors"
        raise TypeError(f"mpslinalg.{fn}: out must be {want}, got {type(out).__name__}")
    if torch.is_grad_enabled() and any(r.requires_grad for r in results):
        raise RuntimeError(f"mpslinalg.{fn}: functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad.")
    for index, (o, r) in enumerate(zip(outs, results, strict=True)):
        casting.check(fn, index, o, r)
    for o, r in zip(outs, results, strict=True):
        if o.shape != r.shape:
            o.resize_(r.shape)
        o.copy_(r)
    if single:
        return outs[0]
    kind = _out_type(type(result))
    return kind(outs) if hasattr(kind, "n_fields") or kind is tuple else kind(*outs)


def _out_type(result_type: type) -> type:
    """torch's result type of the ``out=`` form: ``torch.return_types.<name>_out``."""
    if result_type.__module__ == "torch.return_types":
        return getattr(torch.return_types, f"{result_type.__name__}_out", result_type)
    return result_type


# ---------------------------------------------------------------- public functions


def call_torch(fn: str, torch_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``torch_fn(*args, **kwargs)`` (a ``torch.linalg`` function) for ``mpslinalg.<fn>``, its
    errors reworded to name ``mpslinalg.<fn>``."""
    try:
        return torch_fn(*args, **kwargs)
    except Exception as error:
        raise translate(error, torch_fn.__name__.replace("linalg_", "linalg."), fn) from None


def public(torch_fn: Callable[..., Any], *, torch_name: str | None = None,
           general_when: Callable[..., bool] | None = None, checks: bool | str = False,
           mode_arg: bool = False, fast_dtypes: frozenset = _backend.TORCH_NATIVE,
           always: bool = False):
    """Decorator for a public function whose body is the general path (validation, upcast,
    metal and small paths, ``out=``).

    The returned function has the same signature and docstring. When the first tensor argument
    is on the torch backend in a dtype torch.linalg computes natively and ``general_when`` (the
    same arguments, all by position, or the first one alone if it takes one parameter) is false
    or absent, it calls
    ``torch_fn`` with the same arguments instead: torch's results, torch's ``out=``, torch's
    errors reworded to name ``mpslinalg.<fn>``. Errors of the general path are reworded the
    same way (torch.linalg calls inside its ops, on any family's path), so no message names a
    torch function whichever path served the call.
    ``checks`` says whether the function reads ``info`` and raises: True, or the name of the
    argument that decides it (``"check_errors"``). Under torch.compile such a call takes the
    general path, so that it raises `mpslinalg.LinAlgError` from inside its op (traced
    code cannot catch and reword); the others are traced through torch.linalg.
    The wrapper is generated from the signature so that the fast path passes arguments
    without packing them (a drop-in has about a microsecond to spend on a 3x3 call).
    ``mode_arg``: the general path takes the backend read for the fast path as its first
    argument, so that a call decides its backend once (`mpslinalg._core.declare`).
    ``fast_dtypes``: the first tensor's dtypes the fast path takes (torch.linalg's native ones
    by default; a function torch computes in more dtypes, without an upcast of ours, names
    them). ``always``: every call is ``torch_fn``'s, whatever the backend (a function torch
    runs on every device itself); the general path is then never taken.
    A DTensor first argument goes to `mpslinalg._core.distributed.call` (shard by shard, from
    the function's declaration; with ``always``, to ``torch_fn`` and DTensor's own rules): the
    fast path's first test is ``type(A) in PLAIN``, as cheap as the ``isinstance`` it
    replaces, and only another type of tensor is asked whether it is a DTensor.
    """

    def wrap(general: Callable[..., Any]) -> Callable[..., Any]:
        nonlocal torch_name
        name = general.__name__
        torch_name = torch_name or f"linalg.{name}"
        sig = inspect.signature(general)
        first = next(iter(sig.parameters))
        passed = ", ".join(
            p.name if p.kind is p.POSITIONAL_OR_KEYWORD else f"{p.name}={p.name}"
            for p in sig.parameters.values())
        # Inlined: a function call costs a tenth of a 3x3 LU factorisation.
        # A plain tensor costs one type test; any other kind of tensor is asked whether it is
        # a DTensor (computed shard by shard, `mpslinalg._core.distributed`).
        condition = (f"(type({first}) in _PLAIN or _other_tensor({first})) "
                     f"and {first}.dtype in _NATIVE "
                     f"and (_m == 'torch' or (_m == 'auto' and not {first}.is_mps))")
        if always:
            condition = "True"
        if checks:
            condition += (" and not _compiling()" if checks is True
                          else f" and (not {checks} or not _compiling())")
        if general_when is not None:
            # a one-parameter test gets the first argument alone; the others every argument,
            # by position (keywords cost more to pass than the test itself)
            single = len(inspect.signature(general_when).parameters) == 1
            everything = ", ".join(p.name for p in sig.parameters.values())
            condition += f" and not _general_when({first if single else everything})"
        keywords = ", ".join(f"{p.name!r}: {p.name}" for p in sig.parameters.values())
        required = ", ".join(p.name for p in sig.parameters.values() if p.default is p.empty)
        optional = [p.name for p in sig.parameters.values() if p.default is not p.empty]
        # All optional arguments at their defaults: pass none (torch parses keywords slowly).
        all_default = " and ".join(f"{n} is _d_{n}" for n in optional) or "True"
        defaults = {f"_d_{p.name}": p.default for p in sig.parameters.values()
                    if p.default is not p.empty}
        params = []
        star = False
        for p in sig.parameters.values():
            if p.kind is p.KEYWORD_ONLY and not star:
                params.append("*")
                star = True
            params.append(p.name if p.default is p.empty else f"{p.name}=_d_{p.name}")
        source = (
            f"def {name}({', '.join(params)}):\n"
            + ("" if always else "    _m = _b.fast_mode or _b.get_backend()\n")
            + f"    if {condition}:\n"
            f"        try:\n"
            f"            if {all_default}:\n"
            f"                return _torch_fn({required})\n"
            f"            return _torch_fn({passed})\n"
            f"        except Exception as error:\n"
            f"            raise _translate(error, {torch_name!r}, {name!r}) from None\n"
            + ("" if always else
               f"    if type({first}) not in _PLAIN and _is_dtensor({first}):\n"
               f"        return _sharded(_self, {checks!r}, (), {{{keywords}}})\n")
            + f"    try:\n"
            f"        return _general({'_m, ' if mode_arg else ''}{passed})\n"
            f"    except Exception as error:\n"
            f"        raise _translate(error, {torch_name!r}, {name!r}) from None\n"
        )
        namespace = dict(defaults, _compiling=torch.compiler.is_compiling, _b=_backend,
                         _Tensor=Tensor, _NATIVE=fast_dtypes, _torch_fn=torch_fn,
                         _translate=translate, _general=general, _general_when=general_when,
                         _PLAIN=_distributed.PLAIN, _other_tensor=_distributed.other_tensor,
                         _is_dtensor=_distributed.is_dtensor, _sharded=_distributed.call)
        exec(compile(source, f"<mpslinalg.{name}>", "exec"), namespace)  # noqa: S102
        function = namespace["_self"] = namespace[name]
        functools.update_wrapper(function, general)
        function.__wrapped_general__ = general
        return function

    return wrap
