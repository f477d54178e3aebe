"""Walltime parsing and formatting: one representation (whole minutes) for every scheduler."""
from __future__ import annotations

import re

from .errors import WmlError

_HMS = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
#: 90s, 90m, 2h, 1h30m, 1d12h (units in this order, each at most once; min/sec spelled out too)
_UNITS = re.compile(r"^(?=\d)(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?:in)?)?(?:(\d+)s(?:ec)?)?$", re.I)
#: the forms, for messages and --help
FORMS = "minutes (90), 90m, 2h, 1h30m, HH:MM, HH:MM:SS, D-HH[:MM[:SS]] or seconds (90s)"


def parse_walltime(text: str | int, what: str = "walltime") -> int:
    """Return minutes from ``MM``, ``HH:MM``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]`` (Slurm style),
    units (``90m``, ``2h``, ``1h30m``, ``1d12h``) or ``Ns`` (seconds).

    A bare number means minutes (as LSF's ``-W`` and Cobalt's ``-t`` read it).  Seconds are
    rounded up to the next minute, so a request is never shortened.
    """
    return -(-parse_duration_s(text, what) // 60)


def parse_duration_s(text: str | int, what: str = "walltime") -> int:
    """``parse_walltime`` to the second: the same forms, as seconds (an int is minutes).
    The local site's own timer and ``--signal-margin`` use it."""
    if isinstance(text, bool):
        raise WmlError(f"malformed {what} {text!r}")
    if isinstance(text, int):
        if text <= 0:
            raise WmlError(f"{what} must be positive, got {text}")
        return text * 60
    s = str(text).strip()
    units = _UNITS.match(s)
    if units:
        d, h, m_, sec = (int(x or 0) for x in units.groups())
        total = ((d * 24 + h) * 60 + m_) * 60 + sec
        if total <= 0:
            raise WmlError(f"{what} must be positive, got {s!r}")
        return total
    m = _HMS.match(s)
    if not m:
        raise WmlError(f"malformed {what} {s!r}: use {FORMS}")
    days, a, b, c = m.groups()
    parts = [int(a)] + [int(x) for x in (b, c) if x is not None]
    if len(parts) == 1:
        minutes, seconds = parts[0], 0
        if days:
            minutes = parts[0] * 60  # D-HH means hours after a day count
    elif len(parts) == 2:
        hours, minutes = parts
        if minutes >= 60:
            raise WmlError(f"malformed {what} {s!r}: minutes must be below 60")
        minutes, seconds = hours * 60 + minutes, 0
    else:
        hours, mins, seconds = parts
        if mins >= 60 or seconds >= 60:
            raise WmlError(f"malformed {what} {s!r}: minutes and seconds must be below 60")
        minutes = hours * 60 + mins
    if days:
        minutes += int(days) * 24 * 60
    total = minutes * 60 + seconds
    if total <= 0:
        raise WmlError(f"{what} must be positive, got {s!r}")
    return total


def env_seconds(env, var: str, default: float) -> float:
    """Seconds >= 0 from the environment variable ``var`` (``default`` when unset or empty)."""
    text = env.get(var)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise WmlError(f"{var}={text!r} must be a number of seconds >= 0")
    return value


def hhmm(minutes: int) -> str:
    """``H:MM`` (LSF ``-W`` form)."""
    return f"{minutes // 60}:{minutes % 60:02d}"


def hhmmss(minutes: int) -> str:
    """``HH:MM:SS`` (PBS ``walltime=`` form)."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def slurm_time(minutes: int) -> str:
    """Slurm ``--time``: ``HH:MM:SS`` below a day, ``D-HH:MM:SS`` from one day on (sbatch(1):
    "hours:minutes:seconds", "days-hours:minutes:seconds")."""
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{hhmmss(rest)}" if days else hhmmss(rest)


def check_two_part(text: object, scheduler: str, site: str) -> None:
    """Refuse ``-t A:B`` on a site whose scheduler reads two numbers otherwise than wml's
    HH:MM (sbatch --time and PBS walltime: minutes:seconds), naming both readings; a unit
    (``30m``, ``2h``) or three parts say which is meant."""
    m = re.match(r"^(\d+):(\d+)$", str(text).strip()) if isinstance(text, str) else None
    if not m or scheduler not in ("slurm", "pbs"):
        return
    a, b = (int(x) for x in m.groups())
    tool = "sbatch --time" if scheduler == "slurm" else "qsub -l walltime"
    hours = "".join(f"{v}{u}" for v, u in ((a, "h"), (b, "m")) if v) or "0m"
    minutes = "".join(f"{v}{u}" for v, u in ((a, "m"), (b, "s")) if v) or "0s"
    raise WmlError(f"-t {text} is ambiguous on {site}: wml reads two numbers as HH:MM ({a} h {b} min), {tool} as "
                   f"MM:SS ({a} min {b} s); say -t {hours} or -t {minutes} (or HH:MM:SS)")
