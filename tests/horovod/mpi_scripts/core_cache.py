"""The response cache (ddl_runtime/collectives/response_cache.py): requests that ran before are announced by
id, small allreduces with their data in the round (one host).  Names are reused step after step,
so from the second step on the cached path runs; every guarantee of the table path must hold.

1. Results: sum / average / min / max, float and int, grouped, fresh and in place: a repeat is
   carried and bit-equal to the first call (the table path); submitted asynchronously in a
   different order on each rank, every result right.  Repeats too large for the round's data are
   posted from the round without the table.  Unnamed calls (numbered per call) are cached too.
2. A cached name whose shape changes on one rank: DDLMismatchError on every rank, one line.
3. A cached name that one rank refuses (a bad input there): every rank fails with its message.
4. A rank joins while the others run a cached allreduce: it contributes zeros.
Argument "mpi" (DDL_EMULATE_NODES=2): no shared memory, ids in the MPI rounds, nothing carried.
Argument "off" (HOROVOD_CACHE_CAPACITY=0 on the last rank only): the set agrees on no cache,
nothing cached or carried, every guarantee as before.
"""
import os
import sys

import torch

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.errors import DDLMismatchError
from ddl_runtime.horovod.common.process_sets import controller_for

from checks import done, report


MODE = sys.argv[1] if len(sys.argv) > 1 else "shm"
if MODE == "off" and os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) == os.environ.get(
        "WML_TEST_LAST_RANK"):
    os.environ["HOROVOD_CACHE_CAPACITY"] = "0"  # one rank asks for none: the set must agree on none
hvd.init()
R, N = hvd.rank(), hvd.size()
CARRY = MODE == "shm"
ctl = controller_for(hvd.global_process_set, "test")
if MODE == "off":
    report("capacity_agreed", ctl.cache.capacity == 0, f"capacity {ctl.cache.capacity} on rank {R}")
calls = {}


def count_calls(method: str) -> None:
    """Count the controller's calls of `method` in calls[method]."""
    inner = getattr(ctl, method)
    calls[method] = 0

    def counted(*a):
        calls[method] += 1
        return inner(*a)
    setattr(ctl, method, counted)


count_calls("_run_carried")  # a repeat reduced from the round's data
count_calls("_check")        # the table's check of a request


def inputs(r, step):
    """Rank r's inputs at `step` (any rank can compute every rank's)."""
    g = torch.Generator().manual_seed(1000 * step + r)
    return {"f": (torch.rand(300, generator=g, dtype=torch.float64) * 10).float(),
            "i": torch.randint(-50, 50, (17,), generator=g, dtype=torch.int64),
            "g": [torch.rand(33, generator=g), torch.rand(2, 5, generator=g)]}


def requests(step):
    """(name, submit, expected) for this rank at `step`."""
    mine, every = inputs(R, step), [inputs(r, step) for r in range(N)]
    fsum = sum(e["f"] for e in every)
    isum = sum(e["i"] for e in every)
    imin = torch.stack([e["i"] for e in every]).min(0).values
    imax = torch.stack([e["i"] for e in every]).max(0).values
    gavg = [sum(e["g"][k] for e in every) / N for k in range(2)]
    inplace = mine["f"].clone()
    return [
        ("sum", lambda: hvd.allreduce_async(mine["f"], op=hvd.Sum, name="c.sum"), [fsum]),
        ("avg", lambda: hvd.allreduce_async(mine["f"], op=hvd.Average, name="c.avg"), [fsum / N]),
        ("min", lambda: hvd.allreduce_async(mine["i"], op=hvd.Min, name="c.min"), [imin]),
        ("max", lambda: hvd.allreduce_async(mine["i"], op=hvd.Max, name="c.max"), [imax]),
        ("isum", lambda: hvd.allreduce_async(mine["i"], op=hvd.Sum, name="c.isum"), [isum]),
        ("inplace", lambda: hvd.allreduce_async_(inplace, op=hvd.Average, name="c.inplace"), [fsum / N]),
        ("grouped", lambda: hvd.grouped_allreduce_async(mine["g"], op=hvd.Average, name="c.grouped"), gavg),
    ]


def as_list(v):
    return v if isinstance(v, list) else [v]


def close(got, want):
    return all(a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=0)
               for a, b in zip(as_list(got), want))


# 1a. one request at a time, three times: the first through the table, then from the round's data
for name, submit, want in requests(0):
    before = calls["_run_carried"]
    first, _, third = [hvd.synchronize(submit()) for _ in range(3)]
    same = all(torch.equal(a, b) for a, b in zip(as_list(first), as_list(third)))
    carried = calls["_run_carried"] - before
    report(f"carried_{name}", carried == (2 if CARRY else 0), f"{carried} of the repeats carried")
    report(f"bits_equal_table_path_{name}", same and close(first, want), f"{first} {third} {want}")

# 1b. async, every rank in its own order: some rounds carry, some go through the table
for step in range(1, 6):
    reqs = requests(step)
    order = reqs[R % len(reqs):] + reqs[:R % len(reqs)] if step % 2 else list(reversed(reqs))
    handles = {name: submit() for name, submit, _ in order}
    bad = [name for name, _, want in reqs if not close(hvd.synchronize(handles[name]), want)]
    report(f"any_order_{step}", not bad, f"wrong: {bad}")

# 1c. repeats too large for the round's data: every rank announced the id in one round, so the
# repeat is posted from the round without the table (no check: it ran alike before); the first
# call goes through the table.  Then two of them in flight, submitted in a different order on
# each rank: right whichever path each takes.
before = calls["_check"]
big = {name: [torch.rand(70000 + k, generator=torch.Generator().manual_seed(10 * r + k)) for r in range(N)]
       for k, name in enumerate(("c.large.a", "c.large.b"))}  # 280 KB each: over the round's data room (256 KB)
got = [hvd.allreduce(big["c.large.a"][R], op=hvd.Sum, name="c.large.a") for _ in range(3)]
checks = calls["_check"] - before
report("large_repeats_skip_the_table", checks == (3 if MODE == "off" else 1), f"{checks} table checks for 3 calls")
report("large_repeats_right", torch.equal(got[0], got[2]) and torch.allclose(got[0], sum(big["c.large.a"]), rtol=1e-6),
       f"{got[0][:4]} {got[2][:4]}")
for step in range(4):
    order = ["c.large.a", "c.large.b"] if (R + step) % 2 else ["c.large.b", "c.large.a"]
    handles = {name: hvd.allreduce_async(big[name][R], op=hvd.Average, name=name) for name in order}
    bad = [name for name in big if not torch.allclose(hvd.synchronize(handles[name]), sum(big[name]) / N, rtol=1e-6)]
    report(f"large_any_order_{step}", not bad, f"wrong: {bad}")

# 1d. unnamed calls (numbered per call: noname.N) are cached by their template: repeats carried
# (one host) or posted without the table, right; then one rank's shape differs: an error on
# every rank that names the call
small = torch.arange(12, dtype=torch.float32) + R
before_checks, before_carried = calls["_check"], calls["_run_carried"]
got = [hvd.allreduce(small, op=hvd.Sum) for _ in range(4)]
checks, carried = calls["_check"] - before_checks, calls["_run_carried"] - before_carried
report("unnamed_repeats_cached", checks == (4 if MODE == "off" else 1) and carried == (3 if CARRY else 0),
       f"{checks} table checks, {carried} carried for 4 unnamed calls")
want = torch.arange(12, dtype=torch.float32) * N + sum(range(N))
report("unnamed_repeats_right", all(torch.equal(g, want) for g in got), f"{got[-1]} != {want}")
pair = [hvd.allreduce_async(small * k, op=hvd.Sum) for k in (1, 2)]  # two unnamed in flight
report("unnamed_in_flight_right", all(torch.equal(hvd.synchronize(h), want * k) for h, k in zip(pair, (1, 2))))
try:
    hvd.allreduce(torch.ones(13 if R == N - 1 else 12), op=hvd.Sum)
    report("unnamed_cached_mismatch", False, "no error")
except DDLMismatchError as exc:
    text = str(exc)
    report("unnamed_cached_mismatch", "noname." in text and f"rank {N - 1}: [13]" in text and "\n" not in text, text)

# 2. a cached name, the shape changed on the last rank
x = torch.ones(8)
for _ in range(3):
    hvd.allreduce(x, op=hvd.Sum, name="c.shape")
try:
    hvd.allreduce(torch.ones(9 if R == N - 1 else 8), op=hvd.Sum, name="c.shape")
    report("cached_mismatch", False, "no error")
except DDLMismatchError as exc:
    text = str(exc)
    report("cached_mismatch", "c.shape" in text and f"rank {N - 1}: [9]" in text and "\n" not in text, text)

# 3. a cached name one rank refuses
for _ in range(3):
    hvd.allreduce(x, op=hvd.Sum, name="c.refused")
try:
    if R == N - 1:
        ctl.refuse("allreduce", "c.refused", "a bad input here")
        hvd.barrier()
        report("cached_refusal", True)
    else:
        hvd.allreduce(x, op=hvd.Sum, name="c.refused")
        report("cached_refusal", False, "no error")
except DDLMismatchError as exc:
    hvd.barrier()
    report("cached_refusal", f"rank {N - 1} refused its input: a bad input here" in str(exc), str(exc))

# 4. the last rank joins while the others run a cached allreduce
for step in range(3):
    y = torch.full((5,), float(R + 1))
    if R == N - 1 and step == 2:
        hvd.join()
    else:
        r = hvd.allreduce(y, op=hvd.Sum, name="c.join")
        want = N * (N + 1) / 2 - (N if step == 2 else 0)
        report(f"join_zeros_{step}", torch.all(r == want).item(), f"{r} != {want}")
        if step == 2:
            hvd.join()
if MODE == "off":
    report("nothing_cached", not ctl.cache.descs, f"{len(ctl.cache.descs)} descriptors cached")
hvd.shutdown()
done()
