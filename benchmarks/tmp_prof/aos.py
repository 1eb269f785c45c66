import torch, sys, time, statistics
sys.path.insert(0, ".")
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
from mpslinalg import small_inverse as si
def med(f, r=11):
    f(); ts=[]
    for _ in range(r):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
def aos_solve(A):
    B_, n = A.shape[0], A.shape[-1]
    M = torch.empty(B_, n, 2 * n)
    M[:, :, :n].copy_(A)
    M[:, :, n:].copy_(torch.eye(n).expand(B_, n, n))
    Mv = M.permute(1, 2, 0)
    si._factor(Mv, n)
    info = si._info(si._diag(Mv))
    si._back_substitute(Mv, n)
    return M[:, :, n:], info
for n in (2, 3, 4):
    for B in (10000, 100000):
        A = torch.randn(B, n, n)
        X1, _ = aos_solve(A); X2, _ = si._torch_solve(A, None)
        assert torch.allclose(X1, X2, rtol=1e-4, atol=1e-4)
        print(n, B, "torch %.3f soa %.3f aos %.3f" % (med(lambda: torch.linalg.inv(A)), med(lambda: si._torch_solve(A, None)), med(lambda: aos_solve(A))), flush=True)
