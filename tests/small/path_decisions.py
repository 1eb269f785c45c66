"""Every decision of the n <= 4 path choosers over a grid, in a compact form that a test compares
with a frozen copy (``path_decisions.json.gz``, made from commit 51ea8f5's choosers, before the
one path table): whether a call takes the small path (``use_small_*``), the shapes-only
conditions (``may_use_small_*``) and which implementation runs (``torch_path``,
``choose_path``), for every state of what is installed, device type, dtype, shape, batch and
backend.

The choosers read only a tensor's shape, dtype and device type, so the grid uses `Probe`s: a
CUDA or MPS probe needs no such device here.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

FROZEN = Path(__file__).with_name("path_decisions.json.gz")

DEVICES = ("cpu", "cuda", "mps")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128)
ORDERS = range(1, 6)
BACKENDS = (None, "torch", "metal")
#: (LU library loaded, QR/SVD/eigh library loaded, triton: "absent", "broken" (installed, fails
#: to import) or "ok")
STATES = tuple(itertools.product((False, True), (False, True), ("absent", "broken", "ok")))
#: Every crossover of the tables at 51ea8f5, the batch below each, and 0, 1, 2 matrices.
_CROSSOVERS = (8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192, 65536, 131072, 524288, 786432)
BATCHES = tuple(sorted({0, 1, 2, *_CROSSOVERS, *(c - 1 for c in _CROSSOVERS)}))


class Probe:
    """What the choosers read of a tensor: shape, dtype, device."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: str):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = torch.device(device)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)


#: (name, predicate of (si, so, A, backend)) of the decisions that depend on the batch.
_USES: tuple[tuple[str, Callable], ...] = (
    ("use_small_path", lambda si, so, A, b: si.use_small_path(A, b)),
    ("use_small_qr", lambda si, so, A, b: so.use_small_qr(A, b)),
    ("use_small_svd", lambda si, so, A, b: so.use_small_svd(A, b, True)),
    ("use_small_svd(compute_uv=False)", lambda si, so, A, b: so.use_small_svd(A, b, False)),
    ("use_small_eigh", lambda si, so, A, b: so.use_small_eigh(A, b, True)),
    ("use_small_eigh(compute_v=False)", lambda si, so, A, b: so.use_small_eigh(A, b, False)),
)
_MAY_USES: tuple[tuple[str, Callable], ...] = (
    ("may_use_small_path", lambda si, so, A: si.may_use_small_path(A)),
    ("may_use_small_qr", lambda si, so, A: so.may_use_small_qr(A)),
    ("may_use_small_svd", lambda si, so, A: so.may_use_small_svd(A)),
    ("may_use_small_svd(compute_uv=False)", lambda si, so, A: so.may_use_small_svd(A, False)),
    ("may_use_small_eigh", lambda si, so, A: so.may_use_small_eigh(A)),
    ("may_use_small_eigh(compute_v=False)", lambda si, so, A: so.may_use_small_eigh(A, False)),
)


def _name(path) -> str:
    """A path's name (at 51ea8f5 ``choose_path`` returned the path's record)."""
    return path if isinstance(path, str) else path.name


def _bits(values: Iterator[bool]) -> str:
    return "".join("1" if v else "0" for v in values)


def decisions(si, so, state: Callable[[tuple], contextlib.AbstractContextManager]) -> dict:
    """{key: decisions} over the grid for the chooser modules ``si`` (dispatch) and ``so``
    (orthogonal); ``state(s)`` puts the installation state ``s`` of `STATES` in force. A value
    is a string of 0/1 over `BATCHES` (after one for a single matrix without batch dimensions),
    or a path's name; keys whose decisions are all 0 are left out."""
    out: dict = {}

    def probes(device, dtype, m, n):
        yield Probe((m, n), dtype, device)
        for batch in BATCHES:
            yield Probe((batch, m, n), dtype, device)

    for device, dtype, m, n in itertools.product(DEVICES, DTYPES, ORDERS, ORDERS):
        where = f"{device}|{str(dtype).removeprefix('torch.')}|{m}x{n}"
        for name, may_use in _MAY_USES:
            bits = _bits(may_use(si, so, A) for A in probes(device, dtype, m, n))
            if "1" in bits:
                out[f"{name}|{where}"] = bits
    for s in STATES:
        with state(s):
            tag = "lu={:d} orth={:d} triton={}".format(*s)
            for device, dtype, m, n, backend in itertools.product(DEVICES, DTYPES, ORDERS,
                                                                   ORDERS, BACKENDS):
                where = f"{tag}|{device}|{str(dtype).removeprefix('torch.')}|{m}x{n}|{backend}"
                for name, use in _USES:
                    bits = _bits(use(si, so, A, backend) for A in probes(device, dtype, m, n))
                    if "1" in bits:
                        out[f"{name}|{where}"] = bits
            for device, dtype in itertools.product(DEVICES, DTYPES):
                A = Probe((5, 3, 3), dtype, device)
                where = f"{tag}|{device}|{str(dtype).removeprefix('torch.')}"
                # the metal backend runs the small functions only for its kernels' dtypes
                metal_ok = dtype in (torch.float32, torch.complex64)
                if device != "mps" or metal_ok:
                    out[f"dispatch.torch_path|{where}"] = si.torch_path(A)
                out[f"dispatch.choose_path(torch)|{where}"] = _name(si.choose_path(A, "torch"))
                if metal_ok:
                    out[f"dispatch.choose_path(metal)|{where}"] = _name(si.choose_path(A, "metal"))
                out[f"orthogonal.torch_path|{where}"] = so.torch_path(A)
    return out


def dump(table: dict, path: Path = FROZEN) -> None:
    text = json.dumps(table, sort_keys=True, separators=(",", ":"))
    path.write_bytes(gzip.compress(text.encode("ascii"), mtime=0))


def load(path: Path = FROZEN) -> dict:
    with gzip.open(path, "rt", encoding="ascii") as f:
        return json.load(f)
