"""The ranks' environment as a launch plan holds it, and the one rule that decides each value
(the foundation: the launch plan, ddlrun and the container runtimes read it).

Every variable a launch gives its ranks is one ``EnvValue``: its name, its value (which may name
host variables as ``$NAME``, expanded where the launch runs), where it comes from (a centre's page,
the site profile, the layout, ``--export``), and where it goes: the ranks (``rank``: the launcher's
environment and, through it, every rank, inside a container too), the container only (``inside``:
Frontier's and Polaris' library path inside Apptainer), or the launcher only (``host``: the
container runtime's own settings).  ``pass`` values have no value of their own: the variable
reaches the ranks when it is set where the launch runs (a sweep's ``WML_PARAM_*``, the job's
``WML_JOB_DIR``); a name ending in ``*`` is a prefix.

``decide`` is the one place that turns those values and the environment a launch runs in into
what the ranks get.  The rule, for every kind of value:

- a value given explicitly (``ddlrun -x NAME=VALUE``, ``wml submit --export``) wins;
- otherwise a variable already set where the launch runs (exported by the user before the job,
  ``wml submit`` on a scheduler that passes the environment on) wins over a default (a page's, the
  profile's, the layout's): ``NCCL_COLLNET_ENABLE=0`` exported stays 0;
- a ``prepend`` value goes in front of the path list unless it already leads it;
- a path list (a name ending in PATH) never gets an empty entry: ``$CRAY_LD_LIBRARY_PATH:...``
  with CRAY_LD_LIBRARY_PATH unset is not ``:...`` (an empty entry is the current directory).

Stdlib only: ddlrun decides at every launch.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

RANK, INSIDE, HOST = "rank", "inside", "host"
SET, PREPEND, PASS = "set", "prepend", "pass"
DEFAULT, GIVEN = "default", "given"

#: the variables of wml's contract (docs/ARCHITECTURE.md) a rank reads when the job sets them: the
#: launcher passes them on (Open MPI and podman-hpc, which pass nothing they are not told, by name)
CONTRACT = ("PYTHONUNBUFFERED", "DDL_OPTIONS", "DDL_TIMELINE", "DDL_STATS_DIR", "DDL_STATS_INTERVAL_S",
            "WML_JOB_DIR", "WML_JOB_ID", "WML_STOP_SIGNAL", "WML_CHECKPOINT_DIR", "WML_CHAIN_SEGMENT",
            "WML_CHAIN_LENGTH", "WML_RUN_ID", "WML_TRIAL", "WML_SWEEP_RUN", "WML_PARAM_*", "WML_HOROVOD",
            "WML_LMS", "WML_STAGED_FROM", "WML_STAGE_NODE_PREFIX")

_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class EnvValue:
    """One variable of a launch."""

    name: str
    value: str = ""
    source: str = ""
    kind: str = SET          # set | prepend | pass
    rule: str = DEFAULT      # default (a value set before the launch wins) | given (wins over it)
    where: str = RANK        # rank | inside (the container only) | host (the launcher only)

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "source": self.source, "kind": self.kind,
                "rule": self.rule, "where": self.where}


@dataclass(frozen=True)
class Applied:
    """What one variable is at a launch, and why."""

    name: str
    value: str
    source: str
    where: str = RANK


@dataclass(frozen=True)
class Decision:
    """What a launch gives: ``rank`` values set in the launcher's environment and passed to every
    rank (the launcher's own flags where it passes nothing by itself), ``host`` values for the
    launcher's environment only, ``inside`` values for the container only, ``names``: every
    variable the ranks must see (those above, and those set before the launch that the plan
    passes on: podman-hpc's ``-e NAME``), and ``report``: each variable's value and source."""

    rank: Tuple[Tuple[str, str], ...] = ()
    host: Tuple[Tuple[str, str], ...] = ()
    inside: Tuple[Tuple[str, str], ...] = ()
    names: Tuple[str, ...] = ()
    report: Tuple[Applied, ...] = ()

    def launcher_env(self, environ: Mapping[str, str]) -> Dict[str, str]:
        """The launcher's environment: ``environ`` with this launch's rank and host values."""
        env = dict(environ)
        env.update(self.rank)
        env.update(self.host)
        return env


def expand(value: str, env: Mapping[str, str], symbolic: bool = False) -> str:
    """``$NAME`` / ``${NAME}`` as a shell expands them (unset: empty; ``symbolic``: left as
    ``$NAME``, for a plan shown before the launch)."""
    return _REF.sub(lambda m: env.get(m.group(1) or m.group(2), f"${m.group(1) or m.group(2)}" if symbolic else ""),
                    value)


def is_path_list(name: str) -> bool:
    return name.endswith("PATH")


def join_path(*parts: str) -> str:
    """Path lists joined without empty entries (and without repeating an entry)."""
    seen: Dict[str, None] = {}
    for part in parts:
        for entry in part.split(":"):
            if entry:
                seen.setdefault(entry, None)
    return ":".join(seen)


def _value(v: EnvValue, env: Mapping[str, str], symbolic: bool = False) -> str:
    text = expand(v.value, env, symbolic)
    return join_path(text) if is_path_list(v.name) else text


def _passed(pattern: str, environ: Mapping[str, str]) -> List[str]:
    if pattern.endswith("*"):
        return sorted(n for n in environ if fnmatch.fnmatchcase(n, pattern))
    return [pattern] if pattern in environ else []


def decide(values: Iterable[EnvValue], environ: Mapping[str, str],
           inside_set: Optional[Mapping[str, str]] = None, symbolic: bool = False) -> Decision:
    """The one rule (module docstring).  ``environ``: where the launch runs; ``inside_set``: for
    ``inside`` values, the variables through which the user already set them for the container
    (Apptainer's ``APPTAINERENV_NAME``), by name; ``symbolic``: references to variables not in
    ``environ`` stay ``$NAME`` (the plan as a job script shows it, before the launch)."""
    values = list(values)
    last = {}                # a later default of a name replaces an earlier one (a case's value over the profile's)
    for i, v in enumerate(values):
        if v.kind != PASS and v.rule == DEFAULT:
            last[(v.name, v.where, v.kind)] = i
    given = {v.name for v in values if v.rule == GIVEN and v.where == RANK}
    out: Dict[str, Dict[str, str]] = {RANK: {}, HOST: {}, INSIDE: {}}
    names: Dict[str, None] = {}
    report: List[Applied] = []
    inside_set = inside_set or {}
    for i, v in enumerate(values):
        table = out[v.where]
        if v.kind == PASS:
            for name in _passed(v.name, environ):
                names.setdefault(name, None)
            continue
        if v.rule == DEFAULT and last.get((v.name, v.where, v.kind)) != i:
            continue
        if v.rule == GIVEN:
            table[v.name] = v.value
            names.setdefault(v.name, None)
            report.append(Applied(v.name, v.value, v.source, v.where))
            continue
        if v.where == RANK and v.name in given:
            continue             # reported with the given value
        already = inside_set.get(v.name) if v.where == INSIDE else environ.get(v.name)
        scope = {**environ, **out[RANK], **out[HOST]}
        if v.kind == SET:
            if already is not None:
                page = _value(v, scope, symbolic)
                says = "the page" if v.source.startswith("http") else v.source
                note = "" if already == page else f"; {says} says {v.value}"
                report.append(Applied(v.name, already, f"set before the launch{note}", v.where))
                if v.where != INSIDE:
                    names.setdefault(v.name, None)
                continue
            table[v.name] = _value(v, scope, symbolic)
        else:                    # prepend
            current = table.get(v.name, environ.get(v.name, f"${v.name}" if symbolic else "")
                                if v.where != INSIDE else "")
            front = _value(v, scope, symbolic)
            if not current.startswith(front):
                table[v.name] = join_path(front, current)
            elif v.name not in table and current:
                table[v.name] = current
        if v.where != INSIDE:
            names.setdefault(v.name, None)
        report.append(Applied(v.name, table.get(v.name, ""), v.source, v.where))
    return Decision(rank=tuple(out[RANK].items()), host=tuple(out[HOST].items()), inside=tuple(out[INSIDE].items()),
                    names=tuple(names), report=tuple(report))
