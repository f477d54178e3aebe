"""Schedulers and launchers by name: wml's own (the table below) and those that a package
installed beside wml adds through the entry points ``wml.schedulers`` and ``wml.launchers``
(as PSI/J and ReFrame load theirs by name).  Nothing registers itself by being imported: a
name is looked up here, and its module imported when it is first used.

A scheduler's entry point names a subclass of ``wmlce_tools.schedulers.Scheduler`` (its
template: ``template``, found in ``template_dir`` before wml's own ``templates/``); a
launcher's names a function ``(layout, ctx, program) -> argv`` as in ``wmlce_tools.launchers``.
A plugin's package says so in its metadata, e.g. in its pyproject.toml::

    [project.entry-points."wml.schedulers"]
    flux = "wml_flux.scheduler:Flux"
    [project.entry-points."wml.launchers"]
    flux-run = "wml_flux.launcher:command"

The foundation layer (the standard library and ``errors``): the site schema checks a name
here, and ``schedulers/`` and ``launchers/`` load theirs from here.  Entry points are read
only for a name that is not wml's own, so a command on a built-in site never scans them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

from .errors import WmlError

#: the entry point group of each kind
GROUPS = {"scheduler": "wml.schedulers", "launcher": "wml.launchers"}

#: wml's own, by name: "module:attribute"
BUILTIN: Dict[str, Dict[str, str]] = {
    "scheduler": {
        "cobalt": "wmlce_tools.schedulers.cobalt:Cobalt",
        "local": "wmlce_tools.schedulers.local:Local",
        "lsf": "wmlce_tools.schedulers.lsf:LSF",
        "pbs": "wmlce_tools.schedulers.pbs:PBS",
        "slurm": "wmlce_tools.schedulers.slurm:Slurm",
    },
    "launcher": {
        "aprun": "wmlce_tools.launchers.aprun:command",
        "jsrun": "wmlce_tools.launchers.jsrun:command",
        "mpiexec": "wmlce_tools.launchers.mpiexec:command",
        "pals": "wmlce_tools.launchers.pals:command",
        "srun": "wmlce_tools.launchers.srun:command",
    },
}


@dataclass(frozen=True)
class Plugin:
    """One entry point of a package installed beside wml."""

    name: str
    target: str          # "module:attribute"
    package: str         # the distribution that declares it, with its version

    def describe(self, kind: str) -> str:
        return f"the {kind} plugin {self.name!r} ({self.name} = {self.target} in {self.package})"


@lru_cache(maxsize=None)
def plugins(kind: str) -> Tuple[Plugin, ...]:
    """Every entry point of ``kind``'s group on this Python's path, in the order found."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=GROUPS[kind]):
        dist = getattr(ep, "dist", None)
        package = f"{dist.name} {dist.version}" if dist is not None else "an unnamed package"
        found.append(Plugin(ep.name, ep.value, package))
    return tuple(found)


def names(kind: str) -> List[str]:
    """wml's own names of ``kind`` and every plugin's, sorted."""
    return sorted(set(BUILTIN[kind]) | {p.name for p in plugins(kind)})


def known(kind: str, name: str) -> bool:
    return name in BUILTIN[kind] or any(p.name == name for p in plugins(kind))


def unknown_message(kind: str, name: str) -> str:
    return (f"Invalid enum value {name!r} (known: {', '.join(names(kind))}; a package installed beside wml adds "
            f"one through the entry point group {GROUPS[kind]})")


def load(kind: str, name: str):
    """The object registered as ``name`` (a Scheduler class, a launcher function); WmlError, one
    line naming the plugin, when the name is unknown, named by two plugins, or does not load.
    wml's own names are never looked up among the plugins (a plugin cannot replace one)."""
    target = BUILTIN[kind].get(name)
    if target is not None:
        return _attribute(target)
    mine = [p for p in plugins(kind) if p.name == name]
    if not mine:
        raise WmlError(f"{kind}: {unknown_message(kind, name)}")
    if len(mine) > 1:
        raise WmlError(f"{kind} {name!r} is named by {len(mine)} plugins: "
                       + "; ".join(f"{p.target} in {p.package}" for p in mine) + ": uninstall all but one")
    plugin = mine[0]
    try:
        return _attribute(plugin.target)
    except Exception as e:  # whatever a plugin's import raises: one line naming it
        why = " ".join(f"{type(e).__name__}: {e}".split())
        raise WmlError(f"{plugin.describe(kind)} does not load: {why}") from None


def _attribute(target: str):
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module.strip())
    for part in attr.strip().split(".") if attr.strip() else ():
        obj = getattr(obj, part)
    return obj
