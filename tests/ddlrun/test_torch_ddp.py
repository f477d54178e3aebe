"""An unmodified torch DistributedDataParallel script (gloo, env:// rendezvous from the
torchrun variables ddlrun sets) trains under ``ddlrun -n 2`` and its ranks agree."""
from __future__ import annotations

import re

import pytest

from ddlrun_helpers import HERE


def test_unmodified_ddp_script_trains_and_ranks_agree(ddlrun):
    pytest.importorskip("torch")
    r = ddlrun("-n", "2", "python", str(HERE / "programs" / "ddp_train.py"), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    found = re.findall(r"^\[(\d)\] DDP rank=(\d) world=2 local_rank=(\d) first=(\S+) last=(\S+) params=(\w+)$",
                       r.stdout, re.M)
    assert sorted((f[0], f[1], f[2]) for f in found) == [("0", "0", "0"), ("1", "1", "1")], r.stdout
    assert len({f[5] for f in found}) == 1                 # identical weights on both ranks
    for _, _, _, first, last, _ in found:
        assert float(last) < 0.01 * float(first)           # it trained
