"""Launchers, registered by name: each turns a Layout into the command line that starts the
ranks.  The site profile's ``launcher`` picks one; ``ddlrun`` and the job scripts use the
same function, so what a script promises is what runs.

A layer with `schedulers` and `env`.  May import: `layout`, `site` and the foundation; never
`schedulers`, `env` or anything above.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from ..layout import Layout
from ..site.schema import SiteProfile


@dataclass(frozen=True)
class LaunchContext:
    """What a launcher needs beyond the Layout."""

    site: SiteProfile
    hosts: Optional[Sequence[str]] = None        # one entry per node, when the launcher needs them
    mpi_flavor: str = "mpich"                     # mpiexec only: "mpich" or "openmpi"
    env: Dict[str, str] = field(default_factory=dict)  # variables every rank must see (aprun -e)
    extra_args: Sequence[str] = ()                # --mpiarg from the user
    rankfile: Optional[str] = None                # Open MPI rankfile / jsrun ERF path, when written
    hostfile: Optional[str] = None                # mpiexec host file path, passed instead of a host list


LaunchFn = Callable[[Layout, LaunchContext, Sequence[str]], List[str]]
_REGISTRY: Dict[str, LaunchFn] = {}


def register(name: str) -> Callable[[LaunchFn], LaunchFn]:
    def deco(fn: LaunchFn) -> LaunchFn:
        _REGISTRY[name] = fn
        return fn
    return deco


def launch_command(layout: Layout, ctx: LaunchContext, program: Sequence[str]) -> List[str]:
    """argv that runs ``program`` once per rank of ``layout`` with ``ctx.site``'s launcher."""
    return _REGISTRY[ctx.site.launcher](layout, ctx, list(program))


def names() -> List[str]:
    return sorted(_REGISTRY)


from . import aprun, jsrun, mpiexec, pals, srun  # noqa: E402,F401  (register themselves)
