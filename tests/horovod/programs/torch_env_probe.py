"""Prints what the runtime made of the job's HOROVOD_* settings, then trains one step."""
import json

import torch

import horovod.torch as hvd
from ddl_runtime.state import runtime

hvd.init()
rt = runtime.current()
print("SETTINGS " + json.dumps({"fusion_bytes": rt.fusion_bytes, "stall_warning_s": rt.env.stall_warning_s,
                                "stall_shutdown_s": rt.env.stall_shutdown_s}), flush=True)
model = torch.nn.Linear(4, 2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
model(torch.randn(3, 4)).sum().backward()
opt.step()
