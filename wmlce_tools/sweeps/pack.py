"""Packing trials into one allocation: what one trial needs of it, and which nodes / GPUs /
cores each running trial holds.  Pure bookkeeping (the packed runner, ``packed.py``, starts
and reaps the trials); a 1-GPU trial holds one GPU of a node, not the node."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..errors import WmlError


@dataclass(frozen=True)
class Need:
    """One trial's share: ``nodes`` nodes; on each, ``gpus`` GPUs and ``cores`` cores (a trial
    of several nodes, or one using a whole node, holds its nodes whole)."""

    nodes: int
    gpus: int
    cores: int
    whole: bool

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "gpus": self.gpus, "cores": self.cores, "whole": self.whole}


@dataclass(frozen=True)
class Allocation:
    nodes: int
    gpus_per_node: int
    cores_per_node: int

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "cores_per_node": self.cores_per_node}


@dataclass(frozen=True)
class Placement:
    nodes: Tuple[int, ...]
    gpus: Tuple[int, ...]        # GPU ids on each of its nodes (the same on each)
    cores: int

    def as_dict(self) -> dict:
        return {"nodes": list(self.nodes), "gpus": list(self.gpus), "cores": self.cores}


def need_of(layout, alloc: Allocation, oversubscribe: bool = False) -> Need:
    """What a trial with ``layout`` holds of ``alloc``'s nodes (``oversubscribe``: the local
    site's emulated nodes, where a trial wanting more cores than a node has takes the node)."""
    gpus = layout.gpus_per_node
    cores = layout.ranks_per_node * layout.cores_per_rank // max(1, layout.ranks_per_core)
    if oversubscribe:
        cores = min(cores, alloc.cores_per_node)
    whole = layout.nodes > 1 or (alloc.gpus_per_node and gpus >= alloc.gpus_per_node) \
        or (not gpus and cores >= alloc.cores_per_node)
    return Need(layout.nodes, gpus, cores, bool(whole))


def per_allocation(need: Need, alloc: Allocation) -> int:
    """How many such trials the allocation runs at once (0: not even one)."""
    if need.nodes > alloc.nodes:
        return 0
    if need.whole:
        return alloc.nodes // need.nodes
    by_gpu = alloc.gpus_per_node // need.gpus if need.gpus else None
    by_core = alloc.cores_per_node // need.cores if need.cores else None
    per_node = min(x for x in (by_gpu, by_core) if x is not None) if (by_gpu or by_core) is not None else 1
    return alloc.nodes * per_node


def check_fits(need: Need, alloc: Allocation, what: str) -> int:
    n = per_allocation(need, alloc)
    if n < 1:
        if need.nodes > alloc.nodes:
            raise WmlError(f"a trial needs {need.nodes} nodes but {what} has {alloc.nodes}: give --pack {need.nodes} or more")
        raise WmlError(f"a trial needs {need.gpus} GPU(s) and {need.cores} core(s) of a node, but a node of {what} "
                       f"has {alloc.gpus_per_node} GPU(s) and {alloc.cores_per_node} core(s)")
    return n


class Slots:
    """The free part of each node while trials run."""

    def __init__(self, alloc: Allocation) -> None:
        self.alloc = alloc
        self.free_gpus: List[List[int]] = [list(range(alloc.gpus_per_node)) for _ in range(alloc.nodes)]
        self.free_cores: List[int] = [alloc.cores_per_node] * alloc.nodes
        self.held: Dict[int, Placement] = {}

    def _untouched(self, n: int) -> bool:
        return self.free_cores[n] == self.alloc.cores_per_node and len(self.free_gpus[n]) == self.alloc.gpus_per_node

    def take(self, trial: int, need: Need) -> Optional[Placement]:
        if need.whole:
            free = [n for n in range(self.alloc.nodes) if self._untouched(n)]
            if len(free) < need.nodes:
                return None
            nodes = tuple(free[:need.nodes])
            for n in nodes:
                self.free_cores[n] = 0
                self.free_gpus[n] = []
            p = Placement(nodes, tuple(range(self.alloc.gpus_per_node)), self.alloc.cores_per_node)
        else:
            for n in range(self.alloc.nodes):
                if len(self.free_gpus[n]) >= need.gpus and self.free_cores[n] >= max(need.cores, 1 if not need.gpus else 0):
                    gpus = tuple(self.free_gpus[n][:need.gpus])
                    self.free_gpus[n] = self.free_gpus[n][need.gpus:]
                    self.free_cores[n] -= need.cores
                    p = Placement((n,), gpus, need.cores)
                    break
            else:
                return None
        self.held[trial] = p
        return p

    def release(self, trial: int) -> None:
        p = self.held.pop(trial)
        for n in p.nodes:
            if len(p.nodes) > 1 or p.cores == self.alloc.cores_per_node and len(p.gpus) == self.alloc.gpus_per_node:
                self.free_cores[n] = self.alloc.cores_per_node
                self.free_gpus[n] = list(range(self.alloc.gpus_per_node))
            else:
                self.free_cores[n] += p.cores
                self.free_gpus[n] = sorted(self.free_gpus[n] + list(p.gpus))
