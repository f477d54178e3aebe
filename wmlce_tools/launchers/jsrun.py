"""jsrun (IBM Job Step Manager, Summit).

Resource sets: with ``gpu_binding: per-rank`` every rank is its own resource set holding its
cores and GPUs (``jsrun -n <ranks> -a 1 -c <cores> -g <gpus> -r <ranks per node>
-b packed:<cores>``, OLCF's one-rank-per-GPU form); with ``local-rank`` one resource set per
node holds all its ranks and GPUs (``-r 1 -a 6 -c 42 -g 6 -b packed:7``), and each rank picks
its GPU by local rank.  Flags as in the jsrun(1) man page and the OLCF Summit guide.
Ranks that share a GPU (``--ranks-per-gpu K``): per-rank resource sets hold K ranks and their
one GPU (``-n <ranks/K> -a K -c <K x cores> -g 1``), OLCF's "Multiple tasks, single GPU per RS"
(https://docs.olcf.ornl.gov/systems/summit_user_guide.html); the job asks for
``-alloc_flags gpumps`` (CUDA MPS: Summit's GPUs are otherwise EXCLUSIVE_PROCESS, one process each).
"""
from __future__ import annotations



def command(layout, ctx, program):
    opts = ctx.site.launcher_options
    if ctx.site.gpu_binding == "local-rank":
        rs, tasks = layout.nodes, layout.ranks_per_node
        cores, gpus, per_host = layout.cores_per_rank * tasks, layout.gpus_per_node, 1
    elif layout.ranks_per_gpu > 1:
        k = layout.ranks_per_gpu
        rs, tasks = layout.size // k, k
        cores, gpus, per_host = layout.cores_per_rank * k, 1, layout.ranks_per_node // k
    else:
        rs, tasks = layout.size, 1
        cores, gpus, per_host = layout.cores_per_rank, layout.gpus_per_rank, layout.ranks_per_node
    bind = opts.bind or f"packed:{layout.cores_per_rank}"
    argv = ["jsrun", "-n", str(rs), "-a", str(tasks), "-c", str(cores), "-g", str(gpus),
            "-r", str(per_host), "-b", bind, "-d", "packed"]
    if ctx.rankfile:
        argv = ["jsrun", "--erf_input", ctx.rankfile]
    if opts.cuda_aware_mpi:
        argv.append('--smpiargs=-gpu')
    return argv + list(opts.extra_args) + list(ctx.extra_args) + program
