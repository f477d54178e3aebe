"""The CPU stand-in for ipc.py's CUDA backend: what CI runs the IPC transport's logic with.

  * IPC-mapped device memory -> POSIX shared memory: `alloc` makes a segment, `export` gives its
    name (the handle), `open` maps a peer's segment by name;
  * the caller's CUDA stream -> a worker thread that runs the device work in the order issued
    (so a call returns before its work ran, as on a GPU); `delay_s` holds back each piece of work,
    so a missing event wait would read a peer's slot before it was written;
  * interprocess CUDA events -> counters in their owner's shared memory: `record(ev, g)` has the
    stream set it to g, `wait_event(ev, g)` has the stream spin until it reached g (checking
    the peers, so a dead owner is an error, not a spin for ever).
"""
from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import numpy as np


@dataclass
class _ShmEvent:
    """The stand-in's event: a counter in its owner's shared memory (record sets it to g)."""

    words: np.ndarray
    index: int
    owner_pid: int
    keep: Any = None


class StandInBackend:
    """The CPU stand-in: POSIX shared memory for IPC-mapped device memory, a worker thread for the
    stream, shared-memory counters for interprocess events.  `delay_s` holds back each piece of
    device work (tests: a missing wait then reads a peer's slot before it was written)."""

    def __init__(self, delay_s: float = 0.0):
        import torch
        self.torch = torch
        self.delay_s = delay_s
        self.segments: list = []
        self._events = self._segment(8 * 64)
        self._event_words = np.ndarray((64,), dtype=np.int64, buffer=self._events.buf)
        self._event_words[:] = 0
        self._next_event = 0
        self._queue: "queue.Queue" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._worker = threading.Thread(target=self._run, name="ddl-ipc-standin-stream", daemon=True)
        self._worker.start()
        self.opened: List[str] = []  # segment names opened (the tests count handle exchanges)

    def _segment(self, nbytes: int, name: Optional[str] = None):
        from multiprocessing import resource_tracker, shared_memory
        seg = shared_memory.SharedMemory(name=name, create=name is None, size=nbytes if name is None else 0)
        try:  # this code unlinks its own segments; the tracker would unlink peers' ones at exit
            resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - bookkeeping only
            pass
        if name is None:
            self.segments.append(seg)
        return seg

    def alloc(self, nbytes: int):
        seg = self._segment(max(nbytes, 1))
        return self.torch.frombuffer(seg.buf, dtype=self.torch.uint8, count=nbytes) if nbytes else \
            self.torch.empty(0, dtype=self.torch.uint8)

    def export(self, buf) -> Any:
        seg = next(s for s in reversed(self.segments) if _same_memory(s, buf))
        return (seg.name, buf.numel())

    def open(self, handle: Any):
        name, nbytes = handle
        seg = self._segment(0, name)
        self.opened.append(name)
        tensor = self.torch.frombuffer(seg.buf, dtype=self.torch.uint8, count=nbytes) if nbytes else \
            self.torch.empty(0, dtype=self.torch.uint8)
        tensor._ddl_segment = seg  # type: ignore[attr-defined]  (kept mapped while the view lives)
        return tensor

    def release(self, buf) -> None:
        for seg in list(self.segments):
            if _same_memory(seg, buf):
                self.segments.remove(seg)
                _unlink(seg)

    def new_event(self):
        index = self._next_event
        self._next_event += 1
        return _ShmEvent(self._event_words, index, os.getpid())

    def export_event(self, event) -> Any:
        return (self._events.name, event.index, event.owner_pid)

    def open_event(self, handle: Any):
        name, index, pid = handle
        seg = self._segment(0, name)
        return _ShmEvent(np.ndarray((64,), dtype=np.int64, buffer=seg.buf), index, pid, seg)

    def launch(self, work: Callable[[], None]) -> None:
        self._queue.put(work)

    def record(self, event, g: int) -> None:
        def work():
            event.words[event.index] = g
        self._queue.put(work)

    def wait_event(self, event, g: int, check: Callable[[], None]) -> None:
        def work():
            spins = 0
            while event.words[event.index] < g:
                spins += 1
                if spins % 64 == 0:
                    check()
                time.sleep(0.0001)
        self._queue.put(work)

    def settle(self, check: Callable[[], None]) -> None:
        self.synchronize(check)

    def settled(self) -> bool:
        return not self._queue.unfinished_tasks

    def synchronize(self, check: Callable[[], None]) -> None:
        spins = 0
        while self._queue.unfinished_tasks:
            spins += 1
            if spins % 64 == 0:
                check()
            time.sleep(0.0001)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            try:
                if self._error is None:  # after a failure the stream only drains
                    if self.delay_s:
                        time.sleep(self.delay_s)
                    work()
            except BaseException as exc:  # noqa: BLE001 - reported at the next synchronize
                self._error = exc
            finally:
                self._queue.task_done()

    def close(self) -> None:
        for seg in self.segments + [self._events]:
            _unlink(seg)
        self.segments = []


def _same_memory(seg, buf) -> bool:
    return buf.numel() == 0 or buf.data_ptr() == np.frombuffer(seg.buf, dtype=np.uint8, count=1).ctypes.data


def _unlink(seg) -> None:
    """Remove a segment's name (untracked: seg.unlink() would tell the resource tracker again)."""
    try:
        import _posixshmem
        _posixshmem.shm_unlink(seg._name)
    except (FileNotFoundError, OSError, ImportError):
        pass
