"""Which of the allocation's nodes a launch uses: ``--spare-nodes K`` keeps K of them out of the
layout (a restart takes one in place of a node that failed), and a restart leaves out the nodes
that failed (``DdlrunOptions.exclude``).  The layout's nodes are the first ones of the allocation
that are neither spare nor failed, in allocation order; the Layout places the ranks on them as
on any nodes (``build_plan``).

On the local site's emulated nodes the allocation is ``--emulate-nodes`` + K nodes named
``node0``, ``node1``, ...; elsewhere a node is its host.  srun is told which nodes the step must
leave out (``--exclude``), mpiexec and PALS get the host list; jsrun and aprun are refused
spares (neither is given a node list by ddlrun).
"""
from __future__ import annotations

from typing import Tuple

from ..errors import WmlError
from .hosts import HostSet

NO_NODE_LIST = ("jsrun", "aprun")


class NoSpareLeft(WmlError):
    """Fewer healthy nodes than the layout needs: the failed ones cannot be replaced here."""


def job_argv(restarts, spare_nodes: int) -> list:
    """The job script's ddlrun words for ``--restarts`` and ``--spare-nodes`` (none when unset)."""
    return ([f"--restarts={restarts}"] if restarts else []) + ([f"--spare-nodes={spare_nodes}"] if spare_nodes else [])


def allocation_nodes(site, req) -> int:
    """The nodes a job asks the scheduler for: its layout's and its spares (the local site's
    emulated spares are ddlrun's alone)."""
    return req.nodes + (req.spare_nodes if site.scheduler != "local" else 0)


def check_job(site, req) -> None:
    """A job's --spare-nodes, before anything is written: a launcher that can use them."""
    if req.spare_nodes and site.launcher in NO_NODE_LIST:
        raise WmlError(f"--spare-nodes: {site.name}'s launcher, {site.launcher}, cannot be told which nodes of the "
                       f"allocation to use; spares need srun, mpiexec or PALS (--restarts without spares relaunches "
                       f"on the same nodes)")


def emulated_name(index: int) -> str:
    return f"node{index}"


def _layout_nodes(opts, available: int) -> int:
    """How many nodes the layout has: -n / --ranks-per-node when both say it, else the
    allocation less its spares."""
    if opts.emulate_nodes is not None:
        return opts.emulate_nodes
    if opts.np is not None and opts.ranks_per_node:
        return opts.np // opts.ranks_per_node
    return available - opts.spare_nodes


def usable_hosts(hosts: HostSet, opts, launcher: str) -> Tuple[HostSet, Tuple[str, ...], Tuple[str, ...]]:
    """(the hosts the launch uses, the allocation's hosts it leaves out, each layout node's name)
    for ``opts.spare_nodes`` and ``opts.exclude``; ``NoSpareLeft`` when too few remain."""
    spare, exclude = opts.spare_nodes or 0, set(opts.exclude or ())
    if spare < 0:
        raise WmlError(f"--spare-nodes must be >= 0, got {spare}")
    if not spare and not exclude:
        return hosts, (), ()
    if launcher in NO_NODE_LIST and opts.emulate_nodes is None:
        raise WmlError(f"--spare-nodes and restarts on other nodes need a launcher that can be told which nodes "
                       f"to use (srun, mpiexec, PALS); {launcher} cannot (run without --spare-nodes: a restart "
                       f"then reuses the same nodes)")
    if opts.emulate_nodes is not None:
        total = opts.emulate_nodes + spare
        names = [emulated_name(i) for i in range(total) if emulated_name(i) not in exclude]
        need = opts.emulate_nodes
        if len(names) < need:
            raise NoSpareLeft(_short(need, total, sorted(exclude)))
        return hosts, (), tuple(names[:need])
    need = _layout_nodes(opts, len(hosts.hosts))
    if need < 1:
        raise WmlError(f"--spare-nodes {spare}: the allocation has {len(hosts.hosts)} node(s) ({hosts.source}); "
                       f"none would be left for the run")
    keep = [i for i, h in enumerate(hosts.hosts) if h not in exclude]
    if len(keep) < need:
        raise NoSpareLeft(_short(need, len(hosts.hosts), [h for h in hosts.hosts if h in exclude]))
    keep = keep[:need]
    used = HostSet(tuple(hosts.hosts[i] for i in keep), tuple(hosts.slots[i] for i in keep),
                   hosts.source + (f" less {spare} spare(s)" if spare else "")
                   + (f" and {len(exclude)} failed" if exclude else ""))
    left = tuple(h for h in hosts.hosts if h not in used.hosts)
    return used, left, used.hosts


def _short(need: int, total: int, failed) -> str:
    return (f"the layout needs {need} node(s); of the allocation's {total}, {len(failed)} failed "
            f"({', '.join(failed)}) and no spare is left")
