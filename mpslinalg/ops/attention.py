"""Scaled dot-product attention on Metal: ``scaled_dot_product_attention`` with
`torch.nn.functional.scaled_dot_product_attention` semantics.

Op ``mpslinalg::scaled_dot_product_attention``: on the metal backend one launch of a fused
kernel of ``metal/ops/attention.metal`` (online softmax over key tiles staged in threadgroup
memory; the ``L x S`` score matrix is never stored): ``attention_rows`` (a thread per query
row) or, for short queries (decode, ``L = 1``), ``attention_decode`` (a SIMD group per query
row, lanes splitting the keys). The scale is one scalar applied to every batch element and
head; every (batch, head) pair reads its own rows of Q, K, V and the mask at their broadcast
strides; grouped-query heads (``enable_gqa``) read key / value head ``h // (Hq / Hkv)``.
Boolean masks (True = attend) and additive masks, ``is_causal`` (top-left aligned, as torch),
float32 / float16 / bfloat16 (computed in float32). Rows that attend to nothing give 0, as
torch's safe softmax does. Attention dropout draws its keep / drop decisions in the kernel
(Philox4x32-10, counter = (query row, batch-head, key / 4), key = a seed drawn from torch's
default generator), so they depend on the seed and the position only.

Autograd: a documented recompute path. The backward recomputes the attention weights with
torch operations (it materialises ``P = softmax(Q K^T * scale + mask)`` per batch and head,
which the forward avoids; with dropout, the kernel ``attention_dropout_mask`` rebuilds the
forward's multipliers) and applies the softmax-attention derivative (gradients of Q, K, V; none
for the mask). On the torch backend the forward is torch's own, dropout included.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.declare import AS_GIVEN, Answered, Call, Declaration, Operand, Param, Result
from .._core.metal import SIMD_WIDTH
from .._core.seed import draw_seed

__all__ = ["scaled_dot_product_attention"]

_PATH = "ops/attention.metal"
_HEADER = "ops/attention.h"
#: dtypes with a Metal kernel.
METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Mirrors kMaxHeadDim / kRowsPerGroup / kMask* in metal/ops/attention.h.
MAX_HEAD_DIM = 256
#: Head-dimension buckets the kernels are instantiated for (the smallest that holds E and Ev).
HEAD_DIM_BUCKETS = (64, 128, 256)
ROWS_PER_GROUP = 32
_MASKS = {None: 0, "bool": 1, "additive": 2}
#: Queries of at most this many rows take the decode kernel (a SIMD group per row).
DECODE_MAX_ROWS = 4
#: Dropout decisions need the query row and the (batch, head) index in 32 bits each.
_MAX_DROPOUT_INDEX = 2**32


def _uses_gqa(q: Tensor, k: Tensor, enable_gqa: bool) -> bool:
    return _grouped_heads(q.shape, k.shape, enable_gqa)


def _grouped_heads(q: tuple, k: tuple, enable_gqa: bool) -> bool:
    """Whether query and key of these shapes have grouped heads (Hkv divides Hq, Hkv < Hq)."""
    return enable_gqa and len(q) >= 3 and len(k) >= 3 and k[-3] != q[-3]


def _output_shape(q, k, v, mask, is_causal, scale, enable_gqa, dropout_p, seed):
    """The output's shape from the operands' shapes: the op's shape rule (batch dimensions of
    query, key and value broadcast; with grouped heads the query's head count)."""
    if _grouped_heads(q, k, enable_gqa):
        batch = checks.broadcast_shapes(q[:-3], k[:-3], v[:-3])
        return (*batch, q[-3], q[-2], v[-1])
    return (*checks.broadcast_shapes(q[:-2], k[:-2], v[:-2]), q[-2], v[-1])


def _layout(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, enable_gqa: bool):
    """Batch shape, head count and group, and each operand expanded over the batch dimensions
    (views: broadcast dimensions get stride 0)."""
    L, S = q.shape[-2], k.shape[-2]
    if _uses_gqa(q, k, enable_gqa):
        heads, group = q.shape[-3], q.shape[-3] // k.shape[-3]
        batch = checks.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
        qe = q.expand(*batch, heads, L, q.shape[-1])
        ke = k.expand(*batch, k.shape[-3], S, k.shape[-1])
        ve = v.expand(*batch, v.shape[-3], S, v.shape[-1])
        me = None if mask is None else mask.expand(*batch, heads, L, S)
        return batch, heads, group, qe, ke, ve, me
    batch = checks.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qe = q.expand(*batch, L, q.shape[-1])
    ke = k.expand(*batch, S, k.shape[-1])
    ve = v.expand(*batch, S, v.shape[-1])
    me = None if mask is None else mask.expand(*batch, L, S)
    return batch, 1, 1, qe, ke, ve, me


def _nonempty(x: Tensor) -> Tensor:
    """A buffer to bind: ``x`` itself, or one element when ``x`` is empty (then never read)."""
    return x if x.numel() else torch.zeros(1, dtype=x.dtype, device=x.device)


def _factors(scale: float, dropout_p: float) -> list[float]:
    """The kernels' float arguments: scale, dropout probability, 1 / (1 - p)."""
    return [float(scale), float(dropout_p), 1.0 / (1.0 - dropout_p) if dropout_p < 1.0 else 0.0]


def attention_metal(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                    scale: float, enable_gqa: bool, dropout_p: float = 0.0, seed: int = 0, *,
                    kernel: str = "auto") -> Tensor:
    """The fused kernel on validated operands; ``kernel`` = "auto", "rows" or "decode"."""
    batch, heads, group, qe, ke, ve, me = _layout(q, k, v, mask, enable_gqa)
    L, S, E, Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    out_shape = (*batch, heads, L, Ev) if group > 1 else (*batch, L, Ev)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    n_batch = math.prod(batch)
    head_dims = 1 if group > 1 else 0

    def strides(x: Tensor | None) -> tuple[list[int], int, int, int]:
        if x is None:
            return [0] * max(len(batch), 1), 0, 0, 0
        s = x.stride()
        head = s[-3] if head_dims else 0
        return list(s[: len(batch)]) or [0], head, s[-2], s[-1]

    (qb, qh, qr, qc), (kb, kh, kr, kc), (vb, vh, vr, vc), (mb, mh, mr, mc) = (
        strides(qe), strides(ke), strides(ve), strides(me))
    params = metal_params.pack(
        _HEADER, "AttentionParams", batch_ndim=max(len(batch), 1), batch=n_batch, heads=heads,
        group=group, L=L, S=S, E=E, Ev=Ev, causal=is_causal, q_head=qh, q_row=qr, q_col=qc,
        k_head=kh, k_row=kr, k_col=kc, v_head=vh, v_row=vr, v_col=vc, m_head=mh, m_row=mr,
        m_col=mc, dropout=dropout_p > 0.0, seed=seed)
    kind = None if mask is None else ("bool" if mask.dtype == torch.bool else "additive")
    bool_mask = me if kind == "bool" else torch.zeros(1, dtype=torch.bool, device=q.device)
    add_mask = me if kind == "additive" else torch.zeros(1, dtype=q.dtype, device=q.device)
    if kernel == "auto":
        kernel = "decode" if L <= DECODE_MAX_ROWS else "rows"
    fn = "scaled_dot_product_attention"
    dim = next(d for d in HEAD_DIM_BUCKETS if d >= max(E, Ev))
    k_ = _metal.kernel(_PATH, f"attention_{kernel}", q.dtype, q.device, fn=fn,
                       mask=_MASKS[kind], dim=dim)
    bh = n_batch * heads
    if kernel == "decode":
        threads, group_size = [SIMD_WIDTH * L, bh], [SIMD_WIDTH, 1]
    else:
        threads, group_size = [-(-L // ROWS_PER_GROUP) * ROWS_PER_GROUP, bh], [ROWS_PER_GROUP, 1]
    _metal.launch(k_, _nonempty(qe), _nonempty(ke), _nonempty(ve), _nonempty(bool_mask),
                  _nonempty(add_mask), out, params, _factors(scale, dropout_p), list(batch) or [1],
                  qb, kb, vb, mb, threads=threads, group_size=group_size)
    return out


def dropout_multipliers(q: Tensor, k: Tensor, v: Tensor, enable_gqa: bool, dropout_p: float,
                        seed: int) -> Tensor:
    """The forward's dropout multipliers (0 or 1 / (1 - p)), float32 of shape
    ``(*batch, [heads,] L, S)``, rebuilt by ``attention_dropout_mask``."""
    batch, heads, group, *_ = _layout(q, k, v, None, enable_gqa)
    L, S = q.shape[-2], k.shape[-2]
    shape = (*batch, heads, L, S) if group > 1 else (*batch, L, S)
    out = torch.empty(shape, dtype=torch.float32, device=q.device)
    numel = out.numel()
    if numel == 0:
        return out
    params = metal_params.pack(_HEADER, "AttentionParams", 0, L=L, S=S, dropout=1, seed=seed)
    kernel = _metal.kernel(_PATH, "attention_dropout_mask", torch.float32, q.device,
                           fn="scaled_dot_product_attention")
    _metal.launch(kernel, out, params, _factors(1.0, dropout_p), numel,
                  threads=_metal.grid_stride_threads(numel), group_size=None)
    return out


def _torch_attention(q, k, v, mask, is_causal, scale, enable_gqa, dropout_p, seed):
    if dropout_p > 0.0:
        raise NotImplementedError("mpslinalg.scaled_dot_product_attention: the op runs dropout "
                                  "on the metal backend only; the public function hands the "
                                  "torch backend's dropout to torch")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float,
                      enable_gqa: bool) -> Tensor:
    """``softmax(Q K^T * scale + mask)`` materialised (the backward's recompute), with rows
    that attend to nothing set to 0 as torch's safe softmax does."""
    if _uses_gqa(q, k, enable_gqa):
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = (q @ k.mT) * scale
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    p = torch.softmax(s, dim=-1)
    nothing = (s == -math.inf).all(dim=-1, keepdim=True)
    return p.masked_fill(nothing, 0.0)


def _backward(ctx, grad_out: Tensor):
    """With P = softmax(S), S = Q K^T * scale + mask, O = (P * D) V (D: the dropout
    multipliers, 1 without dropout): dV = (P * D)^T dO, dP = (dO V^T) * D,
    dS = P * (dP - rowsum(dP * P)), dQ = dS K * scale, dK = dS^T Q * scale (the softmax
    Jacobian, e.g. T. Dao et al., "FlashAttention", NeurIPS 2022, appendix B.2); grouped heads'
    dK, dV summed over each group. Computed in float32 at least."""
    q, k, v, mask = ctx.saved_tensors
    dtype = q.dtype
    wide = torch.promote_types(dtype, torch.float32)
    q_, k_, v_, g_ = (x.to(wide) for x in (q, k, v, grad_out))
    m_ = mask if mask is None or mask.dtype == torch.bool else mask.to(wide)
    gqa = _uses_gqa(q, k, ctx.enable_gqa)
    group = q.shape[-3] // k.shape[-3] if gqa else 1
    if gqa:
        k_ = k_.repeat_interleave(group, dim=-3)
        v_ = v_.repeat_interleave(group, dim=-3)
    p = attention_weights(q_, k_, m_, ctx.is_causal, ctx.scale, False)
    drop = None
    if ctx.dropout_p > 0.0:
        drop = dropout_multipliers(q, k, v, ctx.enable_gqa, ctx.dropout_p, ctx.seed).to(wide)
    dv = (p if drop is None else p * drop).mT @ g_
    dp = g_ @ v_.mT
    if drop is not None:
        dp = dp * drop
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = (ds @ k_) * ctx.scale
    dk = (ds.mT @ q_) * ctx.scale
    if gqa:
        dk = dk.unflatten(-3, (k.shape[-3], group)).sum(dim=-3)
        dv = dv.unflatten(-3, (v.shape[-3], group)).sum(dim=-3)
    return (dq.to(dtype), dk.to(dtype), dv.to(dtype), None, None, None, None, None, None)


def _through_op(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> bool:
    """Dropout (the kernel's, on the metal backend) and a mask on another device (moved)."""
    return dropout_p > 0.0 or (isinstance(attn_mask, Tensor) and attn_mask.device != query.device)


#: Fused attention of validated operands (shapes of any rank: the whole of each is core).
attention_decl = Declaration(
    "scaled_dot_product_attention",
    [Operand("query", None), Operand("k", None), Operand("v", None),
     Operand("mask", None, optional=True), Param("is_causal", "bool"), Param("scale", "float"),
     Param("enable_gqa", "bool"), Param("dropout_p", "float"), Param("seed", "int")],
    [Result("output", _output_shape)],
    forward={"torch": _torch_attention, "metal": attention_metal}, through_op=_through_op,
    backward=_backward, saves=["query", "k", "v", "mask"], dtypes=AS_GIVEN)
attention_op = attention_decl.op


def _check(fn: str, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    for name, x in (("query", q), ("key", k), ("value", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"mpslinalg.{fn}: {name} must be a torch.Tensor, got "
                            f"{type(x).__name__}")
        if x.dim() < 2:
            raise RuntimeError(f"mpslinalg.{fn}: {name} must have at least 2 dimensions, got "
                               f"shape {tuple(x.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise RuntimeError(f"mpslinalg.{fn}: Expected query, key, and value to have the same "
                           f"dtype, but got query.dtype: {q.dtype} key.dtype: {k.dtype} and "
                           f"value.dtype: {v.dtype} instead.")
    if not q.is_floating_point():
        raise RuntimeError(f"mpslinalg.{fn}: expected floating-point query, key and value, got "
                           f"{q.dtype}")
    if not (q.device == k.device == v.device):
        raise RuntimeError(f"mpslinalg.{fn}: expected query, key and value on one device, got "
                           f"{q.device}, {k.device}, {v.device}")
    if q.shape[-1] != k.shape[-1]:
        raise RuntimeError(f"mpslinalg.{fn}: query and key must have the same last dimension, "
                           f"got {tuple(q.shape)} and {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise RuntimeError(f"mpslinalg.{fn}: key and value must have the same number of rows "
                           f"(dimension -2), got {tuple(k.shape)} and {tuple(v.shape)}")
    if enable_gqa and q.dim() >= 3 and k.dim() >= 3:
        if k.shape[-3] != v.shape[-3] or q.shape[-3] % k.shape[-3]:
            raise RuntimeError(f"mpslinalg.{fn}: Number of heads in key and value must divide "
                               f"the number of heads in query, got query {tuple(q.shape)}, "
                               f"key {tuple(k.shape)}, value {tuple(v.shape)}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) \
            or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"mpslinalg.{fn}: dropout_p must be a float in [0, 1], got {dropout_p!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"mpslinalg.{fn}: scale must be a float or None, got "
                        f"{type(scale).__name__}")
    if attn_mask is not None:
        if is_causal:
            raise RuntimeError(f"mpslinalg.{fn}: Explicit attn_mask should not be set when "
                               "is_causal=True")
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"mpslinalg.{fn}: attn_mask must be a torch.Tensor or None, got "
                            f"{type(attn_mask).__name__}")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise RuntimeError(f"mpslinalg.{fn}: Expected attn_mask dtype to be bool or float "
                               f"or to match query dtype, but got attn_mask.dtype: "
                               f"{attn_mask.dtype} and query.dtype: {q.dtype} instead.")
    try:
        batch, heads, group, *_ = _layout(
            q, k, v, None if attn_mask is None else attn_mask.to(q.device), enable_gqa)
    except RuntimeError:
        raise RuntimeError(
            f"mpslinalg.{fn}: the batch dimensions of query {tuple(q.shape)}, key "
            f"{tuple(k.shape)}, value {tuple(v.shape)}"
            + ("" if attn_mask is None else f" and attn_mask {tuple(attn_mask.shape)}")
            + " do not broadcast") from None


def _prepare(call: Call, query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
             dropout_p: float, is_causal: bool, scale: float | None,
             enable_gqa: bool) -> tuple | Answered:
    fn = call.fn
    backend = call.backend
    _check(fn, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    scale_value = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if backend == "torch" and dropout_p > 0.0:
        return Answered(F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
            scale=scale, enable_gqa=enable_gqa))
    if backend == "metal":
        if query.dtype not in METAL_DTYPES:
            raise TypeError(f"mpslinalg.{fn}: the metal backend supports float32, float16 and "
                            f"bfloat16, got {str(query.dtype).removeprefix('torch.')}; use the "
                            "torch backend (mpslinalg.use_backend('torch')) for float64")
        if max(query.shape[-1], value.shape[-1]) > MAX_HEAD_DIM:
            raise RuntimeError(f"mpslinalg.{fn}: head dimensions up to {MAX_HEAD_DIM} on the "
                               f"metal backend, got E = {query.shape[-1]}, "
                               f"Ev = {value.shape[-1]}")
    mask = attn_mask
    if mask is not None:
        mask = mask.to(query.device)
        if mask.dtype != torch.bool:
            mask = mask.to(query.dtype)
    seed = 0
    if dropout_p > 0.0:
        batch, heads, *_ = _layout(query, key, value, None, enable_gqa)
        if max(query.shape[-2], math.prod(batch) * heads) >= _MAX_DROPOUT_INDEX:
            raise RuntimeError(f"mpslinalg.{fn}: dropout on the metal backend supports fewer "
                               f"than 2^32 query rows and batch elements x heads")
        seed = draw_seed(fn, None)
    return (query, key, value, mask, bool(is_causal), scale_value, bool(enable_gqa),
            float(dropout_p), seed)


@attention_decl.public(F.scaled_dot_product_attention, torch_name="scaled_dot_product_attention",
                       prepare=_prepare)
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    r"""``softmax(query key^T * scale + mask) value``; like
    `torch.nn.functional.scaled_dot_product_attention`.

    Parameters
    ----------
    query : Tensor
        ``(*, L, E)``; ``(*, Hq, L, E)`` with grouped-query heads.
    key : Tensor
        ``(*, S, E)``; ``(*, Hkv, S, E)``.
    value : Tensor
        ``(*, S, Ev)``; ``(*, Hkv, S, Ev)``.
    attn_mask : Tensor, optional
        Broadcastable to ``(*, L, S)``: boolean (True: attend) or additive (floating point).
        On any device (moved to ``query``'s, on every backend; torch alone refuses a CPU mask
        for CUDA inputs).
    dropout_p : float, optional
        Attention dropout probability. On the metal backend the kernel draws the decisions
        from a seed taken from torch's default generator (``torch.manual_seed`` makes them
        reproducible); the torch backend hands it to torch.
    is_causal : bool, optional
        Query ``i`` attends to keys ``j <= i`` (top-left aligned, as torch); excludes
        ``attn_mask``.
    scale : float, optional
        Multiplies every score, in every batch element and head; ``1 / sqrt(E)`` when None.
    enable_gqa : bool, optional
        Grouped-query attention: ``Hkv`` divides ``Hq``; query head ``h`` reads key / value
        head ``h // (Hq / Hkv)``.

    Returns
    -------
    Tensor
        ``(*, L, Ev)`` in ``query``'s dtype. Differentiable in query, key and value (a
        recompute path, see the module notes).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> q = torch.tensor([[[1.0, 0.0]]]); k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> v = torch.tensor([[[1.0], [3.0]]])
    >>> ops.scaled_dot_product_attention(q, k, v, scale=math.log(3.0))
    tensor([[[1.5000]]])
    """
