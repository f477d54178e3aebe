"""A launch plan in words: the modules, and every variable the ranks get with where it came from
(ddlrun's dry run, the job script's comment)."""
from __future__ import annotations

from typing import List

from ..rankenv import HOST, INSIDE, Decision
from .plan import LaunchPlan

_WHERE = {HOST: " (the launcher's only)", INSIDE: " (inside the container)"}


def env_lines(plan: LaunchPlan, decision: Decision) -> List[str]:
    """A heading (the fabric's case, where the site has one), then one line per variable the plan
    sets (after the rule: a value set before the launch shows as such), the per-node directories,
    the network plugin's directory in a container; nothing for a plan that sets none."""
    fab = plan.fabric
    lines = [f"  {a.name}={a.value}{_WHERE.get(a.where, '')}  <- {a.source}" for a in decision.report]
    plugin = fab.plugin_expected if fab is not None and plan.container is not None else None
    if plugin is not None and not any(v.source.startswith(f"{plugin.library} found") for v in plan.env):
        lines.append(f"  the network plugin {plugin.library}: its directory, found where ddlrun runs, is bound in "
                     "and put first on LD_LIBRARY_PATH inside")
    if fab is not None and fab.node_dirs:
        lines.append(f"  made on each node before the program: {', '.join('$' + v for v in fab.node_dirs)}")
    if not lines and fab is None:
        return []
    head = f"fabric (site {fab.site}): {fab.case}" if fab is not None else "every rank gets"
    return [head, *lines]


def module_lines(plan: LaunchPlan) -> List[str]:
    return [f"  {m.line}  <- {m.source}" for m in plan.modules]
