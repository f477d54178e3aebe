"""A site's ``fabric:`` section -> the modules and variables of one job's case (one node or
several, bare or in a container), each with its page.  The launch plan (``wmlce_tools/launch``)
takes them as it takes the profile's other values, and its one rule decides what a rank gets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..site.fabric import FabricPlugin
from ..site.schema import SiteProfile

NODE_DIRS_VAR = "WML_NODE_DIRS"     # the rank shim makes these variables' directories on each node


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


def node_dirs_value(fab: FabricEnv) -> str:
    """``WML_NODE_DIRS``: the variables whose directories the rank shim makes on each node."""
    return ":".join(fab.node_dirs)
