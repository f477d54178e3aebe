"""What a job's records say: step time, the share of a step spent in communication, how long each
rank waited for the last one to arrive, and the stragglers (ranks whose compute is an outlier),
named with their node.

Every rank counts the time it spends inside collectives as communication, wherever that is
(gradient hooks, step(), synchronize(), Horovod's and Keras' paths); its compute is the rest of
a step, its own work.  The wait for the last rank is what the ranks measured themselves from
their arrival times (ddl_runtime/core/stats.py; one int64 on each agreement): the mean over the
steps every rank kept one by one (the runtime's ring, the last 1,024), else over the run.  A
record without it (format 1, or a program that used only Horovod's negotiated collectives) has
it inferred per kept step: this rank's time in collectives minus the least any rank spent in
them that step (the last rank to arrive waits for no one); so is a step in which no agreement
carried the arrivals (its ring holds NaN there).

A straggler's compute is more than `STRAGGLER_PCT` % above the median of the *other* ranks'
compute and more than `STRAGGLER_MADS` of their median absolute deviations above it: one rule
from 2 ranks (the slower one, when it exceeds the other by the threshold) to 10,000.  How long
the others waited for it is the mean, over the other ranks, of its compute minus theirs, no more
than what they waited.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from .records import JobRecords, RankRecord

STRAGGLER_PCT = 10.0
STRAGGLER_MADS = 3.0


@dataclass
class RankRow:
    rank: int
    node: str
    step_ms: Optional[float]
    compute_ms: Optional[float]        # its own work: the step less its time in collectives
    comm_ms: Optional[float]           # in collectives (transfer + wait for the last rank)
    wait_ms: Optional[float]           # of which: waiting for the last rank to arrive
    steps: int
    status: str


@dataclass
class Straggler:
    rank: int
    node: str
    compute_ms: float
    others_ms: float                   # the median of the other ranks' compute
    excess_pct: float                  # above it
    others_wait_ms: float              # per step, mean over the other ranks
    others_wait_s: float               # over the run (per step x timed steps)


@dataclass
class Analysis:
    records: JobRecords
    rows: List[RankRow]
    steps: int                         # the most steps a rank made
    step_ms: Optional[float]           # mean over ranks of their mean step (steps 2..n)
    comm_pct: Optional[float]          # of a step, in the step's collectives
    wait_pct: Optional[float]          # of a step, waiting for the last rank
    median_compute_ms: Optional[float]
    slowest: Optional[RankRow]
    slowest_pct: Optional[float]       # its compute above the median of the others'
    stragglers: List[Straggler] = field(default_factory=list)
    aligned_steps: int = 0             # steps every rank kept one by one
    wait_measured: bool = False        # the ranks measured their wait (else it is inferred)


def node_names(records: JobRecords) -> dict:
    """rank -> its node's name: the host where nodes have their own hosts; else (nodes emulated on
    one host) ``node <i> (<host>)``."""
    hosts_per_node = {}
    for r in records.ranks:
        hosts_per_node.setdefault(r.node_index, set()).add(r.host)
    distinct = len({h for hs in hosts_per_node.values() for h in hs})
    own_hosts = distinct == len(hosts_per_node) and all(len(hs) == 1 for hs in hosts_per_node.values())
    return {r.rank: (r.host if own_hosts else f"node {r.node_index} ({r.host})") for r in records.ranks}


def aligned_steps(ranks: List[RankRecord]):
    """(first step, compute, comm, wait or None): ranks x steps over the steps every rank kept
    (None: none in common).  wait: what the ranks measured (NaN where a step did not), when every
    rank's record has it."""
    kept = [r for r in ranks if len(r.compute)]
    if len(kept) != len(ranks) or not kept:
        return None
    lo = max(r.ring_first_step for r in kept)
    hi = min(r.ring_first_step + len(r.compute) for r in kept)
    lo = max(lo, 1)     # the first step (from the runtime's start: imports, model, warm-up) is not timed
    if hi <= lo:
        return None

    def cut(r: RankRecord, values: np.ndarray) -> np.ndarray:
        return values[lo - r.ring_first_step:hi - r.ring_first_step]

    compute = np.stack([cut(r, r.compute) for r in kept])
    comm = np.stack([cut(r, r.comm) for r in kept])
    wait = (np.stack([cut(r, r.wait) for r in kept])
            if all(r.wait is not None and len(r.wait) == len(r.compute) for r in kept) else None)
    return lo, compute, comm, wait


def others_median(values: np.ndarray) -> np.ndarray:
    """For each value, the median of all the others (n >= 2), in O(n log n)."""
    n = len(values)
    order = np.argsort(values, kind="stable")
    v = values[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    m = n - 1

    def at(j: int) -> np.ndarray:      # element j of the others, sorted: skip this value's own place
        return np.where(j < pos, v[j], v[min(j + 1, n - 1)])

    if m % 2:
        return at((m - 1) // 2)
    return 0.5 * (at(m // 2 - 1) + at(m // 2))


def find_stragglers(compute: np.ndarray):
    """(indices of the stragglers, each value's others' median, percent above it) by the rule above."""
    n = len(compute)
    if n < 2:
        return [], np.full(n, np.nan), np.zeros(n)
    med = others_median(compute)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(med > 0, 100.0 * (compute - med) / med, 0.0)
    out = []
    for i in np.nonzero(pct > STRAGGLER_PCT)[0]:
        others = np.delete(compute, i)
        mad = float(np.median(np.abs(others - med[i])))
        if compute[i] - med[i] > STRAGGLER_MADS * mad:
            out.append(int(i))
    return out, med, pct


def analyse(records: JobRecords) -> Analysis:
    ranks = records.ranks
    names = node_names(records)
    aligned = aligned_steps(ranks)
    compute_mean = wait_mean = None
    n_aligned = 0
    measured = len(ranks) == 1 or bool(ranks) and all(r.measured_wait for r in ranks)   # alone: no one to wait for
    if aligned is not None:
        _, compute, comm, wait = aligned
        n_aligned = compute.shape[1]
        compute_mean = compute.mean(axis=1)
        inferred = comm - comm.min(axis=0)    # the least time any rank spent in collectives is transfer
        if wait is None:
            wait = inferred
        elif np.isnan(wait).any():            # steps that measured nothing: inferred
            wait = np.where(np.isnan(wait), inferred, wait)
        else:
            measured = True
        wait_mean = wait.mean(axis=1)
    rows = []
    for i, r in enumerate(ranks):
        step, comm = r.mean_step_s, r.mean_comm_s
        comp = compute_mean[i] if compute_mean is not None else (step - comm if step is not None else None)
        wait = wait_mean[i] if wait_mean is not None else r.mean_wait_s
        rows.append(RankRow(r.rank, names[r.rank], _ms(step), _ms(comp), _ms(comm), _ms(wait), r.steps, r.status))
    timed = [r for r in rows if r.step_ms is not None]
    step_ms = float(np.mean([r.step_ms for r in timed])) if timed else None
    comm_pct = (100.0 * float(np.mean([r.comm_ms for r in timed])) / step_ms) if timed and step_ms else None
    wait_pct = (100.0 * float(np.mean([r.wait_ms for r in timed])) / step_ms
                if timed and step_ms and all(r.wait_ms is not None for r in timed) else None)
    have = [r for r in rows if r.compute_ms is not None]
    comps = np.array([r.compute_ms for r in have])
    median = float(np.median(comps)) if len(comps) else None
    slowest = slowest_pct = None
    stragglers: List[Straggler] = []
    if len(have) >= 2:
        found, others, pct = find_stragglers(comps)
        top = int(np.argmax(comps))
        slowest, slowest_pct = have[top], float(pct[top])
        timed_steps = max((r.timed_steps for r in ranks), default=0)
        waits = np.array([r.wait_ms if r.wait_ms is not None else np.inf for r in have])
        for i in found:
            behind = np.minimum(np.maximum(comps[i] - np.delete(comps, i), 0.0), np.delete(waits, i))
            per_step = float(behind.mean())
            row = have[i]
            stragglers.append(Straggler(row.rank, row.node, row.compute_ms, float(others[i]), float(pct[i]),
                                        per_step, per_step * timed_steps / 1e3))
        stragglers.sort(key=lambda s: -s.excess_pct)
    return Analysis(records, rows, max((r.steps for r in ranks), default=0), step_ms, comm_pct, wait_pct, median,
                    slowest, slowest_pct, stragglers, n_aligned, measured)


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else float(seconds) * 1e3


def one_line(a: Analysis) -> str:
    """``step 412 ms, 9 % waiting on communication, slowest rank 17 on node n3, +22 %`` (what the
    end of a job and ``wml status`` print)."""
    rec = a.records
    parts = []
    if a.step_ms is None:
        parts.append(f"{a.steps} step{'s' if a.steps != 1 else ''} recorded, too few to time"
                     if a.steps else "no training step recorded (no DistributedOptimizer.step() yet)")
    else:
        parts.append(f"{a.steps} steps, step {_fmt_ms(a.step_ms)}")
        if a.comm_pct is not None:
            wait = f" ({a.wait_pct:.0f} % waiting for the last rank)" if a.wait_pct is not None and len(rec.ranks) > 1 else ""
            parts.append(f"{a.comm_pct:.0f} % in communication{wait}")
        strag = a.stragglers[0] if a.stragglers else None
        if a.slowest is not None and len(rec.ranks) > 1:
            slowest = f"slowest rank {a.slowest.rank} on {a.slowest.node}, {a.slowest_pct:+.0f} %"
            if strag is not None and strag.rank == a.slowest.rank:
                slowest += f" (a straggler: the others wait {_fmt_ms(strag.others_wait_ms)} a step for it)"
                strag = None
            parts.append(slowest)
        if strag is not None:
            parts.append(f"straggler rank {strag.rank} on {strag.node}: the others wait "
                         f"{_fmt_ms(strag.others_wait_ms)} a step for it")
        if len(a.stragglers) > 1:
            parts.append(f"{len(a.stragglers)} stragglers")
    text = ", ".join(parts)
    return text + partial_note(rec)


def partial_note(rec: JobRecords) -> str:
    notes = []
    if rec.missing:
        notes.append(f"PARTIAL: no record from rank{'s' if len(rec.missing) > 1 else ''} {_ranges(rec.missing)} "
                     f"of {rec.size}")
    if rec.unreadable:
        notes.append(f"unreadable: {'; '.join(rec.unreadable[:3])}" + (" ..." if len(rec.unreadable) > 3 else ""))
    status = rec.status
    if status == "running":
        notes.append("as of the last periodic record (the job is running, or was killed before finalize)")
    elif status == "aborted":
        notes.append("the job aborted")
    elif status == "stopped":
        notes.append("stopped for the walltime")
    return ("; " + "; ".join(notes)) if notes else ""


def _fmt_ms(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms"


def _ranges(ranks: List[int]) -> str:
    out, start, prev = [], None, None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    text = ",".join(out[:20])
    return text + (f",... ({len(ranks)} ranks)" if len(out) > 20 else "")
