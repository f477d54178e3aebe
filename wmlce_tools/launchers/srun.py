"""srun (Slurm).

``-N`` nodes, ``-n`` tasks, ``--ntasks-per-node``, ``--cpus-per-task`` (Slurm CPUs: hw
threads), ``--gpus-per-task`` (each task sees only its GPUs), ``--cpu-bind``, ``--kill-on-bad-exit=1`` (one dead rank ends the step).  Where a core has
several hw threads, ``--threads-per-core`` says how many a task uses (the job script's
``#SBATCH --threads-per-core`` says the same, or the allocation holds fewer cores than srun
asks for).  ``--cpus-per-task`` is always given: since Slurm 22.05 srun no longer inherits it
from the allocation (only from SRUN_CPUS_PER_TASK).  Flags as in srun(1).
Ranks that share a GPU (``--ranks-per-gpu K``): ``--gpus-per-task`` would give each task its own
GPU, so the step asks for the node's GPUs (``--gpus-per-node``) and ddlrun's per-rank shim narrows
CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES to the GPU the Layout gives K consecutive local ranks
(srun(1) --gpus-per-node; sites: see the ``docs`` of each profile).
"""
from __future__ import annotations



def command(layout, ctx, program):
    opts = ctx.site.launcher_options
    argv = ["srun", "-N", str(layout.nodes), "-n", str(layout.size),
            f"--ntasks-per-node={layout.ranks_per_node}",
            f"--cpus-per-task={layout.cpus_per_rank}"]
    if layout.node_spec.threads_per_core > 1:
        argv.append(f"--threads-per-core={layout.threads_per_core}")
    if layout.gpus_per_rank:
        if ctx.site.gpu_binding == "local-rank" or layout.ranks_per_gpu > 1:
            argv.append(f"--gpus-per-node={layout.gpus_per_node}")
        else:
            argv.append(f"--gpus-per-task={layout.gpus_per_rank}")
    argv.append(f"--cpu-bind={opts.bind or 'cores'}")
    # A rank that dies without the runtime's abort (segfault, OOM kill, os._exit) must end the
    # step, or the other ranks wait in their collective until the walltime runs out.
    argv.append("--kill-on-bad-exit=1")
    if ctx.exclude:     # spare and failed nodes of the allocation (ddlrun --spare-nodes, a restart)
        argv.append(f"--exclude={','.join(ctx.exclude)}")
    if opts.srun_mpi:
        argv.append(f"--mpi={opts.srun_mpi}")
    if opts.gpu_bind and layout.gpus_per_rank and layout.ranks_per_gpu == 1:
        argv.append(f"--gpu-bind={opts.gpu_bind}")
    return argv + list(opts.extra_args) + list(ctx.extra_args) + program
