"""DTensor arguments (``torch.distributed.tensor``): every public function, computed shard by
shard.

A public function whose first tensor argument is a `DTensor` comes here (`call`) instead of its
fast or general path; the test costs plain tensors nothing more than the type check the fast
path made anyway (`mpslinalg._core.op.public`). The op's declaration says which dimensions of
each argument are batch (`mpslinalg._core.declare.Declaration.batch_ndims`: all but the core
rank's last ones), and an op maps over its batch independently, so:

- arguments sharded on batch dimensions (the same batch dimension, counted from the right as
  broadcasting aligns them, on each mesh dimension) are computed locally, shard by shard, with
  no communication; each result is a DTensor sharded on its own copy of that batch dimension
  (its shape from the declaration's shape rule, evaluated on meta tensors of the global
  shapes), or replicated when it does not carry it;
- replicated arguments stay replicated (every rank computes the same thing);
- an argument sharded on a core (matrix) dimension, or ``Partial``, is redistributed first: to
  a batch dimension when one is large enough, else replicated, with one
  `RedistributionWarning` per function, argument and layout naming the collective and the
  bytes it moves. Row-sharded tall-skinny ``qr`` / ``lstsq`` are the exception: TSQR across
  ranks (`mpslinalg.distributed`);
- the checking forms (``inv``, ``solve``, ``eigh``, ``*_ex(check_errors=True)``, ...: every
  function of an op with ``info`` but the ``_ex`` forms not asked to check) agree across ranks
  through one all-reduce of "this rank failed", so every rank raises the same
  `mpslinalg.LinAlgError` (the failing rank's message); on one rank, or with nothing sharded,
  no collective runs.

Autograd flows through ``to_local`` / ``from_local`` (gradients are DTensors of the inputs'
placements). Functions that are torch's on every backend (``torch_everywhere``: ``matmul``,
``cross``, ``vector_norm``, ...) pass DTensors to torch's function and DTensor's own sharding
rules. torch.distributed is imported by the user's code, never by this module: no DTensor can
exist before ``torch.distributed.tensor`` is imported.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

#: Tensor types the fast path takes without asking more (any other type of tensor is asked
#: whether it is a DTensor).
PLAIN = frozenset((Tensor, torch.nn.Parameter))

_dtensor_type: type | None = None


class RedistributionWarning(UserWarning):
    """A DTensor argument had to be moved between ranks before an op could run: it was sharded
    on a matrix (core) dimension, or ``Partial``. Issued once per function, argument and
    layout; the message names the collective and the bytes it moves."""

    __module__ = "mpslinalg.distributed"


def _dtensor() -> type | None:
    global _dtensor_type
    if _dtensor_type is None:
        module = sys.modules.get("torch.distributed.tensor")
        if module is not None:
            _dtensor_type = module.DTensor
    return _dtensor_type


def is_dtensor(x: Any) -> bool:
    """Whether ``x`` is a DTensor (False without a look when torch.distributed.tensor was
    never imported)."""
    kind = _dtensor_type or _dtensor()
    return kind is not None and isinstance(x, kind)


def other_tensor(x: Any) -> bool:
    """A tensor of a subclass other than DTensor (fake, functional, user subclasses): the fast
    path serves it as it serves plain tensors."""
    return isinstance(x, Tensor) and not is_dtensor(x)


# ---------------------------------------------------------------- hooks and warnings

#: Public function name -> "module:function" of its row-sharded algorithm (TSQR), imported on
#: first use; it returns NotImplemented for a call it does not take.
ROW_SHARDED = {"qr": "mpslinalg.distributed:row_sharded_qr",
               "lstsq": "mpslinalg.distributed:row_sharded_lstsq"}

_warned: set = set()


def warn_once(key: tuple, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RedistributionWarning, stacklevel=4)


def _megabytes(x: Tensor) -> str:
    return f"{x.numel() * x.element_size() / 1e6:.3g} MB"


def redistribute(fn: str, name: str, x: Tensor, placements: list, why: str) -> Tensor:
    """``x`` moved to ``placements`` (a warning naming the cost, unless it only drops data:
    Replicate to Shard is a local slice)."""
    from torch.distributed.tensor import Replicate

    old = tuple(x.placements)
    new = tuple(placements)
    if old == new:
        return x
    moves = []
    for a, b in zip(old, new, strict=True):
        if a == b or (isinstance(a, Replicate) and b.is_shard()):
            continue
        if a.is_partial():
            moves.append("an all-reduce" if isinstance(b, Replicate) else "a reduce-scatter")
        elif isinstance(b, Replicate):
            moves.append("an all-gather")
        else:
            moves.append("an all-to-all")
    if moves:
        what = " then ".join(dict.fromkeys(moves))
        warn_once((fn, name, old, new), (
            f"mpslinalg.{fn}: {name} is a DTensor of shape {tuple(x.shape)} placed {list(old)}: "
            f"{why}; redistributed to {list(new)}, {what} of {_megabytes(x)} on this call (this "
            "warning is given once)"))
    return x.redistribute(x.device_mesh, list(new))


# ---------------------------------------------------------------- the call

_signatures: dict = {}


def _bind(function: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    sig = _signatures.get(function)
    if sig is None:
        sig = _signatures[function] = inspect.signature(function)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def core_ranks(function: Callable, values: dict[str, Any], names: list[str]) -> dict:
    """The declared core rank of each tensor argument ``names`` of ``function`` (None: every
    dimension is core). Public names that differ from the declaration's input names take the
    rank of the declaration's unmatched tensor inputs when those all have one rank; else
    None (the argument is treated as all core: never split)."""
    declaration = getattr(function, "declaration", None)
    if declaration is None:
        return dict.fromkeys(names)
    from .declare import Param

    specs = {a.name: a for a in declaration.inputs if not isinstance(a, Param)}
    ranks = {n: specs[n].rank for n in names if n in specs}
    unmatched = {specs[n].rank for n in specs if n not in values}
    fallback = next(iter(unmatched)) if len(unmatched) == 1 else None
    for n in names:
        if n not in specs:
            ranks[n] = fallback
    return ranks


def _meta_results(function: Callable, values: dict[str, Any]) -> list | None:
    """The results' global shapes: ``function`` on meta tensors of the arguments' global
    shapes (the declaration's shape rule, or torch's meta kernels). None where a meta call
    cannot run (an op whose forward reads values), and while torch.compile traces."""
    from . import backend

    if torch.compiler.is_compiling():  # traced: the local shapes (the fake tensors' rule)
        return None
    meta = {n: torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, Tensor)
            else v for n, v in values.items()}
    try:
        with backend.use_backend("torch"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = function(**meta)
    except Exception:
        return None
    return _flatten(result)[0]


def _flatten(result: Any) -> tuple[list, Callable[[list], Any]]:
    if isinstance(result, Tensor):
        return [result], lambda items: items[0]
    if isinstance(result, tuple):
        kind = type(result)
        return list(result), (lambda items: kind(items)) if kind is not tuple else tuple
    return [result], lambda items: items[0]


class Plan:
    """Where each mesh dimension splits the call: ``k[m]``, the batch dimension counted from
    the right of the broadcast batch (1 = the last batch dimension), or None (replicated)."""

    def __init__(self, mesh, batch: tuple[int, ...], k: list[int | None]) -> None:
        self.mesh = mesh
        self.batch = batch
        self.k = k

    @property
    def sharded(self) -> bool:
        return any(k is not None for k in self.k) and self.mesh.size() > 1

    def placements(self, shape: tuple[int, ...], nb: int) -> list:
        """The placements of a tensor of ``shape`` whose first ``nb`` dimensions are batch."""
        from torch.distributed.tensor import Replicate, Shard

        out = []
        for k in self.k:
            if k is not None and nb >= k and shape[nb - k] == self.batch[-k]:
                out.append(Shard(nb - k))
            else:
                out.append(Replicate())
        return out


def plan(fn: str, dts: dict[str, Tensor], nbs: dict[str, int], mesh) -> tuple[Plan, dict]:
    """The split of a call, and each DTensor argument in its placement for it."""
    from torch.distributed.tensor import Shard

    batches = {n: tuple(x.shape[:nbs[n]]) for n, x in dts.items()}
    try:
        batch = tuple(torch.broadcast_shapes(*batches.values()))
    except RuntimeError:
        raise RuntimeError(f"mpslinalg.{fn}: the batch shapes of the DTensor arguments do not "
                           f"broadcast: {batches}") from None
    k: list[int | None] = [None] * mesh.ndim

    def batch_position(name: str, p) -> int | None:
        # the batch dimension (from the right) a Shard placement splits, when it is one that
        # the call can split locally (not a broadcast one of size 1)
        if not isinstance(p, Shard):
            return None
        x, nb = dts[name], nbs[name]
        d = p.dim if p.dim >= 0 else p.dim + x.dim()
        if d >= nb or x.shape[d] != batch[d - nb] or batch[d - nb] == 1:
            return None
        return nb - d

    for name, x in dts.items():  # the batch dimensions the arguments already split
        for m, p in enumerate(x.placements):
            position = batch_position(name, p)
            if k[m] is None and position is not None:
                k[m] = position
    for x in dts.values():  # a split elsewhere moves to a batch dimension when one fits
        for m, p in enumerate(x.placements):
            if k[m] is None and (p.is_shard() or p.is_partial()):
                free = [j for j in range(1, len(batch) + 1) if j not in k
                        and batch[-j] >= mesh.size(m)]
                if free:
                    k[m] = max(free, key=lambda j: batch[-j])
    split = Plan(mesh, batch, k)
    moved = {}
    for name, x in dts.items():
        want = split.placements(tuple(x.shape), nbs[name])
        nb = nbs[name]
        core = "all its dimensions" if nb == 0 else f"its last {x.dim() - nb} dimensions"
        moved[name] = redistribute(fn, name, x, want, (
            f"the op's core dimensions ({core}) must be whole on every rank"))
    return split, moved


def _agree(fn: str, error: Exception | None, mesh, device: torch.device) -> None:
    """One all-reduce of "this rank failed" over the mesh; then every rank raises the failing
    rank's error (the first failing rank's message, sent by a broadcast only on failure)."""
    import torch.distributed as dist

    from .errors import LinAlgError

    if mesh.ndim == 1:
        group = mesh.get_group()
    elif mesh.size() == dist.get_world_size():
        group = None  # the default group is the mesh's ranks
    else:  # a mesh of part of the world: its ranks as one group (made once, then cached)
        group = mesh._flatten().get_group()
    size = dist.get_world_size(group)
    me = dist.get_rank(group)
    failed = torch.zeros(size, dtype=torch.int32, device=device)
    if error is not None:
        failed[me] = 1
    dist.all_reduce(failed, group=group)
    ranks = failed.nonzero().flatten().tolist()
    if not ranks:
        return
    source = ranks[0]
    message = [f"{error} (on rank {me} of {size}: batch elements are counted in its local "
               "shard)" if me == source else None]
    dist.broadcast_object_list(message, src=dist.get_global_rank(group, source)
                               if group is not None else source, group=group, device=device)
    raise LinAlgError(message[0]) from error


def call(function: Callable, checks: bool | str, args: tuple, kwargs: dict) -> Any:
    """``function(*args, **kwargs)`` whose first tensor argument is a DTensor: see the module
    docstring. ``checks``: whether the call raises on ``info`` (True, or the name of the
    argument that says so)."""
    from torch.distributed.tensor import DTensor

    fn = function.__name__
    values = _bind(function, args, kwargs)
    out = values.get("out")
    if out is not None:
        values["out"] = None
    dts = {n: v for n, v in values.items() if isinstance(v, DTensor)}
    plain = [n for n, v in values.items() if isinstance(v, Tensor) and n not in dts]
    if plain:
        raise TypeError(
            f"mpslinalg.{fn}: got DTensor and plain tensor arguments ({', '.join(plain)} "
            "plain); make every tensor argument a DTensor on the same device mesh (a "
            "replicated one: DTensor.from_local(t, mesh, [Replicate()]))")
    mesh = next(iter(dts.values())).device_mesh
    if any(x.device_mesh != mesh for x in dts.values()):
        raise ValueError(f"mpslinalg.{fn}: DTensor arguments on different device meshes")
    special = ROW_SHARDED.get(fn)
    if special is not None:
        module, name = special.split(":")
        result = getattr(__import__(module, fromlist=[name]), name)(function, values, dts)
        if result is not NotImplemented:
            return _write_out(fn, out, result)
    ranks = core_ranks(function, values, list(dts))
    nbs = {n: 0 if ranks[n] is None else max(x.dim() - ranks[n], 0) for n, x in dts.items()}
    shapes = _meta_results(function, values)
    split, moved = plan(fn, dts, nbs, mesh)
    local = dict(values)
    for name, x in moved.items():
        local[name] = x.to_local()
    checking = _may_raise(function, checks, values)
    error = None
    try:
        result = function(**local)
    except torch.linalg.LinAlgError as failure:
        if not (checking and split.sharded):
            raise
        error = failure
        result = None
    if checking and split.sharded:
        _agree(fn, error, mesh, next(iter(moved.values())).to_local().device)
    results, rebuild = _flatten(result)
    if shapes is not None and len(shapes) != len(results):
        shapes = None
    batches = _batches(split.batch, {n: x.shape[:nbs[n]] for n, x in dts.items()})
    local_batch = torch.broadcast_shapes(*(local[n].shape[:nbs[n]] for n in dts))
    local_batches = _batches(local_batch, {n: local[n].shape[:nbs[n]] for n in dts})
    wrapped = []
    for i, r in enumerate(results):
        if not isinstance(r, Tensor):
            wrapped.append(r)
        elif shapes is not None and isinstance(shapes[i], Tensor) and _fits(
                r, tuple(shapes[i].shape), batches, split):
            shape = tuple(shapes[i].shape)
            wrapped.append(_wrap(r, shape, _batch_ndim(shape, batches), split))
        else:  # no shape rule ran: the local shape against the local batches
            nb = _batch_ndim(tuple(r.shape), local_batches)
            shape = _global(tuple(r.shape), nb, split, tuple(local_batch))
            wrapped.append(_wrap(r, shape, nb, split))
    return _write_out(fn, out, rebuild(wrapped))


def _may_raise(function: Callable, checks: bool | str, values: dict[str, Any]) -> bool:
    """Whether a call can raise on ``info``: a checking form, an ``_ex`` form asked to, and any
    other function of an op with ``info`` that does not return it (eigh raises; lu, which does
    not, costs one all-reduce of four bytes)."""
    if isinstance(checks, str):
        return bool(values.get(checks))
    if checks:
        return True
    declaration = getattr(function, "declaration", None)
    return declaration is not None and declaration.info_index is not None


def _batches(call: tuple, arguments: dict) -> list[tuple]:
    """The batch shapes a result may carry: the call's (broadcast), then each argument's
    (a result of one input's batch), longest first."""
    return [tuple(call)] + sorted({tuple(b) for b in arguments.values()}, key=len, reverse=True)


def _batch_ndim(shape: tuple, batches: list[tuple]) -> int:
    for b in batches:
        if len(shape) >= len(b) and tuple(shape[:len(b)]) == b:
            return len(b)
    return 0


def _fits(local: Tensor, shape: tuple, batches: list[tuple], split: Plan) -> bool:
    """Whether the local result agrees with the global ``shape`` the shape rule gave it in
    every dimension the call does not split (else its local shape is trusted)."""
    if local.dim() != len(shape):
        return False
    placements = split.placements(shape, _batch_ndim(shape, batches))
    split_dims = {p.dim for p in placements if p.is_shard()}
    return all(local.shape[d] == shape[d] for d in range(len(shape)) if d not in split_dims)


def _wrap(local: Tensor, shape: tuple, nb: int, split: Plan) -> Tensor:
    """A local result as a DTensor of global ``shape`` whose first ``nb`` dimensions are
    batch."""
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(local, split.mesh, split.placements(shape, nb), run_check=False,
                              shape=torch.Size(shape), stride=_contiguous_strides(shape))


def _global(local_shape: tuple, nb: int, split: Plan, local_batch: tuple) -> tuple:
    """The global shape of a local result whose first ``nb`` dimensions are batch: its split
    dimensions at their global sizes (those it carries at the call's local size)."""
    shape = list(local_shape)
    for k in split.k:
        if k is not None and nb >= k and shape[nb - k] == local_batch[-k]:
            shape[nb - k] = split.batch[-k]
    return tuple(shape)


def _contiguous_strides(shape: tuple) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _write_out(fn: str, out: Any, result: Any) -> Any:
    if out is None:
        return result
    from .op import write_out

    return write_out(fn, out, result)
