import sys, torch
sys.path.insert(0, "."); sys.path.insert(0, "tests")
from mpslinalg import small_inverse as si
from test_small_inverse import _singular_batch
from helpers import inv_ratio, matrix_with_spread
dev = torch.device("cuda")
for dt in (torch.float32, torch.complex64, torch.float64):
    for n in (1, 2, 3, 4):
        A = torch.cat([torch.randn(1000, n, n, dtype=dt), _singular_batch(n, dt), matrix_with_spread(n, 1e6, dt, (100,), 1) if n > 1 else torch.randn(100, 1, 1, dtype=dt)])
        X, info = si.small_inv_ex(A.to(dev))
        ref = torch.linalg.lu_factor_ex(A).info
        ok = info.cpu() == 0
        d = si.small_det(A.to(dev)).cpu(); dref = torch.linalg.det(A.double() if not dt.is_complex else A.to(torch.complex128))
        s, l = si.small_slogdet(A.to(dev))
        print(dt, n, "info equal", torch.equal(info.cpu(), ref), "ratio", inv_ratio(A[ok], X.cpu()[ok], dt),
              "det sing zero", bool((d[ref > 0] == 0).all()), "slog", bool((l.cpu()[ref > 0] == -float('inf')).all()))
