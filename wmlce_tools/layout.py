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

Ranks that share a GPU (``ranks_per_gpu`` K > 1, ``--ranks-per-gpu``): K consecutive local ranks
get the same GPU, one GPU each (Summit's 6 GPUs x K=2: 12 ranks per node, ranks 0-1 on GPU 0,
2-3 on GPU 1, ...; by socket as above).  Emulated nodes of a host with fewer GPUs than nodes
share the host's GPUs the same way by global rank: 2 emulated nodes x 1 rank on a 1-GPU host
with K=2 put both ranks on GPU 0 (how Horovod's test_torch.py runs 2 ranks on one GPU).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Tuple

from .errors import WmlError
from .resources import ResourceRequest
from .site.schema import NodeSpec, SiteProfile, replace
from .walltime import hhmm, parse_walltime


class LayoutError(WmlError):
    """A request the site's nodes cannot hold."""


#: one rank's place on its node: (gpus, cores, hwthreads)
Slots = Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]


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
    #: each node's slots by local rank; one entry when every node is placed alike (every node of
    #: a real machine: a full machine is one node's placement, not 127,488 rank records)
    placements: Tuple[Tuple[Slots, ...], ...]
    nodes_per_rack: Optional[int] = None
    emulated: bool = False
    oversubscribed: bool = False
    #: more ranks than cores (KNL: 128 ranks on 64 cores x 2 threads): ranks sharing each core
    ranks_per_core: int = 1
    #: ranks sharing each GPU (``--ranks-per-gpu``)
    ranks_per_gpu: int = 1

    @property
    def cpus_per_rank(self) -> int:
        """Hardware threads per rank (aprun -d, srun --cpus-per-task, OMP_NUM_THREADS)."""
        return self.cores_per_rank * self.threads_per_core // self.ranks_per_core

    @property
    def size(self) -> int:
        return self.nodes * self.ranks_per_node

    @cached_property
    def ranks(self) -> Tuple[RankSlot, ...]:
        """Every rank, numbered node by node (rank = node * ranks_per_node + local_rank); made
        on first use: launchers whose flags say the placement (srun, PALS, aprun) never need it,
        a rankfile or ERF does."""
        return tuple(r for n in range(self.nodes) for r in self.on_node(n))

    def node_slots(self, node: int) -> Tuple[Slots, ...]:
        """Node ``node``'s slots by local rank (the same tuple for nodes placed alike)."""
        return self.placements[node if len(self.placements) > 1 else 0]

    @property
    def gpus_per_node(self) -> int:
        """GPUs a node's ranks use (the ones K ranks share count once)."""
        return self.gpus_per_rank * -(-self.ranks_per_node // self.ranks_per_gpu)

    @property
    def idle_gpus(self) -> Tuple[int, ...]:
        """GPUs of a (real) node that no rank uses; () on CPU-only layouts and emulated nodes."""
        if self.emulated or not self.gpus_per_rank:
            return ()
        used = {g for r in self.on_node(0) for g in r.gpus}
        return tuple(g for g in range(self.node_spec.gpus) if g not in used)

    @property
    def racks(self) -> int:
        if not self.nodes_per_rack:
            return 1
        return math.ceil(self.nodes / self.nodes_per_rack)

    def on_node(self, node: int) -> Tuple[RankSlot, ...]:
        """The ranks of layout node ``node``, by local rank (made from its placement: no scan of
        the other nodes' ranks, so planning stays linear in ranks)."""
        if not 0 <= node < self.nodes:
            return ()
        base = node * self.ranks_per_node
        return tuple(RankSlot(base + lr, node, lr, g, c, h) for lr, (g, c, h) in enumerate(self.node_slots(node)))

    @property
    def mode(self) -> str:
        """DDL topology mode ``p:<ranks per node>x<nodes per rack>x<racks>x<aisles>``."""
        npr = self.nodes_per_rack
        if npr and self.nodes > npr and self.nodes % npr == 0:
            return f"p:{self.ranks_per_node}x{npr}x{self.nodes // npr}x1"
        return f"p:{self.ranks_per_node}x{self.nodes}x1x1"

    def describe(self) -> str:
        g = f", {self.gpus_per_rank} GPU(s)" if self.gpus_per_rank else ""
        if self.ranks_per_gpu > 1:
            g = f", {self.ranks_per_gpu} ranks per GPU"
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
    K = req.ranks_per_gpu or 1
    if K > 1 and not site.node.gpus:
        raise LayoutError(f"--ranks-per-gpu {K}: a {site.name} node has no GPUs to share")
    # more emulated nodes than the host has GPUs: the emulated nodes share the host's GPUs
    host_shared = K > 1 and emulated and G == 0
    if req.ranks_per_node:
        rpn = req.ranks_per_node
    elif host_shared:
        rpn = max(1, site.node.gpus * K // nodes)
    elif K > 1:
        rpn = G * K
    elif G and req.gpus_per_rank:      # --gpus-per-rank 2 on 6 GPUs: 3 ranks per node
        rpn = max(1, G // req.gpus_per_rank)
    else:
        rpn = G if G > 0 else 1
    if K > 1:
        gpr = 1
        _check_shared_gpus(site, node, nodes, rpn, K, host_shared)
    elif req.gpus_per_rank is not None:
        gpr = req.gpus_per_rank
    elif G and rpn > G:
        raise LayoutError(
            f"{rpn} ranks per node but a {site.name} node has {_count(G, 'GPU')}; give --ranks-per-gpu "
            f"{-(-rpn // G)} to share them, or --gpus-per-rank 0 to run CPU-only ranks")
    else:
        gpr = G // rpn if G else 0
    if K == 1 and gpr * rpn > G:
        raise LayoutError(
            f"{rpn} ranks per node x {gpr} GPU(s) per rank = {gpr * rpn} GPUs, "
            f"but a {site.name} node has {G}")
    smt = req.threads_per_core or site.smt
    if smt > node.threads_per_core:
        raise LayoutError(
            f"{smt} hw threads per core requested but a {site.name} core has {node.threads_per_core}")

    local = site.scheduler == "local"
    if rpn > C and not local:
        return _shared_cores_layout(site, req, node, nodes, rpn, gpr, smt, K)

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

    def node_slots(n: int, core_base: int, gpu_base: int) -> Tuple[Slots, ...]:
        out = []
        for lr in range(rpn):
            if per_socket:
                rps = rpn // sockets
                sock, idx = divmod(lr, rps)
                first_core = sock * node.cores_per_socket + idx * cpr
                gps = gpr * -(-rps // K)
                on_socket = idx * gpr // K
                first_gpu = sock * node.gpus_per_socket + on_socket if gps <= node.gpus_per_socket else lr * gpr // K
            else:
                first_core = lr * cpr
                first_gpu = lr * gpr // K
            cores = tuple(core_base + ((first_core + i) % C) for i in range(cpr))
            if local:
                cores = tuple(c % host_cores for c in cores)
            if host_shared:
                first_gpu, gpu_base = (n * rpn + lr) // K, 0
            gpus = tuple(gpu_base + first_gpu + i for i in range(gpr))
            hw = tuple(c * node.threads_per_core + t for c in cores for t in range(smt))
            out.append((gpus, cores, hw))
        return tuple(out)

    if emulated:    # each emulated node has its own slice of the host's cores and GPUs
        placements = tuple(node_slots(n, (n * C) % host_cores, n * G) for n in range(nodes))
    else:           # every node alike: worked out once
        placements = (node_slots(0, 0, 0),)
    return Layout(site=site.name, nodes=nodes, ranks_per_node=rpn, gpus_per_rank=gpr,
                  cores_per_rank=cpr, threads_per_core=smt, node_spec=node, placements=placements,
                  nodes_per_rack=site.nodes_per_rack, emulated=emulated, oversubscribed=oversubscribed,
                  ranks_per_gpu=K)


def _check_shared_gpus(site: SiteProfile, node: NodeSpec, nodes: int, rpn: int, K: int, host_shared: bool) -> None:
    """Ranks sharing GPUs K at a time: enough GPUs, and (jsrun) resource sets of K whole ranks."""
    if host_shared:
        need, have = -(-nodes * rpn // K), site.node.gpus
        if need > have:
            raise LayoutError(f"{nodes * rpn} ranks at {K} per GPU need {need} GPUs, but this host has {have}")
        return
    if rpn > node.gpus * K:
        raise LayoutError(f"{rpn} ranks per node at {K} per GPU need {-(-rpn // K)} GPUs, "
                          f"but a {site.name} node has {node.gpus}")
    if site.launcher == "jsrun" and rpn % (node.sockets * K):
        # jsrun -a K -g 1: a resource set holds K ranks and their GPU, within one socket (OLCF
        # Summit guide, "Multiple tasks, single GPU per RS")
        raise LayoutError(f"{rpn} ranks per node at {K} per GPU: jsrun resource sets of {K} ranks and one GPU "
                          f"need ranks per node a multiple of {node.sockets * K} ({node.sockets} sockets)")


def _shared_cores_layout(site: SiteProfile, req: ResourceRequest, node: NodeSpec, nodes: int,
                         rpn: int, gpr: int, smt: int, K: int = 1) -> Layout:
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
    slots = []
    for lr in range(rpn):
        core, slot = divmod(lr, rpc)
        hw = tuple(core * node.threads_per_core + slot * per_rank + t for t in range(per_rank))
        slots.append((tuple(lr * gpr // K + i for i in range(gpr)), (core,), hw))
    return Layout(site=site.name, nodes=nodes, ranks_per_node=rpn, gpus_per_rank=gpr,
                  cores_per_rank=1, threads_per_core=smt, node_spec=node, placements=(tuple(slots),),
                  nodes_per_rack=site.nodes_per_rack, ranks_per_core=rpc, ranks_per_gpu=K)


def idle_gpu_warning(site: SiteProfile, req: ResourceRequest, layout: Layout) -> Optional[str]:
    """One line when ``layout`` leaves GPUs of every node unused (``--gpus-per-rank 3`` on a
    4-GPU node), naming them and the option values that would use them all; None otherwise."""
    idle = layout.idle_gpus
    if not idle:
        return None
    G = layout.node_spec.gpus
    used = G - len(idle)
    fixes = []
    for alt in _using_all_gpus(site, req, layout):
        if alt not in fixes:
            fixes.append(alt)
    rpn, gpr = layout.ranks_per_node, layout.gpus_per_rank
    shared = f" at {layout.ranks_per_gpu} per GPU" if layout.ranks_per_gpu > 1 else f" x {_count(gpr, 'GPU')}"
    names = ", ".join(map(str, idle))
    fix = f"; {' or '.join(fixes)} uses all {G}" if fixes else ""
    return (f"{_count(rpn, 'rank')} per node{shared} use {used} of the {G} GPUs of a {site.name} node: "
            f"{'GPUs' if len(idle) > 1 else 'GPU'} {names} {'stay' if len(idle) > 1 else 'stays'} idle on every node{fix}")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _using_all_gpus(site: SiteProfile, req: ResourceRequest, layout: Layout):
    """Option spellings, close to the request, whose layout leaves no GPU idle."""
    from dataclasses import replace as dc_replace

    G = layout.node_spec.gpus
    if layout.ranks_per_gpu > 1:
        tries = [("--ranks-per-node", {"ranks_per_node": G * layout.ranks_per_gpu})]
    else:
        gpr = layout.gpus_per_rank
        below = [d for d in range(1, G + 1) if G % d == 0 and d <= gpr]
        above = [d for d in range(1, G + 1) if G % d == 0 and d >= gpr]
        tries = []
        for d in ([max(below)] if below else []) + ([min(above)] if above else []):
            if req.ranks_per_node is not None:
                tries.append(("--ranks-per-node", {"ranks_per_node": G // d, "gpus_per_rank": d}))
            else:
                tries.append(("--gpus-per-rank", {"gpus_per_rank": d}))
    for option, change in tries:
        try:
            alt = compile_layout(site, dc_replace(req, **change))
        except WmlError:
            continue
        if alt.idle_gpus:
            continue
        if option == "--ranks-per-node" and "gpus_per_rank" in change and req.gpus_per_rank is not None:
            yield f"--ranks-per-node {change['ranks_per_node']} --gpus-per-rank {change['gpus_per_rank']}"
        elif option == "--ranks-per-node":
            yield f"--ranks-per-node {change['ranks_per_node']}"
        else:
            yield f"--gpus-per-rank {change['gpus_per_rank']} ({_count(alt.ranks_per_node, 'rank')} per node)"


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


@dataclass(frozen=True)
class QueueChoice:
    """The queue a job goes to, its walltime (minutes), and why wml chose that queue when the
    user named none and it is not the site's default (None: -q, or the default)."""

    name: Optional[str]
    walltime: Optional[int]
    why: Optional[str] = None


def _nothing_takes(site: SiteProfile, qname: str, why: str, req: ResourceRequest) -> str:
    """The refusal when no queue takes a job: the default's reason, then each other queue's
    (the limit that actually stops a small job is often another queue's walltime)."""
    others = [f"{n}: {_queue_refusal(site, n, req)}" for n in site.queues
              if n != qname and not site.queues[n].interactive_only]
    return why + (f"; and no other queue takes it ({'; '.join(others)})" if others else "")


def choose_queue(site: SiteProfile, req: ResourceRequest) -> QueueChoice:
    """Resolve the queue and walltime for ``req`` on ``site``; refuse what the queue refuses.

    Without ``--queue``, a job the default queue refuses goes to the first queue of the
    profile that takes it (Theta: fewer than 128 nodes go to debug-cache-quad), and the choice
    says why; a preemptable queue (its jobs may be killed for others) is never chosen, only
    named.  With ``--queue``, a refusal names the queues that would take the job."""
    if site.scheduler == "local":
        return QueueChoice(None, req.walltime)
    qname = req.queue or site.default_queue
    if qname not in site.queues:
        hint = (f" ({qname!r} is a QOS of {site.name}, beside its partitions: --qos {qname})"
                if qname in site.qos else "")
        raise WmlError(f"unknown queue {qname!r} on {site.name}; queues: {', '.join(site.queues)}{hint}")
    chosen_why = None
    why = _queue_refusal(site, qname, req)
    if why is not None:
        fits = [n for n in site.queues if n != qname and not site.queues[n].interactive_only
                and _queue_refusal(site, n, req) is None]
        safe = [n for n in fits if not site.queues[n].preemptable]
        if safe and req.queue is None:
            chosen_why = (f"wml chose queue {safe[0]!r} ({site.queues[safe[0]].description or 'it takes this job'}): "
                          f"the default queue {qname!r} refuses this job ({why})")
            qname = safe[0]
        elif fits:
            marks = [f"{n} (preemptable: {site.queues[n].description})" if site.queues[n].preemptable else n
                     for n in fits]
            raise WmlError(f"{why}; queue(s) that take this job: {', '.join(marks)} (-q)")
        elif req.queue is None:
            raise WmlError(_nothing_takes(site, qname, why, req))
        else:
            raise WmlError(why)
    limit, _ = _queue_walltime(site, qname, req.nodes)
    wall = req.walltime if req.walltime is not None else min(limit, 60)
    _check_qos(site, req, wall)
    return QueueChoice(qname, wall, chosen_why)


def _check_qos(site: SiteProfile, req: ResourceRequest, wall: int) -> None:
    """``--qos``: a Slurm site's quality of service beside its partition (OLCF Frontier's
    debug), one of the profile's when it lists them, within its limits."""
    if req.qos is None:
        return
    if site.scheduler != "slurm":
        raise WmlError(f"--qos: {site.name} ({site.scheduler}) has no QOS beside its queues; give -q")
    if site.slurm.queue_option == "qos":
        raise WmlError(f"--qos: -q names the QOS on {site.name} (its queues are QOSes); give -q {req.qos}")
    if not site.qos:
        return                      # the profile lists none: the name goes to sbatch as given
    q = site.qos.get(req.qos)
    if q is None:
        raise WmlError(f"unknown QOS {req.qos!r} on {site.name}; QOSes: {', '.join(site.qos)}")
    if q.max_nodes is not None and req.nodes > q.max_nodes:
        raise WmlError(f"{req.nodes} nodes is above the {q.max_nodes}-node limit of QOS {req.qos!r} on {site.name}")
    if q.max_walltime and wall > parse_walltime(q.max_walltime):
        raise WmlError(f"walltime {hhmm(wall)} is above the {q.max_walltime} maximum of QOS {req.qos!r} on {site.name}")


def check_queue_limits(site: SiteProfile, req: ResourceRequest) -> Tuple[Optional[str], Optional[int]]:
    """``choose_queue``'s (queue name or None, walltime minutes or None)."""
    c = choose_queue(site, req)
    return c.name, c.walltime
