"""A real Slurm cluster for the tests: ``scripts/local-slurm`` on this host.

The session fixture ``local_slurm`` starts the cluster (or reuses a running one), yields how
to reach it, and stops it at the end of the session when a test session started it and no
other test session still uses it.  It is skipped, with the reason, only where this machine
cannot run it (not root and no cluster running; no apt-get and no Slurm installed).  Set
``WML_REQUIRE_SLURM=1`` (CI does) to turn those skips into failures, and ``WML_SLURM_KEEP=1``
to leave a cluster the tests started running afterwards.  A cluster the tests start has 3 nodes
(``WML_SLURM_NODES``: a job's 2 and a spare) and 2 emulated GPUs per node (``WML_SLURM_GPUS``,
default 2 here) so GPU binding is tested too.

Every wait here is bounded and its timeout message says what it waited for.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local-slurm"
START_TIMEOUT_S = 600   # a fresh machine installs slurm-wlm, munge and libpmix-dev first
NODES = 3               # a cluster the tests start: 2 for a job, 1 spare (tests/slurm/test_heal_on_slurm.py)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _clean_env() -> Dict[str, str]:
    """This process's environment without any Slurm job variables (pytest may itself run
    inside an allocation)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


@dataclass
class LocalSlurm:
    """How to reach the local cluster, plus small bounded helpers for the tests."""

    base: Path
    conf: Path
    nodes: List[str]
    started_here: bool
    gpus_per_node: int = 0
    jobcomp: Path = field(init=False)

    def __post_init__(self) -> None:
        self.jobcomp = self.base / "log" / "jobcomp.txt"

    # -- running commands --------------------------------------------------------------
    def env(self, **extra: str) -> Dict[str, str]:
        env = _clean_env()
        env.update(SLURM_CONF=str(self.conf), WML_SLURM_BASE=str(self.base))
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 30, check: bool = True, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd, env=env or self.env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{' '.join(argv)} did not finish within {timeout} s")
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def sbatch(self, script: str, *args: str, cwd: Path) -> str:
        """Submit ``script`` (text, written to cwd/job-N.sh); returns the job id."""
        n = len(list(cwd.glob("job-*.sh")))
        path = cwd / f"job-{n}.sh"
        path.write_text(script)
        out = self.run("sbatch", "--parsable", *args, str(path), cwd=cwd).stdout.strip()
        m = re.fullmatch(r"(\d+)(;\S+)?", out)
        assert m, f"unexpected sbatch reply {out!r}"
        return m.group(1)

    # -- job state ---------------------------------------------------------------------
    def job(self, job_id: str) -> Dict[str, str]:
        """``scontrol show job -o ID`` as a dict (finished jobs stay for MinJobAge=600 s)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout.strip()
        info: Dict[str, str] = {}
        for tok in out.split():
            k, sep, v = tok.partition("=")
            if sep and k not in info:
                info[k] = v
        return info

    def state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "UNKNOWN")

    def wait_state(self, job_id: str, states: Iterable[str], timeout: float = 60) -> Dict[str, str]:
        """Poll (with a growing interval, bounded) until the job is in one of ``states``."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        delay = 0.1
        info: Dict[str, str] = {}
        while True:
            info = self.job(job_id)
            if info.get("JobState") in wanted:
                return info
            if info.get("JobState") in FINAL_STATES and not wanted & FINAL_STATES:
                pytest.fail(f"job {job_id} ended {info.get('JobState')} while waiting for {sorted(wanted)}: {info}")
            if time.monotonic() >= deadline:
                pytest.fail(f"job {job_id} not {'/'.join(sorted(wanted))} after {timeout} s "
                            f"(state {info.get('JobState')}, reason {info.get('Reason')})")
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def wait_done(self, job_id: str, timeout: float = 60) -> Dict[str, str]:
        return self.wait_state(job_id, FINAL_STATES, timeout)

    def completion(self, job_id: str, timeout: float = 10) -> Dict[str, str]:
        """The job's record from the completion file, read through ``sacct -c`` (no slurmdbd
        here).  slurmctld appends it as the job ends: poll briefly."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.run("sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode,JobName",
                           check=False).stdout
            for line in out.splitlines():
                parts = line.split("|")
                if len(parts) >= 3 and parts[0] == job_id:
                    return {"JobID": parts[0], "State": parts[1].split()[0], "ExitCode": parts[2],
                            "JobName": parts[3] if len(parts) > 3 else ""}
            if time.monotonic() >= deadline:
                pytest.fail(f"job {job_id} not in `sacct -c` ({self.jobcomp}) after {timeout} s: {out!r}")
            time.sleep(0.2)


# -- starting and stopping ---------------------------------------------------------------
def _script(*args: str, timeout: float, env: Dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/local-slurm {' '.join(args)} did not finish within {timeout} s: "
                    f"{(e.stderr or b'')[-2000:]!r}")


def _cannot_run_reason(env: Dict[str, str]) -> Optional[str]:
    if not sys.platform.startswith("linux"):
        return "the local Slurm cluster needs Linux"
    running = _script("status", timeout=60, env=env).returncode == 0
    if running:
        return None
    if os.geteuid() != 0:
        return ("not root and no local Slurm running: start one as root with "
                "`scripts/local-slurm start` (it installs slurm-wlm and munge, edits /etc/hosts)")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it (Debian/Ubuntu only)"
    return None


def _live(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.name), 0)
        return True
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True


@pytest.fixture(scope="session")
def local_slurm():
    env = _clean_env()
    reason = _cannot_run_reason(env)
    if reason:
        if os.environ.get("WML_REQUIRE_SLURM") == "1":
            pytest.fail(f"WML_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)

    out = _script("env", timeout=30, env=env).stdout
    values = dict(re.findall(r"^export (\w+)=(.*)$", out, re.M))
    base = Path(values["WML_SLURM_BASE"])
    conf = Path(values["SLURM_CONF"])
    leases = base / "run" / "test-sessions"
    leases.mkdir(parents=True, exist_ok=True)
    lease = leases / str(os.getpid())
    lease.write_text("")
    marker = base / "run" / "started-by-tests"

    was_running = _script("status", timeout=60, env=env).returncode == 0
    t0 = time.monotonic()
    start_env = dict(env) if was_running else dict(env, WML_SLURM_GPUS=env.get("WML_SLURM_GPUS", "2"))
    nodes = () if was_running else (env.get("WML_SLURM_NODES", str(NODES)),)
    started = _script("start", *nodes, timeout=START_TIMEOUT_S, env=start_env)
    if started.returncode != 0:
        lease.unlink(missing_ok=True)
        pytest.fail(f"scripts/local-slurm start failed ({started.returncode}):\n{started.stderr[-4000:]}")
    if not was_running:
        marker.write_text(f"{os.getpid()}\n")
        sys.stderr.write(f"\n[local-slurm] started in {time.monotonic() - t0:.1f} s\n")

    nodes_out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %G"], capture_output=True, text=True, timeout=30,
                               env=dict(env, SLURM_CONF=str(conf)))
    rows = dict(line.split(None, 1) for line in nodes_out.stdout.splitlines() if line.strip())
    nodes = sorted(rows, key=lambda n: int(n[1:]) if n[1:].isdigit() else 0)
    gres = re.search(r"gpu:(\d+)", next(iter(rows.values()), ""))
    try:
        yield LocalSlurm(base=base, conf=conf, nodes=nodes, started_here=not was_running,
                         gpus_per_node=int(gres.group(1)) if gres else 0)
    finally:
        lease.unlink(missing_ok=True)
        others = [p for p in leases.iterdir() if _live(p)]
        if marker.exists() and not others and os.environ.get("WML_SLURM_KEEP") != "1":
            stopped = _script("stop", timeout=120, env=env)
            marker.unlink(missing_ok=True)
            if stopped.returncode != 0:
                sys.stderr.write(f"[local-slurm] stop failed: {stopped.stderr[-2000:]}\n")


# -- chained runs (wml submit --chain N) ------------------------------------------------------
@dataclass
class ChainSubmission:
    """What ``wml submit --chain N --json`` printed: the run and its segments' job ids."""

    run_id: str
    run_dir: Path
    checkpoint_dir: Path
    job_ids: List[str]


class SlurmChain:
    """Submit a chain on the local cluster through the real ``wml`` and wait for it; every
    wait is bounded, and a failure shows each segment's state and the tail of its output."""

    def __init__(self, slurm: LocalSlurm, run_wml) -> None:
        self.slurm, self.run_wml = slurm, run_wml
        self.env = {"SLURM_CONF": str(slurm.conf), "WML_SLURM_BASE": str(slurm.base)}

    def wml(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = self.run_wml(*args, env=self.env, timeout=timeout)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def submit(self, program: List[str], chain: int = 3, nodes: int = 1, rpn: int = 1, walltime: str = "5",
               margin: str = "60s", name: str = "chain", extra: Iterable[str] = ()) -> ChainSubmission:
        import json

        proc = self.wml("submit", "--site", "local-slurm", "--nodes", str(nodes), "--ranks-per-node", str(rpn),
                        "-t", walltime, "--chain", str(chain), "--signal-margin", margin, "-J", name, "--json",
                        *extra, *program)
        assert proc.returncode == 0, f"wml submit --chain exited {proc.returncode}: {proc.stderr}"
        info = json.loads(proc.stdout.splitlines()[-1])
        return ChainSubmission(info["run_id"], Path(info["run_dir"]), Path(info["checkpoint_dir"]),
                               [s["job_id"] for s in info["segments"]])

    def status(self, sub: ChainSubmission) -> dict:
        import json

        proc = self.wml("status", sub.job_ids[0], "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def report(self, sub: ChainSubmission) -> str:
        """Each segment's Slurm state and the tail of its output, for a failure message."""
        lines = []
        for i, job in enumerate(sub.job_ids, 1):
            info = self.slurm.job(job)
            lines.append(f"segment {i} job {job}: {info.get('JobState')} exit {info.get('ExitCode')} "
                         f"reason {info.get('Reason')}")
            for out in sorted((sub.run_dir / f"segment-{i}").glob("*.out")):
                lines += ["    " + ln for ln in out.read_text(errors="replace").splitlines()[-15:]]
        return "\n".join(lines)

    def wait_file(self, sub: ChainSubmission, path: Path, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"{path} did not appear within {timeout} s\n{self.report(sub)}")
            time.sleep(0.2)

    def wait(self, sub: ChainSubmission, timeout: float = 180) -> List[Dict[str, str]]:
        """Until every segment has ended; their ``scontrol`` records."""
        deadline = time.monotonic() + timeout
        while True:
            infos = [self.slurm.job(j) for j in sub.job_ids]
            if all(i.get("JobState") in FINAL_STATES for i in infos):
                return infos
            if time.monotonic() > deadline:
                pytest.fail(f"the chain {sub.run_id} had not ended after {timeout} s\n{self.report(sub)}")
            time.sleep(0.5)


@pytest.fixture
def slurm_chain(local_slurm, run_wml) -> SlurmChain:
    return SlurmChain(local_slurm, run_wml)
