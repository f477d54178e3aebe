"""Shared code of the launcher TEST DOUBLES (jsrun, aprun): no open implementation of IBM's
JSM or Cray's ALPS exists, so these stand in for them in tests/emulation.

A double (1) parses its command line against the documented flag set of the real tool and
refuses anything else (exit 2, ``<tool>: error: ...`` like the real tools' usage errors),
(2) checks the request against the allocation the test harness describes (hosts from the
scheduler's variables, cores/GPUs per node from JSM_DOUBLE_* / ALPS_DOUBLE_*), (3) appends
the parsed request as one JSON line to $WML_DOUBLE_LOG, and (4) runs the ranks on this host
with ``mpiexec -n <ranks>``, each through ``_rank.py``, which sets the variables the real
launcher sets for that rank and runs the program.  The double exits with the first failing
rank's status (else mpiexec's).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, NoReturn, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULER_PREFIXES = ("COBALT_", "LSB_", "LSF_", "PBS_", "SLURM_")
FORWARDED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Usage(Exception):
    pass


def parse(tool: str, argv: Sequence[str], flags: Dict[str, Tuple[str, bool]]) -> Tuple[Dict[str, List[str]], List[str]]:
    """``flags``: spelling (``-n``, ``--nrs``) -> (canonical name, takes a value).  Short
    flags accept ``-n4`` and ``-n 4``; long ones ``--nrs=4`` and ``--nrs 4``.  Options end at
    the first word that is not an option (the program)."""
    opts: Dict[str, List[str]] = {}
    i = 0
    argv = list(argv)
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, value = word, None
        if word.startswith("--"):
            name, eq, v = word.partition("=")
            value = v if eq else None
        elif word not in flags:
            # attached short value: -n4, -bpacked:7, -cc depth is a two-letter flag
            for cut in (3, 2):
                if word[:cut] in flags and flags[word[:cut]][1] and len(word) > cut:
                    name, value = word[:cut], word[cut:]
                    break
        if name not in flags:
            raise Usage(f"unknown option {word!r} (this double accepts: {', '.join(sorted(flags))})")
        canon, takes = flags[name]
        if takes:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise Usage(f"option {name} needs a value")
                value = argv[i]
            opts.setdefault(canon, []).append(value)
        else:
            if value is not None:
                raise Usage(f"option {name} takes no value")
            opts.setdefault(canon, []).append("1")
        i += 1
    program = argv[i:]
    if not program:
        raise Usage("no program given")
    return opts, program


def positive(tool: str, name: str, text: str, zero_ok: bool = False) -> int:
    try:
        n = int(text)
    except ValueError:
        raise Usage(f"{name} {text!r} is not a number") from None
    if n < 0 or (n == 0 and not zero_ok):
        raise Usage(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {n}")
    return n


def log(record: dict) -> None:
    path = os.environ.get("WML_DOUBLE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")


def run_ranks(tool: str, ranks: List[dict], program: List[str], extra_env: Dict[str, str]) -> int:
    """One MPI process per entry of ``ranks`` (each: the variables for that rank)."""
    mpiexec = shutil.which(os.environ.get("WML_DOUBLE_MPIEXEC", "mpiexec"))
    if mpiexec is None:
        print(f"{tool} (test double): mpiexec not found on PATH", file=sys.stderr)
        return 127
    # mpiexec (Hydra) reads the schedulers' node lists itself (COBALT_NODEFILE, LSB_*,
    # PBS_NODEFILE, SLURM_*) and would ssh to those hosts: hide them from it, and give them
    # back to every rank, which sees the job's environment as under the real launcher.
    hidden = {k: v for k, v in os.environ.items() if k.startswith(SCHEDULER_PREFIXES)}
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    with tempfile.TemporaryDirectory(prefix=f"{tool}-double-") as status_dir:
        spec = json.dumps({"ranks": ranks, "env": {**hidden, **extra_env}, "status_dir": status_dir})
        argv = [mpiexec, "-n", str(len(ranks)), sys.executable, os.path.join(HERE, "_rank.py"), spec, "--", *program]
        # aprun and jsrun pass the job's signals on to the application (ALPS: SIGHUP, SIGINT, SIGQUIT,
        # SIGTERM, SIGUSR1, SIGUSR2) rather than dying of them.  Here mpiexec shares this double's
        # process group, where ddlrun sends them, so it gets them already: the double only survives
        # them (a handler, not SIG_IGN, which mpiexec would inherit).
        for sig in FORWARDED:
            signal.signal(sig, lambda *_: None)
        proc = subprocess.run(argv, env=env)
        # the first rank that failed (the others may have been killed by mpiexec after it)
        written = sorted((os.stat(os.path.join(status_dir, n)).st_mtime_ns, n) for n in os.listdir(status_dir)
                         if not n.startswith("."))
        for _, name in written:
            code = int(open(os.path.join(status_dir, name)).read() or 1)
            if code:
                return code
        return proc.returncode


def fail(tool: str, msg: str) -> NoReturn:
    print(f"{tool}: error: {msg}", file=sys.stderr)
    sys.exit(2)
