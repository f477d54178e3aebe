"""Keras 3 integration (torch or TensorFlow backend): WML CE DDL's two callbacks, and more.

Written the way the WML CE tf.keras examples used DDL::

    import ddl                                   # or: import ddl_runtime.keras as ddl
    x_train = np.array_split(x_train, ddl.size())[ddl.rank()]
    model.compile(optimizer=keras.optimizers.Adadelta(learning_rate=1.0 * ddl.size()), ...)
    callbacks = [ddl.DDLCallback(), ..., ddl.DDLGlobalVariablesCallback()]
    model.fit(x_train, y_train, callbacks=callbacks, verbose=1 if ddl.rank() == 0 else 0)

- :class:`DDLCallback` (first in the list): makes the compiled optimizer average gradients over
  all ranks (unless it already does), checks that every rank runs the same number of steps per
  epoch, and replaces the epoch's metrics (``logs``) with their mean over ranks, so History,
  the progress bar and later callbacks see global figures.  On the TensorFlow backend it also
  turns XLA off for the train step when Keras compiled it with ``jit_compile`` (the gradient
  allreduce cannot run inside XLA; one notice line on rank 0).
- :class:`DDLGlobalVariablesCallback` (last in the list): builds the optimizer's variables if
  Keras has not yet (it creates them lazily at the first step) and broadcasts rank 0's weights
  and optimizer variables when training starts, after the other callbacks had their say (a
  checkpoint restored on rank 0 reaches every rank).
- :func:`DistributedOptimizer`: the gradient averaging itself, for use without the callbacks.
- :class:`WalltimeCheckpoint` (ddl_runtime.checkpoint.keras): training that outlives a job's
  walltime; restores at train begin (mid-epoch included), saves and exits 75 at the agreed stop.

Works on whichever backend Keras was loaded with.  When Keras has not been imported yet and
``KERAS_BACKEND`` is unset, importing this module picks ``torch`` (wml's default), or
``tensorflow`` when TensorFlow is already imported and torch is not, or when only TensorFlow
is installed.  On the TensorFlow backend gradients go through ``ddl_runtime.tensorflow``
(inside the traced train step); on torch through the runtime's numpy/torch path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable, Dict, List, Sequence


def _default_backend() -> None:
    if "keras" in sys.modules or os.environ.get("KERAS_BACKEND"):
        return  # Keras already chose (or the user did)
    tf_loaded, torch_loaded = "tensorflow" in sys.modules, "torch" in sys.modules
    if tf_loaded and not torch_loaded:
        backend = "tensorflow"
    elif importlib.util.find_spec("torch") is None and importlib.util.find_spec("tensorflow") is not None:
        backend = "tensorflow"
    else:
        backend = "torch"
    os.environ["KERAS_BACKEND"] = backend


_default_backend()

import numpy as np  # noqa: E402

import keras  # noqa: E402

import ddl_runtime as _ddl  # noqa: E402
from ddl_runtime.collectives.basics import init, is_root, rank, scale_lr, size  # noqa: E402
from ddl_runtime.engine.buffers import SUPPORTED_DTYPES  # noqa: E402
from ddl_runtime.collectives.crossrank import check_consistent as _check_consistent, gather_rows as _gather_rows  # noqa: E402
from ddl_runtime.errors import DDLError, DDLInputError as _InputError, DDLMismatchError as _MismatchError  # noqa: E402
from ddl_runtime.checkpoint.keras import WalltimeCheckpoint  # noqa: E402,F401
from ddl_runtime.core.stats import gradient_reduction  # noqa: E402
from ddl_runtime.state import runtime as _runtime  # noqa: E402

__all__ = [
    "init",
    "rank",
    "size",
    "is_root",
    "scale_lr",
    "DDLCallback",
    "DDLGlobalVariablesCallback",
    "WalltimeCheckpoint",
    "DistributedOptimizer",
    "broadcast_variables",
    "weights_max_divergence",
]

_BACKENDS = ("torch", "tensorflow")


def _backend() -> str:
    backend = keras.backend.backend()
    if backend not in _BACKENDS:
        raise DDLError(
            f"ddl_runtime.keras supports the torch and tensorflow Keras backends, but KERAS_BACKEND is {backend!r}: "
            f"set KERAS_BACKEND=torch or tensorflow before Keras is imported"
        )
    return backend


def _var_name(v: Any, i: int) -> str:
    return str(getattr(v, "path", None) or getattr(v, "name", None) or f"variable[{i}]")


def _describe_var(v: Any) -> str:
    return f"shape {tuple(v.shape)} dtype {v.dtype}"


# --------------------------------------------------------------------------------------------
# broadcasting variables


def broadcast_variables(variables: Sequence[Any], root_rank: int = 0, what: str = "variable") -> None:
    """Assign the root's values to ``variables`` (Keras variables) on every rank.

    Paths, shapes and dtypes are compared across ranks first; a mismatch raises a DDLError
    naming the variable on every rank.  One broadcast per dtype (eager, either backend).
    """
    _backend()
    init()
    variables = list(variables)
    _check_consistent(what, [_var_name(v, i) for i, v in enumerate(variables)],
                      [_describe_var(v) for v in variables])
    if size() == 1 or not variables:
        return
    by_dtype: Dict[str, List[Any]] = {}
    for v in variables:
        by_dtype.setdefault(str(v.dtype), []).append(v)
    for dtype in sorted(by_dtype):
        group = by_dtype[dtype]
        values = [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in group]
        flat = np.concatenate([a.reshape(-1) for a in values]) if values else np.zeros(0)
        if flat.size == 0:
            continue
        _bcast_any(flat, root_rank, f"{what}s of dtype {dtype}")
        offset = 0
        for v, a in zip(group, values):
            v.assign(flat[offset:offset + a.size].reshape(a.shape))
            offset += a.size


def _bcast_any(flat: np.ndarray, root: int, name: str) -> None:
    """Broadcast a 1-D array in place; dtypes the runtime does not reduce (e.g. bool) travel as padded bytes."""
    if flat.dtype.name in SUPPORTED_DTYPES:
        _ddl.bcast(flat, root=root, name=name)
        return
    raw = flat.view(np.uint8)
    padded = np.zeros(-(-raw.size // 8) * 8, dtype=np.uint8)
    padded[:raw.size] = raw
    _ddl.bcast(padded.view(np.int64), root=root, name=name)
    raw[:] = padded[:raw.size]


def weights_max_divergence(model: "keras.Model") -> float:
    """Largest element-wise difference of the model's weights between any two ranks (0.0 = identical)."""
    _backend()
    init()
    weights = list(model.weights)
    _check_consistent("variable", [_var_name(v, i) for i, v in enumerate(weights)],
                      [_describe_var(v) for v in weights])
    if size() == 1 or not weights:
        return 0.0
    flat = np.concatenate([np.asarray(keras.ops.convert_to_numpy(v.value), dtype=np.float64).reshape(-1)
                           for v in weights])
    hi = np.asarray(_ddl.allreduce(flat.copy(), op="max"))
    lo = np.asarray(_ddl.allreduce(flat.copy(), op="min"))
    diff = hi - lo
    return float(diff.max()) if diff.size else 0.0


# --------------------------------------------------------------------------------------------
# gradient averaging


class _DistributedKerasOptimizer:
    """Mixed into the optimizer's own class: ``apply`` averages the gradients first."""

    _ddl_op = "avg"
    _ddl_checked = False

    def apply(self, grads, trainable_variables=None):  # type: ignore[override]
        grads = list(grads)
        if size() > 1 and grads:
            variables = list(trainable_variables) if trainable_variables is not None else list(
                self._trainable_variables)
            grads = _average_gradients(grads, variables, self._ddl_op, check=not self._ddl_checked)
            self._ddl_checked = True
        return super().apply(grads, trainable_variables)  # type: ignore[misc]


def _average_gradients(grads: List[Any], variables: List[Any], op: str, check: bool) -> List[Any]:
    names = [_var_name(v, i) for i, v in enumerate(variables)]
    if len(names) != len(grads):
        raise _InputError(f"DistributedOptimizer: {len(grads)} gradients for {len(names)} variables")
    if _backend() == "tensorflow":
        return _average_gradients_tf(grads, names, op)
    return _average_gradients_torch(grads, variables, names, op, check)


def _average_gradients_tf(grads: List[Any], names: List[str], op: str) -> List[Any]:
    """TensorFlow backend: one fused allreduce_n of the present gradients, inside the traced step.

    No cross-rank check here: this runs while tf.function traces, and a rank may retrace when
    another does not.  The collective's own signature agreement catches ranks whose variables
    (names, shapes, dtypes) or None gradients differ, and names the tensor.
    """
    import tensorflow as tf

    from ddl_runtime.frameworks import tensorflow as ddl_tf

    present = [i for i, g in enumerate(grads) if g is not None]
    dense = [tf.convert_to_tensor(grads[i]) for i in present]
    with gradient_reduction():  # each run of it ends a step in this rank's record (core/stats.py)
        reduced = ddl_tf.allreduce_n(dense, op=op, names=[f"grad:{names[i]}" for i in present])
    out: List[Any] = [None] * len(grads)
    for i, r in zip(present, reduced):
        out[i] = r
    return out


def _average_gradients_torch(grads: List[Any], variables: List[Any], names: List[str], op: str,
                             check: bool) -> List[Any]:
    import torch

    if check:  # once: every rank trains the same variables
        _check_consistent("trainable variable", names, [_describe_var(v) for v in variables])
    given = [None if g is None else g if isinstance(g, torch.Tensor) else torch.as_tensor(np.asarray(g))
             for g in grads]
    first = next((g for g in given if g is not None), None)
    # a missing gradient's zeros and the flags live where the gradients do (one device per call)
    like = first if first is not None else torch.zeros(0)
    tensors: List[torch.Tensor] = []
    present: List[bool] = []
    for g, v in zip(given, variables):
        present.append(g is not None)
        tensors.append(like.new_zeros(tuple(v.shape), dtype=torch.float32) if g is None else g.contiguous())
    dtype = next((t.dtype for t, p in zip(tensors, present) if p), torch.float32)
    flags = like.new_tensor([1.0 if p else 0.0 for p in present], dtype=dtype)
    reduce_torch_gradients(lambda: _ddl.allreduce_n(tensors + [flags], op=op,
                                                    names=[f"grad:{n}" for n in names] + ["grad-flags"]), tensors)
    reduced_flags = flags.to(torch.float64).cpu()  # reduced in place, like the gradients
    if op == "sum":
        reduced_flags = reduced_flags / size()
    averaged: List[Any] = []
    problems = []
    for i, (name, p) in enumerate(zip(names, present)):
        frac = float(reduced_flags[i])
        if frac < 0.5 / size():
            averaged.append(None)  # no rank has it: Keras skips the variable
        elif frac < 1.0 - 0.5 / size():
            problems.append(name)
            averaged.append(None)
        else:
            averaged.append(tensors[i])
    if problems:
        raise _MismatchError(
            f"DistributedOptimizer: gradient is None on some ranks only for variable {problems[0]!r}"
            + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")
            + "; every rank must compute a gradient for the same variables"
        )
    return averaged


def reduce_torch_gradients(reduce: Callable[[], Any], tensors: Sequence[Any]) -> Any:
    """reduce() (a step's gradient reduction on Keras' torch backend, run eagerly every step), its
    bytes reported to this rank's record, which ends a step (core/stats.py; the collectives count
    their own time)."""
    out = reduce()
    _runtime.current().stats.reduced(sum(t.numel() * t.element_size() for t in tensors))
    return out


def _mix_in(obj: Any, mixin: type) -> None:
    """Make ``obj``'s class a subclass of ``mixin`` and of its own class, keeping the class's
    name, module and qualname (so a saved model still records the original optimizer).
    Does nothing when ``obj`` already is a ``mixin``."""
    if isinstance(obj, mixin):
        return
    base = obj.__class__
    cls = type(base.__name__, (mixin, base), {})
    cls.__module__ = base.__module__
    cls.__qualname__ = base.__qualname__
    obj.__class__ = cls


def DistributedOptimizer(optimizer: "keras.optimizers.Optimizer", op: str = "avg") -> "keras.optimizers.Optimizer":
    """Make a Keras optimizer average gradients over all ranks before every update.

    Changes ``optimizer`` in place (its class becomes a subclass of its own class with the same
    name, so saving a model still records the original optimizer) and returns it.
    """
    _backend()
    if op not in ("avg", "sum"):
        raise _InputError(f"DistributedOptimizer: op={op!r}; expected 'avg' or 'sum'")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise _InputError(
            f"DistributedOptimizer: optimizer is a {type(optimizer).__name__}, not a keras.optimizers.Optimizer"
        )
    init()
    _mix_in(optimizer, _DistributedKerasOptimizer)
    optimizer._ddl_op = op
    return optimizer


# --------------------------------------------------------------------------------------------
# callbacks


class StepBoundary:
    """A callback's train batch end is a step's end in this rank's record (core/stats.py).

    Keras compiles its train step, so the batch hooks are what runs in Python every step.  With
    ``steps_per_execution`` > 1 a hook sees several steps at once: the gradient reductions end
    the steps then, as they do in a custom loop.
    """

    def __init__(self) -> None:
        self._stats = None

    def begin(self, model: "keras.Model") -> None:
        if (getattr(model, "steps_per_execution", 1) or 1) == 1:
            self._stats = _runtime.current().stats
            self._stats.claim_steps(self)

    def batch_end(self) -> None:
        if self._stats is not None and self._stats.ends_steps(self):
            self._stats.end_step()

    def end(self) -> None:
        if self._stats is not None:
            self._stats.release_steps(self)
            self._stats = None


class DDLCallback(keras.callbacks.Callback):
    """Keeps ranks in lock step and averages the epoch metrics over ranks.

    Put it first in the callbacks list, so every later callback (History, the progress bar,
    early stopping, checkpointing) sees the averaged metrics.
    """

    def __init__(self, op: str = "avg") -> None:
        super().__init__()
        _backend()
        init()
        self.op = op
        self._steps = StepBoundary()

    def on_train_begin(self, logs=None):
        model = self.model
        if model.optimizer is None:
            raise _InputError("DDLCallback: the model has no optimizer; call model.compile(optimizer=...) first")
        DistributedOptimizer(model.optimizer, op=self.op)
        if _backend() == "tensorflow":
            _prepare_tf_train_step(model)
        self._steps.begin(model)
        params = self.params or {}
        steps, epochs = params.get("steps"), params.get("epochs")
        if size() > 1:
            # A rank with one batch more would wait forever in its extra allreduce: refuse it.
            row = np.array([-1.0 if steps is None else float(steps),
                            -1.0 if epochs is None else float(epochs)], dtype=np.float64)
            table = _gather_rows(row)
            for col, label in ((0, "steps per epoch"), (1, "epochs")):
                values = table[:, col]
                if (values != values[0]).any():
                    per_rank = ", ".join(f"rank {r}: {'unknown' if v < 0 else int(v)}" for r, v in enumerate(values))
                    hint = (": shard the data so that every rank has the same number of batches "
                            "(np.array_split shards can differ by one sample; trim them to the shortest)"
                            if col == 0 else "")
                    raise _MismatchError(f"DDLCallback: ranks run different numbers of {label} ({per_rank}){hint}")

    def _average_logs(self, logs) -> None:
        if logs is None or size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        _check_consistent("metric", keys, ["number"] * len(keys))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        avg = np.asarray(_ddl.allreduce(values, op="sum"), dtype=np.float64) / size()
        for k, v in zip(keys, avg):
            logs[k] = float(v)

    def on_train_batch_end(self, batch, logs=None):
        self._steps.batch_end()

    def on_train_end(self, logs=None):
        self._steps.end()

    def on_epoch_end(self, epoch, logs=None):
        self._average_logs(logs)

    def on_test_end(self, logs=None):
        self._average_logs(logs)


class DDLGlobalVariablesCallback(keras.callbacks.Callback):
    """Starts every rank from the root's weights. Put it last in the callbacks list."""

    def __init__(self, root_rank: int = 0) -> None:
        super().__init__()
        _backend()
        init()
        self.root_rank = root_rank

    def on_train_begin(self, logs=None):
        broadcast_variables(self.model.weights, root_rank=self.root_rank, what="model variable")
        opt = self.model.optimizer
        if opt is not None:
            if not getattr(opt, "built", False):
                # Keras creates optimizer variables lazily at the first step; build them now so
                # that the root's values (e.g. restored from a checkpoint) reach every rank.
                opt.build(self.model.trainable_variables)
            broadcast_variables(opt.variables, root_rank=self.root_rank, what="optimizer variable")


def _prepare_tf_train_step(model: "keras.Model") -> None:
    """TensorFlow backend: the train step must not be XLA-compiled, and DDL errors raised while it
    runs come back as themselves instead of as a tf.errors.OpError carrying their text."""
    import tensorflow as tf

    from ddl_runtime.frameworks import tensorflow as ddl_tf

    # Every rank must train the same variables: checked here, eagerly (not while tracing).
    variables = list(model.trainable_variables)
    _check_consistent("trainable variable", [_var_name(v, i) for i, v in enumerate(variables)],
                      [_describe_var(v) for v in variables])
    if getattr(model, "jit_compile", False):
        model.jit_compile = False
        model.make_train_function(force=True)
        if rank() == 0:
            print("ddl_runtime.keras: turned off XLA (jit_compile) for the train step: the gradient allreduce "
                  "cannot run inside XLA", file=sys.stderr, flush=True)
    fn = model.make_train_function()
    fn = model.train_function if fn is None else fn
    if fn is None or getattr(fn, "_ddl_translates_errors", False):
        return

    def train_function(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError:
            err = ddl_tf.take_error()
            if err is None:
                raise
        raise err

    train_function._ddl_translates_errors = True
    model.train_function = train_function


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float, np.floating, np.integer)):
        return True
    torch = sys.modules.get("torch")
    if (isinstance(v, np.ndarray) or (torch is not None and isinstance(v, torch.Tensor))) and v.ndim == 0:
        return True
    return False
