"""Check and bench cases of the LLM-inference ops: ``ops.linear`` (gemv), fp8 ``to_float8`` /
``scaled_mm``, ``ops.grouped_mm``.

Checks compare with the float64 definition computed from the very inputs (for fp8: the decoded
bytes and scales). The ratio is the classical error bound of a float32-accumulated product
rounded once to the output dtype:

    max |C - C_ref| / max((|A| |B|) (K u32) + |C_ref| u_out),   u = eps / 2,

so a kernel within its rounding-error bound scores below 1 (pass: below 30, as LAPACK's ratios).
Benchmarks time decode shapes against torch on the current device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import ops
from .._core.backend import resolve_backend
from .._core.registry import bench_case, check_case
from ..testing import wide


def _ratio(got: torch.Tensor, ref: torch.Tensor, abs_product: torch.Tensor, k: int) -> float:
    u32 = torch.finfo(torch.float32).eps / 2
    u_out = torch.finfo(got.dtype).eps / 2
    got, ref = wide(got), wide(ref)
    if not torch.equal(got.isnan(), ref.isnan()):
        raise AssertionError("NaN where the reference has none, or the reverse")
    bound = abs_product * (k * u32) + ref.abs() * u_out
    return float(((got - ref).abs() / bound.clamp_min(torch.finfo(torch.float64).tiny)).max())


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------- checks

@check_case("ops.linear", "decode (4, 1, 2048) x (512, 2048) bfloat16 with bias")
def _check_linear_decode(device: torch.device) -> float:
    g = _gen(0)
    x = torch.randn(4, 1, 2048, generator=g).bfloat16()
    w = (torch.randn(512, 2048, generator=g) / 45).bfloat16()
    b = torch.randn(512, generator=g).bfloat16()
    got = ops.linear(x.to(device), w.to(device), b.to(device))
    ref = F.linear(wide(x), wide(w), wide(b))
    abs_product = F.linear(wide(x).abs(), wide(w).abs(), wide(b).abs())
    return _ratio(got, ref, abs_product, 2048)


@check_case("ops.linear", "(37, 300) x (200, 300) float32: five row blocks, K % 128 != 0")
def _check_linear_rows(device: torch.device) -> float:
    g = _gen(1)
    x, w = torch.randn(37, 300, generator=g), torch.randn(200, 300, generator=g)
    got = ops.linear(x.to(device), w.to(device))
    return _ratio(got, wide(x) @ wide(w).T, wide(x).abs() @ wide(w).abs().T, 300)


@check_case("to_float8", "every fp8 code and rounding boundary, both formats: mismatching bytes "
                         "vs torch's cast", bound=1)
def _check_encode(device: torch.device) -> float:
    mismatches = 0
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
        finite = codes[codes.isfinite()].unique()
        mids = (finite[:-1] + finite[1:]) / 2
        x = torch.cat([finite, mids, torch.nextafter(mids, finite[1:]),
                       torch.nextafter(mids, finite[:-1]),
                       torch.tensor([float("inf"), float("nan"), 1e30, 1e-42])])
        x = torch.cat([x, -x]).reshape(1, -1)
        ref = x.to(dtype).view(torch.uint8)
        # the encoding op with unit scale: the raw cast of every boundary (to_float8 itself
        # would first divide by amax / max)
        direct = ops.fp8.fp8_encode_op(x.to(device), torch.ones(1, 1, device=device), 1,
                                       x.shape[1], ops.fp8.FP8_FORMATS[dtype],
                                       resolve_backend(device, "to_float8"), False, "")
        mismatches += int((direct.cpu() != ref).sum())
        decoded = ops.from_float8(torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device),
                                  torch.ones((), device=device), storage_dtype=dtype).cpu()
        same = (decoded == codes) | (decoded.isnan() & codes.isnan())
        mismatches += int((~same).sum())
    return float(mismatches)


def _fp8_case(device, m: int, recipe_a, recipe_b, seed: int) -> float:
    g = _gen(seed)
    k, n = 1024, 256
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    bias = torch.randn(n, generator=g).bfloat16()
    a8, sa = ops.to_float8(x, torch.float8_e4m3fn, recipe_a)
    w8, sw = ops.to_float8(w, torch.float8_e4m3fn, recipe_b)
    # mat_b = w8.t() takes the weight's own scale (torch's layouts)
    got = ops.scaled_mm(ops.float8_storage(a8).to(device), ops.float8_storage(w8).t().to(device),
                        sa.to(device), recipe_a, sw.to(device), recipe_b, bias=bias.to(device),
                        storage_dtype=torch.float8_e4m3fn)
    A = wide(ops.from_float8(a8, sa, recipe_a))
    W = wide(ops.from_float8(w8, sw, recipe_b))
    ref = A @ W.T + wide(bias)
    return _ratio(got, ref, A.abs() @ W.abs().T + wide(bias).abs(), k)


@check_case("ops.scaled_mm", "decode M=4, BlockWise1x128 x BlockWise128x128, e4m3fn, bf16 out")
def _check_fp8_blockwise(device: torch.device) -> float:
    S = ops.ScalingType
    return _fp8_case(device, 4, S.BlockWise1x128, S.BlockWise128x128, 2)


@check_case("ops.scaled_mm", "M=40 RowWise x RowWise, e4m3fn, bf16 out")
def _check_fp8_rowwise(device: torch.device) -> float:
    S = ops.ScalingType
    return _fp8_case(device, 40, S.RowWise, S.RowWise, 3)


@check_case("ops.grouped_mm", "64 tokens, 8 experts (empty and uneven groups), bf16, bias")
def _check_grouped(device: torch.device) -> float:
    g = _gen(4)
    offs = torch.tensor([0, 5, 5, 20, 21, 40, 63, 64], dtype=torch.int32)
    a = torch.randn(64, 256, generator=g).bfloat16()
    b = (torch.randn(8, 256, 128, generator=g) / 16).bfloat16()
    bias = torch.randn(8, 128, generator=g).bfloat16()
    got = ops.grouped_mm(a.to(device), b.to(device), offs=offs.to(device), bias=bias.to(device),
                         check_offsets=True)
    ids = torch.searchsorted(offs, torch.arange(64, dtype=torch.int32), right=True)
    A, B, C = wide(a), wide(b)[ids], wide(bias)[ids]
    ref = torch.einsum("tk,tkn->tn", A, B) + C
    abs_product = torch.einsum("tk,tkn->tn", A.abs(), B.abs()) + C.abs()
    return _ratio(got, ref, abs_product, 256)


# ------------------------------------------------------------------------- benchmarks

def _bench_linear(batch: int, k: int, n: int):
    def run(device: torch.device, repeats: int) -> dict[str, Callable[[], object]]:
        g = _gen(0)
        x = torch.randn(batch, 1, k, generator=g).bfloat16().to(device)
        w = torch.randn(n, k, generator=g).bfloat16().to(device)
        b = torch.randn(n, generator=g).bfloat16().to(device)
        return {"mpslinalg": lambda: ops.linear(x, w, b),
                "torch F.linear": lambda: F.linear(x, w, b)}
    return run


def _bench_fp8(m: int, k: int, n: int):
    """fp8 scaled_mm against the bf16 gemv of the same shape: the weight is k bytes per output
    column in fp8 against 2k in bf16."""
    def run(device: torch.device, repeats: int) -> dict[str, Callable[[], object]]:
        g = _gen(1)
        S = ops.ScalingType
        x = torch.randn(m, k, generator=g)
        w = torch.randn(n, k, generator=g)
        a8, sa = ops.to_float8(x, recipe=S.BlockWise1x128)
        w8, sw = ops.to_float8(w, recipe=S.BlockWise128x128)
        a_bytes = ops.float8_storage(a8).to(device)
        w_bytes = ops.float8_storage(w8).to(device).t()
        sa, sb = sa.to(device), sw.to(device)
        xb, wb = x.bfloat16().to(device), w.bfloat16().to(device)

        def fp8():
            return ops.scaled_mm(a_bytes, w_bytes, sa, S.BlockWise1x128, sb, S.BlockWise128x128,
                                 storage_dtype=torch.float8_e4m3fn)

        return {"mpslinalg": fp8, "mpslinalg bf16 linear": lambda: ops.linear(xb, wb),
                "torch bf16 F.linear": lambda: F.linear(xb, wb)}
    return run


def _bench_grouped(tokens: int, experts: int, k: int, n: int):
    def run(device: torch.device, repeats: int) -> dict[str, Callable[[], object]]:
        g = _gen(2)
        a = torch.randn(tokens, k, generator=g).bfloat16().to(device)
        b = torch.randn(experts, k, n, generator=g).bfloat16().to(device)
        cuts = torch.randint(0, tokens + 1, (experts - 1,), generator=g).sort().values
        offs = torch.cat([cuts, torch.tensor([tokens])]).int().to(device)

        def loop():  # what MoE layers do without a grouped kernel: a host read, then a loop
            ends = offs.tolist()
            out = a.new_empty(tokens, n)
            start = 0
            for e, end in enumerate(ends):
                out[start:end] = a[start:end] @ b[e]
                start = end
            return out

        return {"mpslinalg": lambda: ops.grouped_mm(a, b, offs=offs),
                "torch per-expert loop": loop}
    return run


for _batch in (1, 4):
    bench_case("ops decode", f"linear ({_batch}, 1, 2048) x (2048, 2048) bf16 + bias")(
        _bench_linear(_batch, 2048, 2048))
bench_case("ops decode", "scaled_mm fp8 (1, 2048) x (2048, 2048) blockwise vs bf16")(
    _bench_fp8(1, 2048, 2048))
bench_case("ops moe", "grouped_mm 128 tokens, 8 experts, 512 -> 512 bf16")(
    _bench_grouped(128, 8, 512, 512))
