"""Chrome trace output (`DDL_TIMELINE=path`): one JSON file per rank, written as it happens.

The path may contain `{rank}`; otherwise `.rank<N>` is put before the extension
(`trace.json` -> `trace.rank0.json`).  Each file is a JSON array of trace events with
`pid` = rank, so the files of all ranks can be concatenated into one trace
(`python -m ddl_runtime.timeline merge out.json trace.rank*.json`).  Events are appended
and flushed after every collective, so a crashed job leaves a file that Chrome and
Perfetto load (they accept a missing closing `]`); `close()` ends the array, which makes
the file strict JSON.

Threads (`tid`): 1 = API calls (B/E), 2 = host copies (PACK, UNPACK, WAIT as X events),
3.. = in-flight reductions (ALLREDUCE / BCAST / ALLGATHER X events, one lane per slot).
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

TID_API, TID_HOST, TID_MPI = 1, 2, 3
LANES = 4


def rank_path(path: str, rank: int) -> str:
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext or '.json'}"


def ref_rows(refs) -> list:
    """(name, dtype, shape) of each distinct TensorRef, for Timeline.tensors_reduced."""
    return [(r.name, r.dtype, r.shape) for r in {id(r): r for r in refs}.values()]


class NullTimeline:
    enabled = False

    def begin(self, name: str, args: Optional[dict] = None) -> None:
        pass

    def end(self, name: str) -> None:
        pass

    def span(self, name: str, tid: int, t0: float, t1: float, args: Optional[dict] = None) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    # Hooks for Horovod's per-tensor layout (ddl_runtime.horovod.timeline); nothing in this one.
    def cycle_start(self) -> None:
        pass

    def tensors_negotiated(self, kind: str, tensors: list, t0: float, t1: float) -> None:
        pass

    def tensors_activity(self, kind: str, names: list, activity: str, t0: float, t1: float) -> None:
        pass

    def tensors_done(self, kind: str, tensors: list) -> None:
        pass

    def tensors_reduced(self, tensors: list, activity: str, t0: float, t1: float) -> None:
        """An allreduce of (name, dtype, shape) tensors that was not negotiated (the ordered engine)."""


class Timeline(NullTimeline):
    enabled = True

    def __init__(self, path: str, rank: int, size: int, epoch_wall: float, exact_path: bool = False):
        self.path = path if exact_path else rank_path(path, rank)  # exact: this file, no rank suffix
        self.pid = self._pid(rank)
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")
        self._first = True
        # perf_counter() -> microseconds since rank 0's wall-clock epoch (aligns ranks on one host)
        self._offset_us = (time.time() - epoch_wall) * 1e6 - time.perf_counter() * 1e6
        self._file.write("[\n")
        self._meta("process_name", 0, self._process_args(rank, epoch_wall))
        self._meta("process_sort_index", 0, {"sort_index": rank})
        for tid, name in [(TID_API, "api"), (TID_HOST, "host copies")] + [
                (TID_MPI + i, f"reduction lane {i}") for i in range(LANES)]:
            self._meta("thread_name", tid, {"name": name})
        self.flush()

    def _pid(self, rank: int) -> int:
        return rank

    def _process_args(self, rank: int, epoch_wall: float) -> dict:
        return {"name": f"rank {rank}"}

    def _ts(self, t: float) -> float:
        return round(t * 1e6 + self._offset_us, 3)

    def _write(self, event: dict) -> None:
        if self._file is None:
            return
        self._file.write(("" if self._first else ",\n") + json.dumps(event, separators=(",", ":")))
        self._first = False

    def _meta(self, name: str, tid: int, args: dict) -> None:
        self._write({"name": name, "ph": "M", "pid": self.pid, "tid": tid, "args": args})

    def begin(self, name: str, args: Optional[dict] = None) -> None:
        event = {"name": name, "ph": "B", "ts": self._ts(time.perf_counter()), "pid": self.pid, "tid": TID_API}
        if args:
            event["args"] = args
        self._write(event)

    def end(self, name: str) -> None:
        self._write({"name": name, "ph": "E", "ts": self._ts(time.perf_counter()), "pid": self.pid, "tid": TID_API})
        self.flush()

    def span(self, name: str, tid: int, t0: float, t1: float, args: Optional[dict] = None) -> None:
        event = {"name": name, "ph": "X", "ts": self._ts(t0), "dur": round((t1 - t0) * 1e6, 3),
                 "pid": self.pid, "tid": tid}
        if args:
            event["args"] = args
        self._write(event)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.write("\n]\n")
            self._file.close()
            self._file = None


def load(path: str) -> list:
    """Load a trace file the way Chrome does: a missing closing `]` (crashed job) is accepted."""
    with open(path, encoding="utf-8") as f:
        text = f.read().rstrip()
    if text.endswith(","):
        text = text[:-1]
    if not text.endswith("]"):
        text += "\n]"
    return json.loads(text)


def merge(out: str, paths: list) -> None:
    events = []
    for path in paths:
        events.extend(load(path))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(events, f)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[0] != "merge":
        sys.stderr.write("usage: python -m ddl_runtime.timeline merge OUT.json RANK_FILE...\n")
        return 2
    merge(argv[1], argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
