"""The stall inspector and exit announcements, over a side-channel communicator.

A watchdog thread (MPI_THREAD_MULTIPLE) wakes every few milliseconds while the main thread
waits inside MPI; with a lower thread level the engine polls and calls `check` itself.
The side channel is a duplicate of COMM_WORLD that only the watchdog uses, carrying small
pickled point-to-point messages on one tag (so MPI's per-sender ordering holds):

* census: a rank whose main thread has waited `DDL_STALL_WARNING_S` in a collective asks
  every other rank where it is.  Each answers with its collective number, the collective's
  description and whether it is waiting in it.  After a short grace period the
  lowest-numbered waiting rank logs one line: who waits in this collective, who has not
  arrived (busy outside ddl_runtime, or silent: hung hard or dead), who waits elsewhere.
  After `DDL_STALL_SHUTDOWN_S` the rank aborts the job.
* exit: a rank that finalizes (explicitly or at interpreter exit) tells every rank how many
  collectives it entered.  A rank waiting in a later collective aborts at once instead of
  waiting for a rank that will never come.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from mpi4py import MPI

from .log import log

TAG = 7177
POLL_INTERVAL_S = 0.02  # stall and exit checks need no finer grain; fewer wake-ups, less lock traffic
WAIT_MARK_S = 1.0  # a wait this long is told to `on_wait` (the heartbeat: this rank waits for a peer)

State = Tuple[int, str, bool]  # (collective number, description, waiting in it)


@dataclass
class Census:
    ident: int
    seq: int
    what: str
    deadline: float
    replies: Dict[int, State] = field(default_factory=dict)
    reported: bool = False


class Watchdog:
    def __init__(self, comm: MPI.Comm, warning_s: float, shutdown_s: Optional[float], abort):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.warning_s = warning_s
        self.shutdown_s = shutdown_s
        self.abort = abort  # callable(message) -> never returns
        self.seq = 0  # collectives this rank has entered
        self.what = ""
        self.waiting_since: Optional[float] = None  # main thread blocked in the current collective since
        self.exited: Dict[int, int] = {}
        self.census: Optional[Census] = None
        self._census_counter = 0
        self._census_for: Optional[float] = None  # the wait the current census is about
        self._sends: List[MPI.Request] = []
        self._next_poll = 0.0
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.closed = False
        self.on_wait: Optional[Callable[[str], None]] = None   # called once per wait longer than WAIT_MARK_S
        self._marked: Optional[float] = None

    # -- bookkeeping by the main thread ---------------------------------------------------
    def start(self, what: str) -> int:
        self.what = what
        self.seq += 1
        return self.seq

    def start_thread(self) -> None:
        if self.size > 1:
            self._thread = threading.Thread(target=self._run, name="ddl_runtime-watchdog", daemon=True)
            self._thread.start()

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        while not self._stop.wait(POLL_INTERVAL_S):
            try:
                self.check(time.perf_counter())
            except Exception as exc:  # noqa: BLE001 - report, never take the job down silently
                log(f"watchdog stopped: {type(exc).__name__}: {exc}")
                return

    def stop_thread(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    # -- the check (watchdog thread, or the main thread's polling loop) -------------------
    def check(self, now: float) -> None:
        if self.closed or self.size == 1:
            return
        if not self.threaded:
            if now < self._next_poll:
                return
            self._next_poll = now + POLL_INTERVAL_S
        self.poll(answer=True)
        since = self.waiting_since
        if since is None:
            return
        seq, what = self.seq, self.what
        if self.on_wait is not None and self._marked != since and now - since >= WAIT_MARK_S:
            self._marked = since
            self.on_wait(what)
        for rank, entered in self.exited.items():
            if entered < seq:
                self.abort(f"rank {rank} left (finalize or exit) after {entered} collectives while this rank "
                           f"waits in {what} (collective #{seq}); rank {rank} will never join it")
        waited = now - since
        threshold = self.warning_s if self.shutdown_s is None else min(self.warning_s, self.shutdown_s)
        if waited >= threshold and self._census_for != since:
            self._census_for = since
            self._start_census(now, seq, what)
        census = self.census
        if census is not None and self._census_for == since and not census.reported and now >= census.deadline:
            census.reported = True
            if self._lowest_waiting(census):
                log(f"stall: {self._report(census, waited)}")
        if self.shutdown_s is not None and waited >= self.shutdown_s:
            summary = self._report(census, waited) if census is not None and self._census_for == since \
                else f"{what} (collective #{seq}) has waited {waited:.1f} s"
            self.abort(f"stall: aborting after DDL_STALL_SHUTDOWN_S={self.shutdown_s:g}: {summary}")

    def poll(self, answer: bool) -> None:
        comm = self.comm
        while True:
            matched = comm.improbe(source=MPI.ANY_SOURCE, tag=TAG)
            if matched is None:
                break
            message = matched.recv()
            kind, sender = message[0], message[1]
            if kind == "census?":
                if answer:
                    state = (self.seq, self.what, self.waiting_since is not None)
                    self._send(sender, ("census!", self.rank, message[2], state))
            elif kind == "census!":
                census = self.census
                if census is not None and message[2] == census.ident:
                    census.replies[sender] = tuple(message[3])
            elif kind == "exit":
                self.exited[sender] = message[2]
        if self._sends:
            self._sends = [r for r in self._sends if not r.Test()]

    # -- finalize (main thread, after stop_thread) ----------------------------------------
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

    def _start_census(self, now: float, seq: int, what: str) -> None:
        self._census_counter += 1
        ident = self._census_counter * self.size + self.rank
        grace = min(2.0, max(0.2, self.warning_s / 4))
        self.census = Census(ident, seq, what, now + grace)
        self.census.replies[self.rank] = (seq, what, True)
        for dest in range(self.size):
            if dest != self.rank:
                self._send(dest, ("census?", self.rank, ident))

    def _lowest_waiting(self, census: Census) -> bool:
        same = [r for r, state in census.replies.items() if state == (census.seq, census.what, True)]
        return min(same) == self.rank

    def _report(self, census: Census, waited: float) -> str:
        mine = (census.seq, census.what, True)
        here = sorted(r for r, s in census.replies.items() if s == mine)
        busy = sorted((r, s) for r, s in census.replies.items() if not s[2])
        elsewhere = sorted((r, s) for r, s in census.replies.items() if s[2] and s != mine)
        silent = [r for r in range(self.size) if r not in census.replies and r not in self.exited]
        missing = [f"rank {r} (busy outside ddl_runtime after collective #{s[0]})" for r, s in busy]
        missing += [f"rank {r} (silent: hung or dead)" for r in silent]
        parts = [f"{census.what} (collective #{census.seq}) has waited {waited:.1f} s",
                 "not arrived: " + (", ".join(missing) if missing else "none"),
                 f"waiting in it: {_list(here)}"]
        if elsewhere:
            parts.append("waiting elsewhere: " + ", ".join(f"rank {r} in {s[1]} (#{s[0]})" for r, s in elsewhere))
        if self.exited:
            parts.append(f"finalized: {_list(sorted(self.exited))}")
        return "; ".join(parts)


def _list(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))
