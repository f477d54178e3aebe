"""The host transport's overlap on a device model: one training step, synchronous staging against
allreduce_n_async (ddl_runtime.transports.gpu.staged), on CPU (issue 38 item 2).

    mpiexec -n 2 python3 benchmarks/staged_overlap_model.py [--mb 100] [--buckets 25] [--backward-ms 40]

A model, not a GPU measurement: the "GPU" is a clock.  Launching a kernel returns at once and
moves the stream's busy-until time on (`SimStream`); a device-to-host copy lands once the stream
has run what was queued before it (the copy's host wait sleeps until then); host-to-device copies
and the caller's wait follow the same clock.  What is real: the ranks, their threads, the runtime's
agreement, staging and shared-memory reductions of `--mb` MB of float32 gradients in `--buckets`
buckets, issued as backward produces them (a DistributedOptimizer's pattern).  Per step, on each
variant, the slowest rank's wall time from the first kernel to the step's end (stream drained,
every bucket waited).  Synchronous staging holds the caller at each bucket until the stream ran
and the reduction is done, so the "GPU" idles while the host reduces; the asynchronous call lets
backward's later kernels queue meanwhile.  Rank 0 prints one line per variant and the ratio.

`--latency`: what the thread costs a call that is waited at once: allreduce_n against
allreduce_n_async + wait() of one tensor (1 KB, 1 MB, 16 MB), copies immediate (host.HostCopies),
median of 30 calls each after a barrier.
"""
import argparse
import statistics
import time

import torch

import ddl_runtime as ddl
from ddl_runtime.collectives import ops
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.gpu import host, transport


class SimStream:
    """A device stream as a clock: work queued now runs after what was queued before it."""

    def __init__(self):
        self.busy_until = time.perf_counter()

    def launch(self, ms: float) -> None:
        self.busy_until = max(self.busy_until, time.perf_counter()) + ms / 1e3

    def synchronize(self) -> None:
        delay = self.busy_until - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


class SimCopies(host.HostCopies):
    """Copies on the model's clock: device-to-host lands once the stream ran what precedes it."""

    def __init__(self, stream: SimStream, gb_per_s: float):
        self.stream, self.gb_per_s = stream, gb_per_s

    def _copy_s(self, tensors) -> float:
        return sum(t.numel() * t.element_size() for t in tensors) / (self.gb_per_s * 1e9)

    def start_to_host(self, srcs, dsts):
        ready = max(self.stream.busy_until, time.perf_counter()) + self._copy_s(srcs)
        return ready, list(srcs), list(dsts)

    def finish_to_host(self, token):
        ready, srcs, dsts = token
        delay = ready - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        super().to_host(srcs, dsts)

    def to_host(self, srcs, dsts):
        self.finish_to_host(self.start_to_host(srcs, dsts))

    def start_to_device(self, srcs, dsts):
        super().to_device(srcs, dsts)
        return time.perf_counter() + self._copy_s(dsts)

    def to_device(self, srcs, dsts):
        self.join(self.start_to_device(srcs, dsts))

    def join(self, done_at):
        self.stream.busy_until = max(self.stream.busy_until, done_at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="gradient bytes per rank (ResNet-50: 102 MB)")
    ap.add_argument("--buckets", type=int, default=25)
    ap.add_argument("--forward-ms", type=float, default=10.0)
    ap.add_argument("--backward-ms", type=float, default=20.0)
    ap.add_argument("--copy-gb-per-s", type=float, default=20.0, help="the model's PCIe rate, each direction")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--latency", action="store_true", help="per-call cost of the thread instead (see above)")
    args = ap.parse_args()
    if min(args.mb, args.buckets, args.copy_gb_per_s, args.steps) <= 0 or min(args.forward_ms, args.backward_ms) < 0:
        ap.error("--mb, --buckets, --copy-gb-per-s and --steps must be positive, the times not negative")
    ddl.init()
    rt = _rt.current()
    stream = SimStream()
    staging = host.Staging(host.PinnedPool(host.cpu_allocator), SimCopies(stream, args.copy_gb_per_s))
    rt.gpu = transport.GpuState(None, transport=transport.Transport("host", "model"), staging=staging)
    ops._on_device = lambda refs: True  # CPU tensors take the CUDA tensors' route (the staging above)
    if args.latency:
        staging.copies = host.HostCopies()
        latency()
        ddl.finalize()
        return
    per_bucket = int(args.mb * 2**20 / 4 / args.buckets)
    grads = [torch.ones(per_bucket) for _ in range(args.buckets)]

    def step(asynchronous: bool) -> float:
        ddl.barrier()
        t0 = time.perf_counter()
        stream.busy_until = t0
        stream.launch(args.forward_ms)
        handles = []
        for k, g in enumerate(reversed(grads)):  # backward: the last layer's gradients first
            stream.launch(args.backward_ms / args.buckets)
            if asynchronous:
                handles.append(ddl.allreduce_n_async([g], op="avg", names=[f"b{k}"]))
            else:
                ddl.allreduce_n([g], op="avg", names=[f"b{k}"])
        for h in handles:
            h.wait()
        stream.synchronize()
        return max(ddl.allgather(torch.tensor([time.perf_counter() - t0], dtype=torch.float64)).tolist()) * 1e3

    results = {}
    for label, asynchronous in (("synchronous staging (allreduce_n)", False), ("allreduce_n_async (staged.py)", True)):
        step(asynchronous)  # warm: pool, plans, arenas
        results[label] = statistics.median(step(asynchronous) for _ in range(args.steps))
    if ddl.rank() == 0:
        model_ms = args.forward_ms + args.backward_ms
        print(f"model: {ddl.size()} ranks, {args.mb:g} MB of gradients in {args.buckets} buckets, forward "
              f"{args.forward_ms:g} ms + backward {args.backward_ms:g} ms = {model_ms:g} ms of device work, "
              f"copies at {args.copy_gb_per_s:g} GB/s")
        for label, ms in results.items():
            print(f"{label}: {ms:.1f} ms a step")
        sync, overlapped = results.values()
        print(f"overlapped / synchronous: {overlapped / sync:.2f}")
    ddl.finalize()


def latency() -> None:
    for nbytes in (1 << 10, 1 << 20, 16 << 20):
        t = [torch.ones(nbytes // 4)]
        medians = {}
        for label, call in (("allreduce_n", lambda: ddl.allreduce_n(t, op="sum", names=["t"])),
                            ("allreduce_n_async + wait", lambda: ddl.allreduce_n_async(t, op="sum", names=["t"]).wait())):
            for _ in range(5):
                call()
            times = []
            for _ in range(30):
                ddl.barrier()
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            medians[label] = statistics.median(times) * 1e6
        if ddl.rank() == 0:
            sync, staged = medians.values()
            print(f"{nbytes >> 10} KB: allreduce_n {sync:.0f} us, allreduce_n_async + wait {staged:.0f} us "
                  f"({staged / sync:.2f}x)")


if __name__ == "__main__":
    main()
