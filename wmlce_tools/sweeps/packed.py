"""The packed runner: one allocation runs the sweep's trials, as many at once as fit (or
``--max-running K``), each on its own nodes / GPUs, the next starting as one ends.

The job script's launch line is ``python -m wmlce_tools.sweeps.packed RUN -- ddlrun ...``: the
trial's ddlrun line, the same Layout ``wml submit`` would give one trial.  Each trial runs
through ``sweep.trial`` in its own process (its state, output and metrics in
``trials/<i>/``); where it runs is added to its ddlrun line:

- Slurm: ``--mpiarg "--nodelist=<its nodes> --exact"``: a job step on those nodes holding only
  the CPUs and GPUs it asks for (srun(1) --exact), so steps run side by side;
- other schedulers: ``-H <its hosts>`` and, for a trial holding part of a node, the site's GPU
  variable (CUDA_VISIBLE_DEVICES...) set to its GPUs (ddlrun narrows each rank within them);
- the local site: every emulated node is this host; a trial's GPUs as above.

SIGTERM (the job cancelled, its walltime) stops starting trials and ends the running ones.
Exit status: 0 when every trial completed, else 1."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

from ..errors import WmlError, run_main
from . import record
from .pack import Allocation, Need, Slots

POLL_S = 0.05


def _hosts(rec: record.SweepRecord, nodes: int) -> List[str]:
    if rec.scheduler == "local":
        return ["localhost"] * nodes
    from ..ddlrun.hosts import discover_hosts

    hosts = discover_hosts(os.environ).hosts
    if len(hosts) < nodes:
        raise WmlError(f"the packed sweep needs {nodes} nodes but the job has {len(hosts)} ({', '.join(hosts)})")
    return list(hosts[:nodes])


def _ddlrun_at(command: Sequence[str]) -> int:
    """Where ddlrun's own options start in ``command`` (after its executable)."""
    try:
        return list(command).index("--site")
    except ValueError:
        raise WmlError("the packed runner's command is not a ddlrun line (no --site)") from None


def placed_command(command: Sequence[str], scheduler: str, hosts: Sequence[str], placement) -> List[str]:
    cut = _ddlrun_at(command)
    names = [hosts[n] for n in placement.nodes]
    if scheduler == "slurm":
        extra = ["--mpiarg", f"--nodelist={','.join(names)} --exact"]
    elif scheduler == "local":
        extra = []
    else:
        extra = ["-H", ",".join(names)]
    return [*command[:cut], *extra, *command[cut:]]


def run_packed(run_dir: Path, command: Sequence[str], out=None) -> int:
    rec = record.require(run_dir)
    pack = rec.pack or {}
    alloc = Allocation(**pack["allocation"])
    need = Need(**pack["need"])
    limit = rec.max_running or 10 ** 9
    only = os.environ.get("WML_SWEEP_ONLY")
    queue = [int(i) for i in only.split(",")] if only else list(range(rec.size))
    hosts = _hosts(rec, alloc.nodes)
    slots = Slots(alloc)
    running: Dict[int, subprocess.Popen] = {}
    stopping = {"signum": None}
    gpu_env = pack.get("gpu_env", "CUDA_VISIBLE_DEVICES")

    def stop(signum, _frame):
        stopping["signum"] = signum
        for p in running.values():
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = False
    from .pack import per_allocation

    at_once = min(limit, len(queue), per_allocation(need, alloc))
    sys.stdout.write(f"wml: packed sweep {rec.run_id}: {len(queue)} trial(s) on {alloc.nodes} node(s), "
                     f"{at_once} at a time\n")
    sys.stdout.flush()
    while queue or running:
        started = False
        while queue and len(running) < limit and stopping["signum"] is None:
            index = queue[0]
            placement = slots.take(index, need)
            if placement is None:
                break
            queue.pop(0)
            env = dict(os.environ, WML_SWEEP_ONLY=str(index), WML_TRIAL_PLACEMENT=json.dumps(placement.as_dict()))
            if placement.gpus and not need.whole and rec.scheduler != "slurm":
                env[gpu_env] = ",".join(map(str, placement.gpus))
            argv = [sys.executable, "-m", "wmlce_tools.sweeps.trial", str(run_dir), "0", "--",
                    *placed_command(command, rec.scheduler, hosts, placement)]
            running[index] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
            started = True
        if stopping["signum"] is not None:
            queue = []
        done = [i for i, p in running.items() if p.poll() is not None]
        for i in done:
            failed |= running.pop(i).returncode != 0
            slots.release(i)
        if not done and not started:
            time.sleep(POLL_S)
    return 1 if failed or stopping["signum"] is not None else 0


def main_args(argv: List[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        raise WmlError("usage: python -m wmlce_tools.sweeps.packed RUN -- DDLRUN-COMMAND...")
    return run_packed(Path(argv[0]), argv[2:])


def main() -> None:
    run_main("wml-packed", lambda: main_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
