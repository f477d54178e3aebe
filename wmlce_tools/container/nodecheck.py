"""The container check on every node of a job: ddlrun starts this once per node with the site's
launcher (one rank per node, the same launcher and hosts as the ranks), each runs
``check.check_container`` there and prints one line, ``WML-NODE ok HOST`` or ``WML-NODE fail
HOST: why``; ddlrun stops at the first failure, naming the node.  A node that says nothing within
the timeout is named too.

    python -m wmlce_tools.container.nodecheck PAYLOAD      (PAYLOAD: JSON, ``payload()``)
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import List, Mapping, Optional, Sequence

from ..errors import WmlError
from .launch import ContainerLaunch

NODE_TIMEOUT_S = 180.0
TAG = "WML-NODE "


def payload(cont: ContainerLaunch, program: Sequence[str], launcher_mpi: Optional[str] = None,
            decision=None) -> str:
    import msgspec

    inside = [list(kv) for kv in decision.inside] if decision is not None else []
    names = list(decision.names) if decision is not None else []
    return json.dumps({"runtime": cont.runtime, "image": cont.image, "spec": msgspec.to_builtins(cont.spec),
                       "workdir": cont.workdir, "wml": cont.wml, "extra_binds": list(cont.extra_binds),
                       "options": [list(kv) for kv in cont.options], "inside": inside, "names": names,
                       "program": list(program), "launcher_mpi": launcher_mpi})


def _from_payload(text: str):
    import msgspec

    from ..site.container_schema import ContainerRuntime

    from ..rankenv import Decision

    d = json.loads(text)
    cont = ContainerLaunch(runtime=d["runtime"], image=d["image"], spec=msgspec.convert(d["spec"], ContainerRuntime),
                           workdir=d["workdir"], wml=d["wml"], extra_binds=tuple(d["extra_binds"]),
                           options=tuple(tuple(kv) for kv in d["options"]))
    decision = Decision(inside=tuple(tuple(kv) for kv in d["inside"]), names=tuple(d["names"]))
    return cont, d["program"], d.get("launcher_mpi"), decision


def main(argv: Sequence[str]) -> int:
    from .check import check_container

    host = socket.gethostname()
    try:
        cont, program, launcher_mpi, decision = _from_payload(argv[0])
        check_container(cont, program, os.environ, launcher_mpi, decision)
    except WmlError as e:
        print(f"{TAG}fail {host}: {e}", flush=True)
        return 0
    print(f"{TAG}ok {host}", flush=True)
    return 0


def gather(argv: List[str], env: Mapping[str, str], nodes: Sequence[str], what: str = "the container check",
           timeout_s: float = NODE_TIMEOUT_S) -> None:
    """Run the per-node check (``argv``: the launcher's line around this module) and raise one
    WmlError for the first node that failed or did not answer."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL, env=dict(env))
    except subprocess.TimeoutExpired:
        raise WmlError(f"{what} on the job's nodes did not end within {timeout_s:.0f} s") from None
    except OSError as e:
        raise WmlError(f"cannot run {what} on the nodes ({argv[0]}): {e.strerror}") from None
    lines = [l.split(TAG, 1)[1] for l in out.stdout.splitlines() if TAG in l]
    for line in lines:
        if line.startswith("fail "):
            raise WmlError(line[len("fail "):].split(": ", 1)[1] if ": " in line else line)
    if len(lines) < len(nodes):
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        answered = {l.split()[1] for l in lines if l.startswith("ok ")}
        silent = [n for n in nodes if n not in answered] or list(nodes)
        raise WmlError(f"{what} had no answer from {len(nodes) - len(lines)} node(s) "
                       f"(of {', '.join(silent[:4])}{'...' if len(silent) > 4 else ''}): {why}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
