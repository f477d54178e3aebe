"""The one staging step of a job script, run once on the job's first node before any rank.

``stage_job`` builds (or finds) the archive, moves it to every node and has each node unpack
it in parallel, one task per node:

* Slurm: ``sbcast`` copies the archive into each node's place, then ``srun`` runs
  ``python -m wmlce_tools.stage unpack`` once per node;
* everywhere else: ``ddlrun`` runs ``python -m wmlce_tools.stage unpack --bcast`` once per
  node; the first reads the archive from the shared file system and broadcasts it through MPI,
  so the shared file system sees one reader whatever the node count.  When every node is this
  one host (emulated nodes, or a one-node job) each reads the file itself instead: nothing to
  broadcast, tar reads it straight from the page cache.

It prints the staged prefix (this node's).  A node that fails prints one line naming it and
the step fails, so no rank starts; with ``auto`` the step prints the shared prefix instead,
with one warning line.  ``end_job`` runs at the end of the job: each node drops the job's
marker and removes its copy unless the next segment of a chain will use it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from wmlce_tools.errors import WmlError

from ..ddlrun import place as places
from .archive import Archive, ensure_archive

CHUNK = 16 << 20


def _here() -> List[str]:
    return [sys.executable, "-m", "wmlce_tools.stage"]


def _sbcast_name(job: str, a: Archive) -> str:
    return f".wml-sbcast-{job}-{a.path.name}"


def _per_node(site, nodes: int, argv: List[str], env: dict) -> subprocess.CompletedProcess:
    """Run ``argv`` once on each of the job's nodes, in parallel."""
    if site.scheduler == "slurm":
        cmd = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
               "--kill-on-bad-exit=0", "--mpi=none", *argv]
    else:
        from wmlce_tools.ddlrun.exe import ddlrun_exe

        cmd = [*ddlrun_exe(), "--site", site.name, "-n", str(nodes), "--ranks-per-node", "1",
               "--cores-per-rank", "1", "--no-prefix"]
        if site.scheduler == "local" and nodes > 1:
            cmd += ["--emulate-nodes", str(nodes)]
        cmd += ["--", *argv]
    return _run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, **kw)
    except FileNotFoundError:
        raise WmlError(f"{cmd[0]} not found on this node") from None


def _node_lines(proc: subprocess.CompletedProcess) -> List[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("wml stage: node ")]


def stage_job(env_prefix: Path, place: str, site_name: str, nodes: int, job: str, auto: bool) -> str:
    from wmlce_tools.site.registry import get_site

    site = get_site(site_name)
    env_prefix = Path(env_prefix).absolute()
    start = time.monotonic()
    try:
        a = ensure_archive(env_prefix)
        unpack = [*_here(), "unpack", "--manifest", str(a.manifest_path), "--place", place, "--job", job]
        if site.scheduler == "slurm":
            here = Path(places.expand(place, places.node_name()))
            dest = here / _sbcast_name(job, a)
            b = _run(["sbcast", "--force", str(a.path), str(dest)], stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True)
            if b.returncode:
                why = b.stdout.strip().splitlines()
                raise WmlError(f"sbcast of {a.path} to {dest} failed: {why[-1] if why else b.returncode}")
            unpack += ["--archive", str(dest)]     # emulated nodes share this host: its path
        else:
            unpack += ["--bcast", str(a.path)]
        proc = _per_node(site, nodes, unpack, dict(os.environ))
        if proc.returncode:
            last = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()[-1]
            lines = _node_lines(proc) or [last]     # no node said why: the launcher's last word
            more = f"; and {len(lines) - 5} more nodes" if len(lines) > 5 else ""
            raise WmlError("; ".join(ln.removeprefix("wml stage: ") for ln in lines[:5]) + more)
    except WmlError as exc:
        if not auto:
            raise WmlError(f"staging {env_prefix.name} failed, no rank started: {exc}") from None
        print(f"wml: warning: staging {env_prefix.name} failed ({exc}); the ranks use the shared {env_prefix}",
              file=sys.stderr, flush=True)
        return str(env_prefix)
    m = a.manifest
    staged = places.expand(place, places.node_name()) + f"/wml-env-{m.name}-{m.key}"
    print(f"wml: staged {m.name} to {staged} on {nodes} node{'s' if nodes > 1 else ''} in "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    return staged


def end_job(env_prefix: Path, place: str, site_name: str, nodes: int, job: str, keep: bool) -> int:
    from wmlce_tools.site.registry import get_site

    from .archive import cache_location, env_key

    site = get_site(site_name)
    env_prefix = Path(env_prefix).absolute()
    key = env_key(env_prefix)
    mpath = cache_location(env_prefix) / f"{env_prefix.name}-{key}.manifest.json"
    if not mpath.is_file():
        return 0
    argv = [*_here(), "release", "--manifest", str(mpath), "--place", place, "--job", job,
            *(["--keep"] if keep else [])]
    proc = _per_node(site, nodes, argv, dict(os.environ))
    for ln in _node_lines(proc):
        print(ln, file=sys.stderr)
    return proc.returncode


def bcast_chunks(comm, path: Optional[Path]):
    """Rank 0 reads ``path`` and every rank yields the same chunks (MPI broadcast).  Every rank
    takes part in every broadcast: a rank 0 that cannot read raises the same error on all."""
    from mpi4py import MPI

    f, why = None, ""
    if comm.rank == 0:
        try:
            f = open(path, "rb", buffering=0)
        except OSError as exc:
            why = f"cannot read {path}: {exc.strerror}"
    why = comm.bcast(why, root=0)
    if why:
        raise WmlError(why)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        while True:
            n = 0
            if f is not None:
                try:
                    n = f.readinto(buf)
                except OSError:
                    n = -1
            n = comm.bcast(n, root=0)
            if n < 0:
                raise WmlError(f"reading {path} on the job's first node failed")
            if not n:
                return
            comm.Bcast([buf, n, MPI.BYTE], root=0)
            yield view[:n]          # written out before the next chunk is read: no copy
    finally:
        if f is not None:
            f.close()
