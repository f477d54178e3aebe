"""Which site are we on, and what does this machine have (for the ``local`` site)."""
from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol

from .schema import NodeSpec, SiteProfile, replace


class KnownSite(Protocol):
    """What detection reads of registry.KnownSite (not imported: registry.py builds on this module)."""
    profile: SiteProfile


# Variables each scheduler sets inside a job or on its login nodes.
SCHEDULER_VARS = {
    "lsf": ("LSB_JOBID", "LSF_BINDIR", "LSF_ENVDIR"),
    "slurm": ("SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "SLURM_CONF"),
    "cobalt": ("COBALT_JOBID", "COBALT_PARTNAME"),
    "pbs": ("PBS_JOBID", "PBS_NODEFILE"),
}


@dataclass(frozen=True)
class Detection:
    name: str
    reason: str


def scheduler_from_env(env: Mapping[str, str]) -> Optional[str]:
    for sched, names in SCHEDULER_VARS.items():
        if any(env.get(n) for n in names):
            return sched
    return None


def detect_site(sites: "dict[str, KnownSite]", env: Mapping[str, str] = os.environ,
                hostname: Optional[str] = None) -> Optional[Detection]:
    """A site one of whose hostname patterns matches, or all of whose ``environment`` patterns
    match; among several, prefer one whose scheduler matches the scheduler variables present."""
    if hostname is None:
        import socket  # only when detecting: keeps `wml render --site X` from paying for it

        hostname = env.get("WML_HOSTNAME") or socket.getfqdn()
    host = hostname
    short = host.split(".")[0]
    sched = scheduler_from_env(env)
    matches = []
    for name, known in sites.items():
        det = known.profile.detect
        if not det.hostnames and not det.environment:
            continue
        host_ok = any(fnmatch.fnmatch(host, pat) or fnmatch.fnmatch(short, pat) for pat in det.hostnames)
        env_ok = bool(det.environment) and all(
            fnmatch.fnmatch(env.get(k, ""), pat) for k, pat in det.environment.items())
        if host_ok or env_ok:
            why = (f"host {host!r} matches {det.hostnames}" if host_ok
                   else f"environment matches {det.environment}")
            matches.append((known.profile.scheduler == sched, name, why))
    if not matches:
        return None
    matches.sort(key=lambda m: (not m[0], m[1]))
    _, name, why = matches[0]
    return Detection(name, why)


def elsewhere(site: str, sites: "dict[str, KnownSite]", env: Mapping[str, str] = os.environ) -> Optional[str]:
    """When ``site`` has detection rules and this host does not match them: why this host is
    not one of its login nodes, as ``wml site detect`` says it (None: it matches, or ``site``
    has no rules to tell)."""
    known = sites.get(site)
    if known is None or not (known.profile.detect.hostnames or known.profile.detect.environment):
        return None
    found = detect_site(sites, env)
    if found is not None and found.name == site:
        return None
    import socket

    host = env.get("WML_HOSTNAME") or socket.getfqdn()
    det = known.profile.detect
    rules = " or ".join([*(f"host {p}" for p in det.hostnames), *(f"{k}={v}" for k, v in det.environment.items())])
    said = f"{found.name} ({found.reason})" if found else "local"
    return (f"this host ({host}) is not a login node of {site} ({rules}); `wml site detect` says {said}: "
            f"log in to {site} and submit there (wml render --site {site} shows the script from here)")


def count_gpus(env: Mapping[str, str] = os.environ) -> int:
    """NVIDIA GPUs usable here: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN devices."""
    vis = env.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([x for x in vis.split(",") if x.strip() and x.strip() != "-1"])
    return len([p for p in glob.glob("/dev/nvidia[0-9]*") if p[len("/dev/nvidia"):].isdigit()])


def count_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def local_node(template: NodeSpec) -> NodeSpec:
    """This machine as one node: every core we may run on, every GPU we can see."""
    return replace(template, sockets=1, cores_per_socket=count_cores(), threads_per_core=1,
                   gpus_per_socket=count_gpus())
