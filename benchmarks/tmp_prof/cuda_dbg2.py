import sys, torch
sys.path.insert(0, ".")
import mpslinalg
from mpslinalg import small_inverse as si
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(0)
for n in (2, 3, 4):
    for batch in (1, 10000, 100000, 300000, 1000000, 3000000):
        A = torch.randn(batch, n, n, generator=gen)
        Ad = A.to(dev)
        X, info = si.small_inv_ex(Ad)
        t = torch.linalg.inv_ex(Ad).info
        pub = mpslinalg.inv_ex(Ad).info
        bad = (info != 0).nonzero().flatten().cpu()
        print(n, batch, "small bad", bad[:5].tolist(), "torch bad", (t != 0).nonzero().flatten()[:5].tolist(), "public bad", (pub != 0).nonzero().flatten()[:5].tolist(), flush=True)
        if len(bad):
            i = bad[0].item(); print(A[i].tolist(), info[i].item())
            Xc, ic = si.small_inv_ex(A[i:i+1]); print("cpu info", ic.tolist(), torch.linalg.lu_factor_ex(A[i]).info.item())
