"""The table behind Horovod's integer handles: poll(handle), synchronize(handle)."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Tuple

from ...errors import DDLInputError
from ...collectives.negotiation import Handle

_table: Dict[int, Tuple[Handle, Callable[[Handle], Any]]] = {}
_ids = itertools.count(1)


def register(handle: Handle, finish: Callable[[Handle], Any]) -> int:
    """Keep `handle`; `finish(handle)` turns the finished request into what synchronize returns."""
    hid = next(_ids)
    _table[hid] = (handle, finish)
    return hid


def _lookup(hid: int, what: str):
    entry = _table.get(hid)
    if entry is None:
        raise DDLInputError(f"{what}: handle {hid!r} is unknown (already synchronized, or never returned by an *_async call)")
    return entry


def poll(hid: int) -> bool:
    """True when the operation behind `hid` has finished (never blocks)."""
    handle, _ = _lookup(hid, "poll")
    return handle.done()


def synchronize(hid: int) -> Any:
    """Wait for the operation behind `hid` and return its result; errors of the collective raise here."""
    handle, finish = _lookup(hid, "synchronize")
    try:
        handle.wait()
        return finish(handle)
    finally:
        _table.pop(hid, None)
