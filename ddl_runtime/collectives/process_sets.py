"""Process sets: subsets of the job's ranks with their own negotiated collectives.

Set 0 is every rank.  `add(ranks)` and `remove(id)` are collective over the whole job
(every rank calls them, in the same order, as Horovod requires); a rank outside a set gets
no communicator for it and a clear error when it tries to use it.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from mpi4py import MPI

from ..state import runtime as _rt
from ..errors import DDLError, DDLInputError
from .negotiated import NegotiatedShm
from .negotiation import Controller


class Registry:
    def __init__(self, rt: "_rt.Runtime"):
        self.rt = rt
        self.world = rt.world.Dup()  # process-set creation never interleaves with other traffic
        self.ranks: Dict[int, List[int]] = {0: list(range(rt.size))}
        self.controllers: Dict[int, Controller] = {0: self._controller(self.world, list(range(rt.size)), 0)}
        if rt.shm is not None:  # one host: the global set's allreduces get shared memory of their own
            self.controllers[0].shm = NegotiatedShm(rt, self.controllers[0])
        self._busy = False
        self._hook(self.progress_from_native_wait)
        self.next_id = 1

    def _controller(self, comm: MPI.Comm, ranks: List[int], set_id: int) -> Controller:
        env = self.rt.env
        ctl = Controller(comm, ranks, self.rt.fusion_bytes, env.stall_warning_s, env.stall_shutdown_s,
                         self.rt.timeline, set_id, env.response_cache)
        ctl.progress_all = self.progress
        ctl.departed = self._departed
        return ctl

    def _departed(self):
        """Ranks whose exit the runtime's watchdog has heard of (it polls itself when it has no thread)."""
        watchdog = self.rt.watchdog
        if not watchdog.threaded and not watchdog.closed:
            watchdog.poll(answer=True)
        return list(watchdog.exited)

    def controller(self, set_id: int) -> Controller:
        ctl = self.controllers.get(set_id)
        if ctl is None:
            ranks = self.ranks.get(set_id)
            if ranks is None:
                raise DDLInputError(f"process set {set_id} does not exist (removed, or never added)")
            raise DDLInputError(f"rank {self.rt.rank} is not in process set {set_id} (ranks {ranks})")
        return ctl

    def find(self, ranks: Sequence[int]) -> Optional[int]:
        for set_id, members in self.ranks.items():
            if members == list(ranks):
                return set_id
        return None

    def add(self, ranks: Sequence[int]) -> int:
        given = [int(r) for r in ranks]
        ranks = sorted(set(given))
        if len(ranks) != len(given):
            twice = sorted(r for r in ranks if given.count(r) > 1)
            raise DDLInputError(f"process set ranks {given}: rank(s) {twice} listed more than once")
        bad = [r for r in ranks if not 0 <= r < self.rt.size]
        if not ranks or bad:
            raise DDLInputError(f"process set ranks {ranks}: every rank must be in 0..{self.rt.size - 1}")
        # Every rank must pass the same ranks: agree first, so no rank is left inside Split.
        everyone = self.world.allgather(ranks)
        if any(r != ranks for r in everyone):
            sides = "; ".join(f"rank {i}: {r}" for i, r in enumerate(everyone))
            raise DDLError(f"add_process_set: ranks pass different rank lists: {sides}")
        if self.find(ranks) is not None:
            raise DDLInputError(f"a process set with ranks {ranks} exists already")
        set_id = self.next_id
        self.next_id += 1
        member = self.rt.rank in ranks
        comm = self.world.Split(0 if member else MPI.UNDEFINED, self.rt.rank)
        self.ranks[set_id] = ranks
        if member:
            self.controllers[set_id] = self._controller(comm, ranks, set_id)
            comm.Free()
        return set_id

    def remove(self, set_id: int) -> None:
        if set_id == 0:
            raise DDLInputError("the global process set (id 0) cannot be removed")
        if set_id not in self.ranks:
            raise DDLInputError(f"process set {set_id} does not exist")
        self.world.Barrier()
        ctl = self.controllers.pop(set_id, None)
        del self.ranks[set_id]
        if ctl is not None:
            ctl.close()

    def progress(self) -> None:
        for ctl in list(self.controllers.values()):
            ctl.progress()

    def progress_from_native_wait(self) -> None:
        """Called while a native collective waits: negotiated requests of this rank keep moving.

        Ranks run native collectives in program order but negotiated ones whenever they notice
        them ready; a peer may be waiting in a negotiated transfer (or shared-memory barrier) for
        this rank while this rank waits in a native one for the peer, so native waits must run
        this rank's part (never blocking on another thread of this rank that is doing it)."""
        if self._busy:
            return
        self._busy = True
        try:
            for ctl in list(self.controllers.values()):
                if ctl.local and not ctl.closed and ctl.lock.acquire(blocking=False):
                    try:
                        ctl.progress()
                    finally:
                        ctl.lock.release()
        finally:
            self._busy = False

    def _hook(self, idle) -> None:
        """Install (or, with None, remove) the native waits' idle call."""
        self.rt.engine.idle = idle
        if self.rt.shm is not None:
            self.rt.shm.idle = idle

    def close(self) -> None:
        self._hook(None)
        for ctl in self.controllers.values():
            if ctl.shm is not None:
                ctl.shm.close()
            ctl.close()
        self.controllers.clear()
        self.world.Free()


_registry: Optional[Registry] = None


def registry() -> Registry:
    """The job's process sets (created on first use, after ddl_runtime.init())."""
    global _registry
    rt = _rt.current()
    if _registry is None or _registry.rt is not rt:
        _registry = Registry(rt)
    return _registry


def reset() -> None:
    global _registry
    if _registry is not None:
        _registry.close()
        _registry = None
