"""The runtime's state: communicators, topology, engine, watchdog, timeline; init and finalize.

`init()` builds, from COMM_WORLD and `JobEnvironment`:
  * the node grouping (mode string > DDL_EMULATE_NODES > Slurm node ids > shared memory),
  * one communicator per algorithm stage (see algorithms.py) plus a control communicator
    (signature agreement, bcast, allgather, barrier) and the watchdog's side channel,
  * the fault handlers: an uncaught exception aborts the job; interpreter exit finalizes.
"""
from __future__ import annotations

import atexit
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

from mpi4py import MPI

from ..core import log as _log
from ..core import stats as _stats
from ..core.stats import RunStats, cpu_list
from . import hooks as _hooks
from ..engine.algorithms import Algorithms, Level
from ..engine.engine import Engine
from ..errors import DDLError
from ..core.jobenv import JobEnvironment
from ..transports.shm.group import open_group
from ..timeline import NullTimeline, Timeline
from ..core.topology import LEVEL_NAMES, hierarchy_for
from ..core.watchdog import Watchdog

DEFAULT_FUSION_MB = 4.0
MAX_INFLIGHT = 2
ABORT_GRACE_S = 0.2


@dataclass
class Topology:
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    source: str
    levels: tuple  # sizes of the levels, innermost first


class Runtime:
    def __init__(self, env: Optional[JobEnvironment] = None):
        self.env = env or JobEnvironment.from_environ()
        world = MPI.COMM_WORLD
        self.world = world
        self.pid = os.getpid()  # a forked child must not finalize or abort on the rank's behalf
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        _log.set_rank(self.rank, self.size)
        # Settings errors are raised here, identically on every rank, before any communication.
        hierarchy = hierarchy_for(self.size, self.env.mode, self.env.emulate_nodes)
        fusion_mb = DEFAULT_FUSION_MB if self.env.fusion_mb is None else self.env.fusion_mb
        self.fusion_bytes = int(fusion_mb * 1024 * 1024)
        self.aborting = False
        try:
            self._setup(hierarchy)
        except BaseException as exc:  # noqa: BLE001 - other ranks are inside collectives by now
            self.abort(f"init failed on this rank: {type(exc).__name__}: {exc}")

    def _setup(self, hierarchy) -> None:
        world = self.world
        self.control = world.Dup()
        self.side = world.Dup()
        self.small = world.Dup()  # single small allreduce calls (ops.allreduce's latency path)
        self.topology, algorithms = self._build_algorithms(hierarchy)
        self.local_gpuid = self.env.gpu_for_local_rank(self.topology.local_rank)
        self.gpu = None  # ddl_runtime.transports.gpu's state (every rank's GPU, the transport, staging buffers)
        epoch = self.control.bcast(time.time(), root=0)
        self.timeline = Timeline(self.env.timeline, self.rank, self.size, epoch) if self.env.timeline else NullTimeline()
        self.watchdog = Watchdog(self.side, self.env.stall_warning_s, self.env.stall_shutdown_s, self.abort)
        self.engine = Engine(algorithms, self.watchdog, self.timeline, MAX_INFLIGHT)
        self.engine.oversubscribed = self._ranks_on_host() > _cores()
        self.algorithms = algorithms
        # one host, one node of the grouping: agreements and CPU reductions go through shared memory
        self.shm = open_group(world, self.topology.local_size == self.size, self.env.shared_memory,
                              self.watchdog, self.engine.oversubscribed)
        self.plans: dict = {}
        self.finalized = False
        self.stats = RunStats(self.rank, self.size, self.env.stats_dir, self.env.stats_interval_s)
        self.stats.placement = self._placement()
        self.stats.extra = self._gpu_peak
        if self.shm is not None:
            self.shm.carries_arrivals = True  # its agreement barriers carry the ranks' arrivals (core/stats.py)
        _stats.CURRENT = self.stats          # the collectives count their time into this rank's record
        if self.env.heartbeat_dir:      # ddlrun --restarts watches for hung ranks (core/heartbeat.py)
            self._start_heartbeat()
        self._select_gpu()
        from ..transports.gpu import transport
        self.gpu = transport.at_init(self)  # every rank's GPU and DDL_GPU_TRANSPORT (gpu/transport.py)
        if MPI.Query_thread() == MPI.THREAD_MULTIPLE:
            self.watchdog.start_thread()  # else the engine polls and runs the checks itself

    # -- topology -------------------------------------------------------------------------
    def _build_algorithms(self, hierarchy):
        world, rank = self.world, self.rank
        flat = world.Dup()
        if hierarchy is not None:
            coords = hierarchy.coordinates(rank)
            level_comms = [(i, world.Split(hierarchy.level_color(rank, i), coords[i]))
                           for i in hierarchy.active_levels]
            topo = Topology(hierarchy.local_rank(rank), hierarchy.local_size,
                            hierarchy.cross_rank(rank), self.size // hierarchy.local_size,
                            hierarchy.source, hierarchy.sizes)
            names = [LEVEL_NAMES[i] for i, _ in level_comms]
            comms = [c for _, c in level_comms]
        else:
            node_id = self.env.launcher.node_id
            if node_id is not None:
                node, source = world.Split(node_id, rank), "launcher"
            else:
                node, source = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank), "shared-memory"
            cross = world.Split(node.Get_rank(), rank)
            topo = Topology(node.Get_rank(), node.Get_size(), cross.Get_rank(), cross.Get_size(),
                            source, (node.Get_size(), cross.Get_size()))
            sizes = world.allgather(node.Get_size())
            uniform = len(set(sizes)) == 1
            if not uniform:
                topo.source += " (uneven nodes: flat algorithm)"
            comms, names = [], []
            for name, comm in (("node", node), ("top", cross)):
                if uniform and comm.Get_size() > 1:
                    comms.append(comm)
                    names.append(name)
                else:
                    comm.Free()
        if len(comms) < 2:
            for comm in comms:
                comm.Free()
            return topo, Algorithms(flat, [], None)
        levels = []
        for name, comm in zip(names[:-1], comms[:-1]):
            levels.append(Level(name, comm.Dup(), comm.Dup(), comm.Get_size(), comm.Get_rank()))
            comm.Free()
        return topo, Algorithms(flat, levels, comms[-1])

    def _ranks_on_host(self) -> int:
        host = self.world.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        try:
            return host.Get_size()
        finally:
            host.Free()

    def _placement(self) -> dict:
        """Where this rank ran, for its record (core/stats.py): node, local rank, GPU, cores."""
        try:
            cores = cpu_list(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = None
        topo = self.topology
        return {"node_index": topo.cross_rank, "nodes": topo.cross_size, "local_rank": topo.local_rank,
                "local_size": topo.local_size, "gpu": self.local_gpuid, "cores": cores,
                "visible_gpus": ",".join(self.env.cuda_visible_devices) if self.env.cuda_visible_devices is not None
                else None}

    def _start_heartbeat(self) -> None:
        from ..core import heartbeat

        env = self.env
        beat = heartbeat.Heartbeat(env.heartbeat_dir, self.rank, k=env.hang_k or heartbeat.DEFAULT_K,
                                   floor_s=env.hang_floor_s or heartbeat.DEFAULT_FLOOR_S,
                                   io_floor_s=env.hang_io_floor_s or heartbeat.DEFAULT_IO_FLOOR_S,
                                   clock=self.stats.clock)
        self.stats.beat = beat
        self.watchdog.on_wait = lambda what: beat.waiting(what, self.stats)

    def io_phase(self, name: str) -> None:
        """A checkpoint save or load begins (``"save"``, ``"load"``) or ends (``"step"``): the
        heartbeat times it apart from the steps."""
        if self.stats.beat is not None:
            self.stats.beat.phase(name, self.stats)

    def write_stats(self, status: str) -> None:
        """This rank's record (core/stats.py) now."""
        self.stats.write(status)

    @staticmethod
    def _gpu_peak() -> dict:
        """The GPU memory peak for every record this rank writes, when torch used a GPU."""
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                return {"gpu_peak_bytes": int(torch.cuda.max_memory_allocated())}
        except Exception:  # noqa: BLE001 - a record without the peak beats none
            pass
        return {}

    def _select_gpu(self) -> None:
        torch = sys.modules.get("torch")
        if self.local_gpuid is not None and torch is not None and torch.cuda.is_available():
            torch.cuda.set_device(self.local_gpuid)

    # -- faults ---------------------------------------------------------------------------
    def abort(self, message: str, code: int = 1, detail: str = "") -> None:
        """Log once, flush the timeline, give the launcher a moment to forward output, MPI_Abort."""
        if not self.aborting:
            self.aborting = True
            _log.log(f"{message}; aborting the job", before=detail)
            try:
                getattr(self, "timeline", NullTimeline()).flush()
                if getattr(self, "stats", None) is not None:
                    self.write_stats("aborted")
            except Exception:  # noqa: BLE001 - the abort must happen regardless
                pass
            time.sleep(ABORT_GRACE_S)  # mpiexec forwards output asynchronously and stops at the abort
        self.world.Abort(code)
        os._exit(code)  # MPICH's MPI_Abort may return before the launcher kills us: never run on

    # -- shutdown -------------------------------------------------------------------------
    def finalize(self, timeout_s: float = 30.0) -> None:
        if self.finalized:
            return
        self.finalized = True
        if self.engine.active or self.engine.queued:
            self.engine.wait(lambda: not (self.engine.active or self.engine.queued))
        gpu = sys.modules.get("ddl_runtime.transports.gpu")  # only when a CUDA collective loaded it
        if gpu is not None:
            gpu.drain(self)  # staged allreduces still in flight finish while peers still take part
        self.watchdog.stop_thread()
        self.watchdog.announce_exit()
        missing = self.watchdog.wait_for_exits(timeout_s)
        if missing:
            _log.log(f"finalize: ranks {','.join(map(str, missing))} did not finalize within {timeout_s:g} s")
        self.timeline.close()
        if self.stats.beat is not None:
            self.stats.beat.end(self.stats)
            self.stats.beat.close()
        self.write_stats("stopped" if self.stats.status == "stopped" else "finished")
        if _stats.CURRENT is self.stats:
            _stats.CURRENT = None
        if gpu is not None:
            gpu.shutdown(self, collective=not missing)  # the NCCL process group, the IPC groups
        if not missing:
            if self.shm is not None:
                self.shm.free()
                self.shm = None
            for comm in self._comms():
                comm.Free()

    def _comms(self):
        a = self.algorithms
        yield a.flat
        for level in a.levels:
            yield level.reduce_scatter
            yield level.allgather
        if a.top is not None:
            yield a.top
        yield self.control
        yield self.side
        yield self.small


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_runtime: Optional[Runtime] = None
_hooks_installed = False


def current() -> Runtime:
    if _runtime is None:
        raise DDLError("ddl_runtime is not initialized: call ddl_runtime.init() first")
    return _runtime


def get() -> Optional[Runtime]:
    return _runtime


def init() -> Runtime:
    global _runtime
    if _runtime is None:
        _runtime = Runtime()
        _install_hooks()
        for hook in list(_hooks.AT_INIT):
            hook()  # the handler for $WML_STOP_SIGNAL (checkpoint/stop.py), registered by ddl_runtime/__init__.py
    return _runtime


def finalize() -> None:
    global _runtime
    rt = _runtime
    if rt is not None:
        _runtime = None
        rt.finalize()


def _install_hooks() -> None:
    global _hooks_installed
    if not _hooks_installed:
        _hooks_installed = True
        atexit.register(_at_exit)


def abort_job(message: str, detail: str = "") -> None:
    """Abort the MPI job from anywhere (before, during or after init)."""
    if _runtime is not None:
        _runtime.abort(message, detail=detail)
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    _log.set_rank(rank, size)
    _log.log(f"{message}; aborting the job", before=detail)
    time.sleep(ABORT_GRACE_S)
    MPI.COMM_WORLD.Abort(1)
    os._exit(1)


def _at_exit() -> None:
    if _runtime is not None and _runtime.pid == os.getpid() and not MPI.Is_finalized():
        finalize()
