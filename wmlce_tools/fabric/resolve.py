"""A site's ``fabric:`` section -> the modules and variables of one job's case (one node or
several, bare or in a container), each with its page; and the one rule for what a rank gets:
a variable the user set (exported before the job, ``--export``, ``ddlrun -x``) wins."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from ..site.fabric import FabricPlugin
from ..site.schema import SiteProfile

NODE_DIRS_VAR = "WML_NODE_DIRS"     # the rank shim makes these variables' directories on each node
_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class FabricValue:
    """One variable of the case: ``set`` (``value`` unless the user set it) or ``prepend``
    (``value`` put in front of the path list)."""

    name: str
    value: str
    kind: str          # set | prepend
    page: str
    checked: str


@dataclass(frozen=True)
class FabricEnv:
    """The fabric of one job: what the job script loads and exports, what ddlrun gives every rank."""

    site: str
    library: str
    network: str
    nodes: int
    container: bool
    modules: Tuple[Tuple[str, str], ...]          # (module, page)
    values: Tuple[FabricValue, ...]
    binds: Tuple[str, ...]
    container_env: Tuple[FabricValue, ...]       # set inside the container only
    container_options: Tuple[Tuple[str, str], ...]
    node_dirs: Tuple[str, ...]                   # variables naming per-node directories
    plugin: Optional[FabricPlugin]
    pages: Tuple[Tuple[str, str], ...]           # (page, checked), each once

    @property
    def case(self) -> str:
        where = "inside a container" if self.container else "bare"
        return f"{self.library} on {self.nodes} node(s), {where}"

    @property
    def plugin_expected(self) -> Optional[FabricPlugin]:
        p = self.plugin
        if p is None or p.where not in ("any", "container" if self.container else "bare"):
            return None
        return p


def fabric_for(site: SiteProfile, nodes: int, container: bool = False) -> Optional[FabricEnv]:
    """The settings of ``site`` that apply to a job on ``nodes`` nodes (None: the site has no
    fabric section).  A later setting's value for a variable replaces an earlier one's."""
    spec = site.fabric
    if spec is None:
        return None
    modules: Dict[str, str] = {}
    values: Dict[Tuple[str, str], FabricValue] = {}
    binds: Dict[str, None] = {}
    inside: Dict[str, FabricValue] = {}
    options: Dict[str, str] = {}
    pages: Dict[str, str] = {}
    for s in spec.settings:
        if not s.applies(nodes, container):
            continue
        pages.setdefault(s.page, s.checked)
        for m in s.modules:
            modules.setdefault(m, s.page)
        for kind, table in (("set", s.env), ("prepend", s.prepend)):
            for name, value in table.items():
                values.pop((kind, name), None)       # keep the order of the last setting
                values[(kind, name)] = FabricValue(name, value, kind, s.page, s.checked)
        if container:
            binds.update(dict.fromkeys(s.binds))
            options.update(s.container_options)
            for name, value in s.container_env.items():
                inside.pop(name, None)
                inside[name] = FabricValue(name, value, "set", s.page, s.checked)
    set_names = {v.name for v in values.values() if v.kind == "set"}
    node_dirs = tuple(dict.fromkeys(v for d in spec.node_dirs for v in d.variables if v in set_names))
    for d in spec.node_dirs:
        pages.setdefault(d.page, d.checked)
    plugin = spec.plugin
    if plugin is not None:
        pages.setdefault(plugin.page, plugin.checked)
    return FabricEnv(site=site.name, library=spec.library, network=spec.network, nodes=nodes, container=container,
                     modules=tuple(modules.items()), values=tuple(values.values()), binds=tuple(binds), container_env=tuple(inside.values()),
                     container_options=tuple(options.items()), node_dirs=node_dirs, plugin=plugin,
                     pages=tuple(pages.items()))


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` as a shell expands them (unset: empty)."""
    return _REF.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


@dataclass(frozen=True)
class Applied:
    """What a rank gets for one fabric variable, and why."""

    name: str
    value: str
    source: str          # the page, or who set it instead


def rank_values(fab: FabricEnv, env: Mapping[str, str], given: Mapping[str, str],
                given_by: str = "-x") -> Tuple[Tuple[Tuple[str, str], ...], Tuple[Applied, ...]]:
    """(variables to pass to every rank, what each fabric variable is and why).  ``env``: the
    environment here: a value set there (by the user, or by the job script from the same
    profile) is kept and reaches the ranks as the rest of the job's environment does, so only
    what this adds is passed; ``given``: the variables passed explicitly (``-x``), which win."""
    out: Dict[str, str] = {}
    report: List[Applied] = []
    for v in fab.values:
        if v.name in given:
            report.append(Applied(v.name, given[v.name], f"{given_by} {v.name} (not {v.value})"))
            continue
        if v.kind == "set":
            if v.name in env:
                note = "" if env[v.name] == expand(v.value, env) else f"; the page says {v.value}"
                report.append(Applied(v.name, env[v.name], f"set before the launch{note}"))
            else:
                out[v.name] = expand(v.value, {**env, **out})
                report.append(Applied(v.name, out[v.name], f"{v.page} (checked {v.checked})"))
            continue
        current = out.get(v.name, env.get(v.name, ""))
        front = expand(v.value, env)
        if not current.startswith(front):
            out[v.name] = f"{front}:{current}" if current else front
        report.append(Applied(v.name, f"{front}:...", f"{v.page} (checked {v.checked})"))
    dirs = node_dirs_value(fab)
    if dirs and env.get(NODE_DIRS_VAR) != dirs:
        out[NODE_DIRS_VAR] = dirs
    return tuple(out.items()), tuple(report)


def node_dirs_value(fab: FabricEnv) -> str:
    """``WML_NODE_DIRS``: the variables whose directories the rank shim makes on each node."""
    return ":".join(fab.node_dirs)


def report_lines(fab: FabricEnv, applied: Tuple[Applied, ...]) -> List[str]:
    """The dry run's lines: the case, each module and variable with the page it came from."""
    lines = [f"fabric (site {fab.site}): {fab.case}"]
    lines += [f"  module {m} (the job script loads it)  <- {page}" for m, page in fab.modules]
    lines += [f"  {a.name}={a.value}  <- {a.source}" for a in applied]
    if fab.node_dirs:
        lines.append(f"  made on each node before the program: {', '.join('$' + v for v in fab.node_dirs)}")
    return lines
