"""Launchers, by name: each turns a Layout into the command line that starts the ranks (a
function ``command(layout, ctx, program) -> argv`` in its module).  The site profile's
``launcher`` picks one, found in the one registry, ``wmlce_tools/plugins.py`` (wml's own by
name, and those of packages installed beside wml: the ``wml.launchers`` entry points);
``ddlrun`` and the job scripts use the same function, so what a script promises is what
runs.  Importing this package imports no launcher module.

A layer with `schedulers` and `env`.  May import: `layout`, `site` and the foundation; never
`schedulers`, `env` or anything above.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from ..errors import WmlError
from ..layout import Layout
from ..plugins import load, names as launcher_names
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
    exclude: Sequence[str] = ()                   # the allocation's hosts the launch must not use (spares, failed)


LaunchFn = Callable[[Layout, LaunchContext, Sequence[str]], List[str]]


def launch_command(layout: Layout, ctx: LaunchContext, program: Sequence[str]) -> List[str]:
    """argv that runs ``program`` once per rank of ``layout`` with ``ctx.site``'s launcher."""
    fn = load("launcher", ctx.site.launcher)
    if not callable(fn):
        raise WmlError(f"the launcher plugin {ctx.site.launcher!r} names {fn!r}, not a function "
                       f"(layout, ctx, program) -> argv")
    return list(fn(layout, ctx, list(program)))


def names() -> List[str]:
    return launcher_names("launcher")
