"""What a chain is, checked before anything is written or submitted."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import WmlError
from ..walltime import parse_duration_s

STOP_SIGNAL = "USR1"
CHECKPOINT_SUBDIR = "checkpoints"


@dataclass(frozen=True)
class Chain:
    """A run of ``length`` jobs sharing ``checkpoint_dir``; ``run_dir`` holds its segments."""

    length: int
    run_dir: Path                 # <jobs dir>/<name>-<time>: chain.json and segment-<k>/
    checkpoint_dir: Path          # absolute; default run_dir/checkpoints
    margin_s: int                 # the stop signal comes this long before the walltime
    walltime_s: int               # the walltime the segment's own timer counts down (where it has one)
    signal: str = STOP_SIGNAL

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def finished_file(self) -> Path:
        from ddl_runtime.checkpoint.protocol import FINISHED_FILE   # here: the runtime's package is for jobs

        return self.checkpoint_dir / FINISHED_FILE

    def segment_dir(self, index: int) -> Path:
        return self.run_dir / f"segment-{index}"


@dataclass(frozen=True)
class Segment:
    """Segment ``index`` (1-based) of ``chain``; ``previous``: the job id it waits for."""

    chain: Chain
    index: int
    previous: Optional[str] = None

    @property
    def last(self) -> bool:
        return self.index == self.chain.length


def check_length(length: Optional[int], interactive: bool) -> None:
    if length is None:
        return
    if length < 1:
        raise WmlError(f"--chain {length}: a chain has 1 or more jobs")
    if interactive:
        raise WmlError("--chain submits batch jobs that resume each other; it cannot be combined with --interactive")


def margin_seconds(text: Optional[str], site_default: str) -> int:
    return parse_duration_s(text if text is not None else site_default, "--signal-margin")


def check_margin(margin_s: int, walltime_s: int, shown_walltime: str) -> None:
    if margin_s >= walltime_s:
        raise WmlError(f"--signal-margin {_clock(margin_s)} is not shorter than the walltime {shown_walltime}: "
                       "the ranks would be told to stop before they start (give a shorter --signal-margin "
                       "or a longer -t)")


def check_checkpoint_dir(path: Path) -> None:
    """The directory exists and is writable, or can be created: its nearest existing
    ancestor is a writable directory.  Nothing is created here."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise WmlError(f"--checkpoint-dir {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK) or _read_only(probe):
        what = "is not writable" if probe == path else f"cannot be created: {probe} is not writable"
        raise WmlError(f"--checkpoint-dir {path} {what}")


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _clock(seconds: int) -> str:
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"
