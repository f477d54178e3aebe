"""Slurm's compact host and count notations, expanded.

- hostlist: ``nid[0001-0003,0007],gpu[01-02]``, ``a[1-2]b[3-4]`` (several bracket groups:
  the cartesian product, leftmost varying slowest, as ``scontrol show hostnames`` prints),
  ``node1,node2``; zero padding is kept (``[08-10]`` -> 08 09 10).
- tasks per node: ``2(x3),1`` -> 2 2 2 1.
Malformed text raises ``WmlError`` naming the text and what is wrong.
"""
from __future__ import annotations

import re
from typing import List

from ..errors import WmlError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_NAME_CHARS = re.compile(r"^[A-Za-z0-9_.\-]*$")


def _split_top(text: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            if depth:
                raise WmlError(f"malformed hostlist {text!r}: nested '['")
            depth += 1
        elif ch == "]":
            if not depth:
                raise WmlError(f"malformed hostlist {text!r}: ']' without '['")
            depth -= 1
        if ch == "," and not depth:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise WmlError(f"malformed hostlist {text!r}: '[' without ']'")
    parts.append("".join(cur))
    return parts


def _expand_range(text: str, whole: str) -> List[str]:
    out: List[str] = []
    for item in text.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise WmlError(f"malformed hostlist {whole!r}: {item!r} is not a number or a range like 01-04")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise WmlError(f"malformed hostlist {whole!r}: range {item!r} goes backwards")
        if int(hi) - int(lo) > 100_000:
            raise WmlError(f"malformed hostlist {whole!r}: range {item!r} is too large")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def _expand_one(pattern: str, whole: str) -> List[str]:
    names = [""]
    rest = pattern
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            literal, group, rest = rest, None, ""
        else:
            close_at = rest.index("]", open_at)
            literal, group, rest = rest[:open_at], rest[open_at + 1:close_at], rest[close_at + 1:]
        if not _NAME_CHARS.match(literal):
            raise WmlError(f"malformed hostlist {whole!r}: {literal!r} is not a host name")
        names = [n + literal for n in names]
        if group is not None:
            names = [n + v for n in names for v in _expand_range(group, whole)]
    return names


def expand_hostlist(text: str) -> List[str]:
    """``nid[0001-0003,0007],gpu[01-02]`` -> the host names, in order."""
    text = text.strip()
    if not text:
        raise WmlError("malformed hostlist '': no hosts")
    hosts: List[str] = []
    for part in _split_top(text):
        part = part.strip()
        if not part:
            raise WmlError(f"malformed hostlist {text!r}: empty entry")
        expanded = _expand_one(part, text)
        if any(not h or not h[0].isalnum() for h in expanded):
            raise WmlError(f"malformed hostlist {text!r}: {part!r} does not name a host")
        hosts.extend(expanded)
    return hosts


def expand_counts(text: str) -> List[int]:
    """``2(x3),1`` -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE)."""
    out: List[int] = []
    for part in text.strip().split(","):
        m = _COUNT.match(part.strip())
        if not m:
            raise WmlError(f"malformed task count list {text!r}: {part!r} is not N or N(xM)")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out
