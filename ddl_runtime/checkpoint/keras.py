"""Keras 3 (torch or TensorFlow backend): ``WalltimeCheckpoint``, training that outlives a job.

    model.fit(x, y, epochs=12, callbacks=[ddl.DDLCallback(), ddl.WalltimeCheckpoint(),
                                          ddl.DDLGlobalVariablesCallback()])

Keras's own ``BackupAndRestore`` semantics, for a chained job (``wml submit --chain N``):

- At train begin it restores the newest checkpoint in $WML_CHECKPOINT_DIR (every rank the same):
  the model's weights, the optimizer's variables (its iteration count included; the optimizer is
  built first), each rank's random streams (Python, numpy, torch, Keras seed generators), the
  epoch, and the batch inside the epoch.  Keras itself restarts an interrupted epoch from its
  first batch; here the resumed epoch draws the same shuffle (each rank's random streams as they
  were when that epoch began, so ``shuffle=True`` on the torch backend repeats its order), passes
  over the batches already trained without training them, and trains on from the next batch with
  the random streams as they were when the run stopped: the run continues as if never stopped.
- At every batch end it asks the ranks whether any got the stop signal (``agree()``); if so it
  saves, and the process exits with status 75 (``EXIT_RESUME``) at once on every rank: ``fit``
  does not return and the rest of the script does not run (other callbacks get no
  ``on_train_end``).
- ``WalltimeCheckpoint(every=N)`` also saves after every N batches of the run (without
  stopping), so a run that ``ddlrun --restarts`` restarts after a lost node or a hang redoes at
  most N batches.
- A save (or a stop) that falls on an epoch's last batch is made as the next epoch begins
  (before Keras draws that epoch's data iterator from the random streams); at the run's very
  end, none is needed.

Without a checkpoint directory ($WML_CHECKPOINT_DIR or checkpoint.configure) it does nothing.
The data order of an epoch must depend only on the epoch and the random streams at its start:
numpy arrays with ``shuffle=True`` on the torch backend, ``shuffle=False``, or a PyDataset whose
order is fixed per epoch.  On TensorFlow, ``fit(shuffle=True)`` shuffles inside tf.data with a
random state no checkpoint can hold: pass ``shuffle=False`` and order the data yourself.
The metrics Keras reports for the epoch a run resumes in cover the batches of that job only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import keras

from ..errors import DDLInputError
from ..state import runtime as _rt
from . import rng, saving, stop
from . import variables as _vars

FRAMEWORK = "keras"


def seed_states(model: Any) -> _vars.Named:
    """The model's seed generators' states and Keras's global one: each rank's own random streams."""
    from keras.src.backend.common import global_state

    weights = {id(w) for w in model.weights}
    states = [v for v in model.non_trainable_variables if id(v) not in weights]
    named = [(f"seed/{i}", v) for i, v in enumerate(states)]  # by position: their paths carry counters
    generator = global_state.get_global_attribute("global_seed_generator")
    if generator is not None:
        named.append(("seed/global", generator.state))
    return named


def shared_state(model: Any, optimizer: Any) -> _vars.Named:
    """The variables every rank holds alike: the model's weights and the optimizer's variables."""
    named = _vars.unique(model.weights, "model")
    if optimizer is not None:
        named += _vars.unique(optimizer.variables, "optimizer")
    return named


@dataclass
class _Resume:
    epoch: int
    batch: int  # the last batch of `epoch` the stopped run trained
    epoch_rng: Dict[str, Any]  # this rank's random streams when `epoch` began
    stop_rng: Dict[str, Any]  # ... and when the run stopped (restored once the trained batches are passed)


class WalltimeCheckpoint(keras.callbacks.Callback):
    """Saves before the walltime and resumes in the next job (see the module docstring)."""

    def __init__(self, every: Optional[int] = None) -> None:
        super().__init__()
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise DDLInputError(f"WalltimeCheckpoint: every={every!r} must be a positive number of batches")
        self.every = every
        self.active = saving.directory() is not None
        if every is not None and not self.active:
            saving.require_directory(f"WalltimeCheckpoint(every={every})")
        self._resume: Optional[_Resume] = None
        self._epoch = 0
        self._epoch_rng: Dict[str, Any] = {}
        self._batch_begun = -1
        self._step = -1  # the last batch trained in the whole run, counted from 0
        self._deferred: Optional[bool] = None  # a save due at an epoch's last batch (True: and a stop)

    # restore ---------------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        if not self.active:
            return
        from ..collectives import basics

        basics.init()
        model = self.model
        if not model.built:
            raise DDLInputError("WalltimeCheckpoint: the model must be built before fit() (give it a keras.Input "
                                "or call it on a batch), so that a checkpoint can be restored into it")
        restored = saving.load()
        if restored is None:
            return
        state = restored.state
        if state.get("framework") != FRAMEWORK:
            raise DDLInputError(f"WalltimeCheckpoint: the checkpoint of step {restored.step} ({restored.path}) "
                                f"was written by {state.get('framework') or 'another program'!r}, not by this callback")
        optimizer = model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(model.trainable_variables)
        _vars.assign(shared_state(model, optimizer), state["shared"], "WalltimeCheckpoint")
        from ..collectives import basics

        mine = state["per_rank"][basics.rank() % len(state["per_rank"])]
        _vars.assign(seed_states(model), mine["seeds"], "WalltimeCheckpoint")
        self._resume = _Resume(state["epoch"], state["batch"], mine["epoch_rng"], rng.capture())
        self._step = restored.step
        model._initial_epoch = state["epoch"]  # as BackupAndRestore does

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        resume = self._resume
        if resume is not None and epoch == resume.epoch:
            rng.restore(resume.epoch_rng)  # the epoch's shuffle is drawn after this: the same order
            self._epoch_rng = resume.epoch_rng
            if resume.batch < 0:       # saved as this epoch began: nothing of it to pass over
                self._resume = None
            else:
                self._pass_trained_batches(resume)
        elif self.active:
            self._epoch_rng = rng.capture()
        if self._deferred is not None:
            # The save (and stop) agreed at the last epoch's last batch, made now, as this epoch
            # begins (batch -1): between the two Keras draws from the random streams (the next
            # epoch's data iterator), so a checkpoint taken there could not resume the same run.
            stopping, self._deferred = self._deferred, None
            self.save(-1)
            if stopping:
                saving.exit_resume()

    def _pass_trained_batches(self, resume: _Resume) -> None:
        """Until the batch after `resume.batch`, the train function only consumes the data."""
        model = self.model
        train = model.train_function

        def train_function(data):
            if self._batch_begun <= resume.batch:
                if keras.backend.backend() == "tensorflow":  # `data` is the iterator the step reads
                    for _ in range(int(model.steps_per_execution or 1)):
                        next(data, None)
                _rt.current().stats.passed()   # no step in this rank's record (core/stats.py)
                return {}
            model.train_function = train
            rng.restore(resume.stop_rng)
            self._resume = None
            return train(data)

        model.train_function = train_function

    # save ------------------------------------------------------------------------------------

    def on_train_batch_begin(self, batch, logs=None):
        self._batch_begun = batch

    def on_train_batch_end(self, batch, logs=None):
        if not self.active or (self._resume is not None and batch <= self._resume.batch):
            return
        self._step += 1
        _rt.current().stats.run_step = self._step    # the step the run reached (core/stats.py)
        stopping = stop.agree(self._step)
        due = bool(self.every) and (self._step + 1) % self.every == 0
        if (stopping or due) and batch + 1 == (self.params or {}).get("steps"):
            self._deferred = stopping      # the epoch's last batch: saved as the next one begins
            return
        if stopping:
            self.save(batch)
            saving.exit_resume()
        if due:
            self.save(batch)

    def save(self, batch: int):
        """Collective: save now, as after `batch` of the current epoch."""
        model = self.model
        mine = {"epoch_rng": self._epoch_rng, "seeds": _vars.values(seed_states(model))}
        state = {"framework": FRAMEWORK, "epoch": self._epoch, "batch": batch,
                 "shared": _vars.values(shared_state(model, model.optimizer)),
                 "per_rank": _vars.per_rank(mine)}
        return saving.save(state, self._step, framework=FRAMEWORK)
