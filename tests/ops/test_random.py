"""log_normal_ / log_normal (mpslinalg.ops.random): the Philox generator against its published
known-answer vectors, the distribution against SciPy's by a Kolmogorov-Smirnov test, exact
reproducibility for a seed whatever the launch geometry and the memory layout, in-place
filling of strided views."""

from __future__ import annotations

import math

import pytest
import scipy.stats
import torch

import mpslinalg
from mpslinalg import emulator, ops
from mpslinalg._core import metal as _metal
from mpslinalg.ops import random as random_module

LOW = (torch.float32, torch.float16, torch.bfloat16)
#: Significance level of the KS tests (fixed seeds: deterministic, yet a real test).
ALPHA = 1e-3


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10 (kat_vectors: zero, all-ones and
    pi-digit counters / keys)."""
    source = _metal.load_source("common/philox.h") + """
kernel void philox_kat(device const uint* io [[buffer(0)]], device uint* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  uint4 r = mpsl::philox4x32(uint4(io[6 * i], io[6 * i + 1], io[6 * i + 2], io[6 * i + 3]),
                             uint2(io[6 * i + 4], io[6 * i + 5]));
  out[4 * i] = r.x; out[4 * i + 1] = r.y; out[4 * i + 2] = r.z; out[4 * i + 3] = r.w;
}
"""
    ones = 0xFFFFFFFF
    inputs = [0] * 6 + [ones] * 6 + [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344,
                                     0xA4093822, 0x299F31D0]
    expected = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8,
                0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD,
                0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
    out = torch.zeros(12, dtype=torch.uint32)
    emulator.compile_shader(source).philox_kat(
        torch.tensor(inputs, dtype=torch.int64).to(torch.uint32), out, threads=3)
    assert out.to(torch.int64).tolist() == expected


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_kolmogorov_smirnov(backend, dtype):
    mean, std = 0.3, 0.6
    g = torch.Generator().manual_seed(11)
    x = ops.log_normal_(backend.tensor(torch.empty(3000, dtype=dtype)), mean, std, generator=g)
    assert x.dtype == dtype
    sample = x.cpu().double().numpy()
    result = scipy.stats.kstest(sample, scipy.stats.lognorm(s=std, scale=math.exp(mean)).cdf)
    assert result.pvalue > ALPHA, result


def test_reproducible_whatever_the_geometry_and_layout(metal_backend):
    seed = 2024
    ref = metal_backend.tensor(torch.empty(1001))
    random_module.launch_log_normal(ref, 1.0, 2.0, seed)
    for max_threads, group in ((1, 1), (7, 3), (64, 32), (251, 256)):
        x = metal_backend.tensor(torch.empty(1001))
        random_module.launch_log_normal(x, 1.0, 2.0, seed, max_threads=max_threads,
                                        group_size=group)
        assert torch.equal(x, ref), (max_threads, group)
    # a transposed view gets the numbers of its row-major positions
    buf = metal_backend.tensor(torch.empty(13, 77))
    view = buf.t()
    random_module.launch_log_normal(view, 1.0, 2.0, seed)
    assert torch.equal(view.reshape(-1)[:1001], ref)


def test_strided_views_filled_in_place(backend):
    base = backend.tensor(torch.full((6, 8), -1.0))
    view = base[1::2, ::3]
    out = ops.log_normal_(view, generator=torch.Generator().manual_seed(0))
    assert out is view
    mask = torch.zeros(6, 8, dtype=torch.bool)
    mask[1::2, ::3] = True
    assert (base.cpu()[mask] > 0).all() and (base.cpu()[~mask] == -1.0).all()


def test_seeds_from_generators(backend):
    x = backend.tensor(torch.empty(64))
    torch.manual_seed(5)
    a = ops.log_normal(x).cpu()
    b = ops.log_normal(x).cpu()
    torch.manual_seed(5)
    assert torch.equal(ops.log_normal(x).cpu(), a)  # generator=None: torch's default generator
    assert not torch.equal(a, b)  # and it advances
    g = torch.Generator()
    c = ops.log_normal(x, 0.0, 1.0, generator=g.manual_seed(3))
    assert torch.equal(ops.log_normal(x, 0.0, 1.0, generator=g.manual_seed(3)), c)


def test_errors(backend):
    x = backend.tensor(torch.empty(4))
    with pytest.raises(RuntimeError, match="^mpslinalg.log_normal_: .*std > 0.0"):
        ops.log_normal_(x, 0.0, 0.0)
    with pytest.raises(NotImplementedError, match="^mpslinalg.log_normal_: not implemented"):
        ops.log_normal_(x.long())
    with pytest.raises(TypeError, match="^mpslinalg.log_normal: generator must be"):
        ops.log_normal(x, generator=3)
    with pytest.raises(RuntimeError, match="^mpslinalg.log_normal_: a leaf Variable"):
        ops.log_normal_(x.clone().requires_grad_())
    if backend.is_metal:
        with pytest.raises(TypeError, match="^mpslinalg.log_normal_: the metal backend"):
            ops.log_normal_(x.double())


def test_one_launch_no_host_sync(metal_backend):
    from mpslinalg.testing import count_host_syncs

    x = metal_backend.tensor(torch.empty(5, 7))[:, ::2]
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        ops.log_normal_(x)
    assert emulator.total_launches() == 1 and syncs.calls == []


def test_torch_backend_gives_torch_numbers():
    """With no generator, or one of the input's device, the torch backend's call is torch's
    own: the same numbers from the same generator state (the metal backend has its own
    stream, Philox keyed by a drawn seed)."""
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    with mpslinalg.use_backend("torch"):
        for device in devices:
            for gen in (None, torch.Generator(device=device)):
                torch.manual_seed(3)
                state = gen.manual_seed(4).get_state() if gen is not None else None
                ours = ops.log_normal(torch.empty(50, device=device), 0.5, 1.5, generator=gen)
                torch.manual_seed(3)
                if gen is not None:
                    gen.set_state(state)
                ref = torch.empty(50, device=device).log_normal_(0.5, 1.5, generator=gen)
                assert torch.equal(ours, ref)
                again = ops.log_normal_(torch.empty(50, device=device), 0.5, 1.5, generator=gen)
                assert not torch.equal(again, ref)  # the generator advanced


def test_torch_backend_float64():
    with mpslinalg.use_backend("torch"):
        x = ops.log_normal(torch.empty(3000, dtype=torch.float64), 0.0, 1.0,
                           generator=torch.Generator().manual_seed(1))
    assert scipy.stats.kstest(x.numpy(), scipy.stats.lognorm(s=1.0).cdf).pvalue > ALPHA


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _samples(complex_: bool) -> list[Sample]:
    return [
        Sample((torch.zeros(3, 5, 7, dtype=torch.float64),), desc="(3, 5, 7), defaults"),
        Sample((torch.zeros(9, dtype=torch.float64), -1.0, 0.5), desc="mean -1, std 0.5"),
        Sample((torch.zeros(0, 4, dtype=torch.float64),), desc="empty"),
    ]


def _reference(x, mean=1.0, std=2.0):
    return torch.empty_like(x).log_normal_(mean, std)


def _positive_and_finite(out):
    return (((out > 0) & out.isfinite()).to(out.dtype),)


OPS = [
    OpInfo("ops.log_normal", ops.log_normal, _reference, _samples,
           bad_samples=lambda: [BadSample((torch.zeros(3), 0.0, -1.0), error=RuntimeError,
                                          match="std > 0")],
           dtypes=(torch.float32,), compare=_positive_and_finite, grad_args=(),
           supports_out=False,
           skips={"compile": "the seed is drawn from a torch.Generator on the host, which "
                             "torch.compile(fullgraph=True) cannot trace",
                  "nonfinite": "the input's values are not read (only its shape and dtype)"}),
]
instantiate_generic_tests(globals(), OPS)
