"""Names of horovod.tensorflow's collectives, the same on every rank whatever order they run in.

Collectives are matched across ranks by name.  Eagerly, an unnamed collective is numbered when
it is called, in program order, which is the same on every rank.  In a graph (``tf.function``,
``tf.compat.v1`` sessions) TensorFlow's executor runs independent ops in any order, so a number
taken when the op *runs* differs between ranks; here the name is taken when the op is *built*:
the graph's name and a count per graph and kind ("train_step/allreduce.3", "graph2/broadcast.0"),
as Horovod names its ops from the graph.

A rank whose own input is bad (a dtype it cannot send, a root outside the set) refuses under the
name the collective would have had, so every other rank's collective of that name fails with a
message naming the rank and its error, instead of waiting for a rank that will never come.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import weakref
from typing import Any, Dict, Iterator, Optional

import tensorflow as tf

from ddl_runtime.errors import DDLInputError

from ..common.process_sets import check_known, controller_for
from .errors import HorovodInputError

_per_graph: "weakref.WeakKeyDictionary[Any, Dict[str, int]]" = weakref.WeakKeyDictionary()
_graphs = itertools.count()


def request_name(name: Optional[str], kind: str) -> Optional[str]:
    """The user's name; in a graph being built, one from the graph; eagerly None (numbered at the call)."""
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    counts = _per_graph.get(graph)
    if counts is None:
        counts = _per_graph[graph] = {"": next(_graphs)}
    n = counts.get(kind, 0)
    counts[kind] = n + 1
    return f"{_graph_label(graph, counts[''])}/{kind}.{n}"


def _graph_label(graph: Any, serial: int) -> str:
    """A tf.function's graph by its function's name (a retrace reuses the names, as Horovod's do);
    a tf.compat.v1 graph by the order it was first given a collective ("graph3"), so ops of an
    old graph never share a name with a newer graph's."""
    return getattr(graph, "name", None) or f"graph{serial}"


@contextlib.contextmanager
def refusing(kind: str, name: Optional[str], process_set: Any) -> Iterator[None]:
    """Run the input checks of collective `kind`; if they fail on this rank, tell the other ranks."""
    check_known(process_set, kind)  # as Horovod: a ValueError when the op is made, not at run time
    try:
        yield
    except (DDLInputError, NotImplementedError, TypeError) as exc:
        try:
            ctl = controller_for(process_set, kind)
        except Exception:  # noqa: BLE001 - no controller (not initialized, bad set): nobody to tell
            raise exc from None
        ctl.refuse(kind, name if name is not None else ctl.auto_name(kind), f"{type(exc).__name__}: {exc}")
        if isinstance(exc, DDLInputError):
            raise HorovodInputError(str(exc)) from None  # Horovod's kernels: InvalidArgumentError
        raise


GRAPH_THREADS = 64


def reserve_graph_threads() -> None:
    """Give TensorFlow's executor threads enough to hold every collective of a graph step at once.

    A collective that runs inside a graph holds one of TensorFlow's inter-op threads until every
    rank has submitted it.  By default there is one thread per core the rank may use (one under
    ``-bind-to core``), so two independent collectives that two ranks happen to start in opposite
    orders would each hold the only thread and wait for the other forever.  Horovod's compiled ops
    give the thread back while they wait; here the pool is made large instead (threads that wait
    sleep): up to GRAPH_THREADS collectives of one step may be independent of each other.  An
    explicit TF_NUM_INTEROP_THREADS or session config wins.
    """
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(GRAPH_THREADS))
    if tf.config.threading.get_inter_op_parallelism_threads() == 0:
        try:
            tf.config.threading.set_inter_op_parallelism_threads(int(os.environ["TF_NUM_INTEROP_THREADS"]))
        except (RuntimeError, ValueError):  # the eager context exists already: sessions still read the variable
            pass
