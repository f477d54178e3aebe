"""The fabric on the nodes: the network plugin found and loadable, the libfabric provider
present (``ddlrun --check``), and the one warning line before a multi-node GPU launch whose
plugin is missing, naming the module that provides it."""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

from .resolve import FabricEnv


def plugin_spec(fab: Optional[FabricEnv], rank_env: Mapping[str, str]) -> Optional[dict]:
    """What ``probe.probe`` needs to look for the plugin as the ranks will (None: no plugin expected)."""
    p = fab.plugin_expected if fab is not None else None
    if p is None:
        return None
    return {"library": p.library, "paths": list(p.paths), "provider": p.provider,
            "ld_library_path": rank_env.get("LD_LIBRARY_PATH")}


def missing_line(fab: FabricEnv, hosts: Sequence[str]) -> str:
    p = fab.plugin_expected
    assert p is not None
    where = f"on {', '.join(hosts)}" if hosts else "here"
    fix = f"load module {p.module}" if p.module else f"it belongs in {', '.join(p.paths) or 'LD_LIBRARY_PATH'}"
    return (f"warning: {fab.library}'s network plugin {p.library} not found {where} (LD_LIBRARY_PATH"
            f"{', ' + ', '.join(p.paths) if p.paths else ''}): between nodes {fab.library.upper()} falls back to "
            f"TCP sockets or fails to start; {fix} ({p.page})")


def needs_plugin(fab: Optional[FabricEnv], gpus_per_node: int) -> bool:
    """A multi-node GPU launch on a site that names a plugin."""
    return fab is not None and fab.plugin_expected is not None and fab.nodes > 1 and gpus_per_node > 0


def launch_warning(fab: Optional[FabricEnv], gpus_per_node: int, rank_env: Mapping[str, str]) -> Optional[str]:
    """The one line said before the ranks start when the plugin is not on this (the first) node."""
    if not needs_plugin(fab, gpus_per_node):
        return None
    from .probe import find_plugin

    assert fab is not None and fab.plugin_expected is not None
    spec = plugin_spec(fab, rank_env)
    assert spec is not None
    look = dict(rank_env)
    if spec["ld_library_path"] is not None:
        look["LD_LIBRARY_PATH"] = spec["ld_library_path"]
    if find_plugin(spec["library"], spec["paths"], look) is not None:
        return None
    return missing_line(fab, [])


def check_lines(fab: FabricEnv, results: Mapping[str, Optional[dict]], applied: Sequence) -> Tuple[str, ...]:
    """``ddlrun --check``'s fabric lines: per host the plugin (path and whether it loads) and the
    provider, the one warning line when it is missing somewhere, and the variables in force
    (``applied``: the launch's decision's report: name, value, source)."""
    p = fab.plugin_expected
    lines = [f"fabric: {fab.case} (site {fab.site})"]
    missing = []
    if p is not None:
        by_text: Dict[str, list] = {}
        for host, r in results.items():
            if r is None:
                text = "not probed (host unreachable)"
            elif r.get("plugin") is None:
                missing.append(host)
                text = f"plugin {p.library}: not found"
            else:
                err = r.get("load_error")
                text = f"plugin {p.library}: found at {r['plugin']} ({'loads' if not err else 'does not load: ' + str(err)})"
            if p.provider:
                prov = None if r is None else r.get("provider")
                text += f"; libfabric provider {p.provider}: " + {True: "present", False: "absent", None: "unknown (no fi_info)"}[prov]
            by_text.setdefault(text, []).append(host)
        for text, hosts in by_text.items():
            lines.append(f"fabric: {', '.join(hosts)}: {text}")
    lines += [f"fabric: {a.name}={a.value} <- {a.source}" for a in applied]
    if missing:
        lines.append(missing_line(fab, missing))
    return tuple(lines)
