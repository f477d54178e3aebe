"""mpiexec for machines without a site launcher (the ``local`` site, a workstation, an
allocation where the user prefers MPI's own launcher).

MPICH (Hydra) and Open MPI spell the same request differently:
- MPICH: ``mpiexec -n N -ppn K -hosts h1,h2 [-bind-to core]``
- Open MPI: ``mpiexec -n N --map-by ppr:K:node --host h1:K,h2:K [--bind-to core]
  [--oversubscribe]``, or ``--rankfile FILE`` when the layout pins cores.
Variables every rank must see (``ctx.env``) go as ``-genv KEY VALUE`` (MPICH) or
``-x KEY=VALUE`` (Open MPI, which does not pass the environment to remote hosts by itself).
Which one is installed is found by ``detect_flavor`` from ``mpiexec --version``.
A long host list cannot be one argument (Linux refuses any single argument over 128 KiB,
MAX_ARG_STRLEN: E2BIG), so with ``ctx.hostfile`` the hosts go in a file instead: MPICH Hydra's
``-f FILE`` (lines ``host:N``; MPICH wiki "Using the Hydra Process Manager", Intel MPI's
mpiexec.hydra reference) and Open MPI's ``--hostfile FILE`` (lines ``host slots=N``; mpirun(1),
"Specifying Hosts").  ddlrun writes the file (``ddlrun.rankfile.mpiexec_hostfile``).
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Optional



def version_text(mpiexec: str = "mpiexec", timeout: float = 10.0) -> Optional[str]:
    """What ``mpiexec --version`` prints, or None when no mpiexec is found or it does not answer."""
    exe = shutil.which(mpiexec)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout + out.stderr


def detect_flavor(mpiexec: str = "mpiexec", timeout: float = 10.0, text: Optional[str] = None) -> Optional[str]:
    """``"openmpi"``, ``"mpich"`` or None when no mpiexec is found or it does not answer
    (``text``: its ``--version`` output, when already read)."""
    text = (version_text(mpiexec, timeout) if text is None else text) or ""
    text = text.lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return "mpich"
    return None


def command(layout, ctx, program):
    hosts = list(ctx.hosts) if ctx.hosts else None
    multi_host = hosts is not None and len(set(hosts)) > 1
    argv = ["mpiexec", "-n", str(layout.size)]
    if ctx.mpi_flavor == "openmpi":
        if ctx.rankfile:
            argv += ["--rankfile", ctx.rankfile]
        else:
            argv += ["--map-by", f"ppr:{layout.ranks_per_node}:node" if multi_host else "slot"]
            if multi_host and ctx.hostfile:
                argv += ["--hostfile", ctx.hostfile]
            elif multi_host:
                argv += ["--host", ",".join(f"{h}:{layout.ranks_per_node}" for h in hosts)]
        if layout.oversubscribed:
            argv.append("--oversubscribe")
        argv += ["--bind-to", "none" if layout.oversubscribed else "core"]
        for key, value in ctx.env.items():
            argv += ["-x", f"{key}={value}"]
    else:
        if multi_host:
            argv += ["-ppn", str(layout.ranks_per_node)]
            argv += ["-f", ctx.hostfile] if ctx.hostfile else ["-hosts", ",".join(hosts)]
        if not layout.oversubscribed and not layout.emulated:
            argv += ["-bind-to", "core"]
        for key, value in ctx.env.items():
            argv += ["-genv", key, value]
    return argv + list(ctx.site.launcher_options.extra_args) + list(ctx.extra_args) + program
