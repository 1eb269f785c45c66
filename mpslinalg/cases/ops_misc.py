"""Check and bench cases of the mpslinalg.ops families unsigned, search, special, random and
attention.

Checks run the public functions (the Metal kernels under ``check``'s default backend) on fixed
hard inputs. Exact ops (comparisons, searches) raise on any mismatch with the reference and
return 0; the polynomials and attention return error ratios against float64 references in
units of float32 eps; log_normal returns its Kolmogorov-Smirnov statistic scaled so that 1 is
the 0.1 % critical value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .. import ops
from .._core.registry import bench_case, check_case
from ..testing import eps

_EPS32 = eps(torch.float32)
#: sqrt(n) * D at the 0.1 % level of the Kolmogorov distribution (asymptotic).
_KS_CRITICAL = 1.9495


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _require_equal(ours: torch.Tensor, ref: torch.Tensor, what: str) -> float:
    ours = ours.cpu()
    if ours.shape != ref.shape or not torch.equal(ours, ref):
        bad = int((ours != ref).sum()) if ours.shape == ref.shape else -1
        raise AssertionError(f"{what}: {bad} entries differ from the reference")
    return 0.0


# ------------------------------------------------------------------------- unsigned

_NUMPY = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal, "maximum": np.maximum,
          "minimum": np.minimum}


def _boundaries(bits: int) -> list[int]:
    values = {0, 1, 2**bits - 1, 2**bits - 2}
    for k in (15, 16, 31, 32, 63):
        if k < bits:
            values |= {2**k - 1, 2**k, 2**k + 1}
    return sorted(values)


def _register_unsigned(dtype: torch.dtype, bits: int) -> None:
    @check_case("eq ne lt le gt ge maximum minimum",
                f"{str(dtype).removeprefix('torch.')}: all pairs around 2^15, 2^31, 2^63, max")
    def _check(device: torch.device) -> float:
        values = _boundaries(bits)
        a = torch.tensor(values, dtype=dtype).view(-1, 1)
        b = torch.tensor(values, dtype=dtype).view(1, -1)
        for name, np_fn in _NUMPY.items():
            ref = torch.from_numpy(np.ascontiguousarray(
                np_fn(*np.broadcast_arrays(a.numpy(), b.numpy()))))
            _require_equal(getattr(ops, name)(a.to(device), b.to(device)), ref, name)
        return 0.0


for _dtype, _bits in ((torch.uint16, 16), (torch.uint32, 32), (torch.uint64, 64)):
    _register_unsigned(_dtype, _bits)


# ------------------------------------------------------------------------- search

@check_case("searchsorted", "batched rows with duplicates, NaN and +-inf, sorter, both sides")
def _check_searchsorted(device: torch.device) -> float:
    g = _gen(0)
    seq = (torch.randint(-20, 21, (8, 16, 300), generator=g) / 4).float()
    seq[0, :, -3:] = torch.tensor([math.inf, math.nan, math.nan])
    seq[1, :, :2] = -math.inf
    seq = seq.sort(-1).values
    values = (torch.randint(-24, 25, (8, 16, 50), generator=g) / 4).float()
    values[0, 0, :3] = torch.tensor([math.nan, math.inf, -math.inf])
    perm = torch.randperm(300, generator=g)
    shuffled = seq[..., perm]
    sorter = shuffled.argsort(dim=-1, stable=True)
    for right in (False, True):
        _require_equal(ops.searchsorted(seq.to(device), values.to(device), right=right),
                       torch.searchsorted(seq, values, right=right), f"right={right}")
        _require_equal(ops.searchsorted(shuffled.to(device), values.to(device), right=right,
                                        sorter=sorter.to(device), out_int32=True),
                       torch.searchsorted(shuffled, values, right=right, sorter=sorter,
                                          out_int32=True), f"sorter, right={right}")
    return 0.0


@check_case("bucketize", "float16 and int64 boundaries, scalar input")
def _check_bucketize(device: torch.device) -> float:
    g = _gen(1)
    boundaries = torch.tensor([-3.0, -1.0, 0.0, 0.0, 0.5, 2.0])
    x = torch.randn(1000, generator=g) * 2
    for dtype in (torch.float16, torch.int64):
        b, v = boundaries.to(dtype), (x if dtype.is_floating_point else x.round()).to(dtype)
        for right in (False, True):
            _require_equal(ops.bucketize(v.to(device), b.to(device), right=right),
                           torch.bucketize(v, b, right=right), f"{dtype} right={right}")
    _require_equal(ops.bucketize(0.0, boundaries.to(device)), torch.bucketize(0.0, boundaries),
                   "scalar")
    return 0.0


# ------------------------------------------------------------------------- special

def _register_polynomial(name: str) -> None:
    @check_case(name, "degrees 0..40 (Hermite 0..25) over the interval and beyond; error / "
                      "(n eps |value|max per degree)")
    def _check(device: torch.device) -> float:
        if "shifted" in name:
            x = torch.linspace(-0.1, 1.1, 97)
        elif "laguerre" in name:
            x = torch.linspace(0.0, 12.0, 97)
        else:
            x = torch.linspace(-1.1, 1.1, 97)
        top = 25 if "hermite" in name else 40
        n = torch.arange(top + 1, dtype=torch.float32)
        ours = getattr(ops, name)(x.view(-1, 1).to(device), n.view(1, -1).to(device)).cpu()
        ref = getattr(torch.special, name)(x.double().view(-1, 1), n.double().view(1, -1))
        scale = ref.abs().amax(dim=0, keepdim=True).clamp(min=1.0)
        degree = n.double().clamp(min=1.0).view(1, -1)
        return float(((ours.double() - ref).abs() / (scale * degree * _EPS32)).max())


for _name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
              "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
              "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
              "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
              "laguerre_polynomial_l", "legendre_polynomial_p"):
    _register_polynomial(_name)


# ------------------------------------------------------------------------- random

def _ks_statistic_log_normal(x: torch.Tensor, mean: float, std: float) -> float:
    """Kolmogorov-Smirnov distance between the sample ``x`` and LogNormal(mean, std), whose
    CDF is erfc(-(log x - mean) / (std sqrt 2)) / 2 (computed here: scipy is no runtime
    dependency)."""
    x = x.double().sort().values
    n = x.numel()
    cdf = 0.5 * torch.special.erfc(-(x.log() - mean) / (std * math.sqrt(2.0)))
    steps = torch.arange(1, n + 1, dtype=torch.float64) / n
    return float(torch.maximum(steps - cdf, cdf - (steps - 1.0 / n)).max())


def _register_log_normal(dtype: torch.dtype) -> None:
    @check_case("log_normal_", f"{str(dtype).removeprefix('torch.')}, mean 0.5, std 0.8, "
                               "n = 20000: sqrt(n) KS / critical(0.1 %)", bound=1.0)
    def _check(device: torch.device) -> float:
        n = 20000
        x = ops.log_normal_(torch.empty(n, dtype=dtype, device=device), 0.5, 0.8,
                            generator=_gen(7))
        return _ks_statistic_log_normal(x.cpu(), 0.5, 0.8) * math.sqrt(n) / _KS_CRITICAL


for _dtype in (torch.float32, torch.float16, torch.bfloat16):
    _register_log_normal(_dtype)


# ------------------------------------------------------------------------- attention

def _attention_case(q_shape, k_shape, v_shape, dtype=torch.float32, seed=0, **kwargs):
    def run(device: torch.device) -> float:
        g = _gen(seed)
        q, k, v = (torch.randn(s, generator=g).to(dtype) for s in (q_shape, k_shape, v_shape))
        mask = kwargs.get("attn_mask")
        ours = ops.scaled_dot_product_attention(
            q.to(device), k.to(device), v.to(device),
            **{**kwargs, "attn_mask": None if mask is None else mask.to(device)})
        ref = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(),
            **{**kwargs, "attn_mask": mask if mask is None or mask.dtype == torch.bool
               else mask.double()})
        # error in units of the dtype's eps times the largest |value|
        unit = torch.finfo(dtype).eps * float(v.abs().max())
        return float((ours.cpu().double() - ref).abs().max() / unit)

    return run


_MASK = torch.rand(77, 130, generator=_gen(3)) > 0.2
_MASK[10] = False
_ATTENTION = {
    "decode, 32 query heads on 8 key heads, S = 1000": (
        (2, 32, 1, 64), (2, 8, 1000, 64), (2, 8, 1000, 64), {"enable_gqa": True}),
    "causal prefill (2, 4, 130, 64), scale 0.05": (
        (2, 4, 130, 64), (2, 4, 130, 64), (2, 4, 130, 64), {"is_causal": True, "scale": 0.05}),
    "boolean mask with an empty row, (1, 3, 77, 128), S = 130": (
        (1, 3, 77, 128), (1, 3, 130, 128), (1, 3, 130, 128), {"attn_mask": _MASK}),
    "head dimension 256, additive mask, L = 40": (
        (1, 2, 40, 256), (1, 2, 50, 256), (1, 2, 50, 256),
        {"attn_mask": torch.randn(40, 50, generator=_gen(4))}),
}
for _case, (_q, _k, _v, _kw) in _ATTENTION.items():
    check_case("scaled_dot_product_attention", _case)(_attention_case(_q, _k, _v, **_kw))
check_case("scaled_dot_product_attention", "bfloat16, causal (2, 8, 64, 64)")(
    _attention_case((2, 8, 64, 64), (2, 8, 64, 64), (2, 8, 64, 64), dtype=torch.bfloat16,
                    is_causal=True))


# ------------------------------------------------------------------------- benchmarks

def _bench(make, ours, theirs):
    """``ours(*make(device))`` against torch's ``theirs`` (left out where torch lacks it)."""
    def run(device: torch.device, repeats: int) -> dict[str, Callable[[], object]]:
        args = make(device)
        contenders = {"mpslinalg": lambda: ours(*args)}
        try:
            theirs(*args)
        except (RuntimeError, NotImplementedError):  # e.g. torch's CPU lt for uint64
            return contenders
        contenders["torch"] = lambda: theirs(*args)
        return contenders

    return run


def _uint64_pair(device):
    g = _gen(0)
    a = torch.randint(-(2**62), 2**62, (1 << 20,), generator=g).view(torch.uint64)
    return a.to(device), a.roll(1).to(device)


bench_case("ops misc", "lt, 2^20 uint64")(_bench(_uint64_pair, ops.lt, torch.lt))
bench_case("ops misc", "searchsorted, 2^20 values in 2^14 sorted")(_bench(
    lambda device: (torch.randn(1 << 14, generator=_gen(1)).sort().values.to(device),
                    torch.randn(1 << 20, generator=_gen(2)).to(device)),
    ops.searchsorted, torch.searchsorted))
bench_case("ops misc", "legendre_polynomial_p, 2^20 x, n = 20")(_bench(
    lambda device: (torch.rand(1 << 20, generator=_gen(3)).to(device), 20),
    ops.legendre_polynomial_p, torch.special.legendre_polynomial_p))
bench_case("ops misc", "log_normal_, 2^22 float32")(_bench(
    lambda device: (torch.empty(1 << 22, device=device),),
    ops.log_normal_, lambda x: x.log_normal_()))
for _label, _shapes in (("decode (8, 32, 1, 128), S = 2048, GQA 32 / 8",
                         ((8, 32, 1, 128), (8, 8, 2048, 128), {"enable_gqa": True})),
                        ("prefill (2, 8, 512, 64), causal",
                         ((2, 8, 512, 64), (2, 8, 512, 64), {"is_causal": True}))):
    def _make(device, shapes=_shapes):
        q_shape, kv_shape, _ = shapes
        g = _gen(5)
        return tuple(torch.randn(s, generator=g).to(device) for s in (q_shape, kv_shape,
                                                                         kv_shape))
    _kw = _shapes[2]
    bench_case("ops misc", f"scaled_dot_product_attention {_label}")(_bench(
        _make, lambda q, k, v, kw=_kw: ops.scaled_dot_product_attention(q, k, v, **kw),
        lambda q, k, v, kw=_kw: F.scaled_dot_product_attention(q, k, v, **kw)))


@check_case("scaled_dot_product_attention",
            "dropout 0.2, causal (2, 4, 70, 32): against (P * D) V with the kernel's multipliers")
def _check_dropout(device: torch.device) -> float:
    from ..ops import attention as attention_module

    g = _gen(8)
    q, k, v = (torch.randn(2, 4, 70, 32, generator=g) for _ in range(3))
    seed, p = 99, 0.2
    ours = attention_module.attention_metal(q.to(device), k.to(device), v.to(device), None,
                                            True, 0.125, False, p, seed)
    D = attention_module.dropout_multipliers(q.to(device), k.to(device), v.to(device), False, p,
                                             seed).cpu().double()
    kept = float((D > 0).double().mean())
    if abs(kept - (1 - p)) > 5 * math.sqrt(p * (1 - p) / D.numel()):
        raise AssertionError(f"kept fraction {kept:.4f}, expected {1 - p}")
    P = attention_module.attention_weights(q.double(), k.double(), None, True, 0.125, False)
    ref = (P * D) @ v.double()
    return float((ours.cpu().double() - ref).abs().max() / (_EPS32 * v.abs().max()))
