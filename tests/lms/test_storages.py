"""LMS plans by storage, not by view (issue 57 item 2): a block that saves several views of one
storage (attention's q, k and v chunked from one projection) frees device memory only when every
view of it is swapped.  On the CPU stand-in (DDL_LMS_STANDIN_BYTES), the storages the saved
tensors hold are counted where the device would hold them (each storage once, while it is alive:
finalizers on the storages themselves, independent of LMS's own bookkeeping), at the end of each
forward, when every saved activation is there at once."""
from __future__ import annotations

import weakref

import pytest
import torch
from lms_helpers import MB, assert_same, train
from torch import nn

import ddl_runtime.lms as lms
from ddl_runtime.lms import planner
from ddl_runtime.lms import session as lms_session

BUDGET = 12 * MB


class QKV(nn.Module):
    """q, k and v are three views of one projection's output: mul saves q and k, then v."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.proj(x).chunk(3, dim=-1)
        return torch.tanh(q * k) * v


def make_model(seed: int = 0, blocks: int = 6, d: int = 128) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Sequential(*[QKV(d) for _ in range(blocks)]), nn.Linear(d, 10))


def data(steps: int = 5, batch: int = 1024, d: int = 128):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(batch, d, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)]


class DeviceBytes:
    """The bytes the saved activations hold on the stand-in's device: every storage a saved tensor
    views, and every copy brought back, counted once while it lives (weakref.finalize on the storage)."""

    def __init__(self, session) -> None:
        self.live = {}
        self.params = {p.untyped_storage().data_ptr() for p in session.model.parameters()}
        pack, to_device = session._pack, session.transfer.to_device

        def counted_pack(t):
            self.add(t)
            return pack(t)

        def counted_to_device(host, after):
            dev, event = to_device(host, after)
            self.add(dev)
            return dev, event
        session._pack = counted_pack
        session.transfer.to_device = counted_to_device

    def add(self, t) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in self.params or ptr in self.live:
            return
        self.live[ptr] = storage.nbytes()
        weakref.finalize(storage, self.live.pop, ptr)

    @property
    def now(self) -> int:
        return sum(self.live.values())


@pytest.fixture(autouse=True)
def _fresh_warnings():
    lms_session._warned.clear()
    yield
    lms_session._warned.clear()


def test_views_of_one_storage_are_planned_as_it_and_the_device_holds_what_the_plan_said(monkeypatch):
    monkeypatch.setenv("DDL_LMS_STANDIN_BYTES", str(BUDGET))
    steps = data()
    reference = train(make_model(), data=steps)
    model = make_model()
    s = lms.enable(model, size=1024)          # budget 0: the stand-in's whole device
    device = DeviceBytes(s)
    at_end_of_forward = []

    def measure(_module, _args, _out):        # every saved activation is there at once
        s.transfer.synchronize()              # copies out done: a swapped storage is let go
        at_end_of_forward.append(s.transfer.base + device.now)
    model.register_forward_hook(measure)
    result = train(model, data=steps)
    assert_same(result, reference)
    plan, prof = s._plan, s._profile
    assert plan is not None and plan.swapped_bytes > 0, s.stats_.plan
    planned = at_end_of_forward[-2:]          # the steps run on the plan
    assert max(planned) <= BUDGET, (f"device held {[round(b / MB, 2) for b in planned]} MB at the end of forward, "
                                    f"budget {BUDGET / MB} MB; plan: {plan.describe()}")
    assert lms.stats(model).peak_bytes <= BUDGET
    # the profile names the storages: q, k and v of each block are views of one
    shared = [members for members in prof.storages.values() if len(members) >= 3]
    assert len(shared) >= 6, prof.storages
    for members in prof.storages.values():   # a storage is swapped with all its views, or kept
        assert len({plan.tensors[i] for i in members} - {planner.RECOMPUTE}) <= 1, (members, plan.tensors)
