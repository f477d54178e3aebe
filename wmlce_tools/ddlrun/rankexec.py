"""The per-rank shim: the launcher runs ``python -m wmlce_tools.ddlrun.rankexec [settings] --
PROGRAM ARGS`` once per rank; it works out this rank's environment and runs the program.

The rank comes from the launcher's own variables (``ddl_runtime.core.jobenv.detect_launcher``);
node and local rank follow from the Layout's numbering (rank = node * ranks_per_node +
local_rank), which every launcher ddlrun drives places node by node.  Where the launcher also
reports a local rank, it must agree (otherwise GPUs would be handed out wrongly).

Sets, per the contract in docs/ARCHITECTURE.md: CUDA_VISIBLE_DEVICES (per-rank binding: this
rank's GPUs, as indices into what the node already exposes; left alone when the launcher has
already narrowed it to this rank's share), DDL_GPU_BINDING, DDL_LAYOUT_GPUS (this node's GPU
lists per local rank), DDL_OPTIONS (``-mode ...``, other words the user set are kept),
DDL_EMULATE_NODES, DDL_TIMELINE, the torchrun variables, and PYTHONUNBUFFERED=1 unless set
(output appears as it is printed).  ``--output`` says how the program's output is passed on:
``direct`` (the program writes to the launcher itself; one rank, so a terminal stays a
terminal), ``lines`` (read line by line and each line written in one write, so lines of
different ranks never mix) or ``prefixed`` (the same, as ``[rank] line``).  With
``--report TOKEN`` the exit status goes to ddlrun as one stderr line (``exitreport``), so
ddlrun can report the first failing rank.  A rank that stopped for the walltime (its program
exited ``EXIT_RESUME``) then exits 0 to the launcher once its report is written: a planned stop
is not a bad exit, and srun's ``--kill-on-bad-exit`` would otherwise end the step at the first
rank out, killing the others in their exit and dropping output not yet forwarded, reports
included (seen on the local Slurm).  ddlrun reads the 75 from the report.

Only the standard library, ``ddl_runtime.core.jobenv`` and ``wmlce_tools.ddlrun.place`` (a staged
environment's copy on an emulated node) are imported: this starts on every rank.
"""
from __future__ import annotations

import os
import signal

# A chained job's stop signal may come while this shim is still importing: catch it at once
# (StopRelay takes it over; the names are resolved again there).
_EARLY_STOP: list = []
if os.environ.get("WML_STOP_SIGNAL", "").strip().upper() in ("USR1", "SIGUSR1"):
    signal.signal(signal.SIGUSR1, lambda *_: _EARLY_STOP.append(1))

import argparse  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple  # noqa: E402

from ddl_runtime.errors import DDLInputError  # noqa: E402
from ddl_runtime.core.jobenv import JobEnvironment, detect_launcher  # noqa: E402

from .exitreport import format_report, format_up, stop_signum  # noqa: E402
from .pdeathsig import KILL_ON_PARENT_DEATH  # noqa: E402
from .place import FROM_VAR, NODE_PREFIX_VAR, node_paths  # noqa: E402
from .place import rank_environment as staged_rank_environment  # noqa: E402

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNAL_ENV = "WML_STOP_SIGNAL"   # ddl_runtime.checkpoint.protocol's name (not imported: this starts on every rank)
EXIT_RESUME = 75                      # protocol's status of a rank that saved and stopped for the walltime
RESEND_S = 2.0     # a chained job's stop signal is passed on again this often until the program ends
WATCH_S = 0.05     # how soon a stop signal that came is first passed on


class StopRelay:
    """A chained job's stop signal ($WML_STOP_SIGNAL), delivered so that it cannot kill a rank that is
    still starting: this shim catches it from the start (and remembers one that came before the
    program existed), the program starts with it ignored (SIG_IGN survives exec; the runtime's
    handler replaces it), and once it has come it is passed on every RESEND_S seconds until the
    program ends (the runtime's stop request is idempotent), so one that reached the program before
    its handler was installed is not lost.  Where /proc tells the program's disposition, it is
    passed on only while the program catches it: Python puts the killing default back as it exits,
    and a repeat that came then killed a rank that had saved and was ending with 75 (seen in CI)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.child: Optional[subprocess.Popen] = None
        self.came = bool(_EARLY_STOP)
        signal.signal(signum, self._handler)

    def _handler(self, _signum, _frame) -> None:
        # Only a flag: a handler that takes a lock (threading.Event.set, Thread.start) deadlocks
        # when the signal comes again while the handler holds it, which the repeats make likely.
        self.came = True

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional["StopRelay"]:
        num = stop_signum(env, STOP_SIGNAL_ENV)
        return cls(num) if num is not None else None   # a bad name: the runtime says so on every rank

    def ignore(self) -> None:     # in the child before exec; here once the program has ended
        signal.signal(self.signum, signal.SIG_IGN)

    def attach(self, child: subprocess.Popen) -> None:
        self.child = child
        threading.Thread(target=self._resend, daemon=True).start()

    def _resend(self) -> None:
        """Until the program ends: once the signal has come, pass it on every RESEND_S seconds."""
        child = self.child
        while child.poll() is None:
            if not self.came:
                time.sleep(WATCH_S)
                continue
            caught = catches(child.pid, self.signum)
            if caught is False:             # still ignored (starting), or the default again (exiting)
                time.sleep(WATCH_S)
                continue
            try:
                child.send_signal(self.signum)
            except OSError:
                return
            time.sleep(RESEND_S)


def catches(pid: int, signum: int) -> Optional[bool]:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc); None where
    /proc cannot tell (another system, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


class ShimError(Exception):
    """One line for the user; ``code`` is the rank's exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RankSettings:
    size: int
    ranks_per_node: int
    binding: str                                   # per-rank, local-rank or none (no GPUs)
    node_gpus: Tuple[Tuple[Tuple[int, ...], ...], ...]   # per node (one entry: every node) per local rank
    mode: str
    master_addr: str
    master_port: int
    emulate_nodes: Optional[int] = None
    timeline: Optional[str] = None
    gpu_env: str = "CUDA_VISIBLE_DEVICES"         # per-rank binding: the variable that narrows GPUs


def parse_gpus(text: str) -> Tuple[Tuple[Tuple[int, ...], ...], ...]:
    """``0;1|2;3`` -> per node, per local rank GPU ids (``''`` for a rank without GPUs)."""
    return tuple(tuple(tuple(int(g) for g in lr.split(",") if g != "") for lr in node.split(";"))
                 for node in text.split("|"))


def _gpu_text(lists: Sequence[Sequence[int]]) -> str:
    return ";".join(",".join(map(str, g)) for g in lists)


def _merge_ddl_options(existing: str, mode: str) -> str:
    try:
        words = shlex.split(existing)
    except ValueError as e:
        raise ShimError(f"DDL_OPTIONS={existing!r} cannot be split into words: {e}") from None
    kept: List[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "-mode":
            skip = True
            continue
        if w.startswith("-mode="):
            continue
        kept.append(w)
    return " ".join(["-mode", mode, *(shlex.quote(w) for w in kept)])


def rank_environment(s: RankSettings, env: Mapping[str, str]) -> Dict[str, str]:
    """This rank's environment: ``env`` plus what ddlrun promises every rank."""
    info = detect_launcher(env)
    if info.rank is None:
        raise ShimError("cannot tell this process's rank: no launcher variables (OMPI_COMM_WORLD_RANK, "
                        "PMI_RANK, SLURM_PROCID, JSM_NAMESPACE_RANK, ALPS_APP_PE); run it through ddlrun")
    rank = info.rank
    if info.size is not None and info.size != s.size:
        raise ShimError(f"rank {rank}: the launcher started {info.size} ranks but the layout has {s.size}")
    node, local = divmod(rank, s.ranks_per_node)
    if (info.local_rank is not None and not s.emulate_nodes and info.name != "jsrun"
            and info.local_rank != local):
        raise ShimError(f"rank {rank}: the launcher says local rank {info.local_rank} but the layout says "
                        f"{local}: ranks were not placed node by node")
    out = dict(env)
    gpus_here = s.node_gpus[node] if len(s.node_gpus) > 1 else s.node_gpus[0]
    if s.binding != "none":
        mine = gpus_here[local]
        if s.binding == "per-rank":
            out[s.gpu_env] = _visible_for(mine, env.get(s.gpu_env), rank, s.gpu_env)
        out["DDL_GPU_BINDING"] = s.binding
        out["DDL_LAYOUT_GPUS"] = _gpu_text(gpus_here)
    out["DDL_OPTIONS"] = _merge_ddl_options(env.get("DDL_OPTIONS", ""), s.mode)
    if s.emulate_nodes:
        out["DDL_EMULATE_NODES"] = str(s.emulate_nodes)
    if s.timeline:
        out["DDL_TIMELINE"] = s.timeline
    out.setdefault("PYTHONUNBUFFERED", "1")
    out.update(JobEnvironment().torchrun_variables(
        rank=rank, size=s.size, local_rank=local, local_size=s.ranks_per_node, group_rank=node,
        master_addr=s.master_addr, master_port=s.master_port))
    if out.get(NODE_PREFIX_VAR) or out.get(FROM_VAR):      # a staged env: this rank's node's copy
        staged_rank_environment(out, node)
    node_paths(out, node)                                  # CUDA MPS's directories on an emulated node
    try:
        JobEnvironment.from_environ(out)   # the runtime must be able to read what we promise
    except DDLInputError as e:
        raise ShimError(f"rank {rank}: {e}") from None
    return out


NODE_DIRS_VAR = "WML_NODE_DIRS"   # wmlce_tools.fabric.resolve's name (not imported: this starts on every rank)


def make_node_dirs(env: Mapping[str, str], rank: int) -> None:
    """The site's per-node directories (``fabric.node_dirs``: Frontier's MIOpen cache on /tmp),
    named by the variables ``WML_NODE_DIRS`` lists, as each rank has them (a user's own value
    included); every rank of a node may make them, ``mkdir -p`` style."""
    for var in filter(None, env.get(NODE_DIRS_VAR, "").split(":")):
        path = env.get(var, "")
        if not path:
            continue
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ShimError(f"rank {rank}: cannot make {var}={path} on this node: {e.strerror}") from None


def _visible_for(mine: Tuple[int, ...], outer: Optional[str], rank: int, var: str = "CUDA_VISIBLE_DEVICES") -> str:
    """CUDA_VISIBLE_DEVICES (or ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK) for a rank whose Layout
    GPUs are ``mine`` (indices on the node)."""
    if outer is None:
        return ",".join(map(str, mine))
    visible = [v.strip() for v in outer.split(",") if v.strip()]
    if len(visible) == len(mine):          # the launcher (jsrun/srun) already narrowed it
        return ",".join(visible)
    try:
        return ",".join(visible[g] for g in mine)
    except IndexError:
        raise ShimError(f"rank {rank}: the layout gives it GPU(s) {list(mine)} but {var}="
                        f"{outer!r} shows {len(visible)}") from None


def _pump(src, fd: int, tag: bytes) -> None:
    """Copy lines from ``src`` to ``fd``, each as one ``[rank] line`` write.  When ``fd`` is
    gone (the reader closed the pipe), keep draining ``src`` so the program never blocks."""
    broken = False
    for line in iter(src.readline, b""):
        if broken:
            continue
        if not line.endswith(b"\n"):
            line += b"\n"
        data = tag + line
        try:
            while data:
                n = os.write(fd, data)
                data = data[n:]
        except OSError:
            broken = True
    src.close()


OUTPUT_MODES = ("direct", "lines", "prefixed")


def run_program(program: Sequence[str], env: Mapping[str, str], rank: int, output: str,
                on_exit: Callable[[int], None] = lambda code: None, stop: Optional[StopRelay] = None) -> int:
    """Run the program; ``on_exit(status)`` is called the moment it ends (before its last
    output is passed on), so the report races as little as possible with a job being torn down.
    ``stop``: a chained job's stop signal, relayed as StopRelay says."""
    pipe = None if output == "direct" else subprocess.PIPE

    def preexec() -> None:
        KILL_ON_PARENT_DEATH()
        if stop is not None:
            stop.ignore()
    try:
        child = subprocess.Popen(list(program), env=dict(env), stdout=pipe, stderr=pipe,
                                 close_fds=False, preexec_fn=preexec)
    except FileNotFoundError:
        raise ShimError(f"rank {rank}: cannot run {program[0]!r}: not found", 127) from None
    except PermissionError:
        raise ShimError(f"rank {rank}: cannot run {program[0]!r}: permission denied", 126) from None
    for sig in FORWARDED_SIGNALS:
        if stop is None or sig != stop.signum:
            signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    if stop is not None:
        stop.attach(child)
    pumps = []
    if pipe is not None:
        tag = f"[{rank}] ".encode() if output == "prefixed" else b""
        for src, fd in ((child.stdout, 1), (child.stderr, 2)):
            t = threading.Thread(target=_pump, args=(src, fd, tag), daemon=True)
            t.start()
            pumps.append(t)
    code = child.wait()
    code = 128 - code if code < 0 else code
    on_exit(code)
    for t in pumps:
        t.join(timeout=10)
    return code


def _parse(argv: Sequence[str]) -> Tuple[RankSettings, bool, Optional[str], List[str]]:
    p = argparse.ArgumentParser(prog="ddlrun-rank")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--ranks-per-node", type=int, required=True)
    p.add_argument("--binding", choices=("per-rank", "local-rank", "none"), required=True)
    p.add_argument("--gpus", default="")
    p.add_argument("--gpu-env", default="CUDA_VISIBLE_DEVICES",
                   choices=("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"))
    p.add_argument("--mode", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--emulate-nodes", type=int)
    p.add_argument("--timeline")
    p.add_argument("--output", choices=OUTPUT_MODES, default="direct")
    p.add_argument("--report", metavar="TOKEN")
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    addr, _, port = a.master.rpartition(":")
    s = RankSettings(size=a.size, ranks_per_node=a.ranks_per_node, binding=a.binding,
                     node_gpus=parse_gpus(a.gpus), mode=a.mode, master_addr=addr, master_port=int(port),
                     emulate_nodes=a.emulate_nodes, timeline=a.timeline, gpu_env=a.gpu_env)
    return s, a.output, a.report, program


def main(argv: Optional[Sequence[str]] = None) -> int:
    stop = StopRelay.from_env(os.environ)    # first: a stop signal must never kill a starting rank
    settings, output, report, program = _parse(sys.argv[1:] if argv is None else argv)
    rank = -1
    tried = written = False

    def send_report(code: int) -> None:
        nonlocal tried, written
        if report and rank >= 0 and not tried:
            tried = True
            try:
                os.write(2, format_report(report, rank, code))
                written = True
            except OSError:
                pass  # stderr gone: ddlrun falls back on the launcher's exit status

    try:
        if not program:
            raise ShimError("no program given")
        env = rank_environment(settings, os.environ)
        rank = int(env["RANK"])
        make_node_dirs(env, rank)
        if report and stop is not None:   # ddlrun holds a chained job's stop signal until every rank is here (runner)
            try:
                os.write(2, format_up(report, rank))
            except OSError:
                pass
        code = run_program(program, env, rank, output, on_exit=send_report, stop=stop)
    except ShimError as e:
        sys.stderr.write(f"ddlrun: error: {e}\n")
        code = e.code
    send_report(code)
    if stop is not None:      # the program has ended: nothing to pass on, and Python's exit puts back the
        stop.ignore()         # default action for a signal it handled, so a repeat would kill this shim
    if code == EXIT_RESUME and written:
        return 0     # ddlrun has the 75 from the report; the launcher must not take it for a failure
    return code


if __name__ == "__main__":
    sys.exit(main())
