"""The checkpoint directory on disk: atomic writes, manifests with checksums, latest.json, keep 2.

Layout of a checkpoint directory (only rank 0 writes it):

    step-00000120-<token>.ckpt   the pickled payload (token: unique per write)
    step-00000120.json           its manifest: step, segment, framework, time, world size, bytes, sha256
    latest.json                  protocol.LATEST_FILE: step, segment, path, time, framework, manifest,
                                 save_s (how long the save took)
    saving.json                  protocol.SAVING_FILE, only while a checkpoint is written: step, segment,
                                 started, stop_asked (left behind: a save the walltime cut short)

A write goes payload, manifest, latest.json; each is a temp file (``.tmp-*``) written, fsynced and
renamed over its name, and the directory fsynced.  A job killed at any point leaves the previous
checkpoint (and latest.json naming it) intact: the manifest names the payload only once the
payload is complete, latest.json names the manifest only once both are.  Older checkpoints than
the last KEEP are removed after latest.json moved on.  Framework-free and MPI-free.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, List, Optional

from ..errors import DDLError
from .protocol import LATEST_FILE, SAVING_FILE

FORMAT = "wml-checkpoint/1"
KEEP = 2
_MANIFEST = re.compile(r"^step-(\d{8,})\.json$")
_CHUNK = 1 << 20


class CheckpointError(DDLError):
    """A checkpoint that cannot be read or written (corrupt, partial, directory not writable)."""


@dataclass(frozen=True)
class Manifest:
    step: int
    payload: str  # file name in the directory
    bytes: int
    sha256: str
    segment: Optional[int]
    framework: str
    time: float
    world_size: int

    @property
    def name(self) -> str:
        return manifest_name(self.step)


def manifest_name(step: int) -> str:
    return f"step-{step:08d}.json"


class _HashingWriter:
    """A file that hashes and counts what is written through it (pickle.dump writes in pieces)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.sha, self.count = fh, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.count += memoryview(data).nbytes  # pickle protocol 5 writes large arrays as PickleBuffer (no len())
        return self.fh.write(data)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(directory: Path, name: str, fill: Callable[[BinaryIO], Any]) -> Any:
    """Write `name` in `directory` through a temp file: fill(fh), fsync, rename over the name."""
    tmp = directory / f".tmp-{name}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as fh:
            result = fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return result


def _write_json(directory: Path, name: str, doc: dict) -> None:
    _write_atomic(directory, name, lambda fh: fh.write((json.dumps(doc, indent=1) + "\n").encode()))


def check_writable(directory: Path) -> None:
    """Create the directory if needed and prove a file can be written and renamed there."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(directory, ".write-probe", lambda fh: fh.write(b"ok\n"))
        (directory / ".write-probe").unlink()
    except OSError as exc:
        raise CheckpointError(f"checkpoint directory {directory} is not writable: {exc.strerror or exc}") from None


def write(directory: Path, payload: Any, step: int, segment: Optional[int], framework: str,
          world_size: int, stop_asked: Optional[float] = None) -> Path:
    """Write a checkpoint (payload pickled) and make latest.json name it; returns the payload path.
    saving.json names the checkpoint while it is written (protocol.SAVING_FILE): a job that ends
    meanwhile leaves it for the job side to tell."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.time()
    _write_json(directory, SAVING_FILE, {"step": step, "segment": segment, "started": started,
                                         "stop_asked": stop_asked})
    try:
        path = _write(directory, payload, step, segment, framework, world_size, started)
    except Exception:      # failed with an error the ranks report: not cut short (an interrupt is)
        with contextlib.suppress(OSError):
            (directory / SAVING_FILE).unlink()
        raise
    with contextlib.suppress(OSError):
        (directory / SAVING_FILE).unlink()
    prune(directory)
    return path


def _write(directory: Path, payload: Any, step: int, segment: Optional[int], framework: str,
           world_size: int, started: float) -> Path:
    payload_name = f"step-{step:08d}-{secrets.token_hex(4)}.ckpt"

    def fill(fh: BinaryIO) -> _HashingWriter:
        writer = _HashingWriter(fh)
        pickle.dump(payload, writer, protocol=pickle.HIGHEST_PROTOCOL)
        return writer

    writer = _write_atomic(directory, payload_name, fill)
    now = time.time()
    manifest = Manifest(step, payload_name, writer.count, writer.sha.hexdigest(), segment, framework, now, world_size)
    _write_json(directory, manifest.name, {"format": FORMAT, **manifest.__dict__})
    _fsync_dir(directory)
    path = directory / payload_name
    _write_json(directory, LATEST_FILE, {"step": step, "segment": segment, "path": str(path), "time": now,
                                         "framework": framework, "manifest": manifest.name,
                                         "save_s": round(time.time() - started, 3)})
    _fsync_dir(directory)
    return path


def manifests(directory: Path) -> List[int]:
    """Steps of the manifests in the directory, oldest first."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for m in map(_MANIFEST.match, names) if m)


def prune(directory: Path) -> None:
    """Remove all but the newest KEEP checkpoints, and payloads and temp files nothing names."""
    steps = manifests(directory)
    keep = set(steps[-KEEP:])
    named = set()
    for step in steps:
        path = directory / manifest_name(step)
        if step not in keep:
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        with contextlib.suppress(OSError, ValueError, KeyError):
            named.add(json.loads(path.read_text())["payload"])
    for name in os.listdir(directory):
        if (name.endswith(".ckpt") and name not in named) or name.startswith(".tmp-"):
            with contextlib.suppress(OSError):
                (directory / name).unlink()


def latest_step(directory: Path) -> Optional[int]:
    """The step latest.json names (the newest manifest when latest.json is absent), None when
    there is no checkpoint.  CheckpointError when latest.json cannot be read."""
    path = directory / LATEST_FILE
    try:
        return int(json.loads(path.read_text())["step"])
    except (FileNotFoundError, NotADirectoryError):
        steps = manifests(directory)
        return steps[-1] if steps else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} is unreadable ({type(exc).__name__}: {exc}); remove it to resume from "
                              f"the newest complete checkpoint") from None


def read(directory: Path, step: int) -> "tuple[Manifest, Any]":
    """The manifest and unpickled payload of the checkpoint at `step`, checked against the manifest."""
    path = directory / manifest_name(step)
    older = [s for s in manifests(directory) if s < step]
    remedy = (f"; the previous checkpoint (step {older[-1]}) is intact: remove {path.name} and {LATEST_FILE} "
              f"to resume from it" if older else "")
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
        manifest = Manifest(**{k: doc[k] for k in Manifest.__dataclass_fields__})
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint of step {step} in {directory} has no manifest {path.name}{remedy}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint manifest {path} is corrupt ({exc}){remedy}") from None
    payload = directory / manifest.payload
    try:
        data = payload.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"checkpoint payload {payload} is unreadable ({exc.strerror or exc}){remedy}") from None
    if len(data) != manifest.bytes or hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise CheckpointError(f"checkpoint payload {payload} is corrupt or partial ({len(data)} bytes, manifest says "
                              f"{manifest.bytes}; sha256 does not match){remedy}")
    return manifest, pickle.loads(data)
