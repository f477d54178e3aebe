"""How each rank tells ddlrun its exit status, through any launcher: the shim writes one line
``ddlrun-exit <token> <rank> <status>`` to its stderr as it ends (and ``ddlrun-up <token>
<rank>`` once it can take a chained job's stop signal, see runner); every launcher forwards a
rank's stderr to its own, which ddlrun reads (``runner``), takes these lines out, and passes
everything else on.  ``token`` is random per launch, so program output cannot fake one.
Arrival order tells which rank failed first, on one host or many, with no shared files.
"""
from __future__ import annotations

import re
import secrets
import signal
from dataclasses import dataclass
from typing import Mapping, Optional

_LINE = re.compile(rb"^ddlrun-exit ([0-9a-f]{16}) (\d+) (-?\d+)\r?\n?$")
_UP = re.compile(rb"^ddlrun-up ([0-9a-f]{16}) (\d+)\r?\n?$")


@dataclass(frozen=True)
class RankExit:
    rank: int
    code: int


def new_token() -> str:
    return secrets.token_hex(8)


def format_report(token: str, rank: int, code: int) -> bytes:
    return f"ddlrun-exit {token} {rank} {code}\n".encode()


def parse_report(line: bytes, token: str) -> Optional[RankExit]:
    m = _LINE.match(line)
    if m is None or m.group(1).decode() != token:
        return None
    return RankExit(int(m.group(2)), int(m.group(3)))


def format_up(token: str, rank: int) -> bytes:
    return f"ddlrun-up {token} {rank}\n".encode()


def parse_up(line: bytes, token: str) -> Optional[int]:
    """The rank of a ``ddlrun-up`` line of this launch, else None."""
    m = _UP.match(line)
    if m is None or m.group(1).decode() != token:
        return None
    return int(m.group(2))


def stop_signum(env: Mapping[str, str], var: str) -> Optional[int]:
    """A chained job's stop signal (``env[var]``, $WML_STOP_SIGNAL: USR1, SIGUSR1 or a number); None when the
    job is not chained or the name is not a signal's."""
    name = env.get(var, "").strip().upper()
    if not name:
        return None
    num = int(name) if name.isdigit() else getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    return int(num) if num is not None else None
