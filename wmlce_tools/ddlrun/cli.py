"""The ``ddlrun`` command line (argparse: it starts on every job, so it must start fast).

    ddlrun [-H h1,h2 | --hostfile FILE] [-n N] [--ranks-per-node K] [--gpus-per-rank G] [--ranks-per-gpu K]
           [--cores-per-rank C] [--threads-per-core T] [--gpu-binding per-rank|local-rank]
           [--gpu-sharing mps|time-slice]
           [--site NAME] [--mode p:GxNxRxA]
           [--emulate-nodes K] [-x NAME[=VALUE]]... [--mpiarg "..."]... [--mpiexec PATH]
           [--timeline FILE] [--horovod] [--lms] [--oversubscribe] [--check] [--dry-run] [--no-prefix] [-v]
           [--container IMAGE [--container-runtime NAME]] [--restarts N] [--spare-nodes K]
           [--] PROGRAM [ARGS]...

Errors are one line, ``ddlrun: error: ...``, exit status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import List, Optional, Sequence

from ..errors import WmlError, run_main

DESCRIPTION = ("Run PROGRAM once per rank with the site's launcher (jsrun, srun, aprun or mpiexec), "
               "placing ranks and GPUs as wml's Layout says; the launch command is printed before it runs.")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise WmlError(message)


EPILOG = ("Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, "
          "DDL_OPTIONS, DDL_GPU_BINDING, DDL_LAYOUT_GPUS, CUDA_VISIBLE_DEVICES (per-rank binding) and, with "
          "--emulate-nodes, DDL_EMULATE_NODES, and the site profile's fabric variables for its case (NCCL_NET, "
          "FI_*, CCL_*, ...: a variable already set or given with -x wins).  Environment: WML_SITE (site), WML_MPIEXEC (mpiexec to use), "
          "WML_RANKS_PER_GPU (as --ranks-per-gpu), "
          "WML_DDLRUN_FAIL_GRACE_S (seconds the other ranks get after one fails, default 10), "
          "WML_DDLRUN_HOSTFILE_BYTES (a longer host list goes to mpiexec in a host file, default 32768), WML_HOROVOD=1 "
          "(as --horovod), WML_LMS=1 (as --lms), WML_RESTARTS (as --restarts; else the site's defaults.restarts).  "
          "With --restarts a rank is hung when it ends no step for max(K x its median step, a floor) after its "
          "first 5 steps (DDL_HANG_K, default 20; DDL_HANG_FLOOR_S, default 600; a checkpoint save or load: "
          "DDL_HANG_IO_FLOOR_S, default 1800); each attempt's ranks get WML_ATTEMPT; the attempts are "
          "written to $WML_JOB_DIR/attempts.json.  "
          "Exit status: the first failing rank's.")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ddlrun", description=DESCRIPTION, epilog=EPILOG)
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", help="hosts: h1,h2 or h1:4,h2:4 (slots) or 'nid[01-04]' "
                       "(default: from LSF/Slurm/Cobalt/PBS, else this machine)")
    hosts.add_argument("--hostfile", help="file with one host per line (host, host:N or host slots=N)")
    p.add_argument("-n", "-np", "--np", dest="np", type=int, help="ranks in all (default: ranks per node x hosts)")
    p.add_argument("--ranks-per-node", type=int, help="ranks per node (default: GPUs per node, or 1; "
                   "fewer when the allocation gives each node fewer slots, said in one line)")
    p.add_argument("--gpus-per-rank", type=int, help="GPUs per rank (default: GPUs per node / ranks per node)")
    p.add_argument("--ranks-per-gpu", type=int, metavar="K", help="K consecutive local ranks share one GPU "
                   "(default: $WML_RANKS_PER_GPU, else 1; ranks per node default to GPUs x K)")
    p.add_argument("--cores-per-rank", type=int, help="cores per rank (default: fair share)")
    p.add_argument("--threads-per-core", type=int, help="hardware threads per core (SMT level)")
    p.add_argument("--gpu-binding", choices=("per-rank", "local-rank"),
                   help="per-rank: each rank sees only its GPUs; local-rank: all the node's GPUs "
                   "visible (CUDA IPC between them), each rank picks its own by local rank "
                   "(default: the site's)")
    p.add_argument("--gpu-sharing", choices=("mps", "time-slice"), help="ranks sharing a GPU (--ranks-per-gpu): "
                   "mps: ddlrun starts one CUDA MPS control daemon per node before the ranks and stops it after "
                   "them (a daemon that does not start stops the job before any rank starts); time-slice: no MPS "
                   "(default: the site profile's gpu_sharing, else time-slice)")
    p.add_argument("--site", help="site profile (default: $WML_SITE, detection, then 'local')")
    p.add_argument("--mode", help="DDL topology p:<ranks per node>x<nodes per rack>x<racks>x<aisles> "
                   "(default: from the layout)")
    p.add_argument("--emulate-nodes", type=int, metavar="K", help="K virtual nodes on this one host")
    p.add_argument("-x", dest="exports", action="append", default=[], metavar="NAME[=VALUE]",
                   help="pass a variable to every rank (repeatable)")
    p.add_argument("--mpiarg", dest="mpiargs", action="append", default=[], metavar='"ARGS"',
                   help="extra launcher arguments, split like a shell would (repeatable)")
    p.add_argument("--mpiexec", help="the mpiexec to use (default: $WML_MPIEXEC, else mpiexec on PATH)")
    p.add_argument("--timeline", metavar="FILE", help="write a Chrome-trace timeline (DDL_TIMELINE)")
    p.add_argument("--horovod", action="store_true", help="run Horovod scripts unchanged: 'import horovod.torch' "
                   "(.tensorflow, .tensorflow.keras, .keras) gives ddl_runtime's Horovod API (also WML_HOROVOD=1)")
    p.add_argument("--lms", action="store_true", help="Large Model Support for torch scripts unchanged: WML CE's "
                   "torch.cuda.set_enabled_lms(True) and its twins work with no wml import (also WML_LMS=1)")
    p.add_argument("--container", metavar="IMAGE", help="run each rank in this image with the site's container "
                   "runtime (its container: section; 'none': no container, not even the site's default image)")
    p.add_argument("--container-runtime", metavar="NAME", help="the site's runtime to use (default: its container.runtime)")
    p.add_argument("--stage-image", choices=("on", "off"), help="with an image file (.sif, SquashFS): copy it to each "
                   "node's local storage (the site's stage_env place) once before any rank starts and run from the "
                   "copy, removed at the end when no job uses it (default: the site's container.stage)")
    p.add_argument("--restarts", type=int, metavar="N", help="relaunch the run up to N times in this allocation, "
                   "from its last checkpoint ($WML_CHECKPOINT_DIR; the job directory's checkpoints/ unless set), when "
                   "ranks die by a signal, hang (no step ended for much longer than usual: named with their Python "
                   "stack) or a node is lost; a failed node is left out, a spare takes its place; the same exception "
                   "at the same step twice ends the run (default: $WML_RESTARTS, else the site's defaults.restarts, "
                   "else 0)")
    p.add_argument("--spare-nodes", type=int, metavar="K", default=0, help="keep K nodes of the allocation out of "
                   "the layout, for a restart to take in place of a node that failed (emulated nodes: K more)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more ranks on a host than its slots")
    p.add_argument("--check", action="store_true", help="check every host first (reachable, same runtime "
                   "version, same GPU count; the site's network plugin found and loadable, its libfabric provider, "
                   "the fabric variables in force); stop on failure")
    p.add_argument("--dry-run", action="store_true", help="print the launch command; run nothing")
    p.add_argument("--no-prefix", dest="prefix", action="store_false", help="do not prefix output lines with [rank]")
    p.add_argument("-v", "--verbose", action="store_true", help="say where hosts and layout come from")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def _exports(a) -> tuple:
    from .horovod import check_settings, shim_exports, wanted

    exports = tuple(a.exports)
    if wanted(a.lms, os.environ, "WML_LMS"):
        from ddl_runtime.lms.shim import SHIM_DIR

        exports = (*shim_exports(exports, os.environ, SHIM_DIR), "WML_LMS=1")
    if not wanted(a.horovod, os.environ):
        return exports
    exports = shim_exports(exports, os.environ)
    check_settings(exports, os.environ)
    return exports


def _ranks_per_gpu(given: Optional[int], env) -> Optional[int]:
    """--ranks-per-gpu, else $WML_RANKS_PER_GPU (the ResourceRequest checks the value)."""
    if given is not None:
        return given
    text = env.get("WML_RANKS_PER_GPU", "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise WmlError(f"WML_RANKS_PER_GPU={text!r}: expected an integer >= 1 (ranks sharing each GPU)")
    return int(text)


def parse_args(argv: Sequence[str]):
    from .plan import DdlrunOptions

    argv = list(argv)
    program: Optional[List[str]] = None
    if "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    a = _parser().parse_args(argv)
    if a.version:
        return None
    if program is None:
        program = a.program
    elif a.program:
        raise WmlError(f"unexpected {a.program[0]!r} before '--'")
    mpiargs: List[str] = []
    for text in a.mpiargs:
        try:
            mpiargs += shlex.split(text)
        except ValueError as e:
            raise WmlError(f"--mpiarg {text!r}: {e}") from None
    # used in arithmetic before the ResourceRequest (which checks the rest) is built
    for opt, v in (("-n", a.np), ("--ranks-per-node", a.ranks_per_node), ("--emulate-nodes", a.emulate_nodes)):
        if v is not None and v < 1:
            raise WmlError(f"{opt} must be >= 1, got {v}")
    for opt, v in (("--restarts", a.restarts), ("--spare-nodes", a.spare_nodes)):
        if v is not None and v < 0:
            raise WmlError(f"{opt} must be >= 0, got {v}")
    return DdlrunOptions(program=tuple(program), hosts=a.hosts, hostfile=a.hostfile, np=a.np,
                         ranks_per_node=a.ranks_per_node, gpus_per_rank=a.gpus_per_rank,
                         ranks_per_gpu=_ranks_per_gpu(a.ranks_per_gpu, os.environ),
                         cores_per_rank=a.cores_per_rank, threads_per_core=a.threads_per_core,
                         gpu_binding=a.gpu_binding,
                         site=a.site, mode=a.mode, emulate_nodes=a.emulate_nodes,
                         exports=_exports(a), mpiargs=tuple(mpiargs), mpiexec=a.mpiexec,
                         timeline=a.timeline, oversubscribe=a.oversubscribe, prefix=a.prefix,
                         check=a.check, dry_run=a.dry_run, verbose=a.verbose,
                         container=a.container, container_runtime=a.container_runtime,
                         stage_image=a.stage_image, gpu_sharing=a.gpu_sharing, restarts=a.restarts,
                         spare_nodes=a.spare_nodes)


def _describe(plan) -> str:
    lay = plan.layout
    flavor = f" ({plan.mpi_flavor})" if plan.mpi_flavor else ""
    return (f"ddlrun: site {plan.site.name}, launcher {plan.site.launcher}{flavor}; hosts from "
            f"{plan.hosts.source}: {','.join(plan.hosts.hosts)}\n"
            f"ddlrun: {lay.describe()}; mode {plan.mode}; MASTER_ADDR={plan.master_addr} "
            f"MASTER_PORT={plan.master_port}\n")


def run_cli(argv: Sequence[str]) -> int:
    opts = parse_args(argv)
    if opts is None:
        from .._version import __version__

        sys.stdout.write(f"ddlrun (wml) {__version__}\n")
        return 0
    from .plan import build_plan

    check_only = opts.check and not opts.program and not opts.dry_run
    if check_only:        # `ddlrun --check`: the hosts only, no program run after
        import dataclasses

        opts = dataclasses.replace(opts, program=(sys.executable, "-c", "pass"))
    from . import heal

    opts = _with_restarts(opts, os.environ)
    dirs = None
    if heal.wanted(opts) and not check_only:
        opts, dirs = heal.prepare(opts, os.environ, sys.stderr)
    plan = build_plan(opts, os.environ)
    for note in plan.notes:
        sys.stderr.write(f"ddlrun: {note}\n")
    if opts.verbose:
        sys.stderr.write(_describe(plan))
    if opts.check:
        from .preflight import check_hosts

        if not check_hosts(plan, sys.stderr, conclude=plan.container is None or opts.dry_run):
            return 1
        if plan.gpu_sharing is not None:      # ranks sharing a GPU: MPS or time-sliced, and why
            sys.stderr.write(f"ddlrun: {plan.gpu_sharing.describe()}\n")
    if plan.container is not None and not opts.dry_run:   # before any rank starts: one line, naming the node
        import dataclasses

        from .plan import check_container_nodes, stage_image_nodes

        if check_only:     # `ddlrun --check --container IMAGE`: the image's python, on every node
            plan = dataclasses.replace(plan, plan=dataclasses.replace(plan.plan, program=(plan.container.spec.python,
                                                                                          "-c", "pass")))
        if plan.image_copy is not None:     # the copy on every node first; the check reads the copy
            stage_image_nodes(plan)
        try:
            check_container_nodes(plan)
        except BaseException:
            _release_image(plan)
            raise
        if check_only:
            sys.stderr.write(f"ddlrun: container {plan.container.image} ({plan.container.runtime}): "
                             f"ready on {len(set(plan.node_hosts))} node(s)\n")
        if opts.check:       # the hosts' check left its last line to the container's
            sys.stderr.write("ddlrun: check passed\n")
    if check_only:
        _release_image(plan)
        return 0
    if not opts.check:
        from ..fabric.check import launch_warning

        warning = launch_warning(plan.fabric, plan.layout.gpus_per_node, plan.launcher_env(os.environ))
        if warning:
            sys.stderr.write(f"ddlrun: {warning}\n")
    if opts.dry_run:
        from .runner import dry_run_text

        sys.stdout.write(dry_run_text(plan))
        return 0
    from .mps import around_ranks
    from .plan import _once_per_node
    from .runner import run

    try:
        if dirs is None:
            with around_ranks(plan, sys.stderr, _once_per_node):      # CUDA MPS's daemons, where ddlrun starts them
                code = run(plan)
        else:          # each attempt starts and stops them on its own nodes (a spare's too)
            code = heal.run(plan, opts, dirs)
    finally:
        _release_image(plan)
        if dirs is not None:
            heal.clean_up(dirs)
    from ..runstats.endline import print_end_line

    env = os.environ if dirs is None else {**os.environ, "DDL_STATS_DIR": str(dirs.stats)}
    print_end_line(env, sys.stderr)    # the run in one line, from the ranks' records (wml report)
    return code


def _with_restarts(opts, env):
    """--restarts, else $WML_RESTARTS, else the site's defaults.restarts, else 0."""
    import dataclasses

    if opts.restarts is not None:
        return opts
    from .heal import RESTARTS_ENV

    text = env.get(RESTARTS_ENV, "").strip()
    if text:
        if not text.isdigit():
            raise WmlError(f"WML_RESTARTS={text!r}: expected a number of restarts (0 or more)")
        return dataclasses.replace(opts, restarts=int(text))
    from ..site.registry import choose_site

    return dataclasses.replace(opts, restarts=choose_site(opts.site, env).defaults.restarts or 0)


def _release_image(plan) -> None:
    """The end of this run's use of the image's node-local copies (a failure: one line, the run's
    status stands)."""
    if plan.image_copy is None:
        return
    from ..errors import WmlError
    from .plan import stage_image_nodes

    try:
        stage_image_nodes(plan, release=True)
    except WmlError as exc:
        sys.stderr.write(f"ddlrun: warning: {exc}\n")


def main(argv: Optional[Sequence[str]] = None) -> None:
    run_main("ddlrun", lambda: run_cli(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
