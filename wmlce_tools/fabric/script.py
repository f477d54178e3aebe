"""The job script's fabric lines: each variable of the case exported unless it is already set
when the job starts (the user's wins), path lists prepended, each line naming its page."""
from __future__ import annotations

from typing import Collection, List

from ..quoting import comment
from .resolve import NODE_DIRS_VAR, FabricEnv, node_dirs_value


def script_lines(fab: FabricEnv, user_exports: Collection[str] = ()) -> List[str]:
    """Lines for the job script (after the modules).  Values were checked by the schema to hold
    nothing a shell reads inside double quotes but ``$NAME``; ``user_exports``: names the job's
    ``--export`` sets, which win (their own lines follow)."""
    lines = [f"# Fabric: {fab.case} (site {fab.site}): each variable below is kept when it is already set"]
    lines += [f"#   {comment(page)} (checked {checked})" for page, checked in fab.pages]
    for v in fab.values:
        if v.name in user_exports:
            lines.append(f"# {v.name}: --export sets it (the page says {comment(v.value)})")
        elif v.kind == "set":
            lines.append(f'[ -n "${{{v.name}+set}}" ] || export {v.name}="{v.value}"    # {comment(v.page)}')
        else:
            lines.append(f'export {v.name}="{v.value}${{{v.name}:+:${v.name}}}"    # {comment(v.page)}')
    lines += [f"# inside the container: {v.name}={comment(v.value)}    # {comment(v.page)}" for v in fab.container_env]
    if fab.node_dirs:     # ddlrun's rank shim makes them on every node before the program starts
        lines.append(f'export {NODE_DIRS_VAR}="{node_dirs_value(fab)}"')
    return lines
