"""An unmodified single-script torch DistributedDataParallel job (gloo, env:// rendezvous):
nothing here knows about ddlrun; it relies on the torchrun variables only."""
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
# As torch's own DDP examples do: every rank past its last collective before tearing gloo down.
# Without it, a rank whose peer has already closed its gloo pairs can abort in gloo's shutdown
# ("terminate called without an active exception", status 134): a torch/gloo race, not ddlrun's.
dist.barrier()
dist.destroy_process_group()
