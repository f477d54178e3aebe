"""save() and load(): collective checkpoints that rank 0 writes and every rank restores.

Each collective below agrees first (the runtime's signature agreement: a rank that calls another
collective gets the usual mismatch error, the stall inspector names ranks that do not arrive),
then rank 0 does the file work and broadcasts an outcome, so a rank-local fault (a directory rank
0 cannot write, a corrupt file, ranks at different steps) is the same one-line DDLError on every
rank, raised before anything is overwritten.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from ..core import log as _log
from ..errors import DDLError, DDLInputError, DDLMismatchError
from . import rng, store, stop
from .protocol import CHECKPOINT_DIR_ENV, EXIT_RESUME, SEGMENT_ENV


@dataclass
class Restored:
    """What load() gives every rank: the saved state, its step and the payload file."""
    state: Dict[str, Any]
    step: int
    path: Path


@dataclass
class _Settings:
    directory: Optional[Path] = None


_settings = _Settings()


def configure(directory=None, stop_signal: Optional[str] = None) -> None:
    """For runs outside wml: the checkpoint directory ($WML_CHECKPOINT_DIR wins when set) and the
    signal that requests a stop ($WML_STOP_SIGNAL wins when set), e.g. configure("ckpt", "USR1")."""
    if directory is not None:
        _settings.directory = Path(directory).expanduser().absolute()
    if stop_signal is not None:
        stop.configure_signal(stop_signal)


def directory() -> Optional[Path]:
    """$WML_CHECKPOINT_DIR, else what configure(directory=...) set, else None."""
    env = os.environ.get(CHECKPOINT_DIR_ENV)
    return Path(env) if env else _settings.directory


def _segment() -> Optional[int]:
    value = os.environ.get(SEGMENT_ENV)
    return int(value) if value and value.isdigit() else None


def require_directory(what: str) -> Path:
    d = directory()
    if d is None:
        raise DDLInputError(f"{what}: no checkpoint directory: set {CHECKPOINT_DIR_ENV} (wml submit --chain does) "
                            "or call ddl_runtime.checkpoint.configure(directory=...)")
    return d


def _gather(rt, obj: Any, what: str) -> Optional[List[Any]]:
    from ..collectives.ops import _agree

    _agree(rt, what, ((what,), ()))
    return rt.control.gather(obj, root=0)


def _outcome(rt, result: Any) -> Any:
    """Rank 0's result on every rank; an exception (its one-line error) is raised on every rank."""
    result = rt.control.bcast(result, root=0)
    if isinstance(result, BaseException):
        raise result from None
    return result


def save(state: Dict[str, Any], step: int, framework: str = "") -> Path:
    """Collective: rank 0 writes `state` (numpy arrays, torch tensors, picklable objects) and every
    rank's RNG streams as the checkpoint of `step`, atomically; every rank returns the payload's
    path once it is complete."""
    from ..state import runtime as _rt

    if not isinstance(state, dict):
        raise DDLInputError(f"save: state must be a dict, got {type(state).__name__}")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise DDLInputError(f"save(step={step!r}): step must be a non-negative integer")
    step = int(step)
    d = require_directory("save")
    rt = _rt.current()
    rt.io_phase("save")
    try:
        return _save(rt, d, state, step, framework)
    finally:
        rt.io_phase("step")


def _save(rt, d: Path, state: Dict[str, Any], step: int, framework: str) -> Path:
    gathered = _gather(rt, (step, str(d), rng.capture()), "checkpoint.save")
    result: Any = None
    if rt.rank == 0:
        steps = [g[0] for g in gathered]
        dirs = sorted({g[1] for g in gathered})
        if len(set(steps)) > 1:
            result = DDLMismatchError(f"save(step={step}): ranks are at different steps ("
                                      + ", ".join(f"rank {r}: {s}" for r, s in enumerate(steps))
                                      + "); call save() at the same step boundary on every rank (agree() first)")
        elif len(dirs) > 1:
            result = DDLMismatchError(f"save: ranks name different checkpoint directories ({', '.join(dirs)})")
        else:
            payload = {"state": state, "rng": [g[2] for g in gathered], "world_size": rt.size}
            try:
                result = store.write(d, payload, step, _segment(), framework, rt.size, stop.asked_at())
            except Exception as exc:  # noqa: BLE001 - reported on every rank
                result = store.CheckpointError(f"save(step={step}): could not write the checkpoint in {d}: "
                                               f"{type(exc).__name__}: {exc}")
    path = _outcome(rt, result)
    rt.stats.checkpoint_step = step       # this rank's record: the run's last checkpoint (core/stats.py)
    return path


def load(restore_rng: bool = True) -> Optional[Restored]:
    """Collective: the newest complete checkpoint, the same on every rank, or None when there is none.

    Each rank first reads latest.json itself: ranks that would restore different steps (a directory
    that is not shared between nodes) raise one DDLMismatchError on every rank.  Rank 0 then checks
    that the directory is writable (so a run does not train for a walltime it cannot save), reads
    the checkpoint, verifies its checksum and broadcasts it.  With `restore_rng` each rank's random
    streams continue where that rank's stopped (the same rank's, when the job size is unchanged).
    """
    from ..state import runtime as _rt

    d = require_directory("load")
    rt = _rt.current()
    rt.io_phase("load")
    try:
        restored = _load(rt, d, restore_rng)
        if restored is not None:
            rt.stats.step_base = restored.step + 1      # the attempt's steps count on from there (core/stats.py)
    finally:
        rt.io_phase("step")
    return restored


def _load(rt, d: Path, restore_rng: bool) -> Optional[Restored]:
    try:
        view: Any = store.latest_step(d)
    except store.CheckpointError as exc:
        view = f"unreadable ({exc})"
    gathered = _gather(rt, (view, str(d)), "checkpoint.load")
    result: Any = None
    if rt.rank == 0:
        views = [g[0] for g in gathered]
        if len({repr(v) for v in views}) > 1:
            seen = ", ".join(f"rank {r}: {'none' if v is None else v if isinstance(v, str) else f'step {v}'}"
                             for r, v in enumerate(views))
            result = DDLMismatchError(f"load: ranks see different checkpoints in {d} ({seen}); the checkpoint "
                                      "directory must be one directory that every node shares")
        elif isinstance(views[0], str):
            result = store.CheckpointError(views[0][len("unreadable ("):-1])
        else:
            try:
                store.check_writable(d)
                if views[0] is not None:
                    manifest, payload = store.read(d, views[0])
                    result = Restored(payload, manifest.step, d / manifest.payload)
            except store.CheckpointError as exc:
                result = exc
            except Exception as exc:  # noqa: BLE001 - unpickling, reported on every rank
                result = store.CheckpointError(f"load: could not read the checkpoint of step {views[0]} in {d}: "
                                               f"{type(exc).__name__}: {exc}")
    restored = _outcome(rt, result)
    if restored is None:
        return None
    payload = restored.state
    if restore_rng:
        states = payload["rng"]
        if len(states) != rt.size and rt.rank == 0:
            _log.log(f"load: the checkpoint was written by {len(states)} ranks, this job has {rt.size}: "
                     f"rank r continues rank r mod {len(states)}'s random streams")
        rng.restore(states[rt.rank % len(states)])
    if rt.rank == 0:
        _log.log(f"resuming from the checkpoint of step {restored.step} ({restored.path})")
    rt.stats.resumed_from = rt.stats.run_step = restored.step     # this rank's record (core/stats.py)
    return Restored(payload["state"], restored.step, restored.path)


def exit_resume() -> None:
    """Finalize the runtime and exit with protocol.EXIT_RESUME (75): saved, resume in the next job."""
    from ..state import runtime as _rt

    sys.stdout.flush()
    sys.stderr.flush()
    _rt.finalize()
    raise SystemExit(EXIT_RESUME)


__all__ = ["Restored", "configure", "directory", "save", "load", "exit_resume", "DDLError"]
