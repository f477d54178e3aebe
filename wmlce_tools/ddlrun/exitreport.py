"""How each rank tells ddlrun its exit status, through any launcher: the shim writes one line
``ddlrun-exit <token> <rank> <status>`` to its stderr as it ends; every launcher forwards a
rank's stderr to its own, which ddlrun reads (``runner``), takes these lines out, and passes
everything else on.  ``token`` is random per launch, so program output cannot fake one.
Arrival order tells which rank failed first, on one host or many, with no shared files.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Optional

_LINE = re.compile(rb"^ddlrun-exit ([0-9a-f]{16}) (\d+) (-?\d+)\r?\n?$")


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
