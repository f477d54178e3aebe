"""A small CNN with BatchNorm and dropout in every block, and a training loop, for the LMS tests."""
from __future__ import annotations

import torch
from torch import nn

MB = 1 << 20


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)

    def block(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
                             nn.Dropout(0.3), nn.Conv2d(c_out, c_out, 3, padding=1), nn.BatchNorm2d(c_out),
                             nn.ReLU())

    return nn.Sequential(nn.Sequential(block(3, 16), block(16, 16), block(16, 16), block(16, 16)),
                         nn.Flatten(), nn.Dropout(0.2), nn.Linear(16 * 16 * 16, 10))


def batches(steps: int, batch: int = 32, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]


def train(model: nn.Module, steps: int = 4, batch: int = 32, optimizer=None, seed: int = 1, data=None):
    """Plain SGD with momentum; returns (losses, state_dict copy)."""
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(seed)
    losses = []
    for x, y in data or batches(steps, batch):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(a, b) -> None:
    la, sa = a
    lb, sb = b
    assert la == lb, (la, lb)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k      # BatchNorm running stats and counts included


def make_chain_model(seed: int = 0, n: int = 24, d: int = 256) -> nn.Module:
    """n small blocks chained in one nn.Sequential (BatchNorm and dropout in each): recomputing them
    in segments keeps fewer inputs than block by block."""
    torch.manual_seed(seed)

    def block():
        return nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Dropout(0.2), nn.Linear(d, d))

    return nn.Sequential(nn.Sequential(*[block() for _ in range(n)]), nn.Linear(d, 10))


def chain_batches(steps: int = 4, batch: int = 64, d: int = 256, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, d, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)]
