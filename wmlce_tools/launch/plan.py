"""The launch plan: SiteProfile + the job's launch options + Layout -> everything about how the
ranks start, decided once by ``build_launch``.

Every path renders this one plan: the job script (its modules, the environment table in its
comment, the launcher line it promises), ddlrun (which builds it again inside the allocation from
the same options, by the same function, and runs it), packed and array sweeps and chain segments
(whose job scripts are job scripts), and the Python API (which submits sweeps).  A feature wired
in here reaches every path.

What the plan holds, in the order a launch uses it:

- ``modules``: what the job script loads, in order: the site's, its fabric's, the container
  runtime's (``module use`` first), the user's ``--module``; each once, with where it came from;
- ``env``: every variable the ranks (or the container runtime) get, each with its source and
  where it goes (``rankenv.py``; ``decide`` applies the one user-wins rule where the launch
  runs);
- ``container``: the image, its runtime, binds (the fabric's included) and runtime switches (the
  fabric's Shifter modules, the Container Engine's annotations);
- ``program`` and the interpreter of the rank shim (the image's python inside a container);
- ``passed``: the job's variables that reach every rank when set (the run record's directory, a
  chain's contract, a sweep's parameters): the launcher passes them, and a container runtime that
  passes nothing by itself (podman-hpc) is told their names.

The plan is plain data (``as_dict``: the run's record of what it launched).

The launch layer, between `ddlrun` (above) and `container`, `launchers` and the layers below;
imports no scheduler and nothing of the job side above it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ..fabric.resolve import FabricEnv, fabric_for, node_dirs_value, NODE_DIRS_VAR
from ..layout import Layout
from ..site.schema import SiteProfile
from ..rankenv import CONTRACT, GIVEN, HOST, INSIDE, PASS, PREPEND, SET, Decision, EnvValue, decide

if TYPE_CHECKING:
    from ..container.launch import ContainerLaunch

SHIM_MODULE = "wmlce_tools.ddlrun.rankexec"


@dataclass(frozen=True)
class ModuleStep:
    """``module use PATH`` or ``module load NAME`` in the job script, and why."""

    action: str          # use | load
    name: str
    source: str

    @property
    def line(self) -> str:
        from ..quoting import sh_quote

        return f"module {self.action} {sh_quote(self.name)}"


@dataclass(frozen=True)
class LaunchOptions:
    """What a launch is built from besides the site and the layout: the options the job script
    passes to ddlrun (so that ddlrun builds the same plan) and those only the job script needs."""

    program: Tuple[str, ...]
    given: Tuple[Tuple[str, str], ...] = ()      # -x NAME=VALUE / --export: the ranks get these
    given_by: str = "-x"                          # how the user gave them (in the sources)
    modules: Tuple[str, ...] = ()                 # --module, loaded by the job script
    container: Optional[str] = None               # --container IMAGE (none: not even the site's)
    container_runtime: Optional[str] = None
    workdir: str = ""                             # the ranks' working directory (a container's -w)
    sweep_params: Tuple[str, ...] = ()            # a sweep's parameter names (WML_PARAM_<NAME>)
    record_dir: Optional[str] = None              # the run record's directory ($WML_JOB_DIR)
    plugin_dir: Optional[str] = None              # the fabric's network plugin, found where ddlrun runs
    own: Tuple[Tuple[str, str, str], ...] = ()    # what the launch sets itself: (name, value, why) (CUDA MPS's pipes)


@dataclass(frozen=True)
class LaunchPlan:
    """One launch, decided (module docstring)."""

    site: SiteProfile
    layout: Layout
    program: Tuple[str, ...]
    modules: Tuple[ModuleStep, ...]
    env: Tuple[EnvValue, ...]
    container: Optional["ContainerLaunch"] = None
    fabric: Optional[FabricEnv] = None
    sweep_params: Tuple[str, ...] = ()
    record_dir: Optional[str] = None
    notes: Tuple[str, ...] = ()

    @property
    def python(self) -> str:
        """The interpreter of the rank shim: the image's inside a container, else this one."""
        return self.container.spec.python if self.container is not None else sys.executable

    @property
    def passed(self) -> Tuple[str, ...]:
        return tuple(v.name for v in self.env if v.kind == PASS)

    def decide(self, environ) -> Decision:
        """What the ranks get where the launch runs (``rankenv.py``'s one rule)."""
        inside_set = self.container.inside_set(environ) if self.container is not None else {}
        return decide(self.env, environ, inside_set)

    def promised(self, environ=None) -> Decision:
        """What the ranks get when nothing but ``environ`` (the job's own variables) is set before
        the launch, other variables left as ``$NAME`` (the job script's comment)."""
        return decide(self.env, environ or {}, symbolic=True)

    def as_dict(self) -> dict:
        """Plain data: what the run launched (the job directory's launch.json)."""
        lay = self.layout
        out = {"site": self.site.name, "launcher": self.site.launcher, "program": list(self.program),
               "layout": {"nodes": lay.nodes, "ranks_per_node": lay.ranks_per_node, "size": lay.size,
                          "gpus_per_rank": lay.gpus_per_rank, "ranks_per_gpu": lay.ranks_per_gpu,
                          "cores_per_rank": lay.cores_per_rank, "threads_per_core": lay.threads_per_core,
                          "mode": lay.mode, "emulated": lay.emulated},
               "modules": [{"action": m.action, "name": m.name, "source": m.source} for m in self.modules],
               "env": [v.as_dict() for v in self.env], "sweep_params": list(self.sweep_params),
               "record_dir": self.record_dir, "container": None}
        c = self.container
        if c is not None:
            out["container"] = {"runtime": c.runtime, "image": c.image, "workdir": c.workdir,
                                "binds": [b.spelled() for b in c.binds()], "options": dict(c.options),
                                "python": c.spec.python}
        return out


def _modules(site: SiteProfile, fabric: Optional[FabricEnv], container, user: Sequence[str]) -> Tuple[ModuleStep, ...]:
    steps: List[ModuleStep] = []
    loaded: Dict[str, None] = {}

    def load(name: str, source: str) -> None:
        if name not in loaded:
            loaded[name] = None
            steps.append(ModuleStep("load", name, source))

    for m in site.modules:
        load(m, f"site profile {site.name}")
    for m, page in (fabric.modules if fabric else ()):
        load(m, page)
    if container is not None:
        page = container.spec.docs[0]
        used: Dict[str, None] = {}
        for p in container.spec.module_use:
            if p not in used:
                used[p] = None
                steps.append(ModuleStep("use", p, page))
        for m in container.spec.modules:
            load(m, page)
    for m in user:
        load(m, "--module")
    return tuple(steps)


def _env(site: SiteProfile, layout: Layout, fabric: Optional[FabricEnv], container,
         opts: LaunchOptions) -> Tuple[EnvValue, ...]:
    out: List[EnvValue] = [EnvValue(k, v, f"site profile {site.name} (environment:)") for k, v in site.environment.items()]
    if site.scheduler != "local":
        # each rank's OpenMP/BLAS threads = its hw threads (OLCF, ALCF and NERSC guides set it in
        # every hybrid example; the launchers set nothing)
        out.append(EnvValue("OMP_NUM_THREADS", str(layout.cpus_per_rank),
                            f"the layout ({layout.cpus_per_rank} hw thread(s) per rank)"))
    if fabric is not None:
        for v in fabric.values:
            out.append(EnvValue(v.name, v.value, f"{v.page} (checked {v.checked})",
                                kind=PREPEND if v.kind == "prepend" else SET))
        dirs = node_dirs_value(fabric)
        if dirs:
            out.append(EnvValue(NODE_DIRS_VAR, dirs, "wml: the directories the rank shim makes on each node"))
    if container is not None:
        page = container.spec.docs[0]
        prefix = container.env_prefix
        for k, v in container.spec.env.items():
            if prefix and k.startswith(prefix):      # APPTAINERENV_NAME: NAME inside, as the fabric's are
                out.append(EnvValue(k[len(prefix):], v, f"{page} (checked {container.spec.checked})", where=INSIDE))
            else:
                out.append(EnvValue(k, v, f"{page} (checked {container.spec.checked})", where=HOST))
        for v in (fabric.container_env if fabric else ()):
            out.append(EnvValue(v.name, v.value, f"{v.page} (checked {v.checked})", where=INSIDE))
        plugin = fabric.plugin_expected if fabric is not None else None
        if plugin is not None and opts.plugin_dir:
            # OLCF's RCCL container example: the plugin's directory first on the library path inside
            out.append(EnvValue("LD_LIBRARY_PATH", opts.plugin_dir, f"{plugin.library} found where ddlrun runs "
                                f"({plugin.page})", kind=PREPEND, where=INSIDE))
    out += [EnvValue(name, "", "wml's contract: passed on when set", kind=PASS) for name in CONTRACT]
    out += [EnvValue(k, v, opts.given_by, rule=GIVEN) for k, v in opts.given if k not in {n for n, _, _ in opts.own}]
    out += [EnvValue(k, v, why, rule=GIVEN) for k, v, why in opts.own]
    return tuple(out)


def build_launch(site: SiteProfile, layout: Layout, opts: LaunchOptions) -> LaunchPlan:
    """The one function that builds a launch (module docstring).  Raises WmlError for a container
    the site cannot run."""
    from ..container.launch import container_launch

    workdir = opts.workdir or os.getcwd()
    container = container_launch(site, opts.container, opts.container_runtime, workdir)
    fabric = fabric_for(site, layout.nodes, container=container is not None)
    if container is not None and fabric is not None:
        container = container.with_fabric(fabric)
        if opts.plugin_dir and fabric.plugin_expected is not None:
            container = container.with_bind(opts.plugin_dir)
    return LaunchPlan(site=site, layout=layout, program=tuple(opts.program),
                      modules=_modules(site, fabric, container, opts.modules),
                      env=_env(site, layout, fabric, container, opts), container=container, fabric=fabric,
                      sweep_params=tuple(opts.sweep_params), record_dir=opts.record_dir)
