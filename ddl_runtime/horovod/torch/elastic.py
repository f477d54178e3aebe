"""``horovod.torch.elastic`` (``hvd.elastic``): TorchState and the ``run`` decorator.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()          # in a chained wml job: the step boundary (save and exit 75 on a stop)

See ddl_runtime/horovod/common/elastic.py: no workers come or go here.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict

import torch

from ..common.elastic import ObjectState, State, run_fn  # noqa: F401
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import rank

__all__ = ["State", "ObjectState", "TorchState", "run"]


class _Handler:
    """One model, optimizer or LR scheduler in a TorchState: a deep copy of its state_dict()."""

    def __init__(self, value: Any, sync: Callable[[Any], None]) -> None:
        self.value, self._sync = value, sync
        self.save()

    def save(self) -> None:
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self.saved)

    def sync(self) -> None:
        self._sync(self.value)

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


def _sync_model(model: torch.nn.Module) -> None:
    broadcast_parameters(model.state_dict(), root_rank=0)


def _sync_optimizer(optimizer: torch.optim.Optimizer) -> None:
    broadcast_optimizer_state(optimizer, root_rank=0)


def _sync_scheduler(scheduler: Any) -> None:
    scheduler.load_state_dict(broadcast_object(scheduler.state_dict()))


_SYNCS = ((torch.nn.Module, _sync_model), (torch.optim.Optimizer, _sync_optimizer),
          (torch.optim.lr_scheduler.LRScheduler, _sync_scheduler))


def _handler_for(value: Any):
    for kind, sync in _SYNCS:
        if isinstance(value, kind):
            return _Handler(value, sync)
    return None


class TorchState(ObjectState):
    """Models, optimizers and LR schedulers (by their state_dict) and plain values, as attributes."""

    def __init__(self, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers: Dict[str, _Handler] = {}
        plain: Dict[str, Any] = {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def persisted(self) -> Dict[str, Any]:
        return {**super().persisted(), "handlers": {name: h.saved for name, h in self._handlers.items()}}

    def load_persisted(self, saved: Dict[str, Any]) -> None:
        for name, handler in self._handlers.items():
            handler.saved = saved["handlers"][name]
            handler.restore()
        super().load_persisted(saved)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``hvd.elastic.run``: ``func(state, ...)`` after a sync; restores and retries on
    HorovodInternalError; in a chained wml job, first loads the state the previous segment saved."""
    return run_fn(func, _reset)


def _reset() -> None:
    """After a reset event Horovod re-initializes; the ranks never change here, nothing to redo."""
