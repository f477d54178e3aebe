"""aprun (Cray ALPS, Theta).

``-n`` ranks, ``-N`` ranks per node, ``-d`` CPUs (hw threads) per rank, ``-j`` hw threads
per core, ``-cc depth`` binds each rank to its ``-d`` CPUs; 128 ranks on a 64-core KNL are
``-N 128 -d 1 -j 2``.  aprun hands the ranks the environment it runs in (resource limits
excepted), so the script's exports reach them; every variable the job sets is also spelled
``-e VAR=value`` so the launch line shows it.  Flags as in aprun(1) and ALCF's Theta
affinity guide.
"""
from __future__ import annotations



def command(layout, ctx, program):
    depth = layout.cpus_per_rank
    argv = ["aprun", "-n", str(layout.size), "-N", str(layout.ranks_per_node),
            "-d", str(depth), "-j", str(layout.threads_per_core),
            "-cc", ctx.site.launcher_options.bind or "depth"]
    for key, value in ctx.env.items():
        argv += ["-e", f"{key}={value}"]
    return argv + list(ctx.site.launcher_options.extra_args) + list(ctx.extra_args) + program
