"""Process sets (collectives among a subset, registered at init or later) and join (2+ ranks)."""
import time

import torch

import ddl_runtime.horovod.torch as hvd

from checks import done, report


first = hvd.ProcessSet([0])
hvd.init(process_sets=[first])
R, N = hvd.rank(), hvd.size()
report("registered_at_init", first.process_set_id == 1 and first.included() == (R == 0), repr(first))
report("global_set", hvd.global_process_set.size() == N and hvd.global_process_set.rank() == R)
if R == 0:
    report("solo_set", torch.equal(hvd.allreduce(torch.ones(1), process_set=first, name="solo"), torch.ones(1)))
report("remove_first", hvd.remove_process_set(first))

evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(N) if r % 2]))
mine, members = (evens, list(range(0, N, 2))) if R % 2 == 0 else (odds, list(range(1, N, 2)))
report("set_rank", mine.rank() == members.index(R) and mine.size() == len(members), f"{mine.rank()} {mine.size()}")
out = hvd.allreduce(torch.full((3,), float(R)), op=hvd.Sum, process_set=mine, name="within")
report("allreduce_in_set", torch.equal(out, torch.full((3,), float(sum(members)))), str(out))
gathered = hvd.allgather(torch.tensor([R]), process_set=mine)
report("allgather_in_set", gathered.tolist() == members, str(gathered))
root = members[-1]
report("broadcast_in_set", torch.equal(hvd.broadcast(torch.tensor([R]), root, process_set=mine), torch.tensor([root])))
# A barrier in one set does not wait for the other set's slow rank.
t0 = time.monotonic()
if R == 1:
    time.sleep(1.0)
hvd.barrier(process_set=mine)
waited = time.monotonic() - t0
report("set_barrier", (waited < 0.9) if (R % 2 == 0) else True, f"even rank waited {waited:.2f}s for rank 1")
hvd.barrier()
report("remove", hvd.remove_process_set(odds) and odds.process_set_id is None and not hvd.remove_process_set(odds))
hvd.remove_process_set(evens)

# join: the last rank joins at once; the others reduce among themselves, the joined rank adds zeros.
last = N - 1
for step in range(2):
    if R == last:
        ret = hvd.join()
    else:
        a = hvd.allreduce(torch.full((4,), 6.0), name=f"a{step}")  # Average: divides by all N ranks
        s = hvd.allreduce(torch.full((2, 2), 1), name=f"s{step}", op=hvd.Sum)
        report(f"join_average_{step}", torch.equal(a, torch.full((4,), 6.0 * (N - 1) / N)), str(a))
        report(f"join_sum_{step}", torch.equal(s, torch.full((2, 2), N - 1)), str(s))
        if step == 1:
            try:
                hvd.allgather(torch.ones(1), name="needs_all")
                report("join_allgather_error", False, "no error")
            except RuntimeError as exc:
                report("join_allgather_error", f"rank {last}" in str(exc) and "join" in str(exc), str(exc))
        ret = hvd.join()
    everyone = hvd.allgather(torch.tensor([ret]))
    report(f"join_returns_last_{step}", ret != last and everyone.tolist() == [ret] * N, f"{ret} {everyone.tolist()}")
done()
