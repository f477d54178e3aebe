"""``ddlrun --horovod`` (or ``WML_HOROVOD=1``): Horovod scripts run unchanged.

Every rank gets ddl_runtime's ``horovod`` alias package first on its ``PYTHONPATH`` (as a ``-x``
export, so it reaches the ranks through the launcher, and the dry run shows it).  Off by
default: without it ``import horovod`` finds whatever is installed, or nothing.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Tuple

from ..errors import WmlError

ENV_SWITCH = "WML_HOROVOD"
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def wanted(flag: bool, env: Mapping[str, str], switch: str = ENV_SWITCH) -> bool:
    """``--horovod`` or ``WML_HOROVOD=1`` (a site turns it on for every job with
    ``environment: {WML_HOROVOD: "1"}`` in its profile); ``switch``: another such variable
    (``WML_LMS``)."""
    value = env.get(switch, "").strip().lower()
    if value not in _ON + _OFF:
        raise WmlError(f"{switch}={env[switch]!r} must be 1 or 0")
    return flag or value in _ON


def shim_exports(exports: Sequence[str], env: Mapping[str, str], shim_dir: Optional[str] = None) -> Tuple[str, ...]:
    """``exports`` (``-x`` items) with ``PYTHONPATH`` led by the shim directory (Horovod's, or
    ``shim_dir``): the user's own ``-x PYTHONPATH=...`` (else this environment's PYTHONPATH) follows it."""
    from ddl_runtime.horovod.shim import SHIM_DIR as HOROVOD_SHIM

    SHIM_DIR = shim_dir or HOROVOD_SHIM

    current: Optional[str] = env.get("PYTHONPATH")
    kept = []
    for item in exports:
        key, eq, value = item.partition("=")
        if key == "PYTHONPATH":
            current = value if eq else env.get("PYTHONPATH")
        else:
            kept.append(item)
    parts = [SHIM_DIR] + [p for p in (current or "").split(os.pathsep) if p and p != SHIM_DIR]
    return (*kept, "PYTHONPATH=" + os.pathsep.join(parts))


def check_settings(exports: Sequence[str], env: Mapping[str, str], timeline_file: bool = True) -> None:
    """The ranks' ``HOROVOD_*`` settings (this environment, then ``-x`` items), checked here
    with the runtime's own reader, so that a bad value is one line from ddlrun before any rank
    starts (not a traceback from every rank), and (``timeline_file``) that ``HOROVOD_TIMELINE``'s
    file can be written."""
    from ddl_runtime.errors import DDLInputError
    from ddl_runtime.horovod.environment import read

    from .plan import check_output_file

    ranks_env = dict(env)
    for item in exports:
        key, eq, value = item.partition("=")
        if eq:
            ranks_env[key] = value
    try:
        settings = read(ranks_env)
    except DDLInputError as e:
        raise WmlError(str(e)) from None
    if settings.timeline and timeline_file:
        check_output_file(settings.timeline, "HOROVOD_TIMELINE")
