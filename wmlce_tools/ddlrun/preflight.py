"""``ddlrun --check``: before launching, look at every host of the job.

Each host runs a small probe with this ddlrun's Python (``ssh -o BatchMode=yes`` for remote
hosts, directly for this machine): it must answer within ``PROBE_TIMEOUT_S``, import
``ddl_runtime`` with the same wml version as here, and show the same number of GPUs as the
other hosts (and at least what the layout gives each node).  A table says what each host
has; any failure makes ddlrun exit non-zero before anything is launched.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence, TextIO

from ..quoting import sh_join

PROBE_TIMEOUT_S = 30.0
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "StrictHostKeyChecking=accept-new")

PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import ddl_runtime, ddl_runtime.core.jobenv
    from wmlce_tools._version import __version__
    from wmlce_tools.site.detect import count_gpus
    out.update(runtime=__version__, gpus=count_gpus())
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
if len(sys.argv) > 1 and "error" not in out:     # the site's network plugin (wmlce_tools/fabric/probe.py)
    try:
        import os
        from wmlce_tools.fabric.probe import probe
        out["fabric"] = probe(json.loads(sys.argv[1]), os.environ)
    except Exception as e:
        out["error"] = f"fabric probe: {type(e).__name__}: {e}"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class HostReport:
    host: str
    reachable: bool
    runtime: Optional[str] = None
    gpus: Optional[int] = None
    problem: Optional[str] = None
    fabric: Optional[dict] = None        # the network plugin's probe (fabric/probe.py), when the site names one


def is_this_machine(host: str) -> bool:
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.gethostname().split(".")[0]}
    try:
        names.add(socket.getfqdn())
    except OSError:  # pragma: no cover
        pass
    return host in names


def probe_argv(host: str, python: str = sys.executable, fabric: Optional[dict] = None) -> List[str]:
    local = [python, "-c", PROBE, *([json.dumps(fabric)] if fabric is not None else [])]
    if is_this_machine(host):
        return local
    # ssh hands its command to the remote shell: quote every word.
    return ["ssh", *SSH_OPTIONS, host, sh_join(local)]


def probe(host: str, fabric: Optional[dict] = None) -> HostReport:
    argv = probe_argv(host, fabric=fabric)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return HostReport(host, False, problem=f"no answer within {PROBE_TIMEOUT_S:.0f} s")
    except OSError as e:
        return HostReport(host, False, problem=f"cannot run {argv[0]}: {e.strerror}")
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return HostReport(host, False, problem=why)
    data = json.loads(lines[-1])
    if "error" in data:
        return HostReport(host, True, problem=f"runtime not importable: {data['error']}")
    return HostReport(host, True, runtime=data.get("runtime"), gpus=data.get("gpus"), fabric=data.get("fabric"))


def judge(reports: Sequence[HostReport], version: str, gpus_needed: int) -> List[HostReport]:
    """Add problems that only show across hosts: other versions, GPU counts that differ."""
    counts = sorted({r.gpus for r in reports if r.gpus is not None})
    majority = max(counts, key=lambda c: sum(r.gpus == c for r in reports)) if counts else None
    out = []
    for r in reports:
        problem = r.problem
        if problem is None and r.runtime != version:
            problem = f"wml {r.runtime} there, {version} here"
        elif problem is None and r.gpus is not None and r.gpus < gpus_needed:
            problem = f"{r.gpus} GPU(s), the layout needs {gpus_needed} per node"
        elif problem is None and len(counts) > 1 and r.gpus != majority:
            problem = f"{r.gpus} GPU(s), other hosts have {majority}"
        out.append(HostReport(r.host, r.reachable, r.runtime, r.gpus, problem, r.fabric))
    return out


def table(reports: Sequence[HostReport]) -> str:
    rows = [("host", "reachable", "runtime", "gpus", "status")]
    for r in reports:
        rows.append((r.host, "yes" if r.reachable else "no", r.runtime or "-",
                     "-" if r.gpus is None else str(r.gpus), "ok" if r.problem is None else f"FAIL: {r.problem}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4] for row in rows) + "\n"


def check_hosts(plan, err: TextIO, conclude: bool = True) -> bool:
    """The hosts' check and its table; ``conclude``: end with "check passed" (False: a later
    check, the container's, says it)."""
    import os

    from .._version import __version__
    from ..fabric.check import check_lines, plugin_spec

    hosts = list(dict.fromkeys(plan.node_hosts))
    err.write(f"ddlrun: checking {len(hosts)} host(s) (timeout {PROBE_TIMEOUT_S:.0f} s each)\n")
    err.flush()
    spec = plugin_spec(plan.fabric, plan.launcher_env(os.environ))
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        reports = list(pool.map(lambda h: probe(h, spec), hosts))
    gpus_needed = plan.layout.gpus_per_node * (plan.layout.nodes if plan.layout.emulated else 1)
    reports = judge(reports, __version__, gpus_needed)
    err.write(table(reports))
    if plan.fabric is not None:
        for line in check_lines(plan.fabric, {r.host: r.fabric for r in reports}, plan.decision.report):
            err.write(f"ddlrun: {line}\n")
    bad = [r for r in reports if r.problem is not None]
    if bad:
        err.write(f"ddlrun: check failed on {len(bad)} of {len(reports)} host(s)\n")
        return False
    if conclude:
        err.write("ddlrun: check passed\n")
    return True
