"""The special polynomials (mpslinalg.ops.special) against SciPy's eval_* and torch.special in
float64, and torch's edge-case rules against torch.special on the CPU."""

from __future__ import annotations

import math

import pytest
import scipy.special
import torch

import mpslinalg
from mpslinalg import ops
from mpslinalg.ops import special as special_module
from mpslinalg.ops.special import POLYNOMIALS

#: SciPy's evaluation of the polynomials it has (x, n) -> values.
SCIPY = {
    "chebyshev_polynomial_t": scipy.special.eval_chebyt,
    "chebyshev_polynomial_u": scipy.special.eval_chebyu,
    "shifted_chebyshev_polynomial_t": scipy.special.eval_sh_chebyt,
    "shifted_chebyshev_polynomial_u": scipy.special.eval_sh_chebyu,
    "hermite_polynomial_h": scipy.special.eval_hermite,
    "hermite_polynomial_he": scipy.special.eval_hermitenorm,
    "laguerre_polynomial_l": scipy.special.eval_laguerre,
    "legendre_polynomial_p": scipy.special.eval_legendre,
}
#: float32 error bound, relative to the largest |value| over the grid, measured with margin.
BOUND = 1e-4


def grid(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x over (and a little beyond) the orthogonality interval, n = 0 .. 40 (Hermite 0 .. 25)."""
    if "shifted" in name:
        x = torch.linspace(-0.1, 1.1, 49, dtype=torch.float64)
    elif "laguerre" in name:
        x = torch.linspace(0.0, 12.0, 49, dtype=torch.float64)
    else:
        x = torch.linspace(-1.1, 1.1, 45, dtype=torch.float64)
    top = 25 if "hermite" in name else 40
    return x.view(-1, 1), torch.arange(top + 1, dtype=torch.float64).view(1, -1)


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_against_scipy(backend, name):
    x, n = grid(name)
    x32 = x.float()
    ref = torch.from_numpy(SCIPY[name](n.int().numpy(), x32.double().numpy()))
    ours = getattr(ops, name)(backend.tensor(x32), backend.tensor(n.float())).cpu().double()
    err = (ours - ref).abs() / ref.abs().clamp(min=1.0)
    # relative to each degree's largest value: the error of a sum of growing terms
    scale = ref.abs().amax(dim=0, keepdim=True).clamp(min=1.0)
    assert ((ours - ref).abs() / scale).max() < BOUND, float(err.max())


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
def test_against_torch_float64(backend, name):
    x, n = grid(name)
    ref = getattr(torch.special, name)(x.float().double(), n)
    ours = getattr(ops, name)(backend.tensor(x.float()), backend.tensor(n.float())).cpu()
    scale = ref.abs().amax(dim=0, keepdim=True).clamp(min=1.0)
    assert ((ours.double() - ref).abs() / scale).max() < BOUND


def _cuda_reference_without_inf(name: str, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """torch's CUDA kernel, except at n = +inf, where it would never return (it reads +inf as
    2^63 - 1 recurrence steps): there torch's CPU kernel."""
    fn = getattr(torch.special, name)
    infinite = n == math.inf
    ref = fn(x.cuda(), torch.where(infinite, 0.0, n).cuda()).cpu()
    return torch.where(infinite, fn(x, n), ref)


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
def test_edge_rules_as_torch(backend, name):
    """Negative, fractional, NaN and infinite n; x at the interval's ends and beyond; Hermite's
    degree limit; degrees just above torch's switch to the closed forms."""
    lo = 0.0 if "shifted" in name else -1.0
    xs = torch.tensor([lo, 1.0, 0.5 * (lo + 1.0), 0.3, -2.0, 3.0, math.nan, math.inf])
    ns = torch.tensor([-3.0, -0.5, 0.0, 0.7, 1.0, 2.9, 5.0, 7.0, 9.0, 128.0, 129.0,
                       math.nan, math.inf, -math.inf])
    x, n = xs.view(-1, 1), ns.view(1, -1)
    # The Metal kernels follow torch's CPU rules; the torch backend is torch.special wherever
    # it runs, and torch's CUDA kernels settle some of these edges (infinite x with infinite or
    # NaN n) otherwise than its CPU kernels: compare it with torch on its own device.
    on = torch.device("cpu") if backend.is_metal else backend.device
    ref = getattr(torch.special, name)(x.to(on), n.to(on)).cpu() if on.type == "cpu" or (
        name not in special_module._LONG_RECURRENCES) else _cuda_reference_without_inf(name, x, n)
    ours = getattr(ops, name)(backend.tensor(x), backend.tensor(n)).cpu()
    assert torch.equal(ours.isnan(), ref.isnan())
    assert torch.equal(ours.isinf(), ref.isinf())
    finite = ref.isfinite()
    scale = ref[finite].abs().clamp(min=1.0)
    assert ((ours[finite] - ref[finite]).abs() / scale).max() < 1e-4


def test_scalar_operands_and_dtypes(backend):
    x = backend.tensor(torch.tensor([0.25, -0.5]))
    for name in POLYNOMIALS:
        fn = getattr(ops, name)
        ref = getattr(torch.special, name)
        torch.testing.assert_close(fn(x, 4).cpu(), ref(x.cpu(), 4))
        torch.testing.assert_close(fn(0.25, backend.tensor(torch.tensor([2, 3]))).cpu(),
                                   ref(0.25, torch.tensor([2, 3])))
        for low in (torch.float16, torch.bfloat16):
            got = fn(x.to(low), 3)
            assert got.dtype == low
            torch.testing.assert_close(got.cpu(), ref(x.cpu(), 3).to(low))


def test_degree_bound_on_metal(metal_backend):
    """Above 65536 recurrence steps the metal backend gives NaN (documented)."""
    x = metal_backend.tensor(torch.tensor([0.5]))
    assert ops.legendre_polynomial_p(x, 65536.0).isfinite().all()
    assert ops.legendre_polynomial_p(x, 65537.0).isnan().all()
    # the Chebyshev closed forms inside (-1, 1) need no recurrence
    torch.testing.assert_close(ops.chebyshev_polynomial_t(x, 1e6).cpu(),
                               torch.special.chebyshev_polynomial_t(x.cpu(), 1e6),
                               atol=1e-1, rtol=0)


@pytest.mark.parametrize("name", ["laguerre_polynomial_l", "legendre_polynomial_p"])
def test_long_recurrences_are_bounded_on_every_backend(backend, name):
    """torch's Laguerre and Legendre kernels run the recurrence up to n (hours at 1e12; on CUDA
    without end at +inf, which froze the H200 run of the suite): the degree bound applies on
    the torch backend too, and the closed forms still answer at x = 0 / |x| = 1."""
    xs = torch.tensor([0.5, -1.0, 0.0, 1.0])
    got = getattr(ops, name)(backend.tensor(xs), backend.tensor(
        torch.tensor([[2.0**40], [3e12], [math.inf]]))).cpu()  # even degrees (float32)
    closed = xs.abs() == 1 if "legendre" in name else xs == 0
    assert got[:2, ~closed].isnan().all()
    assert torch.equal(got[:2, closed], torch.ones(2, int(closed.sum())))
    assert torch.equal(got[2], torch.zeros(4))  # +inf reads as torch's CPU kernels read it


def test_one_launch_no_host_sync(metal_backend):
    from mpslinalg import emulator
    from mpslinalg.testing import count_host_syncs

    x = metal_backend.tensor(torch.rand(3, 4))
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        ops.legendre_polynomial_p(x[:, ::2], torch.tensor(5.0))
    assert emulator.total_launches() == 1 and syncs.calls == []


def test_float64_on_metal_is_refused(metal_backend):
    with pytest.raises(TypeError, match="^mpslinalg.hermite_polynomial_h: the metal backend"):
        ops.hermite_polynomial_h(torch.zeros(2, dtype=torch.float64), 2)


def test_complex_is_refused(backend):
    x = backend.tensor(torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(NotImplementedError, match="^mpslinalg.legendre_polynomial_p: .*[Cc]omplex"):
        ops.legendre_polynomial_p(x, 2)


def test_torch_backend_float64():
    with mpslinalg.use_backend("torch"):
        x = torch.rand(5, dtype=torch.float64)
        assert torch.equal(ops.laguerre_polynomial_l(x, 7),
                           torch.special.laguerre_polynomial_l(x, 7))


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _sampler(name: str):
    lo = 0.0 if "shifted" in name else -1.0

    def samples(complex_: bool) -> list[Sample]:
        g = torch.Generator().manual_seed(POLYNOMIALS[name])
        x = lo + (1.0 - lo) * torch.rand(2, 3, 4, generator=g, dtype=torch.float64)
        if "laguerre" in name:
            x = 6.0 * x
        top = 12 if "hermite" in name else 20
        n = torch.randint(0, top, (3, 4), generator=g).double()
        return [
            Sample((x, n), desc="(2, 3, 4) with (3, 4)"),
            Sample((x[0, :, :1], torch.arange(-2.0, top, dtype=torch.float64)),
                   desc="(3, 1) with a row of degrees, negative ones included"),
            Sample((torch.tensor([lo, 1.0, 0.3], dtype=torch.float64), torch.tensor(9.0,
                    dtype=torch.float64)), desc="ends of the interval, 0-dim n"),
            Sample((torch.zeros(0, 2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)),
                   desc="empty"),
        ]

    return samples


def _bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3), torch.zeros(2)), error=RuntimeError),
        BadSample(([0.5, 0.5], torch.zeros(2)), error=TypeError),
    ]


OPS = [
    OpInfo(f"ops.{name}", getattr(ops, name), getattr(torch.special, name), _sampler(name),
           bad_samples=_bad_samples, grad_args=(), dtypes=(torch.float32,))
    for name in sorted(POLYNOMIALS)
]
instantiate_generic_tests(globals(), OPS)
