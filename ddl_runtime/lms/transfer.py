"""Moving saved tensors between the device and host memory, behind one small interface.

``CudaTransfer``: copies out on a side stream once the compute stream has produced the tensor
(an event orders them), into pinned host memory (torch's caching host allocator); the device
memory is handed back to the allocator when the copy is done (``record_stream``); copies back
run in order on a second side stream, each after its own copy out (events), and the compute
stream waits on the copy back's event only where it uses the tensor.

``HostStandIn``: the same protocol on CPU tensors, for CI: the "device" tensors are the CPU
tensors themselves, "host" copies are clones, and each side stream is a worker thread that
runs its queue in order, so the hooks' prefetching and event ordering run for real.
"""
from __future__ import annotations

import abc
import os
import queue
import threading
import time
from typing import Callable, List, Optional, Tuple

import torch

BANDWIDTH_PROBE_BYTES = 64 << 20
_measured_bandwidth = {}


def sharing_ranks(env) -> int:
    """How many local ranks share this rank's GPU, from ddlrun's DDL_LAYOUT_GPUS (``0;0;1;1``:
    ranks 0 and 1 share GPU 0) and LOCAL_RANK; 1 when either is missing or unreadable."""
    layout = [part.strip() for part in env.get("DDL_LAYOUT_GPUS", "").split(";")]
    local = env.get("LOCAL_RANK", "").strip()
    if not local.isdigit() or int(local) >= len(layout) or not layout[int(local)]:
        return 1
    return max(1, layout.count(layout[int(local)]))


class Transfer(abc.ABC):
    """The protocol the session uses: CudaTransfer on a GPU, the CPU stand-in in tests."""
    name = "transfer"

    @abc.abstractmethod
    def to_host(self, t: torch.Tensor):
        """Start copying ``t`` to host memory; returns (host tensor, event)."""
        ...

    @abc.abstractmethod
    def to_device(self, host: torch.Tensor, after):
        """Start copying ``host`` back (after the event ``after``); returns (device tensor, event)."""
        ...

    @abc.abstractmethod
    def use(self, t: torch.Tensor, event) -> float:
        """Make the compute stream wait for ``event`` before using ``t``; returns the seconds the
        host waited (0 where the wait is the device's, counted by ``late_waits``)."""
        ...

    def late_waits(self):
        """(seconds, copies): device-side waits on late copies measured since the last call."""
        return 0.0, 0

    def copied(self, event) -> bool:
        """Whether the copy behind ``event`` (from ``to_host``) is done, without waiting.  Until then
        the tensor it copies still holds its device memory (CUDA: ``record_stream``), though the
        allocator no longer counts it as allocated."""
        return True

    @abc.abstractmethod
    def bandwidth(self) -> float:
        ...

    @abc.abstractmethod
    def allocated(self) -> int:
        ...

    @abc.abstractmethod
    def peak(self) -> int:
        ...

    @abc.abstractmethod
    def capacity(self) -> int:
        """The device bytes this process may use (the budget of limit 0)."""

    def timer(self):
        """A callable returning (start mark, function that turns the mark into elapsed seconds later)."""
        t0 = time.perf_counter()
        return lambda: time.perf_counter() - t0

    def synchronize(self) -> None:
        pass


class CudaTransfer(Transfer):
    name = "cuda"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.out_stream = torch.cuda.Stream(device)
        self.in_stream = torch.cuda.Stream(device)
        self._late: list = []

    def to_host(self, t):
        t = t.detach()                     # the copy must not join the graph (nor keep t alive through it)
        compute = torch.cuda.current_stream(self.device)
        self.out_stream.wait_stream(compute)
        with torch.cuda.stream(self.out_stream):
            host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=True)
            host.copy_(t, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.out_stream)
        t.record_stream(self.out_stream)   # its memory is reused only after the copy
        return host, done

    def to_device(self, host, after):
        self.in_stream.wait_event(after)
        with torch.cuda.stream(self.in_stream):
            dev = torch.empty(host.size(), dtype=host.dtype, device=self.device)
            dev.copy_(host, non_blocking=True)
            done = torch.cuda.Event(enable_timing=True)
            done.record(self.in_stream)
        return dev, done

    def copied(self, event) -> bool:
        return event.query()

    def use(self, t, event) -> float:
        compute = torch.cuda.current_stream(self.device)
        if not event.query():               # late: the compute stream will wait; time it on the device
            mark = torch.cuda.Event(enable_timing=True)
            mark.record(compute)
            self._late.append((mark, event))
        compute.wait_event(event)           # no host wait: kernels behind it stay queued
        t.record_stream(compute)
        return 0.0

    def late_waits(self):
        """The waits whose events are done (never blocks the host)."""
        seconds, n, pending = 0.0, 0, []
        for mark, done in self._late:
            if mark.query() and done.query():
                seconds += max(0.0, mark.elapsed_time(done)) / 1e3
                n += 1
            else:
                pending.append((mark, done))
        self._late = pending
        return seconds, n

    def bandwidth(self) -> float:
        key = ("cuda", self.device.index)
        if key not in _measured_bandwidth:
            n = BANDWIDTH_PROBE_BYTES // 4
            dev = torch.empty(n, device=self.device)
            host = torch.empty(n, pin_memory=True)
            host.copy_(dev)
            torch.cuda.synchronize(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(2):
                host.copy_(dev, non_blocking=True)
                dev.copy_(host, non_blocking=True)
            end.record()
            end.synchronize()
            _measured_bandwidth[key] = 4 * BANDWIDTH_PROBE_BYTES / (start.elapsed_time(end) / 1e3)
        return _measured_bandwidth[key]

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def capacity(self) -> int:
        """All this process may use: the cap of set_per_process_memory_fraction where one is set,
        else the device shared out among the ranks ddlrun laid out on it (--ranks-per-gpu)."""
        total = torch.cuda.get_device_properties(self.device).total_memory
        fraction = torch.cuda.get_per_process_memory_fraction(self.device)
        if fraction < 1.0:
            return int(total * fraction)
        return total // sharing_ranks(os.environ)

    def timer(self):
        start = torch.cuda.Event(enable_timing=True)
        start.record()

        def elapsed():
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return elapsed

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


class _Worker:
    """One side "stream" on CPU: a thread that runs its queued work in order."""

    def __init__(self, name: str) -> None:
        self.q: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.q.get()
            if job is None:
                return
            job()

    def submit(self, job: Callable[[], None]) -> threading.Event:
        done = threading.Event()

        def run():
            job()
            done.set()
        self.q.put(run)
        return done


class HostStandIn(Transfer):
    """CPU tensors stand in for the device (CI).  ``capacity``: the "device" size in bytes.
    Device bytes are counted as the session reports them (``account``); ``log`` records every
    copy as ('out'|'in', id) in the order the side streams ran them."""
    name = "host stand-in"

    def __init__(self, capacity: int = 1 << 30, bandwidth_Bps: float = 1e10,
                 copy_Bps: Optional[float] = None) -> None:
        self._capacity = capacity
        self._bandwidth = bandwidth_Bps     # what bandwidth() reports (the planner's figure)
        self._copy_Bps = copy_Bps           # how fast copies really go (None: as fast as memcpy)
        self.out_worker = _Worker("lms-out")
        self.in_worker = _Worker("lms-in")
        self.log: List[Tuple[str, int]] = []
        self._lock = threading.Lock()
        self.resident = 0       # "device" bytes the session holds for saved tensors
        self.base = 0           # weights, grads, optimizer state (set by the session)
        self._peak = 0
        self._count = 0
        self._keys = {}

    def account(self, delta: int) -> None:
        with self._lock:
            self.resident += delta
            self._peak = max(self._peak, self.base + self.resident)

    def to_host(self, t):
        t = t.detach()                     # the worker thread has grad mode on: keep the copy out of the graph
        host = torch.empty_like(t, memory_format=torch.contiguous_format)
        with self._lock:
            self._count += 1
            key = self._keys[id(host)] = self._count   # ids repeat once a copy is freed: number them

        def copy():
            self._throttle(t.nbytes)
            host.copy_(t)
            with self._lock:
                self.log.append(("out", key))
        return host, self.out_worker.submit(copy)

    def to_device(self, host, after):
        dev = torch.empty_like(host)
        key = self._keys[id(host)]

        def copy():
            after.wait()          # ordered after its copy out, as on a CUDA stream
            self._throttle(host.nbytes)
            dev.copy_(host)
            with self._lock:
                self.log.append(("in", key))
        return dev, self.in_worker.submit(copy)

    def _throttle(self, nbytes: int) -> None:
        if self._copy_Bps:
            time.sleep(nbytes / self._copy_Bps)

    def use(self, t, event) -> float:
        if event.is_set():
            return 0.0
        t0 = time.perf_counter()
        event.wait()
        return time.perf_counter() - t0

    def bandwidth(self) -> float:
        return self._bandwidth

    def allocated(self) -> int:
        return self.base + self.resident

    def peak(self) -> int:
        return self._peak

    def capacity(self) -> int:
        return self._capacity

    def synchronize(self) -> None:
        for w in (self.out_worker, self.in_worker):
            w.submit(lambda: None).wait()
