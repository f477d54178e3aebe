"""Layout: where every rank runs.  Computed once from (SiteProfile, ResourceRequest) and used
for the scheduler directives, the launcher line and ``ddlrun``'s per-rank environment, so
they can never disagree.

Placement rules (what jsrun/srun/aprun do with the same numbers):
- ranks are numbered node by node: rank = node * ranks_per_node + local_rank;
- when ranks per node divide evenly over the sockets, each socket holds the same number of
  ranks, and a rank's cores and GPUs are on its own socket (Summit: ranks 0-2 on socket 0
  with GPUs 0-2, ranks 3-5 on socket 1 with GPUs 3-5);
- otherwise cores and GPUs are handed out in order across the node;
- hardware thread ``t`` of core ``c`` is numbered ``c * node.threads_per_core + t``.
On the ``local`` site, ``nodes`` are emulated on this one host: the host's cores and GPUs are
split between the emulated nodes; more ranks than cores share cores (``oversubscribed``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from .errors import WmlError
from .resources import ResourceRequest
from .site.schema import NodeSpec, SiteProfile, replace
from .walltime import hhmm, parse_walltime


class LayoutError(WmlError):
    """A request the site's nodes cannot hold."""


@dataclass(frozen=True)
class RankSlot:
    rank: int
    node: int
    local_rank: int
    gpus: Tuple[int, ...]
    cores: Tuple[int, ...]
    hwthreads: Tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    site: str
    nodes: int
    ranks_per_node: int
    gpus_per_rank: int
    cores_per_rank: int
    threads_per_core: int
    node_spec: NodeSpec
    ranks: Tuple[RankSlot, ...]
    nodes_per_rack: Optional[int] = None
    emulated: bool = False
    oversubscribed: bool = False
    #: more ranks than cores (KNL: 128 ranks on 64 cores x 2 threads): ranks sharing each core
    ranks_per_core: int = 1

    @property
    def cpus_per_rank(self) -> int:
        """Hardware threads per rank (aprun -d, srun --cpus-per-task, OMP_NUM_THREADS)."""
        return self.cores_per_rank * self.threads_per_core // self.ranks_per_core

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_rank * self.ranks_per_node

    @property
    def racks(self) -> int:
        if not self.nodes_per_rack:
            return 1
        return math.ceil(self.nodes / self.nodes_per_rack)

    def on_node(self, node: int) -> Tuple[RankSlot, ...]:
        return tuple(r for r in self.ranks if r.node == node)

    @property
    def mode(self) -> str:
        """DDL topology mode ``p:<ranks per node>x<nodes per rack>x<racks>x<aisles>``."""
        npr = self.nodes_per_rack
        if npr and self.nodes > npr and self.nodes % npr == 0:
            return f"p:{self.ranks_per_node}x{npr}x{self.nodes // npr}x1"
        return f"p:{self.ranks_per_node}x{self.nodes}x1x1"

    def describe(self) -> str:
        g = f", {self.gpus_per_rank} GPU(s)" if self.gpus_per_rank else ""
        emu = " (emulated on this host)" if self.emulated else ""
        ranks = "1 rank" if self.size == 1 else f"{self.size} ranks"
        if self.ranks_per_core > 1:
            return (f"{ranks} on {self.nodes} node(s){emu}, {self.ranks_per_node} per node{g}, "
                    f"{self.ranks_per_core} ranks per core ({self.threads_per_core} hw threads), "
                    f"{self.cpus_per_rank} hw thread(s) per rank")
        return (f"{ranks} on {self.nodes} node(s){emu}, {self.ranks_per_node} per node{g}, "
                f"{self.cores_per_rank} core(s) x {self.threads_per_core} hw thread(s) per rank")


def _node_view(site: SiteProfile, nodes: int) -> Tuple[NodeSpec, bool]:
    """The node a layout places ranks on; on the local site, one emulated slice of the host."""
    node = site.node
    if site.scheduler != "local" or nodes == 1:
        return node, False
    cores = max(1, node.cores // nodes)
    gpus = node.gpus // nodes
    return replace(node, sockets=1, cores_per_socket=cores, gpus_per_socket=gpus), True


def compile_layout(site: SiteProfile, req: ResourceRequest) -> Layout:
    """Place every rank of ``req`` on ``site``; refuse what a node cannot hold."""
    nodes = req.nodes
    if nodes > site.total_nodes:
        raise LayoutError(f"{nodes} nodes requested but {site.name} has {site.total_nodes}")
    node, emulated = _node_view(site, nodes)
    host_cores = site.node.cores
    G, C = node.gpus, node.cores
    if req.ranks_per_node:
        rpn = req.ranks_per_node
    elif G and req.gpus_per_rank:      # --gpus-per-rank 2 on 6 GPUs: 3 ranks per node
        rpn = max(1, G // req.gpus_per_rank)
    else:
        rpn = G if G > 0 else 1
    if req.gpus_per_rank is not None:
        gpr = req.gpus_per_rank
    elif G and rpn > G:
        raise LayoutError(
            f"{rpn} ranks per node but a {site.name} node has {G} GPUs; "
            "give --gpus-per-rank 0 to run CPU-only ranks")
    else:
        gpr = G // rpn if G else 0
    if gpr * rpn > G:
        raise LayoutError(
            f"{rpn} ranks per node x {gpr} GPU(s) per rank = {gpr * rpn} GPUs, "
            f"but a {site.name} node has {G}")
    smt = req.threads_per_core or site.smt
    if smt > node.threads_per_core:
        raise LayoutError(
            f"{smt} hw threads per core requested but a {site.name} core has {node.threads_per_core}")

    local = site.scheduler == "local"
    if rpn > C and not local:
        return _shared_cores_layout(site, req, node, nodes, rpn, gpr, smt)

    sockets = node.sockets
    per_socket = rpn % sockets == 0
    fair = (node.cores_per_socket // (rpn // sockets)) if per_socket else C // rpn
    cpr = req.cores_per_rank or max(fair, 1 if local else 0)
    if cpr < 1:
        raise LayoutError(f"{rpn} ranks per node but a {site.name} node has only {C} usable cores")
    oversubscribed = False
    if per_socket and cpr * (rpn // sockets) > node.cores_per_socket or cpr * rpn > C:
        if not local:
            raise LayoutError(
                f"{rpn} ranks per node x {cpr} cores per rank = {cpr * rpn} cores, "
                f"but a {site.name} node has {C} usable cores")
        oversubscribed = True
    if local and (nodes > host_cores or rpn * nodes * cpr > host_cores):
        oversubscribed = True

    ranks = []
    for n in range(nodes):
        core_base = (n * C) % host_cores if emulated else 0
        gpu_base = n * G if emulated else 0
        for lr in range(rpn):
            if per_socket:
                rps = rpn // sockets
                sock, idx = divmod(lr, rps)
                first_core = sock * node.cores_per_socket + idx * cpr
                gps = gpr * rps
                first_gpu = sock * node.gpus_per_socket + idx * gpr if gps <= node.gpus_per_socket else lr * gpr
            else:
                first_core = lr * cpr
                first_gpu = lr * gpr
            cores = tuple(core_base + ((first_core + i) % C) for i in range(cpr))
            if local:
                cores = tuple(c % host_cores for c in cores)
            gpus = tuple(gpu_base + first_gpu + i for i in range(gpr))
            hw = tuple(c * node.threads_per_core + t for c in cores for t in range(smt))
            ranks.append(RankSlot(len(ranks), n, lr, gpus, cores, hw))
    return Layout(site=site.name, nodes=nodes, ranks_per_node=rpn, gpus_per_rank=gpr,
                  cores_per_rank=cpr, threads_per_core=smt, node_spec=node, ranks=tuple(ranks),
                  nodes_per_rack=site.nodes_per_rack, emulated=emulated, oversubscribed=oversubscribed)


def _shared_cores_layout(site: SiteProfile, req: ResourceRequest, node: NodeSpec, nodes: int,
                         rpn: int, gpr: int, smt: int) -> Layout:
    """More ranks per node than cores: each core's hw threads are split between ranks, as
    aprun does with ``-N 128 -d 1 -j 2`` on a 64-core KNL (ALCF "Affinity on Theta")."""
    C = node.cores
    if site.launcher == "jsrun":
        raise LayoutError(f"{rpn} ranks per node but a {site.name} node has only {C} usable cores "
                          "(jsrun resource sets hold whole cores)")
    rpc, rest = divmod(rpn, C)
    if rest or rpc > smt or smt % rpc or (req.cores_per_rank or 1) != 1:
        need = -(-rpn // C)
        hint = (f"; give --threads-per-core {need} to place {need} ranks on each core"
                if not rest and need <= node.threads_per_core and smt < need else "")
        raise LayoutError(
            f"{rpn} ranks per node on {C} cores x {smt} hw thread(s) per core: the ranks must fill "
            f"the hw threads of every core evenly{hint}")
    per_rank = smt // rpc
    ranks = []
    for n in range(nodes):
        for lr in range(rpn):
            core, slot = divmod(lr, rpc)
            hw = tuple(core * node.threads_per_core + slot * per_rank + t for t in range(per_rank))
            gpus = tuple(lr * gpr + i for i in range(gpr))
            ranks.append(RankSlot(len(ranks), n, lr, gpus, (core,), hw))
    return Layout(site=site.name, nodes=nodes, ranks_per_node=rpn, gpus_per_rank=gpr,
                  cores_per_rank=1, threads_per_core=smt, node_spec=node, ranks=tuple(ranks),
                  nodes_per_rack=site.nodes_per_rack, ranks_per_core=rpc)


def _queue_walltime(site: SiteProfile, qname: str, nodes: int) -> Tuple[int, str]:
    """A queue's walltime limit for a job of ``nodes`` nodes, and what sets it."""
    q = site.queues[qname]
    for b in q.walltime_bins:
        if nodes <= b.max_nodes:
            return parse_walltime(b.max_walltime), f"jobs of up to {b.max_nodes} nodes in queue {qname!r}"
    return parse_walltime(q.max_walltime), f"queue {qname!r}"


def _queue_refusal(site: SiteProfile, qname: str, req: ResourceRequest) -> Optional[str]:
    """Why queue ``qname`` refuses ``req`` (None: it takes it)."""
    q = site.queues[qname]
    if req.nodes > q.max_nodes:
        return f"{req.nodes} nodes is above the {q.max_nodes}-node limit of queue {qname!r} on {site.name}"
    if req.nodes < q.min_nodes:
        return f"{req.nodes} nodes is below the {q.min_nodes}-node minimum of queue {qname!r} on {site.name}"
    limit, limit_why = _queue_walltime(site, qname, req.nodes)
    wall = req.walltime if req.walltime is not None else min(limit, 60)
    if wall > limit:
        return f"walltime {hhmm(wall)} is above the {hhmm(limit)} maximum for {limit_why} on {site.name}"
    if q.min_walltime and wall < parse_walltime(q.min_walltime):
        return f"walltime {hhmm(wall)} is below the {q.min_walltime} minimum of queue {qname!r} on {site.name}"
    return None


def check_queue_limits(site: SiteProfile, req: ResourceRequest) -> Tuple[Optional[str], Optional[int]]:
    """Resolve the queue and walltime for ``req`` on ``site``; refuse what the queue refuses.

    Without ``--queue``, a job the default queue refuses goes to the first queue of the
    profile that takes it (Theta: fewer than 128 nodes go to debug-cache-quad); with
    ``--queue``, a refusal names the queues that would take the job.
    Returns (queue name or None, walltime minutes or None)."""
    if site.scheduler == "local":
        return None, req.walltime
    qname = req.queue or site.default_queue
    if qname not in site.queues:
        raise WmlError(f"unknown queue {qname!r} on {site.name}; queues: {', '.join(site.queues)}")
    why = _queue_refusal(site, qname, req)
    if why is not None:
        fits = [n for n in site.queues if n != qname and _queue_refusal(site, n, req) is None]
        if fits and req.queue is None:
            qname = fits[0]
        elif fits:
            raise WmlError(f"{why}; queue(s) that take this job: {', '.join(fits)} (-q)")
        else:
            raise WmlError(why)
    limit, _ = _queue_walltime(site, qname, req.nodes)
    wall = req.walltime if req.walltime is not None else min(limit, 60)
    return qname, wall
