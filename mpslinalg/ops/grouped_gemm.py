"""``grouped_mm``: `torch.nn.functional.grouped_mm` for mixture-of-experts layers.

Op ``mpslinalg::ops_grouped_mm`` (``metal/ops/grouped_gemm.metal``). The group offsets are read by
the kernel on the device: one launch whatever the number of groups, no host synchronisation,
and offsets that are not increasing or run past the end never make the kernel read or write
out of bounds (the values are then unspecified; ``check_offsets=True`` rejects such offsets with
one device read). Rows (columns) after the last offset are zero.

On the torch backend the op is torch's ``F.grouped_mm`` on CUDA (its home), given operands in
the layout it requires (copied with 16-byte aligned rows where they are not) and with the
entries it leaves uninitialised (past the last offset, empty inner groups) set to zero;
elsewhere (torch's CPU kernel has the same layout rules, the same uninitialised entries and no
bias), for float64 and for a float32 output of lower precision inputs (which torch's CUDA kernel
refuses) it is the definition written with torch operations, still without a host
synchronisation (one masked matrix product per group).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.declare import INFERENCE, Call, Declaration, Operand, Param, Result
from .._core.errors import read_device
from .._core.metal import launch

__all__ = ["grouped_mm"]

_SOURCE = "ops/grouped_gemm.metal"
#: Shape codes (kGroupRows ... in metal/ops/grouped_gemm.h): which dimension ``offs`` splits.
ROWS, COLS, INNER, BATCHED = 0, 1, 2, 3
_GROUP = (16, 8, 1)


#: The shape code of operands of these ranks.
_MODES = {(2, 3): ROWS, (3, 2): COLS, (2, 2): INNER, (3, 3): BATCHED}


def mode_of(a: Tensor, b: Tensor) -> int:
    return _MODES[(a.dim(), b.dim())]


def _out_shape(a: Tensor, b: Tensor, offs: Tensor | None) -> tuple[int, ...]:
    return _output_core(a.shape, b.shape, None if offs is None else offs.shape)


def _output_core(a, b, offs, *_) -> tuple[int, ...]:
    """The output's shape from the shapes of ``a``, ``b`` and ``offs``: the op's shape rule."""
    mode = _MODES[(len(a), len(b))]
    if mode == ROWS:
        return (a[0], b[-1])
    if mode == COLS:
        return (a[1], b[-1])
    if mode == INNER:
        return (offs[0], a[0], b[1])
    return (a[0], a[1], b[2])


def _grouped_mm_metal(a: Tensor, b: Tensor, offs: Tensor | None, bias: Tensor | None,
                      out_dtype: torch.dtype) -> Tensor:
    mode = mode_of(a, b)
    shape = _out_shape(a, b, offs)
    out = torch.empty(shape, dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    batch, m, n = (1, *shape) if len(shape) == 2 else shape
    groups = offs.shape[0] if offs is not None else a.shape[0]
    a_group, a_row, a_col = (0, *a.stride()) if a.dim() == 2 else a.stride()
    b_group, b_row, b_col = (0, *b.stride()) if b.dim() == 2 else b.stride()
    has_bias = bias is not None
    bias_group, bias_col = ((0, bias.stride(0)) if bias.dim() == 1 else bias.stride()) \
        if has_bias else (0, 0)
    wide = out_dtype != a.dtype
    kernel = _metal.kernel(_SOURCE, "grouped_mm", a.dtype, a.device, fn="grouped_mm", wide=wide)
    offsets = offs if offs is not None else torch.zeros(1, dtype=torch.int32, device=a.device)
    params = metal_params.pack(
        "ops/grouped_gemm.h", "GroupedMmParams", mode=mode, groups=groups, m=m, n=n,
        k=a.shape[-1] if mode != INNER else a.shape[1], batch=batch, a_group=a_group,
        a_row=a_row, a_col=a_col, b_group=b_group, b_row=b_row, b_col=b_col,
        bias_group=bias_group, bias_col=bias_col, has_bias=has_bias)
    gx, gy, gz = _GROUP
    launch(kernel, a, b, offsets, bias if has_bias else a, out, params,
           threads=[_metal.ceil_div(n, gx) * gx, _metal.ceil_div(m, gy) * gy, batch],
           group_size=[gx, gy, gz])
    return out


def _group_ids(offs: Tensor, length: int) -> Tensor:
    """Group of each index 0 .. length - 1 (number of offsets <= it; len(offs) = uncovered)."""
    index = torch.arange(length, device=offs.device, dtype=offs.dtype)
    return torch.searchsorted(offs, index, right=True)


def _grouped_mm_reference(a, b, offs, bias, out_dtype):
    """The definition with torch operations, computed in the inputs' dtype (float32 for low
    precision), no host synchronisation."""
    mode = mode_of(a, b)
    work = torch.float64 if a.dtype == torch.float64 else torch.float32
    a, b = a.to(work), b.to(work)
    if mode == BATCHED:
        out = a @ b
        g_of = None
    elif mode == INNER:
        ids = _group_ids(offs, a.shape[1])
        mask = (ids[None, :] == torch.arange(offs.shape[0], device=a.device)[:, None]).to(work)
        out = (a[None] * mask[:, None, :]) @ b  # (G, M, K) @ (K, N)
        g_of = None
    elif mode == ROWS:
        ids = _group_ids(offs, a.shape[0])
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g in range(b.shape[0]):  # offs is never read on the host
            out = out + (ids == g).to(work)[:, None] * (a @ b[g])
        g_of = ids
    else:
        ids = _group_ids(offs, b.shape[1])
        out = a.new_zeros(a.shape[1], b.shape[1])
        for g in range(a.shape[0]):
            out = out + (ids == g).to(work)[None, :] * (a[g] @ b)
        g_of = ids
    if bias is not None:
        out = out + _bias_terms(bias.to(work), mode, g_of, out.shape, offs)
    return out.to(out_dtype)


def _bias_terms(bias: Tensor, mode: int, ids: Tensor | None, shape, offs) -> Tensor:
    """The bias added to each output element (zero where no group covers it)."""
    if mode in (BATCHED, INNER):
        return bias[:, None, :] if bias.dim() == 2 else bias
    groups = offs.shape[0]
    covered = (ids < groups).to(bias.dtype)
    if mode == ROWS:
        rows = bias[ids.clamp_max(groups - 1)] if bias.dim() == 2 else bias.expand(shape)
        return rows * covered[:, None]
    return bias * covered[None, :]


#: torch's CUDA grouped_mm wants 16-byte aligned data and row (or column) strides.
_TORCH_CUDA_ALIGN_BYTES = 16


def _torch_layout(x: Tensor) -> Tensor:
    """``x`` as torch's grouped_mm (CUDA and CPU) accepts it: one of the last two dimensions
    contiguous, the other's stride a multiple of 16 bytes, the data 16-byte aligned; otherwise a
    copy with the last dimension padded to 16 bytes (a view of the first columns)."""
    align = _TORCH_CUDA_ALIGN_BYTES // x.element_size()
    rows, cols = x.shape[-2], x.shape[-1]
    row_major = x.stride(-1) == 1 and x.stride(-2) >= max(1, cols) and x.stride(-2) % align == 0
    col_major = x.stride(-2) == 1 and x.stride(-1) >= max(1, rows) and x.stride(-1) % align == 0
    if (row_major or col_major) and x.data_ptr() % _TORCH_CUDA_ALIGN_BYTES == 0:
        return x
    padded = x.new_zeros(*x.shape[:-1], -(-max(cols, 1) // align) * align)
    padded[..., :cols] = x
    return padded[..., :cols]


def grouped_length(a: Tensor, b: Tensor, mode: int) -> int:
    """Length of the dimension ``offs`` splits: rows of ``a``, columns of ``b`` or the inner one."""
    return {ROWS: a.shape[0], COLS: b.shape[-1], INNER: a.shape[1]}[mode]


def _monotone_ends(offs: Tensor, length: int) -> Tensor:
    """Group ends made non-decreasing within [0, length] (equal to ``offs`` when valid), the
    form torch's kernels take without reading outside their operands or asserting."""
    return offs.clamp(0, length).cummax(0).values


def _torch_cuda_groups(offs: Tensor, length: int, align: int):
    """Groups as torch's CUDA kernels accept them. They check on the device that the offsets are
    non-decreasing, within ``length`` and (the CUTLASS path of bfloat16 on Hopper; cuBLAS's
    grouped GEMM) that every group but the last spans a multiple of 16 bytes, and a failed check
    kills the process's CUDA context. Each group is moved to start at a multiple of ``align`` in
    a zero-padded copy of the split dimension (``length + (align - 1) * groups`` entries),
    computed on the device.

    Returns the padded group ends (int32), for each padded entry its source index and whether it
    holds data, and for each original index its padded position."""
    groups = offs.shape[0]
    ends = _monotone_ends(offs.to(torch.int64), length)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    sizes = ends - starts
    padded_ends = ((sizes + align - 1) // align * align).cumsum(0)
    padded_starts = torch.cat([ends.new_zeros(1), padded_ends[:-1]])
    entries = torch.arange(length + (align - 1) * groups, device=offs.device)
    group = torch.searchsorted(padded_ends, entries, right=True).clamp_max(groups - 1)
    within = entries - padded_starts[group]
    holds = within < sizes[group]
    source = (starts[group] + within).clamp(0, max(length - 1, 0))
    index = torch.arange(length, device=offs.device)
    group = torch.searchsorted(ends, index, right=True).clamp_max(groups - 1)
    return padded_ends.to(torch.int32), source, holds, padded_starts[group] + index - starts[group]


def _grouped_mm_torch_cuda(a: Tensor, b: Tensor, offs: Tensor | None, mode: int) -> Tensor:
    """F.grouped_mm on CUDA tensors, given layouts and offsets it cannot assert on."""
    if mode != BATCHED:
        offs, source, holds, position = _torch_cuda_groups(offs, grouped_length(a, b, mode),
                                                           16 // a.element_size())
        zero = a.new_zeros(())
        if mode == ROWS:
            a = torch.where(holds[:, None], a[source], zero)
        elif mode == COLS:
            b = torch.where(holds[None, :], b[:, source], zero)
        else:  # zeros in the padding of the inner dimension add nothing
            a = torch.where(holds[None, :], a[:, source], zero)
            b = torch.where(holds[:, None], b[source], zero)
    out = F.grouped_mm(_torch_layout(a), _torch_layout(b), offs=offs,
                       out_dtype=a.dtype)
    if mode == ROWS:
        return out[position]
    if mode == COLS:
        return out[:, position]
    return out


def _grouped_mm_torch_cpu(a: Tensor, b: Tensor, offs: Tensor | None, mode: int) -> Tensor:
    """F.grouped_mm on CPU tensors. Its kernel multiplies group by group on the host (no
    alignment rule for groups, unlike CUDA's), given strides it accepts and offsets made
    non-decreasing within range, as on the CUDA route."""
    if mode != BATCHED:
        offs = _monotone_ends(offs, grouped_length(a, b, mode))
    return F.grouped_mm(_torch_layout(a), _torch_layout(b), offs=offs, out_dtype=a.dtype)


def _covered_only(out: Tensor, offs: Tensor, mode: int, in_place: bool = False) -> Tensor:
    """``out`` with zeros where no group writes (torch's kernels leave those entries
    uninitialised): rows or columns past the last offset, products of empty inner groups.
    ``in_place``: zeroed in ``out`` itself (a fresh result: no second output-sized buffer)."""
    if mode == INNER:
        starts = torch.cat([offs.new_zeros(1), offs[:-1]])
        covered = (offs > starts)[:, None, None]
    else:
        ids = _group_ids(offs, out.shape[0] if mode == ROWS else out.shape[1])
        covered = (ids < offs.shape[0])[:, None] if mode == ROWS else (ids < offs.shape[0])[None]
    if in_place:
        return out.masked_fill_(~covered, 0)
    return torch.where(covered, out, out.new_zeros(()))


def _grouped_mm_torch(a, b, offs, bias, out_dtype):
    # torch's kernels write only the inputs' dtype (float32 from bfloat16 is refused) and take
    # no float64; the definition with torch operations serves the rest (and other devices).
    if (a.device.type in ("cuda", "cpu") and hasattr(F, "grouped_mm")
            and a.dtype != torch.float64 and out_dtype == a.dtype and a.numel() and b.numel()
            and (offs is None or offs.shape[0])):
        mode = mode_of(a, b)
        if a.device.type == "cuda":
            out = _grouped_mm_torch_cuda(a, b, offs, mode)
            if mode != BATCHED:
                out = _covered_only(out, offs, mode)
        else:
            out = _grouped_mm_torch_cpu(a, b, offs, mode)
            if mode != BATCHED:  # (torch's fresh result)
                out = _covered_only(out, offs, mode, in_place=True)
        if bias is not None:
            ids = (None if mode in (BATCHED, INNER)
                   else _group_ids(offs, grouped_length(a, b, mode)))
            out = out + _bias_terms(bias, mode, ids, out.shape, offs).to(out.dtype)
        return out
    return _grouped_mm_reference(a, b, offs, bias, out_dtype)


def _backward(ctx, grad: Tensor):
    """Each group's C_g = A_g B_g gives gA_g = G_g B_g^T and gB_g = A_g^T G_g (e.g. Giles 2008,
    "An extended collection of matrix derivative results", sec. 2.2.2). The four shapes map onto
    each other (rows <-> inner, columns <-> inner), so both gradients are grouped products run
    by this op on the same backend; the bias gradient sums each group's rows."""
    a, b, offs, = ctx.saved_tensors
    mode = mode_of(a, b)
    g = grad.to(a.dtype)
    run = grouped_mm_op
    extra = (ctx.backend, False, "")
    # rows <-> inner and columns <-> inner (batched stays batched, with offs None)
    ga = run(g, b.transpose(-2, -1), offs, None, a.dtype, *extra)
    gb = run(a.transpose(-2, -1), g, offs, None, a.dtype, *extra)
    gbias = None
    bias_shape = ctx.input_shapes[3]
    bias_dim = None if bias_shape is None else len(bias_shape)
    if bias_dim is not None:
        gw = grad.to(torch.float64 if a.dtype == torch.float64 else torch.float32)
        if mode in (BATCHED, INNER):
            gbias = gw.sum(1) if bias_dim == 2 else gw.sum((0, 1))
        elif mode == ROWS:
            ids = _group_ids(offs, a.shape[0])
            per = gw.new_zeros(offs.shape[0] + 1, gw.shape[1]).index_add_(0, ids, gw)[:-1]
            gbias = per if bias_dim == 2 else per.sum(0)
        else:
            covered = (_group_ids(offs, b.shape[1]) < offs.shape[0]).to(gw.dtype)
            gbias = gw.sum(0) * covered
        gbias = gbias.to(a.dtype)
    return ga, gb, None, gbias, None


#: Grouped products of the four shapes (module docstring); offs int32 or None. The shapes
#: (hence the output's) depend on the operands' ranks: the whole of each is core.
grouped_mm_decl = Declaration(
    "ops_grouped_mm",
    [Operand("mat_a", None), Operand("mat_b", None),
     Operand("offs", None, same_dtype=False, optional=True),
     Operand("bias", None, same_dtype=False, optional=True), Param("out_dtype", "ScalarType")],
    [Result("output", _output_core,
            dtype=lambda a, b, offs, bias, out_dtype: out_dtype)],
    forward={"metal": _grouped_mm_metal, "torch": _grouped_mm_torch},
    backward=_backward, saves=["mat_a", "mat_b", "offs"], dtypes=INFERENCE, torch_direct=True)
grouped_mm_op = grouped_mm_decl.op


def _check_offsets(fn: str, offs: Tensor, length: int) -> None:
    """One device read: offsets non-decreasing, within [0, length]."""
    values = read_device(offs, "grouped_mm check_offsets").tolist()
    bad_order = any(x > y for x, y in zip(values, values[1:], strict=False))
    if bad_order or (values and (values[0] < 0 or values[-1] > length)):
        raise ValueError(f"mpslinalg.{fn}: offs must be non-decreasing group ends in [0, "
                         f"{length}], got {values}")


def _prepare(call: Call, mat_a: Tensor, mat_b: Tensor, offs: Tensor | None,
             bias: Tensor | None, out_dtype: torch.dtype | None, check_offsets: bool) -> tuple:
    """torch's checks of the operands' shapes, offs, out_dtype and bias; the op's arguments."""
    fn = call.fn
    a, b, dtype = mat_a, mat_b, mat_a.dtype
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise RuntimeError(f"mpslinalg.{fn}: mat_a and mat_b must be 2-D or 3-D, got "
                           f"{checks.shape_str(a)} and {checks.shape_str(b)}")
    mode = mode_of(a, b)
    if (offs is None) != (mode == BATCHED):
        raise RuntimeError(f"mpslinalg.{fn}: Have to provide offsets if there is a 2d matrix, or "
                           "no offset if both matrices are 3d")
    k_a, k_b = a.shape[-1], b.shape[-2]
    if k_a != k_b or (mode == BATCHED and a.shape[0] != b.shape[0]):
        raise RuntimeError(f"mpslinalg.{fn}: contraction dimension of mat_a and mat_b must "
                           f"match, got {checks.shape_str(a)} and {checks.shape_str(b)}")
    if offs is not None:
        if offs.dtype != torch.int32 or offs.dim() != 1:
            raise RuntimeError(f"mpslinalg.{fn}: offs must be a 1-D int32 tensor, got "
                               f"{checks.shape_str(offs)} {offs.dtype}")
        offs = offs.contiguous()  # the kernel reads offs[g] densely (G int32: negligible)
        groups = offs.shape[0]
        if mode == ROWS and b.shape[0] != groups or mode == COLS and a.shape[0] != groups:
            raise RuntimeError(f"mpslinalg.{fn}: offs has {groups} groups but the 3-D operand "
                               f"has {b.shape[0] if mode == ROWS else a.shape[0]}")
    if out_dtype is None:
        out_dtype = dtype
    if out_dtype not in (dtype, torch.float32):
        raise RuntimeError(f"mpslinalg.{fn}: out_dtype must be the inputs' dtype or float32, "
                           f"got {out_dtype}")
    if bias is not None:
        n = b.shape[-1]
        groups = offs.shape[0] if offs is not None else a.shape[0]
        allowed = [(n,)] + ([] if mode == COLS else [(groups, n)])
        if tuple(bias.shape) not in allowed or bias.dtype != dtype:
            raise RuntimeError(f"mpslinalg.{fn}: bias must be {' or '.join(map(str, allowed))} "
                               f"of dtype {dtype}, got {checks.shape_str(bias)} {bias.dtype}")
    if check_offsets and offs is not None and a.device.type != "meta":
        _check_offsets(fn, offs, grouped_length(a, b, mode))
    return a, b, offs, bias, out_dtype


@grouped_mm_decl.public(None, prepare=_prepare)
def grouped_mm(mat_a: Tensor, mat_b: Tensor, *, offs: Tensor | None = None,
               bias: Tensor | None = None, out_dtype: torch.dtype | None = None,
               check_offsets: bool = False) -> Tensor:
    r"""Grouped matrix products; like `torch.nn.functional.grouped_mm`.

    Parameters
    ----------
    mat_a, mat_b : Tensor
        Same dtype (float32, float16, bfloat16; float64 on the torch backend), any strides:
        ``(T, K)`` and ``(G, K, N)`` (rows of ``mat_a`` grouped: tokens routed to experts),
        ``(G, M, K)`` and ``(K, T)`` (columns of ``mat_b`` grouped), ``(M, T)`` and ``(T, N)``
        (the shared dimension grouped: weight gradients, output ``(G, M, N)``) or
        ``(G, M, K)`` and ``(G, K, N)`` (batched, no ``offs``).
    offs : Tensor, optional
        int32 ``(G,)``: ``offs[g]`` is the end of group ``g`` in the grouped dimension (groups
        may be empty). Required unless both operands are 3-D. Never read on the host.
    bias : Tensor, optional
        ``(N,)`` added to every output row, or ``(G, N)`` (one row per group; not for grouped
        columns), in the inputs' dtype.
    out_dtype : torch.dtype, optional
        The inputs' dtype (default) or float32 (accumulated and written in float32).
    check_offsets : bool, optional
        Validate ``offs`` first (one device read): ValueError naming ``offs`` unless
        non-decreasing and within the grouped dimension.

    Returns
    -------
    Tensor
        ``(T, N)``, ``(M, T)``, ``(G, M, N)`` or ``(G, M, N)``. Entries no group covers are
        zero. Differentiable in ``mat_a``, ``mat_b`` and ``bias``.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.ops import grouped_mm
    >>> tokens = torch.ones(3, 2)
    >>> experts = torch.stack([torch.eye(2), 2 * torch.eye(2)])
    >>> with mpslinalg.use_backend("metal"):
    ...     grouped_mm(tokens, experts, offs=torch.tensor([1, 3], dtype=torch.int32))
    tensor([[1., 1.],
            [2., 2.],
            [2., 2.]])
    """
