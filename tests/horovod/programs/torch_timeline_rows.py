"""Run on 2 ranks under `ddlrun --horovod` with HOROVOD_TIMELINE: a DistributedOptimizer step and a
named allreduce, for the timeline's per-tensor rows (test_hvd_edges.py reads the trace)."""
import torch

import horovod.torch as hvd

hvd.init()
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(4, 2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
model(torch.ones(3, 4)).sum().backward()
opt.step()
hvd.allreduce(torch.ones(2), name="test_allreduce")
hvd.shutdown()
print("OK torch timeline rows", flush=True)
