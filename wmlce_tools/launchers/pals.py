"""HPE PALS ``mpiexec`` (Cray PE on PBS Pro: ALCF Polaris and Aurora).

``mpiexec -n <ranks> --ppn <ranks per node>`` then the CPU binding: ``--depth=<CPUs per rank>
--cpu-bind depth`` (ALCF's Polaris examples) or, with ``launcher_options.bind: list``, an explicit
``--cpu-bind=list:<rank 0 CPUs>:<rank 1 CPUs>:...`` built from the Layout (ALCF's Aurora
binding ``list:1-8:9-16:...:93-100``: cores 0 and 52 are left to the system, see
``node.reserved_cores_per_socket``).  Variables every rank must see go as ``--env KEY=VALUE``.
Depth binding hands each rank consecutive Linux CPUs, which are whole cores' first hw threads
(Linux numbers a core's second thread core + cores-per-node), so a rank that uses several hw
threads per core (``--threads-per-core 2``) gets the list form instead: its cores and their
sibling threads.  PALS reads the nodes from the PBS job itself ($PBS_NODEFILE), so no host list
is passed, unless the launch uses other nodes: then ``--hostfile FILE`` (one host a line; ALCF's
examples of several launches in one job, which give each its own part of $PBS_NODEFILE).
Flags as in ALCF's "Running Jobs on Polaris/Aurora" pages (mpiexec --help of PALS).
"""
from __future__ import annotations

from typing import List, Sequence



def physical_cpus(layout, cores: Sequence[int]) -> List[int]:
    """Linux CPU ids of a rank's cores (Layout numbers usable cores socket by socket) and of
    their other hw threads (Linux numbers hw thread t of core c as c + t * cores in the node)."""
    node = layout.node_spec
    per, skip = node.cores_per_socket, node.reserved_cores_per_socket
    total = node.sockets * (per + skip)
    phys = [(c // per) * (per + skip) + skip + c % per for c in cores]
    return [p + t * total for t in range(layout.threads_per_core) for p in phys]


def ranges(cpus: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3,7``."""
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def cpu_bind_list(layout) -> str:
    return "list:" + ":".join(ranges(physical_cpus(layout, r.cores)) for r in layout.on_node(0))


def command(layout, ctx, program):
    opts = ctx.site.launcher_options
    bind = opts.bind or "depth"
    if bind == "depth" and layout.threads_per_core > 1:
        bind = "list"
    argv = ["mpiexec", "-n", str(layout.size), "--ppn", str(layout.ranks_per_node)]
    if ctx.hostfile:
        argv += ["--hostfile", ctx.hostfile]
    if bind == "depth":
        argv += [f"--depth={layout.cores_per_rank * layout.threads_per_core}", "--cpu-bind", "depth"]
    elif bind == "list":
        argv.append(f"--cpu-bind={cpu_bind_list(layout)}")
    else:
        argv += ["--cpu-bind", bind]
    for key, value in ctx.env.items():
        argv += ["--env", f"{key}={value}"]
    return argv + list(opts.extra_args) + list(ctx.extra_args) + program
