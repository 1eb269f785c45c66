"""An op is one declaration: `Declaration` states it, and generates everything else.

A family writes, once per op (the model is JAX's ``linalg_primitive``: one declaration gives
the primitive, its shape rule and its derivative):

- ``inputs``: `Matrix` arguments (core rank 2, validated, cast to the compute dtype), other
  tensor `Operand` s (the first tensor argument decides the call's backend and dtype) and
  `Param` s (bool, str, int, float: they become the schema's types and attributes of the
  derivative rule's ``ctx``);
- ``dtypes``: the dtype policy, `LINALG` (float16/bfloat16 computed in float32 and cast back;
  the metal backend computes float32/complex64, torch also float64/complex128) or `INFERENCE`
  (mpslinalg.ops: float16/bfloat16 natively, no upcast);
- ``results``: one `Result` each, with its core shape (a function of the inputs' core shapes
  and the parameters), its dtype (the compute dtype, its real counterpart, or fixed) and whose
  batch it carries (all inputs' broadcast, or one input's). The batch shapes of the fake
  outputs, torch.compile's shapes, the casts back from the compute dtype and the batch
  dimensions a sharded call may split (`Declaration.batch_ndims`) follow from these;
- ``forward``: one function per path, ``"torch"``, ``"metal"`` and ``"small"`` (n <= 4; it gets
  the call's backend as keyword ``backend``), each taking the op's arguments;
- ``small_when``: whether the call takes the small path (``small_when(backend, *args)``);
- ``through_op``: the predicate that sends a torch-backend call in a native dtype through the
  op instead of straight to ``torch.linalg`` (reads shapes only: it runs on every call);
- ``backward`` with its citation, and ``saves``: the names of the inputs and results the rule
  keeps (the parameters are kept as ``ctx.<name>`` without asking), or, for a rule that needs
  more of ``ctx``, the function ``saves(ctx, inputs, outputs)``;
- ``prepare``: the family's own validation, ``prepare(call, **arguments)`` returning the op's
  arguments (or `Prepared`, or None: the arguments as they are).

The inference ops of `mpslinalg.ops` use a few more of its parts: an `Operand` of ``rank``
None (the whole shape is core: pad, attention), a ``mutable`` one (``log_normal_``, schema
``Tensor(a!)``, no results), a `Result` whose ``dtype`` is a function of the arguments
(``out_int32``, ``out_dtype``), the `INFERENCE` / `AS_GIVEN` dtype policies, ``torch_direct``
(the torch forward without the op's dispatch when nothing is traced or differentiated), a
``prepare`` returning `Answered` (a call that is not the op's: pad's other modes) and
``Declaration.public(None, ...)`` for a function without a torch counterpart (no fast path).

`Declaration.public` then turns a signature (a function whose body is its numpydoc docstring)
into the public function: validation, backend decided once per call, dtype upcast and cast
back, the op call, the ``_ex`` form's ``check_errors`` or the plain form's raising check,
``torch.return_types``, ``out=`` with torch's casting rule, and the fast path straight to
torch (`mpslinalg._core.op.public`). The registered op (`Op`: schema, fake, autograd) is
``Declaration.op``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import backend as _backend
from . import checks
from . import distributed as _distributed
from .op import EXACT, Op, OutCasting, call_torch, cast_back, public, write_out

#: ``Result.dtype``: the compute dtype of the call / its real counterpart (singular values,
#: eigenvalues, log|det|).
SAME = "same"
REAL = "real"

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}

#: ``Result.core`` of an output a mode does not compute: torch's empty ``(0,)`` tensor (no
#: batch), as qr's Q for mode 'r' and eigvalsh's eigenvectors.
NOT_COMPUTED = "not computed"

#: Dtype policies: ``policy(fn, dtype, backend)`` is the compute dtype of inputs of ``dtype``
#: (TypeError naming ``fn`` when the backend cannot compute in it).
LINALG = checks.compute_dtype
#: `LINALG`, with float64 / complex128 on the metal backend too (solve and inv: refined).
LINALG_REFINED = checks.refined_compute_dtype
INFERENCE = checks.ops_compute_dtype


def _as_given(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    return dtype


#: The dtype policy of an op that takes every dtype as it is (bytes moved, fp8 codes), or whose
#: prepare checks the dtypes itself, in torch's order.
AS_GIVEN = _as_given


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype of ``dtype``'s values (float32 for complex64, itself when real)."""
    return _REAL.get(dtype, dtype)


@dataclass(frozen=True)
class Matrix:
    """A ``(*, m, n)`` tensor argument (``m == n`` when ``square``), computed in the call's
    dtype. The first `Matrix` of an op decides the backend and the compute dtype."""

    name: str
    square: bool = True
    rank = 2


@dataclass(frozen=True)
class Operand:
    """Any other tensor argument, of core rank ``rank`` (its last ``rank`` dimensions; the
    rest is batch). ``same_dtype``: it must have the first tensor's dtype and is computed in
    the call's dtype; else it is passed as given (pivots, indices). An optional one (schema
    type ``Tensor?``, ``optional``) may be None. ``rank`` None: every dimension is core (an op
    whose shape rule reads the whole shape, as pad's). ``built``: the family's ``prepare``
    makes it from the public arguments (pinv's tolerance tensors from floats), so it is not
    validated here."""

    name: str
    rank: int | None
    same_dtype: bool = True
    optional: bool = False
    built: bool = False
    #: The op writes into it (schema ``Tensor(a!)``; an op with no results returns nothing).
    mutable: bool = False


@dataclass(frozen=True)
class Param:
    """A non-tensor argument; ``type`` is its schema type (``"bool"``, ``"str?"``, ...)."""

    name: str
    type: str
    rank = None


@dataclass(frozen=True)
class Result:
    """One output. ``core``: its core shape, from the core shapes of the tensor inputs and
    the parameters' values (in the op's argument order); ``()`` for one value per batch
    element; a name: that input's core shape; `NOT_COMPUTED` (also as the callable's value).
    ``batch``: the input whose batch shape it has (None: all tensor inputs' broadcast).
    ``dtype``: `SAME`, `REAL` or a torch dtype, or a function of the op's arguments giving one
    (``out_int32``, ``out_dtype``: such a result is not cast back). ``differentiable=False``:
    marked so for autograd (ranks, singular values of a solver)."""

    name: str
    core: Callable[..., Sequence[int]] | Sequence[int] | str = ()
    dtype: str | torch.dtype | Callable[..., torch.dtype] = SAME
    batch: str | None = None
    info: bool = False
    differentiable: bool = True


def info(name: str = "info", *, batch: str | None = None) -> Result:
    """The ``info`` result of a factorisation: one int32 per batch element (LAPACK's)."""
    return Result(name, (), torch.int32, batch, info=True)


@dataclass(frozen=True)
class Call:
    """What one public call decided, once: its function's name, the concrete backend, the
    input's dtype (results are cast back to it), and the API name ``info`` raises with (or
    ``""``)."""

    fn: str
    backend: str
    dtype: torch.dtype
    check: str

    def cast(self, x: Tensor) -> Tensor:
        """A floating result of the compute dtype in the input's dtype (real values in its
        real counterpart); integers as they are."""
        return cast_back(x, real_dtype(self.dtype) if not x.is_complex() else self.dtype)


@dataclass(frozen=True)
class Prepared:
    """What a ``prepare`` hook returns when the results need a last step that depends on the
    arguments (solve's vector right-hand side): the op's arguments and ``finish(*results)``."""

    args: tuple
    finish: Callable[..., tuple]
    #: ``finish`` gives the public function's result itself (to_float8's data and the scale
    #: prepare computed), not the op's results.
    whole: bool = False


@dataclass
class _Public:
    name: str
    checking: bool  # the plain form of an _ex pair: raises, returns no info
    check_param: bool  # has a check_errors parameter
    result_type: type | None
    casting: OutCasting
    prepare: Callable[..., tuple] | None
    finish: Callable[..., Any] | None
    params: list[str] = field(default_factory=list)
    #: torch's function and its name (a composite's general path checks its contract by it).
    torch_fn: Callable[..., Any] | None = None
    torch_name: str = ""
    #: The parameters torch's function takes by keyword only (the others by position: its
    #: names may differ from the documented ones, ``input`` for ``A``).
    keyword_only: frozenset = frozenset()


def _batch_ndim(x: Tensor, spec: Matrix | Operand) -> int:
    return 0 if spec.rank is None else x.dim() - spec.rank


@dataclass(frozen=True)
class Answered:
    """What a ``prepare`` hook returns when the call is not the op's (pad's modes other than
    constant, torch's own function on every backend): the public function's result."""

    result: Any


def _schema_type(spec: Matrix | Operand | Param) -> str:
    if isinstance(spec, Param):
        return spec.type
    if isinstance(spec, Operand) and spec.mutable:
        return "Tensor(a!)"
    return "Tensor?" if isinstance(spec, Operand) and spec.optional else "Tensor"


class Declaration:
    """One op: see the module docstring. ``Declaration.op`` is the registered `Op`."""

    def __init__(self, name: str, inputs: Sequence[Matrix | Operand | Param],
                 results: Sequence[Result], *, forward: dict[str, Callable[..., Any]],
                 small_when: Callable[..., bool] | None = None,
                 through_op: Callable[..., bool] | None = None,
                 prepare: Callable[..., tuple] | None = None,
                 backward: Callable[..., Sequence[Tensor | None]] | None = None,
                 saves: Sequence[str] | Callable[..., None] = (),
                 check_inputs: Callable[..., None] | None = None,
                 check_inputs_on: Sequence[str] = (),
                 info_routine: str | Callable[..., str | None] | None = None,
                 dtypes: Callable[[str, torch.dtype, str], torch.dtype] = LINALG,
                 torch_direct: bool = False, composite: bool = False,
                 torch_checks: bool = True, torch_everywhere: bool = False) -> None:
        self.name = name
        self.inputs = tuple(inputs)
        self.results = tuple(results)
        self.small_when = small_when
        self.through_op = through_op
        self.prepare = prepare
        self.check_inputs = check_inputs
        #: Device types where the torch backend runs ``check_inputs`` too: torch's kernel there
        #: takes bad values unchecked (cuSOLVER's sytrs reads out of bounds on bad pivots and
        #: leaves the process's CUDA context unusable).
        self.check_inputs_on = tuple(check_inputs_on)
        self.dtypes = dtypes
        #: The torch backend runs the "torch" forward without the registered op when nothing is
        #: traced or differentiated: the op's dispatch would only add its cost.
        self.torch_direct = torch_direct
        #: Composed of other ops (see `_Composed`): no op of its own; ``torch_checks``: torch's
        #: function checks a metal-backend call's arguments first, on meta tensors
        #: (`torch_contract`), for a composite whose forwards are not torch's function itself.
        self.composite = composite
        self.torch_checks = composite and torch_checks and not torch_everywhere
        #: The public function is torch's function on every backend (torch runs it on MPS with
        #: its own kernels), its errors reworded: the declaration states its shape rule only.
        self.torch_everywhere = torch_everywhere
        self._names = [a.name for a in self.inputs]
        self._flags = {i for i, a in enumerate(self.inputs)
                       if isinstance(a, Param) and a.type == "bool"}
        self._first = next(i for i, a in enumerate(self.inputs) if not isinstance(a, Param))
        self._first_name = self.inputs[self._first].name
        #: The tensors validated on every call: (name, is a Matrix, square), and the names of
        #: those with a dtype of their own (pivots, indices).
        self._checked = [(a.name, isinstance(a, Matrix), getattr(a, "square", False))
                         for a in self.inputs
                         if not isinstance(a, Param) and not getattr(a, "built", False)]
        self._own_dtype = {a.name for a in self.inputs
                           if isinstance(a, Operand) and not a.same_dtype}
        self._saves = [] if callable(saves) else [self._locate(s) for s in saves]
        save = saves if callable(saves) else self._save
        infos = [i for i, r in enumerate(self.results) if r.info]
        self.info_index = infos[0] if infos else None
        if composite:
            if backward is not None or self.info_index is not None:
                raise ValueError(f"{name}: a composite's derivative and errors are those of "
                                 "the ops it is composed of")
            self.op = _Composed(name, forward)
        else:
            self.op = Op(name, self.schema(), forward=forward, fake=self._fake,
                         info=self.info_index, info_routine=info_routine,
                         save=save if backward is not None else None, backward=backward,
                         check_inputs=check_inputs)

    def __repr__(self) -> str:
        return f"Declaration(mpslinalg::{self.name})"

    # ------------------------------------------------------------ derived: schema, fake, saves

    def schema(self) -> str:
        """The op's schema without the appended arguments (`Op` adds them)."""
        args = ", ".join(f"{_schema_type(a)} {a.name}" for a in self.inputs)
        results = ", ".join("Tensor" for _ in self.results)
        return f"({args}) -> ({results})" if len(self.results) != 1 else f"({args}) -> Tensor"

    def _core_shape(self, x: Any, spec: Matrix | Operand | Param) -> Any:
        if isinstance(spec, Param) or x is None:
            return x
        if spec.rank is None:
            return tuple(x.shape)
        return tuple(x.shape[x.dim() - spec.rank:]) if spec.rank else ()

    def batch_ndims(self, *args: Any) -> list[int | None]:
        """The number of batch dimensions of each argument (None for parameters): the
        dimensions every op maps over independently, so a call may be split along them."""
        return [None if isinstance(spec, Param) or x is None else _batch_ndim(x, spec)
                for x, spec in zip(args, self.inputs, strict=True)]

    def result_shapes(self, *args: Any) -> list[torch.Size]:
        """Each result's shape for the op's arguments ``args``: batch + core (the shape
        rule that fake tensors and sharding read)."""
        cores = [self._core_shape(x, spec) for x, spec in zip(args, self.inputs, strict=True)]
        batches = {spec.name: x.shape[:_batch_ndim(x, spec)]
                   for x, spec in zip(args, self.inputs, strict=True)
                   if not isinstance(spec, Param) and x is not None}
        shapes = []
        for r in self.results:
            if r.batch is not None:
                batch = batches[r.batch]
            else:
                batch = checks.broadcast_shapes(*batches.values())
            if r.core == NOT_COMPUTED:
                core = r.core
            elif isinstance(r.core, str):
                core = cores[self._names.index(r.core)]
            elif callable(r.core):
                core = r.core(*cores)
            else:
                core = r.core
            shapes.append(torch.Size((0,)) if core == NOT_COMPUTED
                          else torch.Size((*batch, *core)))
        return shapes

    def _result_dtype(self, r: Result, dtype: torch.dtype, args: tuple = ()) -> torch.dtype:
        if callable(r.dtype):  # chosen by an argument: computed in it, never cast back
            return r.dtype(*args)
        if r.dtype == SAME:
            return dtype
        if r.dtype == REAL:
            return real_dtype(dtype)
        return r.dtype

    def _fake(self, *args: Any) -> Any:
        if not self.results:  # writes into a mutable argument only
            return None
        first = args[self._first]
        outs = tuple(first.new_empty(shape, dtype=self._result_dtype(r, first.dtype, args))
                     for r, shape in zip(self.results, self.result_shapes(*args), strict=True))
        return outs if len(outs) != 1 else outs[0]

    def _locate(self, name: str) -> tuple[str, int]:
        if name in self._names:
            return "input", self._names.index(name)
        return "result", [r.name for r in self.results].index(name)

    def _save(self, ctx, inputs, outputs) -> None:
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        fixed = [x for x, r in zip(outs, self.results, strict=True) if not r.differentiable]
        if fixed:
            ctx.mark_non_differentiable(*fixed)
        ctx.save_for_backward(*((inputs if where == "input" else outs)[i]
                                for where, i in self._saves))
        for i, spec in enumerate(self.inputs):
            if isinstance(spec, Param):
                setattr(ctx, spec.name, inputs[i])

    # ------------------------------------------------------------ the general path of a call

    def _validate(self, fn: str, mode: str, values: dict[str, Any], check: str) -> Call | None:
        """Check the tensor arguments present in ``values`` and cast them to the compute
        dtype in place; the call's context (None when the op's first tensor is not among
        them: the public function's ``prepare`` builds the arguments then)."""
        first = self._first_name
        if first not in values:
            return None
        tensors = {}
        for name, matrix, square in self._checked:
            if name not in values:
                continue
            x = values[name]
            if matrix:
                tensors[name] = checks.check_matrix(fn, name, x, square=square)
            elif x is not None or name == first:
                tensors[name] = checks.check_tensor(fn, name, x)
        A = tensors[first]
        backend = _backend.concrete_backend(mode, A.device, fn)
        dtype = self.dtypes(fn, A.dtype, backend)
        same = tensors
        if len(tensors) > 1:
            if self._own_dtype:
                same = {n: x for n, x in tensors.items() if n not in self._own_dtype}
                for name in tensors.keys() & self._own_dtype:
                    checks.check_same_device(fn, **{first: A, name: tensors[name]})
            # the messages only where something differs (they cost more than the tests)
            if any(x.device != A.device for x in same.values()):
                checks.check_same_device(fn, **same)
            if any(x.dtype != A.dtype for x in same.values()):
                checks.check_same_dtype(fn, **same)
        for name, x in same.items():
            if x.dtype != dtype:
                values[name] = x.to(dtype)
        return Call(fn, backend, A.dtype, check)

    def run(self, pub: _Public, mode: str, values: dict[str, Any], check_errors: bool,
            out: Any) -> Any:
        """A public call on the general path (`public` generates the call of it)."""
        fn = pub.name
        if callable(pub.casting):  # torch's out= rule depends on the arguments
            pub = dataclasses.replace(pub, casting=pub.casting(**values))
        check = f"mpslinalg.{fn}" if pub.checking or check_errors else ""
        call = self._validate(fn, mode, values, check)
        # (a torch-backend call reaches a composite only through its through_op, which admits
        # valid arguments alone)
        if self.torch_checks and call is not None and call.backend == "metal" \
                and pub.torch_fn is not None and not torch.compiler.is_compiling():
            torch_contract(pub, values)
        prepare = pub.prepare or self.prepare
        finish = None
        whole = False
        if prepare is not None:
            args = prepare(call, **values)
            if args is None:  # validation only
                args = tuple(values[n] for n in self._names)
            elif isinstance(args, Answered):
                return write_out(fn, out, args.result, pub.casting)
            elif isinstance(args, Prepared):
                whole = args.whole
                args, finish = args.args, args.finish
            if call is None:  # the first matrix was made by prepare
                A = args[self._first]
                call = Call(fn, _backend.concrete_backend(mode, A.device, fn), A.dtype, check)
                self.dtypes(fn, A.dtype, call.backend)  # the policy's refusal; prepare cast
        else:
            args = tuple(values[n] for n in self._names)
        if self._flags:  # bool parameters as the schema takes them (torch accepts any truth)
            args = tuple(bool(a) if i in self._flags else a for i, a in enumerate(args))
        validates = False
        if self.check_inputs is not None and self.info_index is None:
            # validation that reads values: on the metal backend, where no torch kernel does it,
            # and on the devices of `check_inputs_on`
            validates = (call.backend == "metal"
                         or args[self._first].device.type in self.check_inputs_on)
            check = f"mpslinalg.{fn}" if validates else ""
            call = Call(fn, call.backend, call.dtype, check)
        small = bool(self.small_when is not None and self.small_when(call.backend, *args))
        if self.torch_direct and call.backend == "torch" and not validates and not (
                torch.compiler.is_compiling() or (self.op._backward is not None
                                                  and _differentiated(args))):
            outs = self.op.forward["torch"](*args)
        else:
            outs = self.op(*args, call.backend, small, check)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if finish is not None:
            if whole:
                return write_out(fn, out, finish(*outs), pub.casting)
            outs = finish(*outs)
        if pub.finish is not None:  # a result derived from the op's, cast by the finish
            return write_out(fn, out, pub.finish(call, *outs), pub.casting)
        outs = [cast_back(x, self._result_dtype(r, call.dtype, args))
                for x, r in zip(outs, self.results, strict=True)]
        if pub.checking and self.info_index is not None:
            del outs[self.info_index]
        result = outs[0] if len(outs) == 1 else (
            pub.result_type(outs) if pub.result_type is not None else tuple(outs))
        return write_out(fn, out, result, pub.casting)

    # ------------------------------------------------------------ public functions

    def _validating_guard(self, guard: Callable[..., bool] | None) -> Callable[..., bool]:
        """``guard`` that also sends a torch-backend call past the fast path on the devices of
        `check_inputs_on` (the fast path calls torch's function, which does not validate)."""
        single = guard is not None and len(inspect.signature(guard).parameters) == 1

        def validating(first: Any, *rest: Any) -> bool:
            if first.device.type in self.check_inputs_on:
                return True
            return guard is not None and (guard(first) if single else guard(first, *rest))
        return validating

    def public(self, torch_fn: Callable[..., Any] | None, *, torch_name: str | None = None,
               through_op: Callable[..., bool] | None | str = "declared",
               prepare: Callable[..., tuple] | None = None,
               finish: Callable[..., Any] | None = None,
               casting: OutCasting | Callable[..., OutCasting] = EXACT,
               result_type: type | None = None, checking: bool | None = None,
               name: str | None = None, fast_dtypes: frozenset | None = None):
        """Decorator: ``signature`` (a function whose body is its docstring) becomes the
        public function calling this op, with ``torch_fn`` as its fast path.

        Parameters named like the op's arguments are passed to it (``prepare(call, **those)``
        builds the arguments otherwise); ``check_errors`` makes it the ``_ex`` form of an op
        with ``info`` (raising only when asked); without it such an op's public function is the
        checking form (raises, returns no ``info``); ``out`` takes torch's ``out=`` with
        ``casting``. ``name``: the public name, when the signature's is another (a keyword
        form that the public function calls). ``finish(call, *results)`` replaces the result
        when the function returns something derived from the op's results (``logdet`` from
        ``slogdet``); it gets them in the compute dtype and casts its own (`Call.cast`).
        ``torch_fn`` None: a function of mpslinalg's own, without a fast path.
        ``fast_dtypes``: the dtypes of the first tensor the fast path takes, when torch's
        function computes more than torch.linalg's four natively (`public`). ``casting`` may
        be a function of the public arguments giving the `OutCasting`, where torch's rule
        depends on them (matrix_power's on the power).
        """
        own = torch_fn is None  # an op of mpslinalg's own: no torch function, no fast path
        torch_name = torch_name or ("" if own else torch_fn.__name__.replace("linalg_", "linalg."))
        if not own and torch_name == torch_fn.__name__ and hasattr(torch.linalg, torch_name) \
                and getattr(torch.linalg, torch_name) is torch_fn:
            torch_name = f"linalg.{torch_name}"
        guard = self.through_op if through_op == "declared" else through_op
        if self.check_inputs_on:
            guard = self._validating_guard(guard)

        def wrap(signature: Callable[..., Any]) -> Callable[..., Any]:
            sig = inspect.signature(signature)
            names = [p for p in sig.parameters if p not in ("out", "check_errors")]
            check_param = "check_errors" in sig.parameters
            raises = checking if checking is not None else finish is None
            checking_form = self.info_index is not None and not check_param and raises
            kind = result_type or getattr(torch.return_types, torch_name.replace(".", "_"), None)
            pub = _Public(name or signature.__name__, checking_form, check_param, kind,
                          casting, prepare, finish, names,
                          torch_fn, torch_name, frozenset(
                              p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY))
            packed = ", ".join(f"{n!r}: {n}" for n in names)
            check = "check_errors" if check_param else "False"
            out = "out" if "out" in sig.parameters else "None"
            params = []
            star = False
            for p in sig.parameters.values():
                if p.kind is p.KEYWORD_ONLY and not star:
                    params.append("*")
                    star = True
                params.append(p.name if p.default is p.empty else f"{p.name}=_d_{p.name}")
            source = (f"def {pub.name}(_mode, {', '.join(params)}):\n"
                      f"    return _run(_pub, _mode, {{{packed}}}, {check}, {out})\n")
            defaults = {f"_d_{p.name}": p.default for p in sig.parameters.values()
                        if p.default is not p.empty}
            namespace = dict(defaults, _run=self.run, _pub=pub)
            exec(compile(source, f"<mpslinalg.{pub.name} general path>", "exec"),  # noqa: S102
                 namespace)
            general = namespace[pub.name]
            general.__signature__ = sig
            general.__doc__ = signature.__doc__
            general.__name__ = general.__qualname__ = pub.name
            general.__module__ = signature.__module__
            checks_flag: bool | str = "check_errors" if check_param else checking_form
            if own:
                function = _own_function(general, checks_flag)
            else:
                function = public(torch_fn, torch_name=torch_name, general_when=guard,
                                  checks=checks_flag, mode_arg=True,
                                  fast_dtypes=fast_dtypes or _backend.TORCH_NATIVE,
                                  always=self.torch_everywhere)(general)
            function.declaration = self
            return function

        return wrap


class _Composed:
    """The "op" of a composite declaration: no registered op of its own, its forwards call
    other ops (mpslinalg's, with their own derivative rules, fakes and errors, and torch's), so
    autograd, meta tensors and torch.compile see those. An error an inner mpslinalg function
    raises is reworded to name the composite first, as torch names the inner function after
    the outer one (``linalg.tensorinv`` raises ``inv: The diagonal element ...``)."""

    _backward = None

    def __init__(self, name: str, forward: dict[str, Callable[..., Any]]) -> None:
        self.name = name
        self.forward = forward

    def __call__(self, *args: Any) -> Any:
        *own, backend, small, _check = args
        try:
            if small:
                return self.forward["small"](*own, backend=backend)
            return self.forward[backend](*own)
        except Exception as error:
            raise _inner(error, self.name) from None

    def __repr__(self) -> str:
        return f"composite mpslinalg.{self.name}"


def _meta(x: Any) -> Any:
    if isinstance(x, Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)) and any(isinstance(t, Tensor) for t in x):
        return type(x)(_meta(t) for t in x)
    return x


def torch_contract(pub: _Public, values: dict[str, Any]) -> None:
    """A composite's arguments checked by torch's own function, run on meta tensors of the
    same shapes, strides and dtypes: torch's errors (reworded to name mpslinalg), whatever ops
    the composite computes with. (``out`` is `write_out`'s: meta kernels word its errors
    otherwise.)"""
    args = [_meta(x) for name, x in values.items() if name not in pub.keyword_only]
    kwargs = {name: _meta(x) for name, x in values.items() if name in pub.keyword_only}
    call_torch(pub.name, pub.torch_fn, *args, **kwargs)


def _inner(error: Exception, fn: str) -> Exception:
    """``error`` of an inner function, reworded to name ``mpslinalg.<fn>`` in its place (as
    `mpslinalg._core.errors.translate` names it in place of torch's inner function)."""
    text = str(error)
    if text.startswith(f"mpslinalg.{fn}:"):
        return error
    head, sep, rest = text.partition(": ")
    text = f"mpslinalg.{fn}: " + (rest if sep and head.startswith("mpslinalg.") else text)
    try:
        new = type(error)(text)
    except Exception:
        return error
    return new.with_traceback(error.__traceback__)


def _own_function(general: Callable[..., Any], checks: bool | str) -> Callable[..., Any]:
    """The public function of an op with no torch counterpart: the general path, given the
    backend in force (or `mpslinalg._core.distributed` for a DTensor)."""
    first = next(iter(inspect.signature(general).parameters))

    @functools.wraps(general)
    def function(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get(first)
        if type(x) not in _distributed.PLAIN and _distributed.is_dtensor(x):
            return _distributed.call(function, checks, args, kwargs)
        return general(_backend.fast_mode or _backend.get_backend(), *args, **kwargs)

    return function


def _differentiated(args: Sequence[Any]) -> bool:
    """Whether autograd records a call with these arguments (it must then go through the op)."""
    if not torch.is_grad_enabled():
        return False
    for x in args:
        if isinstance(x, Tensor) and x.requires_grad:
            return True
    return False
