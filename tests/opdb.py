"""The op database: each public op registers, in its family's test file, its sample inputs
(good and bad), its torch reference and its tolerances; :func:`instantiate_generic_tests` then
adds the generic tests below to that file, one per (op, backend) (learned from PyTorch's OpInfo
and instantiate_device_type_tests).

Generic tests (each can be opted out of per op in ``OpInfo.skips``, with the reason):

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
- ``no_host_sync`` (metal backend): no device read, except the one of a checking form.
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

    @property
    def fn_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------- helpers


def _convert(x: Any, dtype: torch.dtype, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        target = dtype if x.is_complex() == dtype.is_complex else (
            dtype.to_real() if dtype.is_complex else dtype)
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
    if backend.is_metal:
        return list(info.dtypes)
    return list(info.dtypes) + [_WIDE[d] for d in info.dtypes if d in _WIDE]


def _samples(info: OpInfo, dtype: torch.dtype) -> list[Sample]:
    return info.samples(dtype.is_complex)


# ---------------------------------------------------------------- the generic tests


def check_parity(info: OpInfo, backend) -> None:
    for dtype in _dtypes(info, backend):
        rtol = info.rtol.get(dtype, 1e-4)
        for sample in _samples(info, dtype):
            ours, _ = _call(info, sample, dtype, backend.device)
            on_device = info.ref_on_backend_device and not backend.is_metal
            ref = _reference(info, sample, dtype,
                             backend.device if on_device else torch.device("cpu"))
            assert_close(info.compare(ours), info.compare(ref), rtol,
                         f"{info.name} {sample.desc} {dtype}")


def _noncontiguous(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0 or x.numel() == 0:
        return x
    buf = torch.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
    buf[..., ::2] = x
    return buf[..., ::2]


def check_layouts(info: OpInfo, backend) -> None:
    """Non-contiguous and lazily conjugated inputs give the contiguous inputs' results."""
    for dtype in info.dtypes:
        for sample in _samples(info, dtype):
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


def check_upcast(info: OpInfo, backend) -> None:
    for low in (torch.float16, torch.bfloat16):
        for sample in _samples(info, torch.float32):
            ours, _ = _call(info, sample, low, backend.device)
            args32 = [_convert(a, low, backend.device) for a in sample.args]
            args32 = [a.float() if isinstance(a, torch.Tensor) and a.dtype == low else a
                      for a in args32]
            ref = info.op(*args32, **_kwargs(sample, backend.device))
            for a, b in zip(info.compare(ours), info.compare(ref), strict=True):
                if b.is_floating_point():
                    assert a.dtype == low, f"{info.name}: {a.dtype} for {low} input"
                    torch.testing.assert_close(a.float(), b.to(low).float(), equal_nan=True)


def check_inputs_unmodified(info: OpInfo, backend) -> None:
    for dtype in info.dtypes:
        for sample in _samples(info, dtype):
            args = [_convert(a, dtype, backend.device) for a in sample.args]
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            info.op(*args, **_kwargs(sample, backend.device))
            for a, b in zip(args, before, strict=True):
                if isinstance(a, torch.Tensor):
                    assert torch.equal(a, b), f"{info.name} {sample.desc} modified an input"


def check_out(info: OpInfo, backend) -> None:
    dtype = info.dtypes[0]
    sample = _samples(info, dtype)[0]
    result, args = _call(info, sample, dtype, backend.device)
    single = isinstance(result, torch.Tensor)
    results = (result,) if single else tuple(result)
    outs = tuple(torch.empty(0, dtype=r.dtype, device=r.device) for r in results)
    got = info.op(*args, **_kwargs(sample, backend.device), out=outs[0] if single else outs)
    got = (got,) if single else tuple(got)
    for g, o, r in zip(got, outs, results, strict=True):
        assert g is o or g.data_ptr() == o.data_ptr()
        torch.testing.assert_close(o, r, equal_nan=True)
    wrong = tuple(torch.empty(0, dtype=torch.int8, device=r.device) for r in results)
    with pytest.raises(RuntimeError, match=f"mpslinalg.{info.fn_name}"):
        info.op(*args, **_kwargs(sample, backend.device), out=wrong[0] if single else wrong)


def check_gradients(info: OpInfo, backend) -> None:
    for dtype in info.grad_dtypes or info.dtypes:
        wide = _WIDE[dtype]
        for sample in _samples(info, dtype)[:2]:
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
                continue
            ours = _grads(info, info.op, sample, dtype, backend.device)
            ref = _grads(info, info.ref, sample, wide, torch.device("cpu"))
            assert_close(ours, ref, info.grad_rtol.get(dtype, 1e-3),
                         f"{info.name} {sample.desc} gradient")


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


def check_compile(info: OpInfo, backend) -> None:
    torch._dynamo.reset()
    dtype = info.dtypes[-1]
    sample = _samples(info, dtype)[0]
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


def check_meta(info: OpInfo, backend) -> None:
    dtype = info.dtypes[0]
    for sample in _samples(info, dtype):
        ours, _ = _call(info, sample, dtype, torch.device("meta"))
        ref, _ = _call(info, sample, dtype, backend.device)
        for a, b in zip(info.compare(ours), info.compare(ref), strict=True):
            assert a.device.type == "meta"
            assert a.shape == b.shape and a.dtype == b.dtype, info.name


def check_bad_input(info: OpInfo, backend) -> None:
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


def check_nonfinite(info: OpInfo, backend) -> None:
    for dtype in info.dtypes:
        samples = [s for s in _samples(info, dtype)
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


def check_no_host_sync(info: OpInfo, backend) -> None:
    dtype = info.dtypes[0]
    for sample in _samples(info, dtype):
        args = [_convert(a, dtype, backend.device) for a in sample.args]
        with count_host_syncs() as syncs:
            info.op(*args, **_kwargs(sample, backend.device))
        assert len(syncs.calls) <= info.device_reads, (info.name, syncs.calls)


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
}


#: Generic tests that are properties of the metal path alone (run on its executors only).
METAL_ONLY = {"no_host_sync"}


def _applies(info: OpInfo, test_name: str) -> bool:
    if test_name in info.skips:
        return False
    if test_name == "out":
        return info.supports_out
    if test_name == "gradients":
        return bool(info.grad_args)
    if test_name == "upcast":
        return any(not d.is_complex for d in info.dtypes)
    return True


def instantiate_generic_tests(namespace: dict, ops: Sequence[OpInfo]) -> None:
    """Add ``test_generic_<name>`` to a test module for its registered ``ops``, parametrized
    by op (and by backend through the ``backend`` / ``metal_backend`` fixtures). An op takes
    part in each test that applies to it; ``OpInfo.skips`` records, with the reason, where it
    opts out (``skipped_generic_tests`` lists them, so they stay visible)."""
    for test_name, check in GENERIC_TESTS.items():
        chosen = [op for op in ops if _applies(op, test_name)]
        if not chosen:
            continue
        if test_name in METAL_ONLY:
            def test(metal_backend, info, check=check):
                check(info, metal_backend)
        else:
            def test(backend, info, check=check):
                check(info, backend)
        test.__name__ = f"test_generic_{test_name}"
        test.__doc__ = check.__doc__
        namespace[test.__name__] = pytest.mark.parametrize(
            "info", chosen, ids=[op.name for op in chosen])(test)


def skipped_generic_tests(ops: Sequence[OpInfo]) -> dict[tuple[str, str], str]:
    """(op, generic test) -> the reason it opts out."""
    return {(op.name, test): why for op in ops for test, why in op.skips.items()}


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


def check_params_struct(header: str, struct: str, fields: Sequence[str]) -> None:
    """A kernel's int64 parameter struct ``mpsl::<struct>`` (declared in ``metal/<header>``)
    has exactly ``fields``, in that order: the order host code packs the list in. A kernel
    compiled from the header copies each field, read by name, to the position ``fields`` gives
    it."""
    from mpslinalg import emulator
    from mpslinalg._core import metal as _metal

    copies = "\n".join(f"  out[{i}] = p.{name};" for i, name in enumerate(fields))
    source = _metal.load_source(header) + f"""
kernel void read_params(constant mpsl::{struct}& p [[buffer(0)]],
                        device long* out [[buffer(1)]], uint i [[thread_position_in_grid]]) {{
  static_assert(sizeof(mpsl::{struct}) == {len(fields)} * sizeof(long), "{struct} layout");
{copies}
}}
"""
    values = [1000 + i for i in range(len(fields))]
    out = torch.zeros(len(fields), dtype=torch.int64)
    emulator.compile_shader(source).read_params(values, out, threads=1)
    assert out.tolist() == values, f"{struct}: fields out of the host's order"


def metal_constant(header: str, name: str) -> str:
    """The value text of ``constexpr <type> <name> = <value>;`` in ``metal/<header>``, for the
    tests that check a host module mirrors its kernel header's constants."""
    import re

    from mpslinalg._core import metal as _metal

    text = (_metal.metal_root() / header).read_text()
    match = re.search(rf"constexpr (?:int|long|float) {name} = ([^;]+);", text)
    assert match, f"{name} not in metal/{header}"
    return match.group(1).strip()
