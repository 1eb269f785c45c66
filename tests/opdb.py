"""The op database: each public op registers, in its family's test file, its sample inputs
(good and bad), its torch reference and its tolerances; :func:`instantiate_generic_tests` then
adds the generic tests below to that file, one per (op, backend) (learned from PyTorch's OpInfo
and instantiate_device_type_tests).

Generic tests (each can be opted out of per op in ``OpInfo.skips``, with the reason, and is
then reported as skipped with it; each check returns how many cases it checked, and one that
checked none fails, see `assert_checked_some`):

- ``parity``: every sample, in every supported dtype, against the torch reference computed in
  float64 / complex128 on the CPU (the outputs mapped through ``OpInfo.compare`` first);
- ``noncontiguous`` / ``conj_view``: non-contiguous and lazily conjugated inputs give the same
  results as their contiguous, resolved copies;
- ``upcast``: float16 / bfloat16 inputs compute in float32 and come back in their own dtype;
- ``inputs_unmodified``: no input is written to;
- ``out``: torch's ``out=`` semantics;
- ``gradients``: gradcheck in float64 on the torch backend, and on the metal backend gradients
  against torch's own autograd in float64;
- ``compile``: ``torch.compile(fullgraph=True)`` (aot_eager) matches eager, forward and backward;
- ``meta``: meta tensors give meta results of the right shapes;
- ``bad_input``: every bad sample raises the error torch raises (type), the message names
  ``mpslinalg.<fn>``;
- ``nonfinite``: NaN / Inf in one element, everywhere, or one batch element: no hang, no crash,
  the result is non-finite where torch's is, and a poisoned batch element leaves the others
  as they were;
- ``no_host_sync`` (metal backend): no device read, except the one of a checking form;
- ``orthonormal_factors``: the factors ``OpInfo.orthonormal`` names (svd's U and Vh, qr's Q,
  eigh's eigenvectors) have orthonormal columns on degenerate input (`degenerate_samples`:
  zero rows and columns, graded rows, rank 1, duplicates), whichever path serves it.
- ``batch_size_independent`` (ops with an n <= 4 small path, ``OpInfo.small_path``): a matrix,
  clean or holding NaN or Inf, gives alone the same values (or the same error type and
  message) as inside a batch at each small-path crossover of ``mpslinalg.small``'s tables
  (a skips key ``"batch_size_independent[complex Inf]"`` opts one input case out);
- ``nonfinite_rank`` (ops returning a rank, ``OpInfo.rank_output``): input holding NaN raises
  the error torch raises, in torch's wording, naming ``mpslinalg.<fn>``: never a plausible rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from mpslinalg.testing import count_host_syncs

_WIDE = {torch.float32: torch.float64, torch.complex64: torch.complex128,
         torch.float16: torch.float64, torch.bfloat16: torch.float64}
#: Relative tolerance of a result against the float64 reference, by compute dtype.
DEFAULT_RTOL = {torch.float32: 1e-4, torch.complex64: 1e-4, torch.float64: 1e-10,
                torch.complex128: 1e-10}


@dataclass
class Sample:
    """One call: ``op(*args, **kwargs)``; tensors in ``args`` are made on the CPU in float64 /
    complex128 and converted by the generic tests."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    desc: str = ""
    #: Test backends that refuse the call, as torch on that device does (lstsq's drivers other
    #: than gels on CUDA): the generic tests leave it out there, and ``bad_input`` checks the
    #: refusal.
    refused_on: tuple[str, ...] = ()


@dataclass
class BadSample(Sample):
    """A call that must raise ``error`` on every backend (with a message naming the function);
    ``match`` is a regular expression the message must also match."""

    error: type[BaseException] = RuntimeError
    match: str | None = None
    #: Test backends on which the call is valid after all (a cuSOLVER ``driver=`` on ``cuda``).
    valid_on: tuple[str, ...] = ()


@dataclass
class OpInfo:
    """What the generic tests need to know of one public function."""

    name: str
    op: Callable[..., Any]
    ref: Callable[..., Any]
    #: Good inputs, as float64 / complex128 CPU tensors: ``samples(complex_)``.
    samples: Callable[[bool], list[Sample]]
    bad_samples: Callable[[], list[BadSample]] = lambda: []
    #: dtypes every backend computes in (the torch backend adds their 64-bit counterparts).
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.complex64)
    #: Maps an output (tuple or tensor) to what is compared (e.g. drop ``info``).
    compare: Callable[[Any], Sequence[torch.Tensor]] = lambda out: (
        (out,) if isinstance(out, torch.Tensor) else tuple(out))
    #: Indices into Sample.args of the differentiable inputs (empty: not differentiable).
    grad_args: tuple[int, ...] = (0,)
    rtol: dict[torch.dtype, float] = field(default_factory=lambda: dict(DEFAULT_RTOL))
    supports_out: bool = True
    #: The positional tensor arguments that get NaN / Inf in the nonfinite test.
    nonfinite_args: tuple[int, ...] = (0,)
    #: Device reads of one call on the metal backend (1 for the checking forms).
    device_reads: int = 0
    #: Generic test name -> why this op opts out.
    skips: dict[str, str] = field(default_factory=dict)
    #: Tolerance of metal-backend gradients against torch's float64 ones, by dtype (1e-3 for
    #: dtypes not listed; ops computing natively in float16 / bfloat16 list those).
    grad_rtol: dict[torch.dtype, float] = field(default_factory=dict)
    #: dtypes the gradient test runs in (None: ``dtypes``); ops computing natively in
    #: float16 / bfloat16 differentiate in float32 only against the float64 reference.
    grad_dtypes: tuple[torch.dtype, ...] | None = None
    #: Applied to each differentiable input inside the differentiated function of the
    #: gradient test (None: identity); e.g. ``(A + A^H) / 2`` for ops that read one triangle of
    #: a Hermitian input, whose derivative (torch's too) assumes a Hermitian perturbation.
    grad_transform: Callable[[torch.Tensor], torch.Tensor] | None = None
    #: The parity reference of the torch backend runs on the backend's device rather than on
    #: the CPU: for results a GPU library may choose otherwise than LAPACK (LU of a complex
    #: matrix on CUDA: other pivots than LAPACK's largest |Re| + |Im|, an equally valid LU).
    ref_on_backend_device: bool = False
    #: Maps an output to its factors that must have orthonormal columns (Q^H Q = I; a factor
    #: with orthonormal rows, such as svd's Vh, as its conjugate transpose). None: the op has
    #: no such factors and the orthonormal_factors test does not apply.
    orthonormal: Callable[[Any], Sequence[torch.Tensor]] | None = None
    #: The inputs of the orthonormal_factors test: ``degenerate(complex_)``.
    degenerate: Callable[[bool], list[Sample]] = lambda c: degenerate_samples(c)
    #: torch's function with ``out=``, the oracle of the ``out`` test (None: ``ref``), for ops
    #: whose ``ref`` takes no ``out``.
    out_ref: Callable[..., Any] | None = None
    #: The op has an n <= 4 small path whose choice depends on the batch size (the
    #: batch_size_independent test applies).
    small_path: bool = False
    #: Index into ``compare(out)`` of a rank output (the nonfinite_rank test applies).
    rank_output: int | None = None
    #: The metal backend also computes float64 / complex128 (solve and inv: iterative
    #: refinement on float32 kernels, docs/float64.rst): the parity test runs them there too,
    #: at float64's tolerance.
    metal_float64: bool = False

    @property
    def fn_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------- helpers


def _convert(x: Any, dtype: torch.dtype, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        target = dtype if x.is_complex() == dtype.is_complex else (
            dtype.to_real() if dtype.is_complex else dtype)
        if device.type == "mps" and target in (torch.float64, torch.complex128):
            device = torch.device("cpu")  # float64 lives on the CPU on a Mac
        return x.to(device=device, dtype=target)
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_convert(v, dtype, device) for v in x)
    return x


def _kwargs(sample: Sample, device: torch.device) -> dict[str, Any]:
    """The sample's keyword arguments with their tensors (tolerances, say) on ``device``, as
    torch requires of every tensor operand."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in sample.kwargs.items()}


def _call(info: OpInfo, sample: Sample, dtype: torch.dtype, device: torch.device,
          transform: Callable[[torch.Tensor], torch.Tensor] | None = None):
    args = [_convert(a, dtype, device) for a in sample.args]
    if transform is not None:
        args = [transform(a) if isinstance(a, torch.Tensor) else a for a in args]
    return info.op(*args, **_kwargs(sample, device)), args


def _reference(info: OpInfo, sample: Sample, dtype: torch.dtype,
               device: torch.device | None = None):
    """The torch reference in float64 / complex128 on the CPU (or ``device``), from the inputs
    rounded to ``dtype`` (so that both see the same numbers)."""
    wide = _WIDE.get(dtype, dtype)
    cpu = torch.device("cpu")
    args = [_convert(_convert(a, dtype, cpu), wide, device or cpu) for a in sample.args]
    return info.ref(*args, **_kwargs(sample, device or cpu))


def _wide(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().cpu()
    return x.to(_WIDE.get(x.dtype, x.dtype)) if x.is_floating_point() or x.is_complex() else x


def assert_close(ours: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], rtol: float,
                 what: str) -> None:
    """Each pair equal in shape, and close relative to the reference's largest magnitude."""
    assert len(ours) == len(ref), what
    for a, b in zip(ours, ref, strict=True):
        a, b = _wide(a), _wide(b)
        assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        if not (a.is_floating_point() or a.is_complex()):
            assert torch.equal(a, b.to(a.dtype)), f"{what}: {a} != {b}"
            continue
        both_nan = a.isnan() & b.to(a.dtype).isnan()
        scale = b[b.isfinite()].abs().max().item() if b.isfinite().any() else 1.0
        err = (a - b.to(a.dtype)).abs()
        err = torch.where(both_nan | (a == b.to(a.dtype)), torch.zeros_like(err), err)
        assert not err.isnan().any(), f"{what}: NaN where the reference has none"
        if err.numel():
            assert err.max().item() <= rtol * max(scale, 1.0), (
                f"{what}: max error {err.max().item():.3g} > {rtol:g} * {max(scale, 1.0):.3g}")


def _dtypes(info: OpInfo, backend) -> list[torch.dtype]:
    if backend.is_metal and not info.metal_float64:
        return list(info.dtypes)
    return list(info.dtypes) + [_WIDE[d] for d in info.dtypes if d in _WIDE]


def _samples(info: OpInfo, dtype: torch.dtype, backend=None) -> list[Sample]:
    """The op's good samples in ``dtype``'s kind, less those ``backend`` refuses."""
    return [s for s in info.samples(dtype.is_complex)
            if backend is None or backend.name not in s.refused_on]


# ---------------------------------------------------------------- the generic tests


def check_parity(info: OpInfo, backend) -> int:
    checked = 0
    for dtype in _dtypes(info, backend):
        rtol = info.rtol.get(dtype, 1e-4)
        for sample in _samples(info, dtype, backend):
            ours, _ = _call(info, sample, dtype, backend.device)
            on_device = info.ref_on_backend_device and not backend.is_metal
            ref = _reference(info, sample, dtype,
                             backend.device if on_device else torch.device("cpu"))
            assert_close(info.compare(ours), info.compare(ref), rtol,
                         f"{info.name} {sample.desc} {dtype}")
            checked += 1
    return checked


def _noncontiguous(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0 or x.numel() == 0:
        return x
    buf = torch.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
    buf[..., ::2] = x
    return buf[..., ::2]


def check_layouts(info: OpInfo, backend) -> int:
    """Non-contiguous and lazily conjugated inputs give the contiguous inputs' results."""
    checked = 0
    for dtype in info.dtypes:
        for sample in _samples(info, dtype, backend):
            plain, _ = _call(info, sample, dtype, backend.device)
            strided, _ = _call(info, sample, dtype, backend.device, _noncontiguous)
            assert_close(info.compare(strided), info.compare(plain), info.rtol[dtype],
                         f"{info.name} {sample.desc} non-contiguous")
            if dtype.is_complex:
                def conj_view(x):
                    return x.conj_physical().conj() if x.is_complex() else x
                lazy, args = _call(info, sample, dtype, backend.device, conj_view)
                assert any(a.is_conj() for a in args if isinstance(a, torch.Tensor))
                assert_close(info.compare(lazy), info.compare(plain), info.rtol[dtype],
                             f"{info.name} {sample.desc} conjugate view")
            checked += 1
    return checked


def check_upcast(info: OpInfo, backend) -> int:
    checked = 0
    for low in (torch.float16, torch.bfloat16):
        for sample in _samples(info, torch.float32, backend):
            ours, _ = _call(info, sample, low, backend.device)
            args32 = [_convert(a, low, backend.device) for a in sample.args]
            args32 = [a.float() if isinstance(a, torch.Tensor) and a.dtype == low else a
                      for a in args32]
            ref = info.op(*args32, **_kwargs(sample, backend.device))
            for a, b in zip(info.compare(ours), info.compare(ref), strict=True):
                if b.is_floating_point():
                    assert a.dtype == low, f"{info.name}: {a.dtype} for {low} input"
                    torch.testing.assert_close(a.float(), b.to(low).float(), equal_nan=True)
                    checked += 1
    return checked


def check_inputs_unmodified(info: OpInfo, backend) -> int:
    checked = 0
    for dtype in info.dtypes:
        for sample in _samples(info, dtype, backend):
            args = [_convert(a, dtype, backend.device) for a in sample.args]
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            info.op(*args, **_kwargs(sample, backend.device))
            for a, b in zip(args, before, strict=True):
                if isinstance(a, torch.Tensor):
                    assert torch.equal(a, b), f"{info.name} {sample.desc} modified an input"
            checked += 1
    return checked


#: The dtypes the ``out`` test offers each output (the wrong device is ``meta``).
OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128, torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool)


def _call_out(fn: Callable[..., Any], args: list, kwargs: dict, outs: list[torch.Tensor],
              single: bool) -> tuple[Any, Exception | None]:
    try:
        return fn(*args, **kwargs, out=outs[0] if single else tuple(outs)), None
    except Exception as error:  # the test compares it with torch's
        return None, error


def _holds(device: torch.device, dtype: torch.dtype) -> bool:
    try:
        torch.empty(0, dtype=dtype, device=device)
    except (TypeError, RuntimeError):
        return False
    return True


def check_out(info: OpInfo, backend) -> int:
    """Each output offered each of `OUT_DTYPES` and a tensor on another device, the others
    right: accepted or refused as torch on the CPU does (the oracle), refused with torch's
    error type and text after ``mpslinalg.<fn>:``; accepted ones hold the result cast as torch
    casts it, are the tensors returned, in torch's return type (``torch.return_types.*_out``)."""
    oracle = info.out_ref or info.ref
    cpu = torch.device("cpu")
    checked = 0
    for dtype in _dtypes(info, backend):
        sample = _samples(info, dtype, backend)[0]
        result, args = _call(info, sample, dtype, backend.device)
        ref_args = [_convert(a, dtype, cpu) for a in sample.args]
        kwargs, ref_kwargs = _kwargs(sample, backend.device), _kwargs(sample, cpu)
        single = isinstance(result, torch.Tensor)
        results = (result,) if single else tuple(result)
        # (MPS holds no float64 / complex128)
        held = [d for d in OUT_DTYPES if _holds(backend.device, d)]
        for index, wanted in enumerate(results):
            for offered in (*held, "meta"):
                what = f"{info.name} {dtype} out[{index}] {offered}"
                devices = (backend.device, cpu)
                ours, theirs = (
                    [torch.empty(0, dtype=r.dtype, device=device) for r in results]
                    for device in devices)
                for outs, device in zip((ours, theirs), devices, strict=True):
                    outs[index] = (torch.empty(0, dtype=wanted.dtype, device="meta")
                                   if offered == "meta" else
                                   torch.empty(0, dtype=offered, device=device))
                want, refusal = _call_out(oracle, ref_args, ref_kwargs, theirs, single)
                got, error = _call_out(info.op, args, kwargs, ours, single)
                if refusal is not None:
                    assert error is not None, f"{what}: accepted, torch refuses: {refusal}"
                    prefix = f"mpslinalg.{info.fn_name}: "
                    assert str(error).startswith(prefix), f"{what}: {error}"
                    if offered == "meta":  # torch's kernels word (and type: NotImplementedError
                        # where no meta kernel exists) a device mismatch variously
                        assert isinstance(error, RuntimeError), f"{what}: {error!r}"
                        continue
                    assert type(error) is type(refusal), f"{what}: {error!r} != {refusal!r}"
                    assert str(refusal).endswith(str(error).removeprefix(prefix)), (
                        f"{what}: {error!s} is not torch's {refusal!s}")
                    continue
                if offered == "meta":  # torch's CPU kernels take meta outs and skip the copy
                    continue
                assert error is None, f"{what}: refused, torch accepts: {error!r}"
                assert type(got) is type(want), f"{what}: {type(got)} != torch's {type(want)}"
                got = (got,) if single else tuple(got)
                for g, o, r in zip(got, ours, results, strict=True):
                    assert g is o, f"{what}: the out tensor is not returned"
                    torch.testing.assert_close(o, r.to(o.dtype), equal_nan=True, rtol=0, atol=0,
                                               msg=what)
        checked += 1
    return checked


def check_gradients(info: OpInfo, backend) -> int:
    checked = 0
    for dtype in info.grad_dtypes or info.dtypes:
        wide = _WIDE[dtype]
        for sample in _samples(info, dtype, backend)[:2]:
            if any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in sample.args):
                continue
            if not backend.is_metal:
                args = [_convert(a, wide, backend.device) for a in sample.args]

                def f(*diff, args=args, sample=sample):
                    full = list(args)
                    for i, d in zip(info.grad_args, diff, strict=True):
                        full[i] = d if info.grad_transform is None else info.grad_transform(d)
                    return tuple(o for o in info.compare(info.op(*full, **_kwargs(
                        sample, backend.device)))
                                 if o.is_floating_point() or o.is_complex())
                diff = [args[i].clone().requires_grad_() for i in info.grad_args]
                torch.autograd.gradcheck(f, diff, nondet_tol=1e-10)
            else:
                ours = _grads(info, info.op, sample, dtype, backend.device)
                ref = _grads(info, info.ref, sample, wide, torch.device("cpu"))
                assert_close(ours, ref, info.grad_rtol.get(dtype, 1e-3),
                             f"{info.name} {sample.desc} gradient")
            checked += 1
    return checked


def _grads(info: OpInfo, fn, sample: Sample, dtype, device) -> list[torch.Tensor]:
    args = [_convert(a, dtype, device) for a in sample.args]
    diff = [args[i].clone().requires_grad_() for i in info.grad_args]
    for i, d in zip(info.grad_args, diff, strict=True):
        args[i] = d if info.grad_transform is None else info.grad_transform(d)
    outputs = [o for o in info.compare(fn(*args, **_kwargs(sample, device)))
               if o.is_floating_point() or o.is_complex()]
    gen = torch.Generator().manual_seed(0)
    weight_dtype = torch.complex128 if dtype.is_complex else torch.float64
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=weight_dtype).to(o)).real.sum()
               for o in outputs)
    return list(torch.autograd.grad(loss, diff, allow_unused=True))


def check_compile(info: OpInfo, backend) -> int:
    torch._dynamo.reset()
    dtype = info.dtypes[-1]
    sample = _samples(info, dtype, backend)[0]
    args = [_convert(a, dtype, backend.device) for a in sample.args]

    def f(*args):
        return info.compare(info.op(*args, **_kwargs(sample, backend.device)))

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    eager = f(*args)
    assert_close(compiled(*args), eager, info.rtol[dtype], f"{info.name} compiled")
    if info.grad_args:
        diff = [args[i].clone().requires_grad_() for i in info.grad_args]
        full = list(args)
        for i, d in zip(info.grad_args, diff, strict=True):
            full[i] = d
        loss = sum(o.abs().sum() for o in compiled(*full) if o.is_floating_point()
                   or o.is_complex())
        grads = torch.autograd.grad(loss, diff)
        eager_loss = sum(o.abs().sum() for o in f(*full) if o.is_floating_point()
                         or o.is_complex())
        assert_close(grads, torch.autograd.grad(eager_loss, diff), 1e-3,
                     f"{info.name} compiled backward")
    return 1


def check_meta(info: OpInfo, backend) -> int:
    dtype = info.dtypes[0]
    checked = 0
    for sample in _samples(info, dtype, backend):
        ours, _ = _call(info, sample, dtype, torch.device("meta"))
        ref, _ = _call(info, sample, dtype, backend.device)
        for a, b in zip(info.compare(ours), info.compare(ref), strict=True):
            assert a.device.type == "meta"
            assert a.shape == b.shape and a.dtype == b.dtype, info.name
        checked += 1
    return checked


def check_bad_input(info: OpInfo, backend) -> int:
    checked = 0
    for bad in info.bad_samples():
        if backend.name in bad.valid_on:
            continue
        args = [_convert(a, info.dtypes[0], backend.device) for a in bad.args]
        with pytest.raises(bad.error, match=bad.match) as err:
            info.op(*args, **_kwargs(bad, backend.device))
        assert str(err.value).startswith(f"mpslinalg.{info.fn_name}"), str(err.value)
        if "bad_input_torch" not in info.skips:  # torch raises the same kind of error
            cpu = [_convert(a, info.dtypes[0], torch.device("cpu")) for a in bad.args]
            with pytest.raises(bad.error):
                info.ref(*cpu, **bad.kwargs)
        checked += 1
    for dtype in info.dtypes:  # good samples this backend refuses, as torch on its device
        refused = [s for s in info.samples(dtype.is_complex) if backend.name in s.refused_on]
        for sample in refused:
            args = [_convert(a, dtype, backend.device) for a in sample.args]
            with pytest.raises(RuntimeError) as err:
                info.op(*args, **_kwargs(sample, backend.device))
            assert str(err.value).startswith(f"mpslinalg.{info.fn_name}"), str(err.value)
            if not backend.is_metal:
                with pytest.raises(RuntimeError):
                    info.ref(*args, **_kwargs(sample, backend.device))
            checked += 1
    return checked


def _poison(x: torch.Tensor, how: str, value: float) -> torch.Tensor:
    x = x.clone()
    if how == "everywhere":
        x.fill_(value)
    elif how == "one element":
        x.view(-1)[0] = value
    else:  # the first batch element
        x[0] = value
    return x


def _torch_in_dtype_finite(info: OpInfo, sample: Sample, dtype: torch.dtype,
                           output: int) -> torch.Tensor | None:
    """Where torch's result in ``dtype`` itself (not the float64 reference) is finite: torch
    2.11's float32 CPU chebyshev_polynomial_t of NaN is in places, its float64 one is not.
    None where torch has no kernel for ``dtype``."""
    try:
        same = info.compare(info.ref(*[_convert(a, dtype, torch.device("cpu"))
                                       for a in sample.args], **sample.kwargs))
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    return _wide(same[output]).isfinite()


def check_nonfinite(info: OpInfo, backend) -> int:
    checked = 0
    for dtype in info.dtypes:
        samples = [s for s in _samples(info, dtype, backend)
                   if all(s.args[i].numel() and s.args[i].dim() > 2 for i in info.nonfinite_args)]
        for sample in samples[:1]:
            clean, _ = _call(info, sample, dtype, backend.device)
            for how in ("one element", "everywhere", "batch element"):
                for value in (math.nan, math.inf):
                    bad = Sample(tuple(_poison(a, how, value) if i in info.nonfinite_args else a
                                       for i, a in enumerate(sample.args)), sample.kwargs)
                    ours, _ = _call(info, bad, dtype, backend.device)
                    ref = _reference(info, bad, dtype)
                    for j, (o, r, c) in enumerate(zip(info.compare(ours), info.compare(ref),
                                                      info.compare(clean), strict=True)):
                        if not (o.is_floating_point() or o.is_complex()):
                            continue
                        o, r = _wide(o), _wide(r)
                        where = f"{info.name} {how} {value}"
                        # poisoned input shows: where torch's result is non-finite, ours is
                        # somewhere too (which entries may differ with the elimination order),
                        # unless torch's own result in the sample's dtype is finite;
                        # poisoned everywhere, ours is non-finite wherever torch's is
                        nonfinite = ~r.isfinite()
                        if nonfinite.any() and not (nonfinite <= ~o.isfinite()).all():
                            same = _torch_in_dtype_finite(info, bad, dtype, j)
                            if same is not None and same.shape == nonfinite.shape:
                                nonfinite &= ~same
                        if nonfinite.any():
                            assert not o.isfinite().all(), f"{where}: finite, torch's is not"
                        if how == "everywhere":
                            assert (nonfinite <= ~o.isfinite()).all(), where
                        if how == "batch element" and o.dim() > 0 and o.shape[0] > 1:
                            assert_close([o[1:]], [_wide(c)[1:]], info.rtol[dtype],
                                         f"{where}: other batch elements changed")
                        checked += 1
    return checked


def check_no_host_sync(info: OpInfo, backend) -> int:
    dtype = info.dtypes[0]
    checked = 0
    for sample in _samples(info, dtype, backend):
        args = [_convert(a, dtype, backend.device) for a in sample.args]
        with count_host_syncs() as syncs:
            info.op(*args, **_kwargs(sample, backend.device))
        assert len(syncs.calls) <= info.device_reads, (info.name, syncs.calls)
        checked += 1
    return checked


def orthonormality_ratio(Q: torch.Tensor) -> float:
    """LAPACK's ``||Q^H Q - I||_1 / (rows eps)`` (eps of Q's dtype), the largest over the
    batch, in float64 / complex128."""
    from mpslinalg.testing import eps

    wide = _wide(Q)
    gram = wide.mH @ wide - torch.eye(Q.shape[-1], dtype=wide.dtype)
    if gram.numel() == 0:
        return 0.0
    return float(gram.abs().sum(-2).amax(-1).max()) / (max(Q.shape[-2], 1) * eps(Q.dtype))


def check_orthonormal_factors(info: OpInfo, backend) -> int:
    """On degenerate input every factor named by ``OpInfo.orthonormal`` has orthonormal
    columns to working precision: ``||Q^H Q - I|| / (m eps) < THRESH``. On the torch backend,
    where torch's own call on the same device fails that (cuSOLVER's float32 QR and eigh on
    rows graded to 1e+-20: NaN, or a LinAlgError), ours does as torch does: the same error,
    or factors no less orthonormal than torch's."""
    from mpslinalg.small import cpu_simd, native
    from mpslinalg.testing import THRESH

    # The n <= 4 kernels serve the torch backend on the CPU where the installation has their
    # library (loaded at import). One that does not load fails here; without one torch.linalg
    # serves those calls, and is checked.
    try:
        cpu_simd.ORTH_LIBRARY.require()
    except native.NativeUnavailableError:
        pass
    checked = 0
    for dtype in _dtypes(info, backend):
        for sample in info.degenerate(dtype.is_complex):
            where = f"{info.name} {sample.desc} {dtype}"
            torchs = None
            if not backend.is_metal and backend.device.type != "cpu":
                args = [_convert(a, dtype, backend.device) for a in sample.args]
                try:
                    torchs = info.orthonormal(info.ref(*args, **_kwargs(sample, backend.device)))
                except Exception as error:  # torch's own call fails: so must ours
                    with pytest.raises(type(error)):
                        _call(info, sample, dtype, backend.device)
                    checked += 1
                    continue
            out, _ = _call(info, sample, dtype, backend.device)
            for j, factor in enumerate(info.orthonormal(out)):
                ratio = orthonormality_ratio(factor)
                bound = THRESH
                if torchs is not None:
                    theirs = orthonormality_ratio(torchs[j])
                    bound = math.inf if math.isnan(theirs) else max(THRESH, 2 * theirs)
                assert bound == math.inf or ratio < bound, (
                    f"{where}: factor {j} ||Q^H Q - I|| / (m eps) = {ratio:.3g}")
            checked += 1
    return checked


def _small_path_batches(info: OpInfo, n: int, backend, dtype: torch.dtype) -> list[int]:
    """Batch sizes at which the small path of order ``n`` may change hands on ``backend``: on
    the torch backend the crossovers of the op's table in ``mpslinalg.small.paths`` for the
    backend's device (the table that names the op's public function, or every table where none
    does; only the op's own table: torch's CUDA SVD of 131072 3 x 3 matrices, another table's
    crossover, takes minutes); the metal backend's kernels serve n <= 4 at any batch size, so
    one past the threadgroup of its one-thread-per-matrix kernels, except for the dtypes it
    refines (float64: solve and inv), which never take the small path: there any batch of two
    shows the property, without a refined solve of 257 matrices in the emulator (a minute)."""
    from mpslinalg.linalg import refine_metal
    from mpslinalg.small import dispatch, paths

    if backend.is_metal:
        return [2] if refine_metal.refined(dtype) else [dispatch._GROUP + 1]
    own = [table for table in paths.TABLES.values() if info.fn_name in table.functions]
    return sorted({batch for table in own or paths.TABLES.values()
                   for batch in table.crossovers(backend.device.type, n)})


def _outcome(info: OpInfo, args: list, sample: Sample, device: torch.device):
    """The op's compared outputs for ``args``, or the error it raised."""
    try:
        return info.compare(info.op(*args, **_kwargs(sample, device)))
    except Exception as error:  # compared with the other batch sizes' outcome
        return error


def _value_case(dtype: torch.dtype, value: float) -> str:
    """The name of a non-finite input case, as ``OpInfo.skips`` keys it:
    ``"batch_size_independent[complex Inf]"`` opts that case alone out, and
    ``"batch_size_independent[cuda NaN]"`` that case on one test backend."""
    return ("complex " if dtype.is_complex else "") + ("NaN" if math.isnan(value) else "Inf")


def _opted_out(info: OpInfo, backend, dtype: torch.dtype, value: float | None) -> bool:
    if value is None:
        return False
    case = _value_case(dtype, value)
    return any(f"batch_size_independent[{key}]" in info.skips
               for key in (case, f"{backend.name} {case}"))


def _message(error: Exception) -> str:
    """An error's message less the function's name it starts with (mpslinalg's or torch's)."""
    import re

    return re.sub(r"^(mpslinalg|linalg|torch)\.[\w.]+: ", "", str(error))


def _torch_failed(outcome) -> bool:
    """torch's call failed where it should not: cuSOLVER's batched eigensolver reports an
    internal error for batches of 131072 3 x 3 matrices, clean ones too (torch 2.11 on an
    H200), which the small path answers."""
    return (isinstance(outcome, RuntimeError) and not isinstance(outcome, torch.linalg.LinAlgError)
            and "CUSOLVER_STATUS_INTERNAL_ERROR" in str(outcome))


def _torch_outcome(info: OpInfo, args: list, sample: Sample, device: torch.device):
    """torch's own compared outputs for ``args`` on their device, or the error it raised."""
    try:
        return info.compare(info.ref(*args, **_kwargs(sample, device)))
    except Exception as error:  # compared with ours
        return error


def check_batch_size_independent(info: OpInfo, backend) -> int:
    """A matrix (clean, or holding NaN or Inf) as batch element 0 of each small-path
    crossover's batch: on the torch backend the same values as torch's own call on the same
    batch and device, or the same error type and message (after the function's name); on the
    metal backend, whose kernels serve every batch size, the same as the matrix alone."""
    checked = 0
    for dtype in _dtypes(info, backend):
        samples = [s for s in _samples(info, dtype, backend)
                   if s.args[0].dim() >= 2 and s.args[0].numel()
                   and 2 <= s.args[0].shape[-1] <= 4 and 2 <= s.args[0].shape[-2] <= 4]
        for sample in samples[:1]:
            first = [_convert(a, dtype, backend.device).reshape(-1, *a.shape[-2:])[:1]
                     if isinstance(a, torch.Tensor) and a.dim() >= 2 else a for a in sample.args]
            n = first[0].shape[-1]
            for value in (None, math.nan, math.inf):
                if _opted_out(info, backend, dtype, value):
                    continue
                alone = [a.clone() if isinstance(a, torch.Tensor) else a for a in first]
                if value is not None:
                    for i in info.nonfinite_args:
                        alone[i].view(-1)[0] = value
                expected = _outcome(info, alone, sample, backend.device)
                for batch in _small_path_batches(info, n, backend, dtype):
                    args = []
                    for a, one in zip(first, alone, strict=True):
                        if isinstance(a, torch.Tensor) and a.dim() >= 2:
                            a = a.expand(batch, *a.shape[1:]).clone()
                            a[:1] = one
                        args.append(a)
                    got = _outcome(info, args, sample, backend.device)
                    case = f"{info.name} {dtype} value {value}"
                    if backend.is_metal:
                        where = f"{case}: alone and in a batch of {batch}"
                        want = expected
                    else:
                        where = f"{case}: a batch of {batch} and torch's call on it"
                        want = _torch_outcome(info, args, sample, backend.device)
                    if _torch_failed(want) and not _torch_failed(got):
                        where, want = f"{case}: alone and in a batch of {batch}", expected
                    checked += 1
                    if isinstance(want, Exception) or isinstance(got, Exception):
                        assert isinstance(got, type(want)), f"{where}: {got!r} != {want!r}"
                        assert _message(got) == _message(want), where
                        continue
                    if want is expected:
                        got = [o[:1] for o in got]
                    assert_close(got, want, info.rtol.get(dtype, 1e-4), where)
    return checked


def check_nonfinite_rank(info: OpInfo, backend) -> int:
    """A rank of input holding NaN: torch raises (its SVD does on the CPU), so ours raises the
    same type with torch's wording after the op's name; where torch returns (CUDA), the same
    ranks. The torch backend is held to torch on its own device, the metal backend to torch on
    the CPU."""
    checked = 0
    for dtype in info.dtypes:
        samples = [s for s in _samples(info, dtype, backend)
                   if s.args[0].dim() > 2 and s.args[0].numel()]
        for sample in samples[:1]:
            bad = Sample(tuple(_poison(a, "one element", math.nan) if i == 0 else a
                               for i, a in enumerate(sample.args)), sample.kwargs)
            try:
                device = None if backend.is_metal else backend.device
                ref = info.compare(_reference(info, bad, dtype, device))[info.rank_output]
            except Exception as torch_error:  # what ours must raise too
                with pytest.raises(type(torch_error)) as err:
                    _call(info, bad, dtype, backend.device)
                ours = str(err.value)
                assert ours.startswith(f"mpslinalg.{info.fn_name}: "), ours
                assert ours.partition(": ")[2] == str(torch_error).partition(": ")[2], ours
            else:
                ours, _ = _call(info, bad, dtype, backend.device)
                assert torch.equal(_wide(info.compare(ours)[info.rank_output]), _wide(ref)), (
                    info.name)
            checked += 1
    return checked


GENERIC_TESTS = {
    "parity": check_parity,
    "layouts": check_layouts,
    "upcast": check_upcast,
    "inputs_unmodified": check_inputs_unmodified,
    "out": check_out,
    "gradients": check_gradients,
    "compile": check_compile,
    "meta": check_meta,
    "bad_input": check_bad_input,
    "nonfinite": check_nonfinite,
    "no_host_sync": check_no_host_sync,
    "orthonormal_factors": check_orthonormal_factors,
    "batch_size_independent": check_batch_size_independent,
    "nonfinite_rank": check_nonfinite_rank,
}


#: Generic tests that are properties of the metal path alone (run on its executors only).
METAL_ONLY = {"no_host_sync"}


def _applies(info: OpInfo, test_name: str) -> bool:
    """Whether the generic test concerns the op at all (an opt-out in ``OpInfo.skips`` still
    applies: it is reported as a skip with its reason)."""
    if test_name == "out":
        return info.supports_out
    if test_name == "gradients":
        return bool(info.grad_args)
    if test_name == "upcast":
        return any(not d.is_complex for d in info.dtypes)
    if test_name == "orthonormal_factors":
        return info.orthonormal is not None
    if test_name == "batch_size_independent":
        return info.small_path
    if test_name == "nonfinite_rank":
        return info.rank_output is not None
    return True


def instantiate_generic_tests(namespace: dict, ops: Sequence[OpInfo]) -> None:
    """Add ``test_generic_<name>`` to a test module for its registered ``ops``, parametrized
    by op (and by backend through the ``backend`` / ``metal_backend`` fixtures). An op takes
    part in each test that applies to it; where ``OpInfo.skips`` opts it out of one, that test
    is reported as skipped with the reason, so opt-outs stay visible in every run."""
    for test_name, check in GENERIC_TESTS.items():
        chosen = [op for op in ops if _applies(op, test_name)]
        if not chosen:
            continue
        if test_name in METAL_ONLY:
            def test(metal_backend, info, check=check, test_name=test_name):
                _skip_if_opted_out(info, test_name)
                assert_checked_some(info, test_name, check(info, metal_backend))
        else:
            def test(backend, info, check=check, test_name=test_name):
                _skip_if_opted_out(info, test_name)
                assert_checked_some(info, test_name, check(info, backend))
        test.__name__ = f"test_generic_{test_name}"
        test.__doc__ = check.__doc__
        namespace[test.__name__] = pytest.mark.parametrize(
            "info", chosen, ids=[op.name for op in chosen])(test)


def assert_checked_some(info: OpInfo, test_name: str, checked: int) -> None:
    """A generic check returns how many cases (a sample in a dtype, a poisoned input, a batch
    size) it checked: none is a failure, never a pass. An op that has nothing to check for a
    test (all its samples filtered out) opts out of it in ``OpInfo.skips``, with the reason."""
    assert isinstance(checked, int) and checked >= 1, (
        f"{info.name}: the generic {test_name} test checked {checked!r} cases; an op with "
        f"nothing to check for it opts out in OpInfo.skips[{test_name!r}], saying why")


def _skip_if_opted_out(info: OpInfo, test_name: str) -> None:
    if test_name in info.skips:
        pytest.skip(f"{info.name} opts out of the generic {test_name} test: "
                    f"{info.skips[test_name]}")


# ---------------------------------------------------------------- fill values

#: The dtypes a fill value of an op is checked against: every integer and floating dtype.
FILL_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
               torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32,
               torch.float64, torch.float8_e4m3fn, torch.float8_e5m2)


def fill_range_values(dtype: torch.dtype) -> list:
    """Fill values at and just beyond the range of ``dtype``, as ints and as floats, and the
    non-finite ones."""
    special = [math.nan, math.inf, -math.inf, 0.5, -0.0, 10**400, -(10**400)]
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        beyond = info.max * (1 + info.eps)  # rounds to inf in dtype, but is not inf
        return [info.max, -info.max, beyond, -beyond, 1e300, int(info.max), int(info.max) * 2,
                info.tiny, info.tiny * info.eps / 4, 2**53 + 1, *special]
    info = torch.iinfo(dtype)
    return [info.min, info.max, info.min - 1, info.max + 1, -1, float(info.min),
            float(info.max) * 2, 2**53 + 1, *special]


def check_fill_range(call: Callable[[torch.Tensor, Any], torch.Tensor],
                     oracle: Callable[[torch.Tensor, Any], torch.Tensor], backend,
                     dtypes: Sequence[torch.dtype] = FILL_DTYPES) -> None:
    """``call(x, value)`` of an op that fills with a scalar of ``x``'s dtype against torch's
    ``oracle(x, value)`` on the CPU, for every dtype and `fill_range_values` value: what the
    oracle accepts the op accepts with the same result bit for bit; what it refuses the op
    refuses with the same exception type, in a message naming mpslinalg."""
    for dtype in dtypes:
        x = torch.arange(6).reshape(2, 3).to(dtype)
        for value in fill_range_values(dtype):
            try:
                want = oracle(x, value)
            except (RuntimeError, TypeError, ValueError, OverflowError) as error:
                with pytest.raises(type(error)) as err:
                    call(backend.tensor(x), value)
                assert str(err.value).startswith("mpslinalg."), (dtype, value, str(err.value))
                continue
            got = call(backend.tensor(x), value).cpu()
            assert got.dtype == want.dtype and got.shape == want.shape, (dtype, value)
            if dtype.is_floating_point:  # NaN payloads may differ; the sign of zero may not
                got, want = (t.double().nan_to_num(7.0, posinf=math.inf, neginf=-math.inf)
                             for t in (got, want))
                same = torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
            else:
                same = torch.equal(got, want)
            assert same, (dtype, value, got, want)


# ---------------------------------------------------------------- shared sample inputs


def well_conditioned(n: int, batch: tuple = (), complex_: bool = False, seed: int = 0,
                     m: int | None = None) -> torch.Tensor:
    """A float64 / complex128 matrix batch with condition number 10 (square) or a random
    rectangular one (``m`` rows)."""
    from mpslinalg.testing import matrix_with_spread, random_matrix

    dtype = torch.complex128 if complex_ else torch.float64
    if m is not None and m != n:
        return random_matrix(n, dtype, batch, seed, m=m)
    return matrix_with_spread(n, 10.0, dtype, batch, seed)


def square_samples(complex_: bool) -> list[Sample]:
    """Square inputs across the small path (n <= 4), the general path, batches, broadcastable
    and empty shapes."""
    c = complex_
    return [
        Sample((well_conditioned(3, (), c, 1),), desc="3x3"),
        Sample((well_conditioned(6, (2,), c, 2),), desc="(2, 6, 6)"),
        Sample((well_conditioned(4, (2, 3), c, 3),), desc="(2, 3, 4, 4)"),
        Sample((well_conditioned(1, (3,), c, 4),), desc="(3, 1, 1)"),
        Sample((torch.zeros(0, 5, 5, dtype=torch.complex128 if c else torch.float64),),
               desc="empty batch"),
        Sample((torch.zeros(2, 0, 0, dtype=torch.complex128 if c else torch.float64),),
               desc="0x0"),
    ]


def singular_samples() -> list[BadSample]:
    """Exactly singular input, for the checking forms (torch raises LinAlgError, or a plain
    RuntimeError for lu_factor; mpslinalg.LinAlgError subclasses both)."""
    A = torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    A[1, 2] = 0
    return [BadSample((A,), error=RuntimeError, match=r"\(Batch element 1\)")]


def square_bad_samples() -> list[BadSample]:
    """What every function of one square matrix must refuse, as torch does."""
    return [
        BadSample((torch.zeros(3),), error=RuntimeError, match="dimensions"),
        BadSample((torch.zeros(2, 3, 4),), error=RuntimeError, match="square"),
        BadSample((torch.zeros(3, 3, dtype=torch.int32),), error=(TypeError, RuntimeError),
                  match="int"),
        BadSample(([[1.0, 0.0], [0.0, 1.0]],), error=(TypeError, AttributeError)),
    ]


def solve_samples(complex_: bool) -> list[Sample]:
    """Right-hand sides of every kind torch accepts: matrices, vectors, batches of vectors,
    broadcast batches, ``left=False``, empty."""
    c = complex_
    A3, A6 = well_conditioned(3, (), c, 1), well_conditioned(6, (2,), c, 2)
    return [
        Sample((A3, well_conditioned(3, (), c, 5, m=3)[:, :2]), desc="3x3, 2 right-hand sides"),
        Sample((A6, well_conditioned(6, (2,), c, 6)[..., :3]), desc="(2, 6, 6), 3 rhs"),
        Sample((A6, well_conditioned(6, (2,), c, 7)[..., 0]), desc="batched vectors"),
        Sample((A3, well_conditioned(3, (), c, 8)[0]), desc="one vector"),
        Sample((well_conditioned(4, (2, 1), c, 3), well_conditioned(4, (3,), c, 9)[..., :2]),
               desc="broadcast (2, 1, 4, 4) with (3, 4, 2)"),
        Sample((A6, well_conditioned(6, (2,), c, 10)[..., :2].mT), {"left": False},
               desc="X A = B"),
        Sample((A3, torch.zeros(0, 3, 2, dtype=A3.dtype)), desc="empty batch of B"),
    ]


#: Shapes of `degenerate_samples`: those of the n <= 4 kernels (square, and the camera's 3 x 4
#: and 4 x 3) and of the general paths (square beyond 4, tall, wide).
DEGENERATE_SHAPES = ((2, 2), (3, 3), (4, 4), (3, 4), (4, 3), (6, 6), (7, 3), (3, 7))
#: Matrices per kind of degenerate input for the shapes of the n <= 4 paths: their 7 kinds (5
#: Hermitian ones) make 364 (260) matrices in one call, at or above the batches from which
#: mpslinalg.small.orthogonal takes those paths (qr: 256, svd: 256, eigh: 256 at most).
_DEGENERATE_PER_KIND_SMALL = 52
#: ... and for the general paths, whose kernels treat every batch alike.
_DEGENERATE_PER_KIND_GENERAL = 2


def degenerate_matrices(m: int, n: int, complex_: bool = False, per_kind: int = 40,
                        seed: int = 0, hermitian: bool = False) -> dict[str, torch.Tensor]:
    """Batches (per_kind, m, n) in float64 / complex128 on which factorisations lose
    orthogonality: a zero row, a zero column, rows graded 1e-20 .. 1e20, rank 1, two equal
    rows, two equal columns, the zero matrix. With ``hermitian`` (m == n) the Hermitian
    counterparts: a zero row and column, D H D graded 1e-10 .. 1e10 (entries 1e-20 .. 1e20),
    v v^H, a repeated row and column."""
    from mpslinalg.testing import random_matrix

    dtype = torch.complex128 if complex_ else torch.float64
    A = random_matrix(n, dtype, (per_kind,), seed, m=m)
    r, c = min(1, m - 1), min(1, n - 1)
    if hermitian:
        H = A + A.mH
        zero = H.clone()
        zero[:, r, :] = 0
        zero[:, :, r] = 0
        d = torch.logspace(-10, 10, n, dtype=torch.float64).to(dtype)
        v = A[..., :, :1]
        repeated = H.clone()
        repeated[:, r, :] = repeated[:, 0, :]
        repeated[:, :, r] = repeated[:, :, 0]
        return {"zero row and column": zero, "graded": d[:, None] * H * d[None, :],
                "rank 1": v @ v.mH, "repeated row and column": repeated,
                "zero": torch.zeros_like(H)}
    zero_row, zero_col, equal_rows, equal_cols = A.clone(), A.clone(), A.clone(), A.clone()
    zero_row[:, r, :] = 0
    zero_col[:, :, c] = 0
    equal_rows[:, r, :] = equal_rows[:, 0, :]
    equal_cols[:, :, c] = equal_cols[:, :, 0]
    graded = torch.logspace(-20, 20, m, dtype=torch.float64).to(dtype)[:, None] * A
    return {"zero row": zero_row, "zero column": zero_col, "graded rows": graded,
            "rank 1": A[..., :, :1] @ A[..., :1, :], "equal rows": equal_rows,
            "equal columns": equal_cols, "zero": torch.zeros_like(A)}


def degenerate_samples(complex_: bool, kwargs: Sequence[dict] = ({},),
                       hermitian: bool = False) -> list[Sample]:
    """One sample per shape of `DEGENERATE_SHAPES` (square ones only with ``hermitian``) and
    keyword set: the kinds of `degenerate_matrices` stacked into one batch."""
    samples = []
    for seed, (m, n) in enumerate(DEGENERATE_SHAPES):
        if hermitian and m != n:
            continue
        per_kind = (_DEGENERATE_PER_KIND_SMALL if max(m, n) <= 4
                    else _DEGENERATE_PER_KIND_GENERAL)
        kinds = degenerate_matrices(m, n, complex_, per_kind, seed, hermitian)
        A = torch.cat(list(kinds.values()))
        for kw in kwargs:
            samples.append(Sample((A,), dict(kw), desc=f"{m}x{n} degenerate {kw or ''}"))
    return samples


def metal_constant(header: str, name: str) -> str:
    """The value text of ``constexpr <type> <name> = <value>;`` in ``metal/<header>``, for the
    tests that check a host module mirrors its kernel header's constants."""
    import re

    from mpslinalg._core import metal as _metal

    text = (_metal.metal_root() / header).read_text()
    match = re.search(rf"constexpr (?:int|long|float) {name} = ([^;]+);", text)
    assert match, f"{name} not in metal/{header}"
    return match.group(1).strip()
