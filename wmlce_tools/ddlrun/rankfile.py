"""Placement files written from a Layout when the launcher's flags cannot say it.

- Open MPI rankfile (``rank R=host slot=0-6``, logical core numbers): written when the
  layout pins ranks to more than one core each, spans sockets or hosts, and is not
  oversubscribed; ``--map-by ppr:K:node --bind-to core`` would bind each rank to one core.
- jsrun ERF (``rank: R: { host: H; cpu: {..}; gpu: {..} }``, ``cpu_index_using: logical`` so
  cpus are the usable hardware threads numbered as the Layout numbers them, ``host: 1`` the
  first compute host; host 0 is the launch node): written when ranks per node do not divide
  over the sockets, which jsrun's resource-set flags cannot express.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ..layout import Layout


def ranges(numbers: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    nums = sorted(set(numbers))
    out = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def needs_openmpi_rankfile(layout: Layout, hosts: Sequence[str]) -> bool:
    if layout.oversubscribed:
        return False
    return layout.cores_per_rank > 1 or layout.node_spec.sockets > 1 or len(set(hosts)) > 1


def openmpi_rankfile(layout: Layout, hosts: Sequence[str]) -> str:
    """``hosts[node]`` names the host of each node of the layout."""
    lines = [f"# Open MPI rankfile written by ddlrun: {layout.describe()}"]
    for r in layout.ranks:
        lines.append(f"rank {r.rank}={hosts[r.node]} slot={ranges(r.cores)}")
    return "\n".join(lines) + "\n"


def needs_erf(layout: Layout) -> bool:
    return layout.node_spec.sockets > 1 and layout.ranks_per_node % layout.node_spec.sockets != 0


def jsrun_erf(layout: Layout) -> str:
    lines = [f"# jsrun ERF written by ddlrun: {layout.describe()}", "cpu_index_using: logical"]
    for r in layout.ranks:
        gpu = f"; gpu: {{{ranges(r.gpus)}}}" if r.gpus else ""
        lines.append(f"rank: {r.rank}: {{ host: {r.node + 1}; cpu: {{{ranges(r.hwthreads)}}}{gpu} }}")
    return "\n".join(lines) + "\n"


def placement_file(launcher: str, flavor: Optional[str], layout: Layout, hosts: Sequence[str]) -> Optional[str]:
    """The text of the placement file this launch needs, or None."""
    if launcher == "mpiexec" and flavor == "openmpi" and needs_openmpi_rankfile(layout, hosts):
        return openmpi_rankfile(layout, hosts)
    if launcher == "jsrun" and needs_erf(layout):
        return jsrun_erf(layout)
    return None
