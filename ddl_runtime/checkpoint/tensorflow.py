"""TensorFlow custom loops (tf.GradientTape with ddl_runtime.tensorflow or Horovod's
DistributedGradientTape): the one-or-two-line addition for training that outlives a job.

    ckpt = Checkpointer(model, optimizer, rng=generator)     # Keras models/optimizers, tf.Variables, ...
    for step in range(ckpt.restore(), steps):               # 0, or the step after the saved one
        ...tape, gradients, optimizer.apply_gradients(...)...
        ckpt.step_end(step)             # agrees on the stop; on a stop saves and exits 75

The same shape as ddl_runtime.checkpoint.torch's Checkpointer.  Saved: the variables of the model
(a Keras model or layer, or any tf.Module), of the optimizer (a Keras optimizer; built on the
models' trainable variables before a restore when it has not taken a step yet) and of every
extra object (a tf.Variable, a tf.Module, a Keras object), the step, and each rank's own random
streams: Python's, numpy's, torch's (ddl_runtime.checkpoint.save), Keras's seed generators and
every tf.random.Generator passed.  The data position is the step: derive the batch from it.
"""
from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from ..errors import DDLInputError
from . import saving
from .boundary import StepBoundary
from . import variables as _vars

FRAMEWORK = "tensorflow"


def _keras():
    import sys

    return sys.modules.get("keras")


def _variables(obj: Any) -> Optional[list]:
    keras = _keras()
    if keras is not None and isinstance(obj, keras.optimizers.Optimizer):
        return list(obj.variables)
    if keras is not None and isinstance(obj, keras.Layer):
        return list(obj.weights)
    if isinstance(obj, tf.random.Generator):
        return [obj.state]
    if isinstance(obj, tf.Variable) or (keras is not None and isinstance(obj, keras.Variable)):
        return [obj]
    if isinstance(obj, tf.Module):
        return list(obj.variables)
    return None


class Checkpointer(StepBoundary):
    """Saves and restores a TensorFlow training run at step boundaries (see the module docstring).

    Without a checkpoint directory ($WML_CHECKPOINT_DIR, or checkpoint.configure(directory=...))
    it does nothing: the same script runs in one job unchanged.  ``every`` and ``steps`` as for
    torch's Checkpointer: also save every that many steps (a crash loses at most that many); the
    run's number of steps, so that its last step finishes the run even when a stop was asked for.
    """

    def __init__(self, model: Any, optimizer: Any = None, every: Optional[int] = None,
                 steps: Optional[int] = None, **objects: Any) -> None:
        everything = {"model": model, **({"optimizer": optimizer} if optimizer is not None else {}), **objects}
        for name, obj in everything.items():
            if _variables(obj) is None:
                raise DDLInputError(f"Checkpointer: {name}={type(obj).__name__} holds no variables (expected a "
                                    "Keras model, layer or optimizer, a tf.Module or a tf.Variable)")
        self.objects = everything
        self._boundary(every, steps)
        self.restored_step: Optional[int] = None

    def _shared(self) -> _vars.Named:
        named: _vars.Named = []
        for name, obj in self.objects.items():
            if not isinstance(obj, tf.random.Generator):
                named += _vars.unique(_variables(obj), name)
        return named

    def _own(self) -> _vars.Named:
        """Each rank's random streams: tf.random.Generators passed and the Keras models' seed generators."""
        keras = _keras()
        named: _vars.Named = []
        for name, obj in self.objects.items():
            if isinstance(obj, tf.random.Generator):
                named.append((f"{name}/state", obj.state))
            elif keras is not None and isinstance(obj, keras.Layer):
                from .keras import seed_states

                named += [(f"{name}/{n}", v) for n, v in seed_states(obj)]
        return named

    def restore(self) -> int:
        """Collective: load the newest checkpoint into the objects (every rank the same, random
        streams each rank its own); returns the step to start from (0 when there is none)."""
        restored = saving.load() if self.active else None
        if restored is None:
            return 0
        state = restored.state
        if state.get("framework") != FRAMEWORK:
            raise DDLInputError(f"Checkpointer: the checkpoint of step {restored.step} ({restored.path}) was written "
                                f"by {state.get('framework') or 'another program'!r}, not by a TensorFlow Checkpointer")
        self._build_optimizers()
        _vars.assign(self._shared(), state["shared"], "Checkpointer")
        from ..collectives import basics

        _vars.assign(self._own(), state["per_rank"][basics.rank() % len(state["per_rank"])], "Checkpointer")
        self.restored_step = restored.step
        return restored.step + 1

    def _build_optimizers(self) -> None:
        keras = _keras()
        if keras is None:
            return
        trainable = [v for obj in self.objects.values() if isinstance(obj, keras.Layer)
                     for v in obj.trainable_variables]
        for obj in self.objects.values():
            if isinstance(obj, keras.optimizers.Optimizer) and not obj.built:
                obj.build(trainable)

    def save(self, step: int):
        """Collective: save now as the checkpoint of `step` (a completed step)."""
        state = {"framework": FRAMEWORK, "shared": _vars.values(self._shared()),
                 "per_rank": _vars.per_rank(_vars.values(self._own()))}
        return saving.save(state, step, framework=FRAMEWORK)
