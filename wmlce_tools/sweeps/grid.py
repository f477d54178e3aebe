"""A sweep's trials: a grid of ``--param name=v1,v2`` (every combination, the first name
varying slowest), rows of a YAML or CSV file, and ``--seeds N`` (each trial again with
``seed`` = 0..N-1).  ``{name}`` in the program's arguments is replaced by the trial's value;
a name no trial has is one line before anything is written (``{{`` is a literal ``{``)."""
from __future__ import annotations

import csv
import itertools
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import WmlError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEED = "seed"


@dataclass(frozen=True)
class Trial:
    """One run of the sweep: its index (0-based, the array index on Slurm and PBS) and values."""

    index: int
    params: Tuple[Tuple[str, str], ...]

    @property
    def values(self) -> Dict[str, str]:
        return dict(self.params)

    def env(self) -> Dict[str, str]:
        """What each of the trial's ranks finds in its environment."""
        out = {"WML_TRIAL": str(self.index)}
        for k, v in self.params:
            out[f"WML_PARAM_{k.upper()}"] = v
        return out


def _check_name(name: str, where: str) -> str:
    if not NAME.match(name):
        raise WmlError(f"{where}: parameter name {name!r} must be letters, digits and _ (not starting with a digit)")
    return name


def parse_param(text: str) -> Tuple[str, List[str]]:
    """``lr=0.1,0.01`` -> ("lr", ["0.1", "0.01"])."""
    name, eq, values = text.partition("=")
    if not eq:
        raise WmlError(f"--param {text!r}: expected NAME=V1,V2,...")
    _check_name(name.strip(), f"--param {text!r}")
    vals = [v.strip() for v in values.split(",")]
    if not values.strip() or any(v == "" for v in vals):
        raise WmlError(f"--param {text!r}: every value must be non-empty (NAME=V1,V2,...)")
    return name.strip(), vals


def _scalar(value, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise WmlError(f"{where}: {value!r} is not a number or a string")


def load_params_file(path: str) -> Tuple[Dict[str, List[str]], List[Dict[str, str]]]:
    """A YAML file (a mapping of name -> list: a grid; or a list of mappings: the trials as
    listed) or a CSV file (a header of names, a row per trial).  Returns (grid axes, rows)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise WmlError(f"--params-file {path}: {e.strerror}") from None
    if p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if not rows:
            raise WmlError(f"--params-file {path}: no rows under the header")
        for name in rows[0]:
            _check_name((name or "").strip(), f"--params-file {path}")
        out = []
        for i, r in enumerate(rows, 2):
            if None in r or any(v is None or v.strip() == "" for v in r.values()):
                raise WmlError(f"--params-file {path}: line {i} does not give every column a value")
            out.append({k.strip(): v.strip() for k, v in r.items()})
        return {}, out
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise WmlError(f"--params-file {path}:{where} is not valid YAML") from None
    if isinstance(data, dict):
        axes = {}
        for k, v in data.items():
            _check_name(str(k), f"--params-file {path}")
            vals = v if isinstance(v, list) else [v]
            if not vals:
                raise WmlError(f"--params-file {path}: {k!r} has no values")
            axes[str(k)] = [_scalar(x, f"--params-file {path}: {k}") for x in vals]
        return axes, []
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        rows = []
        for i, r in enumerate(data):
            for k in r:
                _check_name(str(k), f"--params-file {path}")
            rows.append({str(k): _scalar(v, f"--params-file {path}: trial {i}, {k}") for k, v in r.items()})
        return {}, rows
    raise WmlError(f"--params-file {path}: expected a mapping of name -> values (a grid) "
                   "or a list of mappings (one per trial)")


def build_trials(params: Sequence[str] = (), params_file: Optional[str] = None,
                 seeds: Optional[int] = None) -> List[Trial]:
    """Every trial, numbered from 0.  ``--param`` axes and a file's grid axes combine into one
    grid; a file's rows are each combined with that grid; ``--seeds N`` repeats each N times."""
    axes: Dict[str, List[str]] = {}
    for text in params:
        name, vals = parse_param(text)
        if name in axes:
            raise WmlError(f"--param {name} given twice; give its values once: {name}=V1,V2,...")
        axes[name] = vals
    rows: List[Dict[str, str]] = [{}]
    if params_file is not None:
        file_axes, file_rows = load_params_file(params_file)
        for name in file_axes:
            if name in axes:
                raise WmlError(f"parameter {name!r} is both in --param and in {params_file}")
        axes.update(file_axes)
        if file_rows:
            rows = file_rows
    if seeds is not None:
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
            raise WmlError(f"--seeds must be an integer >= 1, got {seeds!r}")
        if SEED in axes or any(SEED in r for r in rows):
            raise WmlError("--seeds sets the parameter 'seed', which the grid already has")
        axes[SEED] = [str(s) for s in range(seeds)]
    names = list(axes)
    trials: List[Trial] = []
    for row in rows:
        clash = [n for n in row if n in axes]
        if clash:
            raise WmlError(f"parameter {clash[0]!r} is both a row column and a grid axis")
        for combo in itertools.product(*(axes[n] for n in names)):
            values = tuple(row.items()) + tuple(zip(names, combo))
            trials.append(Trial(len(trials), values))
    if not trials or trials == [Trial(0, ())]:
        raise WmlError("empty sweep: give --param NAME=V1,V2, --params-file FILE or --seeds N")
    return trials


def placeholders(argv: Sequence[str]) -> List[str]:
    """The ``{name}`` fields in ``argv`` (``{{`` and ``}}`` are literal braces)."""
    out = []
    for word in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
        except ValueError as e:
            raise WmlError(f"program argument {word!r}: {e} (write {{{{ and }}}} for literal braces)") from None
        for f in fields:
            if not NAME.match(f):
                raise WmlError(f"program argument {word!r}: {{{f}}} is not a parameter name "
                               "(write {{ and }} for literal braces)")
            out.append(f)
    return out


def check_program(argv: Sequence[str], trials: Sequence[Trial]) -> None:
    """Every ``{name}`` of the program is a parameter of every trial."""
    names = set(placeholders(argv))
    for t in trials:
        missing = sorted(names - set(t.values))
        if missing:
            known = ", ".join(sorted(t.values)) or "none"
            raise WmlError(f"the program names {{{missing[0]}}} but trial {t.index} has no parameter "
                           f"{missing[0]!r} (parameters: {known})")


def unnamed_parameters(argv: Sequence[str], trials: Sequence[Trial]) -> Optional[str]:
    """A line for stderr when the program's arguments name none, or not all, of the parameters
    that vary between trials: those trials differ only in WML_PARAM_<NAME> (and WML_TRIAL), so a
    program that does not read them runs the same thing each time.  None when all are named."""
    names = set(placeholders(argv))
    varying = [k for k in (trials[0].values if trials else {})
               if len({t.values.get(k) for t in trials}) > 1 and k not in names]
    if not varying:
        return None
    env = ", ".join(f"WML_PARAM_{k.upper()}" for k in varying)
    which = "name no parameter" if not names else f"name no {{{varying[0]}}}" + (
        f" (nor {', '.join('{' + k + '}' for k in varying[1:])})" if len(varying) > 1 else "")
    return (f"the program's arguments {which}: its trials differ in {', '.join(varying)} only through the "
            f"environment ({env}); put {{{varying[0]}}} where the value goes, or read the variable in the program")


def substitute(argv: Sequence[str], values: Mapping[str, str]) -> List[str]:
    """``argv`` with each ``{name}`` replaced by the trial's value."""
    return [word.format_map(values) if "{" in word or "}" in word else word for word in argv]
