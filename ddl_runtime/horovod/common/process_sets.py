"""Horovod process sets: ProcessSet, global_process_set, add_process_set, remove_process_set.

A ProcessSet names a subset of ranks; collectives given `process_set=` run among those
ranks only, negotiated separately from the rest (ddl_runtime.collectives.process_sets).  Adding and
removing are collective over the whole job, as in Horovod with dynamic process sets.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from ...errors import DDLInputError


def _rt():
    from ...state import runtime  # imports mpi4py: only when the job is asked about

    return runtime


def _registry():
    from ...collectives import process_sets  # imports mpi4py: only once a set is used

    return process_sets.registry()


class ProcessSet:
    """A set of ranks.  `process_set_id` is set once it is registered (at init or add_process_set)."""

    def __init__(self, ranks_or_comm: Union[Sequence[int], object]):
        self.process_set_id: Optional[int] = None
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator: its ranks in COMM_WORLD
            from mpi4py import MPI
            group = ranks_or_comm.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), MPI.COMM_WORLD.Get_group())
        else:
            ranks = ranks_or_comm
        try:
            given = [int(r) for r in ranks]
        except (TypeError, ValueError):
            raise DDLInputError(f"ProcessSet: expected a list of ranks, got {ranks_or_comm!r}") from None
        self.ranks: List[int] = sorted(set(given))
        if len(self.ranks) != len(given):
            raise DDLInputError(f"ProcessSet: ranks {given}: a rank is listed more than once")

    def size(self) -> Optional[int]:
        if self.process_set_id is None:
            return None
        return len(self._members(check=True))

    def rank(self) -> Optional[int]:
        """This process's rank within the set (None when not a member or not registered)."""
        if self.process_set_id is None:
            return None
        members = self._members(check=True)
        me = _rt().current().rank
        return members.index(me) if me in members else None

    def included(self) -> Optional[bool]:
        if self.process_set_id is None:
            return None
        return _rt().current().rank in self._members()

    def _members(self, check: bool = False) -> List[int]:
        """The set's ranks; `check`: a ValueError if its id is not a registered set (as Horovod's size())."""
        if self.process_set_id == 0:
            return list(range(_rt().current().size))
        if check:
            check_known(self, "ProcessSet")
        return self.ranks

    def __eq__(self, other) -> bool:
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id \
            and (self.process_set_id is not None or self.ranks == other.ranks)

    def __hash__(self) -> int:
        return hash((self.process_set_id, tuple(self.ranks)))

    def __repr__(self) -> str:
        if self.process_set_id == 0:
            return "ProcessSet(process_set_id=0, ranks=all)"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_registered: dict = {0: global_process_set}
_aliases: dict = {}  # id -> further ProcessSet objects naming that set (a later init listing it again)


def check_known(process_set: Any, what: str) -> None:
    """A plain ValueError, as Horovod raises when a collective is called (not TensorFlow's
    InvalidArgumentError; and not DDLInputError, which a tf.function's tracing would turn into a
    StagingError), if `process_set` is not a registered set: never added, removed, or an id set by
    hand.  A rank outside a registered set is refused later, as before."""
    if not isinstance(process_set, ProcessSet) or process_set.process_set_id == 0 or _rt().get() is None:
        return
    if process_set.process_set_id is None:
        raise ValueError(f"{what}: {process_set} is not registered; call hvd.add_process_set() first")
    if process_set.process_set_id not in _registry().ranks:
        raise ValueError(f"{what}: process set {process_set.process_set_id} does not exist (removed, or never added)")


def is_global(process_set: Any) -> bool:
    """None or the global set (or another ProcessSet object naming it, id 0)."""
    if process_set is None:
        return True
    return process_set is global_process_set or getattr(process_set, "process_set_id", None) == 0


def controller_for(process_set: Optional[ProcessSet], what: str):
    """The negotiation controller of `process_set` on this rank (errors name the call)."""
    if _rt().get() is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if process_set is None:
        process_set = global_process_set
    if not isinstance(process_set, ProcessSet):
        raise DDLInputError(f"{what}: process_set must be a hvd.ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise DDLInputError(f"{what}: {process_set} is not registered; call hvd.add_process_set() first")
    try:
        return _registry().controller(process_set.process_set_id)
    except DDLInputError as exc:
        raise DDLInputError(f"{what}: {exc}") from None


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Register a new process set on every rank (all ranks must call this, in the same order)."""
    if _rt().get() is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise DDLInputError(f"{process_set} is registered already")
    ranks = process_set.ranks or list(range(_rt().current().size))
    process_set.ranks = ranks
    process_set.process_set_id = _registry().add(ranks)
    _registered[process_set.process_set_id] = process_set
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set on every rank; returns False if it was not registered.
    Every ProcessSet object naming it (one a later hvd.init listed again) becomes unregistered."""
    if not isinstance(process_set, ProcessSet) or process_set.process_set_id in (None, 0):
        return False
    if process_set.process_set_id not in _registered:
        return False
    set_id = process_set.process_set_id
    _registry().remove(set_id)
    for same in [_registered.pop(set_id), process_set, *_aliases.pop(set_id, [])]:
        same.process_set_id = None
    return True


def _start(process_sets_arg=None) -> None:
    """hvd.init(process_sets=[...]): register the static sets.  As in Horovod, a set listed twice
    (in any order of its ranks) or naming every rank (the global set) is a ValueError on every
    rank, and then no set of the list is registered; a set registered before keeps its id."""
    _registry()
    global_process_set.ranks = list(range(_rt().current().size))  # as Horovod's init sets them
    if process_sets_arg is None or process_sets_arg == "dynamic":
        return
    wanted = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets_arg]
    everyone = _registry().world.allgather([ps.ranks for ps in wanted])  # every rank the same sets, or none
    if any(r != everyone[0] for r in everyone):
        sides = "; ".join(f"rank {i}: {r}" for i, r in enumerate(everyone))
        raise DDLInputError(f"hvd.init(process_sets=...): ranks pass different process sets: {sides}")
    seen = {tuple(global_process_set.ranks): "the global process set"}
    for i, ps in enumerate(wanted):  # the same list on every rank: the same error on every rank
        ranks = tuple(ps.ranks or global_process_set.ranks)
        if ranks in seen:
            raise DDLInputError(f"hvd.init(process_sets=...): entry {i} (ranks {list(ranks)}) is a duplicate "
                                f"of {seen[ranks]}; list each set once")
        seen[ranks] = f"entry {i}"
    for ps in wanted:
        if ps.process_set_id is not None:
            continue
        ranks = ps.ranks or list(range(_rt().current().size))
        known = _registry().find(ranks)  # a set registered before this call
        if known is None:
            add_process_set(ps)
            continue
        ps.ranks, ps.process_set_id = ranks, known
        if _registered.get(known) is not ps:
            _aliases.setdefault(known, []).append(ps)


def _stop() -> None:
    for set_id in [i for i in _registered if i != 0]:
        _registered.pop(set_id).process_set_id = None
    for same in [ps for sets in _aliases.values() for ps in sets]:
        same.process_set_id = None
    _aliases.clear()
    from ...collectives import process_sets

    process_sets.reset()
