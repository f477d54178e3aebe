"""``hvd.elastic`` on ddl_runtime: Horovod's State objects and the ``run`` decorator.

Workers cannot be added or removed here: there is no elastic driver, so the job's ranks are fixed
and ``check_host_updates()`` never raises HostsUpdatedInterrupt.  What works as in Horovod:
``commit()`` keeps a copy of the state in memory, ``restore()`` returns to the last commit,
``sync()`` gives every rank rank 0's state, and ``run`` syncs before calling the training function
and, on HorovodInternalError, restores the last commit, syncs and calls it again.

In a chained wml job (``$WML_CHECKPOINT_DIR`` set, or ddl_runtime.checkpoint.configure()),
``commit()`` is also the step boundary: it agrees on the stop signal (ddl_runtime.checkpoint.agree,
folded into the gradient reduction where there is one) and, when any rank got it, saves the
committed state (ddl_runtime.checkpoint.save, the commit count as its step) and exits with status
75; the next segment's ``run`` loads it back before the first sync.
"""
from __future__ import annotations

import abc
import functools
from typing import Any, Callable, Dict, List

from ... import checkpoint
from ...core import log as _log
from ...errors import DDLInputError
from .exceptions import HorovodInternalError, HostsUpdatedInterrupt

FRAMEWORK = "horovod-elastic"
RETRIES = 3  # HorovodInternalError restores and retries this many times at most, then raises


class State(abc.ABC):
    """Horovod's State: subclasses define save() / restore() / sync(); to be saved by a chained
    job also persisted() / load_persisted() (ObjectState and the framework states do)."""

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: List[Callable[[], None]] = []
        self._commits = 0  # the chain's step: commits so far, restored from a checkpoint

    def register_reset_callbacks(self, callbacks: List[Callable[[], None]]) -> None:
        """Functions called after a reset (in Horovod: workers added or removed; never here)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: Any, update_res: Any = None) -> None:
        """Horovod's driver notification; there is no driver here."""

    def commit(self) -> None:
        """Save the state in memory, check for host changes (none here) and, in a chained job,
        agree on the stop signal: on a stop, save the committed state to disk and exit 75."""
        self.save()
        self.check_host_updates()
        if checkpoint.directory() is None:
            return
        self._require_persistence()
        self._commits += 1
        if checkpoint.agree(self._commits):
            checkpoint.save({"elastic": self.persisted()}, self._commits, framework=FRAMEWORK)
            checkpoint.exit_resume()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt in Horovod when hosts changed; the ranks are fixed here."""

    @abc.abstractmethod
    def save(self) -> None:
        """Keep the current state in memory (the commit)."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Return to the last commit."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Give every rank rank 0's state."""

    def persisted(self) -> Dict[str, Any]:
        """The last committed state as picklable values (what a chained job saves).  A State
        subclass of the user's own has none unless it defines this and load_persisted()."""
        raise DDLInputError(self._not_persistable())

    def load_persisted(self, saved: Dict[str, Any]) -> None:
        """Make `saved` (from persisted()) the committed state and restore it."""
        raise DDLInputError(self._not_persistable())

    def _not_persistable(self) -> str:
        return (f"hvd.elastic: {type(self).__name__} defines no persisted()/load_persisted(), which a chained "
                "job (wml submit --chain) needs to save and restore it; derive it from hvd.elastic.ObjectState "
                "(or a framework's State) or define both")

    def _require_persistence(self) -> None:
        """In a chained job, before anything is agreed or loaded: the same error on every rank (the
        ranks run the same class), never one at the stop when the walltime is near."""
        cls = type(self)
        if cls.persisted is State.persisted or cls.load_persisted is State.load_persisted:
            raise DDLInputError(self._not_persistable())

    def resume_from_checkpoint(self) -> bool:
        """In a chained job: load the newest checkpoint into this state (collective)."""
        if checkpoint.directory() is None:
            return False
        self._require_persistence()
        restored = checkpoint.load()
        if restored is None:
            return False
        if "elastic" not in restored.state:
            raise checkpoint.CheckpointError(f"{restored.path} was not written by hvd.elastic (framework "
                                             "differs); use a checkpoint directory of its own")
        self.load_persisted(restored.state["elastic"])
        self._commits = restored.step
        return True


class ObjectState(State):
    """Picklable Python values given as keyword arguments, exposed as attributes."""

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any) -> None:
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def persisted(self) -> Dict[str, Any]:
        return {"objects": dict(self._saved_state)}

    def load_persisted(self, saved: Dict[str, Any]) -> None:
        self._saved_state = dict(saved["objects"])
        ObjectState.restore(self)

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, value)


class VariablesState(ObjectState):
    """Framework variables tracked as numpy copies (``v.numpy()``, ``v.assign(value)``) beside plain
    values; subclasses name the variables (``_tracked``) and broadcast them from rank 0 (``_broadcast``)."""

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any) -> None:
        self._save_variables()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)

    @abc.abstractmethod
    def _tracked(self) -> List[Any]:
        """The variables this state tracks."""

    @abc.abstractmethod
    def _broadcast(self, variables: List[Any]) -> None:
        """Assign rank 0's values to `variables` on every rank."""

    def _save_variables(self) -> None:
        self._values = [v.numpy() for v in self._tracked()]

    def save(self) -> None:
        self._save_variables()
        super().save()

    def restore(self) -> None:
        for var, value in zip(self._tracked(), self._values):
            var.assign(value)
        super().restore()

    def sync(self) -> None:
        tracked = self._tracked()
        if tracked:
            self._broadcast(tracked)
        self._save_variables()
        super().sync()

    def persisted(self) -> Dict[str, Any]:
        return {**super().persisted(), "variables": list(self._values)}

    def load_persisted(self, saved: Dict[str, Any]) -> None:
        tracked = self._tracked()
        if len(saved["variables"]) != len(tracked):
            raise DDLInputError(f"hvd.elastic: the checkpoint holds {len(saved['variables'])} variables, this "
                                f"state tracks {len(tracked)}")
        self._values = list(saved["variables"])
        for var, value in zip(tracked, self._values):
            var.assign(value)
        super().load_persisted(saved)


class ModelState(VariablesState):
    """A built Keras 3 model and its optimizer (default: the model's), plus plain values."""

    def __init__(self, model: Any, optimizer: Any, backend: Any, who: str, **kwargs: Any) -> None:
        if not getattr(model, "built", True):
            raise DDLInputError(f"hvd.elastic.{who}: build the model first (model.build(input_shape))")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        super().__init__(**kwargs)

    def _tracked(self) -> List[Any]:
        opt = list(self.optimizer.variables) if self.optimizer is not None else []
        return list(self.model.variables) + opt


def run_fn(func: Callable[..., Any], reset: Callable[[], None]) -> Callable[..., Any]:
    """Horovod's elastic loop for a framework (``reset`` re-initializes after a reset event)."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        state.resume_from_checkpoint()
        failures = 0
        reset_required = False
        while True:
            if reset_required:
                reset()
                state.on_reset()
            state.sync()
            try:
                return func(state, *args, **kwargs)
            except HorovodInternalError as exc:
                failures += 1
                if failures > RETRIES:
                    raise
                _log.log(f"hvd.elastic.run: {exc}; restoring the last commit and retrying ({failures}/{RETRIES})")
                state.restore()
            except HostsUpdatedInterrupt:
                pass
            reset_required = True

    return wrapper
