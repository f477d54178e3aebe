"""Walltime parsing and formatting: one representation (whole minutes) for every scheduler."""
from __future__ import annotations

import re

from .errors import WmlError

_HMS = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_walltime(text: str | int) -> int:
    """Return minutes from ``MM``, ``HH:MM``, ``HH:MM:SS`` or ``D-HH:MM[:SS]`` (Slurm style).

    A bare number means minutes (as LSF's ``-W`` and Cobalt's ``-t`` read it).  Seconds are
    rounded up to the next minute, so a request is never shortened.
    """
    if isinstance(text, bool):
        raise WmlError(f"malformed walltime {text!r}")
    if isinstance(text, int):
        if text <= 0:
            raise WmlError(f"walltime must be positive, got {text}")
        return text
    s = str(text).strip()
    m = _HMS.match(s)
    if not m:
        raise WmlError(f"malformed walltime {s!r}: use minutes, HH:MM or HH:MM:SS")
    days, a, b, c = m.groups()
    parts = [int(a)] + [int(x) for x in (b, c) if x is not None]
    if len(parts) == 1:
        minutes, seconds = parts[0], 0
        if days:
            minutes = parts[0] * 60  # D-HH means hours after a day count
    elif len(parts) == 2:
        hours, minutes = parts
        if minutes >= 60:
            raise WmlError(f"malformed walltime {s!r}: minutes must be below 60")
        minutes, seconds = hours * 60 + minutes, 0
    else:
        hours, mins, seconds = parts
        if mins >= 60 or seconds >= 60:
            raise WmlError(f"malformed walltime {s!r}: minutes and seconds must be below 60")
        minutes = hours * 60 + mins
    if days:
        minutes += int(days) * 24 * 60
    total = minutes + (1 if seconds else 0)
    if total <= 0:
        raise WmlError(f"walltime must be positive, got {s!r}")
    return total


def hhmm(minutes: int) -> str:
    """``H:MM`` (LSF ``-W`` form)."""
    return f"{minutes // 60}:{minutes % 60:02d}"


def hhmmss(minutes: int) -> str:
    """``HH:MM:SS`` (Slurm ``--time`` / Cobalt ``-t`` form)."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"
