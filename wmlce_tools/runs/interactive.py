"""``wml submit --interactive``: the scheduler's own interactive allocation with the same
resources as the batch script would request (``bsub -Is``, ``salloc``, ``qsub -I``)."""
from __future__ import annotations

import os
import shutil
import sys

from ..errors import WmlError
from ..jobscript import JobPlan
from ..quoting import sh_join
from ..walltime import hhmm, slurm_time


def interactive_directives(plan: JobPlan) -> list[str]:
    """The allocation command's options: wml's, then the pass-through lines' (--mem, ...)."""
    import shlex

    from ..schedulers.passthrough import PREFIX

    d = _own_directives(plan)
    prefix = PREFIX.get(plan.site.scheduler, "")
    for line in plan.passthrough.lines:
        d += shlex.split(line[len(prefix):])
    return d


def _own_directives(plan: JobPlan) -> list[str]:
    lay, req = plan.layout, plan.request
    wall = plan.walltime or 0
    sched = plan.site.scheduler
    if sched == "lsf":
        d = ["-nnodes", str(lay.nodes), "-W", hhmm(wall), "-q", plan.queue, "-J", req.job_name]
        if req.project:
            d += ["-P", req.project]
        if plan.alloc_flags:
            d += ["-alloc_flags", plan.alloc_flags]
        return d
    if sched == "slurm":
        d = [f"--nodes={lay.nodes}", f"--ntasks-per-node={lay.ranks_per_node}",
             f"--cpus-per-task={lay.cpus_per_rank}", f"--time={slurm_time(wall)}",
             f"--{plan.site.slurm.queue_option}={plan.queue}", f"--job-name={req.job_name}"]
        if req.qos:
            d.append(f"--qos={req.qos}")
        if plan.constraint:
            d.append(f"--constraint={plan.constraint}")
        if lay.node_spec.threads_per_core > 1:     # as srun asks it: see templates/slurm.sh.j2
            d.append(f"--threads-per-core={lay.threads_per_core}")
        if lay.gpus_per_node:
            d.append(f"--gpus-per-node={lay.gpus_per_node}")
        if req.project:
            d.append(f"--account={req.project}")
        return d
    if sched == "cobalt":
        d = ["-n", str(lay.nodes), "-t", str(wall), "-q", plan.queue]
        if req.project:
            d += ["-A", req.project]
        if plan.attrs:
            d += ["--attrs", plan.attrs]
        return d
    if sched == "pbs":
        from ..schedulers.pbs import resource_list

        d = []
        for res in resource_list(plan.site, lay.nodes, wall, plan.passthrough):
            d += ["-l", res]
        d += ["-q", plan.queue, "-N", req.job_name]
        if req.project:
            d += ["-A", req.project]
        return d
    raise WmlError(f"site {plan.site.name} has no scheduler to ask for an interactive allocation; "
                   "run your program with ddlrun directly")


def run_interactive(plan: JobPlan, dry_run: bool = False) -> None:
    argv = plan.scheduler.interactive_argv(interactive_directives(plan))
    argv = [os.environ.get("SHELL", "/bin/bash") if a == "$SHELL" else a for a in argv]
    if dry_run:
        print(sh_join(argv))
        return
    if shutil.which(argv[0]) is None:
        raise WmlError(f"{argv[0]} not found: {plan.scheduler.missing_hint}")
    sys.stdout.flush()
    os.execvp(argv[0], argv)
