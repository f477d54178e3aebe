"""Slurm's compact host and count notations, expanded by python-hostlist (NSC's ``hostlist``
module, the library behind its ``hostlist`` command):

- hostlist: ``nid[0001-0003,0007],gpu[01-02]``, ``a[1-2]b[3-4]`` (several bracket groups:
  the cartesian product, leftmost varying slowest, as ``scontrol show hostnames`` prints),
  ``node1,node2``; zero padding is kept (``[08-10]`` -> 08 09 10); order and repeats kept.
- tasks per node: ``2(x3),1`` -> 2 2 2 1.

This module only adds what the library leaves to its caller: malformed text becomes one
``WmlError`` naming the text and what is wrong (the library accepts empty entries and any
characters in a name, which no scheduler produces, so those are refused here).
"""
from __future__ import annotations

import re
from typing import List

import hostlist as _hostlist

from ..errors import WmlError

_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: the library's reasons, said the way the rest of wml says them
_REASONS = {
    "start > stop": "a range goes backwards",
    "bad range": "a bracket holds something that is not a number or a range like 01-04",
    "range too large": f"a range is too large (more than {_hostlist.MAX_SIZE} hosts)",
    "results too large": f"it names too many hosts (more than {_hostlist.MAX_SIZE})",
    "unbalanced brackets": "unbalanced brackets ('[' without ']' or ']' without '[')",
    "nested brackets": "nested brackets",
    "bad task list syntax": "not N or N(xM)",
}


def _reason(e: Exception) -> str:
    text = str(e).strip()
    return _REASONS.get(text, text or "not hostlist syntax")


def expand_hostlist(text: str) -> List[str]:
    """``nid[0001-0003,0007],gpu[01-02]`` -> the host names, in order."""
    text = text.strip()
    if not text:
        raise WmlError("malformed hostlist '': no hosts")
    if re.search(r"(^|,)\s*(,|$)", text):
        raise WmlError(f"malformed hostlist {text!r}: empty entry")
    try:
        hosts = _hostlist.expand_hostlist(text, allow_duplicates=True)
    except _hostlist.BadHostlist as e:
        raise WmlError(f"malformed hostlist {text!r}: {_reason(e)}") from None
    for h in hosts:
        if not _HOST.match(h):
            raise WmlError(f"malformed hostlist {text!r}: {h!r} is not a host name")
    return hosts


def expand_counts(text: str) -> List[int]:
    """``2(x3),1`` -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE)."""
    try:
        return _hostlist.parse_slurm_tasks_per_node(text.strip())
    except _hostlist.BadHostlist:
        raise WmlError(f"malformed task count list {text!r}: not N or N(xM) items separated by commas") from None
