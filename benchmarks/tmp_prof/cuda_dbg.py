import sys, torch
sys.path.insert(0, ".")
import mpslinalg
from mpslinalg import small_inverse as si
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(0)
for n in (2, 3, 4):
    A = torch.randn(1000000, n, n, generator=gen)
    Ad = A.to(dev)
    X, info = si.small_inv_ex(Ad)
    Xc, infoc = si.small_inv_ex(A)
    bad = (info != 0).nonzero().flatten().cpu()
    print(n, "cuda bad", bad[:5].tolist(), "cpu bad", (infoc != 0).nonzero().flatten()[:5].tolist(), "torch", (torch.linalg.inv_ex(A).info != 0).sum().item())
    if len(bad):
        i = bad[0].item(); print(A[i], info[i].item(), X[i])
    Xp, infop = mpslinalg.inv_ex(Ad)
    print("public bad", (infop != 0).nonzero().flatten()[:5].tolist())
    print("max diff cpu/cuda", (X.cpu() - Xc).abs().max().item())
