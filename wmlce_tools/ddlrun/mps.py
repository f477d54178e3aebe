"""CUDA MPS for ranks that share a GPU (``--ranks-per-gpu K``, K > 1), as the centres run it.

Several processes on one NVIDIA GPU are time-sliced unless NVIDIA's Multi-Process Service runs:
one control daemon per node (``nvidia-cuda-mps-control -d``), its pipes and logs in the
directories ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY`` name, the same pipe
directory in every client's environment, stopped with ``echo quit | nvidia-cuda-mps-control``
(https://docs.nvidia.com/deploy/mps/).  ALCF's Polaris page ("Using MPS in Multi-node Jobs")
starts it on every node with a one-rank-per-node ``mpiexec`` before the ranks, in directories
that do not collide between nodes; OLCF Summit's LSF starts it itself for ``-alloc_flags gpumps``
(its GPUs are in EXCLUSIVE_PROCESS mode: ranks sharing one need it).

Which one is in force: ``--gpu-sharing mps|time-slice`` (ddlrun, ``wml submit``/``render``), else
the site profile's ``gpu_sharing`` (its page), else time-sliced.  Where ddlrun starts MPS it does
so once per node before any rank starts, in a directory of this launch under the node's local
place (the site's ``stage_env.place``, ``$WML_STAGE_PLACE`` overriding it; ``/tmp`` where the site
names none): ``<place>/wml-mps-<job>.<pid>/{pipe,log}``.  The ranks get both variables; after the
ranks (also when one failed, or ddlrun was signalled) the daemons are stopped and the directory
removed.  A daemon that does not start is one line naming the node, before any rank starts; the
job then runs time-sliced only where the user asked for that (``--gpu-sharing time-slice``).

On one host (the local site, emulated nodes) this runs here; on several hosts once per node
through the site's launcher, as ddlrun's container check does (``plan._once_per_node``, handed
in by the caller: plan.py imports this module):

    python -m wmlce_tools.ddlrun.mps start|stop|status PAYLOAD    (one node's part; PAYLOAD: JSON)

Where the place names ``{node}`` (emulated nodes that share a host, ``scripts/local-slurm``) each
node expands it on its side and each rank on its own (``place.node_paths``).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Iterator, List, Mapping, Optional, Sequence, TextIO, Tuple

from ..errors import WmlError
from ..locks import pid_alive
from .place import NODE_TOKEN, expand, node_label, node_name, unset

MODES = ("mps", "time-slice")
CONTROL = "nvidia-cuda-mps-control"
PIPE_VAR, LOG_VAR = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
VARS = (PIPE_VAR, LOG_VAR)
PLACE_VAR = "WML_STAGE_PLACE"          # as for --stage-env and --stage-image
DEFAULT_PLACE = "/tmp"                 # NVIDIA's own default pipe directory is under /tmp
ANSWER_S = 30.0                        # the daemon answers within this after `-d` returns
ASK_S = 10.0                           # one `echo CMD | nvidia-cuda-mps-control`
QUIT_S = 30.0                          # the daemon is gone within this after `quit`
NODES_S = 180.0                        # the whole once-per-node launch
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CHOOSE = "--gpu-sharing time-slice runs the ranks time-sliced without it"


@dataclass(frozen=True)
class GpuSharing:
    """How the ranks that share a GPU run on it, decided before anything runs."""

    mode: str                          # mps | time-slice
    ranks_per_gpu: int
    source: str                        # where the choice comes from (--gpu-sharing, the site's page, the default)
    started_by: Optional[str] = None   # mps: "ddlrun", or the scheduler's words for starting it
    directory: Optional[str] = None    # ddlrun's MPS: this launch's directory ({node}: each node's own)
    asked: bool = False                # the user chose the mode (--gpu-sharing)

    @property
    def starts(self) -> bool:
        """ddlrun starts (and stops) the daemons."""
        return self.mode == "mps" and self.started_by == "ddlrun"

    @property
    def exports(self) -> Tuple[Tuple[str, str], ...]:
        """What every rank gets: the daemon's pipe (and log) directory."""
        if not self.starts:
            return ()
        return ((PIPE_VAR, f"{self.directory}/pipe"), (LOG_VAR, f"{self.directory}/log"))

    def describe(self) -> str:
        """The one line ``ddlrun --check`` (and -v) says."""
        if self.mode == "time-slice":
            return (f"GPU sharing: {self.ranks_per_gpu} ranks per GPU, time-sliced (no CUDA MPS; {self.source})")
        if not self.starts:
            return f"GPU sharing: {self.ranks_per_gpu} ranks per GPU under CUDA MPS, started by {self.started_by} ({self.source})"
        return (f"GPU sharing: {self.ranks_per_gpu} ranks per GPU under CUDA MPS ({self.source}): ddlrun starts "
                f"{CONTROL} -d once per node before the ranks and stops it after them; pipes in {self.directory}/pipe")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40]


def choose(site, ranks_per_gpu: int, asked: Optional[str]) -> Optional[Tuple[str, str, Optional[str]]]:
    """(mode, where the choice comes from, who starts MPS) for ranks sharing GPUs on ``site``; None
    when no GPU is shared.  A choice the site cannot run is one WmlError."""
    if asked is not None and asked not in MODES:
        raise WmlError(f"--gpu-sharing {asked!r}: give mps or time-slice")
    if ranks_per_gpu <= 1:
        return None
    spec = site.gpu_sharing
    if asked is not None:
        mode, source = asked, "--gpu-sharing"
    elif spec is not None:
        mode, source = spec.default, f"site {site.name}: {spec.docs[0]}" if spec.docs else f"site {site.name}"
    else:
        mode, source = "time-slice", f"site {site.name} names no gpu_sharing; --gpu-sharing mps starts CUDA MPS"
    if mode == "mps" and site.gpu_env != "CUDA_VISIBLE_DEVICES":
        raise WmlError(f"--gpu-sharing mps: CUDA MPS is NVIDIA's, and {site.name}'s GPUs are not NVIDIA's "
                       f"({site.gpu_env}); their ranks share a GPU time-sliced")
    if mode == "time-slice" and spec is not None and spec.exclusive_process:
        raise WmlError(f"--gpu-sharing time-slice: {site.name}'s GPUs are in EXCLUSIVE_PROCESS mode (one process "
                       f"each), so ranks sharing one need CUDA MPS ({spec.docs[0] if spec.docs else site.name})")
    started_by = None
    if mode == "mps":
        started_by = "ddlrun" if spec is None or spec.started_by == "ddlrun" else spec.started_by
    return mode, source, started_by


def plan_sharing(site, layout, asked: Optional[str], env: Mapping[str, str], job: str,
                 per_node: bool) -> Optional[GpuSharing]:
    """The launch's GpuSharing (None: no GPU is shared).  ``job``: the job id (else ddlrun's pid);
    ``per_node``: the nodes are hosts of their own (else one host holds them all: one daemon)."""
    chosen = choose(site, layout.ranks_per_gpu, asked)
    if chosen is None:
        return None
    mode, source, started_by = chosen
    directory = None
    if mode == "mps" and started_by == "ddlrun":
        place = env.get(PLACE_VAR) or (site.stage_env.place if site.stage_env is not None else DEFAULT_PLACE)
        what = f"${PLACE_VAR}" if env.get(PLACE_VAR) else f"{site.name}'s node-local place"
        if not place.startswith(("/", "$")):
            raise WmlError(f"{what} {place!r} for CUDA MPS: give an absolute directory")
        missing = unset(place, dict(env))
        if missing:
            raise WmlError(f"{what} {place} for CUDA MPS names ${missing[0]}, which is not set here")
        place = expand(place, NODE_TOKEN, dict(env))      # $VARIABLES here; {node} stays for each node
        if not per_node:
            place = place.replace(NODE_TOKEN, "mps")      # one host: one daemon for all its (emulated) nodes
        name = f"wml-mps-{_safe(job)}.{os.getpid()}" if job else f"wml-mps-{os.getpid()}"
        directory = os.path.join(place, name)
    return GpuSharing(mode, layout.ranks_per_gpu, source, started_by, directory, asked is not None)


# --- one node's part ------------------------------------------------------------------------
TAG = "WML-NODE "


def _node_dir(template: str, env: Mapping[str, str]) -> str:
    """This node's directory: ``{node}`` as this node is called (the launcher's rank is the node's
    index in a once-per-node launch)."""
    if NODE_TOKEN not in template:
        return template
    from ddl_runtime.core.jobenv import detect_launcher

    rank = detect_launcher(env).rank
    return template.replace(NODE_TOKEN, node_name(rank if rank is not None else 0, dict(env)))


def _control(env: Mapping[str, str], where: str) -> str:
    exe = shutil.which(CONTROL, path=env.get("PATH"))
    if exe is None:
        raise WmlError(f"the MPS control daemon did not start on {where}: {CONTROL} is not on PATH there")
    return exe


def _daemon_env(env: Mapping[str, str], directory: str) -> dict:
    return {**env, PIPE_VAR: os.path.join(directory, "pipe"), LOG_VAR: os.path.join(directory, "log")}


def _ask(exe: str, command: str, env: Mapping[str, str]) -> subprocess.CompletedProcess:
    """``echo COMMAND | nvidia-cuda-mps-control`` (its client: it ends once answered)."""
    return subprocess.run([exe], input=command + "\n", capture_output=True, text=True, timeout=ASK_S,
                          env=dict(env))


def _last_line(*texts: str) -> str:
    for text in texts:
        lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
        if lines:
            return lines[-1][:300]
    return ""


def _log_tail(directory: str) -> str:
    try:
        with open(os.path.join(directory, "log", "control.log"), errors="replace") as f:
            return _last_line(f.read()[-4000:])
    except OSError:
        return ""


def start_here(template: str, env: Mapping[str, str] = os.environ) -> str:
    """Start this node's control daemon in its directory; the directory.  One WmlError naming the
    node when it does not start or does not answer."""
    where = node_label(dict(env))
    directory = _node_dir(template, env)
    exe = _control(env, where)
    denv = _daemon_env(env, directory)
    try:
        for d in (denv[PIPE_VAR], denv[LOG_VAR]):
            os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        raise WmlError(f"the MPS control daemon did not start on {where}: cannot make {e.filename}: "
                       f"{e.strerror}") from None
    out_path = os.path.join(denv[LOG_VAR], "start.out")
    fail = f"the MPS control daemon did not start on {where}"
    try:        # its output to a file: a daemon keeps what it inherits, and would hold a pipe (and the launcher) open
        with open(out_path, "w") as out:
            code = subprocess.run([exe, "-d"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  env=denv, timeout=ANSWER_S).returncode
    except subprocess.TimeoutExpired:
        raise WmlError(f"{fail}: {CONTROL} -d did not return within {ANSWER_S:.0f} s") from None
    except OSError as e:
        raise WmlError(f"{fail}: cannot run {exe}: {e.strerror}") from None
    if code != 0:
        with open(out_path, errors="replace") as f:
            why = _last_line(f.read(), _log_tail(directory)) or "no output"
        raise WmlError(f"{fail}: {CONTROL} -d exited {code}: {why}")
    deadline = time.monotonic() + ANSWER_S
    while True:     # it runs once it answers its client
        try:
            p = _ask(exe, "get_server_list", denv)
            if p.returncode == 0:
                return directory
            why = _last_line(p.stderr, p.stdout, _log_tail(directory)) or f"exit status {p.returncode}"
        except subprocess.TimeoutExpired:
            why = f"no answer to get_server_list within {ASK_S:.0f} s"
        if time.monotonic() > deadline:
            raise WmlError(f"{fail}: it does not answer after {ANSWER_S:.0f} s: {why}")
        time.sleep(0.2)


def stop_here(template: str, env: Mapping[str, str] = os.environ) -> None:
    """Stop this node's daemon (``echo quit``), wait until it is gone, remove the directory; one
    WmlError naming the node and what is left when that fails."""
    where = node_label(dict(env))
    directory = _node_dir(template, env)
    if not os.path.isdir(directory):
        return          # never started here (a start that failed on another node first)
    exe = _control(env, where)
    denv = _daemon_env(env, directory)
    pid = _daemon_pid(denv[PIPE_VAR])
    try:
        p = _ask(exe, "quit", denv)
        code, why = p.returncode, _last_line(p.stderr, p.stdout)
    except subprocess.TimeoutExpired:
        code, why = None, f"no answer within {ASK_S:.0f} s"
    if code != 0 and pid is not None and pid_alive(pid):
        raise WmlError(f"the MPS control daemon on {where} did not take quit ({why or f'exit status {code}'}); "
                       f"it still runs (pid {pid}), its directory {directory} is left")
    deadline = time.monotonic() + QUIT_S
    while pid is not None and pid_alive(pid):
        if time.monotonic() > deadline:
            raise WmlError(f"the MPS control daemon on {where} still runs {QUIT_S:.0f} s after quit (pid {pid}); "
                           f"its directory {directory} is left")
        time.sleep(0.1)
    shutil.rmtree(directory, ignore_errors=True)


def status_here(template: str, env: Mapping[str, str] = os.environ) -> None:
    """The daemon answers (after the step that started it ended: a Slurm step's processes may be
    ended with it)."""
    where = node_label(dict(env))
    directory = _node_dir(template, env)
    exe = _control(env, where)
    try:
        p = _ask(exe, "get_server_list", _daemon_env(env, directory))
    except subprocess.TimeoutExpired:
        raise WmlError(f"the MPS control daemon on {where} does not answer within {ASK_S:.0f} s") from None
    if p.returncode != 0:
        why = _last_line(p.stderr, p.stdout, _log_tail(directory)) or f"exit status {p.returncode}"
        raise WmlError(f"the MPS control daemon on {where} is gone once the launcher step that started it "
                       f"ended ({why}); the site's launcher ends what a step leaves running")


def _daemon_pid(pipe: str) -> Optional[int]:
    """The control daemon's pid from the pid file it writes in its pipe directory (NVIDIA's
    Tools and Interface Reference: nvidia-cuda-mps-control.pid), when there is one."""
    try:
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


ACTIONS = {"start": start_here, "stop": stop_here, "status": status_here}


def main(argv: Sequence[str]) -> int:
    host = node_label()
    try:
        if len(argv) != 2 or argv[0] not in ACTIONS:
            raise WmlError("usage: python -m wmlce_tools.ddlrun.mps start|stop|status PAYLOAD")
        ACTIONS[argv[0]](json.loads(argv[1])["directory"])
    except WmlError as e:
        print(f"{TAG}fail {host}: {e}", flush=True)
        return 0
    print(f"{TAG}ok {host}", flush=True)
    return 0


# --- the launch node: every node, around the ranks ---------------------------------------------
def _per_node(plan) -> bool:
    return len(set(plan.node_hosts)) > 1


def _everywhere(plan, action: str, once_per_node) -> None:
    """``action`` on every node of the launch: here on one host, else once per node through the
    launcher (``once_per_node(plan, module_argv, gpus_per_rank)``: the launch line; the node's GPUs
    in the step: a daemon must see them); one WmlError for the first node that failed or did not
    answer."""
    sharing = plan.gpu_sharing
    if not _per_node(plan):
        ACTIONS[action](sharing.directory)
        return
    from ..container.nodecheck import gather

    argv = once_per_node(plan, [__name__, action, json.dumps({"directory": sharing.directory})],
                         gpus_per_rank=plan.layout.node_spec.gpus)
    gather(argv, plan.launcher_env(os.environ), plan.node_hosts, what=f"the CUDA MPS {action}", timeout_s=NODES_S)


def start(plan, err: TextIO, once_per_node) -> None:
    """The daemons up on every node before any rank starts; on failure the ones started are stopped
    and one WmlError says which node and how to run without."""
    try:
        _everywhere(plan, "start", once_per_node)
        if _per_node(plan) and plan.site.launcher == "srun":
            _everywhere(plan, "status", once_per_node)   # a step's leftovers may be ended with it (proctrack/cgroup)
    except _Stopped:
        _quietly_stop(plan, once_per_node)
        raise
    except WmlError as e:
        _quietly_stop(plan, once_per_node)
        raise WmlError(f"{e}; {CHOOSE}") from None
    except BaseException:
        _quietly_stop(plan, once_per_node)
        raise
    nodes = len(set(plan.node_hosts))
    err.write(f"ddlrun: CUDA MPS: control daemon started on {nodes} node(s), pipes in {plan.gpu_sharing.directory}/pipe\n")
    err.flush()


def stop(plan, err: TextIO, once_per_node) -> None:
    """The daemons stopped on every node (a failure: one warning line; the run's status stands)."""
    try:
        _everywhere(plan, "stop", once_per_node)
    except WmlError as e:
        err.write(f"ddlrun: warning: stopping CUDA MPS: {e}\n")
        err.flush()
        return
    err.write("ddlrun: CUDA MPS: control daemon stopped\n")
    err.flush()


def _quietly_stop(plan, once_per_node) -> None:
    try:
        with _signals(ignore=True):
            _everywhere(plan, "stop", once_per_node)
    except WmlError:
        pass


class _Stopped(WmlError):
    pass


@contextlib.contextmanager
def _signals(ignore: bool) -> Iterator[None]:
    """While the daemons start and until the launch forwards signals itself (``ignore`` False):
    SIGINT/SIGTERM/SIGHUP end ddlrun with status 128+N once the daemons begun are stopped; while
    they stop (``ignore``): held off, so a second signal cannot leave them running (the stop is
    bounded by its timeouts)."""
    def stopped(signum, _frame):
        raise _Stopped(f"stopped by {signal.Signals(signum).name} before the ranks ran (CUDA MPS's daemons are "
                       "stopped)", exit_code=128 + signum)

    old = {}
    try:
        for sig in SIGNALS:
            old[sig] = signal.signal(sig, signal.SIG_IGN if ignore else stopped)
    except ValueError:          # not the main thread: leave the handlers alone
        pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def around_ranks(plan, err: TextIO, once_per_node) -> Iterator[None]:
    """Start the daemons before the ranks and stop them after, however the ranks end
    (``once_per_node``: ``plan._once_per_node``)."""
    sharing = plan.gpu_sharing
    if sharing is None or not sharing.starts:
        yield
        return
    with _signals(ignore=False):      # until the launch forwards signals itself (runner), one stops the daemons
        start(plan, err, once_per_node)
        try:
            yield
        finally:
            with _signals(ignore=True):
                stop(plan, err, once_per_node)


def dry_run_lines(plan) -> List[str]:
    """What a dry run says about MPS (comment lines)."""
    sharing = plan.gpu_sharing
    if sharing is None:
        return []
    lines = [f"# {sharing.describe()}"]
    if sharing.starts:
        payload = json.dumps({"directory": sharing.directory})
        how = (" (once per node through the launcher)" if _per_node(plan) else " (here)")
        lines.append(f"# before the ranks{how}: python -m {__name__} start {payload}; after them: ... stop")
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
