"""An unmodified single-script torch DistributedDataParallel job (gloo, env:// rendezvous):
nothing here knows about ddlrun; it relies on the torchrun variables only."""
import gc
import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1234 + rank)          # different init per rank: DDP must broadcast rank 0's
x = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
w_true = torch.arange(8, dtype=torch.float32)
y = x @ w_true + 0.5
data = TensorDataset(x, y)
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
first = last = None
for epoch in range(8):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(f"DDP rank={rank} world={world} local_rank={os.environ['LOCAL_RANK']} first={first:.4f} "
      f"last={last:.6f} params={digest}", flush=True)
# The script's last lines, as torch's DDP examples end, plus one line for a torch 2.13 gloo bug.
# Backward stashes a Python object (a contextvars copy) in the thread state that every gloo work
# launched from DDP's hooks captures. DDP sits in a reference cycle, so without the collect its
# process group and works outlive the script; gloo's worker thread then drops the last work during
# interpreter shutdown, needs the GIL, and aborts ("terminate called without an active exception",
# status 134). Seen under plain torchrun too (3 of 12 runs here) and in about half the runs under
# ddlrun; with the collect, 0 of 56. pytorch/pytorch#179291 (an atexit destroy) was abandoned.
dist.barrier()
del model, opt
gc.collect()
dist.destroy_process_group()
