"""aprun (Cray ALPS, Theta).

``-n`` ranks, ``-N`` ranks per node, ``-d`` CPUs (hw threads) per rank, ``-j`` hw threads
per core, ``-cc depth`` binds each rank to its ``-d`` CPUs.  Plain exports do not reach
Theta's compute nodes (the script runs on a MOM node), so every variable a rank must see is
passed with ``-e VAR=value``.  Flags as in aprun(1) and ALCF's Theta affinity guide.
"""
from __future__ import annotations

from . import register


@register("aprun")
def command(layout, ctx, program):
    depth = layout.cores_per_rank * layout.threads_per_core
    argv = ["aprun", "-n", str(layout.size), "-N", str(layout.ranks_per_node),
            "-d", str(depth), "-j", str(layout.threads_per_core),
            "-cc", ctx.site.launcher_options.bind or "depth"]
    for key, value in ctx.env.items():
        argv += ["-e", f"{key}={value}"]
    return argv + list(ctx.site.launcher_options.extra_args) + list(ctx.extra_args) + program
