"""The stall inspector and exit announcements, over a side-channel communicator.

Every collective waits by polling (never a blocking MPI wait), and the waiting loop calls
`Watchdog.check`.  The side channel is a duplicate of COMM_WORLD carrying small pickled
point-to-point messages, all on one tag so MPI's per-sender ordering holds:

* census: a rank that has waited `DDL_STALL_WARNING_S` asks every other rank where it is.
  A rank answers only from inside a ddl_runtime wait, so ranks busy elsewhere (computing,
  hung, dead) stay silent: they are the ones that have not arrived.  After a short grace
  period the lowest-numbered waiting rank logs who arrived, who is waiting in a different
  collective, and who is silent.  After `DDL_STALL_SHUTDOWN_S` the rank aborts the job.
* exit: a rank that finalizes (explicitly or at interpreter exit) tells every rank how
  many collectives it finished.  A rank waiting in a collective that the exiting rank
  never joined aborts at once instead of waiting forever.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from mpi4py import MPI

from .log import log

TAG = 7177
POLL_INTERVAL_S = 0.005


@dataclass
class Census:
    ident: int
    seq: int
    what: str
    deadline: float
    replies: Dict[int, Tuple[int, str]] = field(default_factory=dict)
    reported: bool = False


class Watchdog:
    def __init__(self, comm: MPI.Comm, warning_s: float, shutdown_s: Optional[float], abort):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.warning_s = warning_s
        self.shutdown_s = shutdown_s
        self.abort = abort  # callable(message) -> never returns
        self.seq = 0  # collectives this rank has entered (finalize waits for them to finish)
        self.what = ""
        self.exited: Dict[int, int] = {}
        self.census: Optional[Census] = None
        self._census_counter = 0
        self._sends: List[MPI.Request] = []
        self._next_poll = 0.0
        self.closed = False

    # -- bookkeeping by the runtime -------------------------------------------------------
    def start(self, what: str) -> int:
        self.seq += 1
        self.what = what
        self.census = None
        return self.seq

    # -- called from every waiting loop ---------------------------------------------------
    def check(self, waited: float, now: float) -> None:
        if self.closed or self.size == 1:
            return
        if now >= self._next_poll:
            self._next_poll = now + POLL_INTERVAL_S
            self.poll(answer=True)
            for rank, finished in self.exited.items():
                if finished < self.seq:
                    self.abort(
                        f"rank {rank} left (finalize or exit) after {finished} collectives while this rank waits in "
                        f"{self.what} (collective #{self.seq}); rank {rank} will never join it"
                    )
        threshold = self.warning_s if self.shutdown_s is None else min(self.warning_s, self.shutdown_s)
        if waited >= threshold and self.census is None:
            self._start_census(now)
        census = self.census
        if census is not None and not census.reported and now >= census.deadline:
            census.reported = True
            if self._lowest_waiting(census):
                log(f"stall: {self._report(census, waited)}")
        if self.shutdown_s is not None and waited >= self.shutdown_s:
            summary = self._report(census, waited) if census else f"{self.what} waited {waited:.1f} s"
            self.abort(f"stall: aborting after DDL_STALL_SHUTDOWN_S={self.shutdown_s:g}: {summary}")

    def poll(self, answer: bool) -> None:
        comm = self.comm
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG):
            message = comm.recv(source=MPI.ANY_SOURCE, tag=TAG)
            kind, sender = message[0], message[1]
            if kind == "census?":
                if answer:
                    self._send(sender, ("census!", self.rank, message[2], self.seq, self.what))
            elif kind == "census!":
                census = self.census
                if census is not None and message[2] == census.ident:
                    census.replies[sender] = (message[3], message[4])
            elif kind == "exit":
                self.exited[sender] = message[2]
        if self._sends:
            self._sends = [r for r in self._sends if not r.Test()]

    # -- finalize -------------------------------------------------------------------------
    def announce_exit(self) -> None:
        for dest in range(self.size):
            if dest != self.rank:
                self._send(dest, ("exit", self.rank, self.seq))

    def wait_for_exits(self, timeout_s: float) -> List[int]:
        """Wait until every rank announced its exit; return the ranks still missing at timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll(answer=False)
            missing = [r for r in range(self.size) if r != self.rank and r not in self.exited]
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        MPI.Request.Waitall(self._sends)
        self._sends = []
        self.closed = True
        return missing

    # -- internals ------------------------------------------------------------------------
    def _send(self, dest: int, message: tuple) -> None:
        self._sends.append(self.comm.isend(message, dest=dest, tag=TAG))

    def _start_census(self, now: float) -> None:
        self._census_counter += 1
        ident = self._census_counter * self.size + self.rank
        grace = min(2.0, max(0.2, self.warning_s / 4))
        self.census = Census(ident, self.seq, self.what, now + grace)
        self.census.replies[self.rank] = (self.seq, self.what)
        for dest in range(self.size):
            if dest != self.rank:
                self._send(dest, ("census?", self.rank, ident))

    def _lowest_waiting(self, census: Census) -> bool:
        same = [r for r, state in census.replies.items() if state == (census.seq, census.what)]
        return min(same) == self.rank

    def _report(self, census: Census, waited: float) -> str:
        here = sorted(r for r, s in census.replies.items() if s == (census.seq, census.what))
        elsewhere = sorted((r, s) for r, s in census.replies.items() if s != (census.seq, census.what))
        silent = [r for r in range(self.size) if r not in census.replies]
        parts = [f"{census.what} (collective #{census.seq}) has waited {waited:.1f} s",
                 f"not arrived: {_list(silent) if silent else 'none'}",
                 f"waiting in it: {_list(here)}"]
        if elsewhere:
            parts.append("elsewhere: " + ", ".join(f"rank {r} in {w} (#{s})" for r, (s, w) in elsewhere))
        exited = sorted(self.exited)
        if exited:
            parts.append(f"finalized: {_list(exited)}")
        return "; ".join(parts)


def _list(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))
