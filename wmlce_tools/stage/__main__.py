"""``python -m wmlce_tools.stage``: stage an environment to node-local storage.

    build   ENV                      build (or find) the cached archive of ENV; print its path
    job     --env ENV --place P ...  the job script's step: stage ENV on every node of the job,
                                     print the staged prefix (see wmlce_tools/stage/job.py)
    end     --env ENV --place P ...  the end of the job: remove the copies no job uses
    unpack / release                 one node's part of `job` / `end` (run by srun or ddlrun)
"""
from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from wmlce_tools.errors import WmlError, run_main


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m wmlce_tools.stage",
                                 description="Stage an environment to node-local storage before a job's ranks start.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or find) the cached archive of an environment; print its path")
    b.add_argument("env", help="environment prefix")
    for name, text in (("job", "stage on every node of this job; print the staged prefix"),
                       ("end", "end of job: drop this job's use of the copies, remove unused ones")):
        j = sub.add_parser(name, help=text)
        j.add_argument("--env", required=True, help="the shared environment's prefix")
        j.add_argument("--place", required=True, help="node-local directory ($VARS and {node} expanded on each node)")
        j.add_argument("--site", required=True)
        j.add_argument("--nodes", type=int, required=True)
        j.add_argument("--job", required=True, help="job id (marks the copies this job uses)")
        if name == "job":
            j.add_argument("--auto", action="store_true", help="on failure use the shared environment (one warning line)")
        else:
            j.add_argument("--keep", action="store_true", help="keep the copies (the next chain segment uses them)")
    for name in ("unpack", "release"):
        u = sub.add_parser(name, help=f"one node's part of `{'job' if name == 'unpack' else 'end'}`")
        u.add_argument("--manifest", required=True, type=Path)
        u.add_argument("--place", required=True)
        u.add_argument("--job", required=True)
        if name == "unpack":
            src = u.add_mutually_exclusive_group(required=True)
            src.add_argument("--archive", type=Path, help="the archive, on this node")
            src.add_argument("--bcast", type=Path, help="the archive, read by rank 0 and broadcast (MPI)")
        else:
            u.add_argument("--keep", action="store_true")
    return ap.parse_args(argv)


def _node():
    from ..ddlrun import place

    from .node import NodePlace

    token, label = place.node_name(), place.node_label()

    def at(template: str) -> NodePlace:
        missing = place.unset(template)
        if missing:
            raise WmlError(f"node {label}: the place {template} needs ${missing[0]}, which is not set there")
        return NodePlace(label, Path(place.expand(template, token)))

    return label, at


def _unpack(a) -> int:
    from .archive import Manifest
    from .node import NodeError, stage, wants

    def report(exc: WmlError, np=None) -> None:
        text = exc if isinstance(exc, NodeError) or np is None else np.fail(str(exc))
        print(f"wml stage: {text}", file=sys.stderr, flush=True)

    m = Manifest.read(a.manifest)
    _, at = _node()
    np, error = None, None
    try:
        np = at(a.place)
    except WmlError as exc:
        error = exc
    if a.archive is not None:
        try:
            if error is None:
                stage(np, m, a.archive, a.job)
        except WmlError as exc:
            error = exc
        if error is not None:
            report(error, np)
        return 1 if error is not None else 0
    from mpi4py import MPI

    from .job import bcast_chunks

    comm = MPI.COMM_WORLD
    if comm.allreduce(int(error is not None), op=MPI.MAX):   # a node without a place: nobody starts
        if error is not None:
            report(error)
        return 1
    if len(set(comm.allgather(socket.gethostname()))) == 1:
        # emulated nodes on one host: each reads the archive file itself (tar straight from the
        # page cache), none of its bytes go through MPI
        try:
            stage(np, m, a.bcast, a.job)
        except WmlError as exc:
            error = exc
        if error is not None:
            report(error, np)
        return 1 if comm.allreduce(int(error is not None), op=MPI.MAX) else 0
    need = wants(np, m)
    if comm.allreduce(int(need), op=MPI.MAX):
        chunks = bcast_chunks(comm, a.bcast)
        try:
            stage(np, m, chunks if need else None, a.job)
        except WmlError as exc:
            error = exc
        try:
            for _ in chunks:     # stay in every broadcast whatever happened here
                pass
        except WmlError as exc:  # the first node could not read the archive: every rank learns it
            error = error or exc
    else:
        try:
            stage(np, m, None, a.job)
        except WmlError as exc:
            error = exc
    if error is not None:
        report(error, np)
    return 1 if comm.allreduce(int(error is not None), op=MPI.MAX) else 0


def _release(a) -> int:
    from .archive import Manifest
    from .node import release

    m = Manifest.read(a.manifest)
    _, at = _node()
    release(at(a.place), m, a.job, a.keep)
    return 0


def main(argv=None) -> int:
    a = _args(argv)
    if a.cmd == "build":
        from .archive import ensure_archive

        print(ensure_archive(Path(a.env)).path)
        return 0
    if a.cmd == "job":
        from .job import stage_job

        print(stage_job(Path(a.env), a.place, a.site, a.nodes, a.job, a.auto))
        return 0
    if a.cmd == "end":
        from .job import end_job

        return end_job(Path(a.env), a.place, a.site, a.nodes, a.job, a.keep)
    return _unpack(a) if a.cmd == "unpack" else _release(a)


if __name__ == "__main__":
    run_main("wml stage", main)
