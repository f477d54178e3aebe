"""Horovod's allreduce when /dev/shm has no room for its shared memory, against the native path (issue 38).

    mpiexec -n 2 python3 benchmarks/hvd_no_room.py [--room-mb 1] [--repeat 9]

A machine whose /dev/shm is small (a container's 64 MB default) gives the runtime no room for the
arenas and result regions of large tensors, and every one of them reduces through MPI.  Here that
is a stand-in: the runtime's room check (ShmGroup.room_for) answers "no room" for any window over
`--room-mb` MB, which is what it answers on such a machine; the windows themselves are not
created (tests/runtime/test_shm.py runs the same fallbacks under a real 32 MB /dev/shm).

For 64 MB and 4 MB of float32 per rank: `ddl.allreduce` (the native engine's MPI path),
`hvd.allreduce` (average, out of place) and `hvd.allreduce_` (sum, in place), medians of
`--repeat` calls each after a barrier, and each Horovod figure's ratio to the native one.  Rank 0
prints one line per size.
"""
import argparse
import statistics
import time

import torch

from ddl_runtime.transports.shm import group as shm_group


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--room-mb", type=float, default=1.0, help="the largest window the room check allows")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    if args.repeat < 1 or args.room_mb < 0:
        ap.error("--repeat must be at least 1 and --room-mb not negative")
    allowed = shm_group.ShmGroup.room_for

    def room_for(self, nbytes, what, instead, reclaim=0, say=True):
        if nbytes > args.room_mb * 2**20:
            return False
        return allowed(self, nbytes, what, instead, reclaim, say)
    shm_group.ShmGroup.room_for = room_for

    import ddl_runtime as ddl
    import ddl_runtime.horovod.torch as hvd
    hvd.init()

    def median_ms(call) -> float:
        for _ in range(2):
            call()
        times = []
        for _ in range(args.repeat):
            ddl.barrier()
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    for mb in (64, 4):
        x = torch.ones(mb * 2**18)
        native = median_ms(lambda: ddl.allreduce(x, name=f"ddl.{mb}"))
        out = median_ms(lambda: hvd.allreduce(x, op=hvd.Average, name=f"hvd.{mb}"))
        inplace = median_ms(lambda: hvd.allreduce_(x, op=hvd.Sum, name=f"hvd_.{mb}"))
        if hvd.rank() == 0:
            print(f"{mb} MB, no room over {args.room_mb:g} MB: ddl.allreduce {native:.1f} ms, hvd.allreduce "
                  f"{out:.1f} ms ({out / native:.2f}x), hvd.allreduce_ {inplace:.1f} ms ({inplace / native:.2f}x)",
                  flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
