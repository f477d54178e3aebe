"""Placement files written from a Layout when the launcher's flags cannot say it.

- Open MPI rankfile (``rank R=host slot=0-6``, logical core numbers): written when the
  layout pins ranks to more than one core each, spans sockets or hosts, and is not
  oversubscribed; ``--map-by ppr:K:node --bind-to core`` would bind each rank to one core.
- jsrun ERF (``rank: R: { host: H; cpu: {..}; gpu: {..} }``, ``cpu_index_using: logical`` so
  cpus are the usable hardware threads numbered as the Layout numbers them, ``host: 1`` the
  first compute host; host 0 is the launch node): written when ranks per node do not divide
  over the sockets, which jsrun's resource-set flags cannot express.
- mpiexec host file (MPICH ``host:N``, Open MPI ``host slots=N``, one node a line, in node
  order): written when the host list mpiexec would get as one argument (``-hosts`` /
  ``--host``) is longer than ``HOSTFILE_BYTES`` (``WML_DDLRUN_HOSTFILE_BYTES``), well below
  Linux's 128 KiB limit on one argument (MAX_ARG_STRLEN), past which the launch fails with
  "Argument list too long" (about 2,500 Aurora-length host names).
- PALS host file (one host a line, in node order): PALS's mpiexec reads the job's nodes from
  $PBS_NODEFILE by itself, so ddlrun passes no host list when the launch uses every node of it
  in order; when it uses fewer (-n) or other hosts (-H, --hostfile), the file names them
  (``--hostfile``, as in ALCF's Polaris/Aurora examples of running several launches in one job).
  srun reads the nodes from the job (SLURM_JOB_NODELIST, compressed), aprun from ALPS, jsrun
  from LSF or the ERF: none gets a host list as an argument.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

from ..errors import WmlError
from ..layout import Layout

HOSTFILE_BYTES = 32 * 1024
HOSTFILE_VAR = "WML_DDLRUN_HOSTFILE_BYTES"


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


def hostfile_bytes(env: Mapping[str, str]) -> int:
    """The longest host list passed as one argument: ``$WML_DDLRUN_HOSTFILE_BYTES``, else 32 KiB."""
    text = env.get(HOSTFILE_VAR, "").strip()
    if not text:
        return HOSTFILE_BYTES
    if not text.isdigit():
        raise WmlError(f"{HOSTFILE_VAR}={text!r}: expected a number of bytes >= 0 (the longest host list "
                       f"passed to mpiexec as one argument)")
    return int(text)


def mpiexec_hostfile(flavor: Optional[str], layout: Layout, hosts: Sequence[str], limit: int) -> Optional[str]:
    """The text of the host file mpiexec gets instead of its host list, or None when the
    launch passes no list (one host, or an Open MPI rankfile names the hosts) or the list is
    at most ``limit`` bytes.  ``hosts[node]`` names the host of each node of the layout."""
    if len(set(hosts)) < 2 or (flavor == "openmpi" and needs_openmpi_rankfile(layout, hosts)):
        return None
    rpn = layout.ranks_per_node
    suffix = f":{rpn}" if flavor == "openmpi" else ""   # as --host h:K / -hosts h spell it
    if sum(len(h) + len(suffix) + 1 for h in hosts) - 1 <= limit:
        return None
    if flavor == "openmpi":
        return "".join(f"{h} slots={rpn}\n" for h in hosts)
    return "".join(f"{h}:{rpn}\n" for h in hosts)


def host_file(launcher: str, flavor: Optional[str], layout: Layout, hosts: Sequence[str], limit: int,
              whole_job: bool) -> Optional[str]:
    """The text of the host file this launch passes instead of a host list, or None.
    ``whole_job``: the hosts are every node of the job's own node file, in its order."""
    if launcher == "mpiexec":
        return mpiexec_hostfile(flavor, layout, hosts, limit)
    if launcher == "pals" and not whole_job:
        return "".join(f"{h}\n" for h in hosts)
    return None


def placement_file(launcher: str, flavor: Optional[str], layout: Layout, hosts: Sequence[str]) -> Optional[str]:
    """The text of the placement file this launch needs, or None."""
    if launcher == "mpiexec" and flavor == "openmpi" and needs_openmpi_rankfile(layout, hosts):
        return openmpi_rankfile(layout, hosts)
    if launcher == "jsrun" and needs_erf(layout):
        return jsrun_erf(layout)
    return None
