"""What each rank of a spawned world checks (`dtensor_world.run` starts them; one function
per world, many checks each: a world costs seconds to start)."""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

import mpslinalg
from mpslinalg import ops
from mpslinalg.distributed import RedistributionWarning

#: The c10d functions a call could reach (besides DTensor's functional collectives, which
#: CommDebugMode counts).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
               "broadcast", "broadcast_object_list", "reduce_scatter", "reduce_scatter_tensor",
               "all_to_all", "all_to_all_single", "barrier", "send", "recv", "gather",
               "scatter", "reduce")


@contextlib.contextmanager
def count_collectives():
    """Counts every collective started inside: the c10d functions (patched) and DTensor's
    functional collectives (CommDebugMode); yields a dict whose "total" is read after."""
    counts = {"total": 0}
    originals = {name: getattr(dist, name) for name in COLLECTIVES}

    def counting(name):
        def wrapper(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            counts["total"] += 1
            return originals[name](*args, **kwargs)
        return wrapper

    for name in COLLECTIVES:
        setattr(dist, name, counting(name))
    try:
        with CommDebugMode() as mode:
            yield counts
    finally:
        for name, f in originals.items():
            setattr(dist, name, f)
    # CommDebugMode sees the c10d ops under the functions too: the larger of the two counts
    counts["total"] = max(counts["total"], mode.get_total_counts())


#: The functions of an op with ``info`` that do not return it (they may raise on it: one
#: all-reduce so that every rank raises); the others (``_ex`` forms, ops without info): none.
CHECKING = {"inv", "solve", "lu_factor", "lu", "eigh", "eigvalsh", "matrix_rank", "eig", "eigvals",
            "ldl_factor"}


def _same(got, want, atol=1e-5):
    got = got.full_tensor() if isinstance(got, DTensor) else got
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-4, equal_nan=True)


def _results(x):
    return list(x) if isinstance(x, tuple) else [x]


def _spd(batch, n, seed):
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(*batch, n, n, generator=g)
    return M @ M.mT + n * torch.eye(n)


def _batch_checks(mesh, rank):
    """Every op family's function on a batch-sharded DTensor: no collective, results sharded
    on their batch, equal to the single-process results."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(7, 3, 3, generator=g) + 3 * torch.eye(3)  # 7: uneven shards
    S = _spd((7,), 3, 1)
    B = torch.randn(7, 3, 2, generator=g)
    T = torch.randn(7, 5, 3, generator=g)
    x = torch.rand(7, 4, generator=g)
    LU, piv = torch.linalg.lu_factor(A)
    geq, tau = torch.geqrf(T)
    W = torch.randn(6, 4, generator=g)
    cases = [
        (mpslinalg.inv, (A,), {}), (mpslinalg.inv_ex, (A,), {}), (mpslinalg.det, (A,), {}),
        (mpslinalg.slogdet, (A,), {}), (mpslinalg.logdet, (S,), {}),
        (mpslinalg.eigh, (S,), {}), (mpslinalg.eigvalsh, (S,), {}),
        (mpslinalg.svd, (T,), {"full_matrices": False}), (mpslinalg.svdvals, (T,), {}),
        (mpslinalg.qr, (T,), {}), (mpslinalg.solve, (A, B), {}), (mpslinalg.solve_ex, (A, B), {}),
        (mpslinalg.lu_factor, (A,), {}), (mpslinalg.lu_factor_ex, (A,), {}),
        (mpslinalg.lu, (A,), {}), (mpslinalg.lu_solve, (LU, piv, B), {}),
        (mpslinalg.lstsq, (T, torch.randn(7, 5, 2, generator=g)), {"driver": "gelsd"}),
        (mpslinalg.matrix_exp, (A,), {}), (mpslinalg.pinv, (T,), {}),
        (mpslinalg.matrix_rank, (T,), {}), (mpslinalg.geqrf, (T,), {}),
        (mpslinalg.householder_product, (geq, tau), {}), (mpslinalg.matrix_power, (A, 3), {}),
        (ops.chebyshev_polynomial_t, (x, 3), {}), (ops.linear, (x, W), {}),
        (mpslinalg.eig, (A,), {}), (mpslinalg.eigvals, (A,), {}),
        (mpslinalg.ldl_factor, (S,), {}), (mpslinalg.ldl_factor_ex, (S,), {}),
        (mpslinalg.ldl_solve, (*torch.linalg.ldl_factor(S), B), {}),
    ]
    for function, args, kwargs in cases:
        name = function.__name__
        want = function(*args, **kwargs)
        dargs = [distribute_tensor(a, mesh, [Shard(0)]) if isinstance(a, torch.Tensor)
                 and a is not W else a for a in args]
        if function is ops.linear:
            dargs[1] = distribute_tensor(W, mesh, [Replicate()])
        with count_collectives() as counts:
            got = function(*dargs, **kwargs)
        # the checking forms agree on failure through one all-reduce; the others: nothing
        if name in CHECKING:
            assert counts["total"] == 1 and counts["all_reduce"] == 1, (name, counts)
        else:
            assert counts["total"] == 0, (name, counts)
        for g_, w_ in zip(_results(got), _results(want), strict=True):
            assert isinstance(g_, DTensor), name
            batch = w_.dim() > 0 and w_.shape[0] == 7
            assert g_.placements == ((Shard(0),) if batch else (Replicate(),)), (
                name, g_.placements, w_.shape)
            _same(g_, w_)
        assert isinstance(want, torch.Tensor) or type(got) is type(want), name


def _replicated_checks(mesh):
    A = torch.randn(4, 3, 3) + 3 * torch.eye(3)
    dA = distribute_tensor(A, mesh, [Replicate()])
    with count_collectives() as counts:
        got = mpslinalg.inv(dA)
        U, S, Vh = mpslinalg.svd(dA)
    assert counts["total"] == 0, counts
    assert got.placements == (Replicate(),) and S.placements == (Replicate(),)
    _same(got, torch.linalg.inv(A))
    _same(S, torch.linalg.svdvals(A))
    # torch's own function on every backend: DTensor's own sharding rules
    v = torch.randn(6, 3)
    dv = distribute_tensor(v, mesh, [Shard(0)])
    _same(mpslinalg.cross(dv, dv), torch.linalg.cross(v, v))
    _same(mpslinalg.vector_norm(dv, dim=-1), torch.linalg.vector_norm(v, dim=-1))


def _checking(mesh, rank, size):
    """The checking forms: one all-reduce, then the same LinAlgError on every rank."""
    A = torch.randn(2 * size, 3, 3) + 3 * torch.eye(3)
    dA = distribute_tensor(A, mesh, [Shard(0)])
    with count_collectives() as counts:
        mpslinalg.inv(dA)
    assert counts["total"] == 1 and counts.get("all_reduce") == 1, counts
    with count_collectives() as counts:  # the _ex form without check_errors: none
        mpslinalg.inv_ex(dA)
    assert counts["total"] == 0, counts
    A[-1] = 0  # singular: on the last rank's shard only
    dA = distribute_tensor(A, mesh, [Shard(0)])
    for call in (lambda: mpslinalg.inv(dA), lambda: mpslinalg.solve(dA, dA),
                 lambda: mpslinalg.inv_ex(dA, check_errors=True)):
        try:
            call()
        except mpslinalg.LinAlgError as error:
            message = [str(error)]
        else:
            raise AssertionError("no LinAlgError")
        everyone = [None] * size
        dist.all_gather_object(everyone, message[0])
        assert len(set(everyone)) == 1, everyone
        assert f"on rank {size - 1} of {size}" in everyone[0], everyone[0]
    # a mesh of one rank: no collective, the local error
    one = init_device_mesh("cpu", (size, 1), mesh_dim_names=("dp", "one"))["one"]
    single = DTensor.from_local(A[-1:].clone(), one, [Shard(0)])
    with count_collectives() as counts:
        with contextlib.suppress(mpslinalg.LinAlgError):
            mpslinalg.inv(single)
    assert counts["total"] == 0, counts


def _autograd(mesh):
    A = torch.randn(6, 3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    A.requires_grad_(True)
    torch.linalg.det(A).sum().backward()
    want = A.grad
    dA = distribute_tensor(A.detach(), mesh, [Shard(0)]).requires_grad_(True)
    mpslinalg.det(dA).sum().backward()
    assert isinstance(dA.grad, DTensor) and dA.grad.placements == (Shard(0),)
    _same(dA.grad, want, atol=1e-10)
    dS = distribute_tensor(_spd((6,), 3, 2).double(), mesh, [Shard(0)]).requires_grad_(True)
    w, V = mpslinalg.eigh(dS)
    w.sum().backward()
    assert dS.grad.placements == (Shard(0),)


def _redistribution(mesh, size):
    A = torch.randn(4 * size, 3, 3) + 3 * torch.eye(3)
    dA = distribute_tensor(A, mesh, [Shard(2)])  # a matrix dimension
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = mpslinalg.inv(dA)
        mpslinalg.inv(dA)  # warned once
    ours = [w for w in caught if issubclass(w.category, RedistributionWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "all-to-all" in str(ours[0].message) and "mpslinalg.inv" in str(ours[0].message)
    assert got.placements == (Shard(0),), got.placements  # moved to the batch
    _same(got, torch.linalg.inv(A))
    M = torch.randn(6, 6) + 6 * torch.eye(6)  # no batch: replicated
    dM = distribute_tensor(M, mesh, [Shard(0)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = mpslinalg.det(dM)
    assert any("all-gather" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert got.placements == (Replicate(),)
    _same(got, torch.linalg.det(M))
    # a composite whose declaration states no core rank: replicated, with the warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = mpslinalg.cond(distribute_tensor(A, mesh, [Shard(0)]))
    assert any(issubclass(w.category, RedistributionWarning) for w in caught)
    assert got.placements == (Replicate(),)
    _same(got, torch.linalg.cond(A), atol=1e-3)


def _signs(Q, R, Qw, Rw):
    """Q D, D R against the single-process factors (D: the signs of R's diagonals)."""
    d = (R.diagonal(dim1=-2, dim2=-1) / Rw.diagonal(dim1=-2, dim2=-1)).sgn()
    _same(Q, Qw * d.unsqueeze(-2), atol=1e-4)
    _same(R, Rw * d.conj().unsqueeze(-1), atol=1e-4)


def _tsqr(mesh, size, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    m, n = 40 * size + 3, 5  # uneven rows
    A = torch.randn(m, n, generator=g, dtype=dtype)
    dA = distribute_tensor(A, mesh, [Shard(0)])
    with count_collectives() as counts:
        Q, R = mpslinalg.qr(dA)
    assert counts["total"] == 1, counts  # the all-gather of the R factors
    assert Q.placements == (Shard(0),) and R.placements == (Replicate(),)
    Qw, Rw = torch.linalg.qr(A)
    _signs(Q.full_tensor(), R.full_tensor(), Qw, Rw)
    diagonal = torch.view_as_real(R.to_local().diagonal().to(torch.complex128))
    assert (diagonal[:, 0] >= 0).all() and (diagonal[:, 1] == 0).all()  # real, non-negative
    Q0, Rr = mpslinalg.qr(dA, mode="r")
    _same(Rr, R.full_tensor())
    assert Q0.full_tensor().numel() == 0
    # batched A, rows sharded
    Ab = torch.randn(2, m, n, generator=g, dtype=dtype)
    Qb, Rb = mpslinalg.qr(distribute_tensor(Ab, mesh, [Shard(1)]))
    _signs(Qb.full_tensor(), Rb.full_tensor(), *torch.linalg.qr(Ab))
    # lstsq: B sharded or replicated by rows
    B = torch.randn(m, 2, generator=g, dtype=dtype)
    for placement in (Shard(0), Replicate()):
        for driver in ("gelsd", "gelsy"):
            got = mpslinalg.lstsq(dA, distribute_tensor(B, mesh, [placement]), driver=driver)
            want = torch.linalg.lstsq(A, B, driver=driver)
            for field in ("solution", "residuals", "rank", "singular_values"):
                _same(getattr(got, field), getattr(want, field), atol=1e-4)
    # complete mode: the generic path, replicated with a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Qc, Rc = mpslinalg.qr(dA, mode="complete")
    if dtype == torch.float32:  # the first call of this layout (the warning is given once)
        assert any(issubclass(w.category, RedistributionWarning) for w in caught)
    _signs(Qc.full_tensor()[:, :n], Rc.full_tensor()[:n], Qw, Rw)
    if dtype.is_complex:
        return
    # autograd through the collectives
    A64 = A.double().requires_grad_(True)
    Qw, Rw = torch.linalg.qr(A64)
    dA64 = distribute_tensor(A64.detach(), mesh, [Shard(0)]).requires_grad_(True)
    Q, R = mpslinalg.qr(dA64)
    d = (R.to_local().diagonal().sign() / Rw.diagonal().sign()).detach()
    (Rw * d.unsqueeze(-1)).square().sum().backward()
    R.square().sum().backward()
    _same(dA64.grad, A64.grad, atol=1e-8)


def _compiled(mesh):
    A = torch.randn(6, 3, 3) + 3 * torch.eye(3)
    dA = distribute_tensor(A, mesh, [Shard(0)])
    compiled = torch.compile(lambda X: mpslinalg.det(X) * 2, backend="eager", fullgraph=True)
    got = compiled(dA)
    assert got.placements == (Shard(0),)
    _same(got, 2 * torch.linalg.det(A))


def batch_world(rank, size):
    torch.manual_seed(0)  # the same inputs on every rank
    mesh = init_device_mesh("cpu", (size,))
    _batch_checks(mesh, rank)
    _replicated_checks(mesh)
    _checking(mesh, rank, size)
    _autograd(mesh)
    _redistribution(mesh, size)
    _compiled(mesh)
    _metal(mesh, size)


def tsqr_world(rank, size):
    torch.manual_seed(0)  # the same inputs on every rank
    mesh = init_device_mesh("cpu", (size,))
    _tsqr(mesh, size)
    _tsqr(mesh, size, torch.complex128)
    _checking(mesh, rank, size)
    if size == 4:  # a 2-D mesh: the batch split on both of its dimensions
        mesh2 = init_device_mesh("cpu", (2, 2))
        A = torch.randn(4, 6, 3, 3) + 3 * torch.eye(3)
        dA = distribute_tensor(A, mesh2, [Shard(0), Shard(1)])
        with count_collectives() as counts:
            got = mpslinalg.inv(dA)
        assert counts["total"] == 1, counts  # the checking form's agreement
        assert got.placements == (Shard(0), Shard(1))
        _same(got, torch.linalg.inv(A))


def _metal(mesh, size):
    """The metal backend on CPU tensors (the Metal kernels through the emulator)."""
    with mpslinalg.use_backend("metal"):
        A = torch.randn(5, 3, 3) + 3 * torch.eye(3)
        dA = distribute_tensor(A, mesh, [Shard(0)])
        with count_collectives() as counts:
            got = mpslinalg.inv_ex(dA)
        assert counts["total"] == 0, counts
        assert got.inverse.placements == (Shard(0),)
        _same(got.inverse, torch.linalg.inv(A))
        T = torch.randn(16 * size, 4)
        Q, R = mpslinalg.qr(distribute_tensor(T, mesh, [Shard(0)]))
        _signs(Q.full_tensor(), R.full_tensor(), *torch.linalg.qr(T))
