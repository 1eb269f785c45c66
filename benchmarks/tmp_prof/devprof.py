import torch, sys
torch.set_num_threads(2)
sys.path.insert(0, ".")
from mpslinalg import small_inverse as si
n = 4
A=torch.randn(100000,n,n)
si._torch_solve(A,None)
with torch.profiler.profile(record_shapes=True) as p:
    for _ in range(5): si._torch_solve(A,None)
print(p.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=20, max_shapes_column_width=70))
